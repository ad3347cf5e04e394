#define _GNU_SOURCE
#include "shmtx.h"
#include "sys.h"

#include <sched.h>

#define SHMTX_SPIN_MAX     2048   /* pauses in the longest spin round */
#define SHMTX_YIELDS       4
#define SHMTX_SLEEP_US     5000   /* a sleeper re-checks the owner this often */

/*
 * The futex sleeps on the owner's pid half of the word (futexes are 32
 * bits): it changes whenever the word is released or changes hands, but
 * for a takeover by a process reusing the dead owner's pid, which the
 * sleeper's timeout covers.
 */
static inline uint32_t *
shmtx_futex_word(shmtx_t *mtx)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return (uint32_t *) &mtx->owner;
#else
    return (uint32_t *) &mtx->owner + 1;
#endif
}

void
shmtx_init(shmtx_t *mtx)
{
    __atomic_store_n(&mtx->owner, 0, __ATOMIC_RELEASE);
    mtx->waiters = 0;
    mtx->takeovers = 0;
}

/*
 * The owner is only suspected dead once the same identity has held the
 * word across a whole sleep: a live holder keeps the mutex for a
 * microsecond, so the liveness probe (kill + /proc) stays off every normal
 * path.
 */
static int
shmtx_take_over(shmtx_t *mtx, uint64_t owner, uint64_t self)
{
    if (sys_proc_alive((uint32_t) owner, owner >> 32, 0xffffffffu)) {
        return 0;
    }
    if (__atomic_compare_exchange_n(&mtx->owner, &owner, self, 0,
                                    __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
    {
        __atomic_add_fetch(&mtx->takeovers, 1, __ATOMIC_RELAXED);
        return 1;
    }
    return 0;
}

/* Returns how it got the mutex: SHMTX_* flags (see shmtx.h). */
int
shmtx_lock_slow(shmtx_t *mtx, uint64_t self)
{
    uint64_t  owner, suspect = 0;
    int       n, i, how = 0;

    for ( ;; ) {
        if (shmtx_trylock(mtx, self)) {
            return how;
        }
        how |= SHMTX_SPUN;

        if (sys_ncpu() > 1) {
            for (n = 1; n < SHMTX_SPIN_MAX; n <<= 1) {
                for (i = 0; i < n; i++) {
                    sys_cpu_pause();
                }
                if (shmtx_trylock(mtx, self)) {
                    return how;
                }
            }
        }

        for (i = 0; i < SHMTX_YIELDS; i++) {
            sched_yield();
            if (shmtx_trylock(mtx, self)) {
                return how;
            }
        }

        owner = __atomic_load_n(&mtx->owner, __ATOMIC_RELAXED);
        if (owner == 0) {
            continue;
        }
        if (owner == suspect && shmtx_take_over(mtx, owner, self)) {
            return how | SHMTX_TOOK_OVER;
        }
        suspect = owner;

        /* counted before the kernel re-reads the word: see shmtx_unlock */
        __atomic_add_fetch(&mtx->waiters, 1, __ATOMIC_SEQ_CST);
        sys_futex_wait(shmtx_futex_word(mtx), (uint32_t) owner,
                       SHMTX_SLEEP_US);
        __atomic_sub_fetch(&mtx->waiters, 1, __ATOMIC_SEQ_CST);
        how |= SHMTX_SLEPT;
    }
}

void
shmtx_wake(shmtx_t *mtx)
{
    sys_futex_wake(shmtx_futex_word(mtx), 1);
}
