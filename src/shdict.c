#include "shdict.h"
#include "entry.h"
#include "evict.h"
#include "list.h"
#include "rewrite.h"
#include "sys.h"

#include <string.h>

void
shdict_format(shard_t *sh)
{
    memset(sh->hdr, 0, sizeof(shard_hdr_t));
    shmtx_init(&sh->hdr->mutex);
    memset(sh->buckets, 0, (size_t) (sh->bucket_mask + 1) * sizeof(uint32_t));
    memset(sh->refs, 0, (size_t) sh->nchunks + 1);
    chunk_format(sh);
}

/*
 * Chunks for a new entry of n chunks, evicting if it must (never entry
 * `keep`, the one being replaced; with `safe`, expired entries only).
 */
static inline __attribute__((always_inline)) uint32_t
shdict_alloc(shard_t *sh, uint32_t n, uint32_t keep, int safe, int64_t *now,
    int *forcible)
{
    uint32_t  c;

    c = chunk_alloc(sh, n);
    if (c != 0 || n > sh->nchunks) {
        return c;
    }
    /* safe_* may only reclaim expired entries, so they look at all of them;
     * the others look near the tail, then evict in LRU order */
    evict_expired(sh, n, keep, safe ? 0 : 64, now);
    if (!safe) {
        evict_lru(sh, n, keep, now, forcible);
    }
    if (sh->hdr->dict.free_count < n) {
        /* expired pinned entries are not in the LRU list */
        evict_sweep(sh, n, keep, now);
    }
    return chunk_alloc(sh, n);
}

/*
 * Writes key = v, replacing entry `old` (0: none): in old's own chunks when
 * it fits (rewrite.c), else as a new entry built aside and published in
 * old's place.  May evict (never `old`, never a live pinned entry; with
 * `safe`, expired ones only).
 */
static int
shdict_put(shard_t *sh, uint32_t old, const char *key, size_t klen,
    uint32_t hash, const shmlock_value_t *v, int64_t expires, int pinned,
    int safe, int64_t *now, int *forcible)
{
    uint32_t  c;
    size_t    bytes = klen;

    if (v->type == SHMLOCK_TSTRING) {
        if (v->len > UINT32_MAX - ENTRY_FLAGS_LEN - klen) {
            return SHMLOCK_NO_MEMORY;
        }
        bytes += v->len;
    }
    if (bytes / CHUNK_CONT_DATA >= sh->nchunks) {
        return SHMLOCK_NO_MEMORY;
    }
    if (old != 0 && rewrite_entry(sh, old, klen, v, expires, pinned)) {
        return SHMLOCK_OK;
    }

    c = shdict_alloc(sh, entry_chunks(klen, v->flags, (uint32_t) v->type,
                                      v->len),
                     old, safe, now, forcible);
    if (c == 0) {
        return SHMLOCK_NO_MEMORY;
    }
    entry_fill(sh, c, key, klen, hash, v, expires, pinned);
    entry_publish(sh, c, old, hash, pinned);
    return SHMLOCK_OK;
}

/* The entry of key if it is live, else 0 (absent or expired). */
static inline uint32_t
shdict_live(shard_t *sh, const char *key, size_t klen, uint32_t hash,
    int64_t *now)
{
    uint32_t  i = entry_lookup(sh, key, klen, hash);

    return i != 0 && !entry_expired(entry_at(sh, i), now) ? i : 0;
}

/* Like ngx.shared.DICT, every store first drops a couple of expired
 * entries from the LRU tail, so expired data does not linger. */
static inline void
shdict_reclaim_tail(shard_t *sh, int64_t *now)
{
    uint32_t  t = chunk_index(sh, sh->hdr->dict.lru_tail);

    if (t != 0 && entry_meta_code(entry_at(sh, t)->meta) != 0) {
        evict_expired(sh, UINT32_MAX, 0, 2, now);
    }
}

