#include "entry.h"

/*
 * Walks from the LRU tail towards the head freeing expired entries, until
 * `need` chunks are free or `scan` entries were looked at (0: no limit).
 */
void
evict_expired(zone_t *z, uint32_t need, uint32_t keep, uint32_t scan,
    int64_t *now)
{
    dict_state_t  *d = &z->hdr->dict;
    uint32_t       i = chunk_index(z, d->lru_tail), prev, seen = 0;

    while (i != 0 && d->free_count < need && (scan == 0 || seen < scan)) {
        if (chunk_walk_over(z, &seen)) {
            return;
        }
        prev = chunk_index(z, entry_at(z, i)->lru_prev);
        if (i != keep && entry_expired(entry_at(z, i), now)) {
            entry_remove(z, i);
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
evict_lru(zone_t *z, uint32_t need, uint32_t keep, int64_t *now, int *forcible)
{
    dict_state_t  *d = &z->hdr->dict;
    uint32_t       n = d->nentries < z->nchunks ? d->nentries : z->nchunks;
    uint64_t       budget = 2 * (uint64_t) n + 2;
    uint32_t       i;
    entry_t       *e;

    while (d->free_count < need && budget-- > 0
           && (i = chunk_index(z, d->lru_tail)) != 0)
    {
        e = entry_at(z, i);

        if (entry_expired(e, now) && i != keep) {
            entry_remove(z, i);

        } else if (i == keep) {
            entry_lru_unlink(z, i);
            entry_lru_push(z, i);

        } else if (*chunk_ref(z, i) != 0) {
            *chunk_ref(z, i) = 0;
            entry_lru_unlink(z, i);
            entry_lru_push(z, i);

        } else {
            entry_remove(z, i);
            *forcible = 1;
        }
    }
}

/*
 * Pinned (add) entries are not in the LRU list, so expired ones are found
 * by sweeping the buckets from a cursor kept in the zone: each sweep goes
 * on where the last stopped, so the cost is spread over the allocations
 * that need it.  Stops once `need` chunks are free or after a full turn.
 */
void
evict_sweep(zone_t *z, uint32_t need, uint32_t keep, int64_t *now)
{
    dict_state_t  *d = &z->hdr->dict;
    uint32_t       b, n, i, next, steps = 0;

    b = d->sweep & z->bucket_mask;
    for (n = 0; n <= z->bucket_mask && d->free_count < need; n++) {
        for (i = chunk_index(z, z->buckets[b]); i != 0; i = next) {
            if (chunk_walk_over(z, &steps)) {
                return;
            }
            next = chunk_index(z, entry_at(z, i)->hnext);
            if (i != keep && entry_expired(entry_at(z, i), now)) {
                entry_remove(z, i);
            }
        }
        b = (b + 1) & z->bucket_mask;
    }
    ZW32(z, d->sweep, b);
}
