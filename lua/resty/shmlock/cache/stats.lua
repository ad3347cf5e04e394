-- resty.shmlock.cache.stats (internal): the cache's counters.
--
-- Each process counts in its cache object and adds its counts to the
-- zone (incr of "<name>#stats:<counter>"): at most every STATS_FLUSH ms,
-- checked on every path but the L1 hit (which only adds 1 to a number
-- outside any table: a table store would cost the hit more); inside nginx
-- also from a timer every STATS_FLUSH ms (started by the worker's first
-- counted event; at the worker's exit it flushes once more); and in
-- stats().

local core = require "resty.shmlock.internal.core"
local nginx = require "resty.shmlock.internal.nginx"
local now_ms = require("resty.shmlock.internal.clock").now_ms

local pairs = pairs
local setmetatable = setmetatable
local self_pid = core.self_pid

local _M = {}

local COUNTERS = { "hits_l1", "hits_l2", "misses", "loads", "loader_errors",
                   "lock_waits", "stale", "refreshes" }
_M.COUNTERS = COUNTERS     -- (shmlock stat shows them in this order)
-- and those of a cache with opts.redis (resty.shmlock.cache.fleet)
local FLEET_COUNTERS = { "hits_fleet", "fleet_waits", "redis_errors",
                         "demotions", "log_reads", "host_only" }
_M.FLEET_COUNTERS = FLEET_COUNTERS
local STATS_FLUSH = 1000   -- ms

local ngx = nginx.api()

-- the counters of a cache: COUNTERS, and FLEET_COUNTERS with a fleet tier
local function names(self)
    return self.fleet and self.fleet.counters or COUNTERS
end

-- syntax: counts = stats.new(fleet?): every counter at 0 (fleet: the
-- cache has a fleet tier)
function _M.new(fleet)
    local t = {}
    for i = 1, #COUNTERS do
        t[COUNTERS[i]] = 0
    end
    if fleet then
        local all = {}
        for i = 1, #COUNTERS do
            all[i] = COUNTERS[i]
        end
        for i = 1, #FLEET_COUNTERS do
            t[FLEET_COUNTERS[i]] = 0
            all[#COUNTERS + i] = FLEET_COUNTERS[i]
        end
        fleet.counters = all
    end
    return t
end

-- syntax: hot = stats.hot(fleet_until, gens?): the words an L1 hit reads
-- and writes, in one object (one lookup of the cache's table at a hit):
-- hot.hits, the L1 hits' own counter; hot.fleet_until (zone-clock ms:
-- until when this host's view of the fleet's changes is current;
-- math.huge without opts.redis); and hot.gens, the zone's generation
-- words (core.zone_gens), whose word of the key the hit compares (NULL,
-- == nil, for a dict without them).  Under LuaJIT a struct in C memory,
-- which the hit's one store updates; under PUC Lua a table (gens is
-- LuaJIT's only: nil).
if core.ffi then
    local ffi = require "ffi"
    local hot_t = ffi.typeof("struct { double hits; double fleet_until; "
                             .. "volatile uint32_t *gens; }")
    function _M.hot(fleet_until, gens)
        return hot_t(0, fleet_until, gens or nil)
    end
else
    function _M.hot(fleet_until)
        return { hits = 0, fleet_until = fleet_until }
    end
end

-- A process forked from the one that made the cache (nginx workers from
-- the master) starts its own counts: those it inherited are its
-- parent's.  (Its L1 hits before its first other event go with them.)
local function adopt_counts(self)
    local pid = self_pid()
    if self.counts_pid ~= pid then
        self.counts_pid = pid
        local counts = self.counts
        local list = names(self)
        for i = 1, #list do
            counts[list[i]] = 0
        end
        self.hot.hits = 0
    end
end

-- syntax: ok, err = stats.flush(self)
-- Adds this process's counts to the zone; nil, err if one could not be
-- (it is kept for the next flush).
local function flush(self)
    adopt_counts(self)
    local counts = self.counts
    local dict, prefix = self.dict, self.stats_prefix
    local err
    -- the L1 hits are counted in their own field (the hit's one store)
    local hot = self.hot
    counts.hits_l1 = counts.hits_l1 + hot.hits
    hot.hits = 0
    local list = names(self)
    for i = 1, #list do
        local name = list[i]
        local n = counts[name]
        if n ~= 0 then
            local ok, ierr = dict:incr(prefix .. name, n, 0)
            if ok then
                counts[name] = 0
            else
                err = ierr
            end
        end
    end
    self.flushed = now_ms()
    if err then
        return nil, err
    end
    return true
end
_M.flush = flush

-- Inside nginx: the caches that counted something in this worker (weak:
-- a cache nobody uses any more goes), flushed by one timer per worker.
local counting = setmetatable({}, { __mode = "k" })
local timer_pid = false

local function flush_timer()
    for c in pairs(counting) do
        flush(c)
    end
end

local function start_flush_timer()
    local pid = self_pid()
    if timer_pid == pid then
        return
    end
    -- tried once per process: where timers cannot be made (the master's
    -- init phase) the worker's first event starts it
    timer_pid = pid
    local ok, err = ngx.timer.every(STATS_FLUSH / 1000, flush_timer)
    if not ok and ngx.get_phase() ~= "init" then
        ngx.log(ngx.WARN, "resty.shmlock.cache: no timer for the counters ",
                "(they reach the zone with the next miss or stats()): ", err)
    end
end

-- syntax: stats.count(self, name): one event of counter `name`
function _M.count(self, name)
    adopt_counts(self)
    local counts = self.counts
    counts[name] = counts[name] + 1
    if now_ms() - self.flushed >= STATS_FLUSH then
        flush(self)
    end
    if ngx then
        counting[self] = true
        start_flush_timer()
    end
end

-- syntax: res, err = stats.read(self)
-- The counters of every process using this cache (from the zone), this
-- process's own counts added first.
function _M.read(self)
    flush(self)
    local dict, prefix = self.dict, self.stats_prefix
    local res = {}
    local list = names(self)
    for i = 1, #list do
        local name = list[i]
        local n, err = dict:get(prefix .. name)
        if err then
            return nil, err
        end
        res[name] = n or 0
    end
    return res
end

return _M
