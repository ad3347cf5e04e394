-- resty.shmlock.cache: a two-level cache whose misses are loaded once per
-- host, however many processes ask at the same time.
--
--     local cache = require "resty.shmlock.cache"
--     local c = assert(cache.new("users", { ttl = 60 }))
--     local user, err, hit_level = c:get("user:42", nil, load_user, 42)
--
-- L1 is a per-process LRU (resty.shmlock.cache.l1); L2 is a shmlock zone
-- shared by every nginx worker and every Lua process on the host; L3 is
-- the caller's loader.  This file is the API; the rest is in cache/:
--
--   codec.lua    the L2 entries (string.buffer's format for tables;
--                serial.lua: the same in plain Lua, under PUC Lua)
--   store.lua    writing and reading both levels, the generation words
--                that keep every process's L1 coherent, invalidation
--   load.lua     a miss: the lock, the loader, stale_ttl's refresh,
--                resurrect_ttl
--   options.lua  new()'s options and a get() call's
--   stats.lua    the counters
--   l1.lua       lua-resty-lrucache under LuaJIT, an LRU in plain Lua
--                under PUC Lua
--   fleet*.lua   with opts.redis, the fleet tier: values shared by every
--                host through Redis, loaded once in the fleet, and the
--                change log that carries set, delete and purge to the
--                other hosts (fleet.lua says how)

local core = require "resty.shmlock.internal.core"
local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local version = require "resty.shmlock.version"
local options = require "resty.shmlock.internal.options"
local now_ms = require("resty.shmlock.internal.clock").now_ms
local codec = require "resty.shmlock.cache.codec"
local store = require "resty.shmlock.cache.store"
local load = require "resty.shmlock.cache.load"
local cache_options = require "resty.shmlock.cache.options"
local stats = require "resty.shmlock.cache.stats"
local l1 = require "resty.shmlock.cache.l1"
local fleet = require "resty.shmlock.cache.fleet"
local fleet_log = require "resty.shmlock.cache.fleet_log"
local names = require "resty.shmlock.internal.names"
local log_event = require("resty.shmlock.internal.log").event

-- inside nginx (asked when this module loads, as every module does)
local ngx = require("resty.shmlock.internal.nginx").api()

local type = type
local tostring = tostring
local error = error
local setmetatable = setmetatable
local getmetatable = getmetatable
local str_sub = string.sub
local seconds = options.seconds
local zone_name_ok = core.zone_name_ok
local zone_gen_add = core.zone_gen_add
local zone_gens = core.zone_gens      -- (LuaJIT only: a pointer to them)
local zone_handle = shdict._zone_handle
local decode = codec.decode
local fetch = store.fetch
local put = store.put
local gen_bump = store.gen_bump
local slot_of = store.slot_of
local extra_ttl = store.extra_ttl
local call_opts = cache_options.call
local load_miss = load.miss
local refresh = load.refresh
local count = stats.count
local fleet_sync = fleet_log.sync
local huge = math.huge
local NIL = store.NIL
local L1_VALUE, L1_EXP, L1_GEN, L1_SLOT = store.L1_VALUE, store.L1_EXP,
    store.L1_GEN, store.L1_SLOT
local CHANGED, INVALIDATE = store.CHANGED, store.INVALIDATE

local _M = { _VERSION = version }
local mt = { __index = _M }

-- syntax: entry = cache.decode_entry(s)
-- For tools that read a zone (shmlock get): what an L2 string holds,
-- { value = v, expiry = ms (zone clock; 0: never), stamp = n,
--   writer_pid = pid }, or nil if s is not a cache entry.
_M.decode_entry = codec.entry

-- the counters of stats(), in the order shmlock stat shows them
_M.COUNTERS = stats.COUNTERS


local function check_self(self, level)
    if getmetatable(self) ~= mt then
        error("bad cache object (use c:method(), not c.method())", level + 1)
    end
end

local function check_key(key, level)
    if type(key) ~= "string" then
        error("key must be a string", level + 1)
    end
end

-- lua_shared_dict names whose use was logged, by cache name
local logged = {}

