/*
 * The exported ABI: argument plumbing around each dictionary call (the
 * zone mutex and the recovery of a dead holder's update: zone_guard.h).
 */

#include "shmlock.h"
#include "hash.h"
#include "optimistic.h"
#include "shdict.h"
#include "dict_call.h"
#include "shm_zone.h"
#include "sys.h"
#include "token.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static __thread int  last_errno;

const char *
shmlock_strerror(int rc)
{
    switch (rc) {
    case SHMLOCK_OK:              return "ok";
    case SHMLOCK_NOT_FOUND:       return "not found";
    case SHMLOCK_EXISTS:          return "exists";
    case SHMLOCK_NO_MEMORY:       return "no memory";
    case SHMLOCK_NOT_A_NUMBER:    return "not a number";
    case SHMLOCK_CHANGED:         return "changed";
    case SHMLOCK_BAD_NAME:        return "bad zone name";
    case SHMLOCK_BAD_SIZE:        return "bad size";
    case SHMLOCK_INCOMPATIBLE:    return "incompatible zone";
    case SHMLOCK_SYSTEM:          return "system error";
    case SHMLOCK_CORRUPT:         return "corrupt zone";
    case SHMLOCK_BUSY:            return "busy";
    case SHMLOCK_AGAIN:           return "buffer too small";
    case SHMLOCK_TIMEOUT:         return "timeout";
    case SHMLOCK_VALUE_TOO_LARGE: return "value too large";
    case SHMLOCK_BAD_KEY:         return "bad key";
    case SHMLOCK_BAD_VALUE:       return "bad value type";
    case SHMLOCK_BAD_SHARDS:      return "bad shards";
    case SHMLOCK_DESTROYED:       return "zone destroyed";
    case SHMLOCK_NOT_OWNER:       return "zone file owned by another user";
    case SHMLOCK_UNSAFE_MODE:     return "zone file writable by group or "
                                         "others";
    case SHMLOCK_FOREIGN_NS:      return "zone made in another pid namespace";
    case SHMLOCK_DIR_BUSY:        return "zone directory locked by another "
                                         "process";
    default:                      return "unknown error";
    }
}

int
shmlock_errno(void)
{
    return last_errno;
}

int
shmlock_zone_name_ok(const char *name, size_t len)
{
    return shm_zone_name_ok(name, len);
}

int
shmlock_zone_open(const char *dir, const char *name, size_t name_len,
    size_t size, unsigned shards, shmlock_zone_t **out)
{
    int  err, rc;

    rc = shm_zone_open(dir, name, name_len, size, shards, out, &err);
    /* err may hold what a round before the one that succeeded met */
    last_errno = rc == SHMLOCK_SYSTEM ? err : 0;
    return rc;
}

void
shmlock_zone_retain(shmlock_zone_t *zone)
{
    shm_zone_retain(zone);
}

int
shmlock_zone_dead(shmlock_zone_t *zone)
{
    return shm_zone_dead(zone);
}

void
shmlock_zone_close(shmlock_zone_t *zone)
{
    shm_zone_close(zone);
}

int
shmlock_zone_destroy(const char *dir, const char *name, size_t name_len)
{
    int  err, rc;

    rc = shm_zone_destroy(dir, name, name_len, &err);
    last_errno = rc == SHMLOCK_SYSTEM ? err : 0;
    return rc;
}

unsigned
shmlock_zone_shards(shmlock_zone_t *zone)
{
    return zone->nshards;
}

int
shmlock_dict_store(shmlock_zone_t *zone, int op, const char *key,
    size_t key_len, const shmlock_value_t *val, int64_t exptime_ms,
    int *forcible)
{
    return dict_store_hashed(zone, op, key, key_len, hash_bytes(key, key_len),
                             val, exptime_ms, 0, forcible);
}

