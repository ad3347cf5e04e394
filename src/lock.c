/*
 * The two dictionary calls a lock makes when nobody else wants its key,
 * each in one call: taking the key (an add of the owner's token) and
 * releasing it (a compare-and-delete of the token, then waking the key's
 * waiters, with one hash of the key for both).
 */

#include "shmlock.h"
#include "dict_call.h"
#include "hash.h"
#include "wait.h"

int
shmlock_lock_acquire(shmlock_zone_t *zone, const char *key, size_t key_len,
    const char *tok, size_t tok_len, int64_t exptime_ms, int64_t now_ms)
{
    shmlock_value_t  v = { .type = SHMLOCK_TSTRING, .str = tok,
                           .len = tok_len };
    int              forcible;

    /* dict_store_hashed checks the key */
    if (tok == NULL) {
        return SHMLOCK_BAD_VALUE;
    }
    return dict_store_hashed(zone, SHMLOCK_OP_ADD, key, key_len,
                             hash_bytes(key, key_len), &v, exptime_ms, now_ms,
                             &forcible);
}

int
shmlock_lock_release(shmlock_zone_t *zone, const char *key, size_t key_len,
    const char *tok, size_t tok_len)
{
    uint32_t         hash = hash_bytes(key, key_len);
    shmlock_value_t  v = { .type = SHMLOCK_TSTRING, .str = tok,
                           .len = tok_len };
    int              rc;

    if (tok == NULL) {
        return SHMLOCK_BAD_VALUE;
    }
    rc = dict_cad_hashed(zone, key, key_len, hash, &v);
    if (rc == SHMLOCK_OK) {
        wait_wake_counted(zone, hash);
    }
    return rc;
}
