/*
 * The lock: the slot ABI (shmlock_slot_*) and owner ids, for
 * resty.shmlock.lock.slots_capi.  Tickets and marks are full userdata
 * holding the core's structs (shmlock_ticket_t, shmlock_mark_t), so that
 * their 64-bit words never pass through a Lua number (pid << 32 | id does
 * not fit a double's 53 bits): Lua reads them as 32-bit halves
 * (ticket_state, mark_state), and a swap names its new owner by a ticket,
 * a mark or an id of this process.  Each slot call is one call of the
 * core, its arguments in the FFI's order (the key's length checked
 * against the string), answering the core's status.  The holder groups'
 * calls (shmlock_group_*: a semaphore's permits, shared holds) likewise.
 */
#include <string.h>
#ifdef SHMLOCK_TESTING
#include <sys/wait.h>
#include <unistd.h>
#endif

#include "core.h"

#define TICKET_MT "resty.shmlock.core.ticket"
#define MARK_MT "resty.shmlock.core.mark"
#define LOCK_MT "resty.shmlock.core.lock"

static void *new_box(lua_State *L, size_t size, const char *mt)
{
    void *p = lua_newuserdata(L, size);
    memset(p, 0, size);
    if (luaL_newmetatable(L, mt)) {
        lua_pushstring(L, mt);
        lua_setfield(L, -2, "__metatable");
    }
    lua_setmetatable(L, -2);
    return p;
}

static shmlock_ticket_t *ticket_at(lua_State *L, int i)
{
    return luaL_checkudata(L, i, TICKET_MT);
}

static shmlock_mark_t *mark_at(lua_State *L, int i)
{
    return luaL_checkudata(L, i, MARK_MT);
}

/* the userdata at i if it has metatable mt, else NULL */
static void *test_udata(lua_State *L, int i, const char *mt)
{
    void *p = lua_touserdata(L, i);
    int same;

    if (p == NULL || !lua_getmetatable(L, i)) {
        return NULL;
    }
    luaL_getmetatable(L, mt);
    same = lua_rawequal(L, -1, -2);
    lua_pop(L, 2);
    return same ? p : NULL;
}

/* the key at i, klen at i + 1 (at most the string's length; NaN is no
 * length: every comparison with it is false) */
static const char *key_arg(lua_State *L, int i, size_t *klen)
{
    size_t len;
    const char *key = core_key(L, i, &len);
    double n = core_optnum(L, i + 1, (double) len);

    if (!(n >= 0 && n <= (double) len)) {
        luaL_argerror(L, i + 1, "bad key length");
    }
    *klen = (size_t) n;
    return key;
}

static int push_rc(lua_State *L, int rc)
{
    core_push_number(L, rc);
    return 1;
}

/* tk = core.ticket(), m = core.mark(): zeroed */
static int ticket_new(lua_State *L)
{
    new_box(L, sizeof(shmlock_ticket_t), TICKET_MT);
    return 1;
}

static int mark_new(lua_State *L)
{
    new_box(L, sizeof(shmlock_mark_t), MARK_MT);
    return 1;
}

/* core.ticket_copy(dst, src, marked): dst = src, its MARKED flag set
 * (true), cleared (false) or kept (nil) */
static int ticket_copy(lua_State *L)
{
    shmlock_ticket_t *dst = ticket_at(L, 1);
    shmlock_ticket_t *src = ticket_at(L, 2);

    memmove(dst, src, sizeof(*dst));
    if (!lua_isnoneornil(L, 3)) {
        if (lua_toboolean(L, 3)) {
            dst->stamp |= SHMLOCK_SLOT_MARKED;
        } else {
            dst->stamp &= ~(uint64_t) SHMLOCK_SLOT_MARKED;
        }
    }
    return 0;
}

