#include "shdict.h"
#include "entry.h"
#include "sys.h"

#include <string.h>

#define COMMIT(z)  journal_commit(&(z)->hdr->journal)

void
shdict_format(zone_t *z)
{
    dict_state_t  *d = &z->hdr->dict;

    memset(z->buckets, 0, (size_t) (z->bucket_mask + 1) * sizeof(uint32_t));
    memset(z->wait_seq, 0, 2 * ZONE_WAIT_WORDS * sizeof(uint32_t));
    d->lru_head = d->lru_tail = 0;
    d->nentries = 0;
    chunk_format(z);
}

/* Like ngx.shared.DICT, every store first drops a couple of expired
 * entries from the LRU tail, so expired data does not linger. */
static void
shdict_reclaim_tail(zone_t *z, int64_t *now)
{
    evict_expired(z, UINT32_MAX, 0, 2, now);
}

int
shdict_store(zone_t *z, int op, const char *key, size_t klen, uint32_t hash,
    const shmlock_value_t *v, int64_t exptime_ms, int *forcible)
{
    int64_t    now = 0;
    uint32_t   i, *link;
    entry_t   *e;
    int        pinned, rc;

    *forcible = 0;
    shdict_reclaim_tail(z, &now);

    i = entry_lookup(z, key, klen, hash, &link);
    if (i != 0) {
        e = entry_at(z, i);
        if ((op & SHMLOCK_OP_ADD) && !entry_expired(e, &now)) {
            return SHMLOCK_EXISTS;
        }
        if ((op & SHMLOCK_OP_REPLACE) && entry_expired(e, &now)) {
            return SHMLOCK_NOT_FOUND;
        }
        if (v->type == SHMLOCK_TNIL) {
            entry_remove(z, i);
            COMMIT(z);
            return SHMLOCK_OK;
        }
        /* replace keeps the entry's class; add pins; set makes evictable */
        pinned = (op & SHMLOCK_OP_REPLACE) ? (e->eflags & ENTRY_PINNED)
                                           : (op & SHMLOCK_OP_ADD);

    } else {
        if (op & SHMLOCK_OP_REPLACE) {
            return SHMLOCK_NOT_FOUND;
        }
        if (v->type == SHMLOCK_TNIL) {
            return SHMLOCK_OK;
        }
        pinned = op & SHMLOCK_OP_ADD;
    }

    rc = entry_put(z, i, key, klen, hash, v, entry_deadline(&now, exptime_ms),
                   pinned, op & SHMLOCK_OP_SAFE, &now, forcible);
    COMMIT(z);
    return rc;
}

int
shdict_get(zone_t *z, const char *key, size_t klen, uint32_t hash,
    int get_stale, shmlock_value_t *out, char *buf, size_t buf_size)
{
    int64_t    now = 0;
    uint32_t   i, *link;
    entry_t   *e;

    out->stale = 0;
    i = entry_lookup(z, key, klen, hash, &link);
    if (i == 0) {
        out->type = SHMLOCK_TNIL;
        return SHMLOCK_OK;
    }
    e = entry_at(z, i);
    if (entry_expired(e, &now)) {
        if (!get_stale) {
            out->type = SHMLOCK_TNIL;
            return SHMLOCK_OK;
        }
        out->stale = 1;
    }

    entry_value_out(z, i, out);
    if (out->type == SHMLOCK_TSTRING) {
        if (out->len > buf_size) {
            return SHMLOCK_AGAIN;
        }
        chunk_read(z, i, e->key_len, buf, out->len);
    }
    if (!(e->eflags & ENTRY_REFERENCED)) {
        e->eflags |= ENTRY_REFERENCED;    /* an eviction hint only */
    }
    return SHMLOCK_OK;
}

int
shdict_incr(zone_t *z, const char *key, size_t klen, uint32_t hash,
    double *value, int has_init, double init, int64_t init_ttl_ms,
    int *forcible)
{
    int64_t          now = 0;
    uint32_t         i, *link;
    entry_t         *e;
    double           num;
    shmlock_value_t  v;
    int              rc;

    *forcible = 0;
    shdict_reclaim_tail(z, &now);

    i = entry_lookup(z, key, klen, hash, &link);
    if (i != 0 && !entry_expired(e = entry_at(z, i), &now)) {
        if (e->vtype != SHMLOCK_TNUMBER) {
            return SHMLOCK_NOT_A_NUMBER;
        }
        memcpy(&num, &e->num, sizeof(num));
        num += *value;
        uint64_t  bits;
        memcpy(&bits, &num, sizeof(bits));
        ZW64(z, e->num, bits);
        COMMIT(z);
        e->eflags |= ENTRY_REFERENCED;
        *value = num;
        return SHMLOCK_OK;
    }

    if (!has_init) {
        return SHMLOCK_NOT_FOUND;
    }
    memset(&v, 0, sizeof(v));
    v.type = SHMLOCK_TNUMBER;
    v.num = init + *value;
    rc = entry_put(z, i, key, klen, hash, &v, entry_deadline(&now, init_ttl_ms),
                   0, 0, &now, forcible);
    COMMIT(z);
    if (rc == SHMLOCK_OK) {
        *value = v.num;
    }
    return rc;
}

