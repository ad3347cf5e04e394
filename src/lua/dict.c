/*
 * The dictionary: ngx.shared.DICT's operations on an open zone.  The Lua
 * side (resty.shmlock.shdict.capi) checks arguments and makes the
 * messages; each function here is one call of the core (strings that do
 * not fit the first buffer: a larger one, asked again twice at most, as
 * the FFI side does).
 */
#include <string.h>

#include "core.h"

#define BUF_SIZE 4096

static int64_t ms_arg(lua_State *L, int i)
{
    return core_opti64(L, i, 0);
}

/* a bigger buffer, owned by the Lua state (collected with the call's
 * stack, whatever raises) */
static char *grow(lua_State *L, size_t size)
{
    return lua_newuserdata(L, size > 0 ? size : 1);
}

/* the answer of a call with one number out: rc, n */
static int push_rc_number(lua_State *L, int rc, double n)
{
    core_push_number(L, rc);
    core_push_number(L, n);
    return 2;
}

/* the answer of a store: rc, forcible */
static int push_rc_forcible(lua_State *L, int rc, int forcible)
{
    core_push_number(L, rc);
    lua_pushboolean(L, forcible == 1);
    return 2;
}

/* a read of one value: a get (arg: get_stale) or a pop (arg: the side) */
typedef struct {
    shmlock_zone_t  *zone;
    const char      *key;
    size_t           klen;
    int              arg;
    int              pop;
} dict_read_t;

static int read_once(const dict_read_t *r, shmlock_value_t *v, char *buf,
                     size_t size)
{
    if (r->pop) {
        return shmlock_dict_pop(r->zone, r->arg, r->key, r->klen, v, buf,
                                size);
    }
    return shmlock_dict_get(r->zone, r->key, r->klen, r->arg, v, buf, size);
}

/* r's value into v, its string (v->str) in first (BUF_SIZE bytes) or, when
 * it does not fit (AGAIN, nothing popped), in a buffer of its size, asked
 * again twice at most (the value may grow between two calls); the rc */
static int read_value(lua_State *L, const dict_read_t *r, shmlock_value_t *v,
                      char *first)
{
    char *buf = first;
    size_t size = BUF_SIZE;
    int rc, i;

    memset(v, 0, sizeof(*v));
    rc = read_once(r, v, buf, size);
    for (i = 0; i < 2 && rc == SHMLOCK_AGAIN; i++) {
        size = v->len;
        buf = grow(L, size);
        rc = read_once(r, v, buf, size);
    }
    v->str = buf;
    return rc;
}

/* rc, forcible = core.dict_store(zone, op, key, value, flags, exptime_ms
 *                                [, word, mask, expect]) */
static int dict_store(lua_State *L)
{
    shmlock_zone_t *zone = core_zone(L, 1);
    int op = core_int(L, 2);
    size_t klen;
    const char *key = core_key(L, 3, &klen);
    shmlock_value_t v;
    int64_t exptime = ms_arg(L, 6);
    int forcible = 0, rc;

    if (!core_to_value(L, 4, &v)) {
        return luaL_argerror(L, 4, "bad value type");
    }
    v.flags = (uint32_t) core_optrange(L, 5, 0, CORE_2_32, 0);
    if (!lua_isnoneornil(L, 7)) {
        shmlock_gen_guard_t g;
        g.word = core_u32(L, 7);
        g.mask = core_u32(L, 8);
        g.value = core_u32(L, 9);
        rc = shmlock_dict_store_guarded(zone, op, key, klen, &v, exptime,
                                        &g, &forcible);
    } else {
        rc = shmlock_dict_store(zone, op, key, klen, &v, exptime, &forcible);
    }
    return push_rc_forcible(L, rc, forcible);
}

/* rc, type, value, flags, stale = core.dict_get(zone, key, get_stale) */
static int dict_get(lua_State *L)
{
    dict_read_t r;
    char first[BUF_SIZE];
    shmlock_value_t v;
    int rc;

    r.zone = core_zone(L, 1);
    r.key = core_key(L, 2, &r.klen);
    r.arg = lua_toboolean(L, 3);
    r.pop = 0;
    rc = read_value(L, &r, &v, first);
    core_push_number(L, rc);
    if (rc != SHMLOCK_OK) {
        return 1;
    }
    core_push_number(L, v.type);
    core_push_value(L, &v);
    core_push_number(L, v.flags);
    lua_pushboolean(L, v.stale == 1);
    return 5;
}

