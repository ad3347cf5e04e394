/*
 * Zones: open (shmlock_zone_open2, its options and findings as tables),
 * destroy, the name check, and the calls on an open zone that are not the
 * dictionary's: liveness, shards, generation words, waits on a key.
 */
#include <errno.h>
#include <string.h>

#include "core.h"

typedef struct {
    shmlock_zone_t *zone;           /* NULL once closed */
} zone_box_t;

/* the zones' metatable, as lua_topointer names it (made with the first
 * zone userdata): core_zone_at compares with it */
static const void *zone_mt;

shmlock_zone_t *core_zone_at(lua_State *L, int i)
{
    zone_box_t *box = lua_touserdata(L, i);

    if (box == NULL || !lua_getmetatable(L, i)) {
        return NULL;
    }
    if (lua_topointer(L, -1) != zone_mt) {
        lua_pop(L, 1);
        return NULL;
    }
    lua_pop(L, 1);
    return box->zone;
}

shmlock_zone_t *core_zone(lua_State *L, int i)
{
    zone_box_t *box = luaL_checkudata(L, i, CORE_ZONE_MT);
    if (box->zone == NULL) {
        luaL_argerror(L, i, "closed zone");
    }
    return box->zone;
}

static int zone_gc(lua_State *L)
{
    zone_box_t *box = luaL_checkudata(L, 1, CORE_ZONE_MT);
    if (box->zone != NULL) {
        shmlock_zone_close(box->zone);
        box->zone = NULL;
    }
    return 0;
}

static int zone_tostring(lua_State *L)
{
    zone_box_t *box = luaL_checkudata(L, 1, CORE_ZONE_MT);
    lua_pushfstring(L, "shmlock zone: %p", (void *) box->zone);
    return 1;
}

void core_push_zone(lua_State *L, shmlock_zone_t *zone)
{
    zone_box_t *box = lua_newuserdata(L, sizeof(*box));
    box->zone = zone;
    if (luaL_newmetatable(L, CORE_ZONE_MT)) {
        zone_mt = lua_topointer(L, -1);
        lua_pushcfunction(L, zone_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, zone_tostring);
        lua_setfield(L, -2, "__tostring");
        lua_pushliteral(L, "shmlock zone");
        lua_setfield(L, -2, "__metatable");
    }
    lua_setmetatable(L, -2);
}

/* t[field] (t: argument 1) as a number from lo to below hi (as
 * core_range), or def when absent */
static double field_num(lua_State *L, int t, const char *field, double lo,
    double hi, double def)
{
    double d = def;
    lua_getfield(L, t, field);
    if (!lua_isnil(L, -1)) {
        if (!lua_isnumber(L, -1)) {
            lua_pushfstring(L, "field '%s': number expected", field);
            luaL_argerror(L, 1, lua_tostring(L, -1));
        }
        d = (double) lua_tonumber(L, -1);
        if (!(d >= lo && d < hi)) {
            lua_pushfstring(L, "field '%s': number out of range: %f", field,
                            (lua_Number) d);
            luaL_argerror(L, 1, lua_tostring(L, -1));
        }
    }
    lua_pop(L, 1);
    return d;
}

/* t[field] (t: argument 1) as a string, or NULL when absent; stays on
 * the stack.  The directory is a C string: a NUL byte in it raises (the
 * system would see a shorter path, another directory). */
static const char *field_str(lua_State *L, int t, const char *field,
    size_t *len, int cstr)
{
    const char *s;

    lua_getfield(L, t, field);
    if (lua_isnil(L, -1)) {
        *len = 0;
        return NULL;
    }
    if (lua_type(L, -1) != LUA_TSTRING) {
        lua_pushfstring(L, "field '%s': string expected", field);
        luaL_argerror(L, 1, lua_tostring(L, -1));
    }
    s = lua_tolstring(L, -1, len);
    if (cstr && memchr(s, '\0', *len) != NULL) {
        lua_pushfstring(L, "field '%s': string with a NUL byte", field);
        luaL_argerror(L, 1, lua_tostring(L, -1));
    }
    return s;
}

#define SET(t, field, value) \
    (core_push_number(L, (double) (value)), lua_setfield(L, t, field))

/*
 * zone, created = core.zone_open{ dir=, name=, size=, shards=, mode=,
 *     group=, owner_uid=, owner_gid= }
 * nil, rc, found = ... on failure; found: what open2 found (file_mode,
 * file_uid, file_gid, file_layout, zone_size, owner_uid, group) and errno.
 */
