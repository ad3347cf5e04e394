#include "slot.h"
#include "hash.h"
#include "wordstore.h"

#include <stdio.h>
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
slot_change(slots_t *t, uint32_t i, slot_state_t *seen, slot_state_t want)
{
    slot_t      *s = &t->slots[i];
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

    if (!t->cas16) {
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
            return SLOT_ABSENT;
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

    if (!t->cas16) {
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
}

/* The probe under the mutex: nobody changes a key meanwhile, so a state
 * that moved during the compare only means the holder changed; again. */
static int
slot_find_locked(slots_t *t, int kind, const char *key, size_t klen,
    uint32_t hash, uint32_t *at, slot_state_t *st, uint32_t *hole,
    uint64_t *process)
{
    int  rc, n;

    for (n = 0; n < 1000; n++) {
        rc = slot_find(t, kind, key, klen, hash, at, st, hole, process);
        if (rc != FIND_RETRY) {
            return rc;
        }
    }
    return FIND_ABSENT;     /* unreachable but for a broken table */
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

int
slot_acquire_locked(slots_t *t, int kind, const char *key, size_t klen,
    uint32_t hash, uint64_t owner, uint64_t process, int64_t expiry,
    int64_t now, slot_ticket_t *tk)
{
    uint32_t      i, hole, n;
    slot_state_t  st, want;
    uint64_t      holder;
    int           reclaimed = 0;

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
            if (reclaimed || slot_reclaim_locked(t, now) == 0) {
                if (hole != UINT32_MAX && slot_room(t, t->hdr->live)) {
                    return slot_create_locked(t, hole, kind, key, klen,
                                              hash, owner, process, expiry,
                                              tk);
                }
                return SLOT_FULL;
            }
            reclaimed = 1;
            continue;
        }
        /* the key's slot: as the lock-free acquire, with the mutex's
         * write (lock-free callers may still race our CAS: each lost race
         * is someone else's change, and counts as a try) */
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
            slot_hint(&t->slots[i], process);
            if (slot_change(t, i, &st, want)) {
                slot_hint(&t->slots[i], process);
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

int
slot_release_locked(slots_t *t, const slot_ticket_t *tk)
{
    slot_state_t  st = tk->state, want;

    if (tk->index > t->mask) {
        return SLOT_GONE;
    }
    want.owner = 0;
    want.stamp = slot_stamp(SLOT_LIVE, 0, st.stamp);
    if (slot_change(t, tk->index, &st, want)) {
        return SLOT_OK;
    }
    return slot_not_ours(st, tk);
}

int
slot_extend_locked(slots_t *t, slot_ticket_t *tk, int64_t expiry)
{
    slot_state_t  st = tk->state, want;

    if (tk->index > t->mask) {
        return SLOT_GONE;
    }
    want.owner = st.owner;
    want.stamp = slot_stamp(SLOT_LIVE, expiry, st.stamp);
    if (slot_change(t, tk->index, &st, want)) {
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
    slot_t       *s;

    if (seen->index > t->mask || !(st.stamp & SLOT_LIVE)) {
        return SLOT_GONE;
    }
    s = &t->slots[seen->index];
    want = slot_swapped(seen, owner, flags, expiry);
    if (!slot_change(t, seen->index, &st, want)) {
        return SLOT_GONE;
    }
    process = slot_swap_hint(s, seen, owner, process);
    slot_ticket(tk, seen->index, want, process);
    return SLOT_OK;
}

int
slot_mark_locked(slots_t *t, const slot_ticket_t *seen, const slot_mark_t *m,
    slot_ticket_t *tk)
{
    slot_state_t  st = seen->state, want;
    slot_mark_t  *r;
    uint32_t      i = seen->index;

    if (i > t->mask || !(st.stamp & SLOT_LIVE) || st.owner == 0
        || !slot_same(slot_load(&t->slots[i]), st))
    {
        return SLOT_GONE;
    }
    r = &t->marks[i];
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
    if (!slot_change(t, i, &st, want)) {
        return SLOT_GONE;
    }
    slot_ticket(tk, i, want, seen->process);
    return SLOT_OK;
}

int
slot_mark_read(slots_t *t, const slot_ticket_t *at, slot_mark_t *m)
{
    const slot_mark_t  *r;
    uint32_t            seq;

    if (at->index > t->mask || !(at->state.stamp & SLOT_MARKED)) {
        return SLOT_GONE;
    }
    r = &t->marks[at->index];
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
        || !slot_same(slot_load(&t->slots[at->index]), at->state))
    {
        return SLOT_GONE;
    }
    m->seq = seq;
    m->pad = 0;
    m->spare = 0;
    return SLOT_OK;
}

int
slot_info(slots_t *t, uint32_t i, slot_ticket_t *tk, int *kind, char *key,
    uint32_t *klen, uint32_t *shown, uint32_t *hash)
{
    const slot_t  *s;
    slot_state_t   a, b;
    uint64_t       process;
    uint32_t       len, h;

    if (i > t->mask) {
        return 0;
    }
    s = &t->slots[i];
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
    slot_ticket(tk, i, a, slot_process_of(a.owner, process));
    return 1;
}

uint32_t
slot_reclaim_locked(slots_t *t, int64_t now)
{
    uint32_t      i, j, n = t->mask + 1, freed = 0, k;
    slot_state_t  st, want;

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

void
slot_recover_locked(slots_t *t)
{
    slot_hdr_t  *h = t->hdr;
    uint32_t     i, live = 0, dead = 0;
    uint64_t     stamp;

    if (h->undo_active) {
        if (h->undo_index <= t->mask) {
            WORDSTORE64(t->slots[h->undo_index].state.owner,
                        h->undo_state.owner);
            WORDSTORE64(t->slots[h->undo_index].state.stamp,
                        h->undo_state.stamp);
        }
        WORDSTORE32(h->undo_active, 0);
    }
    for (i = 0; i <= t->mask; i++) {
        /* a mark record left half written: its mark is dropped */
        if (t->marks[i].seq & 1) {
            slot_state_t  st = slot_load(&t->slots[i]), want;
            int           n;

            for (n = 0; n < 1000 && (st.stamp & SLOT_MARKED); n++) {
                want.owner = st.owner;
                want.stamp = st.stamp & ~SLOT_MARKED;
                if (slot_change(t, i, &st, want)) {
                    break;
                }
            }
            WORDSTORE32(t->marks[i].seq, t->marks[i].seq + 1);
        }
        stamp = __atomic_load_n(&t->slots[i].state.stamp, __ATOMIC_ACQUIRE);
        live += (stamp & SLOT_LIVE) != 0;
        dead += (stamp & SLOT_DEAD) != 0;
    }
    h->live = live;
    h->dead = dead;
}

int
slot_verify_locked(slots_t *t, char *msg, size_t msg_size)
{
    uint32_t       i, at, hole, live = 0, dead = 0, n, len;
    slot_state_t   st, found;
    const slot_t  *s;
    uint64_t       flags, process;
    int            kind;

    if (t->hdr->nslots != t->mask + 1) {
        snprintf(msg, msg_size, "slot table: %u slots, %u at attach",
                 t->hdr->nslots, t->mask + 1);
        return -1;
    }
    for (i = 0; i <= t->mask; i++) {
        s = &t->slots[i];
        /* one state, not halves of two (lock-free callers change it
         * meanwhile): read until two reads agree */
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
            || ((flags & SLOT_MARKED) && st.owner == 0))
        {
            snprintf(msg, msg_size, "slot %u: bad state %016llx:%016llx", i,
                     (unsigned long long) st.owner,
                     (unsigned long long) st.stamp);
            return -1;
        }
        dead += (flags & SLOT_DEAD) != 0;
        if ((flags & SLOT_MARKED) && (t->marks[i].seq & 1)) {
            snprintf(msg, msg_size, "slot %u: marked, its mark half "
                     "written", i);
            return -1;
        }
        if (!(flags & SLOT_LIVE)) {
            continue;
        }
        live++;
        kind = (int) (s->key_len >> SLOT_KIND_SHIFT);
        len = s->key_len & SLOT_LEN_MASK;
        if (len == 0 || len > 65535
            || (len <= SLOT_KEY_INLINE && hash_bytes(s->key, len) != s->hash))
        {
            snprintf(msg, msg_size, "slot %u: bad key (kind %d, length %u)",
                     i, kind, len);
            return -1;
        }
        /* its own probe reaches it first: no EMPTY slot, no twin before */
        if (len <= SLOT_KEY_INLINE
            && (slot_find_locked(t, kind, s->key, len, s->hash, &at, &found,
                                 &hole, &process) != FIND_FOUND || at != i))
        {
            snprintf(msg, msg_size, "slot %u: its key's probe does not "
                     "reach it", i);
            return -1;
        }
    }
    if (live != t->hdr->live || dead != t->hdr->dead) {
        snprintf(msg, msg_size, "slot table: %u live and %u dead, counted "
                 "%u and %u", live, dead, t->hdr->live, t->hdr->dead);
        return -1;
    }
    return 0;
}
