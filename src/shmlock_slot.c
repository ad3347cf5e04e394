/*
 * The lock slots' calls (shmlock_slot_*, shmlock.h): the key's shard,
 * the lock-free slot call (slot.c), and the shard's mutex only when that
 * one answers SLOT_SLOW (a key without a slot yet, no 16-byte CAS).
 */

#include "shmlock.h"
#include "group.h"
#include "hash.h"
#include "shard_lock.h"
#include "shm_watch.h"
#include "slot.h"
#include "sys.h"
#include "wait.h"
#include "zone.h"

#include <string.h>

#define SHMLOCK_SLOT_SHARD_SHIFT  24

/* the kinds a listing names are the slots' own (slot.h, group.h) */
_Static_assert(SHMLOCK_SLOT_LOCK == SLOT_KIND_LOCK
               && (int) SHMLOCK_SLOT_SHARED == (int) GROUP_SHARED
               && (int) SHMLOCK_SLOT_PERMIT == (int) GROUP_SEM
               && (int) SHMLOCK_SLOT_SEMAPHORE == (int) GROUP_SEM_HEAD,
               "slot kinds");
_Static_assert(SHMLOCK_GROUP_MAX == GROUP_MAX, "a head's count");

static inline void
shmlock_slot_out(shmlock_ticket_t *t, uint32_t shard, uint32_t hash,
    const slot_ticket_t *tk)
{
    t->slot = shard << SHMLOCK_SLOT_SHARD_SHIFT | tk->index;
    t->hash = hash;
    t->owner = tk->state.owner;
    t->stamp = tk->state.stamp;
    t->process = tk->process;
}

/* The shard of ticket t and its slot_ticket_t; NULL for a slot no zone
 * of this geometry has, or a state no slot is handed out in (not LIVE: a
 * zeroed ticket, an EMPTY or DEAD slot's): never a ticket this zone
 * handed out.  (A CAS from an EMPTY slot's state, all zeros, would make
 * that slot live without a key.) */
static inline shard_t *
shmlock_slot_in(shmlock_zone_t *zone, const shmlock_ticket_t *t,
    slot_ticket_t *tk)
{
    uint32_t  shard = t->slot >> SHMLOCK_SLOT_SHARD_SHIFT;

    if (shard >= zone->nshards
        || (t->stamp & (SLOT_LIVE | SLOT_DEAD)) != SLOT_LIVE)
    {
        return NULL;
    }
    tk->index = t->slot & ((1u << SHMLOCK_SLOT_SHARD_SHIFT) - 1);
    tk->pad = 0;
    tk->state.owner = t->owner;
    tk->state.stamp = t->stamp;
    tk->process = t->process;
    return &zone->shard[shard];
}

/* An acquisition made in a zone found dead after its CAS (shm_watch.h):
 * the key given back (its new file may be the name's now, where another
 * process may hold it), and the dead status. */
static __attribute__((noinline)) int
shmlock_slot_undo(shmlock_zone_t *zone, const shmlock_ticket_t *t, int rc)
{
    slot_ticket_t  tk;
    shard_t       *sh;

    if (rc == SHMLOCK_OK) {
        sh = shmlock_slot_in(zone, t, &tk);
        rc = slot_release(&sh->slots, &tk);
        if (rc == SLOT_SLOW) {
            shard_lock(sh);
            rc = shard_unlock(sh, slot_release_locked(&sh->slots, &tk));
        }
        if (rc == SLOT_OK) {
            wait_wake(zone, t->hash, 0);
        }
    }
    return shm_watch_dead_status(zone);
}

/* An acquire's answer rc, once its CAS is done: the dead word read after
 * it (one load); a zone found dead undoes the acquisition. */
static inline int
shmlock_slot_taken(shmlock_zone_t *zone, const shmlock_ticket_t *t, int rc)
{
    if (__builtin_expect(
            __atomic_load_n(&zone->hdr->dead, __ATOMIC_SEQ_CST) == 0, 1))
    {
        return rc;
    }
    return shmlock_slot_undo(zone, t, rc);
}

