#include "optimistic.h"
#include "entry.h"
#include "hash.h"
#include "seqlock.h"

#include <string.h>

#define OPTIMISTIC_MAX_HOPS  64    /* longer chains go to the locked path */

/*
 * Walks an entry's byte stream from `off` for `len` bytes, comparing with
 * `cmp` or copying to `dst`; 0 if a chunk index is out of range.
 */
static int
optimistic_stream(const shard_t *sh, uint32_t c, size_t off, const char *cmp,
    char *dst, size_t len, int *equal)
{
    const char  *p;
    size_t       room, n;
    int          head = 1;

    while (len > 0) {
        if (c == 0 || c > sh->nchunks) {
            return 0;
        }
        if (head) {
            p = entry_at(sh, c)->data;
            room = CHUNK_HEAD_DATA;
        } else {
            p = ((const chunk_t *) chunk_at(sh, c))->data;
            room = CHUNK_CONT_DATA;
        }
        if (off >= room) {
            off -= room;
        } else {
            n = room - off < len ? room - off : len;
            if (cmp != NULL) {
                if (!hash_equal(p + off, cmp, n)) {
                    *equal = 0;
                    return 1;
                }
                cmp += n;
            } else {
                memcpy(dst, p + off, n);
                dst += n;
            }
            len -= n;
            off = 0;
        }
        head = 0;
        c = __atomic_load_n(&((const chunk_t *) chunk_at(sh, c))->next,
                            __ATOMIC_RELAXED);
    }
    *equal = 1;
    return 1;
}

static uint32_t
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
        if (e->hash == hash && e->key_len == klen) {
            if (klen <= CHUNK_HEAD_DATA) {
                /* the common short key: all of it is in the head */
                equal = hash_equal(e->data, key, klen);
            } else if (!optimistic_stream(sh, i, 0, key, NULL, klen,
                                          &equal))
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

int
optimistic_get(shard_t *sh, const char *key, size_t klen, uint32_t hash,
    int get_stale, shmlock_value_t *out, char *buf, size_t buf_size,
    int64_t *now)
{
    uint32_t        seq, i, vlen;
    const entry_t  *e;
    int64_t         expires;
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
    expires = (int64_t) e->expires;
    if (expires != 0 && expires <= entry_now(now)) {
        if (!get_stale) {
            out->type = SHMLOCK_TNIL;
            return optimistic_valid(sh, seq) ? SHMLOCK_OK : OPTIMISTIC_RETRY;
        }
        out->stale = 1;
    }

    entry_value_out(sh, i, out);
    if (!entry_value_sane(sh, e)) {
        return OPTIMISTIC_RETRY;    /* the locked path tells what is wrong */
    }
    if (out->type == SHMLOCK_TSTRING) {
        vlen = (uint32_t) out->len;
        if (vlen > buf_size) {
            return optimistic_valid(sh, seq) ? SHMLOCK_AGAIN : OPTIMISTIC_RETRY;
        }
        if (klen + vlen <= CHUNK_HEAD_DATA) {
            memcpy(buf, e->data + klen, vlen);
        } else if (!optimistic_stream(sh, i, klen, NULL, buf, vlen, &equal)) {
            return OPTIMISTIC_RETRY;
        }
    }
    if (!optimistic_valid(sh, seq)) {
        return OPTIMISTIC_RETRY;
    }
    chunk_mark_read(sh, i);
    return SHMLOCK_OK;
}