/* pid, id, expiry, marked, start32, hash = core.ticket_state(tk):
 * the owner (0, 0: free), the expiry (zone clock ms; 2^40 - 1: never),
 * the MARKED flag, the process hint's start time (low 32 bits), the
 * key's hash */
static int ticket_state(lua_State *L)
{
    shmlock_ticket_t *t = ticket_at(L, 1);

    core_push_number(L, (double) (uint32_t) (t->owner >> 32));
    core_push_number(L, (double) (uint32_t) t->owner);
    core_push_number(L, (double) (t->stamp >> SHMLOCK_SLOT_EXPIRY_SHIFT));
    lua_pushboolean(L, (t->stamp & SHMLOCK_SLOT_MARKED) != 0);
    core_push_number(L, (double) (uint32_t) (t->process >> 32));
    core_push_number(L, (double) t->hash);
    return 6;
}

/* pid, id, exptime, since, until = core.mark_state(m) */
static int mark_state(lua_State *L)
{
    shmlock_mark_t *m = mark_at(L, 1);

    core_push_number(L, (double) (uint32_t) (m->owner >> 32));
    core_push_number(L, (double) (uint32_t) m->owner);
    core_push_number(L, (double) m->exptime_ms);
    core_push_number(L, (double) m->since_ms);
    core_push_number(L, (double) m->until_ms);
    return 5;
}

typedef int (*acquire_fn)(shmlock_zone_t *, const char *, size_t, uint32_t,
                          int64_t, int64_t, shmlock_ticket_t *);

static int acquire_with(lua_State *L, acquire_fn acquire)
{
    shmlock_zone_t *zone = core_zone(L, 1);
    size_t klen;
    const char *key = key_arg(L, 2, &klen);

    uint32_t id = core_u32(L, 4);
    int64_t exptime = core_i64(L, 5);
    int64_t now = core_opti64(L, 6, 0);

    return push_rc(L, acquire(zone, key, klen, id, exptime, now,
                              ticket_at(L, 7)));
}

/* rc = core.slot_acquire(zone, key, klen, id, exptime_ms, now_ms, tk) */
static int slot_acquire(lua_State *L)
{
    return acquire_with(L, shmlock_slot_acquire);
}

/* rc = core.slot_acquire_hint(zone, key, klen, id, exptime_ms, now_ms, tk):
 * tk's slot is tried first (any ticket is a safe hint) */
static int slot_acquire_hint(lua_State *L)
{
    return acquire_with(L, shmlock_slot_acquire_hint);
}

/* rc = core.slot_release(zone, tk) */
static int slot_release(lua_State *L)
{
    return push_rc(L, shmlock_slot_release(core_zone(L, 1), ticket_at(L, 2)));
}

/* rc = core.slot_extend(zone, tk, exptime_ms, now_ms) */
static int slot_extend(lua_State *L)
{
    shmlock_zone_t *zone = core_zone(L, 1);
    shmlock_ticket_t *t = ticket_at(L, 2);
    int64_t exptime = core_i64(L, 3);

    return push_rc(L, shmlock_slot_extend(zone, t, exptime,
                                          core_opti64(L, 4, 0)));
}

/* rc = core.slot_look(zone, key, klen, tk) */
static int slot_look(lua_State *L)
{
    shmlock_zone_t *zone = core_zone(L, 1);
    size_t klen;
    const char *key = key_arg(L, 2, &klen);

    return push_rc(L, shmlock_slot_look(zone, key, klen, ticket_at(L, 4)));
}

/*
 * rc = core.slot_swap(zone, seen, owner, marked, exptime_ms, now_ms, out)
 * owner: a ticket (its owner, keeping seen's process), a mark (its owner
 * and process; exptime_ms nil: the mark's), or an id of this process.
 */
