/*
 * The lock object of resty.shmlock under PUC Lua (issue 33): a userdata
 * whose methods are C functions, each one call of the core (the
 * exclusive lock, src/shmlock_lock.c; shared holds, src/shmlock_shared.c;
 * the wait outside nginx in one call), with resty.lock's returns and
 * error strings.  Under LuaJIT the lock object is resty.shmlock's Lua
 * table over the FFI; PUC Lua runs outside nginx only, so there is no
 * phase to ask and no ngx.shared dict.
 *
 * The metatable is each method's first upvalue: a method checks its self
 * with one pointer compare (luaL_checkudata would look the name up in
 * the registry on every call).  Its __index is the module resty.shmlock
 * itself, into which lock_class puts the methods, so that objects see the
 * module's functions as the Lua objects do.  The other upvalues are Lua
 * functions of the module for the rare paths: the key normaliser (a key
 * that is not a string: resty.shmlock.internal.key), the report of a dead
 * holder taken over, the report of shard recoveries.
 *
 * The object holds one thing at a time, an exclusive lock or a shared
 * hold, in its record (shmlock_lock_t: its zone, which it keeps mapped,
 * the ticket, the owner id, the pid that took it, held); a shared hold
 * keeps a copy of its key (its group's calls need it).  A copy of the
 * object in a forked child holds nothing there (the record's pid is the
 * parent's).  A collected object releases what it holds.
 */
#include <stdlib.h>
#include <string.h>

#include "core.h"

#define LOBJ_MAX_SECONDS  1e12

typedef struct {
    shmlock_lock_t  lk;
    double          exptime;        /* seconds (0: never expires) */
    int64_t         exptime_ms;
    double          timeout;
    double          step;
    double          ratio;
    double          max_step;
    char           *key;            /* a shared hold's key (malloc) */
    size_t          key_len;
    int             shared;         /* lk is a shared hold */
    char            name[SHMLOCK_NAME_MAX + 1];   /* the zone's, for logs */
} lobj_t;

/* shard recoveries this process ran (the core's counter), and as far as
 * the objects looked */
static const volatile uint32_t *lobj_recoveries;
static uint32_t lobj_recoveries_seen;

/* the metatable, as lua_topointer names it: a method compares its self's
 * with it (the upvalue's, cached: one pointer compare) */
static const void *lobj_mt;

#define LOBJ_KEY_CHECK  lua_upvalueindex(2)
#define LOBJ_DEAD       lua_upvalueindex(3)
#define LOBJ_RECOVERED  lua_upvalueindex(4)

/* self (argument 1), or an error at the caller's line */
static lobj_t *lobj_self(lua_State *L)
{
    lobj_t *o = lua_touserdata(L, 1);

    if (o == NULL || !lua_getmetatable(L, 1)
        || lua_topointer(L, -1) != lobj_mt)
    {
        luaL_error(L, "bad lock object (use lock:method(), not "
                   "lock.method())");
        return NULL;
    }
    lua_pop(L, 1);
    return o;
}

/* nil, msg: a runtime refusal */
static int lobj_fail(lua_State *L, const char *msg)
{
    lua_pushnil(L);
    lua_pushstring(L, msg);
    return 2;
}

static int lobj_fail_rc(lua_State *L, int rc)
{
    return lobj_fail(L, shmlock_strerror(rc));
}

/* Whether o holds something, taken by this process; a copy in a forked
 * child forgets what the parent's object held (it stays the parent's). */
static int lobj_held(lobj_t *o)
{
    if (!o->lk.held) {
        return 0;
    }
    if (o->lk.pid != shmlock_self_pid()) {
        o->lk.held = 0;
        return 0;
    }
    return 1;
}

/* The key at i as a zone keeps it: a string of 1 to max bytes (a number
 * or other value made one by the Lua normaliser, into index i); NULL and
 * the message on the stack's top otherwise. */