int
shmlock_dict_get(shmlock_zone_t *zone, const char *key, size_t key_len,
    int get_stale, shmlock_value_t *out, char *buf, size_t buf_size)
{
    uint32_t  hash = hash_bytes(key, key_len);
    zone_t   *z = zone_shard(zone, hash);
    int       rc, tries;

    CHECK_LIVE(zone);
    CHECK_KEY(key_len);
    for (tries = 0; tries < 4; tries++) {
        rc = optimistic_get(z, key, key_len, hash, get_stale, out, buf,
                            buf_size);
        if (rc != OPTIMISTIC_RETRY) {
            return rc;
        }
    }
    /* writers keep getting in the way: queue up with them */
    zone_lock(z);
    rc = shdict_get(z, key, key_len, hash, get_stale, out, buf, buf_size);
    return zone_unlock(z, rc);
}

int
shmlock_dict_incr(shmlock_zone_t *zone, const char *key, size_t key_len,
    double *value, int has_init, double init, int64_t init_ttl_ms,
    int *forcible)
{
    uint32_t  hash = hash_bytes(key, key_len);
    zone_t   *z = zone_shard(zone, hash);
    int       rc;

    *forcible = 0;
    CHECK_LIVE(zone);
    CHECK_KEY(key_len);
    zone_write_lock(z);
    rc = shdict_incr(z, key, key_len, hash, value, has_init, init,
                     init_ttl_ms, forcible);
    return zone_write_unlock(z, rc);
}

int
shmlock_dict_ttl(shmlock_zone_t *zone, const char *key, size_t key_len,
    int64_t *ttl_ms)
{
    uint32_t  hash = hash_bytes(key, key_len);
    zone_t   *z = zone_shard(zone, hash);
    int       rc;

    CHECK_LIVE(zone);
    CHECK_KEY(key_len);
    zone_lock(z);
    rc = shdict_ttl(z, key, key_len, hash, ttl_ms);
    return zone_unlock(z, rc);
}

int
shmlock_dict_expire(shmlock_zone_t *zone, const char *key, size_t key_len,
    int64_t exptime_ms)
{
    uint32_t  hash = hash_bytes(key, key_len);
    zone_t   *z = zone_shard(zone, hash);
    int       rc;

    CHECK_LIVE(zone);
    CHECK_KEY(key_len);
    zone_write_lock(z);
    rc = shdict_expire(z, key, key_len, hash, exptime_ms);
    return zone_write_unlock(z, rc);
}

int
shmlock_dict_cas(shmlock_zone_t *zone, const char *key, size_t key_len,
    const shmlock_value_t *old, const shmlock_value_t *val,
    int64_t exptime_ms, int *forcible)
{
    uint32_t  hash = hash_bytes(key, key_len);
    zone_t   *z = zone_shard(zone, hash);
    int       rc;

    *forcible = 0;
    CHECK_LIVE(zone);
    CHECK_KEY(key_len);
    if (!value_ok(old) || !value_ok(val)) {
        return SHMLOCK_BAD_VALUE;
    }
    zone_write_lock(z);
    rc = shdict_cas(z, key, key_len, hash, old, val, exptime_ms, forcible);
    return zone_write_unlock(z, rc);
}

int
shmlock_dict_cad(shmlock_zone_t *zone, const char *key, size_t key_len,
    const shmlock_value_t *old)
{
    return dict_cad_hashed(zone, key, key_len, hash_bytes(key, key_len), old);
}

int
shmlock_dict_flush_all(shmlock_zone_t *zone)
{
    uint32_t  i;
    int       rc = SHMLOCK_OK;

    CHECK_LIVE(zone);
    for (i = 0; i < zone->nshards; i++) {
        zone_write_lock(&zone->shard[i]);
        shdict_flush_all(&zone->shard[i]);
        rc = zone_write_unlock(&zone->shard[i], rc);
    }
    return rc;
}