-- A dict given by name, by the one name rule (resty.shmlock.internal.
-- names): inside nginx a lua_shared_dict's name is that ngx.shared dict
-- (logged once at info: which store a name reaches must not surprise an
-- operator); any other name is a zone, opened or created in the default
-- directory.  Or given as an object: a zone, or anything with ngx.shared.
-- DICT's get, get_stale, set, delete, incr and get_keys (an ngx.shared
-- dict inside nginx).  Returns the dict and what resty.shmlock takes for
-- it (a lua_shared_dict's name: the lock resolves it to that dict); nil,
-- err when a zone cannot be opened.
local function resolve_dict(dict, what, cache_name)
    if type(dict) == "string" then
        local shared = names.lua_shared_dict(ngx, dict)
        if shared then
            local key = cache_name .. "\0" .. dict
            if not logged[key] then
                logged[key] = true
                log_event("info", 'cache "' .. cache_name .. '": ' .. what
                          .. ' "' .. dict .. '" is the lua_shared_dict "'
                          .. dict .. '" (only this nginx shares it)')
            end
            return shared, dict
        end
        local zone, err = shdict.open(dict)
        if not zone then
            return nil, "could not open zone \"" .. dict .. "\": " .. err
        end
        return zone, zone
    end
    if type(dict) == "table" and dict.get and dict.get_stale and dict.set
       and dict.delete and dict.incr and dict.get_keys
    then
        return dict, dict
    end
    error(what .. " must be a zone or a zone name", 4)
end

-- the value dict and the lock's store (the lock dict, or the name of a
-- lua_shared_dict); nil, err if one cannot be opened or the lock cannot
-- be made there.
local function open_dicts(name, opts)
    local dict, lock_dict = resolve_dict(opts.dict == nil and name
                                         or opts.dict, "opts.dict", name)
    if not dict then
        return nil, lock_dict
    end
    local err
    if opts.lock_dict ~= nil then
        local ld, lockable = resolve_dict(opts.lock_dict, "opts.lock_dict",
                                          name)
        if not ld then
            return nil, lockable
        end
        lock_dict = lockable
    end
    if not opts.lock then
        -- a bad lock_dict or lock_opts shows now, not at the first miss
        local lock
        lock, err = resty_lock:new(lock_dict, opts.lock_opts)
        if not lock then
            return nil, "could not create lock: " .. tostring(err)
        end
    end
    return dict, lock_dict
end


local delete_here, purge_here     -- (below: the zone's part of delete, purge)

-- the L1's get function (l1.new: the same for every cache of this
-- interpreter), set by the first new() that makes an L1
local l1_get

-- syntax: c, err = cache.new(name, opts?)
-- (cache:new(name, opts?) works too)
function _M.new(a, b, c)
    local name, opts = a, b
    if a == _M then
        name, opts = b, c
    end
    if type(name) ~= "string" or not zone_name_ok(name) then
        error("name must be 1-64 characters of [A-Za-z0-9_.-], "
              .. "not starting with '.'", 2)
    end
    local o
    opts, o = cache_options.new(opts)
    local fl = false
    if opts.redis ~= nil then
        fl = fleet.new(name, opts, opts.lock_opts,
                       { delete = delete_here, purge = purge_here })
    end

    local dict, lock_dict = open_dicts(name, opts)
    if not dict then
        return nil, lock_dict
    end

    local lru = false
    if o.l1_size > 0 then
        lru, l1_get = l1.new(o.l1_size)
    end

    -- a zone's generation words; an ngx.shared dict has none (gen_key)
    local zone = zone_handle(dict) or false
    local gens = zone and zone_gens and zone_gens(zone) or false

    return setmetatable({
        name = name,
        dict = dict,
        lock_dict = lock_dict,
        lock_opts = opts.lock_opts,
        lock_factory = opts.lock,
        lru = lru,
        ttl = o.ttl,
        neg_ttl = o.neg_ttl,
        resurrect_ttl = o.resurrect_ttl,
        stale_ttl = o.stale_ttl,
        zone = zone,
        counts = stats.new(fl),
        -- the L1 hits' counter; (zone-clock ms) until when this host's
        -- view of the fleet's changes is current: get() pulls the change
        -- log after it; the generation words
        hot = stats.hot(fl and 0 or huge, gens),
        counts_pid = core.self_pid(),
        flushed = now_ms(),
        stats_prefix = name .. "#stats:",
        -- names have no ':' or '#': the key spaces cannot collide
        prefix = name .. ":",
        lock_prefix = name .. "#lock:",
        gen_key = name .. "#gen",
        fleet = fl,
        -- c:get() finds its method here, by one lookup of a key the
        -- object holds: through the metatable it would first miss in
        -- this table, a walk of one chain of its ~25 keys' hash part
        get = _M.get,
    }, mt)