/* rc, value, forcible = core.dict_incr(zone, key, by, has_init, init,
 *                                      init_ttl_ms) */
static int dict_incr(lua_State *L)
{
    shmlock_zone_t *zone = core_zone(L, 1);
    size_t klen;
    const char *key = core_key(L, 2, &klen);
    double value = core_num(L, 3);
    int has_init = lua_toboolean(L, 4);
    double init = core_optnum(L, 5, 0);
    int forcible = 0;
    int rc = shmlock_dict_incr(zone, key, klen, &value, has_init, init,
                               ms_arg(L, 6), &forcible);
    push_rc_number(L, rc, value);
    lua_pushboolean(L, forcible == 1);
    return 3;
}

/* rc, ttl_ms = core.dict_ttl(zone, key) */
static int dict_ttl(lua_State *L)
{
    size_t klen;
    shmlock_zone_t *zone = core_zone(L, 1);
    const char *key = core_key(L, 2, &klen);
    int64_t ttl = 0;
    int rc = shmlock_dict_ttl(zone, key, klen, &ttl);
    return push_rc_number(L, rc, (double) ttl);
}

/* rc = core.dict_expire(zone, key, exptime_ms) */
static int dict_expire(lua_State *L)
{
    size_t klen;
    shmlock_zone_t *zone = core_zone(L, 1);
    const char *key = core_key(L, 2, &klen);
    core_push_number(L, shmlock_dict_expire(zone, key, klen, ms_arg(L, 3)));
    return 1;
}

/* rc, forcible = core.dict_cas(zone, key, old, new, flags, exptime_ms) */
static int dict_cas(lua_State *L)
{
    size_t klen;
    shmlock_zone_t *zone = core_zone(L, 1);
    const char *key = core_key(L, 2, &klen);
    shmlock_value_t old, v;
    int forcible = 0, rc;

    if (!core_to_value(L, 3, &old) || !core_to_value(L, 4, &v)) {
        return luaL_error(L, "bad value type");
    }
    v.flags = (uint32_t) core_optrange(L, 5, 0, CORE_2_32, 0);
    rc = shmlock_dict_cas(zone, key, klen, &old, &v, ms_arg(L, 6),
                          &forcible);
    return push_rc_forcible(L, rc, forcible);
}

/* rc = core.dict_cad(zone, key, old) */
static int dict_cad(lua_State *L)
{
    size_t klen;
    shmlock_zone_t *zone = core_zone(L, 1);
    const char *key = core_key(L, 2, &klen);
    shmlock_value_t old;

    if (!core_to_value(L, 3, &old)) {
        return luaL_argerror(L, 3, "bad value type");
    }
    core_push_number(L, shmlock_dict_cad(zone, key, klen, &old));
    return 1;
}

static int dict_flush_all(lua_State *L)
{
    core_push_number(L, shmlock_dict_flush_all(core_zone(L, 1)));
    return 1;
}

/* rc, freed = core.dict_flush_expired(zone, max_count) */
static int dict_flush_expired(lua_State *L)
{
    int freed = 0;
    shmlock_zone_t *zone = core_zone(L, 1);
    int max_count = (int) core_optrange(L, 2, -CORE_2_31, CORE_2_31, 0);
    int rc = shmlock_dict_flush_expired(zone, max_count, &freed);
    return push_rc_number(L, rc, freed);
}

/* rc, next_cursor, keys = core.dict_scan(zone, cursor, count): one step
 * of a walk; a bucket whose keys exceed the buffer doubles it at least */
static int dict_scan(lua_State *L)
{
    shmlock_zone_t *zone = core_zone(L, 1);
    uint64_t cursor = core_u64(L, 2);
    int count = core_int(L, 3);
    char first[BUF_SIZE];
    char *buf = first;
    size_t size = sizeof(first), used = 0, pos = 0;
    uint64_t next = 0;
    int keys = 0, rc, i;

    rc = shmlock_dict_scan(zone, cursor, count, buf, size, &next, &keys,
                           &used);
    while (rc == SHMLOCK_AGAIN) {
        size = used > 2 * size ? used : 2 * size;
        lua_settop(L, 3);                /* the older buffer may go */
        buf = grow(L, size);
        rc = shmlock_dict_scan(zone, cursor, count, buf, size, &next, &keys,
                               &used);
    }
    core_push_number(L, rc);
    if (rc != SHMLOCK_OK) {
        return 1;
    }
    core_push_number(L, (double) next);
    lua_createtable(L, keys, 0);
    for (i = 1; i <= keys; i++) {
        uint32_t len;
        memcpy(&len, buf + pos, 4);
        lua_pushlstring(L, buf + pos + 4, len);
        lua_rawseti(L, -2, i);
        pos += 4 + len;
    }
    return 3;
}

