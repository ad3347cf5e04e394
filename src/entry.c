#include "entry.h"

#include <stddef.h>
#include <string.h>

_Static_assert(sizeof(entry_t) == SHARD_CHUNK_SIZE, "entry_t is one chunk");
_Static_assert(offsetof(entry_t, data) == CHUNK_HEAD_OFF,
               "an entry's data is where chunk.h looks for a head's data");

uint32_t
entry_lookup(const shard_t *sh, const char *key, size_t klen, uint32_t hash)
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
            && chunk_equal(sh, i, 0, key, klen))
        {
            return i;
        }
    }
    return 0;
}

uint32_t *
entry_link(shard_t *sh, uint32_t i)
{
    uint32_t  *l = &sh->buckets[entry_at(sh, i)->hash & sh->bucket_mask];
    uint32_t   steps = 0;

    while (*l != i) {
        if (*l == 0 || *l > sh->nchunks || chunk_walk_over(sh, &steps)) {
            /* i is not in its chain: the zone is corrupt */
            sh->broken = 1;
            return &sh->scratch;
        }
        l = &entry_at(sh, *l)->hnext;
    }
    return l;
}

void
entry_lru_unlink(shard_t *sh, uint32_t i)
{
    shard_dict_t  *d = &sh->hdr->dict;
    entry_t       *e = entry_at(sh, i);
    uint32_t       prev = chunk_index(sh, e->lru_prev);
    uint32_t       next = chunk_index(sh, e->lru_next);

    if (prev != 0) {
        WORDSTORE32(entry_at(sh, prev)->lru_next, next);
    } else {
        WORDSTORE32(d->lru_head, next);
    }
    if (next != 0) {
        WORDSTORE32(entry_at(sh, next)->lru_prev, prev);
    } else {
        WORDSTORE32(d->lru_tail, prev);
    }
}

void
entry_lru_push(shard_t *sh, uint32_t i)
{
    shard_dict_t  *d = &sh->hdr->dict;
    entry_t       *e = entry_at(sh, i);

    WORDSTORE32(e->lru_prev, 0);
    WORDSTORE32(e->lru_next, d->lru_head);
    entry_lru_link_head(sh, i);
}

/* The entry's own links are set; hook it in front of the head. */
void
entry_lru_link_head(shard_t *sh, uint32_t i)
{
    shard_dict_t  *d = &sh->hdr->dict;
    uint32_t       head = chunk_index(sh, d->lru_head);

    if (head != 0) {
        WORDSTORE32(entry_at(sh, head)->lru_prev, i);
    } else {
        WORDSTORE32(d->lru_tail, i);
    }
    WORDSTORE32(d->lru_head, i);
}

void
entry_remove(shard_t *sh, uint32_t i)
{
    shard_dict_t  *d = &sh->hdr->dict;
    uint32_t      *link = entry_link(sh, i);

    WORDSTORE32(*link, entry_at(sh, i)->hnext);
    if (!(entry_at(sh, i)->eflags & ENTRY_PINNED)) {
        entry_lru_unlink(sh, i);
    }
    WORDSTORE32(d->nentries, d->nentries - 1);
    chunk_free(sh, i);
}

void
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

void
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
        chunk_free(sh, old);
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

int
entry_value_equal(const shard_t *sh, uint32_t i, const shmlock_value_t *v)
{
    const entry_t  *e = entry_at(sh, i);
    double          num;

    if (e->vtype != v->type) {
        return 0;
    }
    switch (v->type) {
    case SHMLOCK_TSTRING:
        return e->value_len == v->len
               && chunk_equal(sh, i, e->key_len, v->str, v->len);
    case SHMLOCK_TNUMBER:
        memcpy(&num, &e->num, sizeof(num));
        return num == v->num;
    case SHMLOCK_TBOOLEAN:
        memcpy(&num, &e->num, sizeof(num));
        return (num != 0) == (v->num != 0);
    default:
        return 0;
    }
}

void
entry_value_out(const shard_t *sh, uint32_t i, shmlock_value_t *out)
{
    const entry_t  *e = entry_at(sh, i);

    out->type = e->vtype;
    out->flags = e->user_flags;
    out->len = e->value_len;
    memcpy(&out->num, &e->num, sizeof(out->num));
}

void
entry_each(shard_t *sh, entry_visit_pt fn, void *ctx)
{
    uint32_t  b, i, next, steps = 0;

    for (b = 0; b <= sh->bucket_mask; b++) {
        for (i = chunk_index(sh, sh->buckets[b]); i != 0; i = next) {
            if (chunk_walk_over(sh, &steps)) {
                return;
            }
            next = chunk_index(sh, entry_at(sh, i)->hnext);
            if (fn(sh, i, ctx) != 0) {
                return;
            }
        }
    }
}
