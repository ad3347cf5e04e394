/*
 * entry: one dictionary entry as a whole: finding it, linking it into the
 * hash chain and the LRU list, writing a new one (evicting if allowed) and
 * removing one.  Callers hold the zone mutex.
 */

#ifndef ENTRY_H
#define ENTRY_H

#include "chunk.h"
#include "shmlock.h"
#include "sys.h"

/*
 * The clock is read lazily: most operations touch only entries that never
 * expire, and reading the clock would cost as much as the operation.
 * *now == 0 means "not read yet".
 */
static inline int64_t
entry_now(int64_t *now)
{
    if (*now == 0) {
        *now = sys_now_ms();
    }
    return *now;
}

static inline int
entry_expired(const entry_t *e, int64_t *now)
{
    return e->expires != 0 && (int64_t) e->expires <= entry_now(now);
}

#define ENTRY_MAX_EXPTIME  ((int64_t) 1 << 50)   /* ~35,000 years */

static inline int64_t
entry_deadline(int64_t *now, int64_t exptime_ms)
{
    if (exptime_ms <= 0) {
        return 0;
    }
    if (exptime_ms > ENTRY_MAX_EXPTIME) {
        exptime_ms = ENTRY_MAX_EXPTIME;
    }
    return entry_now(now) + exptime_ms;
}

/* Entry index of key (0: none). */
uint32_t entry_lookup(const zone_t *z, const char *key, size_t klen,
    uint32_t hash);
/* The hash-chain word pointing at entry i. */
uint32_t *entry_link(zone_t *z, uint32_t i);

void entry_lru_unlink(zone_t *z, uint32_t i);
void entry_lru_push(zone_t *z, uint32_t i);
void entry_lru_link_head(zone_t *z, uint32_t i);
void entry_remove(zone_t *z, uint32_t i);

/*
 * Writes key = v as a new entry, replacing entry `old` (0: none).  May evict
 * (never `old`, never a live pinned entry; with `safe`, expired ones only).
 */
int entry_put(zone_t *z, uint32_t old, const char *key, size_t klen,
    uint32_t hash, const shmlock_value_t *v, int64_t expires, int pinned,
    int safe, int64_t *now, int *forcible);

/* In-place rewrite of entry i (see rewrite.c); 0 when it does not fit. */
int entry_rewrite(zone_t *z, uint32_t i, size_t klen,
    const shmlock_value_t *v, int64_t expires, int pinned);
void entry_rewrite_undo(zone_t *z);

/*
 * A value a reader may hand out: of a type we store, and no longer than the
 * chunks could hold (a caller sizes its buffer by the length).
 */
static inline int
entry_value_sane(const zone_t *z, const entry_t *e)
{
    /* the types we store: 1, 3 and 4, as a bit mask */
    return e->vtype < 8 && ((0x1a >> e->vtype) & 1)
           && e->value_len / CHUNK_CONT_DATA <= z->nchunks;
}

int entry_value_equal(const zone_t *z, uint32_t i, const shmlock_value_t *v);
void entry_value_out(const zone_t *z, uint32_t i, shmlock_value_t *out);

/* Eviction, see evict.c: frees chunks until `need` are free. */
void evict_expired(zone_t *z, uint32_t need, uint32_t keep, uint32_t scan,
    int64_t *now);
void evict_lru(zone_t *z, uint32_t need, uint32_t keep, int64_t *now,
    int *forcible);
void evict_sweep(zone_t *z, uint32_t need, uint32_t keep, int64_t *now);

/* Calls fn for every entry, bucket by bucket; fn may remove the entry. */
typedef int (*entry_visit_pt)(zone_t *z, uint32_t i, void *ctx);
void entry_each(zone_t *z, entry_visit_pt fn, void *ctx);

#endif /* ENTRY_H */
