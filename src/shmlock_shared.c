/*
 * Shared holds (shmlock_shared_*, shmlock.h): a lock's shared (reader)
 * holds, the holder groups of kind SHMLOCK_SHARED (group.h: a record
 * slot per reader, counted by a head that is the key's own lock slot, so
 * that the exclusive lock and the readers each find the other held),
 * each step a lock object takes one call on its record (shmlock_lock_t,
 * as the exclusive lock's; the key given with each call, which a group
 * needs).
 *
 * Readers never mark: an exclusive waiter's mark keeps new readers out
 * (the group refuses them), and the last reader out hands the key to it;
 * a stream of writers may keep a reader waiting to its timeout, never the
 * other way round.  A writer that marked the key and then died (or,
 * inside nginx, was aborted, or gave up without withdrawing) would keep
 * readers out until its deadline: a reader's look that checks clears
 * such a mark, as a release or another writer would.
 *
 * Waking: outside nginx a reader sleeps on the key's wait word, as the
 * exclusive lock's waiters do; an exclusive release wakes one, a reader
 * that gets in wakes the next (shmlock_group_acquire); a reader's release
 * wakes one sleeper of the key (every one after a handoff) and the marked
 * word, where a marked writer sleeps.  A sleep no release cut short is
 * followed by a look that drops dead holders.
 */

#include "shmlock.h"
#include "sys.h"
#include "token.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define SHARED_CHECK_EVERY_US  100000
#define SHARED_MIN_SLEEP       0.001
#define SHARED_MARKED_SALT     0x5bd1e995u      /* shmlock_lock.c's */

static inline uint32_t
shared_marked_hash(uint32_t hash)
{
    return hash ^ SHARED_MARKED_SALT;
}

static inline uint64_t
shared_owner(const shmlock_lock_t *l)
{
    return (uint64_t) (uint32_t) l->pid << 32 | l->id;
}

int
shmlock_shared_retry(shmlock_lock_t *l, const char *key, size_t key_len,
    int64_t exptime_ms)
{
    int  rc = shmlock_group_acquire(l->zone, SHMLOCK_SHARED, key, key_len,
                                    l->id, 0, exptime_ms, &l->tk);

    l->held = rc == SHMLOCK_OK;
    return rc;
}

int
shmlock_shared_acquire(shmlock_lock_t *l, const char *key, size_t key_len,
    int64_t exptime_ms)
{
    l->pid = (int32_t) sys_pid();
    l->id = token_next_id((uint32_t) l->pid);
    l->marked = 0;
    l->waited = 0;
    return shmlock_shared_retry(l, key, key_len, exptime_ms);
}

/* A writer's mark that keeps readers out although the writer no longer
 * waits (past its deadline, dead, or a gone waiter of this process):
 * cleared, its holder kept.  SHMLOCK_ASK when a waiter of ours decides. */
static int
shared_clear_dead_mark(shmlock_lock_t *l, const char *key, size_t key_len,
    int flags)
{
    shmlock_ticket_t  seen, moved, probe;
    shmlock_mark_t    m;
    uint32_t          id;

    if (shmlock_slot_look(l->zone, key, key_len, &seen) != SHMLOCK_OK
        || !(seen.stamp & SHMLOCK_SLOT_MARKED)
        || shmlock_slot_read_mark(l->zone, &seen, &m) != SHMLOCK_OK)
    {
        return SHMLOCK_OK;
    }
    if (m.until_ms > shmlock_now_ms()) {
        id = (uint32_t) m.owner;
        if ((flags & SHMLOCK_LOOK_ASK)
            && (uint32_t) (m.owner >> 32) == sys_pid() && id != 0
            && id != l->gone[0] && id != l->gone[1]
            && id != l->alive[0] && id != l->alive[1])
        {
            l->ask = id;
            return SHMLOCK_ASK;
        }
        memset(&probe, 0, sizeof(probe));
        probe.owner = m.owner;
        probe.process = m.process;
        if (shmlock_slot_alive(&probe)
            && !(id != 0 && (id == l->gone[0] || id == l->gone[1])
                 && (uint32_t) (m.owner >> 32) == sys_pid()))
        {
            return SHMLOCK_OK;
        }
    }
    shmlock_slot_swap(l->zone, &seen, seen.owner, 0, 0, SHMLOCK_KEEP_TTL, 0,
                      &moved);
    return SHMLOCK_OK;
}

