#include "verify.h"
#include "entry.h"
#include "hash.h"
#include "shmlock.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/*
 * Walks every structure of the dictionary and checks that each chunk is in
 * exactly one place (the free list, one entry or one list node), the counts
 * agree, each list's links agree both ways (list.h), the LRU
 * list holds exactly the unpinned entries of the hash chains, and each
 * entry's key hashes to its bucket.  O(size of the shard); for tests and
 * operators.
 */

typedef struct {
    shard_t   *sh;
    uint8_t   *seen;     /* one byte per chunk */
    char      *msg;
    size_t     msg_size;
    int        spill_bad;   /* a spilled slot's chunk met twice */
} verify_t;

static int
verify_fail(verify_t *v, const char *fmt, ...)
{
    va_list  ap;
    int      n;

    n = snprintf(v->msg, v->msg_size, "corrupt: ");
    if (n >= 0 && (size_t) n < v->msg_size) {
        va_start(ap, fmt);
        vsnprintf(v->msg + n, v->msg_size - (size_t) n, fmt, ap);
        va_end(ap);
    }
    return SHMLOCK_CORRUPT;
}

/* Marks a chain of chunks seen; returns its length or 0 on error. */
static uint32_t
verify_chain(verify_t *v, uint32_t first, uint8_t mark)
{
    uint32_t  c, n = 0;

    for (c = first; c != 0; c = ((chunk_t *) chunk_at(v->sh, c))->next) {
        if (c > v->sh->nchunks || v->seen[c] != 0 || ++n > v->sh->nchunks) {
            return 0;
        }
        v->seen[c] = mark;
    }
    return n;
}

/*
 * A list's nodes: each an element chain of its own, the links forward and
 * back in agreement, the head's last and count right.  Returns the chunks
 * they use, 0 on error (then msg says what).
 */
static uint32_t
verify_list(verify_t *v, uint32_t i)
{
    shard_t   *sh = v->sh;
    entry_t   *e = entry_at(sh, i), *node;
    uint32_t   n, prev = 0, count = 0, used = 0, len;

    for (n = e->list.first; n != 0; prev = n, n = node->hnext) {
        if (n > sh->nchunks || v->seen[n] != 0) {
            verify_fail(v, "list %u reaches chunk %u, out of range or "
                        "already used", i, n);
            return 0;
        }
        node = entry_at(sh, n);
        if (entry_key_len(node) != 0
            || (node->meta & (ENTRY_UFLAGS | ENTRY_PINNED)) != 0
            || (entry_vtype(node) != SHMLOCK_TSTRING
                && entry_vtype(node) != SHMLOCK_TNUMBER))
        {
            verify_fail(v, "list %u: node %u has a key or a bad type", i, n);
            return 0;
        }
        if (node->lru_prev != prev) {
            verify_fail(v, "list %u: back link of node %u", i, n);
            return 0;
        }
        len = verify_chain(v, n, 4);
        if (len == 0 || len != entry_chunks(0, 0, entry_vtype(node),
                                            node->value_len))
        {
            verify_fail(v, "list %u: chunk chain of node %u", i, n);
            return 0;
        }
        used += len;
        count++;
    }
    if (count == 0 || count != e->value_len || prev != e->list.last) {
        verify_fail(v, "list %u holds %u nodes, %u counted, last %u not %u",
                    i, count, e->value_len, e->list.last, prev);
        return 0;
    }
    return used;
}