/* The absolute expiry of a time to live (0: never); -1 if it is bad. */
static inline int64_t
shmlock_slot_expiry(int64_t exptime_ms, int64_t now_ms)
{
    if (exptime_ms < 0) {
        return -1;
    }
    return exptime_ms == 0 ? 0 : now_ms + exptime_ms;
}

/* An acquire's arguments, checked, and what it computed from them. */
typedef struct {
    const char  *key;
    size_t       key_len;
    uint32_t     hash;
    uint32_t     shard;
    uint64_t     owner;
    uint64_t     self;
    int64_t      expiry;
    int64_t      now_ms;
} shmlock_slot_req_t;

/* shmlock_slot_acquire when its fast path did not apply (the key not at
 * its home slot, held, marked, a CAS lost, no slot yet, no 16-byte CAS):
 * the lock-free slot_acquire, then the shard's mutex. */
static __attribute__((noinline)) int
shmlock_slot_acquire_slow(shmlock_zone_t *zone, const shmlock_slot_req_t *r,
    shmlock_ticket_t *t)
{
    slot_ticket_t  tk;
    shard_t       *sh = &zone->shard[r->shard];
    int            rc;

    rc = slot_acquire(&sh->slots, SLOT_KIND_LOCK, r->key, r->key_len,
                      r->hash, r->owner, r->self, r->expiry, r->now_ms, &tk);
    if (rc == SLOT_SLOW) {
        shard_lock(sh);
        rc = slot_acquire_locked(&sh->slots, SLOT_KIND_LOCK, r->key,
                                 r->key_len, r->hash, r->owner, r->self,
                                 r->expiry, r->now_ms, &tk);
        rc = shard_unlock(sh, rc);
        if (rc == SHMLOCK_CORRUPT) {
            return rc;
        }
    }
    switch (rc) {
    case SLOT_OK:
        shmlock_slot_out(t, r->shard, r->hash, &tk);
        return SHMLOCK_OK;
    case SLOT_HELD:
    case SLOT_MARKED_STATE:
        shmlock_slot_out(t, r->shard, r->hash, &tk);
        return SHMLOCK_EXISTS;
    case SLOT_FULL:
        return SHMLOCK_NO_MEMORY;
    default:
        return SHMLOCK_CORRUPT;         /* a table no crash can leave */
    }
}

/*
 * One clock reading (the expiry's, and the watch's gate), the checks, the
 * hash; then the uncontended case inline (slot_acquire_fast: the key's
 * slot is its home slot, free), anything else out of line; the dead word
 * after the CAS, not before (shm_watch.h).
 */
int
shmlock_slot_acquire(shmlock_zone_t *zone, const char *key, size_t key_len,
    uint32_t id, int64_t exptime_ms, int64_t now_ms, shmlock_ticket_t *t)
{
    shmlock_slot_req_t  r;
    slot_ticket_t       tk;
    int                 rc;

    if (now_ms <= 0) {
        now_ms = sys_now_ms();
    }
    rc = shm_watch_gate(zone, now_ms);
    if (__builtin_expect(rc != SHMLOCK_OK, 0)) {
        return rc;
    }
    if (__builtin_expect(key_len - 1 >= SHMLOCK_KEY_MAX, 0)) {
        return SHMLOCK_BAD_KEY;
    }
    r.expiry = shmlock_slot_expiry(exptime_ms, now_ms);
    if (__builtin_expect(r.expiry < 0, 0)) {
        return SHMLOCK_BAD_VALUE;
    }
    r.self = sys_self();
    r.owner = (uint64_t) (uint32_t) r.self << 32 | id;
    r.hash = hash_bytes(key, key_len);
    r.shard = (uint32_t) ((uint64_t) r.hash >> zone->shard_shift);
    if (__builtin_expect(
            slot_acquire_fast(&zone->shard[r.shard].slots, key, key_len,
                              r.hash, r.owner, r.self, r.expiry, &tk)
            == SLOT_OK, 1))
    {
        shmlock_slot_out(t, r.shard, r.hash, &tk);
        return shmlock_slot_taken(zone, t, SHMLOCK_OK);
    }
    r.key = key;
    r.key_len = key_len;
    r.now_ms = now_ms;
    return shmlock_slot_taken(zone, t,
                              shmlock_slot_acquire_slow(zone, &r, t));
}

