/*
 * spill: a shard's chunks lent to its lock slots (issue 34).  Past the
 * floor of its slot table (slot.h, "Spilled slots"), a shard's lock keys
 * take two chunks each from the dictionary's free list, as a `set` takes
 * room: when none is free, expired entries near the LRU tail go first,
 * then live `set` entries in LRU order, then expired pinned ones (never a
 * live entry stored by `add`), inside a seqlock write for the lock-free
 * readers of the dictionary.  The slots give their chunks back as soon as
 * they are free.  So a dictionary full of `set` entries never refuses a
 * lock, and a shard answers "no memory" to a lock only when its memory is
 * held by live locks and `add` entries.  The shard's mutex is held.
 */

#ifndef SPILL_H
#define SPILL_H

#include "shard.h"

/* The shard's slot table spills into its chunks (zone_attach). */
void spill_attach(shard_t *sh);

#endif /* SPILL_H */
