/*
 * shdict: the dictionary in one shard of a zone, with ngx.shared.DICT's
 * semantics.
 *
 * Entries live in chains of 64-byte chunks (chunk.h, entry.h): a head chunk
 * (metadata, the first bytes of key+value) and continuation chunks (60
 * bytes of data each).  All of a shard's chunks come from one free list,
 * so there is no fragmentation and free_space() is exact.  Entries hang in
 * a hash table (chained through the head) and in one LRU list.  Every
 * function here runs with the shard's mutex held (shard_lock.h), and every
 * one that changes the dictionary inside a seqlock write (seqlock.h).
 */

#ifndef SHDICT_H
#define SHDICT_H

#include "entry.h"
#include "shard.h"
#include "shmlock.h"

/*
 * A number (or boolean) stored over a live one of the same type and user
 * flags, neither with an expiry, in the same class (pinned or not): only the
 * value word differs, so it is one store in place, as incr's, and a crash
 * leaves the old or the new value without an undo record.  The seqlock
 * write around the call keeps lock-free readers from keeping a value read
 * across it.  The CLOCK hint as a rewrite in place sets it (rewrite.c).
 * 0 when anything else would change: the caller takes the general path.
 */
/* The value word of entry e (index i) set to v's number or boolean, and
 * its CLOCK hint unless pinned: the one store of a scalar rewritten in
 * place (shdict_store_scalar, shdict_set_in_place). */
static inline void
shdict_store_num(shard_t *sh, uint32_t i, entry_t *e,
    const shmlock_value_t *v, int pinned)
{
    double    num = v->num;
    uint64_t  bits;

    if (v->type == SHMLOCK_TBOOLEAN) {
        num = num != 0 ? 1 : 0;
    }
    memcpy(&bits, &num, sizeof(bits));
    WORDSTORE64(e->num, bits);
    if (!pinned) {
        *chunk_ref(sh, i) = 1;
    }
}

static inline int
shdict_store_scalar(shard_t *sh, uint32_t i, entry_t *e,
    const shmlock_value_t *v, int64_t exptime_ms, int pinned)
{
    /* the same type, class and user flags, no expiry: meta and the
     * stream stay as they are */
    if (e->meta != entry_meta(entry_key_len(e), (uint32_t) v->type, pinned,
                              v->flags != 0, 0)
        || exptime_ms > 0
        || (v->type != SHMLOCK_TNUMBER && v->type != SHMLOCK_TBOOLEAN)
        || (v->flags != 0 && entry_user_flags_read(sh, i) != v->flags))
    {
        return 0;
    }
    shdict_store_num(sh, i, e, v, pinned);
    return 1;
}

/*
 * A set (no expiry) of a number or boolean over a live one of the same
 * type and flags, without an expiry, not pinned: shdict_store_scalar's
 * one store in place, with the lookup inline, for the ABI's fast path
 * (shmlock_dict_store_at, which checked that v is a number or a boolean);
 * the mutex held and the seqlock write begun, as for shdict_store.  0 when
 * anything else would happen (another value, a key absent, an expiry, a
 * tail to reclaim first): the caller calls shdict_store, which does all
 * of it.
 */
static inline int
shdict_set_in_place(shard_t *sh, const char *key, size_t klen,
    uint32_t hash, const shmlock_value_t *v)
{
    uint32_t   t = chunk_index(sh, sh->hdr->dict.lru_tail), i;
    entry_t   *e;

    /* every store first drops expired entries at the tail: leave that to
     * shdict_store */
    if (t != 0 && entry_meta_code(entry_at(sh, t)->meta) != 0) {
        return 0;
    }
    i = entry_find(sh, key, klen, hash);
    if (i == 0) {
        return 0;
    }
    e = entry_at(sh, i);
    /* shdict_store_scalar's test, shifted past the key's length (equal:
     * entry_find compared it): the same type and user flags' presence,
     * not pinned, no expiry; then the flags themselves */
    if ((e->meta >> ENTRY_TYPE_SHIFT)
        != ((uint64_t) v->type
            | (v->flags != 0 ? ENTRY_UFLAGS >> ENTRY_TYPE_SHIFT : 0))
        || (v->flags != 0 && entry_user_flags_read(sh, i) != v->flags))
    {
        return 0;
    }
    shdict_store_num(sh, i, e, v, 0);
    return 1;
}

/* An empty dictionary in a fresh shard (its mutex free, no entry). */
void shdict_format(shard_t *sh);

int shdict_store(shard_t *sh, int op, const char *key, size_t klen,
    uint32_t hash, const shmlock_value_t *v, int64_t exptime_ms,
    int64_t now_ms, int *forcible);
/* now: the clock (ms) to compare expiries with; 0: read it if needed. */
int shdict_get(shard_t *sh, const char *key, size_t klen, uint32_t hash,
    int get_stale, shmlock_value_t *out, char *buf, size_t buf_size,
    int64_t now);
int shdict_incr(shard_t *sh, const char *key, size_t klen, uint32_t hash,
    double *value, int has_init, double init, int64_t init_ttl_ms,
    int *forcible);
int shdict_ttl(shard_t *sh, const char *key, size_t klen, uint32_t hash,
    int64_t *ttl_ms);
int shdict_expire(shard_t *sh, const char *key, size_t klen, uint32_t hash,
    int64_t exptime_ms);
int shdict_cas(shard_t *sh, const char *key, size_t klen, uint32_t hash,
    const shmlock_value_t *old, const shmlock_value_t *v, int64_t exptime_ms,
    int *forcible);
int shdict_cad(shard_t *sh, const char *key, size_t klen, uint32_t hash,
    const shmlock_value_t *old);
/* The entries not expired, counted by a walk of every chain (nentries
 * counts the expired ones too). */
uint64_t shdict_live_entries(shard_t *sh);
void shdict_flush_all(shard_t *sh);
int shdict_flush_expired(shard_t *sh, int max_count);
int shdict_get_keys(shard_t *sh, int max_count, char *buf, size_t buf_size,
    int *count, size_t *used);
int shdict_scan(shard_t *sh, uint32_t *bucket, int count, char *buf,
    size_t buf_size, int *nkeys, size_t *used);

/* Lists (list.h): side SHMLOCK_LEFT or SHMLOCK_RIGHT. */
int shdict_push(shard_t *sh, int side, const char *key, size_t klen,
    uint32_t hash, const shmlock_value_t *v, uint32_t *len);
int shdict_pop(shard_t *sh, int side, const char *key, size_t klen,
    uint32_t hash, shmlock_value_t *out, char *buf, size_t buf_size);
int shdict_llen(shard_t *sh, const char *key, size_t klen, uint32_t hash,
    uint32_t *len);

#endif /* SHDICT_H */