/*
 * shmlock_slot_acquire with t's slot as a hint (a lock object taking
 * the key it took last, or a pooled handle's last key): the key's slot is
 * tried there first, without hashing the key nor finding its shard; a
 * hint that does not name key's slot, free, costs the compare and the
 * full acquire.  The clock and the checks come first, as there.
 */
int
shmlock_slot_acquire_hint(shmlock_zone_t *zone, const char *key,
    size_t key_len, uint32_t id, int64_t exptime_ms, int64_t now_ms,
    shmlock_ticket_t *t)
{
    slot_ticket_t  tk;
    uint32_t       shard = t->slot >> SHMLOCK_SLOT_SHARD_SHIFT, hash;
    uint64_t       self;
    int64_t        expiry;
    int            rc;

    if (now_ms <= 0) {
        now_ms = sys_now_ms();
    }
    rc = shm_watch_gate(zone, now_ms);
    if (__builtin_expect(rc != SHMLOCK_OK, 0)) {
        return rc;
    }
    if (__builtin_expect(shard < zone->nshards, 1)
        && __builtin_expect(key_len - 1 < SLOT_KEY_INLINE, 1)
        && __builtin_expect(exptime_ms >= 0, 1))
    {
        expiry = shmlock_slot_expiry(exptime_ms, now_ms);
        self = sys_self();
        if (__builtin_expect(
                slot_acquire_hint(&zone->shard[shard].slots,
                                  t->slot & ((1u << SHMLOCK_SLOT_SHARD_SHIFT)
                                             - 1),
                                  key, key_len,
                                  (uint64_t) (uint32_t) self << 32 | id,
                                  self, expiry, &tk, &hash) == SLOT_OK, 1))
        {
            /* shmlock_slot_out, but t->slot: the hint was the slot */
            t->hash = hash;
            t->owner = tk.state.owner;
            t->stamp = tk.state.stamp;
            t->process = tk.process;
            return shmlock_slot_taken(zone, t, SHMLOCK_OK);
        }
    }
    return shmlock_slot_acquire(zone, key, key_len, id, exptime_ms, now_ms,
                                t);
}

/* The answers of release, extend and swap. */
static inline int
shmlock_slot_rc(int rc)
{
    switch (rc) {
    case SLOT_OK:            return SHMLOCK_OK;
    case SLOT_MARKED_STATE:  return SHMLOCK_CHANGED;
    case SLOT_GONE:          return SHMLOCK_NOT_FOUND;
    default:                 return rc == SHMLOCK_CORRUPT ? rc
                                                          : SHMLOCK_CORRUPT;
    }
}

/* shmlock_slot_release but for its fast path: a zone gone, a ticket of
 * no shard, a CAS that failed (marked, gone), no 16-byte CAS. */
static __attribute__((noinline)) int
shmlock_slot_release_slow(shmlock_zone_t *zone, const shmlock_ticket_t *t)
{
    slot_ticket_t  tk;
    shard_t       *sh;
    int            rc;

    /* a zone destroyed, or its file removed (looked at, as by every
     * call, at most every SHMLOCK_WATCH_MS): a holder must learn that
     * its lock is no longer the name's */
    rc = shm_watch(zone);
    if (rc != SHMLOCK_OK) {
        return rc;
    }
    sh = shmlock_slot_in(zone, t, &tk);
    if (sh == NULL) {
        return SHMLOCK_NOT_FOUND;
    }
    rc = slot_release(&sh->slots, &tk);
    if (rc == SLOT_SLOW) {
        shard_lock(sh);
        rc = shard_unlock(sh, slot_release_locked(&sh->slots, &tk));
    }
    rc = shm_watch_after(zone, shmlock_slot_rc(rc));
    if (rc == SHMLOCK_OK) {
        wait_wake(zone, t->hash, 0);
    }
    return rc;
}

