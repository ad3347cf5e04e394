#define _GNU_SOURCE
#include "shmtx.h"
#include "sys.h"

#include <sched.h>

#define SHMTX_SPIN_MAX     2048   /* pauses in the longest spin round */
#define SHMTX_YIELDS       4
#define SHMTX_SLEEP_US     5000   /* a sleeper re-checks the owner this often */

void
shmtx_init(shmtx_t *mtx)
{
    __atomic_store_n(&mtx->lock, 0, __ATOMIC_RELEASE);
    mtx->waiters = 0;
    mtx->takeovers = 0;
}

/*
 * The owner is only suspected dead once the same pid has held the word
 * across a whole sleep: a live holder keeps the mutex for a microsecond, so
 * the liveness probe (kill + /proc) stays off every normal path.
 */
static int
shmtx_take_over(shmtx_t *mtx, uint32_t owner, uint32_t pid)
{
    if (sys_pid_alive(owner)) {
        return 0;
    }
    if (__atomic_compare_exchange_n(&mtx->lock, &owner, pid, 0,
                                    __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
    {
        __atomic_add_fetch(&mtx->takeovers, 1, __ATOMIC_RELAXED);
        return 1;
    }
    return 0;
}

int
shmtx_lock_slow(shmtx_t *mtx, uint32_t pid)
{
    uint32_t  owner, suspect = 0;
    int       n, i;

    for ( ;; ) {
        if (shmtx_trylock(mtx, pid)) {
            return 0;
        }

        if (sys_ncpu() > 1) {
            for (n = 1; n < SHMTX_SPIN_MAX; n <<= 1) {
                for (i = 0; i < n; i++) {
                    sys_cpu_pause();
                }
                if (shmtx_trylock(mtx, pid)) {
                    return 0;
                }
            }
        }

        for (i = 0; i < SHMTX_YIELDS; i++) {
            sched_yield();
            if (shmtx_trylock(mtx, pid)) {
                return 0;
            }
        }

        owner = __atomic_load_n(&mtx->lock, __ATOMIC_RELAXED);
        if (owner == 0) {
            continue;
        }
        if (owner == suspect && shmtx_take_over(mtx, owner, pid)) {
            return 1;
        }
        suspect = owner;

        /* counted before the kernel re-reads the word: see shmtx_unlock */
        __atomic_add_fetch(&mtx->waiters, 1, __ATOMIC_SEQ_CST);
        sys_futex_wait(&mtx->lock, owner, SHMTX_SLEEP_US);
        __atomic_sub_fetch(&mtx->waiters, 1, __ATOMIC_SEQ_CST);
    }
}

void
shmtx_wake(shmtx_t *mtx)
{
    sys_futex_wake(&mtx->lock, 1);
}
