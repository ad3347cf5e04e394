/*
 * The exported ABI: argument plumbing around each dictionary call (the
 * zone mutex and the recovery of a dead holder's update: zone_guard.h).
 */

#include "shmlock.h"
#include "hash.h"
#include "optimistic.h"
#include "shdict.h"
#include "zone_guard.h"
#include "shm_zone.h"
#include "sys.h"
#include "zw.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static __thread int  last_errno;

/* The Lua layer checks keys and values before calling; C callers get a
 * status instead of a corrupted zone. */
#define CHECK_KEY(len)                                                       \
    if (__builtin_expect((len) - 1 >= SHMLOCK_KEY_MAX, 0)) {                 \
        return SHMLOCK_BAD_KEY;                                              \
    }

static inline int
value_ok(const shmlock_value_t *v)
{
    return v->type == SHMLOCK_TNIL || v->type == SHMLOCK_TBOOLEAN
           || v->type == SHMLOCK_TNUMBER
           || (v->type == SHMLOCK_TSTRING && (v->str != NULL || v->len == 0));
}

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
    case SHMLOCK_CORRUPT:         return "corrupt";
    case SHMLOCK_BUSY:            return "busy";
    case SHMLOCK_AGAIN:           return "buffer too small";
    case SHMLOCK_TIMEOUT:         return "timeout";
    case SHMLOCK_VALUE_TOO_LARGE: return "value too large";
    case SHMLOCK_BAD_KEY:         return "bad key";
    case SHMLOCK_BAD_VALUE:       return "bad value type";
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
    size_t size, shmlock_zone_t **out)
{
    int  err, rc;

    rc = shm_zone_open(dir, name, name_len, size, out, &err);
    last_errno = err;
    return rc;
}

void
shmlock_zone_retain(shmlock_zone_t *zone)
{
    zone->handles++;
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
    last_errno = err;
    return rc;
}

size_t
shmlock_zone_size(shmlock_zone_t *zone)
{
    return zone->size;
}

int
shmlock_dict_store(shmlock_zone_t *zone, int op, const char *key,
    size_t key_len, const shmlock_value_t *val, int64_t exptime_ms,
    int *forcible)
{
    return shmlock_dict_store_at(zone, op, key, key_len, val, exptime_ms, 0,
                                 forcible);
}

int
shmlock_dict_store_at(shmlock_zone_t *zone, int op, const char *key,
    size_t key_len, const shmlock_value_t *val, int64_t exptime_ms,
    int64_t now_ms, int *forcible)
{
    uint32_t  hash = hash_bytes(key, key_len);
    int       rc;

    CHECK_KEY(key_len);
    if (!value_ok(val)) {
        return SHMLOCK_BAD_VALUE;
    }
    if (now_ms < 0) {
        now_ms = 0;
    }
    zone_write_lock(zone);
    rc = shdict_store(zone, op, key, key_len, hash, val, exptime_ms, now_ms,
                      forcible);
    zone_write_unlock(zone);
    return rc;
}

int
shmlock_dict_get(shmlock_zone_t *zone, const char *key, size_t key_len,
    int get_stale, shmlock_value_t *out, char *buf, size_t buf_size)
{
    uint32_t  hash = hash_bytes(key, key_len);
    int       rc, tries;

    CHECK_KEY(key_len);
    for (tries = 0; tries < 4; tries++) {
        rc = optimistic_get(zone, key, key_len, hash, get_stale, out, buf,
                            buf_size);
        if (rc != OPTIMISTIC_RETRY) {
            return rc;
        }
    }
    /* writers keep getting in the way: queue up with them */
    zone_lock(zone);
    rc = shdict_get(zone, key, key_len, hash, get_stale, out, buf, buf_size);
    zone_unlock(zone);
    return rc;
}

int
shmlock_dict_incr(shmlock_zone_t *zone, const char *key, size_t key_len,
    double *value, int has_init, double init, int64_t init_ttl_ms,
    int *forcible)
{
    uint32_t  hash = hash_bytes(key, key_len);
    int       rc;

    CHECK_KEY(key_len);
    zone_write_lock(zone);
    rc = shdict_incr(zone, key, key_len, hash, value, has_init, init,
                     init_ttl_ms, forcible);
    zone_write_unlock(zone);
    return rc;
}

