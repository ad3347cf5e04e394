/*
 * zone: the layout of a zone file and this process's handle on it.
 *
 * A zone is split into shards by key hash, each a dictionary of its own
 * with its own mutex (shard.h), so that processes changing different keys
 * do not queue on one lock nor pass one cache line between their cores.
 * By default zones under 2 MiB have one shard, larger ones as many as keep
 * each shard at least ZONE_SHARD_AUTO_MIN bytes, up to ZONE_SHARDS_MAX;
 * the creator may ask for a count instead (each shard then at least
 * ZONE_SHARD_MIN bytes).  An entry lives in one shard, so the largest
 * entry is bounded by a shard's memory.
 *
 * The zone file, every region 64-byte aligned:
 *
 *   +------------+----------------+-----------+-----------+-----+---------+
 *   | zone_hdr_t | wait words     | shard 0   | shard 1   | ... | shard   |
 *   | magic,     | seq[1024],     |           |           |     | n - 1   |
 *   | layout,    | sleepers[1024] |           |           |     |         |
 *   | geometry,  | (wait.h);      |           |           |     |         |
 *   | dead       | gen[1024]      |<-shard_size->         |     |         |
 *   +------------+----------------+-----------+-----------+-----+---------+
 *   0            waits_off        shards_off
 *
 * The generation words (gen) are counters for the zone's users, indexed
 * by a key's hash: the cache bumps a key's word when it changes the key,
 * and its per-process copies compare the word with the one they saw
 * (shmlock.h, shmlock_zone_gens).  No operation of the dictionary reads
 * them, so a garbage word costs a user a revalidation, never the zone's
 * integrity.
 *
 * A shard (offsets from its start, the same in every shard):
 *
 *   +-------------+-------------+------------+---------+-----+-----------+
 *   | shard_hdr_t | buckets     | read marks | chunk 0 | ... | slot_hdr_t|
 *   | mutex, seq, | nbuckets    | nchunks+1  | unused  | 64 B| then      |
 *   | bookkeeping,| x u32: head | x u8       |         | each| nslots    |
 *   | counters,   | chunk index |            |         |     | lock slots|
 *   | undo area   |             |            |         |     | (slot.h)  |
 *   +-------------+-------------+------------+---------+-----+-----------+
 *   0             buckets_off   refs_off     chunks_off      slots_off
 *
 * An entry is a chain of chunks: a head chunk (entry.h) in its bucket's
 * hash chain, then continuation chunks (chunk.h) for the rest of its key
 * and value, each chunk linked by its first word:
 *
 *   buckets[hash & mask]
 *     |
 *     v
 *   head (entry_t) --hnext--> head (entry_t) --hnext--> 0
 *     | next                    | next
 *     v                         v
 *   chunk (chunk_t)             0
 *     | next
 *     v
 *     0
 *
 * A free chunk is on the shard's free list (free_head, through `next`); an
 * evictable entry also on its LRU list (lru_head .. lru_tail, through
 * lru_prev and lru_next of the head).  A list's elements hang from its
 * head (list.h), each an entry-shaped chain in no hash chain:
 *
 *   head (list) --list.first--> element --hnext--> element --hnext--> 0
 *
 * Layout 6: lists.  Layout 7: a wait word's sleeper count tags its key
 * (wait.h), so that a release wakes one sleeper.  Layout 8: each shard
 * ends with its lock slots (slot.h).  Layout 9: the locks live there (no
 * lock is a dictionary entry any more), so the slots take more room: a
 * power of two of them, about 1/16 of the shard's bytes (ZONE_SLOT_SHARE),
 * at least ZONE_SLOTS_MIN.  Layout 10: a slot keeps its key's kind beside
 * the length (a lock's, or a holder group's record or head: slot.h,
 * group.h), no longer spelt in the key's bytes, and a group's head
 * counts 24 bits of holders, not 16.  Layout 11: an entry's head keeps 28
 * bytes of fields, not 48 (entry.h), so that 32 bytes of key and string
 * fit in it: a small entry takes one chunk, not two.  Layout 12: the slot
 * table is a floor; keys past it spill into the shard's chunks, two each,
 * chained from their home slot's mark record (slot.h, spill.h), and a
 * ticket names its slot by an index of its shard (the shard is its
 * hash's).
 *
 * The header starts with a magic string, the layout version and the size,
 * so a foreign, older or truncated file is refused rather than trusted;
 * the geometry is a function of the size and the shard count, and is
 * checked as such.
 */

