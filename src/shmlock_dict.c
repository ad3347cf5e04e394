/*
 * The ABI's dictionary calls: shmlock_dict_*.  Each checks its
 * arguments, finds its key's shard (zone_shard) and holds that shard's
 * mutex (shard_lock.h) around the dictionary call (shdict.c); calls on the
 * whole zone do so shard by shard.
 */

#include "shmlock.h"
#include "hash.h"
#include "optimistic.h"
#include "shard_lock.h"
#include "shdict.h"
#include "shm_watch.h"
#include "sys.h"
#include "verify.h"
#include "wait.h"
#include "zone.h"

#include <stdio.h>
#include <string.h>

/* A destroyed zone, or one whose file was removed (shm_watch.h), is
 * refused before anything is read or written in it; and each call reads
 * the dead word again once its step is done (shm_watch_after: a write
 * answered true went into a zone that was still the name's). */
#define CHECK_LIVE(zone)                                                     \
    do {                                                                     \
        int  live_rc_ = shm_watch(zone);                                     \
        if (__builtin_expect(live_rc_ != SHMLOCK_OK, 0)) {                   \
            return live_rc_;                                                 \
        }                                                                    \
    } while (0)

/* The Lua layer checks keys and values before calling; C callers get a
 * status instead of a corrupted zone. */
#define CHECK_KEY(len)                                                       \
    if (__builtin_expect((len) - 1 >= SHMLOCK_KEY_MAX, 0)) {                 \
        return SHMLOCK_BAD_KEY;                                              \
    }

static inline int
shmlock_dict_value_ok(const shmlock_value_t *v)
{
    return v->type == SHMLOCK_TNIL || v->type == SHMLOCK_TBOOLEAN
           || v->type == SHMLOCK_TNUMBER
           || (v->type == SHMLOCK_TSTRING && (v->str != NULL || v->len == 0));
}

/* A store of a checked key, hashed by the caller (a lock hashes once). */
static inline int
shmlock_dict_put(shmlock_zone_t *zone, int op, const char *key,
    size_t key_len, uint32_t hash, const shmlock_value_t *val,
    int64_t exptime_ms, int64_t now_ms, int *forcible)
{
    shard_t  *sh = zone_shard(zone, hash);
    int       rc;

    if (!shmlock_dict_value_ok(val)) {
        return SHMLOCK_BAD_VALUE;
    }
    if (now_ms < 0) {
        now_ms = 0;
    }
    shard_write_lock(sh);
    rc = shdict_store(sh, op, key, key_len, hash, val, exptime_ms, now_ms,
                      forcible);
    return shm_watch_after(zone, shard_write_unlock(sh, rc));
}

/* A compare-and-delete of a checked key, hashed by the caller. */
static inline int
shmlock_dict_del(shmlock_zone_t *zone, const char *key, size_t key_len,
    uint32_t hash, const shmlock_value_t *old)
{
    shard_t  *sh = zone_shard(zone, hash);
    int       rc;

    if (!shmlock_dict_value_ok(old)) {
        return SHMLOCK_BAD_VALUE;
    }
    shard_write_lock(sh);
    rc = shdict_cad(sh, key, key_len, hash, old);
    return shm_watch_after(zone, shard_write_unlock(sh, rc));
}

int
shmlock_dict_store(shmlock_zone_t *zone, int op, const char *key,
    size_t key_len, const shmlock_value_t *val, int64_t exptime_ms,
    int *forcible)
{
    return shmlock_dict_store_at(zone, op, key, key_len, val, exptime_ms, 0,
                                 forcible);
}

/* Every store but shmlock_dict_store_at's fast path: out of line, so that
 * the fast path keeps few registers (callgrind: each saved one costs two
 * instructions a call). */
