/*
 * The semaphore's steps outside nginx (shmlock_sem_*, shmlock.h): a try
 * for a permit of a key (a record of the key's holder group of kind
 * SHMLOCK_SEMAPHORE, group.h, when fewer than the caller's permits are
 * held), and the whole wait in one call, on a lock object's record
 * (shmlock_lock_t: its zone, the permit's ticket, the owner id).
 *
 * The wait sleeps on the key's wait word (a release wakes a sleeper at
 * once), at most a step at a time (resty.lock's steps), and drops the
 * dead holders and expired leases (shmlock_group_reclaim) after every
 * sleep no release cut short.  A waiter that leaves without a permit
 * passes a wake-up it may have taken on.  Inside nginx the semaphore
 * waits in resty.shmlock.lock.wait's queue instead, where the oldest
 * queued waiter's turn (a mark on the key's head) keeps the others out.
 */

#include "shmlock.h"
#include "sys.h"
#include "token.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define SEM_MIN_SLEEP  0.001

int
shmlock_sem_retry(shmlock_lock_t *l, const char *key, size_t key_len,
    uint32_t permits, int64_t exptime_ms)
{
    int  rc = shmlock_group_acquire(l->zone, SHMLOCK_SEMAPHORE, key, key_len,
                                    l->id, permits, exptime_ms, &l->tk);

    l->held = rc == SHMLOCK_OK;
    return rc;
}

int
shmlock_sem_acquire(shmlock_lock_t *l, const char *key, size_t key_len,
    uint32_t permits, int64_t exptime_ms)
{
    l->pid = (int32_t) sys_pid();
    l->id = token_next_id((uint32_t) l->pid);
    l->marked = 0;
    l->waited = 0;
    return shmlock_sem_retry(l, key, key_len, permits, exptime_ms);
}

int
shmlock_sem_here(shmlock_zone_t *zone, const char *key, size_t key_len,
    uint32_t permits)
{
    shmlock_ticket_t   batch[64], *out = batch;
    uint32_t           me = sys_pid(), count;
    int                max = 64, n, i, rc, here;

    /* every live holder of key is this process, and they fill the
     * permits: a worker blocked where the phase cannot yield would wait
     * for itself.  One look decides (the listing, after the dead and
     * expired are dropped): a count then a listing would be two, and a
     * holder of another process releasing in between would leave only
     * ours listed with a permit free. */
    if (shmlock_group_reclaim(zone, SHMLOCK_SEMAPHORE, key, key_len, &count)
        != SHMLOCK_OK || count < permits)
    {
        return 0;
    }
    for ( ;; ) {
        rc = shmlock_group_holders(zone, SHMLOCK_SEMAPHORE, key, key_len, out,
                                   max, &n);
        if (rc != SHMLOCK_AGAIN || max >= SHMLOCK_GROUP_MAX) {
            break;
        }
        if (out != batch) {
            free(out);
        }
        max = n + 16 < SHMLOCK_GROUP_MAX ? n + 16 : SHMLOCK_GROUP_MAX;
        out = malloc(sizeof(*out) * (size_t) max);
        if (out == NULL) {
            return 0;
        }
    }
    here = rc == SHMLOCK_OK && n > 0 && (uint32_t) n >= permits;
    for (i = 0; here && i < n; i++) {
        here = (uint32_t) (out[i].owner >> 32) == me;
    }
    if (out != batch) {
        free(out);
    }
    return here;
}

int
shmlock_sem_wait(shmlock_lock_t *l, const char *key, size_t key_len,
    uint32_t permits, const shmlock_wait_t *w, int64_t *elapsed_us)
{
    uint32_t  hash = shmlock_hash(key, key_len), seq, count;
    int64_t   start = w->start_us, deadline, left, us;
    double    step = w->step, s;
    int       rc, stopped;

    if (start <= 0) {
        start = shmlock_now_us();
    }
    deadline = start + w->timeout_us;
    *elapsed_us = 0;
    for ( ;; ) {
        seq = shmlock_wait_begin(l->zone, hash);
        rc = shmlock_sem_retry(l, key, key_len, permits, w->exptime_ms);
        if (rc != SHMLOCK_EXISTS) {
            shmlock_wait_end(l->zone, hash, seq, 0);
            if (rc == SHMLOCK_OK) {
                *elapsed_us = shmlock_now_us() - start;
            }
            return rc;
        }
        left = deadline - shmlock_now_us();
        stopped = left > 0 && (w->flags & SHMLOCK_LOOK_HERE)
                  && shmlock_sem_here(l->zone, key, key_len, permits);
        if (left <= 0 || stopped) {
            shmlock_wait_end(l->zone, hash, seq, 0);
            /* a wake-up we may have taken, passed on */
            shmlock_wake_waiters(l->zone, hash, 0);
            return stopped ? SHMLOCK_BUSY : SHMLOCK_TIMEOUT;
        }
        us = sys_seconds_us(step);
        if (us > left) {
            us = left;
        }
        if (us < 1) {
            us = 1;
        }
        if (shmlock_wait_end(l->zone, hash, seq, us) == SHMLOCK_TIMEOUT) {
            /* nobody released: a holder may have died */
            shmlock_group_reclaim(l->zone, SHMLOCK_SEMAPHORE, key, key_len,
                                  &count);
            s = step * w->ratio;
            step = s > w->max_step ? w->max_step : s;
            if (step < SEM_MIN_SLEEP) {
                step = SEM_MIN_SLEEP;
            }
        }
    }
}
