/*
 * A compare-and-delete and a compare-and-replace on an ngx.shared.DICT
 * (shmlock_ngx_dict_*, shmlock.h): the drop-in lock's release and
 * extension on a lua_shared_dict, one call under the dict's own mutex
 * where ngx.shared.DICT has only get, then delete or replace (two calls,
 * two rounds of the mutex, and a window between them in which another
 * worker may take the key).
 *
 * Inside nginx only, and only where this file's picture of nginx's and
 * lua-nginx-module's structures is the running one.  That picture is
 * private to them (no header of theirs is installed), so it is never
 * trusted on faith: shmlock_ngx_dict_probe checks it against an entry the
 * caller has just added through lua-nginx-module's own function (its key,
 * value, flags and expiry, each where the picture says), and the caller
 * deletes that entry here, then looks it up through lua-nginx-module
 * again; only a dict that passed both is ever given to
 * shmlock_ngx_dict_delete_if or _replace_if (resty.shmlock.lock.
 * ngx_shared).  Every pointer followed is checked to lie inside the
 * dict's shared memory; a walk that leaves it answers -1 and changes
 * nothing.
 *
 * The picture (nginx 1.x; lua-nginx-module 0.10.7 of 2016 and every later
 * one: its node had another order before, which the probe refuses):
 *   ngx_shm_zone_t      { void *data; ngx_shm_t shm { addr, size, ... } }
 *   data: the dict's    { shctx *sh; ngx_slab_pool_t *shpool; ... }
 *   shctx               { ngx_rbtree_t { root, sentinel, insert };
 *                         ngx_rbtree_node_t sentinel; ngx_queue_t lru }
 *   a node: an ngx_rbtree_node_t { key (crc32 of the key), left, right,
 *   parent, color } whose color is the first byte of
 *                       { color, value_type (u8), key_len (u16),
 *                         value_len (u32), expires (ms, 0 never), queue
 *                         { prev, next }, user_flags (u32), key bytes,
 *                         value bytes }
 *   The pool's mutex (ngx_shmtx_t) begins at the first of the two words
 *   of the pool that point at the pool itself (its lock word is the
 *   pool's first; the second is the pool's addr): found, not assumed,
 *   since its offset depends on nginx's build.
 * nginx's own functions do the locking, the tree's unlinking and the
 * slab's freeing (ngx_shmtx_lock/unlock, ngx_rbtree_delete,
 * ngx_slab_free_locked: nginx exports them for dynamic modules), as
 * lua-nginx-module's delete does; the clock is nginx's cached one, as its
 * get reads it.
 */

#include "shmlock.h"
#ifdef SHMLOCK_TESTING
#include "shmlock_testing.h"
#endif

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

typedef struct nd_rbnode_s  nd_rbnode_t;

struct nd_rbnode_s {
    uintptr_t      key;
    nd_rbnode_t   *left;
    nd_rbnode_t   *right;
    nd_rbnode_t   *parent;
    unsigned char  color;
};

typedef struct nd_queue_s  nd_queue_t;

struct nd_queue_s {
    nd_queue_t  *prev;
    nd_queue_t  *next;
};

typedef struct {
    nd_rbnode_t  *root;
    nd_rbnode_t  *sentinel;
    void         *insert;
} nd_rbtree_t;

typedef struct {
    unsigned char   color;
    uint8_t         value_type;
    unsigned short  key_len;
    uint32_t        value_len;
    uint64_t        expires;
    nd_queue_t      queue;
    uint32_t        user_flags;
    unsigned char   data[1];
} nd_node_t;

typedef struct {
    nd_rbtree_t  rbtree;
    nd_rbnode_t  sentinel;
    nd_queue_t   lru;
} nd_shctx_t;

typedef struct {
    nd_shctx_t  *sh;
    void        *shpool;
} nd_ctx_t;

typedef struct {
    void           *data;
    unsigned char  *addr;
    size_t          size;
} nd_zone_t;