/* Every entry, through the hash chains: chains, keys, hashes, chunk use. */
static int
verify_buckets(verify_t *v, uint32_t *used, uint32_t *unpinned)
{
    shard_t   *sh = v->sh;
    uint32_t   b, i, n = 0, len, klen, vtype;
    entry_t   *e;
    char      *key;
    size_t     bytes;

    for (b = 0; b <= sh->bucket_mask; b++) {
        for (i = sh->buckets[b]; i != 0; i = e->hnext) {
            if (i > sh->nchunks || v->seen[i] != 0) {
                return verify_fail(v, "bucket %u reaches chunk %u, out of "
                                   "range or already used", b, i);
            }
            e = entry_at(sh, i);
            if ((e->hash & sh->bucket_mask) != b) {
                return verify_fail(v, "entry %u in the wrong bucket", i);
            }
            klen = entry_key_len(e);
            vtype = entry_vtype(e);
            if (klen == 0 || (vtype != SHMLOCK_TSTRING
                              && vtype != SHMLOCK_TNUMBER
                              && vtype != SHMLOCK_TBOOLEAN
                              && vtype != SHMLOCK_TLIST)
                || (vtype == SHMLOCK_TLIST && (e->meta & ENTRY_UFLAGS)))
            {
                return verify_fail(v, "entry %u has a bad key length or type",
                                   i);
            }
            bytes = entry_voff(e)
                    + (vtype == SHMLOCK_TSTRING ? e->value_len : 0);
            len = verify_chain(v, i, 2);
            if (len == 0 || len != chunks_for(entry_room(e), bytes)) {
                return verify_fail(v, "chunk chain of entry %u", i);
            }
            key = malloc(klen);
            if (key == NULL) {
                return verify_fail(v, "out of memory while verifying");
            }
            chunk_read(sh, i, entry_room(e), 0, key, klen);
            if (hash_bytes(key, klen) != e->hash) {
                free(key);
                return verify_fail(v, "entry %u key does not match its hash",
                                   i);
            }
            free(key);
            *used += len;
            if (vtype == SHMLOCK_TLIST) {
                if ((len = verify_list(v, i)) == 0) {
                    return SHMLOCK_CORRUPT;
                }
                *used += len;
            }
            if (!entry_pinned(e)) {
                (*unpinned)++;
            }
            if (++n > sh->hdr->dict.nentries) {
                return verify_fail(v, "hash chains hold more than %u entries",
                                   sh->hdr->dict.nentries);
            }
        }
    }
    if (n != sh->hdr->dict.nentries) {
        return verify_fail(v, "hash chains hold %u of %u entries", n,
                           sh->hdr->dict.nentries);
    }
    return SHMLOCK_OK;
}

/* The LRU list: exactly the unpinned entries, with consistent links. */
static int
verify_lru(verify_t *v, uint32_t unpinned)
{
    shard_t   *sh = v->sh;
    uint32_t   i, prev = 0, n = 0;
    entry_t   *e;

    for (i = sh->hdr->dict.lru_head; i != 0; prev = i, i = e->lru_next) {
        if (i > sh->nchunks || v->seen[i] != 2) {
            return verify_fail(v, "lru list reaches chunk %u, not an entry "
                               "or twice", i);
        }
        v->seen[i] = 3;
        e = entry_at(sh, i);
        if (entry_pinned(e)) {
            return verify_fail(v, "pinned entry %u in the lru list", i);
        }
        if (e->lru_prev != prev) {
            return verify_fail(v, "lru back link of entry %u", i);
        }
        n++;
    }
    if (prev != sh->hdr->dict.lru_tail) {
        return verify_fail(v, "lru tail");
    }
    if (n != unpinned) {
        return verify_fail(v, "lru list holds %u of %u evictable entries", n,
                           unpinned);
    }
    return SHMLOCK_OK;
}

/* slot_spill_chunks's visit: a chunk of a spilled lock slot, in no other
 * place (else v->spill_bad) */
static void
verify_spilled(void *arg, uint32_t c)
{
    verify_t  *v = arg;

    if (c > v->sh->nchunks || v->seen[c] != 0) {
        v->spill_bad = 1;
        return;
    }
    v->seen[c] = 3;
}

int
verify_shard(shard_t *sh, char *msg, size_t msg_size)
{
    verify_t  v = { sh, NULL, msg, msg_size, 0 };
    uint32_t  nfree, used = 0, unpinned = 0, spilled;
    int       rc;

    v.seen = calloc((size_t) sh->nchunks + 1, 1);
    if (v.seen == NULL) {
        return verify_fail(&v, "out of memory while verifying");
    }

    nfree = verify_chain(&v, sh->hdr->dict.free_head, 1);
    if (sh->hdr->dict.free_head != 0 && nfree == 0) {
        rc = verify_fail(&v, "free list");
    } else if (nfree != sh->hdr->dict.free_count) {
        rc = verify_fail(&v, "free list holds %u chunks, %u counted", nfree,
                         sh->hdr->dict.free_count);
    } else if ((rc = verify_buckets(&v, &used, &unpinned)) == SHMLOCK_OK
               && (rc = verify_lru(&v, unpinned)) == SHMLOCK_OK)
    {
        /* the lock slots spilled into chunks (slot.h) hold the rest */
        spilled = slot_spill_chunks(&sh->slots, verify_spilled, &v);
        if (v.spill_bad) {
            rc = verify_fail(&v, "a spilled lock slot's chunk is also "
                             "elsewhere");
        } else if (nfree + used + spilled != sh->nchunks) {
            rc = verify_fail(&v, "%u chunks lost",
                             sh->nchunks - nfree - used - spilled);
        }
    }
    free(v.seen);
    if (rc == SHMLOCK_OK) {
        char  what[200];

        if (slot_verify_locked(&sh->slots, what, sizeof(what)) != 0) {
            rc = verify_fail(&v, "%s", what);
        }
    }
    return rc;
}