end


-- syntax: value, err, hit_level = c:get(key, opts?, loader, ...)
-- hit_level: 1 (L1), 2 (L2), 3 (the loader ran), 4 (a stale value served:
-- stale_ttl while one caller refreshes it, or resurrect_ttl because the
-- loader failed or the lock timed out), 5 (from Redis: the fleet tier)
function _M.get(self, key, opts, loader, ...)
    check_self(self, 2)
    check_key(key, 2)
    if type(loader) ~= "function" then
        error("loader must be a function", 2)
    end

    local lru = self.lru
    local old, now
    if lru then
        old = l1_get(lru, key)
        if old then
            now = now_ms()
            if old[L1_EXP] <= now then
                -- expired by the monotonic clock (see store.lua's set_l1)
                lru:delete(key)
                old = nil
            end
        end
    end
    local hot = self.hot
    local until_ms = hot.fleet_until
    if until_ms ~= huge then
        -- (opts.redis) the host's view of the fleet's changes, when due.
        -- After the L1 lookup, so that a hit reads the clock once: a sync
        -- that applies changes moves generation words, which the hit is
        -- checked against below.
        now = now or now_ms()
        if now >= until_ms then
            fleet_sync(self, now)
        end
    end
    if old then
        -- the hit: one load of the key's generation word (gens: NULL, ==
        -- nil, or absent when the dict has no such words)
        local gens = hot.gens
        local gen
        if gens ~= nil then
            gen = gens[old[L1_SLOT]]
        elseif self.zone then
            gen = zone_gen_add(self.zone, old[L1_SLOT], 0)
        else
            gen = self.dict:get(self.gen_key) or 0
        end
        if gen == old[L1_GEN] then
            hot.hits = hot.hits + 1
            local value = old[L1_VALUE]
            if value == NIL then
                return nil, nil, 1
            end
            return value, nil, 1
        end
    end

    local ttl, neg_ttl, resurrect_ttl, stale_ttl = self.ttl, self.neg_ttl,
                                                   self.resurrect_ttl,
                                                   self.stale_ttl
    if opts ~= nil then
        ttl, neg_ttl, resurrect_ttl, stale_ttl = call_opts(self, opts)
    end

    local vkey = self.prefix .. key
    local found, value, err, stale, kept = fetch(self, key, vkey, stale_ttl,
                                                 old)
    if found then
        -- an L1 copy the zone confirmed is still an L1 hit
        if kept then
            hot.hits = hot.hits + 1
            return value, nil, 1
        end
        count(self, "hits_l2")
        return value, nil, 2
    end
    if err then
        return nil, err
    end
    if stale then
        local fresh, level = refresh(self, key, vkey, ttl, neg_ttl,
                                     resurrect_ttl, stale_ttl, loader, ...)
        if level then
            if level == 2 then
                count(self, "hits_l2")
            end
            return fresh, nil, level
        end
        count(self, "stale")
        return value, nil, 4
    end
    -- (a tail call: get's frame becomes load_miss's, see new_lock)
    return load_miss(self, key, vkey, ttl, neg_ttl, resurrect_ttl, stale_ttl,
                     loader, ...)
end


-- syntax: ttl, err, value, stale = c:peek(key, stale?)
-- Looks at L2 only, without loading.  ttl: seconds left (0: never
-- expires); nil when absent.  With stale = true, an entry past its ttl
-- that the zone still keeps is returned too, with a negative ttl (seconds
-- since it went stale) and stale = true.
function _M.peek(self, key, stale)
    check_self(self, 2)
    check_key(key, 2)

    local vkey = self.prefix .. key
    local s, err
    if stale then
        s, err = self.dict:get_stale(vkey)
    else
        s, err = self.dict:get(vkey)
    end
    if s == nil then
        if err then
            return nil, err
        end
        return nil
    end
    local ok, value, expiry = decode(s)
    if not ok then
        return nil, "bad entry in the zone for key \"" .. key .. "\": "
                    .. value
    end
    if expiry == 0 then
        return 0, nil, value, false
    end
    local remaining = (expiry - now_ms()) / 1000
    if remaining > 0 then
        return remaining, nil, value, false
    end
    if not stale then
        return nil
    end
    return remaining, nil, value, true