int
shdict_store(shard_t *sh, int op, const char *key, size_t klen, uint32_t hash,
    const shmlock_value_t *v, int64_t exptime_ms, int64_t now_ms,
    int *forcible)
{
    int64_t    now = now_ms;     /* 0: read lazily (entry_now) */
    uint32_t   i;
    entry_t   *e;
    int        pinned, rc;

    shdict_reclaim_tail(sh, &now);

    i = entry_lookup(sh, key, klen, hash);
    if (i != 0) {
        e = entry_at(sh, i);
        if ((op & SHMLOCK_OP_ADD) && !entry_expired(e, &now)) {
            return SHMLOCK_EXISTS;
        }
        if ((op & SHMLOCK_OP_REPLACE) && entry_expired(e, &now)) {
            return SHMLOCK_NOT_FOUND;
        }
        if (v->type == SHMLOCK_TNIL) {
            entry_remove(sh, i);
            return SHMLOCK_OK;
        }
        /* replace keeps the entry's class; add pins; set makes evictable */
        pinned = (op & SHMLOCK_OP_REPLACE) ? entry_pinned(e)
                                           : (op & SHMLOCK_OP_ADD);
        if (shdict_store_scalar(sh, i, e, v, exptime_ms, pinned != 0)) {
            return SHMLOCK_OK;
        }

    } else {
        if (op & SHMLOCK_OP_REPLACE) {
            return SHMLOCK_NOT_FOUND;
        }
        if (v->type == SHMLOCK_TNIL) {
            return SHMLOCK_OK;
        }
        pinned = op & SHMLOCK_OP_ADD;
    }

    rc = shdict_put(sh, i, key, klen, hash, v, entry_deadline(&now, exptime_ms),
                    pinned, op & SHMLOCK_OP_SAFE, &now, forcible);
    return rc;
}

int
shdict_get(shard_t *sh, const char *key, size_t klen, uint32_t hash,
    int get_stale, shmlock_value_t *out, char *buf, size_t buf_size,
    int64_t now)
{
    uint32_t   i;
    entry_t   *e;

    out->stale = 0;
    i = entry_lookup(sh, key, klen, hash);
    if (i == 0) {
        out->type = SHMLOCK_TNIL;
        return SHMLOCK_OK;
    }
    e = entry_at(sh, i);
    if (entry_expired(e, &now)) {
        if (!get_stale) {
            out->type = SHMLOCK_TNIL;
            return SHMLOCK_OK;
        }
        out->stale = 1;
    }

    entry_value_out(sh, i, out);
    if (!entry_value_sane(sh, e)) {
        sh->broken = 1;
        out->type = SHMLOCK_TNIL;
        return SHMLOCK_CORRUPT;
    }
    if (out->type == SHMLOCK_TSTRING) {
        if (out->len > buf_size) {
            return SHMLOCK_AGAIN;
        }
        chunk_read(sh, i, ENTRY_ROOM_STRING, entry_voff(e), buf, out->len);
    }
    chunk_mark_read(sh, i);
    return SHMLOCK_OK;
}

int
shdict_incr(shard_t *sh, const char *key, size_t klen, uint32_t hash,
    double *value, int has_init, double init, int64_t init_ttl_ms,
    int *forcible)
{
    int64_t          now = 0;
    uint32_t         i;
    entry_t         *e;
    double           num;
    shmlock_value_t  v;
    int              rc;

    *forcible = 0;
    shdict_reclaim_tail(sh, &now);

    i = entry_lookup(sh, key, klen, hash);
    if (i != 0 && !entry_expired(e = entry_at(sh, i), &now)) {
        if (entry_vtype(e) != SHMLOCK_TNUMBER) {
            return SHMLOCK_NOT_A_NUMBER;
        }
        memcpy(&num, &e->num, sizeof(num));
        num += *value;
        uint64_t  bits;
        memcpy(&bits, &num, sizeof(bits));
        WORDSTORE64(e->num, bits);
        chunk_mark_read(sh, i);
        *value = num;
        return SHMLOCK_OK;
    }

    if (!has_init) {
        return SHMLOCK_NOT_FOUND;
    }
    memset(&v, 0, sizeof(v));
    v.type = SHMLOCK_TNUMBER;
    v.num = init + *value;
    rc = shdict_put(sh, i, key, klen, hash, &v,
                    entry_deadline(&now, init_ttl_ms), 0, 0, &now, forcible);
    if (rc == SHMLOCK_OK) {
        *value = v.num;
    }
    return rc;
}