static __attribute__((noinline)) int
shmlock_dict_store_general(shmlock_zone_t *zone, int op, const char *key,
    size_t key_len, const shmlock_value_t *val, int64_t exptime_ms,
    int64_t now_ms, int *forcible)
{
    int  rc;

    /* an expiry to compute needs the clock anyway: read once, it gates the
     * watch too (as a lock's acquire does) */
    if (now_ms <= 0 && exptime_ms > 0) {
        now_ms = sys_now_ms();
    }
    rc = now_ms > 0 ? shm_watch_at(zone, now_ms) : shm_watch(zone);
    if (__builtin_expect(rc != SHMLOCK_OK, 0)) {
        return rc;
    }
    CHECK_KEY(key_len);
    return shmlock_dict_put(zone, op, key, key_len, hash_bytes(key, key_len),
                            val, exptime_ms, now_ms, forcible);
}

int
shmlock_dict_store_at(shmlock_zone_t *zone, int op, const char *key,
    size_t key_len, const shmlock_value_t *val, int64_t exptime_ms,
    int64_t now_ms, int *forcible)
{
    uint32_t  hash;
    shard_t  *sh;
    int       rc;

    *forcible = 0;
    if (op != SHMLOCK_OP_SET || exptime_ms > 0
        || (val->type != SHMLOCK_TNUMBER && val->type != SHMLOCK_TBOOLEAN))
    {
        return shmlock_dict_store_general(zone, op, key, key_len, val,
                                          exptime_ms, now_ms, forcible);
    }
    /* a number over a number (issue 22): one word stored in place, the
     * lookup inline; anything else under the same mutex, as
     * shmlock_dict_put.  No expiry: the coarse clock gates the watch. */
    rc = shm_watch_at(zone, now_ms > 0 ? now_ms : sys_coarse_ms());
    if (__builtin_expect(rc != SHMLOCK_OK, 0)) {
        return rc;
    }
    CHECK_KEY(key_len);
    hash = hash_bytes(key, key_len);
    sh = zone_shard(zone, hash);
    ZONE_PIN(sh);
    shard_write_lock(sh);
    if (shdict_set_in_place(sh, key, key_len, hash, val)) {
        rc = SHMLOCK_OK;
    } else {
        rc = shdict_store(sh, SHMLOCK_OP_SET, key, key_len, hash, val, 0,
                          now_ms > 0 ? now_ms : 0, forcible);
    }
    return shm_watch_after(zone, shard_write_unlock(sh, rc));
}

int
shmlock_dict_store_guarded(shmlock_zone_t *zone, int op, const char *key,
    size_t key_len, const shmlock_value_t *val, int64_t exptime_ms,
    const shmlock_gen_guard_t *guard, int *forcible)
{
    uint32_t  hash, word;
    shard_t  *sh;
    int       rc;

    *forcible = 0;
    CHECK_LIVE(zone);
    CHECK_KEY(key_len);
    if (!shmlock_dict_value_ok(val)) {
        return SHMLOCK_BAD_VALUE;
    }
    hash = hash_bytes(key, key_len);
    sh = zone_shard(zone, hash);
    shard_write_lock(sh);
    /* sequentially consistent: a bump that came before it is seen */
    word = __atomic_load_n(&zone->gen[guard->word & (ZONE_GEN_WORDS - 1)],
                           __ATOMIC_SEQ_CST);
    if (((word ^ guard->value) & guard->mask) != 0) {
        rc = SHMLOCK_CHANGED;
    } else {
        rc = shdict_store(sh, op, key, key_len, hash, val, exptime_ms, 0,
                          forcible);
    }
    return shm_watch_after(zone, shard_write_unlock(sh, rc));
}

int
shmlock_dict_get(shmlock_zone_t *zone, const char *key, size_t key_len,
    int get_stale, shmlock_value_t *out, char *buf, size_t buf_size)
{
    return shmlock_dict_get_at(zone, key, key_len, get_stale, out, buf,
                               buf_size, 0);
}

