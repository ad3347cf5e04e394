/*
 * zone: the layout of a shared-memory zone and the per-process handle.
 *
 *   [ header | wait words | shard 0 | shard 1 | ... ]
 *   shard: [ shard header | hash buckets | read marks | chunks ]
 *
 * A zone is split into shards by key hash, each a dictionary of its own
 * with its own mutex, so that processes changing different keys do not
 * queue on one lock nor pass one cache line between their cores.  By
 * default zones under 2 MiB have one shard, larger ones as many as keep
 * each shard at least ZONE_SHARD_AUTO_MIN bytes, up to ZONE_SHARDS_MAX;
 * the creator may ask for a count instead (each shard then at least
 * ZONE_SHARD_MIN bytes).  An entry lives in one shard, so the largest
 * entry is bounded by a shard's memory.
 *
 * Everything in the zone is addressed by offsets or 32-bit chunk indices,
 * never by pointers: each process maps the zone at its own address.  The
 * header starts with a magic string, the layout version and the size, so a
 * foreign, older or truncated file is refused rather than trusted.
 */

#ifndef ZONE_H
#define ZONE_H

#include <stddef.h>
#include <stdint.h>

#include "shmtx.h"

#define ZONE_MAGIC        "SHMLOCK"    /* 7 chars + NUL */
#define ZONE_LAYOUT       4
#define ZONE_CHUNK_SIZE   64
#define ZONE_WAIT_WORDS   1024
#define ZONE_UNDO_BYTES   4096
#define ZONE_SHARDS_MAX       16
#define ZONE_SHARD_AUTO_MIN   ((uint64_t) 1 << 20)
#define ZONE_SHARD_MIN        ((uint64_t) 64 << 10)

/*
 * The one update that is not published by a single word store: rewriting
 * an entry in place (into as many chunks as it has, or fewer), which needs
 * no free memory.  The old head chunk, the old value bytes the new value
 * overwrites and the link that cuts off chunks no longer needed are saved
 * here first; recovery puts them back if the writer died with `active`
 * set.
 */
typedef struct {
    uint32_t  active;
    uint32_t  entry;
    uint32_t  len;           /* saved value bytes */
    uint32_t  cut;           /* the chunk whose `next` was cut (0: none, or
                                the head, saved whole) */
    uint32_t  cut_next;      /* its `next` before the cut */
    uint32_t  pad;
    char      head[ZONE_CHUNK_SIZE];
    char      bytes[ZONE_UNDO_BYTES];
} zone_undo_t;

/* The dictionary's bookkeeping: derived from the hash chains (see zw.h). */
typedef struct {
    uint32_t  free_head;     /* free chunk list, linked through chunk.next */
    uint32_t  free_count;
    uint32_t  lru_head;      /* most recently written evictable entry */
    uint32_t  lru_tail;
    uint32_t  nentries;      /* all entries, pinned or not */
    uint32_t  sweep;         /* next bucket the expired-entry sweep visits */
    uint32_t  recoveries;    /* times a dead holder's mutex was taken over */
} dict_state_t;

/* A shard's header: everything an update writes, then the undo area. */
typedef struct {
    /*
     * The mutex, the seqlock word and the bookkeeping share one cache
     * line: spread over three lines, every update moved three lines
     * between cores.
     */
    struct {
        shmtx_t       mutex;
        uint32_t      seq;       /* odd while a writer changes the dictionary:
                                    lets get() read without the mutex */
        dict_state_t  dict;
    } __attribute__((aligned(64)));
    zone_undo_t   undo;
} shard_hdr_t;

typedef struct {
    char          magic[8];
    uint32_t      layout;
    uint32_t      hdr_size;
    uint64_t      size;          /* bytes of the whole zone file */
    uint32_t      chunk_size;
    uint32_t      wait_words;
    uint64_t      waits_off;
    uint32_t      nshards;       /* a power of two */
    uint32_t      shard_hdr_size;
    uint64_t      shards_off;    /* offset of shard 0 */
    uint64_t      shard_size;    /* bytes of each shard, a multiple of 64 */
    /* each shard's geometry, offsets from the shard's start */
    uint32_t      nchunks;       /* usable chunks: indices 1..nchunks */
    uint32_t      nbuckets;      /* a power of two */
    uint64_t      buckets_off;
    uint64_t      refs_off;      /* one "recently read" byte per chunk */
    uint64_t      chunks_off;    /* offset of (unused) chunk 0 */
    uint64_t      pidns;         /* the creator's pid namespace: pids in
                                    the zone mean processes of that one */
    uint32_t      dead;          /* set by destroy before it unlinks the
                                    file: every later call refuses */
    uint32_t      pad;
} zone_hdr_t;

/*
 * One shard as a process sees it: what the dictionary code works on.  The
 * geometry is this process's copy, checked once at attach: nothing a writer
 * puts in the shard later can move it.
 */
typedef struct {
    shard_hdr_t   *hdr;
    uint32_t      *buckets;
    uint32_t       bucket_mask;
    uint32_t       nchunks;
    char          *chunks;
    uint8_t       *refs;          /* read marks, indexed by chunk */
    uint32_t       broken;        /* set when the call under way met an
                                     index out of range or a walk too long:
                                     the call answers SHMLOCK_CORRUPT */
    uint32_t       scratch;       /* where a write meant for a link that is
                                     not there goes (a corrupt chain) */
} zone_t;

struct shmlock_zone_s {
    zone_hdr_t    *hdr;
    struct shmlock_zone_s  *next;   /* this process's open zones (shm_zone.c) */
    uint64_t       dev;           /* the file, to find the mapping again */
    uint64_t       ino;
    char          *base;
    uint64_t       size;
    uint32_t      *wait_seq;      /* ZONE_WAIT_WORDS sequence words */
    uint32_t      *wait_sleepers; /* ZONE_WAIT_WORDS sleeper counts */
    uint32_t       handles;       /* references to the mapping in this
                                     process (all its Lua VMs and threads):
                                     unmapped when it drops to 0 */
    uint32_t       nshards;
    uint32_t       shard_shift;   /* the shard is the hash's top bits */
    zone_t         shard[ZONE_SHARDS_MAX];
};

/* The shard holding the keys of this hash (the buckets use its low bits). */
static inline zone_t *
zone_shard(struct shmlock_zone_s *zone, uint32_t hash)
{
    return &zone->shard[(uint32_t) ((uint64_t) hash >> zone->shard_shift)];
}

typedef struct {
    uint32_t  nshards;
    uint64_t  waits_off;
    uint64_t  shards_off;
    uint64_t  shard_size;
    uint32_t  nchunks;
    uint32_t  nbuckets;
    uint64_t  buckets_off;
    uint64_t  refs_off;
    uint64_t  chunks_off;
} zone_geometry_t;

/*
 * The shard count for a zone of `size` bytes: `want` if it is 1, or a
 * power of two up to ZONE_SHARDS_MAX that leaves each shard ZONE_SHARD_MIN
 * bytes; the default for the size if want is 0; else 0 (not possible).
 */
uint32_t zone_shards_for(uint64_t size, uint32_t want);
/* Lays out an empty zone of `size` bytes at base (size and nshards as
 * zone_shards_for answered). */
void zone_format(char *base, uint64_t size, uint32_t nshards);
/* Checks a mapped file's header; 0 when it is one of ours, intact. */
int zone_check(const char *base, uint64_t size);
/* Fills the process-local handle from a checked header. */
void zone_attach(struct shmlock_zone_s *zone, char *base, uint64_t size);

#endif /* ZONE_H */
