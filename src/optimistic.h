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

/* SHMLOCK_OK / SHMLOCK_AGAIN as shdict_get, or OPTIMISTIC_RETRY. */
int optimistic_get(shard_t *sh, const char *key, size_t klen, uint32_t hash,
    int get_stale, shmlock_value_t *out, char *buf, size_t buf_size);

/*
 * Whether key holds a live (unexpired) value at now_ms: 1, 0 (absent or
 * expired), or OPTIMISTIC_RETRY.  Writes nothing at all, not even the
 * read mark: the lock's failed acquire asks it before it would take the
 * mutex, so that a contended key costs its waiters no write to the
 * shard's lines.
 */
int optimistic_live(shard_t *sh, const char *key, size_t klen, uint32_t hash,
    int64_t now_ms);

#endif /* OPTIMISTIC_H */
