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

/*
 * A word's sleeper count is its low 16 bits; the high 16 bits tag the
 * key its sleepers wait for (16 bits of the key's hash, never 0), or
 * WAIT_MIXED once sleepers of two keys share the word.  A release wakes
 * one sleeper of its key, not the herd: with one key's sleepers on the
 * word any of them may take the key.  Keys whose hashes share the word
 * and its tag (2^-26 for two keys) count as one: a sleeper woken for the
 * other key sleeps again, and waits one of its bounded steps.
 */
#define WAIT_COUNT_MASK  0xffffu

#ifdef SHMLOCK_TESTING
/* the test build counts the sleepers each release's wake-up woke
 * (shmlock_test_hooks.c, shmlock_test_wakes) */
void wait_test_woken(uint32_t n);
#endif
#define WAIT_MIXED       0xffffu

static inline uint32_t
wait_slot(uint32_t hash)
{
    return hash & (ZONE_WAIT_WORDS - 1);
}

static inline uint32_t
wait_tag(uint32_t hash)
{
    return (hash >> 16) % (WAIT_MIXED - 1) + 1;    /* 1 .. WAIT_MIXED - 1 */
}

/* Counted as a sleeper first: a waker that misses the count has already
 * bumped the word, and the wait returns at once. */
static inline uint32_t
wait_begin(struct shmlock_zone_s *zone, uint32_t hash)
{
    uint32_t  s = wait_slot(hash), tag = wait_tag(hash), w, n, t;

    w = __atomic_load_n(&zone->wait_sleepers[s], __ATOMIC_RELAXED);
    do {
        t = w >> 16;
        n = (w & WAIT_COUNT_MASK) == 0 ? tag : (t == tag ? t : WAIT_MIXED);
        n = n << 16 | (((w & WAIT_COUNT_MASK) + 1) & WAIT_COUNT_MASK);
    } while (!__atomic_compare_exchange_n(&zone->wait_sleepers[s], &w, n, 0,
                                          __ATOMIC_SEQ_CST,
                                          __ATOMIC_RELAXED));
    return __atomic_load_n(&zone->wait_seq[s], __ATOMIC_SEQ_CST);
}

static inline int
wait_end(struct shmlock_zone_s *zone, uint32_t hash, uint32_t seq,
    int64_t timeout_us)
{
    uint32_t  s = wait_slot(hash), w, n;
    int       rc = 0;

    if (timeout_us > 0) {
        rc = sys_futex_wait(&zone->wait_seq[s], seq, timeout_us);
    }
    /* the last sleeper out clears the tag */
    w = __atomic_load_n(&zone->wait_sleepers[s], __ATOMIC_RELAXED);
    do {
        n = (w & WAIT_COUNT_MASK) <= 1 ? 0 : w - 1;
    } while (!__atomic_compare_exchange_n(&zone->wait_sleepers[s], &w, n, 0,
                                          __ATOMIC_SEQ_CST,
                                          __ATOMIC_RELAXED));
    return rc == ETIMEDOUT ? SHMLOCK_TIMEOUT : SHMLOCK_OK;
}

/* How many waiters are counted on the key's word now (a snapshot; keys
 * whose hashes share the word count together).  Read-only. */
static inline uint32_t
wait_count(struct shmlock_zone_s *zone, uint32_t hash)
{
    return __atomic_load_n(&zone->wait_sleepers[wait_slot(hash)],
                           __ATOMIC_RELAXED) & WAIT_COUNT_MASK;
}

/*
 * Wakes sleepers on the key's word, if any is counted: one load when
 * nobody waits.  all = 0: one sleeper (a release: the key can go to one
 * only), unless sleepers of other keys share the word; else every
 * sleeper (a handoff, which must reach the one waiter it was for).  The
 * load is sequentially consistent, after the release (a seq_cst CAS or
 * unlock of the shard's mutex) it must not be moved before.
 */
/* Whether wait_wake(zone, hash, ...) would wake anyone now: its first load
 * (sequentially consistent, as there), for a fast path that calls it only
 * then. */
static inline int
wait_sleeping(struct shmlock_zone_s *zone, uint32_t hash)
{
    return (__atomic_load_n(&zone->wait_sleepers[wait_slot(hash)],
                            __ATOMIC_SEQ_CST) & WAIT_COUNT_MASK) != 0;
}

static inline int
wait_wake(struct shmlock_zone_s *zone, uint32_t hash, int all)
{
    uint32_t  s = wait_slot(hash), w;

    w = __atomic_load_n(&zone->wait_sleepers[s], __ATOMIC_SEQ_CST);
    if ((w & WAIT_COUNT_MASK) == 0) {
        return 0;
    }
    __atomic_add_fetch(&zone->wait_seq[s], 1, __ATOMIC_SEQ_CST);
    w = (uint32_t) sys_futex_wake(&zone->wait_seq[s],
                                  all || (w >> 16) != wait_tag(hash)
                                  ? 0x7fffffff : 1);
#ifdef SHMLOCK_TESTING
    if (!all) {
        wait_test_woken(w);
    }
#endif
    return (int) w;
}

#endif /* WAIT_H */