static const char *lobj_key(lua_State *L, int i, int type, size_t max,
    size_t *len, const char **err)
{
    const char *key;

    if (type != LUA_TSTRING) {
        lua_pushvalue(L, LOBJ_KEY_CHECK);
        lua_pushvalue(L, i);
        lua_call(L, 1, 2);
        if (lua_isnil(L, -2)) {
            *err = lua_tostring(L, -1);
            return NULL;
        }
        lua_pop(L, 1);
        lua_replace(L, i);
    }
    key = lua_tolstring(L, i, len);
    if (*len == 0) {
        *err = "empty key";
        return NULL;
    }
    if (*len > max) {
        *err = "key too long";
        return NULL;
    }
    return key;
}

/* a time in seconds a method was given at argument i, checked as the
 * lock's options are: errors at the caller's line */
static double lobj_seconds(lua_State *L, int i, const char *label)
{
    double v;

    if (lua_type(L, i) != LUA_TNUMBER) {
        luaL_error(L, "%s must be a number", label);
    }
    v = (double) lua_tonumber(L, i);
    if (v != v) {
        luaL_error(L, "%s must be a number", label);
    }
    if (v < 0) {
        luaL_error(L, "%s must be >= 0", label);
    }
    if (v > LOBJ_MAX_SECONDS) {
        luaL_error(L, "%s must be <= 1e12", label);
    }
    return v;
}

/* this call's timeout (argument i, else the object's), clamped to the
 * exptime as resty.lock's */
static double lobj_timeout(lua_State *L, lobj_t *o, int i)
{
    double t;

    if (lua_isnoneornil(L, i)) {
        return o->timeout;
    }
    t = lobj_seconds(L, i, "timeout");
    return o->exptime > 0 && t > o->exptime ? o->exptime : t;
}

/* whole milliseconds of a checked time, a positive one never 0 */
static int64_t lobj_ms(double seconds)
{
    double d = seconds * 1000 + 0.5;
    int64_t ms = (int64_t) d;

    if (ms == 0 && seconds > 0) {
        return 1;
    }
    return ms;
}

/* after a call that may have taken a dead holder's lock over, or
 * recovered a shard: the operator is told (the module's functions) */
static void lobj_report(lua_State *L, lobj_t *o, const char *key)
{
    uint32_t n = *lobj_recoveries;

    if (o->lk.dead != 0) {
        lua_pushvalue(L, LOBJ_DEAD);
        lua_pushstring(L, key);
        core_push_number(L, o->lk.dead);
        core_push_number(L, o->lk.dead_to);
        o->lk.dead = 0;
        o->lk.dead_to = 0;
        lua_call(L, 3, 0);
    }
    if (n != lobj_recoveries_seen) {
        lobj_recoveries_seen = n;
        lua_pushvalue(L, LOBJ_RECOVERED);
        lua_pushstring(L, o->name);
        lua_call(L, 1, 0);
    }
}

/* elapsed seconds, the returns of a lock that is ours (0: at once, an
 * integer under 5.3 and later, as resty.lock's) */
static int lobj_got(lua_State *L, double elapsed)
{
    if (elapsed == 0) {
        lua_pushinteger(L, 0);
    } else {
        lua_pushnumber(L, (lua_Number) elapsed);
    }
    return 1;
}

/* The acquire of key (exclusive or shared), waiting up to timeout
 * seconds (0: no wait; a dead holder's lock is ours at once). */