int
shdict_ttl(shard_t *sh, const char *key, size_t klen, uint32_t hash,
    int64_t *ttl_ms)
{
    int64_t    now = 0, expires;
    uint32_t   i;
    entry_t   *e;

    i = shdict_live(sh, key, klen, hash, &now);
    if (i == 0) {
        return SHMLOCK_NOT_FOUND;
    }
    e = entry_at(sh, i);
    expires = entry_expires(e);
    *ttl_ms = expires == 0 ? 0 : expires - entry_now(&now);
    return SHMLOCK_OK;
}

int
shdict_expire(shard_t *sh, const char *key, size_t klen, uint32_t hash,
    int64_t exptime_ms)
{
    int64_t    now = 0;
    uint32_t   i;
    entry_t   *e;

    i = shdict_live(sh, key, klen, hash, &now);
    if (i == 0) {
        return SHMLOCK_NOT_FOUND;
    }
    e = entry_at(sh, i);
    WORDSTORE64(e->meta,
                entry_meta_expiring(e->meta, entry_deadline(&now, exptime_ms)));
    return SHMLOCK_OK;
}

/*
 * old->type == SHMLOCK_TNIL means "the key must be absent": then cas is an
 * add that answers "changed" instead of "exists".
 */
int
shdict_cas(shard_t *sh, const char *key, size_t klen, uint32_t hash,
    const shmlock_value_t *old, const shmlock_value_t *v, int64_t exptime_ms,
    int *forcible)
{
    int64_t    now = 0, deadline;
    uint32_t   i;
    entry_t   *e;
    int        rc, live;

    *forcible = 0;
    i = entry_lookup(sh, key, klen, hash);
    live = i != 0 && !entry_expired(entry_at(sh, i), &now);

    if (old->type == SHMLOCK_TNIL) {
        if (live) {
            return SHMLOCK_CHANGED;
        }
        if (v->type == SHMLOCK_TNIL) {
            return SHMLOCK_OK;
        }
        rc = shdict_put(sh, i, key, klen, hash, v,
                        entry_deadline(&now, exptime_ms), 1, 0, &now, forcible);
        return rc;
    }

    if (!live) {
        return SHMLOCK_NOT_FOUND;
    }
    if (!entry_value_equal(sh, i, old)) {
        return SHMLOCK_CHANGED;
    }
    e = entry_at(sh, i);
    deadline = exptime_ms == SHMLOCK_KEEP_TTL
               ? entry_expires(e) : entry_deadline(&now, exptime_ms);
    if (v->type == SHMLOCK_TNIL) {
        entry_remove(sh, i);
        return SHMLOCK_OK;
    }
    if (entry_value_equal(sh, i, v) && entry_user_flags(sh, i) == v->flags) {
        /* same value (a lock extending its expiry): one word to change, so
         * no new chunks needed; anything more goes through a new entry */
        WORDSTORE64(e->meta, entry_meta_expiring(e->meta, deadline));
        return SHMLOCK_OK;
    }
    rc = shdict_put(sh, i, key, klen, hash, v, deadline,
                    entry_pinned(e), 0, &now, forcible);
    return rc;
}

/*
 * Removes the entry when it holds `old`, expired or not: an expired entry
 * is already absent for every reader, and a lock's owner releasing its
 * expired lock must not pay for a clock read (nor be told "not found").
 */
int
shdict_cad(shard_t *sh, const char *key, size_t klen, uint32_t hash,
    const shmlock_value_t *old)
{
    int64_t    now = 0;
    uint32_t   i;

    i = entry_lookup(sh, key, klen, hash);
    if (i == 0) {
        return SHMLOCK_NOT_FOUND;
    }
    if (entry_value_equal(sh, i, old)) {
        entry_remove(sh, i);
        return SHMLOCK_OK;
    }
    return entry_expired(entry_at(sh, i), &now) ? SHMLOCK_NOT_FOUND
                                               : SHMLOCK_CHANGED;
}

typedef struct {
    int64_t   now;
    uint64_t  past;
    int       max;
    int       n;
    char     *buf;
    size_t    buf_size;
    size_t    used;
} visit_t;

static int
visit_expire(shard_t *sh, uint32_t i, void *ctx)
{
    entry_t  *e = entry_at(sh, i);

    WORDSTORE64(e->meta, entry_meta_expiring(e->meta,
                                             (int64_t) ((visit_t *) ctx)->past));
    return 0;
}