/* The release of a ticket whose state is still the slot's: the watch's
 * gate, the inline slot_release_fast, the dead word after it (shm_watch.h:
 * a zone found dead answers so, the key released all the same), then the
 * waiters' word (one load when none waits). */
int
shmlock_slot_release(shmlock_zone_t *zone, const shmlock_ticket_t *t)
{
    slot_ticket_t  tk;
    shard_t       *sh;
    int            rc;

    if (__builtin_expect(shm_watch_gate(zone, sys_coarse_ms()) == SHMLOCK_OK,
                         1))
    {
        sh = shmlock_slot_in(zone, t, &tk);
        if (__builtin_expect(sh != NULL, 1)
            && __builtin_expect(slot_release_fast(&sh->slots, &tk)
                                == SLOT_OK, 1))
        {
            rc = shm_watch_after(zone, SHMLOCK_OK);
            wait_wake(zone, t->hash, 0);
            return rc;
        }
    }
    return shmlock_slot_release_slow(zone, t);
}

int
shmlock_slot_extend(shmlock_zone_t *zone, shmlock_ticket_t *t,
    int64_t exptime_ms, int64_t now_ms)
{
    slot_ticket_t  tk;
    shard_t       *sh;
    int64_t        expiry;
    int            rc;

    rc = shm_watch_now(zone, &now_ms);
    if (__builtin_expect(rc != SHMLOCK_OK, 0)) {
        return rc;
    }
    expiry = shmlock_slot_expiry(exptime_ms, now_ms);
    if (expiry < 0) {
        return SHMLOCK_BAD_VALUE;
    }
    sh = shmlock_slot_in(zone, t, &tk);
    if (sh == NULL) {
        return SHMLOCK_NOT_FOUND;
    }
    rc = slot_extend(&sh->slots, &tk, expiry);
    if (__builtin_expect(rc == SLOT_SLOW, 0)) {
        shard_lock(sh);
        rc = shard_unlock(sh, slot_extend_locked(&sh->slots, &tk, expiry));
    }
    if (rc == SLOT_OK) {
        t->owner = tk.state.owner;
        t->stamp = tk.state.stamp;
    }
    return shm_watch_after(zone, shmlock_slot_rc(rc));
}

int
shmlock_slot_look(shmlock_zone_t *zone, const char *key, size_t key_len,
    shmlock_ticket_t *t)
{
    slot_ticket_t  tk;
    shard_t       *sh;
    uint32_t       hash, shard;
    int            rc;

    rc = shm_watch(zone);
    if (__builtin_expect(rc != SHMLOCK_OK, 0)) {
        return rc;
    }
    if (__builtin_expect(key_len - 1 >= SHMLOCK_KEY_MAX, 0)) {
        return SHMLOCK_BAD_KEY;
    }
    hash = hash_bytes(key, key_len);
    shard = (uint32_t) ((uint64_t) hash >> zone->shard_shift);
    sh = &zone->shard[shard];
    rc = slot_look(&sh->slots, SLOT_KIND_LOCK, key, key_len, hash, &tk);
    if (rc == SLOT_SLOW) {
        shard_lock(sh);
        rc = slot_look_locked(&sh->slots, SLOT_KIND_LOCK, key, key_len, hash,
                              &tk);
        rc = shard_unlock(sh, rc);
    }
    if (rc == SLOT_OK) {
        shmlock_slot_out(t, shard, hash, &tk);
        rc = SHMLOCK_OK;
    } else {
        rc = rc == SLOT_ABSENT ? SHMLOCK_NOT_FOUND : SHMLOCK_CORRUPT;
    }
    return shm_watch_after(zone, rc);
}

