/*
 * evict: freeing entries to make room for a new one, in three ways: the
 * expired ones near the LRU tail, the LRU order itself (a CLOCK: a read
 * entry gets a second turn), and a sweep of the buckets for the expired
 * pinned ones the LRU list does not hold.  Each stops once `need` chunks
 * are free, and never frees entry `keep` (the one being replaced).  The
 * shard's mutex is held.  Each entry freed is counted in the shard's
 * figures (shard.h): `expired`, or `evictions` for a live one.
 */

#ifndef EVICT_H
#define EVICT_H

#include "entry.h"

/* From the LRU tail, the expired ones, looking at `scan` at most (0: no
 * limit). */
void evict_expired(shard_t *sh, uint32_t need, uint32_t keep, uint32_t scan,
    int64_t *now);
/* Whatever the LRU order gives; *forcible = 1 if a live entry went. */
void evict_lru(shard_t *sh, uint32_t need, uint32_t keep, int64_t *now,
    int *forcible);
/* The expired entries of every bucket in turn, from where the last sweep
 * stopped. */
void evict_sweep(shard_t *sh, uint32_t need, uint32_t keep, int64_t *now);

#endif /* EVICT_H */
