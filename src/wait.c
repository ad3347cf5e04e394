/*
 * Per-key wake-up words (see shmlock.h).  The sleeper count lets a release
 * skip the futex system call when nobody waits, which is the common case.
 */

#include "wait.h"

#include <errno.h>

uint32_t
shmlock_wait_begin(shmlock_zone_t *zone, uint32_t hash)
{
    uint32_t  s = wait_slot(hash);

    __atomic_add_fetch(&zone->wait_sleepers[s], 1, __ATOMIC_SEQ_CST);
    return __atomic_load_n(&zone->wait_seq[s], __ATOMIC_SEQ_CST);
}

int
shmlock_wait_end(shmlock_zone_t *zone, uint32_t hash, uint32_t seq,
    int64_t timeout_us)
{
    uint32_t  s = wait_slot(hash);
    int       rc = 0;

    if (timeout_us > 0) {
        rc = sys_futex_wait(&zone->wait_seq[s], seq, timeout_us);
    }
    __atomic_sub_fetch(&zone->wait_sleepers[s], 1, __ATOMIC_SEQ_CST);
    return rc == ETIMEDOUT ? SHMLOCK_TIMEOUT : SHMLOCK_OK;
}

void
shmlock_wake_waiters(shmlock_zone_t *zone, uint32_t hash)
{
    wait_wake_counted(zone, hash);
}