/*
 * The lock-free read comes before the watch (shm_watch.h), so that the
 * watch is gated by the clock reading the read took for an expiry, if it
 * took one, and a get pays one clock read at most (none when the caller
 * hands its own).  Reading first is safe: a dead zone stays mapped, and
 * its answer is not handed out.  The locked path, which may write (a
 * recovery), looks first.
 */
static inline int
shmlock_dict_get_answer(shmlock_zone_t *zone, int rc, shmlock_value_t *out,
    int64_t now)
{
    int  live = shm_watch_at(zone, now != 0 ? now : sys_coarse_ms());

    if (__builtin_expect(live != SHMLOCK_OK, 0)) {
        out->type = SHMLOCK_TNIL;
        return live;
    }
    return rc;
}

/* Every get the first read below does not answer: four lock-free reads
 * (optimistic.h), then the mutex.  now: a clock reading, or 0. */
static __attribute__((noinline)) int
shmlock_dict_get_general(shmlock_zone_t *zone, const char *key,
    size_t key_len, int get_stale, shmlock_value_t *out, char *buf,
    size_t buf_size, int64_t now)
{
    uint32_t  hash;
    shard_t  *sh;
    int       rc, tries;

    CHECK_KEY(key_len);
    hash = hash_bytes(key, key_len);
    sh = zone_shard(zone, hash);
    for (tries = 0; tries < 4; tries++) {
        rc = optimistic_get(sh, key, key_len, hash, get_stale, out, buf,
                            buf_size, &now);
        if (rc != OPTIMISTIC_RETRY) {
            return shmlock_dict_get_answer(zone, rc, out, now);
        }
    }
    /* writers keep getting in the way: queue up with them */
    CHECK_LIVE(zone);
    shard_lock(sh);
    rc = shdict_get(sh, key, key_len, hash, get_stale, out, buf, buf_size,
                    now);
    return shm_watch_after(zone, shard_unlock(sh, rc));
}

/*
 * The common get inline, as a seqlock reader (optimistic.h's rules): a key
 * of at most ENTRY_KEY_INLINE bytes (all of it in its entry's head), live
 * or absent, without user flags, read while no writer came by.  Anything else (a longer key,
 * a writer, an expired entry, a value the buffer cannot hold, a long
 * chain, anything out of bounds) starts over in shmlock_dict_get_general.
 */
int
shmlock_dict_get_at(shmlock_zone_t *zone, const char *key, size_t key_len,
    int get_stale, shmlock_value_t *out, char *buf, size_t buf_size,
    int64_t now_ms)
{
    const entry_t  *e;
    shard_t        *sh;
    const uint32_t *seqp;
    const char     *chunks;
    uint32_t        hash, seq, i, hops, vlen, nchunks, vtype;
    uint64_t        meta;
    int64_t         now = now_ms > 0 ? now_ms : 0, expires;
    int             equal;

    if (__builtin_expect(key_len - 1 >= ENTRY_KEY_INLINE, 0)) {
        goto general;
    }
    hash = hash_bytes(key, key_len);
    sh = zone_shard(zone, hash);
    ZONE_PIN(sh);
    /* the shard's fields in locals, read once */
    seqp = &sh->hdr->seq;
    nchunks = sh->nchunks;
    chunks = sh->chunks;
    seq = seqlock_read_begin(seqp);
    if (seq & 1) {
        goto general;
    }
    i = __atomic_load_n(&sh->buckets[hash & sh->bucket_mask],
                        __ATOMIC_RELAXED);
    for (hops = 0; ; hops++) {
        if (i == 0) {
            out->stale = 0;
            out->type = SHMLOCK_TNIL;
            goto valid;
        }
        if (i > nchunks || hops == OPTIMISTIC_MAX_HOPS) {
            goto general;
        }
        e = (const entry_t *) (chunks + (size_t) i * SHARD_CHUNK_SIZE);
        if (e->hash == hash && entry_key_len(e) == key_len
            && hash_equal(e->data, key, key_len))
        {
            break;
        }
        i = __atomic_load_n(&e->hnext, __ATOMIC_RELAXED);
    }
    meta = __atomic_load_n(&e->meta, __ATOMIC_RELAXED);
    /* (the expiry and the user flags are meta's top bits) */
    if (__builtin_expect(meta >= ENTRY_UFLAGS, 0)) {
        if (meta & ENTRY_UFLAGS) {
            goto general;
        }
        expires = entry_exp_ms(entry_meta_code(meta));
        if (expires <= entry_now(&now)) {
            goto general;
        }
    }
    /* entry_value_out and entry_value_sane, from e */
    vtype = entry_meta_vtype(meta);
    out->stale = 0;
    out->type = (int) vtype;
    out->flags = 0;
    vlen = e->value_len;
    out->len = vlen;
    out->num = entry_num_out(e, vtype);
    if (!entry_value_sane_in(nchunks, vtype, vlen)) {
        goto general;
    }
    if (vtype == SHMLOCK_TSTRING) {
        if (vlen > buf_size) {
            goto general;
        }
        if (key_len + vlen <= ENTRY_ROOM_STRING) {
            memcpy(buf, e->data + key_len, vlen);
        } else if (!optimistic_stream(sh, i, ENTRY_ROOM_STRING, key_len, NULL,
                                      buf, vlen, &equal))
        {
            goto general;
        }
    }
valid:
    if (!seqlock_read_valid(seqp, seq)) {
        goto general;
    }
    if (i != 0) {
        chunk_mark_read(sh, i);
    }
    return shmlock_dict_get_answer(zone, SHMLOCK_OK, out, now);

general:
    return shmlock_dict_get_general(zone, key, key_len, get_stale, out, buf,
                                    buf_size, now);
}

