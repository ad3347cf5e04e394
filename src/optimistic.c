#include "optimistic.h"

int
optimistic_stream(const shard_t *sh, uint32_t c, size_t hroom, size_t off,
    const char *cmp, char *dst, size_t len, int *equal)
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
            room = hroom;
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

int
optimistic_live(shard_t *sh, const char *key, size_t klen, uint32_t hash,
    int64_t now_ms)
{
    uint32_t  seq, i;
    int64_t   expires;
    int       ok, live = 0;

    seq = seqlock_read_begin(&sh->hdr->seq);
    if (seq & 1) {
        return OPTIMISTIC_RETRY;
    }
    i = optimistic_lookup(sh, key, klen, hash, &ok);
    if (!ok) {
        return OPTIMISTIC_RETRY;
    }
    if (i != 0) {
        expires = entry_expires(entry_at(sh, i));
        live = expires == 0 || expires > now_ms;
    }
    return optimistic_valid(sh, seq) ? live : OPTIMISTIC_RETRY;
}
