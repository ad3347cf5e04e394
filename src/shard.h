/*
 * shard: one shard of a zone, in shared memory (shard_hdr_t) and as a
 * process sees it (shard_t).  A shard is a dictionary of its own, with its
 * own mutex: the zone (zone.h, which draws the whole layout) hands each
 * key to one shard by its hash.
 *
 *   +-------------+-----------+--------------+---------+-----+------------+
 *   | shard_hdr_t | buckets   | read marks   | chunk 0 | ... | slot_hdr_t |
 *   | (this file) | u32 each  | u8 per chunk | unused  |     | lock slots |
 *   |             |           |              |         |     | (slot.h)   |
 *   +-------------+-----------+--------------+---------+-----+------------+
 *   0             buckets_off refs_off       chunks_off      slots_off
 *
 * Everything in a shard is addressed by offsets or 32-bit chunk indices,
 * never by pointers: each process maps the zone at its own address.
 */

#ifndef SHARD_H
#define SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "shmtx.h"
#include "slot.h"

#define SHARD_CHUNK_SIZE   64      /* the unit of a shard's memory */
#define SHARD_UNDO_BYTES   4096

/*
 * The one update that is not published by a single word store: rewriting
 * an entry in place (into as many chunks as it has, or fewer), which needs
 * no free memory (rewrite.c).  The old head chunk, the old value bytes the
 * new value overwrites and the link that cuts off chunks no longer needed
 * are saved here first; recovery puts them back if the writer died with
 * `active` set.
 */
typedef struct {
    uint32_t  active;
    uint32_t  entry;
    uint32_t  len;           /* saved value bytes */
    uint32_t  cut;           /* the chunk whose `next` was cut (0: none, or
                                the head, saved whole) */
    uint32_t  cut_next;      /* its `next` before the cut */
    uint32_t  pad;
    char      head[SHARD_CHUNK_SIZE];
    char      bytes[SHARD_UNDO_BYTES];
} shard_undo_t;

/*
 * The dictionary's bookkeeping: derived from the hash chains, which are
 * the truth (see wordstore.h), and rebuilt from them by recover.c.
 */
typedef struct {
    uint32_t  free_head;     /* free chunk list, linked through chunk.next */
    uint32_t  free_count;
    uint32_t  lru_head;      /* most recently written evictable entry */
    uint32_t  lru_tail;
    uint32_t  nentries;      /* all entries, pinned or not */
    uint32_t  sweep;         /* next bucket the expired-entry sweep visits */
    uint32_t  recoveries;    /* times a dead holder's mutex was taken over */
} shard_dict_t;

/*
 * The shard's counters, for dict:stats(): written only by the holder of
 * the mutex, by plain increments.  They are figures, not structure: no
 * word store (wordstore.h), so no crash point of the test build's
 * countdown, and recovery neither reads nor rebuilds them (a holder killed
 * in the middle loses at most its own increment).  On a line of their own:
 * only contention, eviction and expiry write them, so the operations that
 * meet none of those touch no extra line.
 */
typedef struct {
    uint64_t  spins;      /* acquisitions that waited for the mutex by
                             spinning or yielding, and never slept */
    uint64_t  sleeps;     /* acquisitions that slept on the futex */
    uint64_t  evictions;  /* live entries evicted to make room */
    uint64_t  expired;    /* expired entries freed */
} __attribute__((aligned(64))) shard_stats_t;

/* A shard's header: everything an update writes, the counters, then the
 * undo area. */
typedef struct {
    /*
     * The mutex, the seqlock word and the bookkeeping share one cache
     * line: spread over three lines, every update moved three lines
     * between cores.
     */
    struct {
        shmtx_t       mutex;
        uint32_t      seq;       /* odd while a writer changes the dictionary:
                                    lets get() read without the mutex
                                    (seqlock.h) */
        shard_dict_t  dict;
    } __attribute__((aligned(64)));
    shard_stats_t  stats;
    shard_undo_t   undo;
} shard_hdr_t;

_Static_assert(offsetof(shard_hdr_t, dict) + sizeof(shard_dict_t)
               - offsetof(shard_hdr_t, mutex) <= 64,
               "the shard header's hot words share one cache line");
_Static_assert(offsetof(shard_hdr_t, mutex) % 64 == 0,
               "the shard header's hot line is aligned");
_Static_assert(offsetof(shard_hdr_t, stats) == 64
               && sizeof(shard_stats_t) == 64,
               "the shard's counters fill the line after the hot one");

/*
 * One shard as a process sees it: what the dictionary code works on.  The
 * geometry is this process's copy, checked once at attach (zone.c):
 * nothing a writer puts in the shard later can move it.
 */
typedef struct {
    shard_hdr_t   *hdr;
    uint32_t      *buckets;
    uint32_t       bucket_mask;
    uint32_t       nchunks;       /* usable chunks: indices 1..nchunks */
    char          *chunks;        /* chunk 0, which belongs to no entry */
    uint8_t       *refs;          /* read marks, indexed by chunk */
    uint32_t       broken;        /* set when the call under way met an
                                     index out of range or a walk too long:
                                     the call answers SHMLOCK_CORRUPT */
    uint32_t       scratch;       /* where a write meant for a link that is
                                     not there goes (a corrupt chain) */
    slots_t        slots;         /* the shard's lock slots (slot.h) */
} shard_t;

#endif /* SHARD_H */