int
shmlock_dict_incr(shmlock_zone_t *zone, const char *key, size_t key_len,
    double *value, int has_init, double init, int64_t init_ttl_ms,
    int *forcible)
{
    uint32_t  hash;
    shard_t  *sh;
    int       rc;

    *forcible = 0;
    CHECK_LIVE(zone);
    CHECK_KEY(key_len);
    hash = hash_bytes(key, key_len);
    sh = zone_shard(zone, hash);
    shard_write_lock(sh);
    rc = shdict_incr(sh, key, key_len, hash, value, has_init, init,
                     init_ttl_ms, forcible);
    return shm_watch_after(zone, shard_write_unlock(sh, rc));
}

int
shmlock_dict_ttl(shmlock_zone_t *zone, const char *key, size_t key_len,
    int64_t *ttl_ms)
{
    uint32_t  hash;
    shard_t  *sh;
    int       rc;

    CHECK_LIVE(zone);
    CHECK_KEY(key_len);
    hash = hash_bytes(key, key_len);
    sh = zone_shard(zone, hash);
    shard_lock(sh);
    rc = shdict_ttl(sh, key, key_len, hash, ttl_ms);
    return shm_watch_after(zone, shard_unlock(sh, rc));
}

int
shmlock_dict_expire(shmlock_zone_t *zone, const char *key, size_t key_len,
    int64_t exptime_ms)
{
    uint32_t  hash;
    shard_t  *sh;
    int       rc;

    CHECK_LIVE(zone);
    CHECK_KEY(key_len);
    hash = hash_bytes(key, key_len);
    sh = zone_shard(zone, hash);
    shard_write_lock(sh);
    rc = shdict_expire(sh, key, key_len, hash, exptime_ms);
    return shm_watch_after(zone, shard_write_unlock(sh, rc));
}

int
shmlock_dict_cas(shmlock_zone_t *zone, const char *key, size_t key_len,
    const shmlock_value_t *old, const shmlock_value_t *val,
    int64_t exptime_ms, int *forcible)
{
    uint32_t  hash;
    shard_t  *sh;
    int       rc;

    *forcible = 0;
    CHECK_LIVE(zone);
    CHECK_KEY(key_len);
    if (!shmlock_dict_value_ok(old) || !shmlock_dict_value_ok(val)) {
        return SHMLOCK_BAD_VALUE;
    }
    hash = hash_bytes(key, key_len);
    sh = zone_shard(zone, hash);
    shard_write_lock(sh);
    rc = shdict_cas(sh, key, key_len, hash, old, val, exptime_ms, forcible);
    return shm_watch_after(zone, shard_write_unlock(sh, rc));
}

