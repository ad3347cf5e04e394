/*
 * entry: one dictionary entry as a whole: its head chunk, finding it,
 * linking it into the hash chain and the LRU list, building a new one and
 * publishing it, removing one.  Callers hold the shard's mutex (but for
 * the readers of optimistic.c, which use only what they check).
 *
 *   head chunk (64 bytes):
 *   +------+-------+----------+----------+------+-----------+------------+
 *   | next | hnext | lru_prev | lru_next | hash | value_len | user_flags |
 *   +------+-------+----------+----------+------+-----------+------------+
 *   | key_len, vtype, eflags | expires (ms) | num     | data[16]         |
 *   +------------------------+--------------+---------+------------------+
 *
 * `next` continues the data stream into further chunks (chunk.h), `hnext`
 * is the hash chain, lru_prev/lru_next the LRU list (evictable entries
 * only).  A pinned entry (stored by add) is never evicted while live, and
 * is kept out of the LRU list.  A list (vtype SHMLOCK_TLIST) keeps its
 * first and last node where a number would be, and its length in
 * value_len; its nodes are chains of their own (list.h).
 */

#ifndef ENTRY_H
#define ENTRY_H

#include <string.h>

#include "chunk.h"
#include "hash.h"
#include "shmlock.h"
#include "sys.h"

#define ENTRY_PINNED      0x01   /* eflags: stored by add */

typedef struct {
    uint32_t  next;        /* next chunk of this entry's data stream */
    uint32_t  hnext;       /* next entry in the hash chain */
    uint32_t  lru_prev;
    uint32_t  lru_next;
    uint32_t  hash;
    uint32_t  value_len;   /* string values */
    uint32_t  user_flags;
    uint16_t  key_len;
    uint8_t   vtype;
    uint8_t   eflags;
    uint64_t  expires;     /* monotonic ms, 0 = never */
    union {
        uint64_t  num;     /* number (double bits) or boolean */
        struct {
            uint32_t  first;   /* a list's first node (list.h) */
            uint32_t  last;    /* and its last (derived) */
        } list;
    };
    char      data[CHUNK_HEAD_DATA];   /* key, then string value */
} entry_t;

static inline entry_t *
entry_at(const shard_t *sh, uint32_t i)
{
    return (entry_t *) chunk_at(sh, i);
}

/*
 * The clock is read lazily: most operations touch only entries that never
 * expire, and reading the clock would cost as much as the operation.
 * *now == 0 means "not read yet".
 */
static inline int64_t
entry_now(int64_t *now)
{
    if (*now == 0) {
        *now = sys_now_ms();
    }
    return *now;
}

static inline int
entry_expired(const entry_t *e, int64_t *now)
{
    return e->expires != 0 && (int64_t) e->expires <= entry_now(now);
}

#define ENTRY_MAX_EXPTIME  ((int64_t) 1 << 50)   /* ~35,000 years */

static inline int64_t
entry_deadline(int64_t *now, int64_t exptime_ms)
{
    if (exptime_ms <= 0) {
        return 0;
    }
    if (exptime_ms > ENTRY_MAX_EXPTIME) {
        exptime_ms = ENTRY_MAX_EXPTIME;
    }
    return entry_now(now) + exptime_ms;
}

/* Entry index of key (0: none). */
uint32_t entry_lookup(const shard_t *sh, const char *key, size_t klen,
    uint32_t hash);

/* entry_lookup itself, inline (the in-place set's; entry.c's wraps it). */
static inline uint32_t
entry_find(const shard_t *sh, const char *key, size_t klen, uint32_t hash)
{
    uint32_t   i, steps = 0;
    entry_t   *e;

    for (i = chunk_index(sh, sh->buckets[hash & sh->bucket_mask]); i != 0;
         i = chunk_index(sh, e->hnext))
    {
        if (chunk_walk_over(sh, &steps)) {
            return 0;
        }
        e = entry_at(sh, i);
        if (e->hash == hash && e->key_len == klen
            && (klen <= CHUNK_HEAD_DATA
                ? hash_equal(e->data, key, klen)    /* all in the head */
                : chunk_equal(sh, i, 0, key, klen)))
        {
            return i;
        }
    }
    return 0;
}
/* The hash-chain word pointing at entry i. */
uint32_t *entry_link(shard_t *sh, uint32_t i);

void entry_lru_unlink(shard_t *sh, uint32_t i);
void entry_lru_push(shard_t *sh, uint32_t i);
void entry_lru_link_head(shard_t *sh, uint32_t i);
void entry_remove(shard_t *sh, uint32_t i);
void entry_free_nodes(shard_t *sh, uint32_t i);

