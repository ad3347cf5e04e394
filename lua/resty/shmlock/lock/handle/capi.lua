-- resty.shmlock.lock.handle.capi (internal): resty.shmlock.lock.handle's
-- interface for a zone's locks under PUC Lua (the C module binding): the
-- handle a lock object carries while it holds a lock, so that an object
-- collected while holding releases it.
--
-- A handle is the core's record of the acquisition (shmlock_lock_t), a
-- userdata of the C module (src/lua/lock.c): its fields read by name (id,
-- pid, held), the lock calls made on it.  It keeps its zone mapped (a
-- reference of the core's), and its __gc releases a held lock taken by
-- this process (a copy in a forked child releases nothing), handoff to a
-- marked waiter included, then closes the zone.  Handles are pooled as
-- the FFI's are.  ngx.shared dicts exist only inside nginx, under LuaJIT:
-- no handle of theirs here.

local token = require "resty.shmlock.internal.token"
local new = require("resty.shmlock.lock.slots").lock.new
local rezone = require("resty.shmlock.lock.slots").lock.zone

local ours = token.ours

local POOL_MAX = 64

local _M = {}

local pool = {}                 -- handles not in use
local pooled = 0


-- syntax: cd = handle.zone(zone)
-- As resty.shmlock.lock.handle's: a handle for a lock of the zone, before
-- it is ours.
function _M.zone(zone)
    if pooled > 0 then
        local cd = pool[pooled]
        pool[pooled] = false
        pooled = pooled - 1
        rezone(cd, zone)
        return cd
    end
    return new(zone)
end


-- syntax: mine = handle.ours(cd)
function _M.ours(cd)
    return ours(cd.pid)
end


-- syntax: handle.put_zone(cd)
function _M.put_zone(cd)
    cd.held = 0
    if pooled < POOL_MAX then
        pooled = pooled + 1
        pool[pooled] = cd
    end
end


return _M
