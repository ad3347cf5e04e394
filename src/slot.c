#include "slot.h"
#include "hash.h"
#include "wordstore.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOT_CAS_TRIES   8      /* lock-free CAS races before SLOT_SLOW */

/* ---- the state: reads, stamps, the one CAS ---- */

int
slot_cas16(void)
{
#if defined(__x86_64__)
    static int  known = -1;
    unsigned    a = 1, b, c, d;

    if (known < 0) {
        __asm__ ("cpuid" : "+a" (a), "=b" (b), "=c" (c), "=d" (d));
        known = (c >> 13) & 1;              /* CPUID.1:ECX.CX16 */
    }
    return known;
#else
    return 0;
#endif
}

static inline int
slot_same(slot_state_t a, slot_state_t b)
{
    return a.owner == b.owner && a.stamp == b.stamp;
}

static inline int
slot_expired(uint64_t stamp, int64_t now)
{
    uint64_t  e = stamp >> SLOT_EXPIRY_SHIFT;

    return e != SLOT_NEVER && (int64_t) e <= now;
}

/*
 * A change of a state under the mutex: the CAS when lock-free callers may
 * race us, else (no 16-byte CAS: every caller holds the mutex) the two
 * words written under the undo record.  0 if the state was no longer
 * `*seen` (then *seen is the state found).
 */
static int
slot_change_at(slots_t *t, slot_t *s, uint32_t i, slot_state_t *seen,
    slot_state_t want)
{
    slot_hdr_t  *h = t->hdr;

    if (t->cas16) {
        return slot_cas(s, seen, want);
    }
    if (!slot_same(s->state, *seen)) {
        *seen = s->state;
        return 0;
    }
    h->undo_index = i;
    h->undo_state = *seen;
    WORDSTORE32(h->undo_active, 1);
    WORDSTORE64(s->state.owner, want.owner);
    WORDSTORE64(s->state.stamp, want.stamp);
    WORDSTORE32(h->undo_active, 0);
    return 1;
}

static inline int
slot_change(slots_t *t, uint32_t i, slot_state_t *seen, slot_state_t want)
{
    return slot_change_at(t, &t->slots[i], i, seen, want);
}


/* ---- spilled slots: where they are (slot.h, "Spilled slots") ---- */

static inline int
slot_chunk_ok(const slots_t *t, uint32_t c)
{
    return c != 0 && c <= t->nchunks;
}

static inline void *
slot_chunk(const slots_t *t, uint32_t c)
{
    return t->chunks + (size_t) c * 64;
}

/* The first spilled record of home's chain (0: none); lock-free, a hint
 * (the chains change under the mutex only). */
static inline uint32_t
slot_chain(const slots_t *t, uint32_t home)
{
    return __atomic_load_n(&t->marks[home].spill, __ATOMIC_RELAXED);
}

/* A spilled record and its slot, chunk c; NULL if either chunk is out of
 * range (a broken chain). */
static inline slot_t *
slot_spilled(const slots_t *t, uint32_t c, slot_mark_t **rec)
{
    uint32_t  sc;

    if (!slot_chunk_ok(t, c)) {
        return NULL;
    }
    *rec = slot_chunk(t, c);
    sc = (*rec)->slot;
    return slot_chunk_ok(t, sc) && sc != c ? slot_chunk(t, sc) : NULL;
}

/*
 * The mutex held: the slot and record of ticket index i, a floor slot, or
 * a spilled one whose record is on the chain of its slot's home (*link:
 * the word pointing at its record, for an unlink; NULL for a floor slot).
 * NULL if i names neither: a spilled slot given back since (its chunks
 * may be anything now, read but never written here).
 */
static slot_t *
slot_locate(slots_t *t, uint32_t i, slot_mark_t **rec, uint32_t **link)
{
    uint32_t      m = i & ~SLOT_SPILL, c, n;
    uint32_t     *l;
    slot_mark_t  *r;
    slot_t       *s;

    *link = NULL;
    if (!(i & SLOT_SPILL)) {
        if (i > t->mask) {
            return NULL;
        }
        *rec = &t->marks[i];
        return &t->slots[i];
    }
    s = slot_spilled(t, m, &r);
    if (s == NULL) {
        return NULL;
    }
    l = &t->marks[s->hash & t->mask].spill;
    for (n = 0; (c = *l) != 0 && slot_chunk_ok(t, c) && n < t->nchunks; n++)
    {
        if (c == m) {
            *rec = r;
            *link = l;
            return s;
        }
        l = &((slot_mark_t *) slot_chunk(t, c))->spill;
    }
    return NULL;
}

/* A spilled slot, free again (or expired), unlinked by one store and its
 * chunks given back (a crash between the two leaves them to recovery,
 * which rebuilds the free list from what is reachable). */
static void
slot_unspill(slots_t *t, uint32_t *link, uint32_t c)
{
    slot_mark_t  *r = slot_chunk(t, c);
    uint32_t      sc = r->slot;

    WORDSTORE32(*link, r->spill);
    t->hdr->spilled--;
    t->give(t->ctx, sc, c);
}


/* ---- the holder's process: a hint beside the state ---- */

/* The hint as the holder's process, if it names the owner's pid. */
static inline uint64_t
slot_process_of(uint64_t owner, uint64_t process)
{
    return owner != 0 && (uint32_t) process == (uint32_t) (owner >> 32)
           ? process : 0;
}


/* ---- keys ---- */

uint64_t
slot_fingerprint(const char *key, size_t len)
{
    uint64_t  h = 0x243f6a8885a308d3ULL ^ ((uint64_t) len
                                           * 0xc2b2ae3d27d4eb4fULL);
    size_t    i;

    for (i = 0; i + 8 < len; i += 8) {
        h = hash_mix(h, hash_load64(key + i));
    }
    h = hash_mix(h, len >= 8 ? hash_load64(key + len - 8) : 0);
    h ^= h >> 31;
    h *= 0x94d049bb133111ebULL;
    return h ^ (h >> 29);
}