static int slot_swap(lua_State *L)
{
    shmlock_zone_t *zone = core_zone(L, 1);
    shmlock_ticket_t *seen = ticket_at(L, 2);
    shmlock_ticket_t *by_ticket = test_udata(L, 3, TICKET_MT);
    shmlock_mark_t *by_mark = test_udata(L, 3, MARK_MT);
    unsigned marked = lua_toboolean(L, 4) ? SHMLOCK_SLOT_MARKED : 0;
    shmlock_ticket_t *out = ticket_at(L, 7);
    uint64_t owner, process = 0;
    int64_t exptime;

    if (by_ticket != NULL) {
        owner = by_ticket->owner;
    } else if (by_mark != NULL) {
        owner = by_mark->owner;
        process = by_mark->process;
    } else {
        owner = (uint64_t) (uint32_t) shmlock_self_pid() << 32
                | core_u32(L, 3);
    }
    if (by_mark != NULL && lua_isnoneornil(L, 5)) {
        exptime = by_mark->exptime_ms;
    } else {
        exptime = core_i64(L, 5);
    }
    return push_rc(L, shmlock_slot_swap(zone, seen, owner, process, marked,
                                        exptime, core_opti64(L, 6, 0), out));
}

/* rc = core.slot_mark(zone, seen, id, exptime_ms, since_ms, until_ms, out):
 * marks for the waiter id of this process */
static int slot_mark(lua_State *L)
{
    shmlock_zone_t *zone = core_zone(L, 1);
    shmlock_ticket_t *seen = ticket_at(L, 2);
    shmlock_mark_t m;

    m.owner = (uint64_t) (uint32_t) shmlock_self_pid() << 32
              | core_u32(L, 3);
    m.process = 0;
    m.exptime_ms = core_i64(L, 4);
    m.since_ms = core_i64(L, 5);
    m.until_ms = core_i64(L, 6);
    return push_rc(L, shmlock_slot_mark(zone, seen, &m, ticket_at(L, 7)));
}

/* rc = core.slot_read_mark(zone, tk, m) */
static int slot_read_mark(lua_State *L)
{
    return push_rc(L, shmlock_slot_read_mark(core_zone(L, 1), ticket_at(L, 2),
                                             mark_at(L, 3)));
}

/* 1 or 0 = core.slot_alive(tk or m): a ticket's holder, a mark's waiter */
static int slot_alive(lua_State *L)
{
    shmlock_mark_t *m = test_udata(L, 1, MARK_MT);
    shmlock_ticket_t probe;

    if (m == NULL) {
        return push_rc(L, shmlock_slot_alive(ticket_at(L, 1)));
    }
    memset(&probe, 0, sizeof(probe));
    probe.owner = m->owner;
    probe.process = m->process;
    return push_rc(L, shmlock_slot_alive(&probe));
}

/* hash = core.slot_hash(key, klen) */
static int slot_hash(lua_State *L)
{
    size_t klen;
    const char *key = key_arg(L, 1, &klen);

    core_push_number(L, shmlock_hash(key, klen));
    return 1;
}

#define SCAN_MAX 256

/*
 * rc, next, list = core.slot_scan(zone, cursor, max): list of { ticket =,
 * key = (the user key's bytes the slot keeps), key_len =, kind = (the
 * slot's: SLOT_LOCK ...), index = (a record's) }
 */
static int slot_scan(lua_State *L)
{
    shmlock_zone_t *zone = core_zone(L, 1);
    uint64_t cursor = core_u64(L, 2);
    double n = core_num(L, 3);
    shmlock_slot_info_t *out;
    uint64_t next = 0;
    int max, count = 0, rc, i;

    if (!(n >= 1 && n <= SCAN_MAX)) {
        return luaL_argerror(L, 3, "from 1 to 256");
    }
    max = (int) n;
    /* on the Lua stack: collected whatever raises below */
    out = lua_newuserdata(L, sizeof(*out) * (size_t) max);
    rc = shmlock_slot_scan(zone, cursor, out, max, &count, &next);
    core_push_number(L, rc);
    core_push_number(L, (double) next);
    lua_newtable(L);
    for (i = 0; rc == SHMLOCK_OK && i < count; i++) {
        lua_newtable(L);
        *(shmlock_ticket_t *) new_box(L, sizeof(shmlock_ticket_t),
                                      TICKET_MT) = out[i].ticket;
        lua_setfield(L, -2, "ticket");
        lua_pushlstring(L, out[i].key, out[i].shown);
        lua_setfield(L, -2, "key");
        core_push_number(L, out[i].key_len);
        lua_setfield(L, -2, "key_len");
        core_push_number(L, out[i].kind);
        lua_setfield(L, -2, "kind");
        core_push_number(L, out[i].index);
        lua_setfield(L, -2, "index");
        lua_rawseti(L, -2, i + 1);
    }
    return 3;
}

