/*
 * chunk: the 64-byte unit of zone memory and its free list.
 *
 * An entry's chunks are linked through `next`, which is also the link of
 * the free list.  Allocation takes the first n chunks of the free list as
 * they are already linked, so it costs three word writes whatever n
 * is; freeing splices a whole chain back the same way.
 */

#ifndef CHUNK_H
#define CHUNK_H

#include "zone.h"
#include "zw.h"

#define CHUNK_HEAD_DATA   16
#define CHUNK_CONT_DATA   60

#define ENTRY_PINNED      0x01   /* stored by add: never evicted while live,
                                    and kept out of the LRU list */

typedef struct {
    uint32_t  next;        /* next chunk of this entry (or of the free list) */
    uint32_t  hnext;       /* next entry in the hash chain */
    uint32_t  lru_prev;
    uint32_t  lru_next;
    uint32_t  hash;
    uint32_t  value_len;   /* string values */
    uint32_t  user_flags;
    uint16_t  key_len;
    uint8_t   vtype;
    uint8_t   eflags;
    uint64_t  expires;     /* monotonic ms, 0 = never */
    uint64_t  num;         /* number (double bits) or boolean */
    char      data[CHUNK_HEAD_DATA];   /* key, then string value */
} entry_t;

typedef struct {
    uint32_t  next;
    char      data[CHUNK_CONT_DATA];
} cont_t;

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
chunk_index(const zone_t *z, uint32_t i)
{
    if (__builtin_expect(i > z->nchunks, 0)) {
        ((zone_t *) z)->broken = 1;     /* the one field a reader may set */
        return 0;
    }
    return i;
}

static inline void *
chunk_at(const zone_t *z, uint32_t i)
{
    return z->chunks + (size_t) i * ZONE_CHUNK_SIZE;
}

/* A walk that took more steps than there are chunks went round a cycle. */
static inline int
chunk_walk_over(const zone_t *z, uint32_t *steps)
{
    if (__builtin_expect(++*steps > z->nchunks, 0)) {
        ((zone_t *) z)->broken = 1;
        return 1;
    }
    return 0;
}

static inline entry_t *
entry_at(const zone_t *z, uint32_t i)
{
    return (entry_t *) chunk_at(z, i);
}

/*
 * "Read since it last reached the LRU tail" lives outside the entries, in
 * a byte per chunk: readers without the mutex may set it on a chunk that is
 * being reused, which must never touch the chunk itself.  A hint only.
 */
static inline uint8_t *
chunk_ref(const zone_t *z, uint32_t i)
{
    return &z->refs[i];
}

/* The next chunk of i's chain (0: the end), checked. */
static inline uint32_t
chunk_next(const zone_t *z, uint32_t i)
{
    return chunk_index(z, ((const cont_t *) chunk_at(z, i))->next);
}

static inline void
chunk_mark_read(const zone_t *z, uint32_t i)
{
    uint8_t  *r = chunk_ref(z, i);

    if (__atomic_load_n(r, __ATOMIC_RELAXED) == 0) {
        __atomic_store_n(r, 1, __ATOMIC_RELAXED);
    }
}

static inline uint32_t
chunks_for(size_t bytes)
{
    if (bytes <= CHUNK_HEAD_DATA) {
        return 1;
    }
    return 1 + (uint32_t) ((bytes - CHUNK_HEAD_DATA + CHUNK_CONT_DATA - 1)
                           / CHUNK_CONT_DATA);
}


void chunk_format(zone_t *z);
/* First of n linked chunks, or 0 when fewer than n are free. */
uint32_t chunk_alloc(zone_t *z, uint32_t n);
void chunk_free(zone_t *z, uint32_t first);

/* Copy bytes in or out of an entry's data stream (key then value). */
void chunk_write(zone_t *z, uint32_t head, size_t off, const char *src,
    size_t len);
void chunk_read(const zone_t *z, uint32_t head, size_t off, char *dst,
    size_t len);
int chunk_equal(const zone_t *z, uint32_t head, size_t off, const char *s,
    size_t len);

#endif /* CHUNK_H */