static int lobj_take(lua_State *L, lobj_t *o, const char *key, size_t klen,
    double timeout, int shared)
{
    shmlock_wait_t w;
    int64_t elapsed;
    int rc;

    o->shared = shared;
    rc = shared ? shmlock_shared_acquire(&o->lk, key, klen, o->exptime_ms)
                : shmlock_lock_acquire(&o->lk, key, klen, o->exptime_ms, 0);
    if (rc == SHMLOCK_OK) {
        lobj_report(L, o, key);
        return lobj_got(L, 0);
    }
    if (rc != SHMLOCK_EXISTS) {
        lobj_report(L, o, key);
        return lobj_fail_rc(L, rc);
    }
    if (timeout > 0) {
        memset(&w, 0, sizeof(w));
        w.exptime_ms = o->exptime_ms;
        w.start_us = shmlock_now_us();
        w.timeout_us = (int64_t) (timeout * 1e6);
        w.step = o->step;
        w.ratio = o->ratio;
        w.max_step = o->max_step;
        rc = shared ? shmlock_shared_wait(&o->lk, key, klen, &w, &elapsed)
                    : shmlock_lock_wait(&o->lk, key, klen, &w, &elapsed);
        lobj_report(L, o, key);
        if (rc == SHMLOCK_OK) {
            return lobj_got(L, (double) elapsed / 1e6);
        }
    } else {
        shmlock_look_t how;

        memset(&how, 0, sizeof(how));
        how.exptime_ms = o->exptime_ms;
        how.flags = SHMLOCK_LOOK_CHECK;
        rc = shared ? shmlock_shared_look(&o->lk, key, klen, o->exptime_ms,
                                          SHMLOCK_LOOK_CHECK)
                    : shmlock_lock_look(&o->lk, key, klen, &how);
        lobj_report(L, o, key);
        if (rc == SHMLOCK_OK) {
            return lobj_got(L, 0);
        }
        if (rc == SHMLOCK_EXISTS) {
            rc = SHMLOCK_TIMEOUT;
        }
    }
    if (rc == SHMLOCK_TIMEOUT) {
        return lobj_fail(L, "timeout");
    }
    return lobj_fail_rc(L, rc);
}

/* the shared hold's key kept (its group's calls need it) */
static int lobj_keep_key(lobj_t *o, const char *key, size_t klen)
{
    char *k = realloc(o->key, klen);

    if (k == NULL) {
        return 0;
    }
    memcpy(k, key, klen);
    o->key = k;
    o->key_len = klen;
    return 1;
}

/* lock(key, timeout?), trylock(key), lock_shared(key, timeout?) */
static int lobj_acquire(lua_State *L, int may_wait, int shared)
{
    lobj_t *o = lobj_self(L);
    double timeout = may_wait ? lobj_timeout(L, o, 3) : 0;
    const char *key, *err = NULL;
    size_t klen;
    int t = lua_type(L, 2);

    if (t <= LUA_TNIL || (t == LUA_TBOOLEAN && !lua_toboolean(L, 2))) {
        return lobj_fail(L, "nil key");
    }
    if (lobj_held(o)) {
        return lobj_fail(L, "locked");
    }
    /* a shared hold's records add 4 bytes to the key (src/group.h) */
    key = lobj_key(L, 2, t, shared ? SHMLOCK_KEY_MAX - 4 : SHMLOCK_KEY_MAX,
                   &klen, &err);
    if (key == NULL) {
        return lobj_fail(L, err);
    }
    if (shared && !lobj_keep_key(o, key, klen)) {
        return lobj_fail_rc(L, SHMLOCK_NO_MEMORY);
    }
    return lobj_take(L, o, key, klen, timeout, shared);
}

static int lobj_lock(lua_State *L)
{
    return lobj_acquire(L, 1, 0);
}

static int lobj_trylock(lua_State *L)
{
    return lobj_acquire(L, 0, 0);
}

static int lobj_lock_shared(lua_State *L)
{
    return lobj_acquire(L, 1, 1);
}

/* unlock(): 1; 1, "expired"; nil, "unlocked"; nil and the zone's error
 * (the object keeps holding) */