/* first = core.owner_ids(): SHMLOCK_OWNER_IDS fresh owner ids from first */
static int owner_ids(lua_State *L)
{
    core_push_number(L, shmlock_owner_ids());
    return 1;
}

/* ---- holder groups (shmlock_group_*): a semaphore's permits, shared
 * holds; kind: SHMLOCK_SEMAPHORE or SHMLOCK_SHARED ---- */

/* rc = core.group_acquire(zone, kind, key, klen, id, permits, exptime_ms,
 *                         tk) */
static int group_acquire(lua_State *L)
{
    shmlock_zone_t *zone = core_zone(L, 1);
    int kind = core_int(L, 2);
    size_t klen;
    const char *key = key_arg(L, 3, &klen);

    uint32_t id = core_u32(L, 5);
    uint32_t permits = core_u32(L, 6);
    int64_t exptime = core_i64(L, 7);

    return push_rc(L, shmlock_group_acquire(zone, kind, key, klen, id,
                                            permits, exptime,
                                            ticket_at(L, 8)));
}

/* rc = core.group_release(zone, kind, key, klen, tk) */
static int group_release(lua_State *L)
{
    shmlock_zone_t *zone = core_zone(L, 1);
    int kind = core_int(L, 2);
    size_t klen;
    const char *key = key_arg(L, 3, &klen);

    return push_rc(L, shmlock_group_release(zone, kind, key, klen,
                                            ticket_at(L, 5)));
}

/* rc = core.group_extend(zone, kind, key, klen, tk, exptime_ms) */
static int group_extend(lua_State *L)
{
    shmlock_zone_t *zone = core_zone(L, 1);
    int kind = core_int(L, 2);
    size_t klen;
    const char *key = key_arg(L, 3, &klen);

    shmlock_ticket_t *t = ticket_at(L, 5);

    return push_rc(L, shmlock_group_extend(zone, kind, key, klen, t,
                                           core_i64(L, 6)));
}

/* rc, count = core.group_reclaim(zone, kind, key, klen) */
static int group_reclaim(lua_State *L)
{
    shmlock_zone_t *zone = core_zone(L, 1);
    int kind = core_int(L, 2);
    size_t klen;
    const char *key = key_arg(L, 3, &klen);
    uint32_t count = 0;
    int rc = shmlock_group_reclaim(zone, kind, key, klen, &count);

    core_push_number(L, rc);
    core_push_number(L, count);
    return 2;
}

/* rc, count, tickets = core.group_holders(zone, kind, key, klen, max):
 * at most max (1 .. SHMLOCK_GROUP_MAX) holders' tickets; count: how many
 * there are (rc SHMLOCK_AGAIN: more than max) */
