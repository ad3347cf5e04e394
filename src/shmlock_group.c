/*
 * Holder groups' calls (shmlock_group_*, shmlock.h): semaphores and
 * shared holds (group.h), each under the key's shard mutex; whether a
 * holder lives is asked here, without the mutex (it reads /proc).
 */

#include "shmlock.h"
#include "group.h"
#include "hash.h"
#include "shard_lock.h"
#include "shm_watch.h"
#include "sys.h"
#include "ticket.h"
#include "wait.h"
#include "zone.h"

#include <stdlib.h>
#include <string.h>

#define SHMLOCK_GROUP_STACK_KEY    256     /* longer keys: malloc */
#define SHMLOCK_GROUP_BATCH        32      /* holders judged per step */

/* A key's group in its shard, with the buffer of its record keys. */
typedef struct {
    group_t   g;
    shard_t  *sh;
    uint32_t  shard;
    char     *heap;
    char      stack[SHMLOCK_GROUP_STACK_KEY];
} shmlock_group_key_t;

static int
shmlock_group_open(shmlock_zone_t *zone, int kind, const char *key,
    size_t key_len, shmlock_group_key_t *k)
{
    char  *buf = k->stack;
    int    rc;

    rc = shm_watch(zone);
    if (__builtin_expect(rc != SHMLOCK_OK, 0)) {
        return rc;
    }
    if (kind != SHMLOCK_SEMAPHORE && kind != SHMLOCK_SHARED) {
        return SHMLOCK_BAD_VALUE;
    }
    if (key == NULL || key_len == 0
        || key_len > SHMLOCK_KEY_MAX - GROUP_PREFIX)
    {
        return SHMLOCK_BAD_KEY;
    }
    k->heap = NULL;
    if (key_len + GROUP_PREFIX > sizeof(k->stack)) {
        k->heap = malloc(key_len + GROUP_PREFIX);
        if (k->heap == NULL) {
            return SHMLOCK_NO_MEMORY;
        }
        buf = k->heap;
    }
    k->shard = (uint32_t) ((uint64_t) hash_bytes(key, key_len)
                           >> zone->shard_shift);
    k->sh = &zone->shard[k->shard];
    group_init(&k->g, &k->sh->slots,
               kind == SHMLOCK_SHARED ? GROUP_SHARED : GROUP_SEM, buf, key,
               key_len);
    return SHMLOCK_OK;
}

static void
shmlock_group_close(shmlock_group_key_t *k)
{
    free(k->heap);
}

static void
shmlock_group_out(shmlock_ticket_t *t, const shmlock_group_key_t *k,
    const slot_ticket_t *tk)
{
    ticket_out(t, k->shard, k->g.hash, tk);
}

/* t as the ticket of a record in k's shard; 0 if it names another. */
static int
shmlock_group_in(const shmlock_group_key_t *k, const shmlock_ticket_t *t,
    slot_ticket_t *tk)
{
    if (ticket_shard(t) != k->shard || t->hash != k->g.hash) {
        return 0;
    }
    ticket_in(t, tk);
    return (tk->index & SLOT_SPILL) || tk->index <= k->g.t->mask;
}

/* The mutex released (a full barrier), then the dead word read after it
 * (shm_watch.h): a zone found dead answers so.  k stays open. */
static inline int
shmlock_group_unlock(shmlock_zone_t *zone, shmlock_group_key_t *k, int rc)
{
    return shm_watch_after(zone, shard_unlock(k->sh, rc));
}

static inline int
shmlock_group_rc(shmlock_zone_t *zone, shmlock_group_key_t *k, int rc)
{
    rc = shmlock_group_unlock(zone, k, rc);
    shmlock_group_close(k);
    return rc;
}

/* A hold taken in a zone found dead after it (shm_watch.h): given back,
 * as its new file may be the name's now, where another process may hold
 * the key. */
static __attribute__((noinline)) void
shmlock_group_undo(shmlock_group_key_t *k, const shmlock_ticket_t *t)
{
    slot_ticket_t  tk;
    int            handed = 0;

    if (shmlock_group_in(k, t, &tk)) {
        shard_lock(k->sh);
        group_release_locked(&k->g, &tk, sys_now_ms(), &handed);
        shard_unlock(k->sh, SHMLOCK_OK);
    }
}