static int lobj_unlock(lua_State *L)
{
    lobj_t *o = lobj_self(L);
    int rc;

    if (!lobj_held(o)) {
        return lobj_fail(L, "unlocked");
    }
    rc = o->shared ? shmlock_shared_release(&o->lk, o->key, o->key_len)
                   : shmlock_lock_release(&o->lk, 0);
    if (rc == SHMLOCK_OK) {
        lua_pushinteger(L, 1);
        return 1;
    }
    if (rc == SHMLOCK_NOT_FOUND) {
        o->lk.held = 0;
        lua_pushinteger(L, 1);
        lua_pushliteral(L, "expired");
        return 2;
    }
    return lobj_fail_rc(L, rc);
}

/* expire(seconds?): true; nil, "unlocked"; nil, "expired"; nil, err */
static int lobj_expire(lua_State *L)
{
    lobj_t *o = lobj_self(L);
    double t;
    int rc;

    if (!lobj_held(o)) {
        return lobj_fail(L, "unlocked");
    }
    if (lua_isnoneornil(L, 2)) {
        t = o->exptime;
    } else {
        t = lua_type(L, 2) == LUA_TNUMBER ? (double) lua_tonumber(L, 2) : -1;
        if (!(t >= 0 && t <= LOBJ_MAX_SECONDS)) {
            return luaL_error(L, "bad \"exptime\" argument");
        }
    }
    rc = o->shared ? shmlock_shared_extend(&o->lk, o->key, o->key_len,
                                           lobj_ms(t))
                   : shmlock_lock_extend(&o->lk, lobj_ms(t));
    if (rc == SHMLOCK_OK) {
        lua_pushboolean(L, 1);
        return 1;
    }
    if (rc == SHMLOCK_NOT_FOUND) {
        o->lk.held = 0;
        return lobj_fail(L, "expired");
    }
    return lobj_fail_rc(L, rc);
}

/* owned(): whether the object's lock or hold is still its key's */
static int lobj_owned(lua_State *L)
{
    lobj_t *o = lobj_self(L);

    if (!lobj_held(o)) {
        lua_pushboolean(L, 0);
        return 1;
    }
    lua_pushboolean(L, o->shared ? shmlock_shared_owned(&o->lk, o->key,
                                                        o->key_len)
                                 : shmlock_lock_owned(&o->lk));
    return 1;
}

/* A collected object releases what it holds (a copy in a forked child:
 * nothing), then closes its zone. */
static int lobj_gc(lua_State *L)
{
    lobj_t *o = lua_touserdata(L, 1);

    if (o == NULL || o->lk.zone == NULL) {
        return 0;
    }
    if (o->lk.held && o->lk.pid == shmlock_self_pid()) {
        if (o->shared) {
            shmlock_shared_release(&o->lk, o->key, o->key_len);
        } else {
            shmlock_lock_release(&o->lk, 0);
        }
    }
    o->lk.held = 0;
    free(o->key);
    o->key = NULL;
    shmlock_zone_close(o->lk.zone);
    o->lk.zone = NULL;
    return 0;
}

static const luaL_Reg LOBJ_METHODS[] = {
    { "lock", lobj_lock },
    { "trylock", lobj_trylock },
    { "lock_shared", lobj_lock_shared },
    { "unlock", lobj_unlock },
    { "expire", lobj_expire },
    { "owned", lobj_owned },
    { NULL, NULL }
};

/*
 * mt = core.lock_class(module, key_check, report_dead, recovered): the
 * lock objects' metatable (made once), its __index the module, into which
 * the methods go.  key_check(v): a key as a zone keeps it, or nil and the
 * message; report_dead(key, pid, to) and recovered(zone_name): the
 * operator's notices.
 */
