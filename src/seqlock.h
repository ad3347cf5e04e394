/*
 * seqlock: a shard's sequence word, which lets get() read without the
 * shard's mutex.
 *
 * Writers (holding the mutex) make the word odd before they change the
 * dictionary and even again after.  A reader notes an even value, reads
 * (every index and length bounds-checked: it may see a half-written
 * state), and keeps what it read only if the word did not move
 * (optimistic.c).  A writer that dies mid-update may leave the word odd:
 * whoever takes its mutex over repairs it.
 */

#ifndef SEQLOCK_H
#define SEQLOCK_H

#include <stdint.h>

/*
 * The odd value must be visible before any change to the dictionary: a
 * store-store order, which a release fence gives (a compiler barrier on
 * x86, dmb on arm64); a full fence here cost an mfence per update.
 */
static inline void
seqlock_write_begin(uint32_t *seq)
{
    __atomic_store_n(seq, *seq + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
}

static inline void
seqlock_write_end(uint32_t *seq)
{
    __atomic_store_n(seq, *seq + 1, __ATOMIC_RELEASE);
}

/* After a writer died, maybe with the word odd: even, and different from
 * any value a reader may have noted. */
static inline void
seqlock_repair(uint32_t *seq)
{
    __atomic_store_n(seq, (*seq | 1) + 1, __ATOMIC_RELEASE);
}

/* The value to note; odd: a writer is at work, do not read now. */
static inline uint32_t
seqlock_read_begin(const uint32_t *seq)
{
    return __atomic_load_n(seq, __ATOMIC_ACQUIRE);
}

/* 1 when what was read since seqlock_read_begin returned `start` holds. */
static inline int
seqlock_read_valid(const uint32_t *seq, uint32_t start)
{
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return __atomic_load_n(seq, __ATOMIC_RELAXED) == start;
}

#endif /* SEQLOCK_H */
