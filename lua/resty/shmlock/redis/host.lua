-- resty.shmlock.redis.host (internal): a host's single flight in front of
-- Redis, for the Redis lock and the Redis semaphore: of the processes of
-- one host (the processes and nginx workers that open one zone) that want
-- a key, one at a time talks to Redis; the others wait on the zone.
--
-- The host's turn at a key is a lock of the zone (resty.shmlock: its
-- waits are the host lock's, a futex outside nginx, lock.wait inside,
-- with their fairness and deadline rules), named as the key's Redis key.
-- The semaphore holds the turn while it waits for a permit; the lock also
-- while it holds the key, so that its release can hand the key to the
-- host's next process without a round of Redis polls (a transfer:
-- resty.shmlock.redis).  Beside the turn, in the same zone (dictionary
-- keys: a zone keeps them apart from its locks; an ngx.shared dict's lock
-- keys are entries, these names differ), read and written only by the
-- turn's holder but for the count:
--
--     <key>#n   processes of the host waiting for the turn (incr, a hint:
--               one that dies while waiting leaves it one too high until
--               it expires, which costs a transfer nobody takes)
--     <key>#g   a transfer: "<token> <fence> <turn start ms> <handoffs>",
--               the lock handed to whichever process takes the turn next
--     <key>#y   <fence>: the last holder let the key go to other hosts
--               (its turn was long; the fence it held): the next one lets
--               them take it before it tries (resty.shmlock.redis)
--
-- A dict name as opts.dict: inside nginx a lua_shared_dict's name is that
-- dict (resty.shmlock.internal.names); any other name a zone, created if
-- absent (as the cache creates its own).

local shdict = require "resty.shmlock.shdict"
local zone_handle = shdict._zone_handle
local resty_lock = require "resty.shmlock"
local nginx = require "resty.shmlock.internal.nginx"
local names = require "resty.shmlock.internal.names"

local type = type
local tonumber = tonumber
local error = error
local huge = math.huge
local format = string.format
local match = string.match

local _M = {}

local ngx = nginx.api()

-- the zone of host single flight when opts.dict is not given
_M.DEFAULT_ZONE = "shmlock_redis"

