/*
 * shmtx: an interprocess mutex in a shared-memory word, in the tradition of
 * nginx's ngx_shmtx: the word holds the owner's identity (0 = free), taken
 * with a CAS; waiters spin with PAUSE in doubling rounds, then sched_yield,
 * then sleep on the word with a shared futex.  A waiter that finds the
 * owner dead takes the word over, and the caller then repairs the data.
 *
 * The identity is sys_self(): pid and start time.  A bare pid would be
 * fooled by pid reuse: a holder SIGKILLed inside the mutex leaves its pid
 * in the word, and an unrelated process that later gets that pid would
 * look like a live holder for as long as it lives.  The takeover is a CAS
 * from the very identity found dead, so it cannot take a word that changed
 * hands in between.
 */

#ifndef SHMTX_H
#define SHMTX_H

#include <stdint.h>

typedef struct {
    uint64_t  owner;      /* sys_self() of the owner, 0 when free */
    uint32_t  waiters;    /* processes asleep (or about to be) in futex */
    uint32_t  takeovers;  /* times a dead owner's lock was taken over */
} shmtx_t;

/*
 * How a lock got the mutex, as bit flags: 0 when the first try took it.
 * The caller counts them (the shard's counters, shard_lock.h) and repairs
 * the data after a takeover.
 */
#define SHMTX_SPUN       0x1    /* waited: spun or yielded */
#define SHMTX_SLEPT      0x2    /* waited on the futex at least once */
#define SHMTX_TOOK_OVER  0x4    /* taken over from a dead owner */

void shmtx_init(shmtx_t *mtx);
int shmtx_lock_slow(shmtx_t *mtx, uint64_t self);
void shmtx_wake(shmtx_t *mtx);

static inline int
shmtx_trylock(shmtx_t *mtx, uint64_t self)
{
    uint64_t  free = 0;

    /* a plain load first keeps the cache line shared while it is held */
    return __atomic_load_n(&mtx->owner, __ATOMIC_RELAXED) == 0
           && __atomic_compare_exchange_n(&mtx->owner, &free, self, 0,
                                          __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

/* Returns how the mutex was got: 0 at once, else SHMTX_* flags
 * (SHMTX_TOOK_OVER: from a dead owner). */
static inline int
shmtx_lock(shmtx_t *mtx, uint64_t self)
{
    if (__builtin_expect(shmtx_trylock(mtx, self), 1)) {
        return 0;
    }
    return shmtx_lock_slow(mtx, self);
}

/*
 * Dekker with the sleepers: the word is released with a full barrier before
 * the sleeper count is read, and a sleeper counts itself before the kernel
 * re-reads the word, so either we see it counted or it sees the word free.
 */
static inline void
shmtx_unlock(shmtx_t *mtx, uint64_t self)
{
    uint64_t  expected = self;

    if (__atomic_compare_exchange_n(&mtx->owner, &expected, 0, 0,
                                    __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)
        && __atomic_load_n(&mtx->waiters, __ATOMIC_SEQ_CST) != 0)
    {
        shmtx_wake(mtx);
    }
}

#endif /* SHMTX_H */