int
shmlock_shared_look(shmlock_lock_t *l, const char *key, size_t key_len,
    int64_t exptime_ms, int flags)
{
    uint32_t  count;
    int       rc;

    if (flags & SHMLOCK_LOOK_CHECK) {
        rc = shmlock_group_reclaim(l->zone, SHMLOCK_SHARED, key, key_len,
                                   &count);
        if (rc != SHMLOCK_OK) {
            return rc;
        }
        rc = shared_clear_dead_mark(l, key, key_len, flags);
        if (rc != SHMLOCK_OK) {
            return rc;
        }
    }
    return shmlock_shared_retry(l, key, key_len, exptime_ms);
}

int
shmlock_shared_release(shmlock_lock_t *l, const char *key, size_t key_len)
{
    int  rc = shmlock_group_release(l->zone, SHMLOCK_SHARED, key, key_len,
                                    &l->tk);

    l->held = 0;
    /* a marked writer sleeps on a word of its own */
    shmlock_wake_waiters(l->zone, shared_marked_hash(l->tk.hash), 1);
    return rc;
}

int
shmlock_shared_extend(shmlock_lock_t *l, const char *key, size_t key_len,
    int64_t exptime_ms)
{
    int  rc = shmlock_group_extend(l->zone, SHMLOCK_SHARED, key, key_len,
                                   &l->tk, exptime_ms);

    if (rc == SHMLOCK_NOT_FOUND) {
        l->held = 0;
    }
    return rc;
}

int
shmlock_shared_owned(shmlock_lock_t *l, const char *key, size_t key_len)
{
    shmlock_ticket_t   batch[64], *out = batch;
    uint64_t           owner = shared_owner(l);
    int                max = 64, count, i, rc, yes = 0;

    for ( ;; ) {
        rc = shmlock_group_holders(l->zone, SHMLOCK_SHARED, key, key_len,
                                   out, max, &count);
        if (rc != SHMLOCK_AGAIN || max >= SHMLOCK_GROUP_MAX) {
            break;
        }
        /* more holders than room: again, with room for them all */
        if (out != batch) {
            free(out);
        }
        max = count + 16 < SHMLOCK_GROUP_MAX ? count + 16 : SHMLOCK_GROUP_MAX;
        out = malloc(sizeof(*out) * (size_t) max);
        if (out == NULL) {
            return 0;
        }
    }
    for (i = 0; rc == SHMLOCK_OK && i < count && !yes; i++) {
        yes = out[i].owner == owner;
    }
    if (out != batch) {
        free(out);
    }
    return yes;
}

int
shmlock_shared_wait(shmlock_lock_t *l, const char *key, size_t key_len,
    const shmlock_wait_t *w, int64_t *elapsed_us)
{
    uint32_t  hash = shmlock_hash(key, key_len), seq;
    int64_t   start = w->start_us, deadline, now, us;
    double    step = w->step, s;
    int       rc, check = 1, stopped;

    if (start <= 0) {
        start = shmlock_now_us();
    }
    deadline = start + w->timeout_us;
    *elapsed_us = 0;
    for ( ;; ) {
        seq = shmlock_wait_begin(l->zone, hash);
        rc = shmlock_shared_look(l, key, key_len, w->exptime_ms,
                                 (check ? SHMLOCK_LOOK_CHECK : 0)
                                 | (w->flags & SHMLOCK_LOOK_ASK));
        if (rc != SHMLOCK_EXISTS) {
            shmlock_wait_end(l->zone, hash, seq, 0);
            if (rc == SHMLOCK_OK) {
                *elapsed_us = shmlock_now_us() - start;
            }
            return rc;
        }
        now = shmlock_now_us();
        stopped = (w->flags & SHMLOCK_LOOK_HERE)
                  && shmlock_lock_here(l->zone, key, key_len, 1);
        if (stopped || now >= deadline) {
            shmlock_wait_end(l->zone, hash, seq, 0);
            if (!check) {
                shmlock_wake_waiters(l->zone, hash, 0);   /* pass it on */
            }
            return stopped ? SHMLOCK_BUSY : SHMLOCK_TIMEOUT;
        }
        us = sys_seconds_us(step > SHARED_MIN_SLEEP ? step : SHARED_MIN_SLEEP);
        if (us > deadline - now) {
            us = deadline - now;
        }
        if (us > SHARED_CHECK_EVERY_US) {
            us = SHARED_CHECK_EVERY_US;
        }
        check = shmlock_wait_end(l->zone, hash, seq, us) == SHMLOCK_TIMEOUT;
        s = step * w->ratio;
        step = s > w->max_step ? w->max_step : s;
        if (step < SHARED_MIN_SLEEP) {
            step = SHARED_MIN_SLEEP;
        }
    }
}
