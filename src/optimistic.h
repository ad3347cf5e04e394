/*
 * optimistic: get() without the shard's mutex, as a seqlock reader
 * (seqlock.h).
 *
 * The reader notes an even sequence word, looks the key up and copies the
 * value with every index and length bounds-checked (it may see a
 * half-written state), then checks that the word did not move.  Only then
 * is anything it read returned; otherwise the caller retries or takes the
 * mutex.  The reader never writes the shard, except the read-mark byte,
 * which is a hint (see chunk_mark_read).
 */

#ifndef OPTIMISTIC_H
#define OPTIMISTIC_H

#include "shard.h"
#include "shmlock.h"

#define OPTIMISTIC_RETRY  (-1)

/* SHMLOCK_OK / SHMLOCK_AGAIN as shdict_get, or OPTIMISTIC_RETRY.  *now:
 * the clock (ms) to compare expiries with; 0: read it when an expiry is
 * met, and leave the reading there. */
int optimistic_get(shard_t *sh, const char *key, size_t klen, uint32_t hash,
    int get_stale, shmlock_value_t *out, char *buf, size_t buf_size,
    int64_t *now);

#endif /* OPTIMISTIC_H */
