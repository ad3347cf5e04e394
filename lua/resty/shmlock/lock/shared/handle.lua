-- resty.shmlock.lock.shared.handle (internal): the handle a lock object
-- keeps for its shared holds (resty.shmlock.lock.shared), over LuaJIT's
-- FFI, so that an object collected while holding releases its hold.
-- resty.shmlock.lock.shared.handle.capi gives the same interface under PUC
-- Lua (the C module binding).
--
-- The interface:
--
--     cd = take(cd, zone, key, klen, id)   the handle of a hold of key
--                        about to be taken, as owner id (its ticket:
--                        cd.tk, written by the acquire); cd: the object's
--                        handle of an earlier hold, reused if it can be
--     on_collect(release)   release(cd): what a collected handle that
--                        still holds calls (resty.shmlock.lock.shared's
--                        release, set once)
--     the fields the holds' logic reads and writes: zone, key, key_len
--     (as the C calls take them), tk, id, pid (the process that took the
--     hold), held (1 while the hold is ours)
--
-- A handle is a cdata with a finalizer, kept in the lock object's `sh`
-- field from its first shared hold on and reused by the next (no cdata,
-- no finalizer and no zone retain per hold); a copy in a forked child
-- releases nothing (token.ours: the hold is the parent's); it retains
-- its zone (at exit, finalizers run in any order: the zone object may go
-- first).

local ffi = require "ffi"
local C = require "resty.shmlock.lib"
local token = require "resty.shmlock.internal.token"

local ffi_new = ffi.new
local ffi_gc = ffi.gc
local ffi_copy = ffi.copy
local ours = token.ours
local self_pid = token.self

ffi.cdef([[
typedef struct {
    shmlock_zone_t    *zone;    /* retained while the handle lives */
    int32_t            held;    /* 1 while the hold is ours */
    int32_t            pid;     /* the process that took the hold */
    uint32_t           id;      /* the acquisition's owner id */
    uint32_t           key_len;
    uint32_t           key_cap;
    uint32_t           pad;
    shmlock_ticket_t   tk;      /* the hold's ticket */
    char               key[?];
} shmlock_lua_shared_t;
]])

local shared_t = ffi.typeof("shmlock_lua_shared_t")
local KEY_CAP = 48              -- longer keys get a handle of their size

local _M = {}

local release = function() end


function _M.on_collect(fn)
    release = fn
end


-- the finalizer; a forked child's copy releases nothing: the hold is the
-- parent's
local function finalize(cd)
    if cd.held ~= 0 and ours(cd.pid) then
        release(cd)
    end
    cd.held = 0
    local zone = cd.zone
    cd.zone = nil
    if zone ~= nil then
        C.shmlock_zone_close(zone)
    end
end


function _M.take(cd, zone, key, klen, id)
    if not cd or cd.key_cap < klen then
        local cap = klen > KEY_CAP and klen or KEY_CAP
        cd = ffi_gc(ffi_new(shared_t, cap), finalize)
        cd.key_cap = cap
        C.shmlock_zone_retain(zone)
        cd.zone = zone
    end
    cd.pid = self_pid()
    cd.id = id
    cd.key_len = klen
    ffi_copy(cd.key, key, klen)
    return cd
end


return _M