#ifndef ZONE_H
#define ZONE_H

#include <stddef.h>
#include <stdint.h>

#include "shard.h"
#include "shmlock.h"

#define ZONE_MAGIC            "SHMLOCK"    /* 7 chars + NUL */
#define ZONE_LAYOUT           SHMLOCK_LAYOUT
#define ZONE_WAIT_WORDS       1024
#define ZONE_GEN_WORDS        SHMLOCK_GEN_WORDS
#define ZONE_SHARDS_MAX       16
#define ZONE_SHARD_AUTO_MIN   ((uint64_t) 1 << 20)
#define ZONE_SHARD_MIN        ((uint64_t) 64 << 10)
#define ZONE_SLOT_SHARE       16     /* a shard's bytes per slot byte */
#define ZONE_SLOTS_MIN        16

/* zone_hdr_t.dead */
#define ZONE_DESTROYED        1
#define ZONE_REMOVED          2

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
                                    file (ZONE_DESTROYED), or by a process
                                    that found the file removed behind our
                                    back (ZONE_REMOVED, shm_watch.h): every
                                    later call refuses */
    uint32_t      timens;        /* the creator's time namespace (its
                                    inode; 0: not known): expiry times
                                    in the zone are that one's clock */
    uint32_t      nslots;        /* lock slots per shard, a power of two */
    uint32_t      slots_pad;
    uint64_t      slots_off;     /* the shard's slot_hdr_t, then its slots */
} zone_hdr_t;

/* A zone as this process sees it: the handle of the ABI. */
struct shmlock_zone_s {
    zone_hdr_t    *hdr;
    struct shmlock_zone_s  *next;   /* this process's open zones (shm_zone.c) */
    uint64_t       dev;           /* the file, to find the mapping again */
    uint64_t       ino;
    char          *base;
    uint64_t       size;
    uint32_t      *wait_seq;      /* ZONE_WAIT_WORDS sequence words */
    uint32_t      *wait_sleepers; /* ZONE_WAIT_WORDS sleeper counts */
    uint32_t      *gen;           /* ZONE_GEN_WORDS generation words */
    uint32_t       handles;       /* references to the mapping in this
                                     process (all its Lua VMs and threads):
                                     unmapped when it drops to 0 */
    uint32_t       nshards;
    uint32_t       shard_shift;   /* the shard is the hash's top bits */
    /* the file behind the mapping, watched for its removal (shm_watch.h) */
    int            fd;            /* open on the file; -1 if none */
    int            lost;          /* this process can no longer tell that
                                     its name reaches the file: refused */
    int            listed;        /* the mapping's flock is taken
                                     (shm_removed.h); if not, each look
                                     at the file tries again */
    int64_t        watch_at;      /* coarse ms of the next check */
    uint64_t       serial;        /* this object's, unique in the process
                                     (zone_attach): a lock record's slot
                                     cache names its zone by it */
    char          *path;          /* the name it was opened by */
    shard_t        shard[ZONE_SHARDS_MAX];
};

/*
 * A pointer computed once stays in a register: GCC would otherwise work
 * &zone->shard[i] out again at every use on a hot path (three instructions
 * each time, callgrind), the array's stride being 80 bytes.  An empty asm
 * it cannot see through; no instruction.
 */
#define ZONE_PIN(p)  __asm__ ("" : "+r" (p))

/* The shard holding the keys of this hash (the buckets use its low bits). */
static inline shard_t *
zone_shard(struct shmlock_zone_s *zone, uint32_t hash)
{
    return &zone->shard[(uint32_t) ((uint64_t) hash >> zone->shard_shift)];
}

/*
 * The shard count for a zone of `size` bytes: `want` if it is 1, or a
 * power of two up to ZONE_SHARDS_MAX that leaves each shard ZONE_SHARD_MIN
 * bytes; the default for the size if want is 0; else 0 (not possible).
 */
uint32_t zone_shards_for(uint64_t size, uint32_t want);
/* Lays out an empty zone of `size` bytes at base (size and nshards as
 * zone_shards_for answered): header, wait words, empty shards. */
void zone_format(char *base, uint64_t size, uint32_t nshards);
/* Checks a mapped file's header; 0 when it is one of ours, intact. */
int zone_check(const char *base, uint64_t size);
/* Fills the process-local handle from a checked header. */
void zone_attach(struct shmlock_zone_s *zone, char *base, uint64_t size);

#endif /* ZONE_H */
