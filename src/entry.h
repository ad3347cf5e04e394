/*
 * entry: one dictionary entry as a whole: its head chunk, finding it,
 * linking it into the hash chain and the LRU list, building a new one and
 * publishing it, removing one.  Callers hold the shard's mutex (but for
 * the readers of optimistic.c, which use only what they check).
 *
 *   head chunk (64 bytes):
 *   +------+-------+----------+----------+------+-----------+-------------+
 *   | next | hnext | lru_prev | lru_next | hash | value_len | meta        |
 *   +------+-------+----------+----------+------+-----------+-------------+
 *   | data[32]: key, user flags (if any), a string's first bytes          |
 *   |   (a number, a boolean or a list: data[24], then num or list ends)  |
 *   +---------------------------------------------------------------------+
 *
 *   meta, one 64-bit word: key_len, vtype, ENTRY_PINNED, ENTRY_UFLAGS, the
 *   expiry (below)
 *
 * Layout 11: 28 bytes of fields rather than 48, so that a head holds up to
 * 32 bytes of key and string (a 14-byte key and a 16-byte string: one
 * chunk, not two).  A string's stream runs over the last 8 bytes, where
 * another type keeps its number or its list's ends; the user flags, 0 for
 * nearly every entry, are 4 bytes of the stream after the key, there only
 * when not 0 (ENTRY_UFLAGS); the type, the class and the key's length share
 * the expiry's word, so that one store changes all of them.
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

/*
 * meta's bits, the key's length lowest (a 16-bit load of the word's first
 * bytes on a little-endian host: the lookup's compare), the expiry highest
 * (one shift):
 *
 *   0..15 key_len | 16..18 vtype | 19 ENTRY_PINNED | 20 ENTRY_UFLAGS |
 *   21..63 the expiry's code (entry_exp_code)
 */
#define ENTRY_TYPE_SHIFT    16
#define ENTRY_PINNED        ((uint64_t) 1 << 19)  /* stored by add */
#define ENTRY_UFLAGS        ((uint64_t) 1 << 20)  /* user flags in the stream */
#define ENTRY_EXP_SHIFT     21
#define ENTRY_KLEN_MASK     0xffff

/* a head's room for the stream: a string's, and the other types' (their
 * number in the last 8 bytes); a key this long is all in any head */
#define ENTRY_ROOM_STRING   CHUNK_HEAD_DATA
#define ENTRY_ROOM_SHORT    (CHUNK_HEAD_DATA - 8)
#define ENTRY_KEY_INLINE    ENTRY_ROOM_SHORT
#define ENTRY_FLAGS_LEN     4

typedef struct {
    uint32_t  next;        /* next chunk of this entry's data stream */
    uint32_t  hnext;       /* next entry in the hash chain */
    uint32_t  lru_prev;
    uint32_t  lru_next;
    uint32_t  hash;
    uint32_t  value_len;   /* string values; a list's node count */
    uint64_t  meta;        /* key length, flags, type, expiry (above) */
    union {
        char  data[CHUNK_HEAD_DATA];   /* the stream: key, flags, string */
        struct {
            char  short_data[ENTRY_ROOM_SHORT];
            union {
                uint64_t  num;     /* number (double bits) or boolean */
                struct {
                    uint32_t  first;   /* a list's first node (list.h) */
                    uint32_t  last;    /* and its last (derived) */
                } list;
            };
        };
    };
} entry_t;

/*
 * The expiry in 43 bits: 0 never; below 2^42, the monotonic ms itself;
 * from 2^42 ms (139 years after boot) on, which only an expiry of a
 * century or more reaches, 2^42 plus the ms / 1024 (rounded down: such
 * an expiry comes up to a second early).  Every expiry the dictionary
 * takes (ENTRY_MAX_EXPTIME from now) fits.
 */
#define ENTRY_EXP_FINE      ((uint64_t) 1 << 42)

