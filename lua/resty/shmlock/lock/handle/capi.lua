-- resty.shmlock.lock.handle.capi (internal): resty.shmlock.lock.handle's
-- interface for a zone's locks under PUC Lua (the C module binding): the
-- handle a lock object carries while it holds a lock, so that an object
-- collected while holding releases it.
--
-- A handle is a table: zone (the zone's userdata, which it keeps open),
-- tk (the lock's ticket, a userdata of the C module), id (the
-- acquisition's owner id), held (1 while the lock is ours) and pid (the
-- process that took it: a copy in a forked child releases nothing).  Its
-- finalizer releases a held lock through the zone backend, handoff to a
-- marked waiter included: a __gc on the table (Lua 5.2 and later), or on a
-- userdata proxy the handle keeps (Lua 5.1, where only userdata have
-- finalizers).  Handles are pooled as the FFI's are.  ngx.shared dicts
-- exist only inside nginx, under LuaJIT: no handle of theirs here.

local token = require "resty.shmlock.internal.token"
local zone_backend = require "resty.shmlock.lock.zone"
local slots = require "resty.shmlock.lock.slots"

local pcall = pcall
local ours = token.ours
local self = token.self
local release = zone_backend.release
local finalized = require "resty.shmlock.internal.finalized"

local POOL_MAX = 64

local _M = {}

local pool = {}                 -- handles not in use
local pooled = 0


local function finalize(cd)
    local held = cd.held
    cd.held = 0
    -- a forked child's copy releases nothing: the lock is the parent's
    if held ~= 0 and ours(cd.pid) then
        -- at exit the zone's userdata may be finalized first: then the
        -- lock is a dead process's, taken over at once
        pcall(release, cd.zone, cd.tk)
    end
end


local function new_handle()
    return finalized({ zone = false, tk = slots.ticket(), id = 0, held = 0,
                      pid = 0 }, finalize)
end


-- syntax: cd = handle.zone(zone, id)
-- As resty.shmlock.lock.handle's: a handle for a lock of the zone, before
-- it is ours; the caller sets cd.held = 1 once it is, or puts it back.
function _M.zone(zone, id)
    local cd
    if pooled > 0 then
        cd = pool[pooled]
        pool[pooled] = false
        pooled = pooled - 1
    else
        cd = new_handle()
    end
    cd.zone = zone
    cd.pid = self()
    cd.id = id
    return cd
end


-- syntax: mine = handle.ours(cd)
function _M.ours(cd)
    return ours(cd.pid)
end


-- syntax: handle.put(cd)
function _M.put(cd)
    cd.held = 0
    if pooled < POOL_MAX then
        pooled = pooled + 1
        pool[pooled] = cd
    end
end


return _M
