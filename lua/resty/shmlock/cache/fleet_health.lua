-- resty.shmlock.cache.fleet_health (internal): whether the fleet tier
-- may call Redis now, per host.
--
-- A Redis call that fails (a connection error, a timeout, an error reply)
-- marks Redis down for the whole host: the zone key "<name>#fleet:down"
-- holds the error.  While it is there, no process of the host calls Redis
-- for this cache, but one per probe interval (PROBE seconds, or
-- fleet_lag when shorter: a change made once Redis is back is then seen
-- within fleet_lag): the one that adds "<name>#fleet:probe" (a key that
-- lives that long) makes the next call, and its success clears the mark.
-- So a Redis that comes back sees one call per host per interval, not
-- the host's whole traffic at once, and a Redis that is stopped costs the
-- host one timeout per interval, not one per request.

local _M = {}

local PROBE = 1        -- seconds between two probes of a host, at most
_M.PROBE = PROBE

-- syntax: ok, err = health.reachable(self)
-- true: call Redis (up, or this process probes); false, the error that
-- marked it down.
function _M.reachable(self)
    local f = self.fleet
    local dict = self.dict
    local down = dict:get(f.k_down)
    if down == nil then
        return true
    end
    if dict:add(f.k_probe, true, f.probe) then
        return true
    end
    return false, down
end

-- syntax: health.failed(self, err)
-- A call failed with err: Redis is down for the host until a probe
-- succeeds (the next one in PROBE seconds).
function _M.failed(self, err)
    local f = self.fleet
    local dict = self.dict
    dict:set(f.k_down, err)
    dict:add(f.k_probe, true, f.probe)
end

-- syntax: health.succeeded(self)
-- A call went through: Redis is up.
function _M.succeeded(self)
    local f = self.fleet
    local dict = self.dict
    if dict:get(f.k_down) ~= nil then
        dict:delete(f.k_down)
    end
end

-- syntax: down = health.down(self): the error that marked Redis down, or nil
function _M.down(self)
    return self.dict:get(self.fleet.k_down)
end

return _M
