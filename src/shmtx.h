/*
 * shmtx: an interprocess mutex in a shared-memory word, in the tradition of
 * nginx's ngx_shmtx: the word holds the owner's pid (0 = free), taken with a
 * CAS; waiters spin with PAUSE in doubling rounds, then sched_yield, then
 * sleep on the word with a shared futex.  A waiter that finds the owner
 * dead takes the word over, and the caller then repairs the data.
 */

#ifndef SHMTX_H
#define SHMTX_H

#include <stdint.h>

typedef struct {
    uint32_t  lock;       /* owner pid, 0 when free */
    uint32_t  waiters;    /* processes asleep (or about to be) in futex */
    uint32_t  takeovers;  /* times a dead owner's lock was taken over */
} shmtx_t;

void shmtx_init(shmtx_t *mtx);
int shmtx_lock_slow(shmtx_t *mtx, uint32_t pid);
void shmtx_wake(shmtx_t *mtx);

static inline int
shmtx_trylock(shmtx_t *mtx, uint32_t pid)
{
    uint32_t  free = 0;

    /* a plain load first keeps the cache line shared while it is held */
    return __atomic_load_n(&mtx->lock, __ATOMIC_RELAXED) == 0
           && __atomic_compare_exchange_n(&mtx->lock, &free, pid, 0,
                                          __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

/* Returns 1 when the mutex was taken over from a dead owner. */
static inline int
shmtx_lock(shmtx_t *mtx, uint32_t pid)
{
    if (__builtin_expect(shmtx_trylock(mtx, pid), 1)) {
        return 0;
    }
    return shmtx_lock_slow(mtx, pid);
}

/*
 * Dekker with the sleepers: the word is released with a full barrier before
 * the sleeper count is read, and a sleeper counts itself before the kernel
 * re-reads the word, so either we see it counted or it sees the word free.
 */
static inline void
shmtx_unlock(shmtx_t *mtx, uint32_t pid)
{
    uint32_t  expected = pid;

    if (__atomic_compare_exchange_n(&mtx->lock, &expected, 0, 0,
                                    __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)
        && __atomic_load_n(&mtx->waiters, __ATOMIC_SEQ_CST) != 0)
    {
        shmtx_wake(mtx);
    }
}

#endif /* SHMTX_H */
