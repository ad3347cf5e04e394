/*
 * optimistic: get() without the zone mutex, seqlock style.
 *
 * Writers (holding the mutex) make hdr->seq odd while they change the
 * dictionary and even again after.  A reader notes an even seq, looks the
 * key up and copies the value with every index and length bounds-checked
 * (it may see a half-written state), then checks that seq did not move.
 * Only then is anything it read returned; otherwise the caller retries or
 * takes the mutex.  The reader never writes the zone, except the read-mark
 * byte, which is a hint (see chunk_mark_read).
 */

#ifndef OPTIMISTIC_H
#define OPTIMISTIC_H

#include "shmlock.h"
#include "zone.h"

#define OPTIMISTIC_RETRY  (-1)

/*
 * The odd seq must be visible before any change to the dictionary: a
 * store-store order, which a release fence gives (a compiler barrier on
 * x86, dmb on arm64); a full fence here cost an mfence per update.
 */
static inline void
zone_write_begin(zone_t *z)
{
    __atomic_store_n(&z->hdr->seq, z->hdr->seq + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
}

static inline void
zone_write_end(zone_t *z)
{
    __atomic_store_n(&z->hdr->seq, z->hdr->seq + 1, __ATOMIC_RELEASE);
}

/* SHMLOCK_OK / SHMLOCK_AGAIN as shdict_get, or OPTIMISTIC_RETRY. */
int optimistic_get(zone_t *z, const char *key, size_t klen, uint32_t hash,
    int get_stale, shmlock_value_t *out, char *buf, size_t buf_size);

#endif /* OPTIMISTIC_H */