static inline uint64_t
entry_exp_code(int64_t expires)
{
    uint64_t  ms = (uint64_t) expires;

    return ms < ENTRY_EXP_FINE ? ms : ENTRY_EXP_FINE | (ms >> 10);
}

/* (out of line: a call the compiler cannot fold into the common path) */
int64_t entry_exp_coarse(uint64_t code) __attribute__((cold));

static inline int64_t
entry_exp_ms(uint64_t code)
{
    if (__builtin_expect(code >= ENTRY_EXP_FINE, 0)) {
        return entry_exp_coarse(code);
    }
    return (int64_t) code;
}

/* meta's expiry code, type */
static inline uint64_t
entry_meta_code(uint64_t meta)
{
    return meta >> ENTRY_EXP_SHIFT;
}

static inline uint32_t
entry_meta_vtype(uint64_t meta)
{
    return (uint32_t) (meta >> ENTRY_TYPE_SHIFT) & 7;
}

/* The meta word of an entry of key_len klen and value type vtype. */
static inline uint64_t
entry_meta(size_t klen, uint32_t vtype, int pinned, int uflags,
    int64_t expires)
{
    return (uint64_t) klen
           | ((uint64_t) (vtype & 7) << ENTRY_TYPE_SHIFT)
           | (pinned ? ENTRY_PINNED : 0) | (uflags ? ENTRY_UFLAGS : 0)
           | (entry_exp_code(expires) << ENTRY_EXP_SHIFT);
}

/* meta with its expiry replaced */
static inline uint64_t
entry_meta_expiring(uint64_t meta, int64_t expires)
{
    return (meta & ((1 << ENTRY_EXP_SHIFT) - 1))
           | (entry_exp_code(expires) << ENTRY_EXP_SHIFT);
}

static inline uint32_t
entry_key_len(const void *e)
{
    return (uint32_t) (((const entry_t *) e)->meta & ENTRY_KLEN_MASK);
}

static inline uint32_t
entry_vtype(const void *e)
{
    return entry_meta_vtype(((const entry_t *) e)->meta);
}

static inline int
entry_pinned(const void *e)
{
    return (((const entry_t *) e)->meta & ENTRY_PINNED) != 0;
}

/* the expiry, monotonic ms (0: never) */
static inline int64_t
entry_expires(const void *e)
{
    return entry_exp_ms(entry_meta_code(((const entry_t *) e)->meta));
}

/* The head's room for the stream of an entry of this type. */
static inline size_t
entry_room_for(uint32_t vtype)
{
    return vtype == SHMLOCK_TSTRING ? ENTRY_ROOM_STRING : ENTRY_ROOM_SHORT;
}

static inline size_t
entry_room(const void *e)
{
    return entry_room_for(entry_vtype(e));
}

/* Where the value's bytes start in the stream: after the key and the user
 * flags if any. */
static inline size_t
entry_voff(const void *e)
{
    return entry_key_len(e)
           + ((((const entry_t *) e)->meta & ENTRY_UFLAGS)
              ? ENTRY_FLAGS_LEN : 0);
}

/* The chunks of an entry: key, user flags, a string's bytes (vlen). */
static inline uint32_t
entry_chunks(size_t klen, uint32_t flags, uint32_t vtype, size_t vlen)
{
    return chunks_for(entry_room_for(vtype),
                      klen + (flags != 0 ? ENTRY_FLAGS_LEN : 0)
                      + (vtype == SHMLOCK_TSTRING ? vlen : 0));
}

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
    uint64_t  code = entry_meta_code(e->meta);

    return code != 0 && entry_exp_ms(code) <= entry_now(now);
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
        if (e->hash == hash && entry_key_len(e) == klen
            && (klen <= ENTRY_KEY_INLINE
                ? hash_equal(e->data, key, klen)    /* all in the head */
                : chunk_equal(sh, i, entry_room(e), 0, key, klen)))
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
    if (__builtin_expect(entry_vtype(entry_at(sh, i)) == SHMLOCK_TLIST, 0)) {
        entry_free_nodes(sh, i);
    }
    chunk_free(sh, i);
}

