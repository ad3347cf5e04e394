/*
 * shmtx: an interprocess mutex in a shared-memory word, in the tradition of
 * nginx's ngx_shmtx: the word holds the owner's pid (0 = free), taken with a
 * CAS; waiters spin with PAUSE in doubling rounds, then sched_yield, then
 * sleep on the word with a shared futex.  A waiter that finds the owner
 * dead takes the word over; the caller then repairs the data (see journal.h).
 */

#ifndef SHMTX_H
#define SHMTX_H

#include <stdint.h>

typedef struct {
    uint32_t  lock;       /* owner pid, 0 when free */
    uint32_t  waiters;    /* processes asleep (or about to be) in futex */
    uint32_t  takeovers;  /* times a dead owner's lock was taken over */
    uint32_t  pad[13];    /* own cache line */
} shmtx_t;

void shmtx_init(shmtx_t *mtx);
int shmtx_trylock(shmtx_t *mtx, uint32_t pid);
void shmtx_lock(shmtx_t *mtx, uint32_t pid);
void shmtx_unlock(shmtx_t *mtx, uint32_t pid);

#endif /* SHMTX_H */
