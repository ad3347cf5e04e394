#include "group.h"
#include "hash.h"

#include <string.h>

#define GROUP_TRIES  100        /* a head changed by a lock-free racer */

/* ---- keys ---- */

void
group_init(group_t *g, slots_t *t, int kind, char *buf, const char *key,
    size_t klen)
{
    g->t = t;
    g->buf = buf;
    g->klen = klen;
    g->kind = kind;
    memset(buf, 0, GROUP_PREFIX);
    memcpy(buf + GROUP_PREFIX, key, klen);
    g->hash = hash_bytes(key, klen);
}

/* buf as record i's key; its hash */
static uint32_t
group_rec_key(group_t *g, uint32_t i)
{
    g->buf[0] = (char) (i >> 24);
    g->buf[1] = (char) (i >> 16);
    g->buf[2] = (char) (i >> 8);
    g->buf[3] = (char) i;
    return hash_bytes(g->buf, GROUP_PREFIX + g->klen);
}

static int
group_rec_look(group_t *g, uint32_t i, slot_ticket_t *tk)
{
    uint32_t  h = group_rec_key(g, i);

    return slot_look_locked(g->t, g->kind, g->buf, GROUP_PREFIX + g->klen,
                            h, tk);
}

static int
group_rec_acquire(group_t *g, uint32_t i, uint64_t owner, uint64_t process,
    int64_t expiry, int64_t now, slot_ticket_t *tk)
{
    uint32_t  h = group_rec_key(g, i);

    return slot_acquire_locked(g->t, g->kind, g->buf, GROUP_PREFIX + g->klen,
                               h, owner, process, expiry, now, tk);
}

/* the head's kind: K's own lock slot for shared holds, a semaphore's
 * head of its own (its key K, as the lock's: the kind tells them apart) */
static inline int
group_head_kind(const group_t *g)
{
    return g->kind == GROUP_SHARED ? SLOT_KIND_LOCK : GROUP_SEM_HEAD;
}


/* ---- stamps ---- */

static inline uint64_t
group_expiry_of(uint64_t stamp)
{
    return stamp >> SLOT_EXPIRY_SHIFT;
}

static inline int
group_expired(uint64_t stamp, int64_t now)
{
    uint64_t  e = group_expiry_of(stamp);

    return e != SLOT_NEVER && (int64_t) e <= now;
}

/* An expiry as the slot calls take it (0: never). */
static inline int64_t
group_abs(uint64_t e)
{
    return e == SLOT_NEVER ? 0 : (int64_t) e;
}

/* the later of a stamp's expiry and `expiry` (0: never) */
static inline int64_t
group_later(uint64_t stamp, int64_t expiry)
{
    uint64_t  e = group_expiry_of(stamp);

    if (expiry <= 0 || e == SLOT_NEVER) {
        return 0;
    }
    return (int64_t) e > expiry ? (int64_t) e : expiry;
}

static inline uint64_t
group_owner(uint32_t count, uint32_t top)
{
    return count == 0 ? 0 : GROUP_TAG | (uint64_t) count << 24 | top;
}


/* ---- the head ---- */

void
group_head_locked(group_t *g, int64_t now, group_head_t *h)
{
    slot_state_t  st;

    memset(h, 0, sizeof(*h));
    if (slot_look_locked(g->t, group_head_kind(g), g->buf + GROUP_PREFIX,
                         g->klen, g->hash, &h->tk)
        != SLOT_OK)
    {
        return;
    }
    h->found = 1;
    st = h->tk.state;
    if (st.owner == 0 || group_expired(st.stamp, now)) {
        return;
    }
    if (group_is_head(st.owner)) {
        h->count = (uint32_t) (st.owner >> 24) & GROUP_MAX;
        h->top = (uint32_t) st.owner & GROUP_MAX;
    } else {
        h->exclusive = 1;
    }
}

/* The head from h's state to count and top (0: free), expiry (0: never),
 * marked: SLOT_MARKED to keep h's mark, 0 to drop it (its waiter is the
 * acquirer).  SLOT_OK; SLOT_GONE (the head moved: read it again);
 * SLOT_FULL (no slot for a new head). */
static int
group_head_set(group_t *g, const group_head_t *h, uint32_t count,
    uint32_t top, int64_t expiry, int64_t now, uint64_t marked)
{
    uint64_t        owner = group_owner(count, top);
    slot_ticket_t   tk;
    int             rc;

    if (!h->found) {
        if (owner == 0) {
            return SLOT_OK;
        }
        rc = slot_acquire_locked(g->t, group_head_kind(g),
                                 g->buf + GROUP_PREFIX, g->klen, g->hash,
                                 owner, 0, expiry, now, &tk);
        return rc == SLOT_OK || rc == SLOT_FULL ? rc : SLOT_GONE;
    }
    if (owner == 0 && h->tk.state.owner == 0) {
        return SLOT_OK;
    }
    return slot_swap_locked(g->t, &h->tk, owner, 0, marked, expiry, &tk);
}