/*
 * Building and publishing a new entry: inline, as the store path
 * (shdict_put) is their one caller, and two calls there cost a lock and
 * unlock some 40 instructions of 1100 (callgrind).
 */

/* Writes the user flags and a string's bytes of entry c (its meta set)
 * into its stream after the key. */
static inline void
entry_fill_value(shard_t *sh, uint32_t c, const shmlock_value_t *v)
{
    entry_t  *e = entry_at(sh, c);
    size_t    room = entry_room(e), off = entry_key_len(e);
    uint32_t  flags = v->flags;

    if (flags != 0) {
        chunk_write(sh, c, room, off, (const char *) &flags, sizeof(flags));
        off += sizeof(flags);
    }
    if (v->type == SHMLOCK_TSTRING) {
        if (off + v->len <= room) {
            memcpy(e->data + off, v->str, v->len);
        } else {
            chunk_write(sh, c, room, off, v->str, v->len);
        }
    }
}

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
    e->meta = entry_meta(klen, (uint32_t) v->type, pinned, v->flags != 0,
                         expires);
    if (v->type == SHMLOCK_TSTRING) {
        e->value_len = (uint32_t) v->len;
    } else {
        /* (a string's stream runs over the number's place) */
        e->value_len = 0;
        if (v->type == SHMLOCK_TBOOLEAN) {
            num = num != 0 ? 1 : 0;
        }
        memcpy(&e->num, &num, sizeof(num));
    }
    if (klen <= ENTRY_KEY_INLINE) {
        memcpy(e->data, key, klen);
    } else {
        chunk_write(sh, c, entry_room(e), 0, key, klen);
    }
    if (v->flags != 0 || v->type == SHMLOCK_TSTRING) {
        entry_fill_value(sh, c, v);
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
        if (!entry_pinned(entry_at(sh, old))) {
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
    return entry_value_sane_in(sh->nchunks, entry_vtype(e), e->value_len);
}

int entry_value_equal(const shard_t *sh, uint32_t i,
    const shmlock_value_t *v);
/* The user flags of entry i (mutex held: the stream read is checked). */
uint32_t entry_user_flags_read(const shard_t *sh, uint32_t i);

static inline uint32_t
entry_user_flags(const shard_t *sh, uint32_t i)
{
    return (entry_at(sh, i)->meta & ENTRY_UFLAGS)
           ? entry_user_flags_read(sh, i) : 0;
}

/* out's number: a number's or a boolean's own, 0 for another type. */
static inline double
entry_num_out(const entry_t *e, uint32_t vtype)
{
    double  num = 0;

    if (vtype != SHMLOCK_TSTRING) {
        memcpy(&num, &e->num, sizeof(num));
    }
    return num;
}

/* The value of entry i as the ABI hands it out (a string's bytes apart). */
static inline void
entry_value_out(const shard_t *sh, uint32_t i, shmlock_value_t *out)
{
    const entry_t  *e = entry_at(sh, i);
    uint32_t        vtype = entry_vtype(e);

    out->type = (int) vtype;
    out->flags = entry_user_flags(sh, i);
    out->len = e->value_len;
    out->num = entry_num_out(e, vtype);
}

/* Calls fn for every entry, bucket by bucket; fn may remove the entry. */
typedef int (*entry_visit_pt)(shard_t *sh, uint32_t i, void *ctx);
void entry_each(shard_t *sh, entry_visit_pt fn, void *ctx);
/* The same for the entries of buckets from .. to - 1 only. */
void entry_each_in(shard_t *sh, uint32_t from, uint32_t to,
    entry_visit_pt fn, void *ctx);

#endif /* ENTRY_H */
