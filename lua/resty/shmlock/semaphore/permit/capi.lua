-- resty.shmlock.semaphore.permit.capi (internal): the handle a semaphore
-- object keeps while it holds a permit (the interface:
-- resty.shmlock.semaphore.permit), under PUC Lua 5.1 to 5.4 (the C module
-- binding).
--
-- A handle is a table: zone (the zone's userdata, which it keeps open;
-- false: holds nothing), kind, key and key_len, ticket (a userdata of the
-- C module) and pid (the process that acquired: a copy in a forked child
-- releases nothing).  Its finalizer gives a held permit back: a __gc on
-- the table (Lua 5.2 and later), or on a userdata proxy the handle keeps
-- (Lua 5.1, where only userdata have finalizers).  An object keeps its
-- handle after a release and takes it again at its next acquire; a
-- handle still holding (a forked child's copy) is never reused.

local slots = require "resty.shmlock.lock.slots"
local token = require "resty.shmlock.internal.token"

local pcall = pcall
local ours = token.ours
local self = token.self
local copy = slots.copy
local group_release = slots.C.shmlock_group_release
local group_extend = slots.C.shmlock_group_extend
local finalized = require "resty.shmlock.internal.finalized"

local _M = {}


local function give_back(cd)
    local zone = cd.zone
    if not zone then
        return nil
    end
    cd.zone = false
    -- a forked child's copy releases nothing: the permit is the parent's
    if ours(cd.pid) then
        return group_release(zone, cd.kind, cd.key, cd.key_len, cd.ticket)
    end
    return nil
end
_M.give_back = give_back


-- at exit the zone's userdata may be finalized first: then the permit is
-- a dead process's, back at the next acquire that finds the key full
local function finalize(cd)
    pcall(give_back, cd)
end


local function new_handle()
    return finalized({ zone = false, kind = 0, key = "", key_len = 0,
                      ticket = slots.ticket(), pid = 0 }, finalize)
end


function _M.take(cd, zone, kind, key, klen, tk)
    if cd == nil or cd.zone then
        cd = new_handle()
    end
    cd.zone = zone
    cd.pid = self()
    cd.kind = kind
    cd.key = key
    cd.key_len = klen
    copy(cd.ticket, tk)
    return cd
end


function _M.held(cd)
    if cd == nil or not cd.zone or not ours(cd.pid) then
        return nil
    end
    return cd
end


function _M.drop(cd)
    cd.zone = false
end


function _M.extend(cd, exp_ms)
    return group_extend(cd.zone, cd.kind, cd.key, cd.key_len, cd.ticket,
                        exp_ms)
end


return _M
