-- resty.shmlock.cache.fleet_log (internal): how a host learns of the set,
-- delete and purge calls other hosts made: it pulls the change log.
--
-- Every get() of a cache with opts.redis first asks whether the host read
-- the log less than fleet_lag seconds ago: one compare with a number of
-- the cache object (self.hot.fleet_until, zone-clock ms).  When that time has
-- passed, the process looks at the zone ("<name>#fleet:until": when the
-- host's last read stops counting); if the host read the log meanwhile,
-- it takes that time.  Else it takes the host's log lock (resty.shmlock,
-- "<name>#fleet:log" in the lock zone) and reads the log itself: one
-- script (resty.shmlock.cache.fleet_scripts' read), whose answer it
-- applies to the zone:
--
--   the changes after the host's cursor   each key is deleted from the
--                                         zone (and so from every L1: the
--                                         generation words); its next get
--                                         reads Redis
--   a purge after the cursor              every key of the cache deleted
--     (also when the log was trimmed past the cursor, and any purge of a
--     log made again since the host read its own)
--   a log the host cannot trust           every value demoted to stale
--     (no cursor yet, another epoch: the log was made again; a cursor
--     past the log's end: it went back; below what it still holds: it
--     was trimmed past us)
--
-- and the host's view counts from the moment the read was sent, for
-- fleet_lag seconds.  When Redis cannot be read (down, stopped, slow past
-- redis_timeout), the host cannot know what it missed: it demotes every
-- value to stale once per outage (a value loaded during the outage is
-- fresh for fleet_lag only: resty.shmlock.cache.fleet), and asks again
-- after resty.shmlock.cache.fleet_health's probe interval.
--
-- Demoting: each entry of the cache in the zone gets "now" as its logical
-- expiry (its zone lifetime stays, so stale_ttl and resurrect_ttl can
-- still serve it), then the generation words take CHANGED (every L1 copy
-- revalidates against the zone, and finds it stale).  A load in flight
-- that fetched its value from Redis before a demotion must not store it
-- fresh after the walk passed: the demotion counts itself in the zone
-- ("<name>#fleet:demotions") before it walks, such a load reads the count
-- before its fetch and again after its store (recheck), and demotes its
-- key itself when the count moved.  A value from the loader needs no such
-- care (the backend said so), nor does one the walk saw: no generation
-- word takes INVALIDATE, so that loads during an outage, which a demotion
-- may cross, are not cancelled (one loader call per host).

local codec = require "resty.shmlock.cache.codec"
local store = require "resty.shmlock.cache.store"
local stats = require "resty.shmlock.cache.stats"
local conn = require "resty.shmlock.cache.fleet_conn"
local health = require "resty.shmlock.cache.fleet_health"
local scripts = require "resty.shmlock.cache.fleet_scripts"
local resty_lock = require "resty.shmlock"
local nginx = require "resty.shmlock.internal.nginx"
local random = require "resty.shmlock.internal.random"
local now_ms = require("resty.shmlock.internal.clock").now_ms

local tonumber = tonumber
local byte = string.byte
local str_sub = string.sub
local floor = math.floor
local count = stats.count
local gen_bump = store.gen_bump
local header, decode, encode = codec.header, codec.decode, codec.encode
local CHANGED = store.CHANGED

local _M = {}

local ngx = nginx.api()
local YIELDABLE = nginx.YIELDABLE

-- changes one read returns at most; a host further behind reads again,
-- up to PAGES times, then demotes everything instead
local PAGE = 1000
local PAGES = 10
-- when a process that could not sync looks again (ms)
local RETRY_MS = 100
-- buckets a step of the demotion's walk visits (dict:scan's count)
local WALK_STEP = 4096

-- syntax: n = fleet_log.new_epoch(): a random log id, 1 .. 2^46
function _M.new_epoch()
    local b = random.bytes(6)
    local x = 0
    for i = 1, 6 do
        x = x * 256 + byte(b, i)
    end
    return x % 70368744177664 + 1
end
local new_epoch = _M.new_epoch

-- syntax: ok = fleet_log.cosockets(): whether this code may talk to Redis
-- (always outside nginx; inside, in the phases where cosockets work)
local function cosockets()
    return not ngx or YIELDABLE[ngx.get_phase()] == true
end
_M.cosockets = cosockets


-- ---- demotion ----

-- entry s with logical expiry `at` (its value unchanged), or nil
local function expired_copy(s, at)
    local expiry, stamp = header(s)
    if not expiry or (expiry ~= 0 and expiry <= at) then
        return nil
    end
    local ok, value = decode(s)
    if not ok then
        return nil
    end
    return encode(value, at, stamp)
end

local function demote_key(dict, k, at)
    at = at or now_ms()
    local s = dict:get(k)
    if s == nil then
        return
    end
    local s2 = expired_copy(s, at)
    if not s2 then
        return
    end
    local left = dict:ttl(k)
    if left == nil then
        return              -- gone meanwhile
    end
    if dict.cas then
        dict:cas(k, s, s2, left)
    else
        dict:set(k, s2, left)
    end
end

-- syntax: fleet_log.demote(self)
-- Every value of this cache in the zone becomes stale now.
local function demote(self)
    local dict, prefix = self.dict, self.prefix
    local n = #prefix
    dict:incr(self.fleet.k_demotions, 1, 0)
    local at = now_ms()
    local function walk(keys)
        for i = 1, #keys do
            local k = keys[i]
            if str_sub(k, 1, n) == prefix then
                demote_key(dict, k, at)
            end
        end
    end
    if dict.scan then
        local cursor = 0
        repeat
            local keys
            cursor, keys = dict:scan(cursor, WALK_STEP)
            if cursor then
                walk(keys)
            end
        until not cursor or cursor == 0
    else
        walk(dict:get_keys(0) or {})
    end
    gen_bump(self, nil, CHANGED)
    if self.lru then
        self.lru:flush_all()
    end
    count(self, "demotions")