typedef struct {
    time_t     sec;
    uintptr_t  msec;
} nd_time_t;

/* nginx's functions and its cached clock, and the CRC table: made once
 * per process (pthread_once: OpenResty may run Lua in worker threads) */
static pthread_once_t  nd_once = PTHREAD_ONCE_INIT;

static struct {
    int                   found;
    void                (*lock)(void *mtx);
    void                (*unlock)(void *mtx);
    void                (*tree_delete)(nd_rbtree_t *tree, nd_rbnode_t *n);
    void                (*slab_free)(void *pool, void *p);
    nd_time_t *volatile  *now;
} ngx;

static uint32_t  nd_crc_table[256];

/* the pool's mutex: its word's index in the pool (0 not found yet); the
 * same in every pool of one nginx binary, checked again at each use */
static int  nd_mutex_word;

/* the value type lua-nginx-module gives a number (Lua's tag) */
#define ND_NUMBER      3
#define ND_MUTEX_SCAN  64       /* words of the pool searched for its mutex */
#define ND_DEPTH       128      /* a red-black tree's height bound, and more */
#define ND_SLACK_MS    5000     /* the probe's expiry: the clock's slack */

static void
nd_init(void)
{
    uint32_t  c;
    int       i, k;

    for (i = 0; i < 256; i++) {
        c = (uint32_t) i;
        for (k = 0; k < 8; k++) {
            c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
        }
        nd_crc_table[i] = c;
    }
    ngx.lock = (void (*)(void *)) dlsym(RTLD_DEFAULT, "ngx_shmtx_lock");
    ngx.unlock = (void (*)(void *)) dlsym(RTLD_DEFAULT, "ngx_shmtx_unlock");
    ngx.tree_delete = (void (*)(nd_rbtree_t *, nd_rbnode_t *))
                      dlsym(RTLD_DEFAULT, "ngx_rbtree_delete");
    ngx.slab_free = (void (*)(void *, void *))
                    dlsym(RTLD_DEFAULT, "ngx_slab_free_locked");
    ngx.now = (nd_time_t *volatile *) dlsym(RTLD_DEFAULT, "ngx_cached_time");
    ngx.found = ngx.lock && ngx.unlock && ngx.tree_delete && ngx.slab_free
                && ngx.now;
}

static int
nd_symbols(void)
{
    pthread_once(&nd_once, nd_init);
    return ngx.found;
}

/* CRC-32 (IEEE, reflected, as nginx's ngx_crc32_short): the tree's key */
static uint32_t
nd_crc32(const unsigned char *p, size_t len)
{
    uint32_t  crc = 0xffffffffu;

    while (len--) {
        crc = nd_crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    }
    return crc ^ 0xffffffffu;
}

/* whether [p, p + len) lies inside the zone's memory */
static int
nd_inside(const nd_zone_t *z, const void *p, size_t len)
{
    uintptr_t  a = (uintptr_t) p, lo = (uintptr_t) z->addr;

    return a >= lo && len <= z->size && a - lo <= z->size - len;
}

/* the dict's context and its pool's mutex, checked: 0, or -1 */
static int
nd_open(const nd_zone_t *z, nd_ctx_t **ctx, void **mutex)
{
    void  **w;
    int     i, at, first;

    if (z == NULL || z->data == NULL || z->addr == NULL
        || z->size < ND_MUTEX_SCAN * sizeof(void *))
    {
        return -1;
    }
    *ctx = z->data;
    if ((*ctx)->shpool != (void *) z->addr
        || !nd_inside(z, (*ctx)->sh, sizeof(nd_shctx_t))
        || (*ctx)->sh->rbtree.sentinel != &(*ctx)->sh->sentinel)
    {
        return -1;
    }
    w = (void **) z->addr;
    at = __atomic_load_n(&nd_mutex_word, __ATOMIC_RELAXED);
    if (at == 0) {
        /* two words point at the pool: the mutex's lock pointer, then the
         * pool's own addr; a build whose mutex is a file lock has only
         * the second, and is not used */
        first = 0;
        for (i = 1; i < ND_MUTEX_SCAN && at == 0; i++) {
            if (w[i] == (void *) z->addr) {
                if (first != 0) {
                    at = first;
                }
                first = i;
            }
        }
        if (at == 0) {
            return -1;
        }
        __atomic_store_n(&nd_mutex_word, at, __ATOMIC_RELAXED);
    }
    if (w[at] != (void *) z->addr) {
        return -1;
    }
    *mutex = &w[at];
    return 0;
}