static int group_holders(lua_State *L)
{
    shmlock_zone_t *zone = core_zone(L, 1);
    int kind = core_int(L, 2);
    size_t klen;
    const char *key = key_arg(L, 3, &klen);
    double n = core_num(L, 5);
    shmlock_ticket_t *out;
    int max, count = 0, rc, i;

    if (!(n >= 1 && n <= SHMLOCK_GROUP_MAX)) {
        return luaL_argerror(L, 5, "from 1 to 16777215 (SHMLOCK_GROUP_MAX)");
    }
    max = (int) n;
    out = lua_newuserdata(L, sizeof(*out) * (size_t) max);
    rc = shmlock_group_holders(zone, kind, key, klen, out, max, &count);
    core_push_number(L, rc);
    core_push_number(L, count);
    lua_newtable(L);
    for (i = 0; (rc == SHMLOCK_OK || rc == SHMLOCK_AGAIN) && i < count
                && i < max; i++) {
        *(shmlock_ticket_t *) new_box(L, sizeof(shmlock_ticket_t),
                                      TICKET_MT) = out[i];
        lua_rawseti(L, -2, i + 1);
    }
    return 3;
}

/* rc = core.group_head(zone, kind, key, klen, tk): the head's state */
static int group_head(lua_State *L)
{
    shmlock_zone_t *zone = core_zone(L, 1);
    int kind = core_int(L, 2);
    size_t klen;
    const char *key = key_arg(L, 3, &klen);

    return push_rc(L, shmlock_group_head(zone, kind, key, klen,
                                         ticket_at(L, 5)));
}

/* ---- the lock (shmlock_lock_*): a lock object's record, a userdata
 * holding a shmlock_lock_t; its fields read by name (id, pid, held,
 * marked, waited, ask) ---- */

static shmlock_lock_t *lock_at(lua_State *L, int i)
{
    return luaL_checkudata(L, i, LOCK_MT);
}

static int lock_index(lua_State *L)
{
    shmlock_lock_t *l = lock_at(L, 1);
    const char *f = luaL_checkstring(L, 2);

    if (strcmp(f, "id") == 0) {
        core_push_number(L, l->id);
    } else if (strcmp(f, "pid") == 0) {
        core_push_number(L, l->pid);
    } else if (strcmp(f, "held") == 0) {
        core_push_number(L, l->held);
    } else if (strcmp(f, "marked") == 0) {
        core_push_number(L, l->marked);
    } else if (strcmp(f, "waited") == 0) {
        core_push_number(L, l->waited);
    } else if (strcmp(f, "ask") == 0) {
        core_push_number(L, l->ask);
    } else {
        lua_pushnil(L);
    }
    return 1;
}

/* cd.held = n: the caller's (a handle put back in its pool) */
static int lock_newindex(lua_State *L)
{
    shmlock_lock_t *l = lock_at(L, 1);
    const char *f = luaL_checkstring(L, 2);

    if (strcmp(f, "held") != 0) {
        return luaL_argerror(L, 2, "only held may be set");
    }
    l->held = (int32_t) core_num(L, 3);
    return 0;
}

/* A collected record: its lock released if this process took it and
 * holds it (handoff included; a forked child's copy releases nothing),
 * then its zone closed (the reference lock_new took: the zone's own
 * userdata may be collected first, at exit). */
static int lock_gc(lua_State *L)
{
    shmlock_lock_t *l = lock_at(L, 1);

    if (l->zone == NULL) {
        return 0;
    }
    if (l->held && l->pid == shmlock_self_pid()) {
        shmlock_lock_release(l, 0);
    }
    l->held = 0;
    shmlock_zone_close(l->zone);
    l->zone = NULL;
    return 0;
}

/* lk = core.lock_new(zone): a zeroed record of zone, which it keeps
 * mapped (a reference of its own) */
static int lock_new(lua_State *L)
{
    shmlock_zone_t *zone = core_zone(L, 1);
    shmlock_lock_t *l = lua_newuserdata(L, sizeof(*l));

    memset(l, 0, sizeof(*l));
    if (luaL_newmetatable(L, LOCK_MT)) {
        lua_pushcfunction(L, lock_index);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, lock_newindex);
        lua_setfield(L, -2, "__newindex");
        lua_pushcfunction(L, lock_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushstring(L, LOCK_MT);
        lua_setfield(L, -2, "__metatable");
    }
    lua_setmetatable(L, -2);
    shmlock_zone_retain(zone);
    l->zone = zone;
    return 1;
}

