/*
 * dict_call: what every exported dictionary call does around the
 * dictionary itself: check the key and the value, find the key's shard,
 * and hold that shard's mutex (zone_guard.h) for the call.  The store and
 * the compare-and-delete take the key's hash from the caller, so that the
 * lock calls (lock.c) hash a key once for the call and its wake-up.
 */

#ifndef DICT_CALL_H
#define DICT_CALL_H

#include "shmlock.h"
#include "shm_zone.h"
#include "zone_guard.h"

/* The Lua layer checks keys and values before calling; C callers get a
 * status instead of a corrupted zone. */
#define CHECK_KEY(len)                                                       \
    if (__builtin_expect((len) - 1 >= SHMLOCK_KEY_MAX, 0)) {                 \
        return SHMLOCK_BAD_KEY;                                              \
    }

/* A destroyed zone is refused before anything is read or written in it. */
#define CHECK_LIVE(zone)                                                     \
    if (__builtin_expect(shm_zone_dead(zone), 0)) {                          \
        return SHMLOCK_DESTROYED;                                            \
    }

static inline int
value_ok(const shmlock_value_t *v)
{
    return v->type == SHMLOCK_TNIL || v->type == SHMLOCK_TBOOLEAN
           || v->type == SHMLOCK_TNUMBER
           || (v->type == SHMLOCK_TSTRING && (v->str != NULL || v->len == 0));
}

static inline int
dict_store_hashed(shmlock_zone_t *zone, int op, const char *key,
    size_t key_len, uint32_t hash, const shmlock_value_t *val,
    int64_t exptime_ms, int64_t now_ms, int *forcible)
{
    zone_t  *z = zone_shard(zone, hash);
    int      rc;

    *forcible = 0;
    CHECK_LIVE(zone);
    CHECK_KEY(key_len);
    if (!value_ok(val)) {
        return SHMLOCK_BAD_VALUE;
    }
    if (now_ms < 0) {
        now_ms = 0;
    }
    zone_write_lock(z);
    rc = shdict_store(z, op, key, key_len, hash, val, exptime_ms, now_ms,
                      forcible);
    return zone_write_unlock(z, rc);
}

static inline int
dict_cad_hashed(shmlock_zone_t *zone, const char *key, size_t key_len,
    uint32_t hash, const shmlock_value_t *old)
{
    zone_t  *z = zone_shard(zone, hash);
    int      rc;

    CHECK_LIVE(zone);
    CHECK_KEY(key_len);
    if (!value_ok(old)) {
        return SHMLOCK_BAD_VALUE;
    }
    zone_write_lock(z);
    rc = shdict_cad(z, key, key_len, hash, old);
    return zone_write_unlock(z, rc);
}

#endif /* DICT_CALL_H */
