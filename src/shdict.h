/*
 * shdict: the dictionary in one shard of a zone (zone_t), with
 * ngx.shared.DICT's semantics.
 *
 * Entries live in chains of 64-byte chunks: a head chunk (metadata, the
 * first bytes of key+value) and continuation chunks (60 bytes of data
 * each).  All of a shard's chunks come from one free list, so there is no
 * fragmentation and free_space() is exact.  Entries hang in a hash table
 * (chained through the head) and in one LRU list.  Every function here
 * runs with the shard's mutex held.
 */

#ifndef SHDICT_H
#define SHDICT_H

#include "shmlock.h"
#include "zone.h"

#define SHDICT_MIN_ZONE  SHMLOCK_MIN_SIZE

void shdict_format(zone_t *z);

int shdict_store(zone_t *z, int op, const char *key, size_t klen,
    uint32_t hash, const shmlock_value_t *v, int64_t exptime_ms,
    int64_t now_ms, int *forcible);
int shdict_get(zone_t *z, const char *key, size_t klen, uint32_t hash,
    int get_stale, shmlock_value_t *out, char *buf, size_t buf_size);
int shdict_incr(zone_t *z, const char *key, size_t klen, uint32_t hash,
    double *value, int has_init, double init, int64_t init_ttl_ms,
    int *forcible);
int shdict_ttl(zone_t *z, const char *key, size_t klen, uint32_t hash,
    int64_t *ttl_ms);
int shdict_expire(zone_t *z, const char *key, size_t klen, uint32_t hash,
    int64_t exptime_ms);
int shdict_cas(zone_t *z, const char *key, size_t klen, uint32_t hash,
    const shmlock_value_t *old, const shmlock_value_t *v, int64_t exptime_ms,
    int *forcible);
int shdict_cad(zone_t *z, const char *key, size_t klen, uint32_t hash,
    const shmlock_value_t *old);
void shdict_flush_all(zone_t *z);
int shdict_flush_expired(zone_t *z, int max_count);
int shdict_get_keys(zone_t *z, int max_count, char *buf, size_t buf_size,
    int *count, size_t *used);
/* Rebuilds the derived state after a dead holder: see recover.c. */
void shdict_recover(zone_t *z);
int shdict_verify(zone_t *z, char *msg, size_t msg_size);

#endif /* SHDICT_H */