/*
 * The head of shared holds with no reader left, marked: K goes to the
 * marked waiter if its deadline is ahead (*handed = 1), else the mark is
 * dropped and K is free.
 */
static int
group_head_handoff(group_t *g, const group_head_t *h, int64_t now,
    int *handed)
{
    slot_mark_t    m;
    slot_ticket_t  tk;
    int            rc;

    if (slot_mark_read_locked(g->t, &h->tk, &m) == SLOT_OK && m.until > now
        && m.owner != 0)
    {
        /* the waiter's process before its owner: killed between the two,
         * a releaser would leave the waiter a slot it cannot tell for its
         * own, nor for a dead holder's (a head's hint is read by nobody,
         * so this store is harmless if the swap fails) */
        slot_hint_locked(g->t, h->tk.index, m.process);
        rc = slot_swap_locked(g->t, &h->tk, m.owner, m.process, 0,
                              m.expiry > 0 ? now + m.expiry : 0, &tk);
        *handed = rc == SLOT_OK;
        return rc;
    }
    return slot_swap_locked(g->t, &h->tk, 0, 0, 0, 0, &tk);
}

/* The head to count and top, expiry (0: never), handing off at 0 if
 * marked. */
static int
group_head_count(group_t *g, const group_head_t *h, uint32_t count,
    uint32_t top, int64_t expiry, int64_t now, int *handed)
{
    uint64_t       marked = h->tk.state.stamp & SLOT_MARKED;
    slot_mark_t    m;
    slot_ticket_t  tk;

    if (count > 0 || !marked) {
        return group_head_set(g, h, count, top, expiry, now, marked);
    }
    if (g->kind == GROUP_SHARED) {
        return group_head_handoff(g, h, now, handed);
    }
    /* a semaphore's marked waiter keeps its turn: the head stays, counting
     * none (a marked slot has an owner), until the waiter comes
     * (group_marked) or its mark goes stale */
    if (slot_mark_read_locked(g->t, &h->tk, &m) == SLOT_OK && m.until > now) {
        return slot_swap_locked(g->t, &h->tk, GROUP_TAG, 0, marked, expiry,
                                &tk);
    }
    return slot_swap_locked(g->t, &h->tk, 0, 0, 0, 0, &tk);
}

/* h's expiry, as the slot calls take it */
static inline int64_t
group_head_expiry(const group_head_t *h)
{
    return group_abs(group_expiry_of(h->tk.state.stamp));
}

/*
 * A mark on g's head: the shared holds' exclusive waiter, or a
 * semaphore's waiter whose turn is next (issue 25: the nginx queue).
 * GROUP_MARK_OUT while it keeps `owner` out (its deadline ahead, and
 * owner not its waiter); GROUP_MARK_MINE: owner is its waiter (the
 * acquire drops it); 0: none (a stale one is cleared here).
 */
enum { GROUP_MARK_OUT = 1, GROUP_MARK_MINE };

static int
group_marked(group_t *g, group_head_t *h, uint64_t owner, int64_t now)
{
    slot_mark_t    m;
    slot_ticket_t  tk;
    int            rc;

    if (!h->found || !(h->tk.state.stamp & SLOT_MARKED)) {
        return 0;
    }
    rc = slot_mark_read_locked(g->t, &h->tk, &m);
    if (rc != SLOT_OK || m.until > now) {
        return rc == SLOT_OK && m.owner == owner ? GROUP_MARK_MINE
                                                 : GROUP_MARK_OUT;
    }
    if (slot_swap_locked(g->t, &h->tk, h->tk.state.owner, 0, 0,
                         group_abs(group_expiry_of(h->tk.state.stamp)), &tk)
        == SLOT_OK)
    {
        h->tk = tk;
        return 0;
    }
    return GROUP_MARK_OUT;
}


/* ---- records ---- */

/* A free record index of g: from `count` on, up to top (a new one). */
static uint32_t
group_free_index(group_t *g, const group_head_t *h, int64_t now)
{
    slot_ticket_t  tk;
    uint32_t       j, i, n = h->top + 1;

    for (j = 0; j < n; j++) {
        i = (h->count + j) % n;
        if (i == GROUP_MAX) {
            continue;
        }
        if (i == h->top || group_rec_look(g, i, &tk) != SLOT_OK
            || tk.state.owner == 0 || group_expired(tk.state.stamp, now))
        {
            return i;
        }
    }
    return GROUP_MAX;
}