/* The node of key (mutex held): 1 and *out, 0 if none, -1 if a pointer
 * left the zone. */
static int
nd_find(const nd_zone_t *z, nd_shctx_t *sh, const unsigned char *key,
    size_t klen, nd_node_t **out)
{
    nd_rbnode_t  *n = sh->rbtree.root, *sentinel = &sh->sentinel;
    uintptr_t     hash = nd_crc32(key, klen);
    nd_node_t    *sd;
    size_t        m;
    int           depth, rc;

    for (depth = 0; n != sentinel; depth++) {
        if (depth > ND_DEPTH
            || !nd_inside(z, n, offsetof(nd_rbnode_t, color)
                                + offsetof(nd_node_t, data)))
        {
            return -1;
        }
        if (hash != n->key) {
            n = hash < n->key ? n->left : n->right;
            continue;
        }
        sd = (nd_node_t *) &n->color;
        if (!nd_inside(z, sd->data, sd->key_len)) {
            return -1;
        }
        m = klen < sd->key_len ? klen : sd->key_len;
        rc = memcmp(key, sd->data, m);
        if (rc == 0) {
            if (klen == sd->key_len) {
                *out = sd;
                return 1;
            }
            rc = klen < sd->key_len ? -1 : 1;
        }
        n = rc < 0 ? n->left : n->right;
    }
    return 0;
}

/* nginx's cached clock in ms, as lua-nginx-module reads it */
static uint64_t
nd_now_ms(void)
{
    const nd_time_t  *t = *ngx.now;

    return (uint64_t) t->sec * 1000 + t->msec;
}

/* whether node sd holds the number value with flags, unexpired */
static int
nd_holds(const nd_zone_t *z, const nd_node_t *sd, double value,
    uint32_t flags)
{
    double  v;

    if (sd->value_type != ND_NUMBER || sd->value_len != sizeof(double)
        || sd->user_flags != flags
        || !nd_inside(z, sd->data + sd->key_len, sizeof(double)))
    {
        return 0;
    }
    memcpy(&v, sd->data + sd->key_len, sizeof(double));
    if (v != value) {
        return 0;
    }
    if (sd->expires != 0 && (int64_t) (sd->expires - nd_now_ms()) <= 0) {
        return 0;               /* expired: lua-nginx-module's get sees none */
    }
    return 1;
}

#ifdef SHMLOCK_TESTING
static int  nd_test_probe_fails;

void
shmlock_test_ngx_dict_probe_fails(int on)
{
    nd_test_probe_fails = on;
}
#endif

int
shmlock_ngx_dict_probe(void *zone, const char *key, size_t key_len,
    double value, int flags, int64_t expires_in_ms, const char **why)
{
    nd_zone_t        *z = zone;
    nd_ctx_t         *ctx;
    nd_node_t        *sd = NULL;
    void             *mutex;
    int64_t           left = 0;
    int               rc, ok;

    *why = NULL;
#ifdef SHMLOCK_TESTING
    if (nd_test_probe_fails) {
        *why = "the test build's probe was told to fail";
        return -1;
    }
#endif
    if (!nd_symbols()) {
        *why = "nginx's functions are not in this process";
        return -1;
    }
    if (nd_open(z, &ctx, &mutex) != 0) {
        *why = "the dict's zone is not laid out as expected";
        return -1;
    }
    ngx.lock(mutex);
    rc = nd_find(z, ctx->sh, (const unsigned char *) key, key_len, &sd);
    ok = rc == 1 && nd_holds(z, sd, value, (uint32_t) flags);
    if (ok) {
        left = (int64_t) (sd->expires - nd_now_ms());
    }
    ngx.unlock(mutex);
    if (rc != 1) {
        *why = rc == 0 ? "the probe entry was not found"
                       : "a node of the dict lies outside its zone";
        return -1;
    }
    if (!ok) {
        *why = "the probe entry's value or flags are not where expected";
        return -1;
    }
    if (left > expires_in_ms + ND_SLACK_MS
        || left < expires_in_ms - ND_SLACK_MS)
    {
        *why = "the probe entry's expiry is not where expected";
        return -1;
    }
    return 0;
}