static int lock_class(lua_State *L)
{
    const luaL_Reg *m;

    /* made once: objects made since compare their metatable with it */
    lua_getfield(L, LUA_REGISTRYINDEX, "resty.shmlock.core.lock_object");
    if (lua_istable(L, -1)) {
        return 1;
    }
    lua_pop(L, 1);
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    luaL_checktype(L, 3, LUA_TFUNCTION);
    luaL_checktype(L, 4, LUA_TFUNCTION);
    lua_newtable(L);                            /* 5: the metatable */
    lua_pushvalue(L, 1);
    lua_setfield(L, 5, "__index");
    lua_pushcfunction(L, lobj_gc);
    lua_setfield(L, 5, "__gc");
    for (m = LOBJ_METHODS; m->name != NULL; m++) {
        lua_pushvalue(L, 5);
        lua_pushvalue(L, 2);
        lua_pushvalue(L, 3);
        lua_pushvalue(L, 4);
        lua_pushcclosure(L, m->func, 4);
        lua_setfield(L, 1, m->name);
    }
    lua_pushvalue(L, 5);
    lua_setfield(L, LUA_REGISTRYINDEX, "resty.shmlock.core.lock_object");
    lobj_mt = lua_topointer(L, 5);
    lobj_recoveries = shmlock_recoveries();
    lobj_recoveries_seen = *lobj_recoveries;
    return 1;
}

/* an option lock_object takes (resty.shmlock checked it already): a
 * number from 0 to 1e12 (above 0: positive) */
static double lobj_option(lua_State *L, int i, int positive)
{
    double v = core_num(L, i);

    if (!(v >= 0 && v <= LOBJ_MAX_SECONDS) || (positive && v == 0)) {
        luaL_argerror(L, i, "a time from 0 to 1e12");
    }
    return v;
}

/*
 * lock = core.lock_object(zone, name, exptime, timeout, step, ratio,
 * max_step): a lock object of zone (checked options, seconds), after
 * lock_class.
 */
static int lock_object(lua_State *L)
{
    shmlock_zone_t *zone = core_zone(L, 1);
    size_t nlen;
    const char *name = luaL_checklstring(L, 2, &nlen);
    lobj_t *o;

    double exptime = lobj_option(L, 3, 0), timeout = lobj_option(L, 4, 0),
           step = lobj_option(L, 5, 1), ratio = lobj_option(L, 6, 1),
           max_step = lobj_option(L, 7, 1);

    o = lua_newuserdata(L, sizeof(*o));
    memset(o, 0, sizeof(*o));
    o->exptime = exptime;
    o->exptime_ms = lobj_ms(exptime);
    o->timeout = timeout;
    o->step = step;
    o->ratio = ratio;
    o->max_step = max_step;
    memcpy(o->name, name, nlen < SHMLOCK_NAME_MAX ? nlen : SHMLOCK_NAME_MAX);
    lua_getfield(L, LUA_REGISTRYINDEX, "resty.shmlock.core.lock_object");
    if (!lua_istable(L, -1)) {
        return luaL_error(L, "lock_object before lock_class");
    }
    lua_setmetatable(L, -2);
    shmlock_zone_retain(zone);
    o->lk.zone = zone;
    return 1;
}

/* tk = core.lock_object_ticket(lock): a copy of the object's ticket (its
 * lock's or hold's); core.lock_object_ticket(lock, tk): the object's
 * ticket (the hint of its next acquire, while it holds nothing) becomes
 * tk.  For the specs: a hinted acquire through a ticket of their choice. */
static int lock_object_ticket(lua_State *L)
{
    lobj_t *o = lobj_self(L);
    shmlock_ticket_t *t;

    if (lua_isnoneornil(L, 2)) {
        t = lua_newuserdata(L, sizeof(*t));
        *t = o->lk.tk;
        luaL_getmetatable(L, "resty.shmlock.core.ticket");
        lua_setmetatable(L, -2);
        return 1;
    }
    t = luaL_checkudata(L, 2, "resty.shmlock.core.ticket");
    if (!o->lk.held) {
        o->lk.tk = *t;
    }
    return 0;
}

const luaL_Reg core_lock_object_funcs[] = {
    { "lock_class", lock_class },
    { "lock_object", lock_object },
    { "lock_object_ticket", lock_object_ticket },
    { NULL, NULL }
};