int
shmlock_slot_swap(shmlock_zone_t *zone, const shmlock_ticket_t *seen,
    uint64_t owner, uint64_t process, unsigned marked, int64_t exptime_ms,
    int64_t now_ms, shmlock_ticket_t *t)
{
    slot_ticket_t  from, tk;
    shard_t       *sh;
    uint64_t       e;
    int64_t        expiry;
    int            rc;

    rc = shm_watch_now(zone, &now_ms);
    if (__builtin_expect(rc != SHMLOCK_OK, 0)) {
        return rc;
    }
    if (exptime_ms == SHMLOCK_KEEP_TTL) {
        e = seen->stamp >> SLOT_EXPIRY_SHIFT;
        expiry = e == SLOT_NEVER ? 0 : (int64_t) e;
    } else {
        expiry = shmlock_slot_expiry(exptime_ms, now_ms);
    }
    if (process == 0) {
        process = sys_self();
    }
    /* a new owner must be of the process named (the slot's hint); the
     * same owner (a mark cleared, an expiry moved) keeps its hint */
    if (owner == 0 || expiry < 0
        || (owner != seen->owner
            && (uint32_t) (owner >> 32) != (uint32_t) process))
    {
        return SHMLOCK_BAD_VALUE;
    }
    sh = shmlock_slot_in(zone, seen, &from);
    if (sh == NULL) {
        return SHMLOCK_CHANGED;
    }
    rc = slot_swap(&sh->slots, &from, owner, process,
                   marked ? SLOT_MARKED : 0, expiry, &tk);
    if (__builtin_expect(rc == SLOT_SLOW, 0)) {
        shard_lock(sh);
        rc = slot_swap_locked(&sh->slots, &from, owner, process,
                              marked ? SLOT_MARKED : 0, expiry, &tk);
        rc = shard_unlock(sh, rc);
    }
    if (rc == SLOT_OK) {
        shmlock_slot_out(t, seen->slot >> SHMLOCK_SLOT_SHARD_SHIFT,
                         seen->hash, &tk);
        rc = SHMLOCK_OK;
    } else {
        rc = rc == SLOT_GONE ? SHMLOCK_CHANGED : SHMLOCK_CORRUPT;
    }
    return shm_watch_after(zone, rc);
}

int
shmlock_slot_alive(const shmlock_ticket_t *t)
{
    uint32_t  pid = (uint32_t) (t->owner >> 32);

    if (t->owner == 0 || pid == 0) {
        return 0;
    }
    /* a holder group's head (shmlock_group_*): no process, its holders
     * are judged one by one (shmlock_group_reclaim) */
    if (group_is_head(t->owner)) {
        return 1;
    }
    /* the process known: pid and start time (low 32 bits), as the shard
     * mutexes tell theirs; else any process of that pid counts */
    if (t->process != 0) {
        return sys_proc_alive(pid, t->process >> 32, 0xffffffffu);
    }
    return sys_proc_alive(pid, 0, 0);
}

int
shmlock_slot_mark(shmlock_zone_t *zone, const shmlock_ticket_t *seen,
    const shmlock_mark_t *m, shmlock_ticket_t *t)
{
    slot_ticket_t  from, tk;
    slot_mark_t    r;
    shard_t       *sh;
    int            rc;

    rc = shm_watch(zone);
    if (__builtin_expect(rc != SHMLOCK_OK, 0)) {
        return rc;
    }
    memset(&r, 0, sizeof(r));
    r.owner = m->owner;
    r.process = m->process != 0 ? m->process : sys_self();
    r.expiry = m->exptime_ms;
    r.since = m->since_ms;
    r.until = m->until_ms;
    if (r.owner == 0 || (uint32_t) (r.owner >> 32) != (uint32_t) r.process
        || seen->owner == 0 || r.expiry < 0)
    {
        return SHMLOCK_BAD_VALUE;
    }
    sh = shmlock_slot_in(zone, seen, &from);
    if (sh == NULL) {
        return SHMLOCK_CHANGED;
    }
    shard_lock(sh);
    rc = shard_unlock(sh, slot_mark_locked(&sh->slots, &from, &r, &tk));
    if (rc == SLOT_OK) {
        shmlock_slot_out(t, seen->slot >> SHMLOCK_SLOT_SHARD_SHIFT,
                         seen->hash, &tk);
        rc = SHMLOCK_OK;
    } else {
        rc = rc == SLOT_GONE ? SHMLOCK_CHANGED : SHMLOCK_CORRUPT;
    }
    return shm_watch_after(zone, rc);
}