/* As ngx.shared.DICT: marks everything expired, frees nothing. */
void
shdict_flush_all(shard_t *sh)
{
    visit_t  v;
    int64_t  now = sys_now_ms();

    v.past = now > 1 ? (uint64_t) now - 1 : 1;
    entry_each(sh, visit_expire, &v);
}

static int
visit_free_expired(shard_t *sh, uint32_t i, void *ctx)
{
    visit_t  *v = ctx;

    if (entry_expired(entry_at(sh, i), &v->now)) {
        entry_remove(sh, i);
        v->n++;
    }
    return v->max > 0 && v->n >= v->max;
}

int
shdict_flush_expired(shard_t *sh, int max_count)
{
    visit_t  v;

    v.now = sys_now_ms();
    v.max = max_count;
    v.n = 0;
    entry_each(sh, visit_free_expired, &v);
    sh->hdr->stats.expired += (uint64_t) v.n;
    return v.n;
}

typedef struct {
    int64_t   now;
    uint64_t  live;
} visit_count_t;

static int
visit_count_live(shard_t *sh, uint32_t i, void *ctx)
{
    visit_count_t  *v = ctx;

    if (!entry_expired(entry_at(sh, i), &v->now)) {
        v->live++;
    }
    return 0;
}

uint64_t
shdict_live_entries(shard_t *sh)
{
    visit_count_t  v;

    v.now = sys_now_ms();
    v.live = 0;
    entry_each(sh, visit_count_live, &v);
    return v.live;
}

static int
visit_key(shard_t *sh, uint32_t i, void *ctx)
{
    visit_t   *v = ctx;
    entry_t   *e = entry_at(sh, i);
    uint32_t   len = entry_key_len(e);

    if (entry_expired(e, &v->now)) {
        return 0;
    }
    if (v->used + sizeof(len) + len <= v->buf_size) {
        memcpy(v->buf + v->used, &len, sizeof(len));
        chunk_read(sh, i, entry_room(e), 0, v->buf + v->used + sizeof(len),
                   len);
    }
    v->used += sizeof(len) + len;
    v->n++;
    return v->max > 0 && v->n >= v->max;
}

int
shdict_get_keys(shard_t *sh, int max_count, char *buf, size_t buf_size,
    int *count, size_t *used)
{
    visit_t  v;

    v.now = sys_now_ms();
    v.max = max_count;
    v.n = 0;
    v.buf = buf;
    v.buf_size = buf_size;
    v.used = 0;
    entry_each(sh, visit_key, &v);
    *count = v.n;
    *used = v.used;
    return v.used > buf_size ? SHMLOCK_AGAIN : SHMLOCK_OK;
}

/*
 * One step of a walk: the live keys of whole buckets from *bucket on, as
 * get_keys writes them, until `count` keys or `count` buckets are behind
 * (the mutex is held for that much work only); *bucket gets the bucket
 * to start from next time (nbuckets: the shard is done).  A bucket whose
 * keys do not fit in buf ends the step before it; when it is the first,
 * SHMLOCK_AGAIN and *used the bytes it needs.  Whole buckets, because the
 * chains change between steps but a key never leaves its bucket: a walk
 * meets every key that stays live throughout exactly once.
 */
int
shdict_scan(shard_t *sh, uint32_t *bucket, int count, char *buf,
    size_t buf_size, int *nkeys, size_t *used)
{
    visit_t   v;
    uint32_t  b = *bucket, end;
    int       n;
    size_t    u;

    v.now = sys_now_ms();
    v.max = 0;
    v.n = 0;
    v.buf = buf;
    v.buf_size = buf_size;
    v.used = 0;
    end = sh->bucket_mask + 1;
    if (end - b > (uint32_t) count) {
        end = b + (uint32_t) count;
    }
    for ( ; b < end && v.n < count; b++) {
        n = v.n;
        u = v.used;
        entry_each_in(sh, b, b + 1, visit_key, &v);
        if (v.used > buf_size) {
            if (n == 0 && u == 0) {
                *nkeys = 0;
                *used = v.used;
                return SHMLOCK_AGAIN;
            }
            v.n = n;
            v.used = u;
            break;
        }
    }
    *bucket = b;
    *nkeys = v.n;
    *used = v.used;
    return SHMLOCK_OK;
}

/*
 * lpush/rpush.  Like ngx.shared.DICT, a push only takes free memory and
 * the room of expired entries: it never evicts a live one.
 */
