-- resty.shmlock.lock.handle (internal): the small cdata a lock object
-- carries while it holds a lock, so that a lock object collected while
-- holding releases it.
--
-- On a zone the handle is the core's record of the acquisition
-- (shmlock_lock_t, src/shmlock.h: the zone, the ticket, the owner id, the
-- pid that took it, whether it holds); on an ngx.shared dict, its number
-- (a finalizer cannot hold a Lua reference) and copies of the key and of
-- the owner token.  Each kind has one finalizer function, shared by all
-- its handles, which calls the store's backend (resty.shmlock.lock.zone
-- or .ngx_shared).  The lock object keeps the handle; the handle knows
-- nothing of the lock object.
--
-- Handles are pooled, one pool per kind: unlock gives the handle back and
-- the next lock takes it, so a new+lock+unlock cycle allocates no cdata
-- and leaves no finalizer behind (pending finalizers would also abort JIT
-- trace recording); a zone handle's last ticket is then the next acquire's
-- hint.  A handle inherited by a forked child releases nothing: the lock
-- belongs to the parent.  A zone handle keeps a reference to its zone
-- (shmlock_zone_retain): at exit, finalizers run in any order, and the
-- zone object may go first.  The reference stays while the handle is
-- pooled, so that locking again in the same zone costs no retain and
-- close; a pooled handle taken for another zone swaps it.  So up to 64
-- zones no longer used (POOL_MAX and the spare) may stay mapped until
-- exit.
--
-- A shared (reader) hold's handle is the core's record too, with a copy
-- of the key (the group's release needs it): kept in the lock object's
-- `sh` field from its first shared hold on and reused by the next (no
-- pool); its finalizer releases a hold a collected object still has.
--
-- LuaJIT only: under PUC Lua the lock object is the C module's own
-- (src/lua/lock_object.c), whose userdata is the record.

local ffi = require "ffi"
local C = require "resty.shmlock.lib"
local token = require "resty.shmlock.internal.token"
local zone_backend = require "resty.shmlock.lock.zone"
local ngx_shared = require "resty.shmlock.lock.ngx_shared"

local ffi_new = ffi.new
local ffi_gc = ffi.gc
local ffi_copy = ffi.copy
local token_pid = token.pid
local ours = token.ours

ffi.cdef([[
typedef struct {
    int32_t          held;      /* 1 while the lock is ours */
    int32_t          pid;       /* the process that took the lock */
    int32_t          shared;    /* its dict's number in `dicts` */
    uint32_t         tok_len;
    uint32_t         key_len;
    uint32_t         key_cap;
    char             tok[]] .. token.MAX_LEN .. [[];
    char             key[?];
} shmlock_lua_handle_t;

typedef struct {
    shmlock_lock_t   lk;        /* the hold's record: zone retained while
                                   the handle lives */
    uint32_t         key_len;
    uint32_t         key_cap;
    char             key[?];
} shmlock_lua_shared_t;
]])

local lock_t = ffi.typeof("shmlock_lock_t")
local handle_t = ffi.typeof("shmlock_lua_handle_t")
local shared_t = ffi.typeof("shmlock_lua_shared_t")
local KEY_CAP = 48              -- longer keys get a handle of their size
local POOL_MAX = 63               -- with the spare: 64

local _M = {}

-- ngx.shared dicts used for locks, numbered (a finalizer cannot hold a
-- Lua reference); there are only as many as lua_shared_dict lines
local dicts = {}
local numbers = {}


-- A pool of handles not in use: the last one put back is the spare (one
-- upvalue read: a lock object that locks and unlocks again and again
-- takes the same handle back without touching the array), the others in
-- the list.
local function pool_new()
    return { spare = false, list = {}, n = 0 }
end

local function pool_pop(p)
    local cd = p.spare
    if cd then
        -- (nil: one store in LuaJIT's trace, false two; the key stays)
        p.spare = nil
        return cd
    end
    if p.n > 0 then
        cd = p.list[p.n]
        p.list[p.n] = false
        p.n = p.n - 1
        return cd
    end
    return nil
end

local function pool_push(p, cd)
    if not p.spare then
        p.spare = cd
    elseif p.n < POOL_MAX then
        p.n = p.n + 1
        p.list[p.n] = cd
    end
end

local zones = pool_new()
local shared = pool_new()


-- ---- zones ----

local function finalize_zone(cd)
    local held = cd.held
    -- a forked child's copy releases nothing: the lock is the parent's
    if held ~= 0 and ours(cd.pid) and cd.zone ~= nil then
        zone_backend.release(cd.zone, cd)
    end
    cd.held = 0
    if cd.zone ~= nil then
        C.shmlock_zone_close(cd.zone)
        cd.zone = nil
    end
end

-- syntax: cd = handle.zone(zone)
-- A handle for a lock of the zone, before it is ours (the lock calls set
-- its owner id and pid, and held once the lock is ours).
function _M.zone(zone)
    local cd = pool_pop(zones)
    if not cd then
        cd = ffi_gc(ffi_new(lock_t), finalize_zone)
    end
    if cd.zone ~= zone then
        -- (a NULL pointer equals nil: a fresh handle has no zone)
        if cd.zone ~= nil then
            C.shmlock_zone_close(cd.zone)
        end
        C.shmlock_zone_retain(zone)
        cd.zone = zone
    end
    return cd
end


-- ---- ngx.shared dicts ----

local function finalize_shared(cd)
    local held = cd.held
    cd.held = 0
    -- a forked child's copy releases nothing: the lock is the parent's
    if held ~= 0 and ours(cd.pid) then
        ngx_shared.release(dicts[cd.shared], cd.key, cd.key_len, cd.tok,
                           cd.tok_len)
    end
end

-- syntax: n = handle.number(dict)
-- The number a handle stores for an ngx.shared dict (0 stands for a zone).
function _M.number(dict)
    local n = numbers[dict]
    if not n then
        n = #dicts + 1
        dicts[n] = dict
        numbers[dict] = n
    end
    return n
end

-- syntax: cd = handle.take(dict, number, key, klen, tok, tlen)
-- A handle for the lock on key with the token tok (a string or a pointer,
-- tlen bytes), held in the ngx.shared dict of that number.
function _M.take(_, number, key, klen, tok, tlen)
    local cd = pool_pop(shared)
    if not cd or klen > cd.key_cap then
        local cap = klen > KEY_CAP and klen or KEY_CAP
        cd = ffi_gc(ffi_new(handle_t, cap), finalize_shared)
        cd.key_cap = cap
    end
    cd.shared = number
    cd.pid = token_pid()
    ffi_copy(cd.key, key, klen)
    cd.key_len = klen
    ffi_copy(cd.tok, tok, tlen)
    cd.tok_len = tlen
    cd.held = 1
    return cd
end

-- syntax: handle.retoken(cd, tok, tlen)
-- Replaces the token of the held lock (after expire; ngx.shared dicts).
function _M.retoken(cd, tok, tlen)
    ffi_copy(cd.tok, tok, tlen)
    cd.tok_len = tlen
end


-- ---- shared holds ----

-- the finalizer; a forked child's copy releases nothing: the hold is the
-- parent's
local function finalize_hold(cd)
    local lk = cd.lk
    if lk.held ~= 0 and ours(lk.pid) and lk.zone ~= nil then
        C.shmlock_shared_release(lk, cd.key, cd.key_len)
    end
    lk.held = 0
    if lk.zone ~= nil then
        C.shmlock_zone_close(lk.zone)
        lk.zone = nil
    end
end

-- syntax: cd = handle.hold(cd, zone, key, klen)
-- The handle of a shared hold of key in zone about to be taken (the
-- core draws its owner id): cd, the object's handle of an earlier hold,
-- reused if the key fits.  cd.lk is the record the shmlock_shared_*
-- calls take.
function _M.hold(cd, zone, key, klen)
    if not cd or cd.key_cap < klen then
        local cap = klen > KEY_CAP and klen or KEY_CAP
        cd = ffi_gc(ffi_new(shared_t, cap), finalize_hold)
        cd.key_cap = cap
    end
    local lk = cd.lk
    if lk.zone ~= zone then
        if lk.zone ~= nil then
            C.shmlock_zone_close(lk.zone)
        end
        C.shmlock_zone_retain(zone)
        lk.zone = zone
    end
    cd.key_len = klen
    ffi_copy(cd.key, key, klen)
    return cd
end


-- ---- both ----

-- syntax: mine = handle.ours(cd)
-- Whether the lock of cd was taken by this process: false for a handle a
-- child (of fork, a raw fork, clone, _Fork) inherited from its parent.
function _M.ours(cd)
    return ours(cd.pid)
end

-- syntax: handle.put_zone(cd); handle.put_shared(cd)
-- The lock is gone: the handle goes back to its pool (a zone handle
-- keeping its zone reference), or to the collector.
function _M.put_zone(cd)
    cd.held = 0
    pool_push(zones, cd)
end

-- syntax: handle.give_zone(cd)
-- put_zone after a release the core answered 1 to: shmlock_lock_release
-- cleared the handle's held itself.
function _M.give_zone(cd)
    pool_push(zones, cd)
end

function _M.put_shared(cd)
    cd.held = 0
    pool_push(shared, cd)
end


return _M
