/*
 * recover: what the next holder of a shard's mutex does after a holder
 * died with it (shard_lock.h): finish the one multi-word update's undo,
 * then rebuild the derived state (free list, LRU list, counters) from the
 * hash chains.
 */

#ifndef RECOVER_H
#define RECOVER_H

#include "shard.h"

void recover_shard(shard_t *sh);
/* How many shards this process has recovered (all zones), so that the
 * caller can report it: the core prints nothing. */
const volatile uint32_t *recover_counter(void);

#endif /* RECOVER_H */
