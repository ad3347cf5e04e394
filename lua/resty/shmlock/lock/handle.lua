-- resty.shmlock.lock.handle (internal): the small cdata a lock object
-- carries while it holds a lock, so that a lock object collected while
-- holding releases it.
--
-- The handle keeps what the release needs: on a zone, the zone itself and
-- the lock's ticket (tk: its slot and the state we set, and id, the
-- acquisition's owner id; resty.shmlock.lock.zone); on an ngx.shared
-- dict, its number (a finalizer cannot hold a Lua reference) and copies
-- of the key and of the owner token.  Its finalizer calls the store's
-- backend (resty.shmlock.lock.zone or .ngx_shared).
-- The lock object keeps the handle; the handle knows nothing of the lock
-- object.  All handles share one finalizer function.
--
-- Handles are pooled: unlock gives the handle back and the next lock
-- takes it, so a new+lock+unlock cycle allocates no cdata and leaves no
-- finalizer behind (pending finalizers would also abort JIT trace
-- recording).  A handle inherited by a forked child releases nothing: the
-- lock belongs to the parent.  A handle keeps a reference to its zone
-- (shmlock_zone_retain): at exit, finalizers run in any order, and the
-- zone object may go first.  The reference stays while the handle is
-- pooled, so that locking again in the same zone costs no retain and
-- close; a pooled handle taken for another zone swaps it.  So up to
-- 64 zones no longer used (POOL_MAX and the spare) may stay mapped until
-- exit.

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
local self = token.self

ffi.cdef([[
typedef struct {
    shmlock_zone_t  *zone;      /* NULL for an ngx.shared dict */
    shmlock_ticket_t tk;        /* a zone: the lock's ticket */
    uint32_t         id;        /* a zone: the acquisition's owner id */
    int32_t          held;      /* 1 while the lock is ours */
    int32_t          pid;       /* the process that took the lock */
    int32_t          shared;    /* ngx.shared dict: its number in `dicts` */
    uint32_t         tok_len;
    uint32_t         key_len;
    uint32_t         key_cap;
    char             tok[]] .. token.MAX_LEN .. [[];
    char             key[?];
} shmlock_lua_handle_t;
]])

local handle_t = ffi.typeof("shmlock_lua_handle_t")
local KEY_CAP = 48              -- longer keys get a handle of their size
local POOL_MAX = 63               -- with the spare: 64

local _M = {}

-- ngx.shared dicts used for locks, numbered (a finalizer cannot hold a
-- Lua reference); there are only as many as lua_shared_dict lines
local dicts = {}
local numbers = {}

-- handles not in use: the last one put back is `spare` (one upvalue: a
-- lock object that locks and unlocks again and again takes the same
-- handle back without touching the array), the others are in `pool`
local spare = false
local pool = {}
local pooled = 0


local function finalize(cd)
    local held = cd.held
    local zone = cd.zone
    cd.held = 0
    cd.zone = nil
    -- a forked child's copy releases nothing: the lock is the parent's
    if held ~= 0 and ours(cd.pid) then
        if zone ~= nil then
            zone_backend.release(zone, cd.tk)
        else
            ngx_shared.release(dicts[cd.shared], cd.key, cd.key_len, cd.tok,
                               cd.tok_len)
        end
    end
    if zone ~= nil then
        C.shmlock_zone_close(zone)
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


-- a new handle, with room for a key of klen bytes
local function fresh(klen)
    local cap = klen > KEY_CAP and klen or KEY_CAP
    local cd = ffi_gc(ffi_new(handle_t, cap), finalize)
    cd.key_cap = cap
    return cd
end

-- a handle not in use (the spare first), or nil
local function pop_any()
    local cd = spare
    if cd then
        spare = false
        return cd
    end
    if pooled > 0 then
        cd = pool[pooled]
        pool[pooled] = false
        pooled = pooled - 1
        return cd
    end
    return nil
end

-- a handle from the pool, with room for a key of klen bytes, or a new one
local function pop(klen)
    local cd = pop_any()
    if not cd or klen > cd.key_cap then
        cd = fresh(klen)
    end
    return cd
end


-- the handle's zone becomes zone (nil: an ngx.shared dict's handle)
local function rezone(cd, zone)
    if cd.zone ~= zone then
        -- (a NULL pointer equals nil: no zone on either side)
        if cd.zone ~= nil then
            C.shmlock_zone_close(cd.zone)
        end
        if zone then
            C.shmlock_zone_retain(zone)
        end
        cd.zone = zone
    end
end


-- syntax: cd = handle.zone(zone, id)
-- A handle for a lock of the zone, before it is ours: id, the
-- acquisition's owner id; the zone backend writes cd.tk; the caller sets
-- cd.held = 1 once the lock is ours, or puts the handle back.
function _M.zone(zone, id)
    local cd = pop_any() or fresh(0)
    rezone(cd, zone)
    cd.pid = self()
    cd.id = id
    return cd
end


-- syntax: cd = handle.take(dict, number, key, klen, tok, tlen)
-- A handle for the lock on key with the token tok (a string or a pointer,
-- tlen bytes), held in the ngx.shared dict of that number.
function _M.take(_, number, key, klen, tok, tlen)
    local cd = pop(klen)
    rezone(cd, nil)
    cd.shared = number
    cd.pid = token_pid()
    ffi_copy(cd.key, key, klen)
    cd.key_len = klen
    ffi_copy(cd.tok, tok, tlen)
    cd.tok_len = tlen
    cd.held = 1
    return cd
end


-- syntax: mine = handle.ours(cd)
-- Whether the lock of cd was taken by this process: false for a handle a
-- child (of fork, a raw fork, clone, _Fork) inherited from its parent.
function _M.ours(cd)
    return ours(cd.pid)
end


-- syntax: handle.retoken(cd, tok, tlen)
-- Replaces the token of the held lock (after expire; ngx.shared dicts).
function _M.retoken(cd, tok, tlen)
    ffi_copy(cd.tok, tok, tlen)
    cd.tok_len = tlen
end


-- syntax: handle.put(cd)
-- The lock is gone: the handle goes back to the pool (keeping its zone
-- reference), or to the collector.
function _M.put(cd)
    cd.held = 0
    if not spare then
        spare = cd
    elseif pooled < POOL_MAX then
        pooled = pooled + 1
        pool[pooled] = cd
    end
end


return _M
