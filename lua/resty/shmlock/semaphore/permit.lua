-- resty.shmlock.semaphore.permit (internal): the handle a semaphore object
-- keeps while it holds a permit, over LuaJIT's FFI, so that an object
-- collected while holding gives its permit back.
-- resty.shmlock.semaphore.permit.capi gives the same interface under PUC
-- Lua (the C module binding).
--
-- The interface:
--
--     cd = take(cd, zone, kind, key, klen, tk)   the handle of a permit
--                        just taken (its ticket tk); cd: the object's
--                        handle, reused if it can be
--     cd = held(cd)      cd if it holds a permit this process took, else
--                        nil (cd may be nil)
--     rc = give_back(cd) the permit released (the core's code); nil if
--                        cd held nothing, or a forked child's copy
--     rc = extend(cd, exp_ms)   a new lease (the core's code)
--     drop(cd)           cd holds nothing any more (its lease ran out:
--                        nothing to give back)
--
-- A handle is a cdata with a finalizer: the zone, the key, the ticket,
-- the pid that acquired (a forked child's copy releases nothing:
-- token.ours).  An object keeps its handle after a release (zone NULL:
-- holding nothing) and takes it again at its next acquire if the key
-- fits: a reused object allocates nothing, leaves no finalizer behind and
-- retains its zone once (ref, let go when the handle is collected), not
-- per acquire+release.  A handle still holding (a forked child's copy of
-- the parent's) is never reused.

local ffi = require "ffi"
local C = require "resty.shmlock.lib"
local token = require "resty.shmlock.internal.token"

local ffi_new = ffi.new
local ffi_gc = ffi.gc
local ffi_copy = ffi.copy
local ours = token.ours

ffi.cdef([[
typedef struct {
    shmlock_zone_t    *zone;    /* NULL: holds nothing */
    shmlock_zone_t    *ref;     /* the zone this handle keeps mapped */
    int32_t            pid;     /* the process that acquired */
    int32_t            kind;
    uint32_t           key_len;
    uint32_t           cap;     /* bytes of key[] */
    shmlock_ticket_t   ticket;
    char               key[?];
} shmlock_lua_permit_t;
]])

local permit_t = ffi.typeof("shmlock_lua_permit_t")

local _M = {}


local function give_back(cd)
    local zone = cd.zone
    if zone == nil then
        return nil
    end
    cd.zone = nil
    -- a forked child's copy releases nothing: the permit is the parent's
    if ours(cd.pid) then
        return C.shmlock_group_release(zone, cd.kind, cd.key, cd.key_len,
                                       cd.ticket)
    end
    return nil
end
_M.give_back = give_back


-- the finalizer: the permit given back, then the zone let go (at exit,
-- finalizers run in any order: the zone object may go first)
local function collect(cd)
    give_back(cd)
    local ref = cd.ref
    if ref ~= nil then
        cd.ref = nil
        C.shmlock_zone_close(ref)
    end
end


function _M.take(cd, zone, kind, key, klen, tk)
    if cd == nil or cd.zone ~= nil or cd.cap < klen or cd.ref ~= zone then
        cd = ffi_gc(ffi_new(permit_t, klen), collect)
        cd.cap = klen
        C.shmlock_zone_retain(zone)
        cd.ref = zone
    end
    cd.zone = zone
    cd.pid = C.shmlock_self_pid()
    cd.kind = kind
    cd.key_len = klen
    ffi_copy(cd.key, key, klen)
    cd.ticket = tk
    return cd
end


function _M.held(cd)
    if cd == nil or cd.zone == nil or not ours(cd.pid) then
        return nil
    end
    return cd
end


function _M.drop(cd)
    cd.zone = nil
end


function _M.extend(cd, exp_ms)
    return C.shmlock_group_extend(cd.zone, cd.kind, cd.key, cd.key_len,
                                  cd.ticket, exp_ms)
end


return _M
