#include "entry.h"
#include "hash.h"

#include <stddef.h>
#include <string.h>

_Static_assert(sizeof(entry_t) == SHARD_CHUNK_SIZE, "entry_t is one chunk");
_Static_assert(offsetof(entry_t, data) == CHUNK_HEAD_OFF,
               "an entry's data is where chunk.h looks for a head's data");
_Static_assert(offsetof(entry_t, num) % 8 == 0
               && offsetof(entry_t, num) == CHUNK_HEAD_OFF + ENTRY_ROOM_SHORT,
               "a number is one aligned word, after the short room");
_Static_assert(offsetof(entry_t, meta) % 8 == 0, "meta is one aligned word");
_Static_assert(SHMLOCK_KEY_MAX < (1 << 16) && SHMLOCK_TLIST < 8,
               "a key's length and a type fit their bits of meta");

int64_t
entry_exp_coarse(uint64_t code)
{
    return (int64_t) ((code - ENTRY_EXP_FINE) << 10);
}

uint32_t
entry_lookup(const shard_t *sh, const char *key, size_t klen, uint32_t hash)
{
    return entry_find(sh, key, klen, hash);
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
    if (!entry_pinned(entry_at(sh, i))) {
        entry_lru_unlink(sh, i);
    }
    WORDSTORE32(d->nentries, d->nentries - 1);
    entry_free(sh, i);
}

/* entry_free's walk over the nodes of a list (entry.h) */
void
entry_free_nodes(shard_t *sh, uint32_t i)
{
    uint32_t  n, next, steps = 0;

    for (n = chunk_index(sh, entry_at(sh, i)->list.first); n != 0; n = next) {
        if (chunk_walk_over(sh, &steps)) {
            break;
        }
        next = chunk_index(sh, entry_at(sh, n)->hnext);
        chunk_free(sh, n);
    }
}

uint32_t
entry_user_flags_read(const shard_t *sh, uint32_t i)
{
    const entry_t  *e = entry_at(sh, i);
    uint32_t        flags;

    chunk_read(sh, i, entry_room(e), entry_key_len(e), (char *) &flags,
               sizeof(flags));
    return flags;
}

int
entry_value_equal(const shard_t *sh, uint32_t i, const shmlock_value_t *v)
{
    const entry_t  *e = entry_at(sh, i);
    double          num;

    if (entry_vtype(e) != (uint32_t) v->type) {
        return 0;
    }
    switch (v->type) {
    case SHMLOCK_TSTRING:
        return e->value_len == v->len
               && chunk_equal(sh, i, ENTRY_ROOM_STRING, entry_voff(e), v->str,
                              v->len);
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
entry_each(shard_t *sh, entry_visit_pt fn, void *ctx)
{
    entry_each_in(sh, 0, sh->bucket_mask + 1, fn, ctx);
}

void
entry_each_in(shard_t *sh, uint32_t from, uint32_t to, entry_visit_pt fn,
    void *ctx)
{
    uint32_t  b, i, next, steps = 0;

    for (b = from; b < to && b <= sh->bucket_mask; b++) {
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
