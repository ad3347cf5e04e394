#include "list.h"

void
list_node_fill(shard_t *sh, uint32_t c, const shmlock_value_t *v)
{
    shmlock_value_t  elem = *v;
    entry_t         *n = entry_at(sh, c);

    elem.flags = 0;
    entry_fill(sh, c, "", 0, 0, &elem, 0, 0);
    n->hnext = 0;
    n->lru_next = 0;
}

void
list_fill(shard_t *sh, uint32_t c, const char *key, size_t klen,
    uint32_t hash, const shmlock_value_t *v)
{
    shmlock_value_t  none = { .type = SHMLOCK_TNUMBER };
    uint32_t         last = c, node, n;
    entry_t         *e;

    /* one allocation for both, cut in two: the head's chunks, the node's */
    for (n = chunks_for(ENTRY_ROOM_SHORT, klen); n > 1; n--) {
        last = chunk_next(sh, last);
    }
    node = chunk_next(sh, last);
    ((chunk_t *) chunk_at(sh, last))->next = 0;    /* c is unreachable yet */

    list_node_fill(sh, node, v);
    entry_fill(sh, c, key, klen, hash, &none, 0, 0);
    e = entry_at(sh, c);
    e->meta = entry_meta(klen, SHMLOCK_TLIST, 0, 0, 0);
    e->value_len = 1;
    e->list.first = node;
    e->list.last = node;
}

void
list_push(shard_t *sh, uint32_t i, uint32_t c, int side)
{
    entry_t   *e = entry_at(sh, i);
    entry_t   *n = entry_at(sh, c);
    uint32_t   end;

    if (side == SHMLOCK_LEFT) {
        end = chunk_index(sh, e->list.first);
        n->hnext = end;                          /* c is fresh: no record */
        WORDSTORE32(e->list.first, c);           /* the commit */
        if (end != 0) {
            WORDSTORE32(entry_at(sh, end)->lru_prev, c);
        } else {
            WORDSTORE32(e->list.last, c);
        }
    } else {
        end = chunk_index(sh, e->list.last);
        n->lru_prev = end;
        if (end != 0) {
            WORDSTORE32(entry_at(sh, end)->hnext, c);   /* the commit */
        } else {
            WORDSTORE32(e->list.first, c);
        }
        WORDSTORE32(e->list.last, c);
    }
    WORDSTORE32(e->value_len, e->value_len + 1);
}

uint32_t
list_end(shard_t *sh, uint32_t i, int side, int *only)
{
    entry_t   *e = entry_at(sh, i);
    uint32_t   first = chunk_index(sh, e->list.first);
    uint32_t   last = chunk_index(sh, e->list.last);
    uint32_t   prev;

    if (first == 0 || last == 0 || entry_at(sh, last)->hnext != 0
        || entry_at(sh, first)->lru_prev != 0)
    {
        sh->broken = 1;
        return 0;
    }
    *only = entry_at(sh, first)->hnext == 0;
    if (*only ? first != last : e->value_len < 2) {
        sh->broken = 1;
        return 0;
    }
    if (side == SHMLOCK_LEFT) {
        return first;
    }
    /* the right pop follows the back link: it must agree with the truth */
    prev = chunk_index(sh, entry_at(sh, last)->lru_prev);
    if (!*only && (prev == 0 || entry_at(sh, prev)->hnext != last)) {
        sh->broken = 1;
        return 0;
    }
    return last;
}

void
list_pop(shard_t *sh, uint32_t i, int side)
{
    entry_t   *e = entry_at(sh, i);
    uint32_t   gone, end;

    if (side == SHMLOCK_LEFT) {
        gone = chunk_index(sh, e->list.first);
        end = chunk_index(sh, entry_at(sh, gone)->hnext);
        WORDSTORE32(e->list.first, end);         /* the commit */
        WORDSTORE32(entry_at(sh, end)->lru_prev, 0);
    } else {
        gone = chunk_index(sh, e->list.last);
        end = chunk_index(sh, entry_at(sh, gone)->lru_prev);
        WORDSTORE32(entry_at(sh, end)->hnext, 0);   /* the commit */
        WORDSTORE32(e->list.last, end);
    }
    WORDSTORE32(e->value_len, e->value_len - 1);
    /* unreachable now: a crash from here on leaks it until the recovery */
    chunk_free(sh, gone);
}

void
list_rebuild(shard_t *sh, uint32_t i, list_mark_pt mark, void *ctx)
{
    entry_t   *e = entry_at(sh, i);
    uint32_t   n, prev = 0, count = 0, steps = 0;

    for (n = e->list.first; n != 0; n = entry_at(sh, n)->hnext) {
        if (n > sh->nchunks || chunk_walk_over(sh, &steps)) {
            /* not from a crash, which leaves the links whole: the zone is
             * corrupt, and the walk stops there */
            sh->broken = 1;
            break;
        }
        entry_at(sh, n)->lru_prev = prev;
        mark(sh, n, ctx);
        prev = n;
        count++;
    }
    e->list.last = prev;
    e->value_len = count;
}