int
shdict_ttl(zone_t *z, const char *key, size_t klen, uint32_t hash,
    int64_t *ttl_ms)
{
    int64_t    now = 0;
    uint32_t   i, *link;
    entry_t   *e;

    i = entry_lookup(z, key, klen, hash, &link);
    if (i == 0 || entry_expired(e = entry_at(z, i), &now)) {
        return SHMLOCK_NOT_FOUND;
    }
    *ttl_ms = e->expires == 0 ? 0 : (int64_t) e->expires - entry_now(&now);
    return SHMLOCK_OK;
}

int
shdict_expire(zone_t *z, const char *key, size_t klen, uint32_t hash,
    int64_t exptime_ms)
{
    int64_t    now = 0;
    uint32_t   i, *link;
    entry_t   *e;

    i = entry_lookup(z, key, klen, hash, &link);
    if (i == 0 || entry_expired(e = entry_at(z, i), &now)) {
        return SHMLOCK_NOT_FOUND;
    }
    ZW64(z, e->expires, (uint64_t) entry_deadline(&now, exptime_ms));
    COMMIT(z);
    return SHMLOCK_OK;
}

/*
 * old->type == SHMLOCK_TNIL means "the key must be absent": then cas is an
 * add that answers "changed" instead of "exists".
 */
int
shdict_cas(zone_t *z, const char *key, size_t klen, uint32_t hash,
    const shmlock_value_t *old, const shmlock_value_t *v, int64_t exptime_ms,
    int *forcible)
{
    int64_t    now = 0;
    uint32_t   i, *link;
    entry_t   *e;
    int        rc, live;

    *forcible = 0;
    i = entry_lookup(z, key, klen, hash, &link);
    live = i != 0 && !entry_expired(entry_at(z, i), &now);

    if (old->type == SHMLOCK_TNIL) {
        if (live) {
            return SHMLOCK_CHANGED;
        }
        if (v->type == SHMLOCK_TNIL) {
            return SHMLOCK_OK;
        }
        rc = entry_put(z, i, key, klen, hash, v,
                       entry_deadline(&now, exptime_ms), 1, 0, &now, forcible);
        COMMIT(z);
        return rc;
    }

    if (!live) {
        return SHMLOCK_NOT_FOUND;
    }
    if (!entry_value_equal(z, i, old)) {
        return SHMLOCK_CHANGED;
    }
    e = entry_at(z, i);
    if (v->type == SHMLOCK_TNIL) {
        entry_remove(z, i);
        COMMIT(z);
        return SHMLOCK_OK;
    }
    if (entry_value_equal(z, i, v)) {
        /* same value (a lock extending its expiry): no new chunks needed */
        ZW64(z, e->expires, (uint64_t) entry_deadline(&now, exptime_ms));
        ZW32(z, e->user_flags, v->flags);
        COMMIT(z);
        return SHMLOCK_OK;
    }
    rc = entry_put(z, i, key, klen, hash, v, entry_deadline(&now, exptime_ms),
                   e->eflags & ENTRY_PINNED, 0, &now, forcible);
    COMMIT(z);
    return rc;
}

int
shdict_cad(zone_t *z, const char *key, size_t klen, uint32_t hash,
    const shmlock_value_t *old)
{
    int64_t    now = 0;
    uint32_t   i, *link;

    i = entry_lookup(z, key, klen, hash, &link);
    if (i == 0 || entry_expired(entry_at(z, i), &now)) {
        return SHMLOCK_NOT_FOUND;
    }
    if (!entry_value_equal(z, i, old)) {
        return SHMLOCK_CHANGED;
    }
    entry_remove(z, i);
    COMMIT(z);
    return SHMLOCK_OK;
}

/* As ngx.shared.DICT: marks everything expired, frees nothing. */
void
shdict_flush_all(zone_t *z)
{
    int64_t   now = sys_now_ms();
    uint64_t  past = now > 1 ? (uint64_t) now - 1 : 1;
    uint32_t  i;

    for (i = z->hdr->dict.lru_head; i != 0; i = entry_at(z, i)->lru_next) {
        ZW64(z, entry_at(z, i)->expires, past);
        COMMIT(z);
    }
}

int
shdict_flush_expired(zone_t *z, int max_count)
{
    int64_t   now = sys_now_ms();
    uint32_t  i = z->hdr->dict.lru_tail, prev;

    int       freed = 0;

    while (i != 0 && (max_count <= 0 || freed < max_count)) {
        prev = entry_at(z, i)->lru_prev;
        if (entry_expired(entry_at(z, i), &now)) {
            entry_remove(z, i);
            COMMIT(z);
            freed++;
        }
        i = prev;
    }
    return freed;
}

int
shdict_get_keys(zone_t *z, int max_count, char *buf, size_t buf_size,
    int *count, size_t *used)
{
    int64_t    now = 0;
    uint32_t   i, len;
    size_t     need = 0;
    int        n = 0;
    entry_t   *e;

    for (i = z->hdr->dict.lru_head; i != 0; i = e->lru_next) {
        e = entry_at(z, i);
        if (entry_expired(e, &now)) {
            continue;
        }
        if (max_count > 0 && n >= max_count) {
            break;
        }
        len = e->key_len;
        if (need + sizeof(len) + len <= buf_size) {
            memcpy(buf + need, &len, sizeof(len));
            chunk_read(z, i, 0, buf + need + sizeof(len), len);
        }
        need += sizeof(len) + len;
        n++;
    }
    *count = n;
    *used = need;
    return need > buf_size ? SHMLOCK_AGAIN : SHMLOCK_OK;
}