int
shdict_push(shard_t *sh, int side, const char *key, size_t klen,
    uint32_t hash, const shmlock_value_t *v, uint32_t *len)
{
    int64_t    now = 0;
    uint32_t   i, c, need;
    entry_t   *e = NULL;
    int        forcible = 0, only;

    shdict_reclaim_tail(sh, &now);

    if ((v->type == SHMLOCK_TSTRING ? v->len : 0) / CHUNK_CONT_DATA
        >= sh->nchunks)
    {
        return SHMLOCK_NO_MEMORY;
    }
    need = list_node_chunks(v);

    i = entry_lookup(sh, key, klen, hash);
    if (i != 0 && !entry_expired(e = entry_at(sh, i), &now)) {
        if (entry_vtype(e) != SHMLOCK_TLIST) {
            return SHMLOCK_NOT_A_LIST;
        }
        if (list_end(sh, i, side, &only) == 0) {
            return SHMLOCK_CORRUPT;
        }
        c = shdict_alloc(sh, need, i, 1, &now, &forcible);
        if (c == 0) {
            return SHMLOCK_NO_MEMORY;
        }
        list_node_fill(sh, c, v);
        list_push(sh, i, c, side);
        *chunk_ref(sh, i) = 1;
        *len = e->value_len;
        return SHMLOCK_OK;
    }

    /* a new list, in place of the expired entry i if there is one */
    need += chunks_for(ENTRY_ROOM_SHORT, klen);
    c = shdict_alloc(sh, need, i, 1, &now, &forcible);
    if (c == 0) {
        return SHMLOCK_NO_MEMORY;
    }
    list_fill(sh, c, key, klen, hash, v);
    entry_publish(sh, c, i, hash, 0);
    *len = 1;
    return SHMLOCK_OK;
}

/* lpop/rpop: the value goes out before anything changes, so a buffer too
 * small (SHMLOCK_AGAIN) pops nothing. */
int
shdict_pop(shard_t *sh, int side, const char *key, size_t klen,
    uint32_t hash, shmlock_value_t *out, char *buf, size_t buf_size)
{
    int64_t    now = 0;
    uint32_t   i, n;
    int        only;

    out->stale = 0;
    out->flags = 0;
    shdict_reclaim_tail(sh, &now);

    i = shdict_live(sh, key, klen, hash, &now);
    if (i == 0) {
        out->type = SHMLOCK_TNIL;
        return SHMLOCK_OK;
    }
    if (entry_vtype(entry_at(sh, i)) != SHMLOCK_TLIST) {
        out->type = SHMLOCK_TNIL;
        return SHMLOCK_NOT_A_LIST;
    }
    n = list_end(sh, i, side, &only);
    if (n == 0) {
        out->type = SHMLOCK_TNIL;
        return SHMLOCK_CORRUPT;
    }
    entry_value_out(sh, n, out);
    out->flags = 0;
    if ((out->type != SHMLOCK_TNUMBER && out->type != SHMLOCK_TSTRING)
        || !entry_value_sane(sh, entry_at(sh, n)))
    {
        sh->broken = 1;
        out->type = SHMLOCK_TNIL;
        return SHMLOCK_CORRUPT;
    }
    if (out->type == SHMLOCK_TSTRING) {
        if (out->len > buf_size) {
            return SHMLOCK_AGAIN;
        }
        chunk_read(sh, n, ENTRY_ROOM_STRING, 0, buf, out->len);
    }

    if (only) {
        entry_remove(sh, i);
    } else {
        list_pop(sh, i, side);
        *chunk_ref(sh, i) = 1;
    }
    return SHMLOCK_OK;
}

int
shdict_llen(shard_t *sh, const char *key, size_t klen, uint32_t hash,
    uint32_t *len)
{
    int64_t    now = 0;
    uint32_t   i;
    entry_t   *e;

    *len = 0;
    i = shdict_live(sh, key, klen, hash, &now);
    if (i == 0) {
        return SHMLOCK_OK;
    }
    e = entry_at(sh, i);
    if (entry_vtype(e) != SHMLOCK_TLIST) {
        return SHMLOCK_NOT_A_LIST;
    }
    *len = e->value_len;
    chunk_mark_read(sh, i);
    return SHMLOCK_OK;
}
