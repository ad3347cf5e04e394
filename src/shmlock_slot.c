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
#include "ticket.h"
#include "wait.h"
#include "zone.h"

#include <string.h>

/* the kinds a listing names are the slots' own (slot.h, group.h) */
_Static_assert(SHMLOCK_SLOT_LOCK == SLOT_KIND_LOCK
               && (int) SHMLOCK_SLOT_SHARED == (int) GROUP_SHARED
               && (int) SHMLOCK_SLOT_PERMIT == (int) GROUP_SEM
               && (int) SHMLOCK_SLOT_SEMAPHORE == (int) GROUP_SEM_HEAD,
               "slot kinds");
_Static_assert(SHMLOCK_GROUP_MAX == GROUP_MAX, "a head's count");

/* The shard of ticket t and its slot_ticket_t; NULL for a slot no zone
 * of this geometry has, or a state no slot is handed out in (not LIVE: a
 * zeroed ticket, an EMPTY or DEAD slot's): never a ticket this zone
 * handed out.  (A CAS from an EMPTY slot's state, all zeros, would make
 * that slot live without a key.) */
static inline shard_t *
shmlock_slot_in(shmlock_zone_t *zone, const shmlock_ticket_t *t,
    slot_ticket_t *tk)
{
    uint32_t  shard = ticket_shard(t);

    if (shard >= zone->nshards
        || (t->stamp & (SLOT_LIVE | SLOT_DEAD)) != SLOT_LIVE)
    {
        return NULL;
    }
    ticket_in(t, tk);
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
        ticket_out(t, r->shard, r->hash, &tk);
        return SHMLOCK_OK;
    case SLOT_HELD:
    case SLOT_MARKED_STATE:
        ticket_out(t, r->shard, r->hash, &tk);
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
        ticket_out(t, r.shard, r.hash, &tk);
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
    uint32_t       shard = ticket_shard(t), hash;
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
                                  ticket_hint(t), key, key_len,
                                  (uint64_t) (uint32_t) self << 32 | id,
                                  self, expiry, &tk, &hash) == SLOT_OK, 1))
        {
            /* ticket_out, but t->slot: the hint was the slot */
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
        ticket_out(t, shard, hash, &tk);
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
        ticket_out(t, ticket_shard(seen), seen->hash, &tk);
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
        ticket_out(t, ticket_shard(seen), seen->hash, &tk);
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
    rc = sh->slots.cas16 ? slot_mark_read(&sh->slots, &at, &r) : SLOT_SLOW;
    if (rc != SLOT_OK) {
        /* SLOT_GONE may be a record being written (seq odd) by a marker
         * that holds the shard's mutex: one preempted, or killed there.
         * Under the mutex the read waits for it, or its takeover drops
         * the half-written mark; a caller that retried at once instead
         * (the release of a marked lock, 32 times) ran out of tries. */
        shard_lock(sh);
        rc = shard_unlock(sh, slot_mark_read_locked(&sh->slots, &at, &r));
    }
    if (rc != SLOT_OK) {
        return shm_watch_after(zone, rc == SLOT_GONE ? SHMLOCK_CHANGED
                                                     : SHMLOCK_CORRUPT);
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

/*
 * The walk's cursor, below 2^53 (Lua numbers): shard << 48, then the
 * floor's slots (index << 23), then each home's spilled ones
 * (SCAN_SPILL | home << 23 | position on its chain); 0 at the start and
 * the end.
 */
#define SCAN_SPILL   ((uint64_t) 1 << 47)
#define SCAN_POS     (((uint64_t) 1 << 23) - 1)

static inline uint64_t
shmlock_slot_cursor(uint32_t shard, uint64_t spill, uint32_t at, uint32_t pos)
{
    return (uint64_t) shard << 48 | spill | (uint64_t) at << 23 | pos;
}

/* One slot of the walk at cursor n into out: 1 if it is a key's; *next
 * where the walk goes on (0: the end). */
static int
shmlock_slot_scan_one(shmlock_zone_t *zone, uint64_t n,
    shmlock_slot_info_t *out, uint64_t *next, int *rc)
{
    slot_ticket_t  tk;
    uint32_t       shard = (uint32_t) (n >> 48), at, pos, klen, shown, hash;
    uint64_t       spill = n & SCAN_SPILL;
    shard_t       *sh;
    int            ok, kind;

    at = (uint32_t) (n >> 23) & 0xffffff;
    pos = (uint32_t) (n & SCAN_POS);
    if (shard >= zone->nshards) {
        *next = 0;
        return 0;
    }
    sh = &zone->shard[shard];
    if (at > sh->slots.mask) {
        *next = spill ? shmlock_slot_cursor(shard + 1, 0, 0, 0)
                      : shmlock_slot_cursor(shard, SCAN_SPILL, 0, 0);
        if (shard + 1 >= zone->nshards && spill) {
            *next = 0;
        }
        return 0;
    }
    if (spill && pos == 0
        && __atomic_load_n(&sh->slots.marks[at].spill, __ATOMIC_RELAXED) == 0)
    {
        ok = 0;                         /* no chain at this home */
    } else if (!spill && sh->slots.cas16) {
        ok = slot_info(&sh->slots, at, &tk, &kind, out->key, &klen, &shown,
                       &hash);
    } else {
        shard_lock(sh);
        ok = spill ? slot_spill_info_locked(&sh->slots, at, pos, &tk, &kind,
                                            out->key, &klen, &shown, &hash)
                   : slot_info(&sh->slots, at, &tk, &kind, out->key, &klen,
                               &shown, &hash);
        if (shard_unlock(sh, SHMLOCK_OK) != SHMLOCK_OK) {
            *rc = SHMLOCK_CORRUPT;
            return 0;
        }
    }
    if (!spill) {
        *next = shmlock_slot_cursor(shard, 0, at + 1, 0);
    } else if (ok && pos < SCAN_POS) {
        *next = shmlock_slot_cursor(shard, SCAN_SPILL, at, pos + 1);
    } else {
        *next = shmlock_slot_cursor(shard, SCAN_SPILL, at + 1, 0);
    }
    if (ok) {
        shmlock_slot_scan_key(out, kind, klen, shown);
        ticket_out(&out->ticket, shard, hash, &tk);
    }
    return ok;
}

int
shmlock_slot_scan(shmlock_zone_t *zone, uint64_t cursor,
    shmlock_slot_info_t *out, int max, int *count, uint64_t *next)
{
    uint64_t  n = cursor, steps;
    int       rc, got = 0;

    *count = 0;
    *next = 0;
    rc = shm_watch(zone);
    if (__builtin_expect(rc != SHMLOCK_OK, 0)) {
        return rc;
    }
    if (max < 1) {
        return SHMLOCK_BAD_VALUE;
    }
    /* a bounded step: at most 4096 slots looked at per call */
    for (steps = 0; got < max && steps < 4096; steps++) {
        got += shmlock_slot_scan_one(zone, n, &out[got], &n, &rc);
        if (rc != SHMLOCK_OK) {
            return rc;
        }
        if (n == 0) {
            break;
        }
    }
    *count = got;
    *next = n;
    return shm_watch_after(zone, SHMLOCK_OK);
}