int
shmlock_group_acquire(shmlock_zone_t *zone, int kind, const char *key,
    size_t key_len, uint32_t id, uint32_t permits, int64_t exptime_ms,
    shmlock_ticket_t *t)
{
    shmlock_group_key_t  k;
    group_head_t         h;
    slot_ticket_t        tk;
    uint64_t             self = sys_self();
    int64_t              now;
    int                  rc, taken;

    if (exptime_ms < 0 || permits > SHMLOCK_GROUP_MAX
        || (permits == 0 && kind == SHMLOCK_SEMAPHORE))
    {
        return SHMLOCK_BAD_VALUE;
    }
    rc = shmlock_group_open(zone, kind, key, key_len, &k);
    if (rc != SHMLOCK_OK) {
        return rc;
    }
    shard_lock(k.sh);
    now = sys_now_ms();
    rc = group_acquire_locked(&k.g, (uint64_t) (uint32_t) self << 32 | id,
                              self, permits,
                              exptime_ms == 0 ? 0 : now + exptime_ms, now,
                              &tk, &h);
    switch (rc) {
    case SLOT_OK:
        shmlock_group_out(t, &k, &tk);
        rc = SHMLOCK_OK;
        break;
    case SLOT_HELD:
        shmlock_group_out(t, &k, &h.tk);
        rc = SHMLOCK_EXISTS;
        break;
    case SLOT_FULL:
        rc = SHMLOCK_NO_MEMORY;
        break;
    default:
        rc = SHMLOCK_CORRUPT;
    }
    taken = rc == SHMLOCK_OK;
    rc = shmlock_group_unlock(zone, &k, rc);
    if (__builtin_expect(taken && rc != SHMLOCK_OK, 0)
        && (rc == SHMLOCK_REMOVED || rc == SHMLOCK_DESTROYED))
    {
        shmlock_group_undo(&k, t);
    }
    shmlock_group_close(&k);
    /* readers do not exclude each other: one woken passes it on */
    if (rc == SHMLOCK_OK && kind == SHMLOCK_SHARED) {
        wait_wake(zone, t->hash, 0);
    }
    return rc;
}

int
shmlock_group_release(shmlock_zone_t *zone, int kind, const char *key,
    size_t key_len, const shmlock_ticket_t *t)
{
    shmlock_group_key_t  k;
    slot_ticket_t        tk;
    int                  rc, handed = 0;

    if (__builtin_expect(__atomic_load_n(&zone->hdr->dead, __ATOMIC_ACQUIRE)
                         != 0, 0))
    {
        return shm_watch_dead_status(zone);
    }
    rc = shmlock_group_open(zone, kind, key, key_len, &k);
    if (rc != SHMLOCK_OK) {
        return rc;
    }
    if (!shmlock_group_in(&k, t, &tk)) {
        shmlock_group_close(&k);
        return SHMLOCK_NOT_FOUND;
    }
    shard_lock(k.sh);
    rc = group_release_locked(&k.g, &tk, sys_now_ms(), &handed);
    rc = shmlock_group_rc(zone, &k,
                          rc == SLOT_OK ? SHMLOCK_OK : SHMLOCK_NOT_FOUND);
    /* a sleeper of the key: every one after a handoff (it must reach its
     * waiter), else one */
    if (rc == SHMLOCK_OK || handed) {
        wait_wake(zone, t->hash, handed);
    }
    return rc;
}

int
shmlock_group_extend(shmlock_zone_t *zone, int kind, const char *key,
    size_t key_len, shmlock_ticket_t *t, int64_t exptime_ms)
{
    shmlock_group_key_t  k;
    slot_ticket_t        tk;
    int64_t              now;
    int                  rc;

    if (exptime_ms < 0) {
        return SHMLOCK_BAD_VALUE;
    }
    rc = shmlock_group_open(zone, kind, key, key_len, &k);
    if (rc != SHMLOCK_OK) {
        return rc;
    }
    if (!shmlock_group_in(&k, t, &tk)) {
        shmlock_group_close(&k);
        return SHMLOCK_NOT_FOUND;
    }
    shard_lock(k.sh);
    now = sys_now_ms();
    rc = group_extend_locked(&k.g, &tk,
                             exptime_ms == 0 ? 0 : now + exptime_ms, now);
    if (rc == SLOT_OK) {
        shmlock_group_out(t, &k, &tk);
    }
    return shmlock_group_rc(zone, &k, rc == SLOT_OK ? SHMLOCK_OK
                                                    : SHMLOCK_NOT_FOUND);
}

/* Whether a record's (or an exclusive holder's) process may live. */
static int
shmlock_group_alive(const slot_ticket_t *tk)
{
    shmlock_ticket_t  t;

    memset(&t, 0, sizeof(t));
    t.owner = tk->state.owner;
    t.process = tk->process;
    return shmlock_slot_alive(&t);
}

/* Shared holds: K's exclusive holder, if its process is gone, is freed
 * (a marked slot is left to its marked waiter, which takes it over). */
