/*
 * The dictionary's hot methods under PUC Lua (issue 33): get, get_stale
 * and the stores (set, safe_set, add, safe_add, replace, delete) as C
 * functions put into resty.shmlock.shdict's methods table, each one call
 * of the core, with ngx.shared.DICT's arguments, returns and messages as
 * resty.shmlock.shdict's (the FFI's; resty.shmlock.shdict.args checks
 * them alike).  The other methods stay resty.shmlock.shdict.capi's.
 *
 * A dict object is a table: its zone's userdata at index 1 (and as
 * `_zone`), its name.  The upvalues: the key normaliser (a key that is not
 * a string: resty.shmlock.internal.key), the report of shard recoveries
 * (resty.shmlock.internal.log), called only when the core's counter moved.
 */
#include <string.h>

#include "core.h"

#define DM_BUF            4096
#define DM_MAX_SECONDS    1e12

#define DM_KEY_CHECK      lua_upvalueindex(1)
#define DM_RECOVERED      lua_upvalueindex(2)

static const volatile uint32_t *dm_recoveries;
static uint32_t dm_recoveries_seen;

/* self's zone (its table's index 1), or an error at the caller's line */
static shmlock_zone_t *dm_zone(lua_State *L)
{
    shmlock_zone_t *zone = NULL;

    if (lua_type(L, 1) == LUA_TTABLE) {
        lua_rawgeti(L, 1, 1);
        zone = core_zone_at(L, -1);
        lua_pop(L, 1);
    }
    if (zone == NULL) {
        luaL_error(L, "bad \"zone\" argument");
    }
    return zone;
}

/* The key at 2 as a zone keeps it (a number or other value made one by
 * the normaliser, into index 2); NULL and the message otherwise. */
static const char *dm_key(lua_State *L, size_t *len, const char **err)
{
    const char *key;

    if (lua_type(L, 2) != LUA_TSTRING) {
        lua_pushvalue(L, DM_KEY_CHECK);
        lua_pushvalue(L, 2);
        lua_call(L, 1, 2);
        if (lua_isnil(L, -2)) {
            *err = lua_tostring(L, -1);
            return NULL;
        }
        lua_pop(L, 1);
        lua_replace(L, 2);
    }
    key = lua_tolstring(L, 2, len);
    if (*len == 0) {
        *err = "empty key";
        return NULL;
    }
    if (*len > SHMLOCK_KEY_MAX) {
        *err = "key too long";
        return NULL;
    }
    return key;
}

static int dm_fail(lua_State *L, const char *msg)
{
    lua_pushnil(L);
    lua_pushstring(L, msg);
    return 2;
}

/* after a change: shard recoveries this process ran since, reported */
static void dm_report(lua_State *L)
{
    uint32_t n = *dm_recoveries;

    if (n != dm_recoveries_seen) {
        dm_recoveries_seen = n;
        lua_pushvalue(L, DM_RECOVERED);
        lua_getfield(L, 1, "name");
        lua_call(L, 1, 0);
    }
}

/* get (stale 0) and get_stale (1) */
static int dm_read(lua_State *L, int stale)
{
    shmlock_zone_t *zone = dm_zone(L);
    char first[DM_BUF], *buf = first;
    const char *key, *err = NULL;
    size_t klen, size = DM_BUF;
    shmlock_value_t v;
    int rc, i;

    key = dm_key(L, &klen, &err);
    if (key == NULL) {
        return dm_fail(L, err);
    }
    memset(&v, 0, sizeof(v));
    rc = shmlock_dict_get(zone, key, klen, stale, &v, buf, size);
    /* a string that does not fit: a buffer of its size, asked again
     * twice at most (it may grow between two calls) */
    for (i = 0; i < 2 && rc == SHMLOCK_AGAIN; i++) {
        size = v.len;
        buf = lua_newuserdata(L, size > 0 ? size : 1);
        rc = shmlock_dict_get(zone, key, klen, stale, &v, buf, size);
    }
    if (rc != SHMLOCK_OK) {
        return dm_fail(L, shmlock_strerror(rc));
    }
    switch (v.type) {
    case SHMLOCK_TNIL:
        lua_pushnil(L);
        return 1;
    case SHMLOCK_TLIST:
        return dm_fail(L, "value is a list");
    case SHMLOCK_TSTRING:
        lua_pushlstring(L, buf, v.len);
        break;
    case SHMLOCK_TNUMBER:
        core_push_number(L, v.num);
        break;
    default:
        lua_pushboolean(L, v.num != 0);
    }
    if (stale) {
        if (v.flags != 0) {
            core_push_number(L, v.flags);
        } else {
            lua_pushnil(L);
        }
        lua_pushboolean(L, v.stale == 1);
        return 3;
    }
    if (v.flags != 0) {
        core_push_number(L, v.flags);
        return 2;
    }
    return 1;
}