end
_M.demote = demote

-- syntax: mark = fleet_log.mark(self): the demotions so far (load: before
-- its fetch)
function _M.mark(self)
    return self.dict:get(self.fleet.k_demotions) or 0
end

-- syntax: fleet_log.recheck(self, vkey, mark)
-- After a load stored a value fetched from Redis (mark: fleet_log.mark
-- before the fetch): a demotion since then may have walked past the key
-- before the store; the key is demoted now.
function _M.recheck(self, vkey, mark)
    if (self.dict:get(self.fleet.k_demotions) or 0) ~= mark then
        demote_key(self.dict, vkey)
        gen_bump(self, nil, CHANGED)
    end
end


-- ---- reading the log ----

-- Applies one read's answer r (epoch, last, purged, trimmed, then member,
-- score pairs) for a host at (epoch, cursor): the new cursor, and whether
-- the page was full (more changes may follow).
local function apply(self, r, epoch, cursor)
    local f = self.fleet
    local e, last, purged, trimmed = tonumber(r[1]), tonumber(r[2]),
                                     tonumber(r[3]), tonumber(r[4])
    -- a purge we missed comes first: it is known to be newer than every
    -- value here (after our cursor in our log; or in a log made again
    -- since we read ours), and stale copies of purged values must not
    -- be served either
    if epoch ~= nil and (e == epoch and purged > cursor
                         or e ~= epoch and purged > 0) then
        f.host.purge(self)
        return e, last, false
    end
    if epoch == nil or e ~= epoch or cursor > last or cursor < trimmed then
        demote(self)
        return e, last, false
    end
    local pairs_n = (#r - 4) / 2
    for i = 5, #r, 2 do
        f.host.delete(self, str_sub(r[i], 2))
        cursor = tonumber(r[i + 1])
    end
    if pairs_n >= PAGE then
        return e, cursor, true
    end
    return e, last, false
end

-- Reads the log and applies it (the log lock held).  true; or nil, err
-- when Redis could not be read.
local function pull(self)
    local f = self.fleet
    local dict = self.dict
    local a, err = conn.get(f)
    if not a then
        return nil, err
    end
    local epoch, cursor = dict:get(f.k_epoch), dict:get(f.k_cursor) or 0
    local sent = now_ms()
    for _ = 1, PAGES do
        local ok, r
        ok, r, _, a = conn.script(f, a, scripts.read, f.log_key,
                                  epoch or 0, cursor, PAGE, new_epoch())
        if not ok then
            conn.put(f, a, true)
            return nil, r
        end
        local more
        epoch, cursor, more = apply(self, r, epoch, cursor)
        dict:set(f.k_epoch, epoch)
        dict:set(f.k_cursor, cursor)
        if not more then
            conn.put(f, a)
            count(self, "log_reads")
            dict:set(f.k_read, sent)
            dict:set(f.k_until, sent + f.lag_ms)
            return true
        end
    end
    -- too far behind to catch up change by change
    demote(self)
    dict:delete(f.k_epoch)
    conn.put(f, a)
    return true
end

-- The log lock held: read the log if it is due, or know why not.
local function sync_locked(self)
    local f = self.fleet
    local dict = self.dict
    local now = now_ms()
    local valid = dict:get(f.k_until)
    if valid and valid > now then
        return valid
    end
    if health.reachable(self) then
        local ok, err = pull(self)
        if ok then
            health.succeeded(self)
            dict:delete(f.k_demoted)
            return dict:get(f.k_until) or now
        end
        count(self, "redis_errors")
        health.failed(self, err)
    end
    -- cannot know what we missed: every value stale, once per outage
    if dict:add(f.k_demoted, true) then
        demote(self)
    end
    valid = now_ms() + f.probe * 1000
    dict:set(f.k_until, valid)
    return valid
end

-- syntax: now = fleet_log.sync(self, now)
-- get()'s check (self.hot.fleet_until has passed): the host's view made
-- current, reading the log when the host's last read is fleet_lag old.
-- The clock's time after it.
function _M.sync(self, now)
    local f = self.fleet
    local dict = self.dict
    local valid = dict:get(f.k_until)
    if valid and valid > now then
        self.hot.fleet_until = valid
        return now
    end
    if not cosockets() then
        -- (a phase without cosockets: the host tier alone)
        count(self, "host_only")
        self.hot.fleet_until = now + RETRY_MS
        return now
    end
    local lock = resty_lock:new(self.lock_dict, f.log_lock_opts)
    local elapsed
    if lock and dict:get(f.k_demoted) then
        -- Redis is down for the host and its values are stale already:
        -- the process probing Redis may wait a whole redis_timeout, and
        -- nobody else waits for it (a hit would wait as long, once per
        -- probe interval, for as long as the outage lasts)
        elapsed = lock:trylock(f.k_log)
    elseif lock then
        elapsed = lock:lock(f.k_log)
    end
    if not elapsed then
        self.hot.fleet_until = now_ms() + RETRY_MS
        return now_ms()
    end
    valid = sync_locked(self)
    lock:unlock()
    self.hot.fleet_until = valid
    return now_ms()
end

-- syntax: fleet_log.describe(self, res)
-- stats()'s fleet fields, added to res: log_age (seconds since the host's
-- last read of the change log, -1 before the first), redis_down (1 while
-- the host has Redis marked down, else 0).
function _M.describe(self, res)
    local at = self.dict:get(self.fleet.k_read)
    res.log_age = at and floor(now_ms() - at) / 1000 or -1
    res.redis_down = health.down(self) ~= nil and 1 or 0
end

return _M