int
shmlock_dict_flush_expired(shmlock_zone_t *zone, int max_count, int *freed)
{
    uint32_t  i;
    int       n = 0, rc = SHMLOCK_OK;

    *freed = 0;
    CHECK_LIVE(zone);
    for (i = 0; i < zone->nshards && (max_count <= 0 || n < max_count); i++) {
        zone_write_lock(&zone->shard[i]);
        n += shdict_flush_expired(&zone->shard[i],
                                  max_count > 0 ? max_count - n : 0);
        rc = zone_write_unlock(&zone->shard[i], rc);
    }
    *freed = n;
    return rc;
}

/* Shard by shard; once buf is full, the rest only counts the bytes. */
int
shmlock_dict_get_keys(shmlock_zone_t *zone, int max_count, char *buf,
    size_t buf_size, int *count, size_t *used)
{
    uint32_t  i;
    size_t    u, total = 0;
    int       n, keys = 0, rc = SHMLOCK_OK;

    *count = 0;
    *used = 0;
    CHECK_LIVE(zone);
    for (i = 0; i < zone->nshards && (max_count <= 0 || keys < max_count);
         i++)
    {
        zone_lock(&zone->shard[i]);
        shdict_get_keys(&zone->shard[i], max_count > 0 ? max_count - keys : 0,
                        total < buf_size ? buf + total : buf,
                        total < buf_size ? buf_size - total : 0, &n, &u);
        rc = zone_unlock(&zone->shard[i], rc);
        keys += n;
        total += u;
    }
    *count = keys;
    *used = total;
    if (rc != SHMLOCK_OK) {
        return rc;
    }
    return total > buf_size ? SHMLOCK_AGAIN : SHMLOCK_OK;
}

size_t
shmlock_dict_capacity(shmlock_zone_t *zone)
{
    return zone->size;
}

size_t
shmlock_dict_free_space(shmlock_zone_t *zone)
{
    size_t    chunks = 0;
    uint32_t  i;

    for (i = 0; i < zone->nshards; i++) {
        chunks += __atomic_load_n(&zone->shard[i].hdr->dict.free_count,
                                  __ATOMIC_RELAXED);
    }
    return chunks * ZONE_CHUNK_SIZE;
}

int
shmlock_dict_verify(shmlock_zone_t *zone, char *msg, size_t msg_size)
{
    uint32_t  i;
    int       rc = SHMLOCK_OK;

    if (msg_size > 0) {
        msg[0] = '\0';
    }
    CHECK_LIVE(zone);
    for (i = 0; i < zone->nshards && rc == SHMLOCK_OK; i++) {
        zone_lock(&zone->shard[i]);
        rc = shdict_verify(&zone->shard[i], msg, msg_size);
        rc = zone_unlock(&zone->shard[i], rc);
        if (rc == SHMLOCK_CORRUPT && msg_size > 0 && msg[0] == '\0') {
            snprintf(msg, msg_size, "corrupt: a chunk index out of range "
                     "or a chain that loops");
        }
        if (rc != SHMLOCK_OK && zone->nshards > 1 && msg_size > 0) {
            /* say which shard, in front of what is wrong */
            char        what[256];
            const char *rest = what;

            snprintf(what, sizeof(what), "%s", msg);
            if (strncmp(what, "corrupt: ", 9) == 0) {
                rest += 9;
            }
            snprintf(msg, msg_size, "corrupt: shard %u: %s", i, rest);
        }
    }
    return rc;
}

int64_t
shmlock_now_ms(void)
{
    return sys_now_ms();
}

int64_t
shmlock_now_us(void)
{
    return sys_now_us();
}

uint32_t
shmlock_hash(const char *key, size_t len)
{
    return hash_bytes(key, len);
}

int
shmlock_self_pid(void)
{
    return (int) sys_pid();
}

uint64_t
shmlock_proc_start(int pid)
{
    return pid > 0 ? sys_proc_start((uint32_t) pid) : 0;
}

int
shmlock_proc_alive(int pid, uint64_t start)
{
    return pid > 0 && sys_proc_alive((uint32_t) pid, start, ~(uint64_t) 0);
}

int
shmlock_token_block(char *dst)
{
    return (int) token_block(dst);
}
