/*
 * What the Lua modules need besides zones and dictionaries: messages,
 * the clock and a sleep, this process and others, token blocks, users and
 * groups by id, the environment (resty.shmlock.testing's zone directory),
 * LuaJIT's `bit` operations (32-bit, signed results) and the
 * double <-> 8 bytes conversion of the cache's codec.
 */
#include <errno.h>
#include <grp.h>
#include <math.h>
#include <pwd.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core.h"

/* msg = core.strerror(rc): the core's message for a status */
static int core_strerror(lua_State *L)
{
    lua_pushstring(L, shmlock_strerror(core_int(L, 1)));
    return 1;
}

/* msg = core.sys_strerror(errno) */
static int sys_strerror(lua_State *L)
{
    lua_pushstring(L, strerror(core_int(L, 1)));
    return 1;
}

static int core_errno(lua_State *L)
{
    core_push_number(L, shmlock_errno());
    return 1;
}

/* n = core.recoveries(): the shard recoveries this process ran */
static int recoveries(lua_State *L)
{
    core_push_number(L, *shmlock_recoveries());
    return 1;
}

static int now_ms(lua_State *L)
{
    core_push_number(L, (double) shmlock_now_ms());
    return 1;
}

static int now_us(lua_State *L)
{
    core_push_number(L, (double) shmlock_now_us());
    return 1;
}

static int hash(lua_State *L)
{
    size_t len;
    const char *key = luaL_checklstring(L, 1, &len);
    core_push_number(L, shmlock_hash(key, len));
    return 1;
}

static int self_pid(lua_State *L)
{
    core_push_number(L, shmlock_self_pid());
    return 1;
}

static int proc_start(lua_State *L)
{
    core_push_number(L, (double) shmlock_proc_start(core_int(L, 1)));
    return 1;
}

static int proc_alive(lua_State *L)
{
    int pid = core_int(L, 1);
    uint64_t start = (uint64_t) core_optrange(L, 2, 0, CORE_2_64, 0);

    lua_pushboolean(L, shmlock_proc_alive(pid, start) == 1);
    return 1;
}

/* high, pid = core.token_block(): a fresh block's 13 high hex digits */
static int token_block(lua_State *L)
{
    char dst[32];
    int pid;

    memset(dst, 0, sizeof(dst));
    pid = shmlock_token_block(dst);
    lua_pushlstring(L, dst, 13);
    core_push_number(L, pid);
    return 2;
}

/* core.sleep(seconds): the whole time, whatever signals interrupt it
 * (none for seconds <= 0; NaN, +inf and more than the library's longest
 * time, 1e12 s, raise: no time_t holds some of them) */
static int core_sleep(lua_State *L)
{
    double s = core_num(L, 1);
    struct timespec req, rem;

    if (!(s <= 1e12)) {
        return luaL_argerror(L, 1, "seconds up to 1e12 expected");
    }
    if (!(s > 0)) {
        return 0;
    }
    req.tv_sec = (time_t) floor(s);
    req.tv_nsec = (long) ((s - floor(s)) * 1e9);
    while (nanosleep(&req, &rem) != 0 && errno == EINTR) {
        req = rem;
    }
    return 0;
}

/* ok = core.setenv(name, value): value nil unsets; false, errno on failure
 * (the zone directory the core reads, $SHMLOCK_DIR, for resty.shmlock.testing) */