static void
slot_key_write(slot_t *s, int kind, const char *key, size_t klen,
    uint32_t hash)
{
    uint64_t  fp;

    if (klen <= SLOT_KEY_INLINE) {
        memcpy(s->key, key, klen);
    } else {
        memcpy(s->key, key, SLOT_KEY_PREFIX);
        fp = slot_fingerprint(key, klen);
        memcpy(s->key + SLOT_KEY_PREFIX, &fp, 8);
    }
    WORDSTORE32(s->hash, hash);
    WORDSTORE32(s->key_len, slot_len_word(kind, klen));
}


/* ---- probing ---- */

enum { FIND_FOUND, FIND_ABSENT, FIND_RETRY };

/*
 * Linear probing from the hash's home slot.  FIND_FOUND: *at is the key's
 * LIVE slot and *st its state (read before and after the key); FIND_ABSENT:
 * the probe met an EMPTY slot, or went SLOT_PROBE_MAX slots (*hole: the
 * first DEAD or EMPTY slot met, or UINT32_MAX if none); FIND_RETRY: a slot
 * changed while its key was compared (lock-free callers only).
 */
static int
slot_find(slots_t *t, int kind, const char *key, size_t klen, uint32_t hash,
    uint32_t *at, slot_state_t *st, uint32_t *hole, uint64_t *process)
{
    uint32_t       word = slot_len_word(kind, klen);
    uint32_t       i = hash & t->mask, n;
    uint32_t       limit = t->mask < SLOT_PROBE_MAX ? t->mask + 1
                                                    : SLOT_PROBE_MAX;
    const slot_t  *s;
    slot_state_t   a, b;

    *hole = UINT32_MAX;
    for (n = 0; n < limit; n++, i = (i + 1) & t->mask) {
        s = &t->slots[i];
        a = slot_load(s);
        if (!(a.stamp & SLOT_FLAGS)) {
            if (*hole == UINT32_MAX) {
                *hole = i;
            }
            return FIND_ABSENT;
        }
        if (a.stamp & SLOT_DEAD) {
            if (*hole == UINT32_MAX) {
                *hole = i;
            }
            continue;
        }
        if (__atomic_load_n(&s->hash, __ATOMIC_RELAXED) != hash
            || __atomic_load_n(&s->key_len, __ATOMIC_RELAXED) != word
            || !slot_key_is(s, key, klen))
        {
            /* a key being rewritten changed the state first: a slot
             * that left LIVE since a was read is not ours to skip */
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            b = slot_load(s);
            if (!slot_same(a, b)) {
                return FIND_RETRY;
            }
            continue;
        }
        *process = __atomic_load_n(&s->process, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        b = slot_load(s);
        if (!slot_same(a, b)) {
            return FIND_RETRY;
        }
        *at = i;
        *st = a;
        *process = slot_process_of(a.owner, *process);
        return FIND_FOUND;
    }
    return FIND_ABSENT;
}


/* ---- lock-free ---- */

int
slot_acquire(slots_t *t, int kind, const char *key, size_t klen,
    uint32_t hash, uint64_t owner, uint64_t process, int64_t expiry,
    int64_t now, slot_ticket_t *tk)
{
    uint32_t      word = slot_len_word(kind, klen);
    uint32_t      i, hole, n;
    slot_state_t  st, want, b;
    uint64_t      holder;
    slot_t       *s;

    if (!t->cas16) {
        return SLOT_SLOW;
    }
    for (n = 0; n < SLOT_CAS_TRIES; n++) {
        /* the common case first: the key's slot is its home slot (as
         * slot_find, without its loop) */
        i = hash & t->mask;
        s = &t->slots[i];
        st = slot_load(s);
        if ((st.stamp & (SLOT_LIVE | SLOT_DEAD)) == SLOT_LIVE
            && __atomic_load_n(&s->hash, __ATOMIC_RELAXED) == hash
            && __atomic_load_n(&s->key_len, __ATOMIC_RELAXED) == word
            && slot_key_is(s, key, klen))
        {
            holder = __atomic_load_n(&s->process, __ATOMIC_RELAXED);
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            b = slot_load(s);
            if (!slot_same(st, b)) {
                continue;
            }
            holder = slot_process_of(st.owner, holder);
        } else {
            switch (slot_find(t, kind, key, klen, hash, &i, &st, &hole,
                              &holder))
            {
            case FIND_ABSENT:
                return SLOT_SLOW;         /* its slot is made locked */
            case FIND_RETRY:
                continue;
            }
        }
        for ( ; n < SLOT_CAS_TRIES; n++) {
            if (!(st.stamp & SLOT_LIVE)) {
                break;                    /* reclaimed meanwhile: probe */
            }
            if (st.owner != 0 && !slot_expired(st.stamp, now)) {
                slot_ticket(tk, i, st, holder);
                return SLOT_HELD;
            }
            if (st.stamp & SLOT_MARKED) {
                slot_ticket(tk, i, st, holder);
                return SLOT_MARKED_STATE;
            }
            want.owner = owner;
            want.stamp = slot_stamp(SLOT_LIVE, expiry, st.stamp);
            slot_hint(&t->slots[i], process);
            if (slot_cas(&t->slots[i], &st, want)) {
                slot_hint(&t->slots[i], process);
                slot_ticket(tk, i, want, process);
                return SLOT_OK;
            }
            holder = 0;                   /* the state moved on */
        }
    }
    return SLOT_SLOW;
}

int
slot_release(slots_t *t, const slot_ticket_t *tk)
{
    return slot_release_fast(t, tk);
}

int
slot_extend(slots_t *t, slot_ticket_t *tk, int64_t expiry)
{
    slot_state_t  st = tk->state, want;

    if (!t->cas16 || (tk->index & SLOT_SPILL)) {
        return SLOT_SLOW;
    }
    if (tk->index > t->mask) {
        return SLOT_GONE;
    }
    want.owner = st.owner;
    want.stamp = slot_stamp(SLOT_LIVE, expiry, st.stamp);
    if (slot_cas(&t->slots[tk->index], &st, want)) {
        tk->state = want;
        return SLOT_OK;
    }
    return slot_not_ours(st, tk);
}

int
slot_look(slots_t *t, int kind, const char *key, size_t klen, uint32_t hash,
    slot_ticket_t *tk)
{
    uint32_t      i, hole, n;
    slot_state_t  st;
    uint64_t      holder;

    if (!t->cas16) {
        return SLOT_SLOW;
    }
    for (n = 0; n < SLOT_CAS_TRIES; n++) {
        switch (slot_find(t, kind, key, klen, hash, &i, &st, &hole, &holder)) {
        case FIND_FOUND:
            slot_ticket(tk, i, st, holder);
            return SLOT_OK;
        case FIND_ABSENT:
            /* not in the floor: a spilled slot is looked for under the
             * mutex, if the home has any */
            return slot_chain(t, hash & t->mask) != 0 ? SLOT_SLOW
                                                      : SLOT_ABSENT;
        }
    }
    return SLOT_SLOW;
}

/*
 * The hint after a swap's CAS; the process the new ticket names.
 *
 * A new owner's process goes in after the CAS only: a swap from a stale
 * state must not overwrite the holder's.  (Written before, a handoff
 * whose CAS failed, or whose releaser was killed before it, would leave
 * the live holder a hint of another pid: its process unknown to the
 * waiters, and its lock no longer its own to lock/zone.lua's
 * ours_in_seen.)  Meanwhile readers find the process unknown
 * (slot_process_of: the hint's pid is not the owner's), which is never
 * taken for dead.  A releaser killed between the CAS and the hint leaves
 * it unknown for good; the waiter the lock was handed to knows the lock
 * for its own by the owner word then (its pid and the id of its
 * acquisition: only one live process has that pid), takes it, and
 * writes its process again by a swap to the same state:
 *
 * The same owner keeps its hint (a mark set or cleared, an expiry
 * moved), unless the hint is not of the owner's pid and the caller is:
 * the owner's own process, since no other live process has that pid (one
 * that reused the pid of a dead owner would put a live process where the
 * pid alone was asked: the lock waits for its exptime, as it did for the
 * pid).  A hint of the owner's pid is never overwritten: neither the live
 * owner's nor a dead one's, which tells it dead.
 */
static inline uint64_t
slot_swap_hint(slot_t *s, const slot_ticket_t *seen, uint64_t owner,
    uint64_t process)
{
    if (owner != seen->state.owner) {
        slot_hint(s, process);
        return process;
    }
    if (process != 0 && (uint32_t) process == (uint32_t) (owner >> 32)
        && slot_process_of(owner, __atomic_load_n(&s->process,
                                                  __ATOMIC_RELAXED)) == 0)
    {
        WORDSTORE64(s->process, process);
        return process;
    }
    return seen->process;
}

/* MARKED alone toggling keeps the serial: a holder's ticket then still
 * names its lock (slot_not_ours); any other change bumps it. */
static inline slot_state_t
slot_swapped(const slot_ticket_t *seen, uint64_t owner, uint64_t flags,
    int64_t expiry)
{
    slot_state_t  want;
    uint64_t      old = seen->state.stamp;

    want.owner = owner;
    want.stamp = slot_stamp(SLOT_LIVE | (flags & SLOT_MARKED), expiry, old);
    if (owner == seen->state.owner
        && (want.stamp >> SLOT_EXPIRY_SHIFT) == (old >> SLOT_EXPIRY_SHIFT))
    {
        want.stamp = (old & ~SLOT_MARKED) | (flags & SLOT_MARKED);
    }
    return want;
}

int
slot_swap(slots_t *t, const slot_ticket_t *seen, uint64_t owner,
    uint64_t process, uint64_t flags, int64_t expiry, slot_ticket_t *tk)
{
    slot_state_t  st = seen->state, want;
    slot_t       *s;

    if (!t->cas16 || (seen->index & SLOT_SPILL)) {
        return SLOT_SLOW;
    }
    if (seen->index > t->mask || !(st.stamp & SLOT_LIVE)) {
        return SLOT_GONE;
    }
    s = &t->slots[seen->index];
    want = slot_swapped(seen, owner, flags, expiry);
    if (!slot_cas(s, &st, want)) {
        return SLOT_GONE;
    }
    process = slot_swap_hint(s, seen, owner, process);
    slot_ticket(tk, seen->index, want, process);
    return SLOT_OK;
}


/* ---- the mutex held ---- */

void
slot_format(slot_hdr_t *hdr, slot_t *slots, uint32_t n)
{
    memset(hdr, 0, sizeof(*hdr));
    memset(slots, 0, (size_t) n * (sizeof(slot_t) + sizeof(slot_mark_t)));
    hdr->nslots = n;
}

void
slot_attach(slots_t *t, slot_hdr_t *hdr, slot_t *slots, uint32_t n,
    int cas16)
{
    t->hdr = hdr;
    t->slots = slots;
    t->marks = (slot_mark_t *) (slots + n);
    t->mask = n - 1;
    t->cas16 = cas16 < 0 ? slot_cas16() : cas16;
    t->chunks = NULL;
    t->nchunks = 0;
    t->take = NULL;
    t->give = NULL;
    t->ctx = NULL;
}

void
slot_attach_spill(slots_t *t, char *chunks, uint32_t nchunks,
    slot_take_fn take, slot_give_fn give, void *ctx)
{
    t->chunks = chunks;
    t->nchunks = nchunks;
    t->take = take;
    t->give = give;
    t->ctx = ctx;
}

/* key's spilled slot, on its home's chain (the mutex held: nothing moves
 * meanwhile); *at: its ticket index */
static int
slot_find_spilled(slots_t *t, int kind, const char *key, size_t klen,
    uint32_t hash, uint32_t *at, slot_state_t *st, uint64_t *process)
{
    uint32_t      word = slot_len_word(kind, klen), c, n;
    slot_mark_t  *r;
    slot_t       *s;
    slot_state_t  a;

    for (c = t->marks[hash & t->mask].spill, n = 0; c != 0 && n < t->nchunks;
         c = r->spill, n++)
    {
        s = slot_spilled(t, c, &r);
        if (s == NULL) {
            break;
        }
        a = slot_load(s);
        if ((a.stamp & (SLOT_LIVE | SLOT_DEAD)) == SLOT_LIVE
            && s->hash == hash && s->key_len == word
            && slot_key_is(s, key, klen))
        {
            *at = SLOT_SPILL | c;
            *st = a;
            *process = slot_process_of(a.owner, s->process);
            return FIND_FOUND;
        }
    }
    return FIND_ABSENT;
}

/* The probe under the mutex: nobody changes a key meanwhile, so a state
 * that moved during the compare only means the holder changed; again.
 * Then the spilled slots of the key's home. */
static int
slot_find_locked(slots_t *t, int kind, const char *key, size_t klen,
    uint32_t hash, uint32_t *at, slot_state_t *st, uint32_t *hole,
    uint64_t *process)
{
    int  rc, n;

    for (n = 0; n < 1000; n++) {
        rc = slot_find(t, kind, key, klen, hash, at, st, hole, process);
        if (rc == FIND_ABSENT && t->nchunks != 0) {
            return slot_find_spilled(t, kind, key, klen, hash, at, st,
                                     process);
        }
        if (rc != FIND_RETRY) {
            return rc;
        }
    }
    return FIND_ABSENT;     /* unreachable but for a broken table */
}

/* the slot of a ticket index slot_find_locked answered */
static inline slot_t *
slot_found(const slots_t *t, uint32_t i)
{
    slot_mark_t  *r;

    return i & SLOT_SPILL ? slot_spilled(t, i & ~SLOT_SPILL, &r)
                          : &t->slots[i];
}

/* Makes key's slot at hole (EMPTY or DEAD), held by owner. */
static int
slot_create_locked(slots_t *t, uint32_t hole, int kind, const char *key,
    size_t klen, uint32_t hash, uint64_t owner, uint64_t process,
    int64_t expiry, slot_ticket_t *tk)
{
    slot_t        *s = &t->slots[hole];
    slot_state_t   st = slot_load(s), want;
    int            was_dead = (st.stamp & SLOT_DEAD) != 0;

    /* EMPTY and DEAD slots are changed only under the mutex: this is
     * their state; the key goes in before the CAS that publishes it */
    slot_key_write(s, kind, key, klen, hash);
    WORDSTORE64(s->process, process);
    want.owner = owner;
    want.stamp = slot_stamp(SLOT_LIVE, expiry, st.stamp);
    if (!slot_change(t, hole, &st, want)) {
        return SLOT_SLOW;                   /* a broken table */
    }
    t->hdr->live++;
    if (was_dead) {
        t->hdr->dead--;
    }
    slot_ticket(tk, hole, want, process);
    return SLOT_OK;
}

/* at most 7/8 of the slots in use, so that probes stay short and end */
static inline int
slot_room(const slots_t *t, uint32_t used)
{
    return used + 1 <= (t->mask + 1) - ((t->mask + 1) >> 3);
}

/*
 * Makes key's slot spilled, held by owner: two chunks taken, the slot and
 * its record written where nobody reaches them, then published by one
 * store at the head of its home's chain.  SLOT_FULL without two chunks.
 */
static int
slot_spill_locked(slots_t *t, int kind, const char *key, size_t klen,
    uint32_t hash, uint64_t owner, uint64_t process, int64_t expiry,
    int64_t now, slot_ticket_t *tk)
{
    uint32_t      home = hash & t->mask, sc, c, serial;
    slot_mark_t  *r;
    slot_t       *s;
    slot_state_t  want;

    (void) now;
    if (t->take == NULL || t->take(t->ctx, &sc, &c) != 0) {
        return SLOT_FULL;
    }
    s = slot_chunk(t, sc);
    r = slot_chunk(t, c);
    slot_key_write(s, kind, key, klen, hash);
    WORDSTORE64(s->process, process);
    /* the serial from the table's counter, not from what the chunk held:
     * a slot spilled again into these chunks is not an earlier ticket's */
    serial = t->hdr->spill_serial++;
    want.owner = owner;
    want.stamp = slot_stamp(SLOT_LIVE, expiry, serial);
    WORDSTORE64(s->state.owner, want.owner);
    WORDSTORE64(s->state.stamp, want.stamp);
    WORDSTORE32(r->seq, 0);
    WORDSTORE32(r->slot, sc);
    WORDSTORE32(r->spill, t->marks[home].spill);
    WORDSTORE32(t->marks[home].spill, c);           /* published */
    t->hdr->spilled++;
    slot_ticket(tk, SLOT_SPILL | c, want, process);
    return SLOT_OK;
}

int
slot_acquire_locked(slots_t *t, int kind, const char *key, size_t klen,
    uint32_t hash, uint64_t owner, uint64_t process, int64_t expiry,
    int64_t now, slot_ticket_t *tk)
{
    uint32_t      i, hole, n;
    slot_state_t  st, want;
    uint64_t      holder;
    slot_t       *s;
    int           rc, floor_reclaimed = 0, all_reclaimed = 0;

    for (n = 0; n < 1000; n++) {
        if (slot_find_locked(t, kind, key, klen, hash, &i, &st, &hole,
                             &holder)
            == FIND_ABSENT)
        {
            if (hole != UINT32_MAX
                && slot_room(t, t->hdr->live + t->hdr->dead))
            {
                return slot_create_locked(t, hole, kind, key, klen, hash,
                                          owner, process, expiry, tk);
            }
            /* the floor full: its free slots reclaimed (a walk of the
             * floor: once per 64 slots spilled, not at every one) */
            if (!floor_reclaimed && (t->hdr->spilled & 63) == 0) {
                floor_reclaimed = 1;
                if (slot_reclaim_locked(t, now, 0) > 0) {
                    continue;
                }
            }
            if (hole != UINT32_MAX && slot_room(t, t->hdr->live)) {
                return slot_create_locked(t, hole, kind, key, klen, hash,
                                          owner, process, expiry, tk);
            }
            rc = slot_spill_locked(t, kind, key, klen, hash, owner, process,
                                   expiry, now, tk);
            if (rc != SLOT_FULL || all_reclaimed) {
                return rc;
            }
            /* no chunk left: every free or expired slot, floor and
             * spilled, reclaimed, then again */
            all_reclaimed = floor_reclaimed = 1;
            if (slot_reclaim_locked(t, now, 1) == 0) {
                return SLOT_FULL;
            }
            continue;
        }
        /* the key's slot: as the lock-free acquire, with the mutex's
         * write (lock-free callers may still race our CAS on a floor
         * slot: each lost race is someone else's change, and counts as a
         * try) */
        s = slot_found(t, i);
        if (s == NULL) {
            return SLOT_SLOW;               /* a broken chain */
        }
        for ( ; n < 1000 && (st.stamp & SLOT_LIVE); n++) {
            if (st.owner != 0 && !slot_expired(st.stamp, now)) {
                slot_ticket(tk, i, st, holder);
                return SLOT_HELD;
            }
            if (st.stamp & SLOT_MARKED) {
                slot_ticket(tk, i, st, holder);
                return SLOT_MARKED_STATE;
            }
            want.owner = owner;
            want.stamp = slot_stamp(SLOT_LIVE, expiry, st.stamp);
            slot_hint(s, process);
            if (slot_change_at(t, s, i, &st, want)) {
                slot_hint(s, process);
                slot_ticket(tk, i, want, process);
                return SLOT_OK;
            }
            holder = 0;
        }
        if (n >= 1000 && (st.stamp & SLOT_LIVE)) {
            /* others kept winning the slot: it is theirs */
            slot_ticket(tk, i, st, 0);
            return SLOT_HELD;
        }
    }
    return SLOT_SLOW;
}

/* A spilled slot is given back as soon as it is free (released, its
 * mark gone with it: the CAS was from an unmarked state). */
int
slot_release_locked(slots_t *t, const slot_ticket_t *tk)
{
    slot_state_t  st = tk->state, want;
    slot_mark_t  *r;
    uint32_t     *link;
    slot_t       *s = slot_locate(t, tk->index, &r, &link);

    if (s == NULL) {
        return SLOT_GONE;
    }
    want.owner = 0;
    want.stamp = slot_stamp(SLOT_LIVE, 0, st.stamp);
    if (!slot_change_at(t, s, tk->index, &st, want)) {
        return slot_not_ours(st, tk);
    }
    if (link != NULL) {
        slot_unspill(t, link, tk->index & ~SLOT_SPILL);
    }
    return SLOT_OK;
}

int
slot_extend_locked(slots_t *t, slot_ticket_t *tk, int64_t expiry)
{
    slot_state_t  st = tk->state, want;
    slot_mark_t  *r;
    uint32_t     *link;
    slot_t       *s = slot_locate(t, tk->index, &r, &link);

    if (s == NULL) {
        return SLOT_GONE;
    }
    want.owner = st.owner;
    want.stamp = slot_stamp(SLOT_LIVE, expiry, st.stamp);
    if (slot_change_at(t, s, tk->index, &st, want)) {
        tk->state = want;
        return SLOT_OK;
    }
    return slot_not_ours(st, tk);
}

int
slot_look_locked(slots_t *t, int kind, const char *key, size_t klen,
    uint32_t hash, slot_ticket_t *tk)
{
    uint32_t      i, hole;
    slot_state_t  st;
    uint64_t      holder;

    if (slot_find_locked(t, kind, key, klen, hash, &i, &st, &hole, &holder)
        != FIND_FOUND)
    {
        return SLOT_ABSENT;
    }
    slot_ticket(tk, i, st, holder);
    return SLOT_OK;
}

int
slot_swap_locked(slots_t *t, const slot_ticket_t *seen, uint64_t owner,
    uint64_t process, uint64_t flags, int64_t expiry, slot_ticket_t *tk)
{
    slot_state_t  st = seen->state, want;
    slot_mark_t  *r;
    uint32_t     *link;
    slot_t       *s = slot_locate(t, seen->index, &r, &link);

    if (s == NULL || !(st.stamp & SLOT_LIVE)) {
        return SLOT_GONE;
    }
    want = slot_swapped(seen, owner, flags, expiry);
    if (!slot_change_at(t, s, seen->index, &st, want)) {
        return SLOT_GONE;
    }
    process = slot_swap_hint(s, seen, owner, process);
    slot_ticket(tk, seen->index, want, process);
    /* a spilled slot swapped free (a group's head counting none) */
    if (link != NULL && owner == 0 && !(want.stamp & SLOT_MARKED)) {
        slot_unspill(t, link, seen->index & ~SLOT_SPILL);
    }
    return SLOT_OK;
}

int
slot_mark_locked(slots_t *t, const slot_ticket_t *seen, const slot_mark_t *m,
    slot_ticket_t *tk)
{
    slot_state_t  st = seen->state, want;
    slot_mark_t  *r;
    uint32_t      i = seen->index, *link;
    slot_t       *s = slot_locate(t, i, &r, &link);

    if (s == NULL || !(st.stamp & SLOT_LIVE) || st.owner == 0
        || !slot_same(slot_load(s), st))
    {
        return SLOT_GONE;
    }
    WORDSTORE32(r->seq, r->seq | 1);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    WORDSTORE64(r->owner, m->owner);
    WORDSTORE64(r->process, m->process);
    WORDSTORE64(r->expiry, (uint64_t) m->expiry);
    WORDSTORE64(r->since, (uint64_t) m->since);
    WORDSTORE64(r->until, (uint64_t) m->until);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    WORDSTORE32(r->seq, r->seq + 1);
    /* then the flag (a CAS from seen to itself when marked already: the
     * record is for that very state) */
    want.owner = st.owner;
    want.stamp = st.stamp | SLOT_MARKED;
    if (!slot_change_at(t, s, i, &st, want)) {
        return SLOT_GONE;
    }
    slot_ticket(tk, i, want, seen->process);
    return SLOT_OK;
}

/* The record r of slot s, read whole for the state `at`. */
static int
slot_mark_copy(const slot_t *s, const slot_mark_t *r, const slot_ticket_t *at,
    slot_mark_t *m)
{
    uint32_t  seq;

    seq = __atomic_load_n(&r->seq, __ATOMIC_ACQUIRE);
    if (seq & 1) {
        return SLOT_GONE;
    }
    m->owner = __atomic_load_n(&r->owner, __ATOMIC_RELAXED);
    m->process = __atomic_load_n(&r->process, __ATOMIC_RELAXED);
    m->expiry = __atomic_load_n(&r->expiry, __ATOMIC_RELAXED);
    m->since = __atomic_load_n(&r->since, __ATOMIC_RELAXED);
    m->until = __atomic_load_n(&r->until, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&r->seq, __ATOMIC_RELAXED) != seq
        || !slot_same(slot_load(s), at->state))
    {
        return SLOT_GONE;
    }
    m->seq = seq;
    m->spill = 0;
    m->slot = 0;
    m->pad = 0;
    return SLOT_OK;
}

