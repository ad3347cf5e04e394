#include "spill.h"
#include "chunk.h"
#include "evict.h"
#include "seqlock.h"

/* Two chunks for a spilled slot: the slot's, then its record's. */
static int
spill_take(void *ctx, uint32_t *slot, uint32_t *rec)
{
    shard_t  *sh = ctx;
    int64_t   now = 0;
    int       forcible = 0;
    uint32_t  c;

    c = chunk_alloc(sh, 2);
    if (c == 0 && sh->nchunks >= 2) {
        /* as a set makes room (shdict.c), readers told by the seqlock */
        seqlock_write_begin(&sh->hdr->seq);
        evict_expired(sh, 2, 0, 64, &now);
        evict_lru(sh, 2, 0, &now, &forcible);
        if (sh->hdr->dict.free_count < 2) {
            evict_sweep(sh, 2, 0, &now);
        }
        seqlock_write_end(&sh->hdr->seq);
        c = chunk_alloc(sh, 2);
    }
    if (c == 0) {
        return -1;
    }
    *slot = c;
    *rec = chunk_next(sh, c);
    return *rec != 0 ? 0 : -1;
}

/* The two chunks back to the free list, linked as it links them. */
static void
spill_give(void *ctx, uint32_t slot, uint32_t rec)
{
    shard_t  *sh = ctx;

    WORDSTORE32(((chunk_t *) chunk_at(sh, slot))->next, rec);
    WORDSTORE32(((chunk_t *) chunk_at(sh, rec))->next, 0);
    chunk_free(sh, slot);
}

void
spill_attach(shard_t *sh)
{
    slot_attach_spill(&sh->slots, sh->chunks, sh->nchunks, spill_take,
                      spill_give, sh);
}