static int core_setenv(lua_State *L)
{
    const char *name = core_cstr(L, 1, 0);
    const char *value = core_cstr(L, 2, 1);
    int rc = value == NULL ? unsetenv(name) : setenv(name, value, 1);
    if (rc != 0) {
        lua_pushboolean(L, 0);
        lua_pushnumber(L, (lua_Number) errno);
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* gid = core.getgrnam(name), or nil */
static int core_getgrnam(lua_State *L)
{
    struct group *gr = getgrnam(core_cstr(L, 1, 0));
    if (gr == NULL) {
        return 0;
    }
    core_push_number(L, gr->gr_gid);
    return 1;
}

/* name = core.getgrgid(gid), or nil */
static int core_getgrgid(lua_State *L)
{
    struct group *gr = getgrgid((gid_t) core_u32(L, 1));
    if (gr == NULL || gr->gr_name == NULL) {
        return 0;
    }
    lua_pushstring(L, gr->gr_name);
    return 1;
}

/* name = core.getpwuid(uid), or nil */
static int core_getpwuid(lua_State *L)
{
    struct passwd *pw = getpwuid((uid_t) core_u32(L, 1));
    if (pw == NULL || pw->pw_name == NULL) {
        return 0;
    }
    lua_pushstring(L, pw->pw_name);
    return 1;
}

/* ---- bit: LuaJIT's operations, on the low 32 bits, signed results ---- */

static uint32_t u32(lua_State *L, int i)
{
    double d = core_num(L, i);
    if (!isfinite(d)) {
        return 0;                             /* as LuaJIT: NaN, +-inf */
    }
    d = fmod(floor(d + 0.5), 4294967296.0);   /* as LuaJIT: rounds */
    if (d < 0) {
        d += 4294967296.0;
    }
    return (uint32_t) d;
}

static int push_bits(lua_State *L, uint32_t x)
{
    core_push_number(L, (double) (int32_t) x);
    return 1;
}

static int bit_tobit(lua_State *L) { return push_bits(L, u32(L, 1)); }
static int bit_bnot(lua_State *L) { return push_bits(L, ~u32(L, 1)); }

static int bit_band(lua_State *L)
{
    uint32_t x = u32(L, 1);
    int i, n = lua_gettop(L);
    for (i = 2; i <= n; i++) {
        x &= u32(L, i);
    }
    return push_bits(L, x);
}

static int bit_bor(lua_State *L)
{
    uint32_t x = u32(L, 1);
    int i, n = lua_gettop(L);
    for (i = 2; i <= n; i++) {
        x |= u32(L, i);
    }
    return push_bits(L, x);
}

static int bit_bxor(lua_State *L)
{
    uint32_t x = u32(L, 1);
    int i, n = lua_gettop(L);
    for (i = 2; i <= n; i++) {
        x ^= u32(L, i);
    }
    return push_bits(L, x);
}

static int bit_lshift(lua_State *L)
{
    return push_bits(L, u32(L, 1) << (u32(L, 2) & 31));
}

static int bit_rshift(lua_State *L)
{
    return push_bits(L, u32(L, 1) >> (u32(L, 2) & 31));
}

static int bit_arshift(lua_State *L)
{
    int32_t x = (int32_t) u32(L, 1);
    return push_bits(L, (uint32_t) (x >> (u32(L, 2) & 31)));
}

/* ---- doubles as 8 bytes (host order, as the FFI codec's ffi.copy) ---- */

/* s = core.pack_double(d) */
static int pack_double(lua_State *L)
{
    double d = core_num(L, 1);
    char b[8];
    memcpy(b, &d, 8);
    lua_pushlstring(L, b, 8);
    return 1;
}

/* d = core.unpack_double(s, pos): the 8 bytes at pos (1-based) */
static int unpack_double(lua_State *L)
{
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    double pos = core_optnum(L, 2, 1), d;
    if (!(pos >= 1) || pos + 7 > (double) len) {
        return luaL_argerror(L, 2, "out of the string");
    }
    memcpy(&d, s + (size_t) pos - 1, 8);
    lua_pushnumber(L, (lua_Number) d);
    return 1;
}

const luaL_Reg core_sys_funcs[] = {
    { "strerror", core_strerror },
    { "sys_strerror", sys_strerror },
    { "errno", core_errno },
    { "recoveries", recoveries },
    { "now_ms", now_ms },
    { "now_us", now_us },
    { "hash", hash },
    { "self_pid", self_pid },
    { "proc_start", proc_start },
    { "proc_alive", proc_alive },
    { "token_block", token_block },
    { "sleep", core_sleep },
    { "setenv", core_setenv },
    { "getgrnam", core_getgrnam },
    { "getgrgid", core_getgrgid },
    { "getpwuid", core_getpwuid },
    { "bit_tobit", bit_tobit },
    { "bit_bnot", bit_bnot },
    { "bit_band", bit_band },
    { "bit_bor", bit_bor },
    { "bit_bxor", bit_bxor },
    { "bit_lshift", bit_lshift },
    { "bit_rshift", bit_rshift },
    { "bit_arshift", bit_arshift },
    { "pack_double", pack_double },
    { "unpack_double", unpack_double },
    { NULL, NULL }
};