-- How long a transfer waits in Redis for the host's next process to take
-- it, in seconds (at most the lock's exptime): the key is that process's
-- for this long, and it moves the key to its own exptime when it takes
-- the turn.  A transfer nobody takes (its waiters timed out, died, or
-- were aborted by nginx) lapses then, and other hosts find the key free
-- at their next poll.  As the host lock's handoff to a queued waiter
-- (resty.shmlock.lock.wait's ACCEPT).
_M.HANDOFF = 0.5

-- A host's turn: it hands the lock to its own next process while the
-- turn has made fewer than TURN_HANDOFFS handoffs and is younger than
-- TURN_SECONDS; then the lock goes back to Redis, and when other hosts
-- wait (the release woke someone: resty.shmlock.redis.wake), the host's
-- next process yields to them.
_M.TURN_HANDOFFS = 16
_M.TURN_SECONDS = 0.2

-- How long a turn's transfers may go on being taken after the turn began,
-- in seconds: TURN_SECONDS, then HANDOFF, and 1 s for the trips to Redis.
-- An acquisition gives the fence counter this much more life, so that the
-- turn's transfers need not touch it.
_M.TURN_SPAN = _M.TURN_SECONDS + _M.HANDOFF + 1

-- How long a transfer's record lives in the zone, in seconds: past it,
-- a transfer nobody took has lapsed in Redis too (its lease is shorter).
local RECORD_TTL = 2

-- syntax: h, err = host.new(dict, exptime, what)
-- The host side of a lock or semaphore object: dict as opts.dict (nil:
-- the default zone; false: none, and h is false); exptime: the object's
-- (the turn's lease follows the key's).  nil, err when the zone cannot be
-- opened; a bad dict raises at new()'s caller (what: "opts.dict").
function _M.new(dict, exptime, what)
    if dict == false then
        return false
    end
    if dict == nil then
        dict = _M.DEFAULT_ZONE
    end
    local store, target
    if type(dict) == "string" then
        local shared = names.lua_shared_dict(ngx, dict)
        if shared then
            store, target = shared, dict
        else
            local zone, err = shdict.open(dict)
            if not zone then
                return nil, 'could not open zone "' .. dict .. '": ' .. err
            end
            store, target = zone, zone
        end
    elseif type(dict) == "table" and zone_handle(dict) then
        store, target = dict, dict
    else
        error(what .. " must be a zone, a zone name or false", 3)
    end
    local turn, err = resty_lock:new(target, { exptime = exptime })
    if not turn then
        return nil, err
    end
    return { dict = store, turn = turn }
end

-- syntax: elapsed, err = host.enter(h, key, timeout)
-- Takes the host's turn at key (h.turn holds it), waiting up to timeout
-- (0: not at all): 0 at once, the seconds waited, or nil and the host
-- lock's error ("timeout", "cannot wait in <phase> phase", ...).  While
-- it waits it is counted in <key>#n.
function _M.enter(h, key, timeout)
    local turn = h.turn
    local elapsed, err = turn:trylock(key)
    if elapsed or err ~= "timeout" or timeout <= 0 then
        return elapsed, err
    end
    local dict = h.dict
    local nkey = key .. "#n"
    dict:incr(nkey, 1, 0, RECORD_TTL + timeout)
    elapsed, err = turn:lock(key, timeout)
    dict:incr(nkey, -1)
    return elapsed, err
end

-- syntax: host.leave(h): gives the turn back
function _M.leave(h)
    h.turn:unlock()
end

-- syntax: host.extend(h, seconds): the turn's lease follows the key's
function _M.extend(h, seconds)
    h.turn:expire(seconds)
end

-- syntax: n = host.waiting(h, key): processes waiting for the turn
function _M.waiting(h, key)
    local n = h.dict:get(key .. "#n")
    return type(n) == "number" and n or 0
end

-- syntax: host.hand(h, key, tok, fence, turn_start, handoffs, fence_until)
-- Records a transfer for the turn's next holder (before the turn goes).
function _M.hand(h, key, tok, fence, turn_start, handoffs, fence_until)
    if fence_until == huge then
        fence_until = -1
    end
    h.dict:set(key .. "#g", format("%s %.0f %.0f %d %.0f", tok, fence,
                                   turn_start, handoffs, fence_until),
               RECORD_TTL)
end

-- syntax: tok, fence, turn_start, handoffs, fence_until = host.take(h, key)
-- The transfer left for the turn's new holder, if any (it is then gone).
function _M.take(h, key)
    local gkey = key .. "#g"
    local rec = h.dict:get(gkey)
    if type(rec) ~= "string" then
        return nil
    end
    h.dict:delete(gkey)
    local tok, fence, start, handoffs, fence_until =
        match(rec, "^(%S+) (%d+) (%d+) (%d+) (%-?%d+)$")
    if not tok then
        return nil
    end
    fence_until = tonumber(fence_until)
    if fence_until < 0 then
        fence_until = huge
    end
    return tok, tonumber(fence), tonumber(start), tonumber(handoffs),
           fence_until
end

-- syntax: host.yield(h, key, fence): the turn's next holder lets other
-- hosts go (if it comes within HANDOFF: a later one is no part of this
-- contention); fence: the releaser's, by which the next holder tells
-- whether another host took the key since
function _M.yield(h, key, fence)
    h.dict:set(key .. "#y", fence, _M.HANDOFF)
end

-- syntax: fence = host.yielded(h, key): the fence of the yield left, or
-- false (it is then gone)
function _M.yielded(h, key)
    local ykey = key .. "#y"
    local fence = h.dict:get(ykey)
    if type(fence) ~= "number" then
        return false
    end
    h.dict:delete(ykey)
    return fence
end

return _M
