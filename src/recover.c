/*
 * Recovery after a holder of a shard's mutex died: the hash chains are
 * intact (see wordstore.h), so the LRU list, the free list, the
 * counters and the lists' derived words (list.h) are rebuilt from them.  O(size of the shard), and it only runs
 * after a crash.
 * Running it twice, or dying in the middle of it, is harmless: it reads
 * only the hash chains and rewrites only derived state.
 */

#include "recover.h"
#include "entry.h"
#include "list.h"
#include "rewrite.h"

#include <stdlib.h>

/* shards this process recovered (recover_counter) */
static uint32_t  recover_done;

static void
recover_mark(shard_t *sh, uint32_t i, uint8_t *seen)
{
    uint32_t  c, n = 0;

    for (c = i; c != 0 && c <= sh->nchunks && n++ < sh->nchunks;
         c = ((chunk_t *) chunk_at(sh, c))->next)
    {
        seen[c] = 1;
    }
}

/* slot_spill_chunks's mark: a spilled lock slot's chunk is in use */
static void
recover_mark_spilled(void *arg, uint32_t c)
{
    ((uint8_t *) arg)[c] = 1;
}

/* list_rebuild's mark: a node's chunks are in use */
static void
recover_mark_node(shard_t *sh, uint32_t node, void *seen)
{
    if (seen != NULL) {
        recover_mark(sh, node, seen);
    }
}

static void
recover_free_list(shard_t *sh, uint8_t *seen)
{
    shard_dict_t  *d = &sh->hdr->dict;
    uint32_t       c, head = 0, n = 0;

    for (c = sh->nchunks; c > 0; c--) {
        if (!seen[c]) {
            ((chunk_t *) chunk_at(sh, c))->next = head;
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
recover_free_count(shard_t *sh)
{
    shard_dict_t  *d = &sh->hdr->dict;
    uint32_t       c, n = 0;

    for (c = d->free_head; c != 0 && c <= sh->nchunks && n < sh->nchunks;
         c = ((chunk_t *) chunk_at(sh, c))->next)
    {
        n++;
    }
    d->free_count = n;
}

void
recover_shard(shard_t *sh)
{
    shard_dict_t  *d = &sh->hdr->dict;
    uint8_t       *seen;
    uint32_t       b, i, n = 0, steps = 0;
    entry_t       *e;

    /* first the one multi-word update, so the hash chains are whole */
    rewrite_undo(sh);
    /* the lock slots: the fallback's undo, their counters */
    slot_recover_locked(&sh->slots);

    seen = calloc((size_t) sh->nchunks + 1, 1);

    /*
     * A chain that leaves the chunks or comes round again is not from a
     * crash (which leaves the chains whole) but from some other writer:
     * the zone is corrupt, and the rebuild stops there, bounded.
     */
    d->lru_head = d->lru_tail = 0;
    for (b = 0; b <= sh->bucket_mask; b++) {
        for (i = sh->buckets[b]; i != 0; i = e->hnext) {
            if (i > sh->nchunks || chunk_walk_over(sh, &steps)) {
                sh->broken = 1;
                break;
            }
            e = entry_at(sh, i);
            n++;
            if (seen != NULL) {
                recover_mark(sh, i, seen);
            }
            if (entry_vtype(e) == SHMLOCK_TLIST) {
                list_rebuild(sh, i, recover_mark_node, seen);
            }
            if (entry_pinned(e)) {
                continue;
            }
            e->lru_prev = d->lru_tail;
            e->lru_next = 0;
            if (d->lru_tail != 0) {
                entry_at(sh, d->lru_tail)->lru_next = i;
            } else {
                d->lru_head = i;
            }
            d->lru_tail = i;
        }
    }
    d->nentries = n;

    if (seen != NULL) {
        /* the lock slots spilled into chunks are not free ones (slot.h) */
        slot_spill_chunks(&sh->slots, recover_mark_spilled, seen);
        recover_free_list(sh, seen);
        free(seen);
    } else {
        recover_free_count(sh);
    }
    d->recoveries++;
    __atomic_add_fetch(&recover_done, 1, __ATOMIC_RELAXED);
}

const volatile uint32_t *
recover_counter(void)
{
    return &recover_done;
}