/* core.lock_zone(lk, zone): lk's zone becomes zone (lk holds nothing) */
static int lock_zone(lua_State *L)
{
    shmlock_lock_t *l = lock_at(L, 1);
    shmlock_zone_t *zone = core_zone(L, 2);

    if (l->zone != zone) {
        shmlock_zone_retain(zone);
        if (l->zone != NULL) {
            shmlock_zone_close(l->zone);
        }
        l->zone = zone;
    }
    return 0;
}

/* rc = core.lock_acquire(lk, key, klen, exptime_ms, now_ms) */
static int lock_acquire(lua_State *L)
{
    shmlock_lock_t *l = lock_at(L, 1);
    size_t klen;
    const char *key = key_arg(L, 2, &klen);

    return push_rc(L, shmlock_lock_acquire(l, key, klen,
                                           (int64_t) core_num(L, 4),
                                           (int64_t) core_optnum(L, 5, 0)));
}

/* rc = core.lock_retry(lk, key, klen, exptime_ms, now_ms) */
static int lock_retry(lua_State *L)
{
    shmlock_lock_t *l = lock_at(L, 1);
    size_t klen;
    const char *key = key_arg(L, 2, &klen);

    return push_rc(L, shmlock_lock_retry(l, key, klen,
                                         (int64_t) core_num(L, 4),
                                         (int64_t) core_optnum(L, 5, 0)));
}

/* rc = core.lock_look(lk, key, klen, exptime_ms, flags, since_ms, till_ms,
 *                     ask_ms) */
static int lock_look(lua_State *L)
{
    shmlock_lock_t *l = lock_at(L, 1);
    size_t klen;
    const char *key = key_arg(L, 2, &klen);
    shmlock_look_t how;

    memset(&how, 0, sizeof(how));
    how.exptime_ms = (int64_t) core_num(L, 4);
    how.flags = (int32_t) core_optnum(L, 5, 0);
    how.since_ms = (int64_t) core_optnum(L, 6, 0);
    how.till_ms = (int64_t) core_optnum(L, 7, 0);
    how.ask_ms = (int64_t) core_optnum(L, 8, 0);
    return push_rc(L, shmlock_lock_look(l, key, klen, &how));
}

/* rc = core.lock_release(lk, flags) */
static int lock_release(lua_State *L)
{
    return push_rc(L, shmlock_lock_release(lock_at(L, 1),
                                           (int) core_optnum(L, 2, 0)));
}

/* rc = core.lock_extend(lk, exptime_ms) */
static int lock_extend(lua_State *L)
{
    return push_rc(L, shmlock_lock_extend(lock_at(L, 1),
                                          (int64_t) core_num(L, 2)));
}

/* rc = core.lock_withdraw(lk, key, klen) */
static int lock_withdraw(lua_State *L)
{
    shmlock_lock_t *l = lock_at(L, 1);
    size_t klen;
    const char *key = key_arg(L, 2, &klen);

    return push_rc(L, shmlock_lock_withdraw(l, key, klen));
}

/* yes = core.lock_holds(lk, key, klen) */
static int lock_holds(lua_State *L)
{
    shmlock_lock_t *l = lock_at(L, 1);
    size_t klen;
    const char *key = key_arg(L, 2, &klen);

    lua_pushboolean(L, shmlock_lock_holds(l, key, klen));
    return 1;
}

/* yes = core.lock_here(zone, key, klen, shared) */
static int lock_here(lua_State *L)
{
    shmlock_zone_t *zone = core_zone(L, 1);
    size_t klen;
    const char *key = key_arg(L, 2, &klen);

    lua_pushboolean(L, shmlock_lock_here(zone, key, klen,
                                         lua_toboolean(L, 4)));
    return 1;
}