static int dm_get(lua_State *L)
{
    return dm_read(L, 0);
}

static int dm_get_stale(lua_State *L)
{
    return dm_read(L, 1);
}

/* a store of op: (self, key, value, exptime, flags) */
static int dm_store(lua_State *L, int op, int nargs)
{
    shmlock_zone_t *zone = dm_zone(L);
    const char *key, *err = NULL;
    size_t klen;
    shmlock_value_t v;
    int64_t exptime = 0;
    double e;
    int forcible = 0, rc, t;

    if (nargs > 3 && lua_toboolean(L, 4)) {
        e = lua_type(L, 4) == LUA_TNUMBER ? (double) lua_tonumber(L, 4) : -1;
        if (!(e >= 0 && e <= DM_MAX_SECONDS)) {
            return luaL_error(L, "bad \"exptime\" argument");
        }
        /* whole ms, rounded; a positive one never 0 (never expires) */
        exptime = (int64_t) (e * 1000 + 0.5);
        if (exptime == 0 && e > 0) {
            exptime = 1;
        }
    }
    t = nargs > 4 ? lua_type(L, 5) : LUA_TNONE;
    if (t > LUA_TNIL && t != LUA_TNUMBER) {
        return luaL_error(L, "bad \"flags\" argument");
    }
    key = dm_key(L, &klen, &err);
    if (key == NULL) {
        return dm_fail(L, err);
    }
    if (nargs < 3 || !core_to_value(L, 3, &v)) {
        if (nargs >= 3) {
            return dm_fail(L, "bad value type");
        }
        memset(&v, 0, sizeof(v));
        v.type = SHMLOCK_TNIL;
    }
    if (v.type == SHMLOCK_TNIL && (op & (SHMLOCK_OP_ADD | SHMLOCK_OP_REPLACE)))
    {
        lua_pushboolean(L, 0);
        lua_pushliteral(L, "attempt to add or replace nil values");
        lua_pushboolean(L, 0);
        return 3;
    }
    v.flags = t == LUA_TNUMBER
              ? (uint32_t) core_optrange(L, 5, 0, CORE_2_32, 0) : 0;
    rc = shmlock_dict_store(zone, op, key, klen, &v, exptime, &forcible);
    dm_report(L);
    if (rc == SHMLOCK_OK) {
        lua_pushboolean(L, 1);
        lua_pushnil(L);
    } else {
        lua_pushboolean(L, 0);
        lua_pushstring(L, shmlock_strerror(rc));
    }
    lua_pushboolean(L, forcible == 1);
    return 3;
}

static int dm_set(lua_State *L)
{
    return dm_store(L, SHMLOCK_OP_SET, lua_gettop(L));
}

static int dm_safe_set(lua_State *L)
{
    return dm_store(L, SHMLOCK_OP_SET | SHMLOCK_OP_SAFE, lua_gettop(L));
}

static int dm_add(lua_State *L)
{
    return dm_store(L, SHMLOCK_OP_ADD, lua_gettop(L));
}

static int dm_safe_add(lua_State *L)
{
    return dm_store(L, SHMLOCK_OP_ADD | SHMLOCK_OP_SAFE, lua_gettop(L));
}

static int dm_replace(lua_State *L)
{
    return dm_store(L, SHMLOCK_OP_REPLACE, lua_gettop(L));
}

/* delete(key): set(key, nil) */
static int dm_delete(lua_State *L)
{
    lua_settop(L, 2);
    return dm_store(L, SHMLOCK_OP_SET, 2);
}

static const luaL_Reg DM_METHODS[] = {
    { "get", dm_get },
    { "get_stale", dm_get_stale },
    { "set", dm_set },
    { "safe_set", dm_safe_set },
    { "add", dm_add },
    { "safe_add", dm_safe_add },
    { "replace", dm_replace },
    { "delete", dm_delete },
    { NULL, NULL }
};

/* core.dict_class(methods, key_check, recovered): the hot methods put
 * into the dict objects' methods table */
static int dict_class(lua_State *L)
{
    const luaL_Reg *m;

    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    luaL_checktype(L, 3, LUA_TFUNCTION);
    for (m = DM_METHODS; m->name != NULL; m++) {
        lua_pushvalue(L, 2);
        lua_pushvalue(L, 3);
        lua_pushcclosure(L, m->func, 2);
        lua_setfield(L, 1, m->name);
    }
    dm_recoveries = shmlock_recoveries();
    dm_recoveries_seen = *dm_recoveries;
    return 0;
}

const luaL_Reg core_dict_methods_funcs[] = {
    { "dict_class", dict_class },
    { NULL, NULL }
};
