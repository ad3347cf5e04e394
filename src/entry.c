#include "entry.h"

#include <string.h>

uint32_t
entry_lookup(const zone_t *z, const char *key, size_t klen, uint32_t hash)
{
    uint32_t   i, steps = 0;
    entry_t   *e;

    for (i = chunk_index(z, z->buckets[hash & z->bucket_mask]); i != 0;
         i = chunk_index(z, e->hnext))
    {
        if (chunk_walk_over(z, &steps)) {
            return 0;
        }
        e = entry_at(z, i);
        if (e->hash == hash && e->key_len == klen
            && chunk_equal(z, i, 0, key, klen))
        {
            return i;
        }
    }
    return 0;
}

uint32_t *
entry_link(zone_t *z, uint32_t i)
{
    uint32_t  *l = &z->buckets[entry_at(z, i)->hash & z->bucket_mask];
    uint32_t   steps = 0;

    while (*l != i) {
        if (*l == 0 || *l > z->nchunks || chunk_walk_over(z, &steps)) {
            /* i is not in its chain: the zone is corrupt */
            z->broken = 1;
            return &z->scratch;
        }
        l = &entry_at(z, *l)->hnext;
    }
    return l;
}

void
entry_lru_unlink(zone_t *z, uint32_t i)
{
    dict_state_t  *d = &z->hdr->dict;
    entry_t       *e = entry_at(z, i);
    uint32_t       prev = chunk_index(z, e->lru_prev);
    uint32_t       next = chunk_index(z, e->lru_next);

    if (prev != 0) {
        ZW32(z, entry_at(z, prev)->lru_next, next);
    } else {
        ZW32(z, d->lru_head, next);
    }
    if (next != 0) {
        ZW32(z, entry_at(z, next)->lru_prev, prev);
    } else {
        ZW32(z, d->lru_tail, prev);
    }
}

void
entry_lru_push(zone_t *z, uint32_t i)
{
    dict_state_t  *d = &z->hdr->dict;
    entry_t       *e = entry_at(z, i);

    ZW32(z, e->lru_prev, 0);
    ZW32(z, e->lru_next, d->lru_head);
    entry_lru_link_head(z, i);
}

/* The entry's own links are set; hook it in front of the head. */
void
entry_lru_link_head(zone_t *z, uint32_t i)
{
    dict_state_t  *d = &z->hdr->dict;
    uint32_t       head = chunk_index(z, d->lru_head);

    if (head != 0) {
        ZW32(z, entry_at(z, head)->lru_prev, i);
    } else {
        ZW32(z, d->lru_tail, i);
    }
    ZW32(z, d->lru_head, i);
}

void
entry_remove(zone_t *z, uint32_t i)
{
    dict_state_t  *d = &z->hdr->dict;
    uint32_t      *link = entry_link(z, i);

    ZW32(z, *link, entry_at(z, i)->hnext);
    if (!(entry_at(z, i)->eflags & ENTRY_PINNED)) {
        entry_lru_unlink(z, i);
    }
    ZW32(z, d->nentries, d->nentries - 1);
    chunk_free(z, i);
}

static uint32_t
entry_alloc(zone_t *z, uint32_t n, uint32_t keep, int safe, int64_t *now,
    int *forcible)
{
    uint32_t  c;

    c = chunk_alloc(z, n);
    if (c != 0 || n > z->nchunks) {
        return c;
    }
    /* safe_* may only reclaim expired entries, so they look at all of them;
     * the others look near the tail, then evict in LRU order */
    evict_expired(z, n, keep, safe ? 0 : 64, now);
    if (!safe) {
        evict_lru(z, n, keep, now, forcible);
    }
    if (z->hdr->dict.free_count < n) {
        /* expired pinned entries are not in the LRU list */
        evict_sweep(z, n, keep, now);
    }
    return chunk_alloc(z, n);
}

static void
entry_fill(zone_t *z, uint32_t c, const char *key, size_t klen,
    uint32_t hash, const shmlock_value_t *v, int64_t expires, int pinned)
{
    entry_t  *e = entry_at(z, c);
    double    num = v->num;

    /* c is not reachable yet: plain writes */
    e->lru_prev = 0;
    *chunk_ref(z, c) = 0;
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

    chunk_write(z, c, 0, key, klen);
    if (v->type == SHMLOCK_TSTRING) {
        e->value_len = (uint32_t) v->len;
        chunk_write(z, c, klen, v->str, v->len);
    }
}

int
entry_put(zone_t *z, uint32_t old, const char *key, size_t klen,
    uint32_t hash, const shmlock_value_t *v, int64_t expires, int pinned,
    int safe, int64_t *now, int *forcible)
{
    dict_state_t  *d = &z->hdr->dict;
    uint32_t       c, *link;
    size_t         bytes = klen;

    if (v->type == SHMLOCK_TSTRING) {
        if (v->len > UINT32_MAX - klen) {
            return SHMLOCK_NO_MEMORY;
        }
        bytes += v->len;
    }
    if (bytes / CHUNK_CONT_DATA >= z->nchunks) {
        return SHMLOCK_NO_MEMORY;
    }
    if (old != 0 && entry_rewrite(z, old, klen, v, expires, pinned)) {
        return SHMLOCK_OK;
    }

    c = entry_alloc(z, chunks_for(bytes), old, safe, now, forcible);
    if (c == 0) {
        return SHMLOCK_NO_MEMORY;
    }
    entry_fill(z, c, key, klen, hash, v, expires, pinned);

    /* eviction may have rewritten the chains: find the links afresh */
    if (old != 0) {
        link = entry_link(z, old);
        entry_at(z, c)->hnext = entry_at(z, old)->hnext;
        ZW32(z, *link, c);
        if (!(entry_at(z, old)->eflags & ENTRY_PINNED)) {
            entry_lru_unlink(z, old);
        }
        chunk_free(z, old);
    } else {
        link = &z->buckets[hash & z->bucket_mask];
        entry_at(z, c)->hnext = *link;
        ZW32(z, *link, c);
        ZW32(z, d->nentries, d->nentries + 1);
    }
    if (!pinned) {
        entry_at(z, c)->lru_next = d->lru_head;    /* c is fresh: no record */
        entry_lru_link_head(z, c);
    }
    return SHMLOCK_OK;
}

int
entry_value_equal(const zone_t *z, uint32_t i, const shmlock_value_t *v)
{
    const entry_t  *e = entry_at(z, i);
    double          num;

    if (e->vtype != v->type) {
        return 0;
    }
    switch (v->type) {
    case SHMLOCK_TSTRING:
        return e->value_len == v->len
               && chunk_equal(z, i, e->key_len, v->str, v->len);
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
entry_value_out(const zone_t *z, uint32_t i, shmlock_value_t *out)
{
    const entry_t  *e = entry_at(z, i);

    out->type = e->vtype;
    out->flags = e->user_flags;
    out->len = e->value_len;
    memcpy(&out->num, &e->num, sizeof(out->num));
}

void
entry_each(zone_t *z, entry_visit_pt fn, void *ctx)
{
    uint32_t  b, i, next, steps = 0;

    for (b = 0; b <= z->bucket_mask; b++) {
        for (i = chunk_index(z, z->buckets[b]); i != 0; i = next) {
            if (chunk_walk_over(z, &steps)) {
                return;
            }
            next = chunk_index(z, entry_at(z, i)->hnext);
            if (fn(z, i, ctx) != 0) {
                return;
            }
        }
    }
}