static int dict_capacity(lua_State *L)
{
    core_push_number(L, (double) shmlock_dict_capacity(core_zone(L, 1)));
    return 1;
}

static int dict_free_space(lua_State *L)
{
    core_push_number(L, (double) shmlock_dict_free_space(core_zone(L, 1)));
    return 1;
}

/* rc, len = core.dict_push(zone, side, key, value) */
static int dict_push(lua_State *L)
{
    shmlock_zone_t *zone = core_zone(L, 1);
    int side = core_int(L, 2);
    size_t klen;
    const char *key = core_key(L, 3, &klen);
    shmlock_value_t v;
    uint32_t len = 0;
    int rc;

    if (!core_to_value(L, 4, &v)) {
        return luaL_argerror(L, 4, "bad value type");
    }
    rc = shmlock_dict_push(zone, side, key, klen, &v, &len);
    return push_rc_number(L, rc, len);
}

/* rc, value = core.dict_pop(zone, side, key) */
static int dict_pop(lua_State *L)
{
    dict_read_t r;
    char first[BUF_SIZE];
    shmlock_value_t v;
    int rc;

    r.zone = core_zone(L, 1);
    r.arg = core_int(L, 2);
    r.key = core_key(L, 3, &r.klen);
    r.pop = 1;
    rc = read_value(L, &r, &v, first);
    core_push_number(L, rc);
    if (rc != SHMLOCK_OK) {
        return 1;
    }
    core_push_value(L, &v);
    return 2;
}

/* rc, len = core.dict_llen(zone, key) */
static int dict_llen(lua_State *L)
{
    size_t klen;
    shmlock_zone_t *zone = core_zone(L, 1);
    const char *key = core_key(L, 2, &klen);
    uint32_t len = 0;
    int rc = shmlock_dict_llen(zone, key, klen, &len);
    return push_rc_number(L, rc, len);
}

/* rc, msg = core.dict_verify(zone) */
static int dict_verify(lua_State *L)
{
    char msg[256];
    int rc;

    msg[0] = '\0';
    rc = shmlock_dict_verify(core_zone(L, 1), msg, sizeof(msg));
    core_push_number(L, rc);
    lua_pushstring(L, msg);
    return 2;
}

/* rc, stats = core.dict_stats(zone, shard) */
static int dict_stats(lua_State *L)
{
    shmlock_stats_t s;
    int rc;

    memset(&s, 0, sizeof(s));
    rc = shmlock_dict_stats(core_zone(L, 1), core_int(L, 2), &s);
    core_push_number(L, rc);
    if (rc != SHMLOCK_OK) {
        return 1;
    }
    lua_createtable(L, 0, 11);
#define F(name) (core_push_number(L, (double) s.name), \
                 lua_setfield(L, -2, #name))
    F(capacity); F(free_space); F(entries); F(evictions); F(expired);
    F(spins); F(sleeps); F(takeovers); F(recoveries); F(slots);
    F(slots_used);
#undef F
    return 2;
}

const luaL_Reg core_dict_funcs[] = {
    { "dict_store", dict_store },
    { "dict_get", dict_get },
    { "dict_incr", dict_incr },
    { "dict_ttl", dict_ttl },
    { "dict_expire", dict_expire },
    { "dict_cas", dict_cas },
    { "dict_cad", dict_cad },
    { "dict_flush_all", dict_flush_all },
    { "dict_flush_expired", dict_flush_expired },
    { "dict_scan", dict_scan },
    { "dict_capacity", dict_capacity },
    { "dict_free_space", dict_free_space },
    { "dict_push", dict_push },
    { "dict_pop", dict_pop },
    { "dict_llen", dict_llen },
    { "dict_verify", dict_verify },
    { "dict_stats", dict_stats },
    { NULL, NULL }
};
