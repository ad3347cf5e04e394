/*
 * The two dictionary calls a lock makes when nobody else wants its key,
 * each in one call: taking the key (an add of the owner's token) and
 * releasing it (a compare-and-delete of the token, then waking the key's
 * waiters, with one hash of the key for both).
 */

#include "shmlock.h"
#include "hash.h"
#include "shdict.h"
#include "wait.h"
#include "zone_guard.h"

int
shmlock_lock_acquire(shmlock_zone_t *zone, const char *key, size_t key_len,
    const char *tok, size_t tok_len, int64_t exptime_ms, int64_t now_ms)
{
    uint32_t         hash = hash_bytes(key, key_len);
    shmlock_value_t  v = { .type = SHMLOCK_TSTRING, .str = tok,
                           .len = tok_len };
    zone_t          *z = zone_shard(zone, hash);
    int              forcible, rc;

    if (__builtin_expect(key_len - 1 >= SHMLOCK_KEY_MAX, 0)) {
        return SHMLOCK_BAD_KEY;
    }
    if (tok == NULL) {
        return SHMLOCK_BAD_VALUE;
    }
    if (now_ms < 0) {
        now_ms = 0;
    }

    zone_write_lock(z);
    rc = shdict_store(z, SHMLOCK_OP_ADD, key, key_len, hash, &v,
                      exptime_ms, now_ms, &forcible);
    zone_write_unlock(z);
    return rc;
}

int
shmlock_lock_release(shmlock_zone_t *zone, const char *key, size_t key_len,
    const char *tok, size_t tok_len)
{
    uint32_t         hash = hash_bytes(key, key_len);
    shmlock_value_t  v = { .type = SHMLOCK_TSTRING, .str = tok,
                           .len = tok_len };
    zone_t          *z = zone_shard(zone, hash);
    int              rc;

    if (__builtin_expect(key_len - 1 >= SHMLOCK_KEY_MAX, 0)) {
        return SHMLOCK_BAD_KEY;
    }
    if (tok == NULL) {
        return SHMLOCK_BAD_VALUE;
    }

    zone_write_lock(z);
    rc = shdict_cad(z, key, key_len, hash, &v);
    zone_write_unlock(z);
    if (rc == SHMLOCK_OK) {
        wait_wake_counted(zone, hash);
    }
    return rc;
}