static void
shmlock_group_dead_exclusive(shmlock_group_key_t *k)
{
    group_head_t  h;

    shard_lock(k->sh);
    group_head_locked(&k->g, sys_now_ms(), &h);
    shard_unlock(k->sh, SHMLOCK_OK);
    if (!h.exclusive || (h.tk.state.stamp & SLOT_MARKED)
        || shmlock_group_alive(&h.tk))
    {
        return;
    }
    shard_lock(k->sh);
    slot_release_locked(k->g.t, &h.tk);     /* a CAS from the state seen */
    shard_unlock(k->sh, SHMLOCK_OK);
}

int
shmlock_group_reclaim(shmlock_zone_t *zone, int kind, const char *key,
    size_t key_len, uint32_t *count)
{
    shmlock_group_key_t  k;
    slot_ticket_t        batch[SHMLOCK_GROUP_BATCH];
    uint32_t             from = 0, n;
    int                  rc, i, got, handed = 0, woke = 0;

    *count = 0;
    rc = shmlock_group_open(zone, kind, key, key_len, &k);
    if (rc != SHMLOCK_OK) {
        return rc;
    }
    if (kind == SHMLOCK_SHARED) {
        shmlock_group_dead_exclusive(&k);
    }
    /* the expired first, then the dead, a batch at a time: listed under
     * the mutex, judged without it, dropped under it by a CAS from the
     * state listed (a holder that released meanwhile is not touched) */
    shard_lock(k.sh);
    group_sweep_locked(&k.g, sys_now_ms(), &handed);
    woke |= handed;
    do {
        got = group_holders_locked(&k.g, sys_now_ms(), &from, batch,
                                   SHMLOCK_GROUP_BATCH);
        rc = shard_unlock(k.sh, SHMLOCK_OK);
        if (rc != SHMLOCK_OK) {
            shmlock_group_close(&k);
            return rc;
        }
        for (i = 0; i < got; i++) {
            if (!shmlock_group_alive(&batch[i])) {
                shard_lock(k.sh);
                group_release_locked(&k.g, &batch[i], sys_now_ms(), &handed);
                shard_unlock(k.sh, SHMLOCK_OK);
                woke |= 2 | handed;
            }
        }
        shard_lock(k.sh);
    } while (got == SHMLOCK_GROUP_BATCH);
    n = group_sweep_locked(&k.g, sys_now_ms(), &handed);
    woke |= handed;
    rc = shmlock_group_rc(zone, &k, SHMLOCK_OK);
    if (woke) {
        wait_wake(zone, k.g.hash, 1);  /* maybe several freed */
    }
    *count = n;
    return rc;
}

int
shmlock_group_holders(shmlock_zone_t *zone, int kind, const char *key,
    size_t key_len, shmlock_ticket_t *out, int max, int *count)
{
    shmlock_group_key_t  k;
    slot_ticket_t        batch[SHMLOCK_GROUP_BATCH];
    uint32_t             from = 0;
    int                  rc, i, got, n = 0;

    *count = 0;
    if (max < 0) {
        return SHMLOCK_BAD_VALUE;
    }
    rc = shmlock_group_open(zone, kind, key, key_len, &k);
    if (rc != SHMLOCK_OK) {
        return rc;
    }
    shard_lock(k.sh);
    do {
        got = group_holders_locked(&k.g, sys_now_ms(), &from, batch,
                                   SHMLOCK_GROUP_BATCH);
        for (i = 0; i < got; i++, n++) {
            if (n < max) {
                shmlock_group_out(&out[n], &k, &batch[i]);
            }
        }
    } while (got == SHMLOCK_GROUP_BATCH);
    rc = shmlock_group_rc(zone, &k, SHMLOCK_OK);
    *count = n;
    return rc == SHMLOCK_OK && n > max ? SHMLOCK_AGAIN : rc;
}

int
shmlock_group_head(shmlock_zone_t *zone, int kind, const char *key,
    size_t key_len, shmlock_ticket_t *t)
{
    shmlock_group_key_t  k;
    group_head_t         h;
    int                  rc;

    rc = shmlock_group_open(zone, kind, key, key_len, &k);
    if (rc != SHMLOCK_OK) {
        return rc;
    }
    shard_lock(k.sh);
    group_head_locked(&k.g, sys_now_ms(), &h);
    if (h.found) {
        shmlock_group_out(t, &k, &h.tk);
    }
    rc = shmlock_group_rc(zone, &k, SHMLOCK_OK);
    return rc == SHMLOCK_OK && !h.found ? SHMLOCK_NOT_FOUND : rc;
}
