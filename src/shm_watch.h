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
 * A removal followed at once by a new file under the name is not left to
 * that bound: the process that makes the new file first marks dead every
 * removed one a process still maps (shm_removed.h).  A call may have read
 * the dead word before that mark and act after it, so each call that
 * takes, releases or changes anything reads the word again after its step
 * (its CAS, or the shard mutex released): shm_watch_after.  The mark is
 * stored before the new file is published, and our step before our read,
 * each followed by a full barrier (a locked instruction; the creator's
 * system calls); so a word still 0 after our step means the step came
 * before the new file existed, and no process of the new file can have
 * held the key meanwhile.  A word set means the answer may be wrong: the
 * call answers the dead status instead (an acquisition gives its key
 * back first).  That is one load, no system call.
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

/*
 * The clock's half of shm_watch_at alone, for the lock pair's fast paths,
 * which read the dead word after their CAS (shm_watch_after) instead of
 * before it: a call on a dead zone then makes its step and undoes it.
 */
static inline int
shm_watch_gate(shmlock_zone_t *z, int64_t now_ms)
{
    if (__builtin_expect(
            now_ms < __atomic_load_n(&z->watch_at, __ATOMIC_RELAXED), 1))
    {
        return SHMLOCK_OK;
    }
    return shm_watch_check(z, now_ms);
}

/*
 * After a call's step in the zone (a slot's CAS, a shard's mutex
 * released; both full barriers): rc while the zone lives, else its dead
 * status (see above).  The load is sequentially consistent: it is not
 * done before the step.
 */
static inline int
shm_watch_after(shmlock_zone_t *z, int rc)
{
    if (__builtin_expect(
            __atomic_load_n(&z->hdr->dead, __ATOMIC_SEQ_CST) != 0, 0))
    {
        return shm_watch_dead_status(z);
    }
    return rc;
}

/* shm_watch_at with the coarse clock (a vDSO read, no system call). */
static inline int
shm_watch(shmlock_zone_t *z)
{
    return shm_watch_at(z, sys_coarse_ms());
}

#endif /* SHM_WATCH_H */