int
slot_mark_read(slots_t *t, const slot_ticket_t *at, slot_mark_t *m)
{
    if (at->index & SLOT_SPILL) {
        return SLOT_SLOW;
    }
    if (at->index > t->mask || !(at->state.stamp & SLOT_MARKED)) {
        return SLOT_GONE;
    }
    return slot_mark_copy(&t->slots[at->index], &t->marks[at->index], at, m);
}

int
slot_mark_read_locked(slots_t *t, const slot_ticket_t *at, slot_mark_t *m)
{
    slot_mark_t  *r;
    uint32_t     *link;
    slot_t       *s = slot_locate(t, at->index, &r, &link);

    if (s == NULL || !(at->state.stamp & SLOT_MARKED)) {
        return SLOT_GONE;
    }
    return slot_mark_copy(s, r, at, m);
}

int
slot_state_at(slots_t *t, uint32_t i, slot_state_t *st, uint64_t *process)
{
    slot_mark_t  *r;
    uint32_t     *link;
    slot_t       *s = slot_locate(t, i, &r, &link);
    slot_state_t  b;
    int           n;

    if (s == NULL) {
        return -1;
    }
    for (n = 0; n < 1000; n++) {
        *st = slot_load(s);
        *process = __atomic_load_n(&s->process, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        b = slot_load(s);
        if (slot_same(*st, b)) {
            break;
        }
    }
    *process = slot_process_of(st->owner, *process);
    return 0;
}

void
slot_hint_locked(slots_t *t, uint32_t i, uint64_t process)
{
    slot_mark_t  *r;
    uint32_t     *link;
    slot_t       *s = slot_locate(t, i, &r, &link);

    if (s != NULL) {
        slot_hint(s, process);
    }
}

/* Slot s read whole (lock-free: 0 if it changed meanwhile), as slot_info
 * gives it; index: its ticket's. */
static int
slot_info_of(const slot_t *s, uint32_t index, slot_ticket_t *tk, int *kind,
    char *key, uint32_t *klen, uint32_t *shown, uint32_t *hash)
{
    slot_state_t   a, b;
    uint64_t       process;
    uint32_t       len, h;

    a = slot_load(s);
    if ((a.stamp & (SLOT_LIVE | SLOT_DEAD)) != SLOT_LIVE) {
        return 0;
    }
    len = __atomic_load_n(&s->key_len, __ATOMIC_RELAXED);
    h = __atomic_load_n(&s->hash, __ATOMIC_RELAXED);
    memcpy(key, s->key, SLOT_KEY_INLINE);
    process = __atomic_load_n(&s->process, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    b = slot_load(s);
    *kind = (int) (len >> SLOT_KIND_SHIFT);
    len &= SLOT_LEN_MASK;
    if (!slot_same(a, b) || len == 0) {
        return 0;
    }
    *klen = len;
    *hash = h;
    *shown = len <= SLOT_KEY_INLINE ? len : SLOT_KEY_PREFIX;
    slot_ticket(tk, index, a, slot_process_of(a.owner, process));
    return 1;
}

int
slot_info(slots_t *t, uint32_t i, slot_ticket_t *tk, int *kind, char *key,
    uint32_t *klen, uint32_t *shown, uint32_t *hash)
{
    if (i > t->mask) {
        return 0;
    }
    return slot_info_of(&t->slots[i], i, tk, kind, key, klen, shown, hash);
}

int
slot_spill_info_locked(slots_t *t, uint32_t home, uint32_t pos,
    slot_ticket_t *tk, int *kind, char *key, uint32_t *klen, uint32_t *shown,
    uint32_t *hash)
{
    uint32_t      c, n;
    slot_mark_t  *r;
    slot_t       *s = NULL;

    if (home > t->mask || t->nchunks == 0) {
        return 0;
    }
    for (c = t->marks[home].spill, n = 0; c != 0 && n <= pos;
         c = r->spill, n++)
    {
        s = slot_spilled(t, c, &r);
        if (s == NULL || n >= t->nchunks) {
            return 0;
        }
        if (n == pos) {
            return slot_info_of(s, SLOT_SPILL | c, tk, kind, key, klen,
                                shown, hash);
        }
    }
    return 0;
}

uint32_t
slot_spill_chunks(slots_t *t, void (*fn)(void *arg, uint32_t c), void *arg)
{
    uint32_t      h, c, n, total = 0;
    slot_mark_t  *r;

    if (t->nchunks == 0) {
        return 0;
    }
    for (h = 0; h <= t->mask; h++) {
        for (c = t->marks[h].spill, n = 0; c != 0 && n < t->nchunks;
             c = r->spill, n++)
        {
            if (slot_spilled(t, c, &r) == NULL) {
                break;
            }
            fn(arg, c);
            fn(arg, r->slot);
            total += 2;
        }
    }
    return total;
}

/* The spilled slots free, or expired and unmarked, given back. */
static uint32_t
slot_reclaim_spilled(slots_t *t, int64_t now)
{
    uint32_t      h, c, n, freed = 0, *link;
    slot_mark_t  *r;
    slot_t       *s;
    slot_state_t  st;

    for (h = 0; h <= t->mask && t->nchunks != 0; h++) {
        link = &t->marks[h].spill;
        for (n = 0; (c = *link) != 0 && n < t->nchunks; n++) {
            s = slot_spilled(t, c, &r);
            if (s == NULL) {
                break;
            }
            st = slot_load(s);
            if (!(st.stamp & SLOT_MARKED)
                && (st.owner == 0 || slot_expired(st.stamp, now)))
            {
                slot_unspill(t, link, c);
                freed++;
                continue;               /* *link is the next one now */
            }
            link = &r->spill;
        }
    }
    return freed;
}

uint32_t
slot_reclaim_locked(slots_t *t, int64_t now, int spill)
{
    uint32_t      i, j, n = t->mask + 1, freed = 0, k;
    slot_state_t  st, want;

    if (spill) {
        freed = slot_reclaim_spilled(t, now);
    }

    for (i = 0; i < n; i++) {
        st = slot_load(&t->slots[i]);
        while ((st.stamp & SLOT_LIVE) && !(st.stamp & SLOT_MARKED)
               && (st.owner == 0 || slot_expired(st.stamp, now)))
        {
            want.owner = 0;
            want.stamp = slot_stamp(SLOT_DEAD, 0, st.stamp);
            if (slot_change(t, i, &st, want)) {
                t->hdr->live--;
                t->hdr->dead++;
                freed++;
                break;
            }
        }
    }
    /* a run of DEAD slots ending at an EMPTY one is on no key's probe */
    for (i = 0; i < n; i++) {
        st = slot_load(&t->slots[i]);
        if (st.stamp & SLOT_FLAGS) {
            continue;
        }
        for (k = 1, j = (i - 1) & t->mask; k < n; k++, j = (j - 1) & t->mask)
        {
            st = slot_load(&t->slots[j]);
            if (!(st.stamp & SLOT_DEAD)) {
                break;
            }
            want.owner = 0;
            want.stamp = (st.stamp + 1) & SLOT_SERIAL_MASK;
            if (!slot_change(t, j, &st, want)) {
                break;
            }
            t->hdr->dead--;
        }
    }
    return freed;
}

/* A mark record left half written (seq odd): its slot's MARKED flag
 * cleared (the mark is dropped; its waiter marks again), seq even. */
static void
slot_recover_mark(slots_t *t, slot_t *s, uint32_t i, slot_mark_t *r)
{
    slot_state_t  st, want;
    int           n;

    if (!(r->seq & 1)) {
        return;
    }
    st = slot_load(s);
    for (n = 0; n < 1000 && (st.stamp & SLOT_MARKED); n++) {
        want.owner = st.owner;
        want.stamp = st.stamp & ~SLOT_MARKED;
        if (slot_change_at(t, s, i, &st, want)) {
            break;
        }
    }
    WORDSTORE32(r->seq, r->seq + 1);
}

void
slot_recover_locked(slots_t *t)
{
    slot_hdr_t   *h = t->hdr;
    uint32_t      i, c, n, live = 0, dead = 0, spilled = 0, *link;
    uint64_t      stamp;
    slot_mark_t  *r;
    slot_t       *s;

    if (h->undo_active) {
        s = slot_locate(t, h->undo_index, &r, &link);
        if (s != NULL) {
            WORDSTORE64(s->state.owner, h->undo_state.owner);
            WORDSTORE64(s->state.stamp, h->undo_state.stamp);
        }
        WORDSTORE32(h->undo_active, 0);
    }
    for (i = 0; i <= t->mask; i++) {
        slot_recover_mark(t, &t->slots[i], i, &t->marks[i]);
        stamp = __atomic_load_n(&t->slots[i].state.stamp, __ATOMIC_ACQUIRE);
        live += (stamp & SLOT_LIVE) != 0;
        dead += (stamp & SLOT_DEAD) != 0;
        for (c = t->marks[i].spill, n = 0; c != 0 && n < t->nchunks;
             c = r->spill, n++)
        {
            s = slot_spilled(t, c, &r);
            if (s == NULL) {
                break;
            }
            slot_recover_mark(t, s, SLOT_SPILL | c, r);
            spilled++;
        }
    }
    h->live = live;
    h->dead = dead;
    h->spilled = spilled;
}

/* One slot's checks (a floor slot at index i, or a spilled one, whose
 * ticket index i has SLOT_SPILL): 0, or -1 with msg. */
static int
slot_verify_one(slots_t *t, const slot_t *s, uint32_t i,
    const slot_mark_t *r, uint32_t *live, uint32_t *dead, char *msg,
    size_t msg_size)
{
    uint32_t       at, hole, n, len;
    slot_state_t   st, found;
    uint64_t       flags, process;
    int            kind;

    /* one state, not halves of two (lock-free callers change a floor
     * slot's meanwhile): read until two reads agree */
    st = slot_load(s);
    for (n = 0; n < 1000; n++) {
        found = slot_load(s);
        if (slot_same(st, found)) {
            break;
        }
        st = found;
    }
    flags = st.stamp & SLOT_FLAGS;
    if (flags & ~(SLOT_LIVE | SLOT_DEAD | SLOT_MARKED)
        || ((flags & SLOT_LIVE) && (flags & SLOT_DEAD))
        || (!(flags & SLOT_LIVE) && (st.owner != 0
                                     || (flags & SLOT_MARKED)))
        || ((flags & SLOT_MARKED) && st.owner == 0)
        || ((i & SLOT_SPILL) && !(flags & SLOT_LIVE)))
    {
        snprintf(msg, msg_size, "slot %s%u: bad state %016llx:%016llx",
                 i & SLOT_SPILL ? "spilled " : "", i & ~SLOT_SPILL,
                 (unsigned long long) st.owner,
                 (unsigned long long) st.stamp);
        return -1;
    }
    *dead += (flags & SLOT_DEAD) != 0;
    if ((flags & SLOT_MARKED) && (r->seq & 1)) {
        snprintf(msg, msg_size, "slot %u: marked, its mark half written",
                 i & ~SLOT_SPILL);
        return -1;
    }
    if (!(flags & SLOT_LIVE)) {
        return 0;
    }
    *live += 1;
    kind = (int) (s->key_len >> SLOT_KIND_SHIFT);
    len = s->key_len & SLOT_LEN_MASK;
    if (len == 0 || len > 65535
        || (len <= SLOT_KEY_INLINE && hash_bytes(s->key, len) != s->hash))
    {
        snprintf(msg, msg_size, "slot %u: bad key (kind %d, length %u)",
                 i & ~SLOT_SPILL, kind, len);
        return -1;
    }
    /* its own probe reaches it first: no EMPTY slot, no twin before (a
     * spilled key: none in the floor, none before it on its chain) */
    if (len <= SLOT_KEY_INLINE
        && (slot_find_locked(t, kind, s->key, len, s->hash, &at, &found,
                             &hole, &process) != FIND_FOUND || at != i))
    {
        snprintf(msg, msg_size, "slot %u: its key's probe does not "
                 "reach it", i & ~SLOT_SPILL);
        return -1;
    }
    return 0;
}

/* Home h's chain: each record and slot in range, used once (seen), the
 * slot's home h, each slot as slot_verify_one checks it. */
static int
slot_verify_chain(slots_t *t, uint32_t h, uint8_t *seen, uint32_t *spilled,
    char *msg, size_t msg_size)
{
    uint32_t      c, n, live = 0, dead = 0;
    slot_mark_t  *r;
    slot_t       *s;

    for (c = t->marks[h].spill, n = 0; c != 0; c = r->spill, n++) {
        s = slot_spilled(t, c, &r);
        if (s == NULL || n >= t->nchunks || seen[c] || seen[r->slot]) {
            snprintf(msg, msg_size, "slot %u: its chain of spilled slots is "
                     "broken at chunk %u", h, c);
            return -1;
        }
        seen[c] = seen[r->slot] = 1;
        if ((s->hash & t->mask) != h) {
            snprintf(msg, msg_size, "spilled slot %u: on the chain of slot "
                     "%u, not of its home", c, h);
            return -1;
        }
        if (slot_verify_one(t, s, SLOT_SPILL | c, r, &live, &dead, msg,
                            msg_size) != 0)
        {
            return -1;
        }
        *spilled += 1;
    }
    return 0;
}

int
slot_verify_locked(slots_t *t, char *msg, size_t msg_size)
{
    uint32_t   i, live = 0, dead = 0, spilled = 0;
    uint8_t   *seen = NULL;
    int        rc = 0;

    if (t->hdr->nslots != t->mask + 1) {
        snprintf(msg, msg_size, "slot table: %u slots, %u at attach",
                 t->hdr->nslots, t->mask + 1);
        return -1;
    }
    if (t->nchunks != 0) {
        seen = calloc((size_t) t->nchunks + 1, 1);
        if (seen == NULL) {
            snprintf(msg, msg_size, "out of memory while verifying");
            return -1;
        }
    }
    for (i = 0; i <= t->mask && rc == 0; i++) {
        rc = slot_verify_one(t, &t->slots[i], i, &t->marks[i], &live, &dead,
                             msg, msg_size);
        if (rc == 0 && t->marks[i].spill != 0) {
            if (seen == NULL) {
                snprintf(msg, msg_size, "slot %u: a chain of spilled slots "
                         "in a table that spills nowhere", i);
                rc = -1;
            } else {
                rc = slot_verify_chain(t, i, seen, &spilled, msg, msg_size);
            }
        }
    }
    free(seen);
    if (rc != 0) {
        return rc;
    }
    if (live != t->hdr->live || dead != t->hdr->dead
        || spilled != t->hdr->spilled)
    {
        snprintf(msg, msg_size, "slot table: %u live, %u dead and %u "
                 "spilled, counted %u, %u and %u", live, dead, spilled,
                 t->hdr->live, t->hdr->dead, t->hdr->spilled);
        return -1;
    }
    return 0;
}