/* rc, elapsed_us = core.lock_wait(lk, key, klen, exptime_ms, start_us,
 *                                 timeout_us, step, ratio, max_step, flags) */
static int lock_wait(lua_State *L)
{
    shmlock_lock_t *l = lock_at(L, 1);
    size_t klen;
    const char *key = key_arg(L, 2, &klen);
    shmlock_wait_t w;
    int64_t elapsed = 0;
    int rc;

    memset(&w, 0, sizeof(w));
    w.exptime_ms = (int64_t) core_num(L, 4);
    w.start_us = (int64_t) core_num(L, 5);
    w.timeout_us = (int64_t) core_num(L, 6);
    w.step = core_num(L, 7);
    w.ratio = core_num(L, 8);
    w.max_step = core_num(L, 9);
    w.flags = (int32_t) core_optnum(L, 10, 0);
    rc = shmlock_lock_wait(l, key, klen, &w, &elapsed);
    core_push_number(L, rc);
    core_push_number(L, (double) elapsed);
    return 2;
}

/* rc = core.sem_acquire(lk, key, klen, permits, exptime_ms); sem_retry:
 * the same owner id */
static int sem_try(lua_State *L, int fresh)
{
    shmlock_lock_t *l = lock_at(L, 1);
    size_t klen;
    const char *key = key_arg(L, 2, &klen);
    uint32_t permits = core_u32(L, 4);
    int64_t exptime = (int64_t) core_num(L, 5);

    return push_rc(L, fresh ? shmlock_sem_acquire(l, key, klen, permits,
                                                  exptime)
                            : shmlock_sem_retry(l, key, klen, permits,
                                                exptime));
}

static int sem_acquire(lua_State *L)
{
    return sem_try(L, 1);
}

static int sem_retry(lua_State *L)
{
    return sem_try(L, 0);
}

/* rc, elapsed_us = core.sem_wait(lk, key, klen, permits, exptime_ms,
 *                                start_us, timeout_us, step, ratio,
 *                                max_step, flags) */
static int sem_wait(lua_State *L)
{
    shmlock_lock_t *l = lock_at(L, 1);
    size_t klen;
    const char *key = key_arg(L, 2, &klen);
    uint32_t permits = core_u32(L, 4);
    shmlock_wait_t w;
    int64_t elapsed = 0;
    int rc;

    memset(&w, 0, sizeof(w));
    w.exptime_ms = (int64_t) core_num(L, 5);
    w.start_us = (int64_t) core_num(L, 6);
    w.timeout_us = (int64_t) core_num(L, 7);
    w.step = core_num(L, 8);
    w.ratio = core_num(L, 9);
    w.max_step = core_num(L, 10);
    w.flags = (int32_t) core_optnum(L, 11, 0);
    rc = shmlock_sem_wait(l, key, klen, permits, &w, &elapsed);
    core_push_number(L, rc);
    core_push_number(L, (double) elapsed);
    return 2;
}

/* yes = core.sem_here(zone, key, klen, permits) */
static int sem_here(lua_State *L)
{
    shmlock_zone_t *zone = core_zone(L, 1);
    size_t klen;
    const char *key = key_arg(L, 2, &klen);

    lua_pushboolean(L, shmlock_sem_here(zone, key, klen, core_u32(L, 4)));
    return 1;
}

/* core.lock_verdict(lk, gone): lk.ask is gone (true) or alive; nil: the
 * verdicts cleared */
static int lock_verdict(lua_State *L)
{
    shmlock_lock_t *l = lock_at(L, 1);
    uint32_t *v;

    if (lua_isnoneornil(L, 2)) {
        memset(l->gone, 0, sizeof(l->gone));
        memset(l->alive, 0, sizeof(l->alive));
        return 0;
    }
    v = lua_toboolean(L, 2) ? l->gone : l->alive;
    v[v[0] == 0 ? 0 : 1] = l->ask;
    return 0;
}

