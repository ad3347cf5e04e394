/*
 * wait: the per-key wake-up words of a zone (see shmlock.h): a fixed
 * array of sequence words indexed by key hash, each with a count of its
 * sleepers, which lets a release skip the futex system call when nobody
 * waits, the common case.
 */

#ifndef WAIT_H
#define WAIT_H

#include <errno.h>

#include "shmlock.h"
#include "sys.h"
#include "zone.h"

static inline uint32_t
wait_slot(uint32_t hash)
{
    return hash & (ZONE_WAIT_WORDS - 1);
}

/* Counted as a sleeper first: a waker that misses the count has already
 * bumped the word, and the wait returns at once. */
static inline uint32_t
wait_begin(struct shmlock_zone_s *zone, uint32_t hash)
{
    uint32_t  s = wait_slot(hash);

    __atomic_add_fetch(&zone->wait_sleepers[s], 1, __ATOMIC_SEQ_CST);
    return __atomic_load_n(&zone->wait_seq[s], __ATOMIC_SEQ_CST);
}

static inline int
wait_end(struct shmlock_zone_s *zone, uint32_t hash, uint32_t seq,
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

/* How many waiters are counted on the key's word now (a snapshot; keys
 * whose hashes share the word count together).  Read-only. */
static inline uint32_t
wait_count(struct shmlock_zone_s *zone, uint32_t hash)
{
    return __atomic_load_n(&zone->wait_sleepers[wait_slot(hash)],
                           __ATOMIC_RELAXED);
}

/*
 * Wakes the sleepers on the key's word, if any is counted: one load when
 * nobody waits.  The load is sequentially consistent, after the release
 * (a seq_cst unlock of the shard's mutex) it must not be moved before.
 */
static inline void
wait_wake(struct shmlock_zone_s *zone, uint32_t hash)
{
    uint32_t  s = wait_slot(hash);

    if (__atomic_load_n(&zone->wait_sleepers[s], __ATOMIC_SEQ_CST) != 0) {
        __atomic_add_fetch(&zone->wait_seq[s], 1, __ATOMIC_SEQ_CST);
        sys_futex_wake(&zone->wait_seq[s], 0x7fffffff);
    }
}

#endif /* WAIT_H */
