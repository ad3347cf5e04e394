-- helpers.zone_layout: mirrors of src/zone.h (zone_hdr_t, shard_hdr_t
-- with its shmtx_t, dict_state_t, counters and zone_undo_t) and src/entry.h
-- (entry_t), for the specs that bend a zone's words on purpose (corrupt
-- it, leave it half destroyed).  Keep them in sync with the C structs:
-- users check LAYOUT and the header sizes against a real zone first.

local ffi = require "ffi"

ffi.cdef [[
typedef struct {
    char      magic[8];
    uint32_t  layout, hdr_size;
    uint64_t  size;
    uint32_t  chunk_size, wait_words;
    uint64_t  waits_off;
    uint32_t  nshards, shard_hdr_size;
    uint64_t  shards_off, shard_size;
    uint32_t  nchunks, nbuckets;
    uint64_t  buckets_off, refs_off, chunks_off;
    uint64_t  pidns;
    uint32_t  dead, timens;
    uint32_t  nslots, slots_pad;
    uint64_t  slots_off;
} shmlock_spec_zone_hdr_t;

typedef struct {
    uint32_t  lock, lock_start;     /* the owner: pid, start time (low) */
    uint32_t  waiters, takeovers;
    uint32_t  seq;
    uint32_t  free_head, free_count, lru_head, lru_tail, nentries, sweep,
              recoveries;
    uint8_t   hot_line_pad[16];
    uint64_t  stat_spins, stat_sleeps, stat_evictions, stat_expired;
    uint8_t   stats_pad[32];
    uint32_t  undo_active, undo_entry, undo_len, undo_cut, undo_cut_next,
              undo_pad;
    char      undo_head[64];
    char      undo_bytes[4096];
} shmlock_spec_shard_hdr_t;

/* meta (src/entry.h): the key's length in the low 16 bits, the type's 3,
 * pinned, user flags, the expiry's 43; the byte views assume a
 * little-endian host */
typedef struct {
    uint32_t  next, hnext, lru_prev, lru_next, hash, value_len;
    union {
        uint64_t  meta;
        struct {
            uint16_t  key_len;
            uint8_t   meta_type;      /* type, pinned << 3, user flags << 4 */
            uint8_t   meta_high[5];
        };
    };
    char      data[24];
    uint64_t  num;                    /* a string's bytes run over it */
} shmlock_spec_entry_t;
]]

return {
    LAYOUT = 12,
    ZONE_HDR = "shmlock_spec_zone_hdr_t",
    SHARD_HDR = "shmlock_spec_shard_hdr_t",
    ENTRY = "shmlock_spec_entry_t",
}