int
group_acquire_locked(group_t *g, uint64_t owner, uint64_t process,
    uint32_t permits, int64_t expiry, int64_t now, slot_ticket_t *tk,
    group_head_t *h)
{
    uint32_t  limit = permits == 0 || permits > GROUP_MAX ? GROUP_MAX
                                                          : permits;
    uint32_t  i, top;
    uint64_t  keep;
    int       n, rc, swept = 0, handed, mark;

    for (n = 0; n < GROUP_TRIES; n++) {
        group_head_locked(g, now, h);
        mark = h->exclusive ? GROUP_MARK_OUT : group_marked(g, h, owner, now);
        if (mark == GROUP_MARK_OUT) {
            return SLOT_HELD;
        }
        keep = mark == GROUP_MARK_MINE ? 0 : h->tk.state.stamp & SLOT_MARKED;
        /* full: by the caller's permits (wait), or (no limit, or an
         * index space used up: more than a table has slots) no room */
        if (h->count >= limit) {
            if (swept++) {
                return permits == 0 ? SLOT_FULL : SLOT_HELD;
            }
            group_sweep_locked(g, now, &handed);
            continue;
        }
        i = group_free_index(g, h, now);
        if (i == GROUP_MAX) {
            return SLOT_FULL;
        }
        top = i + 1 > h->top ? i + 1 : h->top;
        rc = group_head_set(g, h, h->count + 1, top,
                            h->count == 0 ? expiry
                                : group_later(h->tk.state.stamp, expiry),
                            now, keep);
        if (rc == SLOT_GONE) {
            continue;
        }
        if (rc != SLOT_OK) {
            return rc;
        }
        rc = group_rec_acquire(g, i, owner, process, expiry, now, tk);
        if (rc == SLOT_OK) {
            return SLOT_OK;
        }
        /* no slot for the record: the count back, best effort (an
         * over-count is safe) */
        group_head_locked(g, now, h);
        if (h->count > 0) {
            group_head_count(g, h, h->count - 1, h->top,
                             group_head_expiry(h), now, &handed);
        }
        if (rc == SLOT_FULL) {
            return SLOT_FULL;
        }
    }
    return SLOT_HELD;
}

int
group_release_locked(group_t *g, const slot_ticket_t *tk, int64_t now,
    int *handed)
{
    group_head_t  h;
    int           n, expired = group_expired(tk->state.stamp, now);

    *handed = 0;
    if (slot_release_locked(g->t, tk) != SLOT_OK || expired) {
        return SLOT_GONE;
    }
    for (n = 0; n < GROUP_TRIES; n++) {
        group_head_locked(g, now, &h);
        if (h.count == 0) {
            break;                  /* no head counts it (cannot be) */
        }
        if (group_head_count(g, &h, h.count - 1, h.count == 1 ? 0 : h.top,
                             group_head_expiry(&h), now, handed)
            != SLOT_GONE)
        {
            break;
        }
    }
    return SLOT_OK;
}

int
group_extend_locked(group_t *g, slot_ticket_t *tk, int64_t expiry,
    int64_t now)
{
    group_head_t  h;
    int64_t       later;
    int           n;

    if (group_expired(tk->state.stamp, now)) {
        return SLOT_GONE;
    }
    for (n = 0; n < GROUP_TRIES; n++) {
        group_head_locked(g, now, &h);
        if (h.count == 0) {
            return SLOT_GONE;
        }
        later = group_later(h.tk.state.stamp, expiry);
        if (group_head_expiry(&h) == later
            || group_head_set(g, &h, h.count, h.top, later, now,
                              h.tk.state.stamp & SLOT_MARKED) == SLOT_OK)
        {
            return slot_extend_locked(g->t, tk, expiry);
        }
    }
    return SLOT_GONE;
}

uint32_t
group_sweep_locked(group_t *g, int64_t now, int *handed)
{
    group_head_t   h;
    slot_ticket_t  tk;
    uint32_t       i, count, top;
    int64_t        expiry;
    int            n;

    *handed = 0;
    for (n = 0; n < GROUP_TRIES; n++) {
        group_head_locked(g, now, &h);
        if (h.count == 0) {
            return 0;
        }
        /* the head's expiry too, counted again: the latest lease left */
        for (i = 0, count = 0, top = 0, expiry = -1; i < h.top; i++) {
            if (group_rec_look(g, i, &tk) != SLOT_OK || tk.state.owner == 0) {
                continue;
            }
            if (group_expired(tk.state.stamp, now)) {
                slot_release_locked(g->t, &tk);
                continue;
            }
            count++;
            top = i + 1;
            expiry = expiry < 0 ? group_abs(group_expiry_of(tk.state.stamp))
                                : group_later(tk.state.stamp, expiry);
        }
        if (group_head_count(g, &h, count, top, expiry < 0 ? 0 : expiry,
                             now, handed) != SLOT_GONE)
        {
            return count;
        }
    }
    return 0;
}

int
group_holders_locked(group_t *g, int64_t now, uint32_t *from,
    slot_ticket_t *out, int max)
{
    group_head_t   h;
    slot_ticket_t  tk;
    uint32_t       i;
    int            n = 0;

    group_head_locked(g, now, &h);
    for (i = *from; i < h.top && n < max; i++) {
        if (group_rec_look(g, i, &tk) == SLOT_OK && tk.state.owner != 0
            && !group_expired(tk.state.stamp, now))
        {
            out[n++] = tk;
        }
    }
    *from = i < h.top ? i : h.top;
    return n;
}
