#include "evict.h"

/*
 * Walks from the LRU tail towards the head freeing expired entries, until
 * `need` chunks are free or `scan` entries were looked at (0: no limit).
 */
void
evict_expired(shard_t *sh, uint32_t need, uint32_t keep, uint32_t scan,
    int64_t *now)
{
    shard_dict_t  *d = &sh->hdr->dict;
    uint32_t       i = chunk_index(sh, d->lru_tail), prev, seen = 0;

    while (i != 0 && d->free_count < need && (scan == 0 || seen < scan)) {
        if (chunk_walk_over(sh, &seen)) {
            return;
        }
        prev = chunk_index(sh, entry_at(sh, i)->lru_prev);
        if (i != keep && entry_expired(entry_at(sh, i), now)) {
            entry_remove(sh, i);
            sh->hdr->stats.expired++;
        }
        i = prev;
    }
}

/*
 * CLOCK over the LRU list: the tail entry is evicted unless it is pinned
 * (stored by add and live) or was read since it last reached the tail; those
 * go back to the head.  Each entry is looked at most twice, so "no memory"
 * comes only when nothing evictable is left.
 */
void
evict_lru(shard_t *sh, uint32_t need, uint32_t keep, int64_t *now,
    int *forcible)
{
    shard_dict_t  *d = &sh->hdr->dict;
    uint32_t       n = d->nentries < sh->nchunks ? d->nentries : sh->nchunks;
    uint64_t       budget = 2 * (uint64_t) n + 2;
    uint32_t       i;
    entry_t       *e;

    while (d->free_count < need && budget-- > 0
           && (i = chunk_index(sh, d->lru_tail)) != 0)
    {
        e = entry_at(sh, i);

        if (entry_expired(e, now) && i != keep) {
            entry_remove(sh, i);
            sh->hdr->stats.expired++;

        } else if (i == keep) {
            entry_lru_unlink(sh, i);
            entry_lru_push(sh, i);

        } else if (*chunk_ref(sh, i) != 0) {
            *chunk_ref(sh, i) = 0;
            entry_lru_unlink(sh, i);
            entry_lru_push(sh, i);

        } else {
            entry_remove(sh, i);
            sh->hdr->stats.evictions++;
            *forcible = 1;
        }
    }
}

/*
 * Pinned (add) entries are not in the LRU list, so expired ones are found
 * by sweeping the buckets from a cursor kept in the shard: each sweep goes
 * on where the last stopped, so the cost is spread over the allocations
 * that need it.  Stops once `need` chunks are free or after a full turn.
 */
void
evict_sweep(shard_t *sh, uint32_t need, uint32_t keep, int64_t *now)
{
    shard_dict_t  *d = &sh->hdr->dict;
    uint32_t       b, n, i, next, steps = 0;

    b = d->sweep & sh->bucket_mask;
    for (n = 0; n <= sh->bucket_mask && d->free_count < need; n++) {
        for (i = chunk_index(sh, sh->buckets[b]); i != 0; i = next) {
            if (chunk_walk_over(sh, &steps)) {
                return;
            }
            next = chunk_index(sh, entry_at(sh, i)->hnext);
            if (i != keep && entry_expired(entry_at(sh, i), now)) {
                entry_remove(sh, i);
                sh->hdr->stats.expired++;
            }
        }
        b = (b + 1) & sh->bucket_mask;
    }
    WORDSTORE32(d->sweep, b);
}
