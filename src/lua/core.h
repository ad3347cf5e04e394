/*
 * The C API binding (resty.shmlock.core): the core's ABI as a Lua C module,
 * for interpreters without LuaJIT's FFI (PUC Lua 5.1 to 5.4).  One source,
 * compiled once per Lua ABI (Makefile: build/lua5.X/resty/shmlock/core.so).
 * Each area of the ABI is one file with one luaL_Reg list, registered by
 * core.c; resty.shmlock.internal.core is the only Lua module that loads it.
 *
 * Conventions, so that the Lua side reads like the FFI side: a call answers
 * the core's status code first (0: SHMLOCK_OK), then its out-parameters;
 * keys and string values are Lua strings (embedded zeros kept); a zone is a
 * full userdata whose __gc closes it.
 */
#ifndef SHMLOCK_LUA_CORE_H
#define SHMLOCK_LUA_CORE_H

#include <lua.h>
#include <lauxlib.h>

#include "../shmlock.h"

#define CORE_ZONE_MT "resty.shmlock.core.zone"

/* the functions of one area, put into the module table */
extern const luaL_Reg core_zone_funcs[];
extern const luaL_Reg core_dict_funcs[];
extern const luaL_Reg core_sys_funcs[];
extern const luaL_Reg core_lock_funcs[];
extern const luaL_Reg core_lock_object_funcs[];
extern const luaL_Reg core_dict_methods_funcs[];

/* the zone at index i, raises on anything else or a closed one */
shmlock_zone_t *core_zone(lua_State *L, int i);
/* the zone at index i (a metatable pointer compare: the hot paths), NULL
 * for anything else or a closed one */
shmlock_zone_t *core_zone_at(lua_State *L, int i);
/* pushes a new zone userdata owning zone (one reference) */
void core_push_zone(lua_State *L, shmlock_zone_t *zone);

/* the value at index i into v (strings point into Lua's copy, valid
 * while it is on the stack); 0 for a type the core cannot store */
int core_to_value(lua_State *L, int i, shmlock_value_t *v);
/* pushes v's value (str: the bytes it names): string, number, boolean or
 * nil; numbers as core_push_number */
void core_push_value(lua_State *L, const shmlock_value_t *v);
/*
 * A number the core holds (a double, as ngx.shared.DICT's): under Lua
 * 5.3+, an integer when it is a whole number of at most 2^53 in size,
 * else a float; before 5.3 there is one number type.
 */
void core_push_number(lua_State *L, double d);

/* the string at index i (raises for anything else, numbers included),
 * and its length */
const char *core_key(lua_State *L, int i, size_t *len);

/* lua_Integer-free checks that read the same in every Lua version */
double core_num(lua_State *L, int i);
double core_optnum(lua_State *L, int i, double def);

/*
 * Arguments bound for an integer type of the core.  A double outside the
 * type's range (NaN, an infinity, 2^63 for an int64_t) has no value
 * there: the cast is undefined, and on x86 gives the type's minimum (a
 * negative length, count or index).  So a number is checked first:
 * lo <= n < hi, else it raises "bad argument #i to 'f' (number out of
 * range: n)".  The limits are powers of two, exact as doubles.
 */
#define CORE_2_31 2147483648.0
#define CORE_2_32 4294967296.0
#define CORE_2_63 9223372036854775808.0
#define CORE_2_64 18446744073709551616.0

double core_range(lua_State *L, int i, double lo, double hi);
double core_optrange(lua_State *L, int i, double lo, double hi, double def);
/* the number at i as the core's int, uint32_t, int64_t and uint64_t */
int core_int(lua_State *L, int i);
uint32_t core_u32(lua_State *L, int i);
int64_t core_i64(lua_State *L, int i);
int64_t core_opti64(lua_State *L, int i, int64_t def);
uint64_t core_u64(lua_State *L, int i);
/* the string at i for a C string (a path, a name): one with a NUL byte
 * raises, where C would read a shorter one (another directory, say);
 * NULL for none when opt */
const char *core_cstr(lua_State *L, int i, int opt);

#if LUA_VERSION_NUM < 502
#define core_rawlen(L, i) lua_objlen(L, i)
#else
#define core_rawlen(L, i) lua_rawlen(L, i)
#endif

#endif
