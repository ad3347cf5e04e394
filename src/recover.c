/*
 * Recovery after a holder of the zone mutex died: the hash chains are
 * intact (see zw.h), so the LRU list, the free list and the counters are
 * rebuilt from them.  O(size of the zone), and it only runs after a crash.
 * Running it twice, or dying in the middle of it, is harmless: it reads
 * only the hash chains and rewrites only derived state.
 */

#include "entry.h"
#include "shdict.h"

#include <stdlib.h>

static void
recover_mark(zone_t *z, uint32_t i, uint8_t *seen)
{
    uint32_t  c, n = 0;

    for (c = i; c != 0 && c <= z->nchunks && n++ < z->nchunks;
         c = ((cont_t *) chunk_at(z, c))->next)
    {
        seen[c] = 1;
    }
}

static void
recover_free_list(zone_t *z, uint8_t *seen)
{
    dict_state_t  *d = &z->hdr->dict;
    uint32_t       c, head = 0, n = 0;

    for (c = z->nchunks; c > 0; c--) {
        if (!seen[c]) {
            ((cont_t *) chunk_at(z, c))->next = head;
            head = c;
            n++;
        }
    }
    d->free_head = head;
    d->free_count = n;
}

/* Without memory for the marks, keep the free list as it is (a crash can
 * only have leaked chunks from it) and recount it. */
static void
recover_free_count(zone_t *z)
{
    dict_state_t  *d = &z->hdr->dict;
    uint32_t       c, n = 0;

    for (c = d->free_head; c != 0 && c <= z->nchunks && n < z->nchunks;
         c = ((cont_t *) chunk_at(z, c))->next)
    {
        n++;
    }
    d->free_count = n;
}

void
shdict_recover(zone_t *z)
{
    dict_state_t  *d = &z->hdr->dict;
    uint8_t       *seen;
    uint32_t       b, i, n = 0, steps = 0;
    entry_t       *e;

    /* first the one multi-word update, so the hash chains are whole */
    entry_rewrite_undo(z);

    seen = calloc((size_t) z->nchunks + 1, 1);

    /*
     * A chain that leaves the chunks or comes round again is not from a
     * crash (which leaves the chains whole) but from some other writer:
     * the zone is corrupt, and the rebuild stops there, bounded.
     */
    d->lru_head = d->lru_tail = 0;
    for (b = 0; b <= z->bucket_mask; b++) {
        for (i = z->buckets[b]; i != 0; i = e->hnext) {
            if (i > z->nchunks || chunk_walk_over(z, &steps)) {
                z->broken = 1;
                break;
            }
            e = entry_at(z, i);
            n++;
            if (seen != NULL) {
                recover_mark(z, i, seen);
            }
            if (e->eflags & ENTRY_PINNED) {
                continue;
            }
            e->lru_prev = d->lru_tail;
            e->lru_next = 0;
            if (d->lru_tail != 0) {
                entry_at(z, d->lru_tail)->lru_next = i;
            } else {
                d->lru_head = i;
            }
            d->lru_tail = i;
        }
    }
    d->nentries = n;

    if (seen != NULL) {
        recover_free_list(z, seen);
        free(seen);
    } else {
        recover_free_count(z);
    }
    d->recoveries++;
}