static int zone_open(lua_State *L)
{
    shmlock_open_t o;
    shmlock_zone_t *zone = NULL;
    size_t len;
    int rc, err;

    luaL_checktype(L, 1, LUA_TTABLE);
    memset(&o, 0, sizeof(o));
    o.dir = field_str(L, 1, "dir", &len, 1);
    o.name = field_str(L, 1, "name", &o.name_len, 0);
    if (o.name == NULL) {
        return luaL_argerror(L, 1, "no name");
    }
    o.size = (size_t) field_num(L, 1, "size", 0, CORE_2_63, 0);
    o.shards = (unsigned) field_num(L, 1, "shards", 0, CORE_2_32, 0);
    o.mode = (unsigned) field_num(L, 1, "mode", 0, CORE_2_32, 0);
    o.group = (int64_t) field_num(L, 1, "group", -CORE_2_63, CORE_2_63, -1);
    o.owner_uid = (int64_t) field_num(L, 1, "owner_uid", -CORE_2_63,
                                      CORE_2_63, 0);
    o.owner_gid = (int64_t) field_num(L, 1, "owner_gid", -CORE_2_63,
                                      CORE_2_63, -1);

    errno = 0;
    rc = shmlock_zone_open2(&o, &zone);
    err = shmlock_errno();
    if (rc == SHMLOCK_OK) {
        core_push_zone(L, zone);
        lua_pushboolean(L, o.created);
        return 2;
    }
    lua_pushnil(L);
    core_push_number(L, rc);
    lua_newtable(L);
    SET(-2, "file_mode", o.file_mode);
    SET(-2, "file_uid", o.file_uid);
    SET(-2, "file_gid", o.file_gid);
    SET(-2, "file_layout", o.file_layout);
    SET(-2, "zone_size", o.zone_size);
    SET(-2, "owner_uid", o.owner_uid);
    SET(-2, "group", o.group);
    SET(-2, "errno", err);
    return 3;
}

/* rc, errno = core.zone_destroy(dir|nil, name) */
static int zone_destroy(lua_State *L)
{
    size_t len;
    const char *dir = core_cstr(L, 1, 1);
    const char *name = luaL_checklstring(L, 2, &len);
    int rc = shmlock_zone_destroy(dir, name, len);
    core_push_number(L, rc);
    core_push_number(L, shmlock_errno());
    return 2;
}

/* ok = core.zone_name_ok(name) */
static int zone_name_ok(lua_State *L)
{
    size_t len;
    const char *name = luaL_checklstring(L, 1, &len);
    lua_pushboolean(L, shmlock_zone_name_ok(name, len) == 1);
    return 1;
}

/* dead = core.zone_dead(zone) */
static int zone_dead(lua_State *L)
{
    lua_pushboolean(L, shmlock_zone_dead(core_zone(L, 1)) != 0);
    return 1;
}

static int zone_shards(lua_State *L)
{
    core_push_number(L, shmlock_zone_shards(core_zone(L, 1)));
    return 1;
}

/* new = core.zone_gen_add(zone, i, delta): generation word i plus delta
 * (0: a read) */
static int zone_gen_add(lua_State *L)
{
    shmlock_zone_t *zone = core_zone(L, 1);
    uint32_t i = core_u32(L, 2);
    /* (a negative delta counts down) */
    uint32_t delta = (uint32_t) (int64_t) core_range(L, 3, -CORE_2_32,
                                                     CORE_2_32);
    if (i >= SHMLOCK_GEN_WORDS) {
        return luaL_argerror(L, 2, "no such generation word");
    }
    core_push_number(L, shmlock_zone_gen_add(zone, i, delta));
    return 1;
}

/* seq = core.wait_begin(zone, hash) */
static int wait_begin(lua_State *L)
{
    shmlock_zone_t *zone = core_zone(L, 1);
    core_push_number(L, shmlock_wait_begin(zone, core_u32(L, 2)));
    return 1;
}

/* rc = core.wait_end(zone, hash, seq, timeout_us) */
static int wait_end(lua_State *L)
{
    shmlock_zone_t *zone = core_zone(L, 1);
    uint32_t hash = core_u32(L, 2);
    uint32_t seq = core_u32(L, 3);
    core_push_number(L, shmlock_wait_end(zone, hash, seq, core_i64(L, 4)));
    return 1;
}

/* wake_waiters(zone, hash, all): all (a boolean, or 0/1) wakes every
 * sleeper of the word, not one of the key's */
static int wake_waiters(lua_State *L)
{
    int  all = lua_isnumber(L, 3) ? lua_tonumber(L, 3) != 0
                                  : lua_toboolean(L, 3);

    shmlock_zone_t *zone = core_zone(L, 1);
    shmlock_wake_waiters(zone, core_u32(L, 2), all);
    return 0;
}

static int wait_count(lua_State *L)
{
    shmlock_zone_t *zone = core_zone(L, 1);
    core_push_number(L, shmlock_wait_count(zone, core_u32(L, 2)));
    return 1;
}

const luaL_Reg core_zone_funcs[] = {
    { "zone_open", zone_open },
    { "zone_destroy", zone_destroy },
    { "zone_name_ok", zone_name_ok },
    { "zone_dead", zone_dead },
    { "zone_shards", zone_shards },
    { "zone_gen_add", zone_gen_add },
    { "wait_begin", wait_begin },
    { "wait_end", wait_end },
    { "wake_waiters", wake_waiters },
    { "wait_count", wait_count },
    { NULL, NULL }
};