int
shmlock_dict_cad(shmlock_zone_t *zone, const char *key, size_t key_len,
    const shmlock_value_t *old)
{
    CHECK_LIVE(zone);
    CHECK_KEY(key_len);
    return shmlock_dict_del(zone, key, key_len, hash_bytes(key, key_len),
                            old);
}

int
shmlock_dict_push(shmlock_zone_t *zone, int side, const char *key,
    size_t key_len, const shmlock_value_t *val, uint32_t *len)
{
    uint32_t  hash;
    shard_t  *sh;
    int       rc;

    *len = 0;
    CHECK_LIVE(zone);
    CHECK_KEY(key_len);
    if (val->type != SHMLOCK_TNUMBER
        && (val->type != SHMLOCK_TSTRING || !shmlock_dict_value_ok(val)))
    {
        return SHMLOCK_BAD_VALUE;
    }
    hash = hash_bytes(key, key_len);
    sh = zone_shard(zone, hash);
    shard_write_lock(sh);
    rc = shdict_push(sh, side != SHMLOCK_LEFT, key, key_len, hash, val, len);
    return shm_watch_after(zone, shard_write_unlock(sh, rc));
}

int
shmlock_dict_pop(shmlock_zone_t *zone, int side, const char *key,
    size_t key_len, shmlock_value_t *out, char *buf, size_t buf_size)
{
    uint32_t  hash;
    shard_t  *sh;
    int       rc;

    out->type = SHMLOCK_TNIL;
    CHECK_LIVE(zone);
    CHECK_KEY(key_len);
    hash = hash_bytes(key, key_len);
    sh = zone_shard(zone, hash);
    shard_write_lock(sh);
    rc = shdict_pop(sh, side != SHMLOCK_LEFT, key, key_len, hash, out, buf,
                    buf_size);
    return shm_watch_after(zone, shard_write_unlock(sh, rc));
}

int
shmlock_dict_llen(shmlock_zone_t *zone, const char *key, size_t key_len,
    uint32_t *len)
{
    uint32_t  hash;
    shard_t  *sh;
    int       rc;

    *len = 0;
    CHECK_LIVE(zone);
    CHECK_KEY(key_len);
    hash = hash_bytes(key, key_len);
    sh = zone_shard(zone, hash);
    shard_lock(sh);
    rc = shdict_llen(sh, key, key_len, hash, len);
    return shm_watch_after(zone, shard_unlock(sh, rc));
}

int
shmlock_dict_flush_all(shmlock_zone_t *zone)
{
    uint32_t  i;
    int       rc = SHMLOCK_OK;

    CHECK_LIVE(zone);
    for (i = 0; i < zone->nshards; i++) {
        shard_write_lock(&zone->shard[i]);
        shdict_flush_all(&zone->shard[i]);
        rc = shard_write_unlock(&zone->shard[i], rc);
    }
    return shm_watch_after(zone, rc);
}

int
shmlock_dict_flush_expired(shmlock_zone_t *zone, int max_count, int *freed)
{
    uint32_t  i;
    int       n = 0, rc = SHMLOCK_OK;

    *freed = 0;
    CHECK_LIVE(zone);
    for (i = 0; i < zone->nshards && (max_count <= 0 || n < max_count); i++) {
        shard_write_lock(&zone->shard[i]);
        n += shdict_flush_expired(&zone->shard[i],
                                  max_count > 0 ? max_count - n : 0);
        rc = shard_write_unlock(&zone->shard[i], rc);
    }
    *freed = n;
    return shm_watch_after(zone, rc);
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
        shard_lock(&zone->shard[i]);
        shdict_get_keys(&zone->shard[i], max_count > 0 ? max_count - keys : 0,
                        total < buf_size ? buf + total : buf,
                        total < buf_size ? buf_size - total : 0, &n, &u);
        rc = shard_unlock(&zone->shard[i], rc);
        keys += n;
        total += u;
    }
    *count = keys;
    *used = total;
    if (rc == SHMLOCK_OK && total > buf_size) {
        rc = SHMLOCK_AGAIN;
    }
    return shm_watch_after(zone, rc);
}

