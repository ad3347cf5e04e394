-- resty.shmlock.lock.inspect (internal): what a lock key holds, for
-- resty_lock.inspect() and the shmlock command.  Reads only: the key's
-- value and ttl through the dict's own methods (a zone's dict object or an
-- ngx.shared dict: both answer get and ttl alike), the holder's process,
-- and on a zone the waiters counted on the key's wait word.
--
-- The value is parsed here and in resty.shmlock.internal.token only: a
-- holder token "<pid>:<start>:<serial>", possibly followed by a starving
-- waiter's mark (resty.shmlock.lock.zone, "Starvation mode"); on an
-- ngx.shared dict, an owner number or a compact token, whose pid
-- resty.shmlock.lock.ngx_shared reads (holder_pid).

local C = require "resty.shmlock.lib"
local token = require "resty.shmlock.internal.token"
local holder_pid = require("resty.shmlock.lock.ngx_shared").holder_pid
local clock = require "resty.shmlock.internal.clock"
local proc_alive = require("resty.shmlock.internal.core").proc_alive

local type = type
local tonumber = tonumber
local split = token.split
local parse = token.parse
local alive = token.alive
local now_ms = clock.now_ms

local _M = {}

-- reads of a key whose value changes between its get and its ttl
local TRIES = 8


-- { pid, alive, deadline, waited } of a mark's starving waiter, or nil
-- when the mark is not one of ours
local function marked(starver, since, till)
    local pid = parse(starver)
    if not pid then
        return nil
    end
    local now = now_ms()
    return {
        pid = pid,
        alive = alive(starver),
        -- seconds left to its deadline; <= 0: the mark is stale (a
        -- release frees the key rather than hand it over); nil in a mark
        -- written by an older version, which never goes stale
        deadline = till and (till - now) / 1000 or nil,
        waited = (now - since) / 1000,
    }
end


-- syntax: info, err = inspect.key(dict, key, zone?)
-- dict: a zone's dict object or an ngx.shared dict (anything with get and
-- ttl); key: a checked key; zone: the zone cdata, for the waiter count (nil
-- on an ngx.shared dict).  The value and the ttl are read one after the
-- other and agree (the value is read again after the ttl): a snapshot.
-- Returns the table documented in docs/lock.md (inspect), or nil and
-- "not locked", "not a lock", or the store's error.
function _M.key(dict, key, zone)
    local v, ttl, err
    for _ = 1, TRIES do
        v, err = dict:get(key)
        if v == nil then
            if err == "value is a list" then
                return nil, "not a lock"
            end
            return nil, err or "not locked"
        end
        -- (a number: an ngx.shared dict's lock, resty.shmlock.lock.
        -- ngx_shared, "The value")
        if type(v) ~= "string" and (zone or type(v) ~= "number") then
            return nil, "not a lock"
        end
        ttl, err = dict:ttl(key)
        if ttl then
            if dict:get(key) == v then
                break
            end
        elseif err ~= "not found" then
            return nil, err
        end
        ttl = nil
    end
    if not ttl then
        return nil, "not locked"
    end

    local holder, starver, since, till, pid, live, _
    if type(v) == "string" then
        holder, starver, _, since, till = split(v)
        pid = parse(holder)
    end
    if pid then
        live = alive(holder)
    elseif not zone then
        -- an ngx.shared dict's number or compact token (resty.shmlock.
        -- lock.ngx_shared, "The value"): the pid only, its start time is
        -- not kept
        pid = holder_pid(v)
        live = pid and proc_alive(pid)
    end
    if not pid then
        return nil, "not a lock"
    end

    local info = {
        pid = pid,
        alive = live,
        ttl = ttl,
        marked = starver and marked(starver, since, till) or nil,
        waiters = zone and tonumber(C.shmlock_wait_count(zone,
                                    C.shmlock_hash(key, #key))) or nil,
    }
    return info
end


return _M