/* tk = core.lock_ticket(lk, tk?): a copy of lk's ticket (its hint while
 * it holds nothing); given a ticket, lk's ticket becomes it */
static int lock_ticket(lua_State *L)
{
    shmlock_lock_t *l = lock_at(L, 1);

    if (!lua_isnoneornil(L, 2)) {
        l->tk = *ticket_at(L, 2);
        return 0;
    }
    *(shmlock_ticket_t *) new_box(L, sizeof(shmlock_ticket_t), TICKET_MT) =
        l->tk;
    return 1;
}

/* pid, to = core.lock_dead(lk): a dead holder a call took over (pid 0:
 * none; to: 1 handed on, 2 an aborted waiter's), cleared */
static int lock_dead(lua_State *L)
{
    shmlock_lock_t *l = lock_at(L, 1);

    core_push_number(L, l->dead);
    core_push_number(L, l->dead_to);
    l->dead = 0;
    l->dead_to = 0;
    return 2;
}

#ifdef SHMLOCK_TESTING
/*
 * The test build only (make test-every-lua's ASan module): fork, _exit and
 * waitpid, for spec/every_lua/lock.lua's forked child under a Lua that has
 * no luaposix (Debian packages none for 5.4).
 */
/* pid = core.test_fork() (0 in the child) */
static int test_fork(lua_State *L)
{
    core_push_number(L, fork());
    return 1;
}

/* core.test_exit(status): _exit, no finalizer run */
static int test_exit(lua_State *L)
{
    _exit(core_int(L, 1));
    return 0;
}

/* status = core.test_wait(pid): its exit status, -1 if it did not exit */
static int test_wait(lua_State *L)
{
    int status = 0;

    if (waitpid((pid_t) core_int(L, 1), &status, 0) < 0
        || !WIFEXITED(status)) {
        return push_rc(L, -1);
    }
    return push_rc(L, WEXITSTATUS(status));
}
#endif

const luaL_Reg core_lock_funcs[] = {
    { "ticket", ticket_new },
    { "mark", mark_new },
    { "ticket_copy", ticket_copy },
    { "ticket_state", ticket_state },
    { "mark_state", mark_state },
    { "slot_acquire", slot_acquire },
    { "slot_acquire_hint", slot_acquire_hint },
    { "slot_release", slot_release },
    { "slot_extend", slot_extend },
    { "slot_look", slot_look },
    { "slot_swap", slot_swap },
    { "slot_mark", slot_mark },
    { "slot_read_mark", slot_read_mark },
    { "slot_alive", slot_alive },
    { "slot_hash", slot_hash },
    { "slot_scan", slot_scan },
    { "owner_ids", owner_ids },
    { "group_acquire", group_acquire },
    { "group_release", group_release },
    { "group_extend", group_extend },
    { "group_reclaim", group_reclaim },
    { "group_holders", group_holders },
    { "group_head", group_head },
    { "lock_new", lock_new },
    { "lock_zone", lock_zone },
    { "lock_acquire", lock_acquire },
    { "lock_retry", lock_retry },
    { "lock_look", lock_look },
    { "lock_release", lock_release },
    { "lock_extend", lock_extend },
    { "lock_withdraw", lock_withdraw },
    { "lock_holds", lock_holds },
    { "lock_here", lock_here },
    { "lock_wait", lock_wait },
    { "lock_verdict", lock_verdict },
    { "lock_dead", lock_dead },
    { "lock_ticket", lock_ticket },
    { "sem_acquire", sem_acquire },
    { "sem_retry", sem_retry },
    { "sem_wait", sem_wait },
    { "sem_here", sem_here },
#ifdef SHMLOCK_TESTING
    { "test_fork", test_fork },
    { "test_exit", test_exit },
    { "test_wait", test_wait },
#endif
    { NULL, NULL }
};