/*
 * Frees the chunks of entry i, and a list's nodes.  The entry is out of its
 * hash chain: nothing reaches them any more, so a crash from here on only
 * leaks them until the recovery rebuilds the free list.  Inline: every
 * removal and replacement pays for it, and lists are the rare case.
 */
static inline void
entry_free(shard_t *sh, uint32_t i)
{
    if (__builtin_expect(entry_at(sh, i)->vtype == SHMLOCK_TLIST, 0)) {
        entry_free_nodes(sh, i);
    }
    chunk_free(sh, i);
}

/*
 * Building and publishing a new entry: inline, as the store path
 * (shdict_put) is their one caller, and two calls there cost a lock and
 * unlock some 40 instructions of 1100 (callgrind).
 */

/* Builds key = v in the fresh chain c (chunk_alloc), unreachable yet. */
static inline void
entry_fill(shard_t *sh, uint32_t c, const char *key, size_t klen,
    uint32_t hash, const shmlock_value_t *v, int64_t expires, int pinned)
{
    entry_t  *e = entry_at(sh, c);
    double    num = v->num;

    /* c is not reachable yet: plain writes */
    e->lru_prev = 0;
    *chunk_ref(sh, c) = 0;
    e->hash = hash;
    e->key_len = (uint16_t) klen;
    e->vtype = (uint8_t) v->type;
    e->eflags = pinned ? ENTRY_PINNED : 0;
    e->user_flags = v->flags;
    e->expires = (uint64_t) expires;
    e->value_len = 0;
    e->num = 0;
    if (v->type == SHMLOCK_TBOOLEAN) {
        num = num != 0 ? 1 : 0;
    }
    memcpy(&e->num, &num, sizeof(num));

    chunk_write(sh, c, 0, key, klen);
    if (v->type == SHMLOCK_TSTRING) {
        e->value_len = (uint32_t) v->len;
        chunk_write(sh, c, klen, v->str, v->len);
    }
}

/* Publishes the entry built in c: in place of entry `old`, or as a new
 * entry when old is 0; a single link store makes it visible. */
static inline void
entry_publish(shard_t *sh, uint32_t c, uint32_t old, uint32_t hash,
    int pinned)
{
    shard_dict_t  *d = &sh->hdr->dict;
    uint32_t      *link;

    /* the chains may have changed since `old` was found (eviction made
     * room for c): its link is looked up afresh */
    if (old != 0) {
        link = entry_link(sh, old);
        entry_at(sh, c)->hnext = entry_at(sh, old)->hnext;
        WORDSTORE32(*link, c);
        if (!(entry_at(sh, old)->eflags & ENTRY_PINNED)) {
            entry_lru_unlink(sh, old);
        }
        entry_free(sh, old);
    } else {
        link = &sh->buckets[hash & sh->bucket_mask];
        entry_at(sh, c)->hnext = *link;
        WORDSTORE32(*link, c);
        WORDSTORE32(d->nentries, d->nentries + 1);
    }
    if (!pinned) {
        entry_at(sh, c)->lru_next = d->lru_head;   /* c is fresh: no record */
        entry_lru_link_head(sh, c);
    }
}

/*
 * A value a reader may hand out: of a type we store, and no longer than the
 * chunks could hold (a caller sizes its buffer by the length).
 */
static inline int
entry_value_sane_in(uint32_t nchunks, uint32_t vtype, uint32_t value_len)
{
    /* the types we store: 1, 3, 4 and 5 (a list: value_len counts its
     * nodes, each a chunk at least), as a bit mask */
    return vtype < 8 && ((0x3a >> vtype) & 1)
           && value_len / CHUNK_CONT_DATA <= nchunks;
}

static inline int
entry_value_sane(const shard_t *sh, const entry_t *e)
{
    return entry_value_sane_in(sh->nchunks, e->vtype, e->value_len);
}

int entry_value_equal(const shard_t *sh, uint32_t i,
    const shmlock_value_t *v);
/* The value of entry i as the ABI hands it out (a string's bytes apart). */
static inline void
entry_value_out(const shard_t *sh, uint32_t i, shmlock_value_t *out)
{
    const entry_t  *e = entry_at(sh, i);

    out->type = e->vtype;
    out->flags = e->user_flags;
    out->len = e->value_len;
    memcpy(&out->num, &e->num, sizeof(out->num));
}

/* Calls fn for every entry, bucket by bucket; fn may remove the entry. */
typedef int (*entry_visit_pt)(shard_t *sh, uint32_t i, void *ctx);
void entry_each(shard_t *sh, entry_visit_pt fn, void *ctx);
/* The same for the entries of buckets from .. to - 1 only. */
void entry_each_in(shard_t *sh, uint32_t from, uint32_t to,
    entry_visit_pt fn, void *ctx);

#endif /* ENTRY_H */
