/*
 * shm_watch: noticing that a zone's file was removed behind our back.
 *
 * A zone file deleted while processes map it (rm, or systemd-logind's
 * RemoveIPC=yes, which deletes a user's files in /dev/shm when its last
 * session ends) lives on for those processes, while one that opens the
 * name afresh creates a new zone: two sets of processes, each sure it
 * holds the only copy of every lock.  shmlock_zone_destroy does not split
 * them (it marks the zone dead before it unlinks it); a plain unlink does.
 *
 * So every call on a zone first looks at the file, at most once per
 * SHMLOCK_WATCH_MS per zone and process, gated by the kernel's coarse
 * monotonic clock (a vDSO read, no system call): an fstat of the fd each
 * mapping keeps.  A file with no link left is marked dead in its header
 * (ZONE_REMOVED), so that every process still mapping it refuses from its
 * next call on, as for a destroyed zone, with SHMLOCK_REMOVED: the split
 * lasts at most SHMLOCK_WATCH_MS past the removal for a process that
 * calls, and a process that does not call acts on nothing.  A zone
 * destroyed meanwhile stays "destroyed".
 *
 * The fd may be lost: a program that closes every fd (closefrom after a
 * fork) closes it too, and the number may then name another file.  The
 * check then opens the path the zone was opened by: the very file again
 * is adopted; anything else (no file, another file) and this process can
 * no longer tell that its name reaches its zone: it refuses (lost),
 * alone, as the others may still see their file.
 */

#ifndef SHM_WATCH_H
#define SHM_WATCH_H

#include "shmlock.h"
#include "sys.h"
#include "zone.h"

/* The status of a zone marked dead: destroyed or removed. */
int shm_watch_dead_status(shmlock_zone_t *z);
/* The check itself, if due by the coarse clock or now_ms: SHMLOCK_OK or
 * the refusal. */
int shm_watch_check(shmlock_zone_t *z, int64_t now_ms);

/*
 * SHMLOCK_OK while the zone lives, given a reading of the monotonic clock
 * in ms (the coarse one, or a finer one the caller reads anyway: the
 * check then runs up to a tick early, never late; or the ABI caller's own
 * reading, nginx's cached time: the check then runs late by as much as
 * that reading lags, the time the worker ran since its event loop last
 * turned): one load of the dead word and a compare, but once per
 * SHMLOCK_WATCH_MS.
 */
static inline int
shm_watch_at(shmlock_zone_t *z, int64_t now_ms)
{
    if (__builtin_expect(
            __atomic_load_n(&z->hdr->dead, __ATOMIC_ACQUIRE) == 0
            && now_ms < __atomic_load_n(&z->watch_at, __ATOMIC_RELAXED), 1))
    {
        return SHMLOCK_OK;
    }
    return shm_watch_check(z, now_ms);
}

/*
 * shm_watch_at for a call that needs the fine clock anyway (an expiry to
 * compute): *now_ms, read here when the caller gave none (<= 0), is the
 * one reading that gates the watch too.
 */
static inline int
shm_watch_now(shmlock_zone_t *z, int64_t *now_ms)
{
    if (*now_ms <= 0) {
        *now_ms = sys_now_ms();
    }
    return shm_watch_at(z, *now_ms);
}

/* shm_watch_at with the coarse clock (a vDSO read, no system call). */
static inline int
shm_watch(shmlock_zone_t *z)
{
    return shm_watch_at(z, sys_coarse_ms());
}

#endif /* SHM_WATCH_H */
