-- resty.shmlock.cache.fleet (internal): the fleet tier, a level between
-- the zone and the loader shared by every host whose cache of the same
-- name reaches the same Redis (cache.new's opts.redis).
--
-- A miss on a host is still taken by one process of the host (the host
-- lock: resty.shmlock.cache.load).  That process, in place of the loader,
-- runs load() below: one script (fleet_scripts' fetch) answers the value,
-- if Redis has it (hit_level 5), or gives this host the key's load lock
-- (the loader runs here; its value goes to Redis with its ttl, on Redis's
-- clock, and wakes the other hosts), or says that another host is loading
-- (this one waits on the key's wake stream, XREAD BLOCK, and fetches
-- again).  So Redis sees a few commands per host per miss, and the loader
-- runs once in the fleet.
--
-- set, delete and purge change Redis too, and append to the change log
-- (resty.shmlock.cache.fleet_log: how the other hosts learn of them).  A
-- change cancels the loads in flight on every host: a load stores its
-- value in Redis only if the key's last change and the purge generation
-- are those its fetch saw, and a host that was refused keeps the value
-- out of its zone too.
--
-- Without Redis (down, stopped, slow past redis_timeout: every call's
-- timeout is set; fleet_health says when to try again) or where nginx has
-- no cosockets (log, header and body filters), a miss runs the loader
-- under the host lock alone, and the value it loads is fresh for fleet_lag
-- only: the fleet may hold a newer one.

local codec = require "resty.shmlock.cache.codec"
local stats = require "resty.shmlock.cache.stats"
local conn = require "resty.shmlock.cache.fleet_conn"
local health = require "resty.shmlock.cache.fleet_health"
local fleet_log = require "resty.shmlock.cache.fleet_log"
local scripts = require "resty.shmlock.cache.fleet_scripts"
local token = require "resty.shmlock.internal.token"
local nginx = require "resty.shmlock.internal.nginx"
local options = require "resty.shmlock.internal.options"
local now_ms = require("resty.shmlock.internal.clock").now_ms

local type = type
local tonumber = tonumber
local tostring = tostring
local error = error
local max = math.max
local min = math.min
local format = string.format
local count = stats.count
local encode, decode = codec.encode, codec.decode
local new_token = token.network
local new_epoch = fleet_log.new_epoch
local cosockets = fleet_log.cosockets
local reachable, failed, succeeded = health.reachable, health.failed,
                                     health.succeeded

local _M = {}

local ngx = nginx.api()

-- the format of the Redis keys: a version that stores or reads them
-- otherwise gets another number, so that two versions side by side
-- (a rolling deploy) never read each other's data
local FORMAT = 1
_M.FORMAT = FORMAT
-- how many key changes the log keeps (older ones are trimmed: a host
-- further behind demotes everything); read at each change, so that a
-- spec can make it short
_M.LOG_LENGTH = 100000
-- what a set, delete or purge adds to Redis's error
local HOST_ONLY = " (changed on this host only: other hosts keep their "
                  .. "copies for up to their ttl)"

-- The lifetime (s) of a key's load lock in Redis when the host lock never
-- expires (lock_opts.exptime = 0): a load lock in Redis must expire all
-- the same, since nothing there learns that the loading host died (a PX
-- of 0 ms, or none, would let every host load at once, or none ever
-- again).  The host lock's default exptime.
local FOREVER_LOCK = 30

local DEFAULT_LAG = 1
local DEFAULT_TIMEOUT = 1

-- syntax: f = fleet.new(name, opts, lock_opts, host)
-- The fleet state of a cache (opts: new()'s, checked: redis, fleet_lag,
-- redis_timeout); host: { delete = f(self, key), purge = f(self) }, the
-- cache's changes of the zone alone.  Raises at new()'s caller (fleet.new
-- is called by new() itself).
function _M.new(name, opts, lock_opts, host)
    local connect = opts.redis
    if type(connect) ~= "function" then
        error("opts.redis must be a function", 3)
    end
    if opts.lock ~= nil then
        error("opts.redis excludes opts.lock", 3)
    end
    local lag = opts.fleet_lag
    if lag == nil then
        lag = DEFAULT_LAG
    else
        options.seconds(lag, "opts.fleet_lag", 3, true)
    end
    local timeout = opts.redis_timeout
    if timeout == nil then
        timeout = DEFAULT_TIMEOUT
    else
        options.seconds(timeout, "opts.redis_timeout", 3, true)
    end
    local exptime, wait = options.lock(lock_opts, "opts.lock_opts", 3)
    local base = "shmlock:" .. FORMAT .. ":{" .. name .. "}"
    local zk = name .. "#fleet:"
    return {
        connect = connect,
        timeout = timeout,
        lag = lag,
        lag_ms = lag * 1000,
        host = host,
        client = nil,             -- (outside nginx: fleet_conn's)
        client_pid = nil,
        -- Redis
        log_key = base .. ":log",
        v_prefix = base .. ":v:",
        l_prefix = base .. ":l:",
        w_prefix = base .. ":w:",
        lock_ms = format("%.0f", options.ms(exptime > 0 and exptime
                                             or FOREVER_LOCK)),
        wait = wait,              -- the longest wait for another host's load
        -- the zone (fleet_log, fleet_health)
        k_until = zk .. "until",
        k_read = zk .. "read",
        k_epoch = zk .. "epoch",
        k_cursor = zk .. "cursor",
        k_down = zk .. "down",
        k_probe = zk .. "probe",
        k_demoted = zk .. "demoted",
        k_demotions = zk .. "demotions",
        k_host = zk .. "host",
        token = nil,              -- (host_token's)
        k_log = zk .. "log",      -- the log lock (in the lock zone)
        log_lock_opts = { exptime = 2 * timeout + 10,
                          timeout = 2 * timeout + 1 },
        -- (fleet_health) seconds between two probes of a Redis marked
        -- down: a change made once it is back is seen within fleet_lag
        probe = min(health.PROBE, lag),
    }
end

-- The token of this host's load locks in Redis: one per host and cache
-- (in the zone, "<name>#fleet:host"), not per call.  Only the holder of a
-- key's host lock fetches the key, so the host's token is never two
-- loads' at once; and a fetch whose reply was lost (a timeout) took a
-- lock that the host's next fetch of the key finds its own, instead of
-- every host waiting for it to expire.
local function host_token(self)
    local f = self.fleet
    local tok = f.token
    if not tok then
        local dict = self.dict
        dict:add(f.k_host, new_token())
        tok = dict:get(f.k_host)
        if not tok then
            -- (an ngx.shared dict may evict it: a token of this call's)
            return new_token()
        end
        f.token = tok
    end
    return tok
end

-- a ttl for Redis: whole ms as a string, "0" for never
local function ms_text(ttl)
    if ttl == 0 then
        return "0"
    end
    return format("%.0f", options.ms(ttl))
end

-- The ttl (s) of a value fetched from Redis, from its PTTL: -1 (no
-- expiry) is 0, "never expires"; 0 is a value in the millisecond it
-- expires (Redis expires a key once its time is past, not at it), which
-- must not become "never expires" either: 1 ms.
local function ttl_left(pttl)
    pttl = tonumber(pttl) or -1
    if pttl < 0 then
        return 0
    end
    return max(pttl, 1) / 1000
end

-- a value the fleet has not seen is fresh for fleet_lag at most
local function capped(f, ttl)
    if ttl == 0 or ttl > f.lag then
        return f.lag
    end
    return ttl
end

-- the loader under the host lock alone
local function host_load(self, ttl, neg_ttl, call_loader, loader, ...)
    local value, err, vttl = call_loader(self, ttl, neg_ttl, loader, ...)
    if err then
        return nil, err
    end
    return value, nil, capped(self.fleet, vttl), 3
end

-- a Redis call failed: say so, and mark Redis down for the host
local function broke(self, a, err, reply)
    count(self, "redis_errors")
    conn.put(self.fleet, a, not reply)
    failed(self, err)
end

-- The loader ran with this host holding the key's load lock: its value
-- to Redis (or the lock back).  value, err, ttl, hit_level, refused.
local function loaded_here(self, a, keys, tok, seq, gen, ttl, neg_ttl,
                           call_loader, loader, ...)
    local f = self.fleet
    local log_key, vkey, lkey, wkey, member = keys[1], keys[2], keys[3],
                                              keys[4], keys[5]
    local value, err, vttl = call_loader(self, ttl, neg_ttl, loader, ...)
    local entry, bad
    if not err then
        entry, bad = encode(value, 0, 0)
        if not entry then
            err = "loader returned a value that cannot be cached: " .. bad
        end
    end
    if err then
        local ok, rerr, reply
        ok, rerr, reply, a = conn.script(f, a, scripts.release, lkey, wkey,
                                         tok)
        if ok then
            conn.put(f, a)
        else
            broke(self, a, rerr, reply)
        end
        return nil, err
    end
    local ok, stored, reply
    ok, stored, reply, a = conn.script(f, a, scripts.store, log_key, vkey,
                                       lkey, wkey, member, tok, seq, gen,
                                       entry, ms_text(vttl))
    if not ok then
        broke(self, a, stored, reply)
        return value, nil, capped(f, vttl), 3
    end
    conn.put(f, a)
    succeeded(self)
    -- 0: a set, delete or purge came first: the value is the caller's
    return value, nil, vttl, 3, tonumber(stored) ~= 1
end

-- syntax: value, err, ttl, hit_level, refused, waited_out, mark =
--             fleet.load(self, key, ttl, neg_ttl, call_loader, loader, ...)
-- In place of call_loader(self, ttl, neg_ttl, loader, ...) (value, err,
-- ttl), with the host lock of key held: the value from Redis (hit_level 5)
-- or from the loader (3).  refused: a change came first, keep the value
-- out of the zone.  waited_out: err is the wait for another host's load,
-- not the loader's.  mark (a value from Redis): fleet_log.recheck's, after
-- the value is stored.
function _M.load(self, key, ttl, neg_ttl, call_loader, loader, ...)
    local f = self.fleet
    if not cosockets() then
        count(self, "host_only")
        return host_load(self, ttl, neg_ttl, call_loader, loader, ...)
    end
    if not reachable(self) then
        return host_load(self, ttl, neg_ttl, call_loader, loader, ...)
    end
    local a, err = conn.get(f)
    if not a then
        count(self, "redis_errors")
        failed(self, err)
        return host_load(self, ttl, neg_ttl, call_loader, loader, ...)
    end

    local keys = { f.log_key, f.v_prefix .. key, f.l_prefix .. key,
                   f.w_prefix .. key, "k" .. key }
    local mark = fleet_log.mark(self)
    local tok = host_token(self)
    local deadline = now_ms() + f.wait * 1000
    local waited = false
    while true do
        local ok, r, reply
        ok, r, reply, a = conn.script(f, a, scripts.fetch, keys[1], keys[2],
                                      keys[3], keys[4], keys[5], tok,
                                      f.lock_ms, new_epoch())
        if not ok then
            broke(self, a, r, reply)
            return host_load(self, ttl, neg_ttl, call_loader, loader, ...)
        end
        local what = tonumber(r[1])
        if what == 1 then
            conn.put(f, a)
            succeeded(self)
            local dok, value = decode(r[2])
            if dok then
                return value, nil, ttl_left(r[3]), 5, nil, nil, mark
            end
            -- not ours to read (another format): load it here
            return host_load(self, ttl, neg_ttl, call_loader, loader, ...)
        elseif what == 2 then
            return loaded_here(self, a, keys, tok, r[2], r[3], ttl, neg_ttl,
                               call_loader, loader, ...)
        end

        -- another host is loading: wait for its store (or release), at
        -- most until its lock would expire, then ask again
        if not waited then
            waited = true
            count(self, "fleet_waits")
        end
        local left = deadline - now_ms()
        if left <= 0 then
            conn.put(f, a)
            return nil, "could not acquire lock: timeout (another host "
                        .. "is loading the key)", nil, nil, nil, true
        end
        local block = min(left, max(tonumber(r[3]) or 0, 10))
        block = format("%.0f", max(1, block))
        conn.timeout(a, f.timeout + block / 1000)
        ok, err, reply = conn.call(a, "xread", "BLOCK", block, "STREAMS",
                                   keys[4], r[2])
        conn.timeout(a, f.timeout)
        if not ok and not reply and a.reused and not conn.timed_out(err)
        then
            -- a kept connection that broke under the wait (CLIENT KILL, a
            -- restart, a timeout of the pool) is not Redis down, as for a
            -- script (fleet_conn.script): a new one asks again
            conn.put(f, a, true)
            a, err = conn.get(f)
            if not a then
                count(self, "redis_errors")
                failed(self, err)
                return host_load(self, ttl, neg_ttl, call_loader, loader,
                                 ...)
            end
            ok = true
        end
        if not ok then
            broke(self, a, err, reply)
            return host_load(self, ttl, neg_ttl, call_loader, loader, ...)
        end
    end
end

-- One change in Redis (set: entry and ms; delete: ms "-1").  true; or
-- nil, err (the host's zone changed, Redis did not).
local function change(self, key, entry, ms)
    local f = self.fleet
    if not cosockets() then
        return nil, "redis connection error: no cosockets in the "
                    .. ngx.get_phase() .. " phase" .. HOST_ONLY
    end
    local up, down = reachable(self)
    if not up then
        return nil, tostring(down) .. HOST_ONLY
    end
    local a, err = conn.get(f)
    if not a then
        count(self, "redis_errors")
        failed(self, err)
        return nil, err .. HOST_ONLY
    end
    local ok, res, reply
    if key then
        ok, res, reply, a = conn.script(f, a, scripts.change, f.log_key,
                                        f.v_prefix .. key, f.w_prefix .. key,
                                        "k" .. key, entry, ms, new_epoch(),
                                        _M.LOG_LENGTH)
    else
        ok, res, reply, a = conn.script(f, a, scripts.purge, f.log_key,
                                        new_epoch())
    end
    if not ok then
        broke(self, a, res, reply)
        return nil, res .. HOST_ONLY
    end
    conn.put(f, a)
    succeeded(self)
    return true
end

-- syntax: ok, err = fleet.set(self, key, value, ttl)
function _M.set(self, key, value, ttl)
    local entry = encode(value, 0, 0)    -- (set checked it can)
    return change(self, key, entry, ms_text(ttl))
end

-- syntax: ok, err = fleet.delete(self, key)
function _M.delete(self, key)
    return change(self, key, "", "-1")
end

-- syntax: ok, err = fleet.purge(self)
function _M.purge(self)
    return change(self, nil)
end

return _M
