-- resty.shmlock.cache.options (internal): the cache's options, those of
-- new() and those of a get() call.  Programmer misuse raises, naming the
-- option, at the level of the caller of the public function.  Times are
-- checked by resty.shmlock.internal.options (a number from 0, or above 0,
-- to 1e12: infinity and larger would reach the zone as garbage).

local options = require "resty.shmlock.internal.options"

local type = type
local error = error
local pairs = pairs
local setmetatable = setmetatable
local tostring = tostring
local seconds = options.seconds

local _M = {}

local DEFAULT_TTL = 30
local DEFAULT_NEG_TTL = 5
local DEFAULT_L1_SIZE = 1000

-- new()'s options; any other raises (a misspelt option would otherwise
-- be ignored silently)
local OPTIONS = {
    dict = true, lock_dict = true, lock_opts = true, lock = true, ttl = true,
    neg_ttl = true, resurrect_ttl = true, stale_ttl = true, l1_size = true,
    -- the fleet tier (checked by resty.shmlock.cache.fleet)
    redis = true, fleet_lag = true, redis_timeout = true,
}

-- lua-resty-mlcache's options of new() that are not ours: what to use
-- instead (docs/migration.md)
local MLCACHE_OPTIONS = {
    lru_size = "use opts.l1_size",
    lru = "use opts.l1_size (the L1 is made here)",
    resty_lock_opts = "use opts.lock_opts",
    shm_locks = "use opts.lock_dict",
    shm_miss = "no equivalent: misses are cached in the values' zone, for "
               .. "opts.neg_ttl",
    ipc_shm = "no equivalent needed: set, delete and purge are seen by "
              .. "every process without IPC",
    ipc = "no equivalent needed: set, delete and purge are seen by every "
          .. "process without IPC",
    l1_serializer = "no equivalent: transform the value in the loader",
    shm_set_tries = "no equivalent: the zone evicts what set may evict "
                    .. "(a value that does not fit is an error of get)",
    debug = "no equivalent",
}


-- level 4 from here: new's caller (new -> options.new -> these)
local function check_option_names(opts)
    for k in pairs(opts) do
        if not OPTIONS[k] then
            local hint = MLCACHE_OPTIONS[k]
            if hint then
                error("opts." .. k .. " is an option of lua-resty-mlcache, "
                      .. "not of resty.shmlock.cache: " .. hint, 4)
            end
            error("unknown option opts." .. tostring(k), 4)
        end
    end
end

local function ttl_option(opts, field, default, positive)
    local v = opts[field]
    if v == nil then
        return default
    end
    seconds(v, "opts." .. field, 4, positive)    -- (no tail call: level)
    return v
end

local function check_lock_options(opts)
    local factory = opts.lock
    if factory ~= nil then
        if type(factory) ~= "function" then
            error("opts.lock must be a function", 4)
        end
        if opts.lock_dict ~= nil or opts.lock_opts ~= nil then
            error("opts.lock excludes opts.lock_dict and opts.lock_opts", 4)
        end
    end
    -- checked now, before any zone is opened, and named as the caller
    -- wrote them: "opts.lock_opts must be a table", "opts.lock_opts.timeout
    -- must be >= 0", ...
    options.lock(opts.lock_opts, "opts.lock_opts", 4)
end

local function l1_option(opts)
    local size = opts.l1_size
    if size == nil then
        return DEFAULT_L1_SIZE
    end
    if type(size) ~= "number" then
        error("opts.l1_size must be a number", 4)
    end
    if not (size >= 0) or size % 1 ~= 0 then -- luacheck: ignore 581 (NaN)
        error("opts.l1_size must be an integer >= 0", 4)
    end
    return size
end

-- syntax: o = options.new(opts)
-- new()'s opts (nil: none), checked (raising at new's caller), with the
-- defaults: { ttl, neg_ttl, resurrect_ttl (false: none), stale_ttl,
-- l1_size }.
function _M.new(opts)
    if opts == nil then
        opts = {}
    elseif type(opts) ~= "table" then
        error("opts must be a table", 3)
    end
    check_option_names(opts)
    local o = {
        ttl = ttl_option(opts, "ttl", DEFAULT_TTL),
        neg_ttl = ttl_option(opts, "neg_ttl", DEFAULT_NEG_TTL),
        resurrect_ttl = ttl_option(opts, "resurrect_ttl", false, true),
        stale_ttl = ttl_option(opts, "stale_ttl", 0),
        l1_size = l1_option(opts),
    }
    check_lock_options(opts)
    return opts, o
end

-- get()'s per-call options; any other raises, as new()'s do
local CALL_OPTIONS = {
    ttl = true, neg_ttl = true, resurrect_ttl = true, stale_ttl = true,
}

-- lua-resty-mlcache's per-call options of get() that are not ours
local MLCACHE_CALL_OPTIONS = {
    l1_serializer = MLCACHE_OPTIONS.l1_serializer,
    shm_set_tries = MLCACHE_OPTIONS.shm_set_tries,
    resty_lock_opts = "no per-call equivalent: the cache's opts.lock_opts "
                      .. "(cache.new)",
}

-- The opts tables whose names were checked (weak keys: a table the
-- caller drops goes with the garbage).  get() looks at opts on an L1 miss
-- only, and a scan (pairs: not compiled by LuaJIT 2.1) on every miss
-- would cost the L2 path its trace; a caller's reused table is scanned
-- once.  A table changed after its first get() is not scanned again.
local checked = setmetatable({}, { __mode = "k" })

-- level 4 from here: get's caller (get -> options.call -> this)
local function check_call_names(opts)
    for k in pairs(opts) do
        if not CALL_OPTIONS[k] then
            local hint = MLCACHE_CALL_OPTIONS[k]
            if hint then
                error("opts." .. k .. " is an option of lua-resty-mlcache's "
                      .. "get, not of resty.shmlock.cache's: " .. hint, 4)
            end
            error("unknown option opts." .. tostring(k), 4)
        end
    end
    checked[opts] = true
end

-- syntax: ttl, neg_ttl, resurrect_ttl, stale_ttl = options.call(self, opts)
-- A get() call's options over the cache's (level: get's caller).
function _M.call(self, opts)
    if type(opts) ~= "table" then
        error("opts must be a table", 3)
    end
    if not checked[opts] then
        check_call_names(opts)
    end
    local ttl, neg_ttl, resurrect_ttl = opts.ttl, opts.neg_ttl,
                                        opts.resurrect_ttl
    local stale_ttl = opts.stale_ttl
    if stale_ttl == nil then
        stale_ttl = self.stale_ttl
    else
        seconds(stale_ttl, "opts.stale_ttl", 3)
    end
    if ttl == nil then
        ttl = self.ttl
    else
        seconds(ttl, "opts.ttl", 3)
    end
    if neg_ttl == nil then
        neg_ttl = self.neg_ttl
    else
        seconds(neg_ttl, "opts.neg_ttl", 3)
    end
    if resurrect_ttl == nil then
        resurrect_ttl = self.resurrect_ttl
    else
        seconds(resurrect_ttl, "opts.resurrect_ttl", 3, true)
    end
    return ttl, neg_ttl, resurrect_ttl, stale_ttl
end

return _M
