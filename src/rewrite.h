/*
 * rewrite: an entry rewritten in its own chunks, when the new key+value
 * needs as many chunks as the old or fewer, under an undo record in the
 * shard header (shard_undo_t) that recovery plays back if the writer died
 * midway.  The shard's mutex is held.
 */

#ifndef REWRITE_H
#define REWRITE_H

#include "entry.h"

/* Rewrites entry i as key (klen bytes, unchanged) = v; 0 when it does not
 * fit (then nothing was written). */
int rewrite_entry(shard_t *sh, uint32_t i, size_t klen,
    const shmlock_value_t *v, int64_t expires, int pinned);
/* Puts back what an interrupted rewrite changed; nothing if none was. */
void rewrite_undo(shard_t *sh);

#endif /* REWRITE_H */