int
shmlock_slot_read_mark(shmlock_zone_t *zone, const shmlock_ticket_t *t,
    shmlock_mark_t *m)
{
    slot_ticket_t  at;
    slot_mark_t    r;
    shard_t       *sh;
    int            rc;

    rc = shm_watch(zone);
    if (__builtin_expect(rc != SHMLOCK_OK, 0)) {
        return rc;
    }
    sh = shmlock_slot_in(zone, t, &at);
    if (sh == NULL) {
        return SHMLOCK_CHANGED;
    }
    if (!sh->slots.cas16) {
        shard_lock(sh);
        rc = shard_unlock(sh, slot_mark_read(&sh->slots, &at, &r));
    } else {
        rc = slot_mark_read(&sh->slots, &at, &r);
    }
    if (rc != SLOT_OK) {
        return rc == SLOT_GONE ? SHMLOCK_CHANGED : SHMLOCK_CORRUPT;
    }
    m->owner = r.owner;
    m->process = r.process;
    m->exptime_ms = r.expiry;
    m->since_ms = r.since;
    m->until_ms = r.until;
    return shm_watch_after(zone, SHMLOCK_OK);
}

/* A listed slot's key as the user's: a record's (group.h) without its
 * index, which goes to info->index; the kind is the slot's, never read
 * from the bytes. */
static void
shmlock_slot_scan_key(shmlock_slot_info_t *info, int kind, uint32_t klen,
    uint32_t shown)
{
    const unsigned char  *k = (const unsigned char *) info->key;

    info->kind = (uint32_t) kind;
    info->index = 0;
    if ((kind == GROUP_SHARED || kind == GROUP_SEM) && klen > GROUP_PREFIX
        && shown >= GROUP_PREFIX)
    {
        info->index = (uint32_t) k[0] << 24 | (uint32_t) k[1] << 16
                      | (uint32_t) k[2] << 8 | k[3];
        memmove(info->key, info->key + GROUP_PREFIX, shown - GROUP_PREFIX);
        klen -= GROUP_PREFIX;
        shown -= GROUP_PREFIX;
    }
    memset(info->key + shown, 0, sizeof(info->key) - shown);
    info->key_len = klen;
    info->shown = shown;
}

int
shmlock_slot_scan(shmlock_zone_t *zone, uint64_t cursor,
    shmlock_slot_info_t *out, int max, int *count, uint64_t *next)
{
    slot_ticket_t  tk;
    shard_t       *sh;
    uint64_t       n, per, total;
    uint32_t       shard, klen, shown, hash;
    int            rc, got = 0, ok, kind;

    *count = 0;
    *next = 0;
    rc = shm_watch(zone);
    if (__builtin_expect(rc != SHMLOCK_OK, 0)) {
        return rc;
    }
    if (max < 1) {
        return SHMLOCK_BAD_VALUE;
    }
    per = (uint64_t) zone->shard[0].slots.mask + 1;
    total = per * zone->nshards;
    for (n = cursor; n < total && got < max; n++) {
        shard = (uint32_t) (n / per);
        sh = &zone->shard[shard];
        if (sh->slots.cas16) {
            ok = slot_info(&sh->slots, (uint32_t) (n % per), &tk, &kind,
                           out[got].key, &klen, &shown, &hash);
        } else {
            shard_lock(sh);
            ok = slot_info(&sh->slots, (uint32_t) (n % per), &tk, &kind,
                           out[got].key, &klen, &shown, &hash);
            if (shard_unlock(sh, SHMLOCK_OK) != SHMLOCK_OK) {
                return SHMLOCK_CORRUPT;
            }
        }
        if (ok) {
            shmlock_slot_scan_key(&out[got], kind, klen, shown);
            shmlock_slot_out(&out[got].ticket, shard, hash, &tk);
            got++;
        }
    }
    *count = got;
    *next = n < total ? n : 0;
    return shm_watch_after(zone, SHMLOCK_OK);
}
