-- resty.shmlock.lock.shared.handle.capi (internal): the handle a lock
-- object keeps for its shared holds (the interface:
-- resty.shmlock.lock.shared.handle), under PUC Lua 5.1 to 5.4 (the C
-- module binding).
--
-- A handle is a table: zone (the zone's userdata, which it keeps open),
-- key (a string) and key_len, tk (the hold's ticket, a userdata of the C
-- module), id (the acquisition's owner id), pid (the process that took
-- the hold: a copy in a forked child releases nothing) and held (1 while
-- the hold is ours).  Its finalizer releases a held hold through
-- resty.shmlock.lock.shared's release (the last reader's handoff to a
-- marked writer and its wake-up included): a __gc on the table (Lua 5.2
-- and later), or on a userdata proxy the handle keeps (Lua 5.1, where
-- only userdata have finalizers).  The object keeps its handle from its
-- first shared hold on and takes it again at the next.

local slots = require "resty.shmlock.lock.slots"
local token = require "resty.shmlock.internal.token"

local pcall = pcall
local ours = token.ours
local self_pid = token.self
local finalized = require "resty.shmlock.internal.finalized"

local _M = {}

local release = function() end


function _M.on_collect(fn)
    release = fn
end


-- a forked child's copy releases nothing: the hold is the parent's; at
-- exit the zone's userdata may be finalized first: then the hold is a
-- dead process's, dropped by the next look at the key
local function finalize(cd)
    local held = cd.held
    cd.held = 0
    if held ~= 0 and ours(cd.pid) then
        pcall(release, cd)
    end
end


local function new_handle()
    return finalized({ zone = false, key = "", key_len = 0,
                      tk = slots.ticket(), id = 0, pid = 0, held = 0 },
                     finalize)
end


function _M.take(cd, zone, key, klen, id)
    if not cd then
        cd = new_handle()
    end
    cd.zone = zone
    cd.pid = self_pid()
    cd.id = id
    cd.key = key
    cd.key_len = klen
    return cd
end


return _M
