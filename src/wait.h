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
 * A word's sleeper count is its low 15 bits; the high 16 bits tag the
 * key its sleepers wait for (16 bits of the key's hash, never 0), or
 * WAIT_MIXED once sleepers of two keys share the word.  A release wakes
 * one sleeper of its key, not the herd: with one key's sleepers on the
 * word any of them may take the key.  Keys whose hashes share the word
 * and its tag (2^-26 for two keys) count as one: a sleeper woken for the
 * other key sleeps again, and waits one of its bounded steps.
 *
 * WAIT_WOKEN (bit 15): a release woke a sleeper that has not come back
 * from its sleep yet.  The next releases wake nobody meanwhile: that
 * sleeper looks at the key after them (it clears the bit before it
 * looks), and only one can take the key.  Without it, each release of a
 * busy key woke one more sleeper, which queued for a CPU behind the
 * running processes, found the key taken again and slept again: a
 * futex_wake per release, and a run queue of waiters.  Any waiter back
 * from a sleep clears the bit (or one that saw the word's sequence move),
 * so a woken sleeper killed before it looked costs the others one sleep
 * step, not every wake-up after.
 */
#define WAIT_COUNT_MASK  0x7fffu
#define WAIT_WOKEN       0x8000u
#define WAIT_MIXED       0xffffu

/* what wait_wake wakes */
#define WAIT_ONE         0      /* one sleeper: a release */
#define WAIT_ALL         1      /* every sleeper: a handoff */

#ifdef SHMLOCK_TESTING
/* the test build counts the sleepers each release's wake-up woke
 * (shmlock_test_hooks.c, shmlock_test_wakes) */
void wait_test_woken(uint32_t n);
#endif

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
        if ((w & WAIT_COUNT_MASK) == 0) {
            n = tag << 16 | 1;          /* (a stray WAIT_WOKEN dropped) */
        } else {
            n = (t == tag ? t : WAIT_MIXED) << 16 | (w & WAIT_WOKEN)
                | (((w & WAIT_COUNT_MASK) + 1) & WAIT_COUNT_MASK);
        }
    } while (!__atomic_compare_exchange_n(&zone->wait_sleepers[s], &w, n, 0,
                                          __ATOMIC_SEQ_CST,
                                          __ATOMIC_RELAXED));
    return __atomic_load_n(&zone->wait_seq[s], __ATOMIC_SEQ_CST);
}

static inline int
wait_end(struct shmlock_zone_s *zone, uint32_t hash, uint32_t seq,
    int64_t timeout_us)
{
    uint32_t  s = wait_slot(hash), w, n, woke;
    int       rc = 0;

    if (timeout_us > 0) {
        rc = sys_futex_wait(&zone->wait_seq[s], seq, timeout_us);
    }
    /* back from a sleep, or the sequence moved: a wake-up seen, WAIT_WOKEN
     * cleared (see above; we look again or hold the key) */
    woke = timeout_us > 0
           || __atomic_load_n(&zone->wait_seq[s], __ATOMIC_SEQ_CST) != seq;
    /* the last sleeper out clears the tag */
    w = __atomic_load_n(&zone->wait_sleepers[s], __ATOMIC_RELAXED);
    do {
        n = (w & WAIT_COUNT_MASK) <= 1 ? 0 : w - 1;
        if (woke) {
            n &= ~WAIT_WOKEN;
        }
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
 * nobody waits.  WAIT_ONE: one sleeper (a release: the key can go to one
 * only), and none while one woken earlier has not come back (WAIT_WOKEN);
 * but every sleeper when sleepers of other keys share the word.
 * WAIT_ALL: every sleeper (a handoff, which must reach the one waiter it
 * was for).  The load is sequentially consistent, after the release (a
 * seq_cst CAS or unlock of the shard's mutex) it must not be moved
 * before.
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
    if (!all && (w >> 16) == wait_tag(hash)) {
        /* one of our key's: unless one is on its way already */
        if ((w & WAIT_WOKEN)
            || (__atomic_fetch_or(&zone->wait_sleepers[s], WAIT_WOKEN,
                                  __ATOMIC_SEQ_CST) & WAIT_WOKEN))
        {
#ifdef SHMLOCK_TESTING
            wait_test_woken(0);
#endif
            return 0;
        }
    } else {
        all = 1;
    }
    __atomic_add_fetch(&zone->wait_seq[s], 1, __ATOMIC_SEQ_CST);
    w = (uint32_t) sys_futex_wake(&zone->wait_seq[s], all ? 0x7fffffff : 1);
#ifdef SHMLOCK_TESTING
    if (!all) {
        wait_test_woken(w);
    }
#endif
    return (int) w;
}

#endif /* WAIT_H */