/* One shard's step; the cursor is the shard (high 32 bits) and its next
 * bucket (low 32 bits), so that 0 starts and never comes back. */
int
shmlock_dict_scan(shmlock_zone_t *zone, uint64_t cursor, int count,
    char *buf, size_t buf_size, uint64_t *next, int *keys, size_t *used)
{
    uint64_t  shard = cursor >> 32;
    uint32_t  bucket = (uint32_t) cursor;
    shard_t  *sh;
    int       rc;

    *next = 0;
    *keys = 0;
    *used = 0;
    CHECK_LIVE(zone);
    if (shard >= zone->nshards) {
        return SHMLOCK_OK;
    }
    sh = &zone->shard[shard];
    if (bucket > sh->bucket_mask) {
        return SHMLOCK_OK;
    }
    shard_lock(sh);
    rc = shdict_scan(sh, &bucket, count > 0 ? count : 1, buf, buf_size,
                     keys, used);
    rc = shard_unlock(sh, rc);
    if (rc == SHMLOCK_AGAIN) {
        *next = cursor;
    } else if (rc == SHMLOCK_OK) {
        if (bucket <= sh->bucket_mask) {
            *next = shard << 32 | bucket;
        } else if (shard + 1 < zone->nshards) {
            *next = (shard + 1) << 32;
        }
    }
    return shm_watch_after(zone, rc);
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
    return chunks * SHARD_CHUNK_SIZE;
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
        shard_lock(&zone->shard[i]);
        rc = verify_shard(&zone->shard[i], msg, msg_size);
        rc = shard_unlock(&zone->shard[i], rc);
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
    return shm_watch_after(zone, rc);
}

/* Adds the figures of shard sh to out, read under its mutex. */
static int
shmlock_dict_stats_add(shard_t *sh, shmlock_stats_t *out, int rc)
{
    shard_hdr_t  *h = sh->hdr;

    shard_lock(sh);
    out->free_space += (uint64_t) h->dict.free_count * SHARD_CHUNK_SIZE;
    out->entries += shdict_live_entries(sh);
    out->evictions += h->stats.evictions;
    out->expired += h->stats.expired;
    out->spins += h->stats.spins;
    out->sleeps += h->stats.sleeps;
    out->takeovers += __atomic_load_n(&h->mutex.takeovers, __ATOMIC_RELAXED);
    out->recoveries += h->dict.recoveries;
    out->slots += (uint64_t) sh->slots.mask + 1 + sh->slots.hdr->spilled;
    out->slots_used += (uint64_t) sh->slots.hdr->live
                       + sh->slots.hdr->spilled;
    return shard_unlock(sh, rc);
}

int
shmlock_dict_stats(shmlock_zone_t *zone, int shard, shmlock_stats_t *out)
{
    uint32_t  i;
    int       rc = SHMLOCK_OK;

    memset(out, 0, sizeof(*out));
    CHECK_LIVE(zone);
    if (shard < -1 || shard >= (int) zone->nshards) {
        return SHMLOCK_BAD_SHARDS;
    }
    if (shard >= 0) {
        out->capacity = zone->hdr->shard_size;
        rc = shmlock_dict_stats_add(&zone->shard[shard], out, rc);
    } else {
        out->capacity = zone->size;
        for (i = 0; i < zone->nshards; i++) {
            rc = shmlock_dict_stats_add(&zone->shard[i], out, rc);
        }
    }
    return shm_watch_after(zone, rc);
}