end


-- syntax: ok, err = c:set(key, value, ttl?)
-- Stores in L2 and in this process's L1; every process's next get sees
-- it.  ttl defaults to the cache's ttl (neg_ttl for a nil value).
function _M.set(self, key, value, ttl)
    check_self(self, 2)
    check_key(key, 2)
    if ttl == nil then
        ttl = value == nil and self.neg_ttl or self.ttl
    else
        seconds(ttl, "ttl", 2)
    end
    local vkey = self.prefix .. key
    -- the loads running now must not store over this value
    local bumped, berr = gen_bump(self, slot_of(vkey), INVALIDATE)
    if not bumped then
        return nil, berr
    end
    local ok, err, bad = put(self, key, vkey, value, ttl,
                             extra_ttl(self.stale_ttl, self.resurrect_ttl))
    if bad then
        error("bad value: " .. err, 2)
    end
    if not ok then
        return nil, err
    end
    if self.fleet then
        return fleet.set(self, key, value, ttl)
    end
    return true
end


-- the zone's part of delete(): true, or nil and err
function delete_here(self, key)
    local vkey = self.prefix .. key
    local slot = slot_of(vkey)
    -- the loads running now must not store over the deletion
    local bumped, berr = gen_bump(self, slot, INVALIDATE)
    if not bumped then
        return nil, berr
    end
    local ok, err = self.dict:delete(vkey)
    if not ok then
        return nil, err
    end
    if self.lru then
        self.lru:delete(key)
    end
    bumped, berr = gen_bump(self, slot, CHANGED)
    if not bumped then
        return nil, berr
    end
    return true
end

-- syntax: ok, err = c:delete(key)
-- Removes the key from L2 and from this process's L1; every process's
-- next get misses.
function _M.delete(self, key)
    check_self(self, 2)
    check_key(key, 2)
    local ok, err = delete_here(self, key)
    if not ok then
        return nil, err
    end
    if self.fleet then
        return fleet.delete(self, key)
    end
    return true
end


-- syntax: stats, err = c:stats()
-- The counters of every process using this cache (from the zone), this
-- process's own counts added first.  nil, err if the zone cannot be read.
function _M.stats(self)
    check_self(self, 2)
    local res, err = stats.read(self)
    if res and self.fleet then
        fleet_log.describe(self, res)
    end
    return res, err
end


-- the keys of this cache among keys, deleted; the zone's error, if one
-- stopped it
local function delete_own(self, keys)
    local dict, prefix = self.dict, self.prefix
    local n = #prefix
    for i = 1, #keys do
        local k = keys[i]
        if str_sub(k, 1, n) == prefix then
            local ok, err = dict:delete(k)
            if not ok then
                return err
            end
        end
    end
end

-- buckets a step of purge's walk of a zone visits (dict:scan's count)
local PURGE_STEP = 4096

-- the zone's part of purge(): true, or nil and err
function purge_here(self)
    local dict = self.dict
    -- the loads running now must not store what they read before
    local ok, err = gen_bump(self, nil, INVALIDATE)
    if not ok then
        return nil, err
    end
    if dict.scan then
        local cursor = 0
        repeat
            local keys
            cursor, keys = dict:scan(cursor, PURGE_STEP)
            if not cursor then
                err = keys
                break
            end
            err = delete_own(self, keys)
        until err or cursor == 0
    else
        local keys
        keys, err = dict:get_keys(0)
        if keys then
            err = delete_own(self, keys)
        end
    end
    -- the keys removed so far are gone for every process, error or not
    local _, berr = gen_bump(self, nil, CHANGED)
    if self.lru then
        self.lru:flush_all()
    end
    err = err or berr
    if err then
        return nil, err
    end
    return true
end

-- syntax: ok, err = c:purge()
-- Removes every key of this cache from L2 and from every process's L1
-- (each revalidates against the zone at its next hit).
function _M.purge(self)
    check_self(self, 2)
    local ok, err = purge_here(self)
    if not ok then
        return nil, err
    end
    if self.fleet then
        return fleet.purge(self)
    end
    return true
end

return _M
