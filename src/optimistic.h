/*
 * optimistic: get() without the shard's mutex, as a seqlock reader
 * (seqlock.h).
 *
 * The reader notes an even sequence word, looks the key up and copies the
 * value with every index and length bounds-checked (it may see a
 * half-written state), then checks that the word did not move.  Only then
 * is anything it read returned; otherwise the caller retries or takes the
 * mutex.  The reader never writes the shard, except the read-mark byte,
 * which is a hint (see chunk_mark_read).
 */

#ifndef OPTIMISTIC_H
#define OPTIMISTIC_H

#include "entry.h"
#include "hash.h"
#include "seqlock.h"
#include "shard.h"
#include "shmlock.h"

#include <string.h>

#define OPTIMISTIC_RETRY     (-1)
#define OPTIMISTIC_MAX_HOPS  64    /* longer chains go to the locked path */

/*
 * Walks an entry's byte stream from `off` for `len` bytes, comparing with
 * `cmp` (*equal: the result) or copying to `dst`; 0 if a chunk index is out
 * of range.  Out of line: keys and values longer than a head's data only.
 */
int optimistic_stream(const shard_t *sh, uint32_t c, size_t room, size_t off,
    const char *cmp, char *dst, size_t len, int *equal);

/*
 * The rest is inline: get is the hottest call, and as a call of its own
 * the lookup cost some 30 instructions of 250 in passing its arguments
 * and saving registers (callgrind).
 */


static inline uint32_t
optimistic_lookup(const shard_t *sh, const char *key, size_t klen,
    uint32_t hash, int *ok)
{
    uint32_t        i, hops = 0;
    const entry_t  *e;
    int             equal;

    i = __atomic_load_n(&sh->buckets[hash & sh->bucket_mask], __ATOMIC_RELAXED);
    while (i != 0) {
        if (i > sh->nchunks || ++hops > OPTIMISTIC_MAX_HOPS) {
            *ok = 0;
            return 0;
        }
        e = entry_at(sh, i);
        if (e->hash == hash && entry_key_len(e) == klen) {
            if (klen <= ENTRY_KEY_INLINE) {
                /* the common short key: all of it is in the head */
                equal = hash_equal(e->data, key, klen);
            } else if (!optimistic_stream(sh, i, entry_room(e), 0, key, NULL,
                                          klen, &equal))
            {
                *ok = 0;
                return 0;
            }
            if (equal) {
                break;
            }
        }
        i = __atomic_load_n(&e->hnext, __ATOMIC_RELAXED);
    }
    *ok = 1;
    return i;
}

static inline int
optimistic_valid(const shard_t *sh, uint32_t seq)
{
    return seqlock_read_valid(&sh->hdr->seq, seq);
}

/* SHMLOCK_OK / SHMLOCK_AGAIN as shdict_get, or OPTIMISTIC_RETRY.  *now:
 * the clock (ms) to compare expiries with; 0: read it when an expiry is
 * met, and leave the reading there. */
static inline int
optimistic_get(shard_t *sh, const char *key, size_t klen, uint32_t hash,
    int get_stale, shmlock_value_t *out, char *buf, size_t buf_size,
    int64_t *now)
{
    uint32_t        seq, i, vlen, vtype, flags;
    const entry_t  *e;
    uint64_t        meta;
    int64_t         expires;
    size_t          voff;
    int             ok, equal;

    seq = seqlock_read_begin(&sh->hdr->seq);
    if (seq & 1) {
        return OPTIMISTIC_RETRY;
    }

    i = optimistic_lookup(sh, key, klen, hash, &ok);
    if (!ok) {
        return OPTIMISTIC_RETRY;
    }
    out->stale = 0;
    if (i == 0) {
        out->type = SHMLOCK_TNIL;
        return optimistic_valid(sh, seq) ? SHMLOCK_OK : OPTIMISTIC_RETRY;
    }

    e = entry_at(sh, i);
    meta = __atomic_load_n(&e->meta, __ATOMIC_RELAXED);
    expires = entry_exp_ms(entry_meta_code(meta));
    if (expires != 0 && expires <= entry_now(now)) {
        if (!get_stale) {
            out->type = SHMLOCK_TNIL;
            return optimistic_valid(sh, seq) ? SHMLOCK_OK : OPTIMISTIC_RETRY;
        }
        out->stale = 1;
    }

    /* entry_value_out, from what was read once and with the stream's
     * reads checked */
    vtype = entry_meta_vtype(meta);
    vlen = e->value_len;
    if (!entry_value_sane_in(sh->nchunks, vtype, vlen)) {
        return OPTIMISTIC_RETRY;    /* the locked path tells what is wrong */
    }
    out->type = (int) vtype;
    out->len = vlen;
    out->num = entry_num_out(e, vtype);
    flags = 0;
    voff = klen;
    if (meta & ENTRY_UFLAGS) {
        if (!optimistic_stream(sh, i, entry_room_for(vtype), klen, NULL,
                               (char *) &flags, sizeof(flags), &equal))
        {
            return OPTIMISTIC_RETRY;
        }
        voff += sizeof(flags);
    }
    out->flags = flags;
    if (vtype == SHMLOCK_TSTRING) {
        if (vlen > buf_size) {
            return optimistic_valid(sh, seq) ? SHMLOCK_AGAIN : OPTIMISTIC_RETRY;
        }
        if (voff + vlen <= ENTRY_ROOM_STRING) {
            memcpy(buf, e->data + voff, vlen);
        } else if (!optimistic_stream(sh, i, ENTRY_ROOM_STRING, voff, NULL,
                                      buf, vlen, &equal))
        {
            return OPTIMISTIC_RETRY;
        }
    }
    if (!optimistic_valid(sh, seq)) {
        return OPTIMISTIC_RETRY;
    }
    chunk_mark_read(sh, i);
    return SHMLOCK_OK;
}

#endif /* OPTIMISTIC_H */