/* The new owner of a replace (replace_if), or NULL for a delete. */
typedef struct {
    double   value;
    int      flags;
    int64_t  exptime_ms;
} nd_new_t;

/* delete_if and replace_if: under the dict's mutex, if key holds the
 * number value with flags, unexpired, deletes it (repl NULL) or gives it
 * repl's owner in place, as lua-nginx-module's delete and replace of a
 * same-size value do: 1 changed, 0 not, -1 the zone did not pass the
 * checks (nothing changed) */
static int
nd_change_if(void *zone, const char *key, size_t key_len, double value,
    int flags, const nd_new_t *repl)
{
    nd_zone_t    *z = zone;
    nd_ctx_t     *ctx;
    nd_node_t    *sd = NULL;
    nd_queue_t   *lru;
    nd_rbnode_t  *node;
    void         *mutex;
    int           rc;

    if (!nd_symbols() || nd_open(z, &ctx, &mutex) != 0) {
        return -1;
    }
    ngx.lock(mutex);
    lru = &ctx->sh->lru;
    rc = nd_find(z, ctx->sh, (const unsigned char *) key, key_len, &sd);
    if (rc == 1) {
        if (!nd_inside(z, sd->queue.prev, sizeof(nd_queue_t))
            || !nd_inside(z, sd->queue.next, sizeof(nd_queue_t))
            || (repl != NULL && !nd_inside(z, lru->next, sizeof(nd_queue_t))))
        {
            rc = -1;
        } else if (!nd_holds(z, sd, value, (uint32_t) flags)) {
            rc = 0;
        } else {
            /* out of the LRU queue */
            sd->queue.next->prev = sd->queue.prev;
            sd->queue.prev->next = sd->queue.next;
            if (repl == NULL) {
                /* out of the tree, back to the slab */
                node = (nd_rbnode_t *) ((unsigned char *) sd
                                        - offsetof(nd_rbnode_t, color));
                ngx.tree_delete(&ctx->sh->rbtree, node);
                ngx.slab_free(ctx->shpool, node);
            } else {
                /* to the head of the LRU queue, rewritten in place */
                sd->queue.next = lru->next;
                sd->queue.next->prev = &sd->queue;
                sd->queue.prev = lru;
                lru->next = &sd->queue;
                sd->expires = repl->exptime_ms > 0
                              ? nd_now_ms() + (uint64_t) repl->exptime_ms : 0;
                sd->user_flags = (uint32_t) repl->flags;
                memcpy(sd->data + sd->key_len, &repl->value, sizeof(double));
            }
        }
    }
    ngx.unlock(mutex);
    return rc;
}

int
shmlock_ngx_dict_delete_if(void *zone, const char *key, size_t key_len,
    double value, int flags)
{
    return nd_change_if(zone, key, key_len, value, flags, NULL);
}

int
shmlock_ngx_dict_replace_if(void *zone, const char *key, size_t key_len,
    double value, int flags, double new_value, int new_flags,
    int64_t exptime_ms)
{
    nd_new_t  repl = { new_value, new_flags, exptime_ms };

    return nd_change_if(zone, key, key_len, value, flags, &repl);
}