int
shmlock_dict_ttl(shmlock_zone_t *zone, const char *key, size_t key_len,
    int64_t *ttl_ms)
{
    uint32_t  hash = hash_bytes(key, key_len);
    int       rc;

    CHECK_KEY(key_len);
    zone_lock(zone);
    rc = shdict_ttl(zone, key, key_len, hash, ttl_ms);
    zone_unlock(zone);
    return rc;
}

int
shmlock_dict_expire(shmlock_zone_t *zone, const char *key, size_t key_len,
    int64_t exptime_ms)
{
    uint32_t  hash = hash_bytes(key, key_len);
    int       rc;

    CHECK_KEY(key_len);
    zone_write_lock(zone);
    rc = shdict_expire(zone, key, key_len, hash, exptime_ms);
    zone_write_unlock(zone);
    return rc;
}

int
shmlock_dict_cas(shmlock_zone_t *zone, const char *key, size_t key_len,
    const shmlock_value_t *old, const shmlock_value_t *val,
    int64_t exptime_ms, int *forcible)
{
    uint32_t  hash = hash_bytes(key, key_len);
    int       rc;

    CHECK_KEY(key_len);
    if (!value_ok(old) || !value_ok(val)) {
        return SHMLOCK_BAD_VALUE;
    }
    zone_write_lock(zone);
    rc = shdict_cas(zone, key, key_len, hash, old, val, exptime_ms, forcible);
    zone_write_unlock(zone);
    return rc;
}

int
shmlock_dict_cad(shmlock_zone_t *zone, const char *key, size_t key_len,
    const shmlock_value_t *old)
{
    uint32_t  hash = hash_bytes(key, key_len);
    int       rc;

    CHECK_KEY(key_len);
    if (!value_ok(old)) {
        return SHMLOCK_BAD_VALUE;
    }
    zone_write_lock(zone);
    rc = shdict_cad(zone, key, key_len, hash, old);
    zone_write_unlock(zone);
    return rc;
}

void
shmlock_dict_flush_all(shmlock_zone_t *zone)
{
    zone_write_lock(zone);
    shdict_flush_all(zone);
    zone_write_unlock(zone);
}

int
shmlock_dict_flush_expired(shmlock_zone_t *zone, int max_count)
{
    int  n;

    zone_write_lock(zone);
    n = shdict_flush_expired(zone, max_count);
    zone_write_unlock(zone);
    return n;
}

int
shmlock_dict_get_keys(shmlock_zone_t *zone, int max_count, char *buf,
    size_t buf_size, int *count, size_t *used)
{
    int  rc;

    zone_lock(zone);
    rc = shdict_get_keys(zone, max_count, buf, buf_size, count, used);
    zone_unlock(zone);
    return rc;
}

size_t
shmlock_dict_capacity(shmlock_zone_t *zone)
{
    return zone->size;
}

size_t
shmlock_dict_free_space(shmlock_zone_t *zone)
{
    return (size_t) __atomic_load_n(&zone->hdr->dict.free_count,
                                    __ATOMIC_RELAXED) * ZONE_CHUNK_SIZE;
}

int
shmlock_dict_verify(shmlock_zone_t *zone, char *msg, size_t msg_size)
{
    int  rc;

    if (msg_size > 0) {
        msg[0] = '\0';
    }
    zone_lock(zone);
    rc = shdict_verify(zone, msg, msg_size);
    zone_unlock(zone);
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
    if (pid <= 0 || !sys_pid_alive((uint32_t) pid)) {
        return 0;
    }
    return start == 0 || sys_proc_start((uint32_t) pid) == start;
}

void
shmlock_test_crash_at(int n)
{
    zw_crash_countdown = n;
}

void
shmlock_test_mutex_lock(shmlock_zone_t *zone)
{
    zone_lock(zone);
}

void
shmlock_test_mutex_unlock(shmlock_zone_t *zone)
{
    zone_unlock(zone);
}
