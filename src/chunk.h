/*
 * chunk: the 64-byte unit of a shard's memory, its free list, and the byte
 * stream an entry keeps in a chain of chunks.
 *
 * Every chunk starts with `next`, the link of its chain: the chunks of one
 * entry, or the free list.  Allocation takes the first n chunks of the
 * free list as they are already linked, so it costs three word writes
 * whatever n is; freeing splices a whole chain back the same way.
 *
 * A chain's first chunk is an entry's head (entry_t, entry.h), whose bytes
 * from CHUNK_HEAD_OFF on start the entry's data stream (key, then the rest
 * of the entry); each further chunk holds CHUNK_CONT_DATA bytes of it.
 * How much of the stream a head holds, its room, is the entry's to say
 * (entry.h: all CHUNK_HEAD_DATA bytes, or fewer when the head keeps a
 * number at its end), and every stream function here is told it:
 *
 *   head:  | next | entry fields (28 bytes)   | data[room] | (entry's) |
 *   chunk: | next | data[60]                                          |
 */

#ifndef CHUNK_H
#define CHUNK_H

#include <stddef.h>
#include <stdint.h>

#include "shard.h"
#include "wordstore.h"

#define CHUNK_HEAD_DATA   32      /* the most room a head has */
#define CHUNK_HEAD_OFF    (SHARD_CHUNK_SIZE - CHUNK_HEAD_DATA)
#define CHUNK_CONT_DATA   (SHARD_CHUNK_SIZE - 4)

typedef struct {
    uint32_t  next;        /* next chunk of this chain (0: the end) */
    char      data[CHUNK_CONT_DATA];
} chunk_t;

/*
 * Every chunk index the dictionary follows comes from shared memory, which
 * a crash, a bug or another writer may have filled with anything.  So an
 * index is checked where it is read from a link (chunk_index): one out of
 * range marks the call broken (it answers SHMLOCK_CORRUPT) and reads as 0,
 * the end of any chain; chunk 0 is in the mapping and belongs to no entry,
 * so code that follows a 0 anyway (a corrupt count said there was more)
 * touches nothing that matters.  Walks are bounded by the number of chunks
 * (no chain can be longer), so a cycle ends too.  chunk_at() itself trusts
 * its index: every index reaches it through chunk_index or a check of the
 * same kind (readers without the mutex, optimistic.c, check their own).
 */
static inline uint32_t
chunk_index(const shard_t *sh, uint32_t i)
{
    if (__builtin_expect(i > sh->nchunks, 0)) {
        ((shard_t *) sh)->broken = 1;     /* the one field a reader may set */
        return 0;
    }
    return i;
}

static inline void *
chunk_at(const shard_t *sh, uint32_t i)
{
    return sh->chunks + (size_t) i * SHARD_CHUNK_SIZE;
}

/* The data bytes of a chain's head chunk. */
static inline char *
chunk_head_data(const shard_t *sh, uint32_t i)
{
    return (char *) chunk_at(sh, i) + CHUNK_HEAD_OFF;
}

/* A walk that took more steps than there are chunks went round a cycle. */
static inline int
chunk_walk_over(const shard_t *sh, uint32_t *steps)
{
    if (__builtin_expect(++*steps > sh->nchunks, 0)) {
        ((shard_t *) sh)->broken = 1;
        return 1;
    }
    return 0;
}

/*
 * "Read since it last reached the LRU tail" lives outside the entries, in
 * a byte per chunk: readers without the mutex may set it on a chunk that is
 * being reused, which must never touch the chunk itself.  A hint only.
 */
static inline uint8_t *
chunk_ref(const shard_t *sh, uint32_t i)
{
    return &sh->refs[i];
}

/* The next chunk of i's chain (0: the end), checked. */
static inline uint32_t
chunk_next(const shard_t *sh, uint32_t i)
{
    return chunk_index(sh, ((const chunk_t *) chunk_at(sh, i))->next);
}

static inline void
chunk_mark_read(const shard_t *sh, uint32_t i)
{
    uint8_t  *r = chunk_ref(sh, i);

    if (__atomic_load_n(r, __ATOMIC_RELAXED) == 0) {
        __atomic_store_n(r, 1, __ATOMIC_RELAXED);
    }
}

/* The chunks of a chain holding a data stream of `bytes`, room of them in
 * its head. */
static inline uint32_t
chunks_for(size_t room, size_t bytes)
{
    if (bytes <= room) {
        return 1;
    }
    return 1 + (uint32_t) ((bytes - room + CHUNK_CONT_DATA - 1)
                           / CHUNK_CONT_DATA);
}


/* Every chunk of a fresh shard on the free list. */
void chunk_format(shard_t *sh);
/* First of n linked chunks, or 0 when fewer than n are free. */
uint32_t chunk_alloc(shard_t *sh, uint32_t n);
void chunk_free(shard_t *sh, uint32_t first);

/* Copy bytes in or out of a chain's data stream (room of it in the head)
 * from byte `off` on. */
void chunk_write(shard_t *sh, uint32_t head, size_t room, size_t off,
    const char *src, size_t len);
void chunk_read(const shard_t *sh, uint32_t head, size_t room, size_t off,
    char *dst, size_t len);
int chunk_equal(const shard_t *sh, uint32_t head, size_t room, size_t off,
    const char *s, size_t len);

#endif /* CHUNK_H */
