/*
 * luaopen_resty_shmlock_core: the module table, every area's functions
 * (core.h) and the core's constants, named as in shmlock.h without the
 * SHMLOCK_ prefix (core.K.NOT_FOUND).  A new area is one
 * more file with one more luaL_Reg list, added to AREAS below.
 */
#include <math.h>
#include <string.h>

#include "core.h"

static const luaL_Reg *const AREAS[] = {
    core_zone_funcs, core_dict_funcs, core_sys_funcs, core_lock_funcs,
    core_lock_object_funcs, core_dict_methods_funcs, NULL,
};

#define K(name) { #name, SHMLOCK_##name }

static const struct { const char *name; double value; } CONSTANTS[] = {
    K(OK), K(NOT_FOUND), K(EXISTS), K(NO_MEMORY), K(NOT_A_NUMBER),
    K(CHANGED), K(BAD_NAME), K(BAD_SIZE), K(INCOMPATIBLE), K(SYSTEM),
    K(CORRUPT), K(BUSY), K(AGAIN), K(TIMEOUT), K(VALUE_TOO_LARGE),
    K(BAD_KEY), K(BAD_VALUE), K(BAD_SHARDS), K(DESTROYED), K(NOT_OWNER),
    K(UNSAFE_MODE), K(FOREIGN_NS), K(DIR_BUSY), K(BAD_MODE), K(NOT_A_LIST),
    K(FOREIGN_TIME), K(REMOVED), K(ASK),
    K(TNIL), K(TBOOLEAN), K(TNUMBER), K(TSTRING), K(TLIST),
    K(OP_SET), K(OP_ADD), K(OP_REPLACE), K(OP_SAFE),
    K(NAME_MAX), K(KEEP_TTL), K(KEY_MAX), K(MIN_SIZE), K(GEN_WORDS),
    K(LAYOUT), K(WATCH_MS), K(LEFT), K(RIGHT),
    K(SLOT_MARKED), K(SLOT_EXPIRY_SHIFT), K(OWNER_IDS),
    K(SEMAPHORE), K(SHARED), K(GROUP_MAX),
    K(SLOT_LOCK), K(SLOT_SHARED), K(SLOT_PERMIT), K(SLOT_SEMAPHORE),
    K(LOOK_CHECK), K(LOOK_ASK), K(LOOK_HERE), K(LOOK_SHARED),
    { NULL, 0 }
};

static void set_funcs(lua_State *L, const luaL_Reg *f)
{
    for (; f->name != NULL; f++) {
        lua_pushcfunction(L, f->func);
        lua_setfield(L, -2, f->name);
    }
}

int luaopen_resty_shmlock_core(lua_State *L);

SHMLOCK_API int luaopen_resty_shmlock_core(lua_State *L)
{
    int i;

    lua_newtable(L);
    for (i = 0; AREAS[i] != NULL; i++) {
        set_funcs(L, AREAS[i]);
    }

    lua_newtable(L);
    for (i = 0; CONSTANTS[i].name != NULL; i++) {
        core_push_number(L, CONSTANTS[i].value);
        lua_setfield(L, -2, CONSTANTS[i].name);
    }
    lua_setfield(L, -2, "K");

    lua_pushstring(L, LUA_VERSION);
    lua_setfield(L, -2, "lua_version");
    return 1;
}

/* ---- helpers shared by the areas (core.h) ---- */

const char *core_key(lua_State *L, int i, size_t *len)
{
    /* a string only: a number here would become lua_tolstring's text of
     * it, which differs between 5.1 ("1024") and 5.4 ("1024.0"); the Lua
     * layer gives every key as resty.shmlock.internal.key made it */
    luaL_checktype(L, i, LUA_TSTRING);
    return lua_tolstring(L, i, len);
}

double core_num(lua_State *L, int i)
{
    return (double) luaL_checknumber(L, i);
}

double core_optnum(lua_State *L, int i, double def)
{
    return lua_isnoneornil(L, i) ? def : (double) luaL_checknumber(L, i);
}

double core_range(lua_State *L, int i, double lo, double hi)
{
    double d = (double) luaL_checknumber(L, i);

    if (!(d >= lo && d < hi)) {
        lua_pushfstring(L, "number out of range: %f", (lua_Number) d);
        luaL_argerror(L, i, lua_tostring(L, -1));
    }
    return d;
}

double core_optrange(lua_State *L, int i, double lo, double hi, double def)
{
    return lua_isnoneornil(L, i) ? def : core_range(L, i, lo, hi);
}

int core_int(lua_State *L, int i)
{
    return (int) core_range(L, i, -CORE_2_31, CORE_2_31);
}

uint32_t core_u32(lua_State *L, int i)
{
    return (uint32_t) core_range(L, i, 0, CORE_2_32);
}

int64_t core_i64(lua_State *L, int i)
{
    return (int64_t) core_range(L, i, -CORE_2_63, CORE_2_63);
}

int64_t core_opti64(lua_State *L, int i, int64_t def)
{
    return lua_isnoneornil(L, i) ? def : core_i64(L, i);
}

uint64_t core_u64(lua_State *L, int i)
{
    return (uint64_t) core_range(L, i, 0, CORE_2_64);
}

const char *core_cstr(lua_State *L, int i, int opt)
{
    size_t len;
    const char *s;

    if (opt && lua_isnoneornil(L, i)) {
        return NULL;
    }
    s = luaL_checklstring(L, i, &len);
    if (memchr(s, '\0', len) != NULL) {
        luaL_argerror(L, i, "string with a NUL byte");
    }
    return s;
}

void core_push_number(lua_State *L, double d)
{
#if LUA_VERSION_NUM >= 503
    if (d == floor(d) && fabs(d) <= 9007199254740992.0) {
        lua_pushinteger(L, (lua_Integer) d);
        return;
    }
#endif
    lua_pushnumber(L, (lua_Number) d);
}

int core_to_value(lua_State *L, int i, shmlock_value_t *v)
{
    memset(v, 0, sizeof(*v));
    switch (lua_type(L, i)) {
    case LUA_TSTRING:
        v->type = SHMLOCK_TSTRING;
        v->str = lua_tolstring(L, i, &v->len);
        return 1;
    case LUA_TNUMBER:
        v->type = SHMLOCK_TNUMBER;
        v->num = (double) lua_tonumber(L, i);
        return 1;
    case LUA_TBOOLEAN:
        v->type = SHMLOCK_TBOOLEAN;
        v->num = lua_toboolean(L, i) ? 1 : 0;
        return 1;
    case LUA_TNIL:
    case LUA_TNONE:
        v->type = SHMLOCK_TNIL;
        return 1;
    default:
        return 0;
    }
}

void core_push_value(lua_State *L, const shmlock_value_t *v)
{
    switch (v->type) {
    case SHMLOCK_TSTRING:
        lua_pushlstring(L, v->str, v->len);
        break;
    case SHMLOCK_TNUMBER:
        core_push_number(L, v->num);
        break;
    case SHMLOCK_TBOOLEAN:
        lua_pushboolean(L, v->num != 0);
        break;
    default:
        lua_pushnil(L);
    }
}
