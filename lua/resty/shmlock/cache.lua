-- resty.shmlock.cache: a two-level cache whose misses are loaded once per
-- host, however many processes ask at the same time.
--
--     local cache = require "resty.shmlock.cache"
--     local c = assert(cache.new("users", { ttl = 60 }))
--     local user, err, hit_level = c:get("user:42", nil, load_user, 42)
--
-- L1 is a per-process lua-resty-lrucache; L2 is a shmlock zone shared by
-- every nginx worker and plain LuaJIT process on the host; L3 is the
-- caller's loader.  On an L1 and L2 miss, get() takes a resty.shmlock lock
-- on the key, looks at L2 again (another process may have loaded the value
-- while we waited), calls the loader only if the value is still missing,
-- stores it and releases the lock.  The waiters wake on that release and
-- find the value in L2.
--
-- An L2 entry is one string: a type tag (1 byte), the logical expiry
-- (8 bytes: a double, milliseconds of the zone's monotonic clock, 0 =
-- never), a version stamp (8 bytes: a double, unique per write) and the
-- payload.  The zone may keep the entry longer than its logical expiry
-- (stale_ttl, resurrect_ttl): such a stale entry is served while one
-- caller refreshes it (stale_ttl), or again when a loader fails
-- (resurrect_ttl).
--
-- Coherence.  Every change of a key (set, delete, a loader's store,
-- purge) bumps a generation word of the zone after it, chosen by the
-- hash of the zone key (shmlock.h: shmlock_zone_gens; 1024 words, so a
-- change costs the keys that share its word a revalidation, not a
-- reload).  An L1 entry keeps the word's value read before its zone read;
-- an L1 hit compares it with the word (one load through a pointer into
-- the mapping).  A word that moved sends the hit to the zone: the same
-- stamp there keeps the L1 entry (revalidated), another stamp or no
-- entry is a fresh read or a miss.  In an ngx.shared dict (no
-- generation words) one counter key plays the part, read by a dict get
-- per hit.
--
-- Invalidation.  A load must not store what it read before a set, delete
-- or purge that returned meanwhile (its value would be served for its
-- whole ttl).  Those three add INVALIDATE to the word before their zone
-- write (and CHANGED after it, as every change does); a load reads the
-- word before it calls the loader, and stores only if the word's high
-- half (the invalidations) is the same, checked in the store's critical
-- section (shmlock_dict_store_guarded): a change that began first wins,
-- and one that begins later overwrites the store.  Another load's store
-- in the same word moves the low half only, and cancels nothing.

-- Under PUC Lua the cache is not there yet: its codec is string.buffer's,
-- its L1 lua-resty-lrucache's (FFI) and its loads take the lock, none of
-- them bound there (docs/every-lua.md, "What differs").
if not require("resty.shmlock.internal.core").ffi then
    error("resty.shmlock.cache needs LuaJIT for now: under " .. _VERSION
          .. " its codec (string.buffer), its L1 (lua-resty-lrucache) and the "
          .. "lock its loads take are not available; the dictionary "
          .. "(resty.shmlock.shdict) is: docs/every-lua.md", 2)
end

local ffi = require "ffi"
local buffer = require "string.buffer"
local C = require "resty.shmlock.lib"
local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local version = require "resty.shmlock.version"
local nginx = require "resty.shmlock.internal.nginx"
local options = require "resty.shmlock.internal.options"
local now_ms = require("resty.shmlock.internal.clock").now_ms
local nginx_wait = require "resty.shmlock.lock.nginx_wait"

local ffi_new = ffi.new
local ffi_copy = ffi.copy
local ffi_cast = ffi.cast
local type = type
local tostring = tostring
local tonumber = tonumber
local error = error
local pcall = pcall
local pairs = pairs
local setmetatable = setmetatable
local getmetatable = getmetatable
local str_byte = string.byte
local str_find = string.find
local str_gsub = string.gsub
local str_sub = string.sub
local min = math.min
local band = bit.band
local seconds_ok = options.seconds_ok
local at_least_ms = options.at_least_ms
local MAX_SECONDS = options.MAX_SECONDS
local MAX_TEXT = options.MAX_TEXT

local _M = { _VERSION = version }
local mt = { __index = _M }

local DEFAULT_TTL = 30
local DEFAULT_NEG_TTL = 5
local DEFAULT_L1_SIZE = 1000

-- type tags.  Entries of 0.1.0 (no stamp, a 9-byte header) had the tags
-- "-ftnsT": such an entry (an ngx.shared dict keeps its contents across
-- `nginx -s reload`) is a miss, replaced at the next load.
local T_NIL = "_"
local T_FALSE = "<"
local T_TRUE = ">"
local T_NUMBER = "#"
local T_STRING = "$"
local T_TABLE = "@"
local OLD_TAGS = {}
for c in ("-ftnsT"):gmatch(".") do
    OLD_TAGS[str_byte(c)] = true
end
local B_NIL, B_FALSE, B_TRUE = str_byte(T_NIL), str_byte(T_FALSE),
                               str_byte(T_TRUE)
local B_NUMBER, B_STRING, B_TABLE = str_byte(T_NUMBER), str_byte(T_STRING),
                                    str_byte(T_TABLE)
local HEADER = 17

-- the L1 marker of a cached nil (lrucache cannot hold nil)
local NIL = {}

-- scratch space, allocated once; no call below yields while using it
local buf = buffer.new()
local dbl = ffi_new("double[1]")
local u8p = ffi.typeof("const uint8_t *")

local ngx = nginx.api()

local GEN_MASK = C.SHMLOCK_GEN_WORDS - 1
local CHANGED = 1               -- added to the word after every change
local INVALIDATE = 65536        -- and this before a set, delete or purge
local INVALIDATIONS = 0xffff0000
local MAX_L1_TTL = MAX_SECONDS


-- Version stamps: a double below 2^53, unique per write on the host:
-- this process's pid (< 2^22) above a 31-bit serial that starts at a
-- random point (a pid reused after a crash does not restart at the
-- same serial).  The pid is read at each write: a forked child has its
-- own.
local serial = math.floor(tonumber(C.shmlock_now_us()) % 2147483648)

local function new_stamp()
    serial = serial + 1
    if serial >= 2147483648 then
        serial = 0
    end
    return C.shmlock_self_pid() * 2147483648 + serial
end


-- Debian's lua-resty-lrucache reads ngx.now once, when it loads, and needs
-- nothing else from ngx.  Outside nginx we load it in an environment whose
-- ngx.now is the zone's clock, so no global `ngx` ever appears (other
-- modules take a global ngx to mean "inside nginx").  Its ttl is not what
-- expires our L1 entries, though (inside nginx its clock is ngx.now, the
-- wall clock): see set_l1.
local function load_lrucache()
    if ngx then
        return require "resty.lrucache"
    end

    local path, err = package.searchpath("resty.lrucache", package.path)
    if not path then
        error("resty.shmlock.cache: cannot find resty.lrucache "
              .. "(Debian package lua-resty-lrucache):" .. err, 3)
    end
    local chunk, lerr = loadfile(path)
    if not chunk then
        error("resty.shmlock.cache: cannot load " .. path .. ": " .. lerr, 3)
    end
    local shim = { now = function() return now_ms() / 1000 end }
    setfenv(chunk, setmetatable({ ngx = shim }, { __index = _G }))
    local ok, mod = pcall(chunk, "resty.lrucache")
    if not ok then
        error("resty.shmlock.cache: cannot load " .. path .. ": "
              .. tostring(mod), 3)
    end
    return mod
end

local lrucache   -- loaded by the first new() that wants an L1


-- Encoding: returns the L2 string, or nil and why the value cannot be
-- stored.  string.buffer raises on what it cannot serialise (functions,
-- userdata, most cdata, inside a table): caught here.
local function encode_table(value)
    buf:encode(value)
end

local function encode(value, expiry, stamp)
    buf:reset()
    local typ = type(value)
    if typ == "string" then
        buf:put(T_STRING)
    elseif typ == "number" then
        buf:put(T_NUMBER)
    elseif typ == "boolean" then
        buf:put(value and T_TRUE or T_FALSE)
    elseif value == nil then
        buf:put(T_NIL)
    elseif typ == "table" then
        buf:put(T_TABLE)
    else
        return nil, "cannot cache a " .. typ
    end

    dbl[0] = expiry
    buf:putcdata(dbl, 8)
    dbl[0] = stamp
    buf:putcdata(dbl, 8)

    if typ == "string" then
        buf:put(value)
    elseif typ == "number" then
        dbl[0] = value
        buf:putcdata(dbl, 8)
    elseif typ == "table" then
        local ok, err = pcall(encode_table, value)
        if not ok then
            buf:reset()
            -- string.buffer's message, without the position in this file
            -- it carries ("cache.lua:158: too deep to serialize")
            return nil, "cannot serialise the table: "
                        .. str_gsub(tostring(err), "^[^\n]-:%d+: ", "", 1)
        end
    end
    return buf:get()
end


local function decode_table()
    return buf:decode()
end

-- an entry's expiry (ms; 0 = never) and stamp; nil if s is not one of
-- ours, nil, true for an entry of 0.1.0
local function header(s)
    if type(s) ~= "string" then
        return nil
    end
    if OLD_TAGS[str_byte(s, 1)] then
        return nil, true
    end
    if #s < HEADER then
        return nil
    end
    local p = ffi_cast(u8p, s)
    ffi_copy(dbl, p + 1, 8)
    local expiry = dbl[0]
    ffi_copy(dbl, p + 9, 8)
    return expiry, dbl[0]
end

-- Returns ok, value, expiry (ms; 0 = never); nil, err for a string that
-- is not one of ours.
local function decode(s)
    local expiry = header(s)
    if not expiry then
        return nil, "not a cache entry"
    end
    local p = ffi_cast(u8p, s)
    local tag = p[0]

    if tag == B_STRING then
        return true, s:sub(HEADER + 1), expiry
    elseif tag == B_NUMBER and #s == HEADER + 8 then
        ffi_copy(dbl, p + HEADER, 8)
        return true, dbl[0], expiry
    elseif tag == B_TRUE then
        return true, true, expiry
    elseif tag == B_FALSE then
        return true, false, expiry
    elseif tag == B_NIL then
        return true, nil, expiry
    elseif tag == B_TABLE then
        buf:set(s)
        buf:skip(HEADER)
        local ok, value = pcall(decode_table)
        buf:reset()
        if ok and type(value) == "table" then
            return true, value, expiry
        end
    end
    return nil, "not a cache entry"
end

-- syntax: entry = cache.decode_entry(s)
-- For tools that read a zone (shmlock get): what an L2 string holds,
-- { value = v, expiry = ms (zone clock; 0: never), stamp = n,
--   writer_pid = pid }, or nil if s is not a cache entry of this version.
function _M.decode_entry(s)
    local ok, value, expiry = decode(s)
    if not ok then
        return nil
    end
    local _, stamp = header(s)
    return { value = value, expiry = expiry, stamp = stamp,
             writer_pid = math.floor(stamp / 2147483648) }
end


-- Option checks: programmer misuse raises, naming the option, at the level
-- of the caller of the public function.  A ttl is at most MAX_SECONDS
-- (1e12: infinity and larger would reach the zone as garbage).
local function check_ttl(v, what, level, positive)
    if type(v) ~= "number" then
        error(what .. " must be a number", level + 1)
    end
    if positive then
        if not (v > 0) then -- luacheck: ignore 581 (false for NaN too)
            error(what .. " must be > 0", level + 1)
        end
    elseif not (v >= 0) then -- luacheck: ignore 581 (NaN)
        error(what .. " must be >= 0", level + 1)
    end
    if v > MAX_SECONDS then
        error(what .. " must be <= " .. MAX_TEXT, level + 1)
    end
end

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

-- a zone given by name (opened, or created, in the default directory) or
-- as an object: a zone, or anything with ngx.shared.DICT's get, get_stale,
-- set, delete, incr and get_keys (an ngx.shared dict inside nginx)
local function resolve_dict(dict, what)
    if type(dict) == "string" then
        local zone, err = shdict.open(dict)
        if not zone then
            return nil, "could not open zone \"" .. dict .. "\": " .. err
        end
        return zone
    end
    if type(dict) == "table" and dict.get and dict.get_stale and dict.set
       and dict.delete and dict.incr and dict.get_keys
    then
        return dict
    end
    error(what .. " must be a zone or a zone name", 4)
end


-- new()'s options; any other raises (a misspelt option would otherwise
-- be ignored silently)
local OPTIONS = {
    dict = true, lock_dict = true, lock_opts = true, lock = true, ttl = true,
    neg_ttl = true, resurrect_ttl = true, stale_ttl = true, l1_size = true,
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


-- level 3: new's caller
local function check_option_names(opts)
    for k in pairs(opts) do
        if not OPTIONS[k] then
            local hint = MLCACHE_OPTIONS[k]
            if hint then
                error("opts." .. k .. " is an option of lua-resty-mlcache, "
                      .. "not of resty.shmlock.cache: " .. hint, 3)
            end
            error("unknown option opts." .. tostring(k), 3)
        end
    end
end


-- the numeric options of new(); level 3: new's caller
local function ttl_option(opts, field, default, positive)
    local v = opts[field]
    if v == nil then
        return default
    end
    check_ttl(v, "opts." .. field, 3, positive)
    return v
end

local function check_lock_options(opts)
    local factory = opts.lock
    if factory ~= nil then
        if type(factory) ~= "function" then
            error("opts.lock must be a function", 3)
        end
        if opts.lock_dict ~= nil or opts.lock_opts ~= nil then
            error("opts.lock excludes opts.lock_dict and opts.lock_opts", 3)
        end
    end
    -- checked now, before any zone is opened, and named as the caller
    -- wrote them: "opts.lock_opts must be a table", "opts.lock_opts.timeout
    -- must be >= 0", ...
    options.lock(opts.lock_opts, "opts.lock_opts", 3)
end

local function l1_option(opts)
    local size = opts.l1_size
    if size == nil then
        return DEFAULT_L1_SIZE
    end
    if type(size) ~= "number" then
        error("opts.l1_size must be a number", 3)
    end
    if not (size >= 0) or size % 1 ~= 0 then -- luacheck: ignore 581 (NaN)
        error("opts.l1_size must be an integer >= 0", 3)
    end
    return size
end

-- the value zone and the lock zone; nil, err if one cannot be opened or
-- the lock cannot be made there
local function open_dicts(name, opts)
    local dict, err = resolve_dict(opts.dict == nil and name or opts.dict,
                                   "opts.dict")
    if not dict then
        return nil, err
    end
    local lock_dict = dict
    if opts.lock_dict ~= nil then
        lock_dict, err = resolve_dict(opts.lock_dict, "opts.lock_dict")
        if not lock_dict then
            return nil, err
        end
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


-- ---- statistics ----

-- Each process counts in its cache object and adds its counts to the
-- zone (incr of "<name>#stats:<counter>"): at most every STATS_FLUSH ms,
-- checked on every path but the L1 hit (which only adds 1 to a number in
-- C memory: a table store would cost the hit more); inside nginx also
-- from a timer every STATS_FLUSH ms (started by the worker's first
-- counted event; at the worker's exit it flushes once more); and in
-- stats().
local COUNTERS = { "hits_l1", "hits_l2", "misses", "loads", "loader_errors",
                   "lock_waits", "stale", "refreshes" }
_M.COUNTERS = COUNTERS     -- (shmlock stat shows them in this order)
local STATS_FLUSH = 1000   -- ms

local function new_counts()
    local t = {}
    for i = 1, #COUNTERS do
        t[COUNTERS[i]] = 0
    end
    return t
end

-- A process forked from the one that made the cache (nginx workers from
-- the master) starts its own counts: those it inherited are its
-- parent's.  (Its L1 hits before its first other event go with them.)
local function adopt_counts(self)
    local pid = C.shmlock_self_pid()
    if self.counts_pid ~= pid then
        self.counts_pid = pid
        local counts = self.counts
        for i = 1, #COUNTERS do
            counts[COUNTERS[i]] = 0
        end
        self.l1_hits[0] = 0
    end
end

-- adds this process's counts to the zone; nil, err if one could not be
-- (it is kept for the next flush)
local function flush_stats(self)
    adopt_counts(self)
    local counts = self.counts
    local dict, prefix = self.dict, self.stats_prefix
    local err
    -- the L1 hits are counted in their own field (the hit's one store)
    counts.hits_l1 = counts.hits_l1 + self.l1_hits[0]
    self.l1_hits[0] = 0
    for i = 1, #COUNTERS do
        local name = COUNTERS[i]
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

-- Inside nginx: the caches that counted something in this worker (weak:
-- a cache nobody uses any more goes), flushed by one timer per worker.
local counting = setmetatable({}, { __mode = "k" })
local timer_pid = false

local function flush_timer()
    for c in pairs(counting) do
        flush_stats(c)
    end
end

local function start_flush_timer()
    local pid = C.shmlock_self_pid()
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

local function count(self, name)
    adopt_counts(self)
    local counts = self.counts
    counts[name] = counts[name] + 1
    if now_ms() - self.flushed >= STATS_FLUSH then
        flush_stats(self)
    end
    if ngx then
        counting[self] = true
        start_flush_timer()
    end
end


-- syntax: c, err = cache.new(name, opts?)
-- (cache:new(name, opts?) works too)
function _M.new(a, b, c)
    local name, opts = a, b
    if a == _M then
        name, opts = b, c
    end
    if type(name) ~= "string" or C.shmlock_zone_name_ok(name, #name) ~= 1
    then
        error("name must be 1-64 characters of [A-Za-z0-9_.-], "
              .. "not starting with '.'", 2)
    end
    if opts == nil then
        opts = {}
    elseif type(opts) ~= "table" then
        error("opts must be a table", 2)
    end
    check_option_names(opts)

    local ttl = ttl_option(opts, "ttl", DEFAULT_TTL)
    local neg_ttl = ttl_option(opts, "neg_ttl", DEFAULT_NEG_TTL)
    local resurrect_ttl = ttl_option(opts, "resurrect_ttl", false, true)
    local stale_ttl = ttl_option(opts, "stale_ttl", 0)
    local l1_size = l1_option(opts)
    check_lock_options(opts)

    local dict, lock_dict = open_dicts(name, opts)
    if not dict then
        return nil, lock_dict
    end

    local lru = false
    if l1_size > 0 then
        lrucache = lrucache or load_lrucache()
        lru = lrucache.new(l1_size)
    end

    -- a zone's generation words; an ngx.shared dict has none (gen_key)
    local zone = type(dict) == "table" and dict._zone or false
    local gens = zone and C.shmlock_zone_gens(zone) or false

    return setmetatable({
        name = name,
        dict = dict,
        lock_dict = lock_dict,
        lock_opts = opts.lock_opts,
        lock_factory = opts.lock,
        lru = lru,
        ttl = ttl,
        neg_ttl = neg_ttl,
        resurrect_ttl = resurrect_ttl,
        stale_ttl = stale_ttl,
        zone = zone,
        gens = gens,
        counts = new_counts(),
        l1_hits = ffi_new("double[1]"),
        counts_pid = C.shmlock_self_pid(),
        flushed = now_ms(),
        stats_prefix = name .. "#stats:",
        -- names have no ':' or '#': the key spaces cannot collide
        prefix = name .. ":",
        lock_prefix = name .. "#lock:",
        gen_key = name .. "#gen",
    }, mt)
end


-- ---- generation words ----

-- the generation word of zone key vkey
local function slot_of(vkey)
    return band(C.shmlock_hash(vkey, #vkey), GEN_MASK)
end

-- The word's value, read before the zone is (sequentially consistent: a
-- zone read after it cannot see an older state than the word says).
local function gen_read(self, slot)
    local zone = self.zone
    if zone then
        return tonumber(C.shmlock_zone_gen_add(zone, slot, 0))
    end
    return self.dict:get(self.gen_key) or 0
end

-- adds delta (CHANGED after a change, INVALIDATE before a set, delete or
-- purge) to the word of this slot (nil: every slot): the word's new value
-- (true for every slot); nil, err when the counter key of an ngx.shared
-- dict could not be incremented (the change is not announced)
local function gen_bump(self, slot, delta)
    local zone = self.zone
    if not zone then
        local n, err = self.dict:incr(self.gen_key, delta, 0)
        if not n then
            return nil, "could not announce the change: " .. tostring(err)
        end
        return n
    elseif slot then
        return tonumber(C.shmlock_zone_gen_add(zone, slot, delta))
    end
    for i = 0, GEN_MASK do
        C.shmlock_zone_gen_add(zone, i, delta)
    end
    return true
end

-- the zone write of a load (the word's value `gen` read before its loader
-- ran): true; false when a set, delete or purge began since (nothing
-- written); nil, err.  An ngx.shared dict has no conditional store: its
-- counter is read just before the store, so a change in the window of that
-- one call may still be overwritten.
local function guarded_set(self, vkey, slot, gen, s, exptime)
    local dict = self.dict
    local ok, err
    if self.zone then
        ok, err = dict:_set_guarded(vkey, s, exptime, nil, slot,
                                    INVALIDATIONS, gen)
        if err == "changed" then
            return false
        end
    else
        local now = dict:get(self.gen_key) or 0
        if (now - now % INVALIDATE) ~= (gen - gen % INVALIDATE) then
            return false
        end
        ok, err = dict:set(vkey, s, exptime)
    end
    if not ok then
        return nil, err
    end
    return true
end


-- the zone expiry of an entry with logical ttl `ttl`: a stale copy stays
-- `extra` more seconds (stale_ttl + resurrect_ttl).  At most MAX_SECONDS,
-- and never below 1 ms but for 0: an ngx.shared dict would truncate it to
-- 0, never expires (our zones round it up by themselves).
local function zone_exptime(ttl, extra)
    if ttl ~= 0 and extra > 0 then
        ttl = min(ttl + extra, MAX_SECONDS)
    end
    return at_least_ms(ttl)
end

local function extra_ttl(stale_ttl, resurrect_ttl)
    return stale_ttl + (resurrect_ttl or 0)
end

-- An L1 entry: the value (NIL for nil), the generation word's slot and
-- the value it had before the zone read, the zone entry's stamp, and its
-- expiry `exp` (ms of the zone's clock, monotonic; MAX_L1_TTL ahead for a
-- value that never expires).  get() checks exp at every hit: lrucache's
-- own ttl (what is left of the value's ttl, given too, so that lrucache
-- drops expired entries) runs by ngx.now inside nginx, the wall clock,
-- which may step back by hours.  That clock read (an FFI call) also keeps
-- the JIT from hoisting the generation word's load out of a loop of hits.
local function set_l1(self, key, value, remaining, slot, gen, stamp)
    local lru = self.lru
    if lru then
        if value == nil then
            value = NIL
        end
        local ttl = remaining or MAX_L1_TTL
        lru:set(key, { v = value, slot = slot, gen = gen, stamp = stamp,
                       exp = now_ms() + ttl * 1000 },
                ttl)
    end
end

-- the L2 string of value with logical ttl `ttl`, or nil and err
local function entry(value, ttl, stamp)
    local expiry = 0
    if ttl > 0 then
        expiry = now_ms() + ttl * 1000
    end
    return encode(value, expiry, stamp)
end

-- Stores value in L2 (with logical ttl `ttl`, kept `extra` seconds
-- longer), bumps the key's generation word, and puts the value in L1.
-- true, or nil and err ("cannot cache a ..." errors: see entry).  A
-- load's store gives `loaded`, the word read before its loader ran: when
-- a set, delete or purge began since, it stores nothing, here or in L1,
-- and returns false.
local function store(self, key, vkey, value, ttl, extra, loaded)
    local stamp = new_stamp()
    local s, err = entry(value, ttl, stamp)
    if not s then
        return nil, err, true
    end
    local slot = slot_of(vkey)
    local gen = gen_read(self, slot)
    local ok
    if loaded then
        ok, err = guarded_set(self, vkey, slot, loaded, s,
                              zone_exptime(ttl, extra))
        if ok == false then
            return false
        end
    else
        ok, err = self.dict:set(vkey, s, zone_exptime(ttl, extra))
    end
    if not ok then
        return nil, "could not store the value: " .. tostring(err)
    end
    -- Our L1 copy takes the word after our bump only if nobody else bumped
    -- it since our read; else the word before our write (another process
    -- may have written after us, and bumped first): our next hit then
    -- revalidates.
    local bumped, berr = gen_bump(self, slot, CHANGED)
    if not bumped then
        return nil, berr
    end
    if bumped == (gen + CHANGED) % 4294967296 then
        gen = bumped
    end
    set_l1(self, key, value, ttl > 0 and ttl or nil, slot, gen, stamp)
    return true
end

-- An L2 lookup.  Returns found, value, err, stale, kept: found is true for
-- a fresh entry (copied into L1 for the rest of its ttl; `old`, an L1
-- entry of the key, is kept when the zone still has its stamp: kept).  An entry past
-- its ttl but within stale_ttl (> 0) seconds of it is returned with found
-- false and stale true.
local function fetch(self, key, vkey, stale_ttl, old)
    local slot = old and old.slot or slot_of(vkey)
    local gen = gen_read(self, slot)
    local s, err = self.dict:get(vkey)
    if s == nil then
        return false, nil, err
    end
    local expiry, stamp = header(s)
    if not expiry then
        if stamp then
            return false        -- 0.1.0's: a miss
        end
        return false, nil, "bad entry in the zone for key \"" .. key
                           .. "\": not a cache entry"
    end

    local remaining
    if expiry > 0 then
        remaining = expiry - now_ms()
        if remaining <= 0 then
            if stale_ttl > 0 and remaining > -stale_ttl * 1000 then
                local ok, value = decode(s)
                if ok then
                    return false, value, nil, true
                end
            end
            return false
        end
        remaining = remaining / 1000
    end

    if old and old.stamp == stamp then
        -- unchanged: the L1 copy is good again
        old.gen = gen
        local value = old.v
        if value == NIL then
            value = nil
        end
        return true, value, nil, false, true
    end
    local ok, value = decode(s)
    if not ok then
        return false, nil, "bad entry in the zone for key \"" .. key .. "\": "
                           .. value
    end
    set_l1(self, key, value, remaining, slot, gen, stamp)
    return true, value
end

-- An entry past its ttl or the zone's (resurrect_ttl): found, value.
local function fetch_stale(self, vkey)
    local s = self.dict:get_stale(vkey)
    if s == nil then
        return false
    end
    local ok, value = decode(s)
    if not ok then
        return false
    end
    return true, value
end

-- The loader failed: with resurrect_ttl, serve the stale value (if the
-- zone still has one) and keep it for resurrect_ttl more seconds.  Only a
-- holder of the key's lock writes it back, as a load's store (`loaded`:
-- the word read before the loader ran): not over a change made since.
local function resurrect(self, key, vkey, resurrect_ttl, stale_ttl, loaded)
    if not resurrect_ttl then
        return false
    end
    local found, value = fetch_stale(self, vkey)
    if not found then
        return false
    end
    if loaded then
        store(self, key, vkey, value, resurrect_ttl,
              extra_ttl(stale_ttl, resurrect_ttl), loaded)
    end
    return true, value
end

-- the position error() gives to a line of this file: "^<file>:%d+: "
local HERE = "^" .. str_gsub(debug.getinfo(1, "S").short_src, "%p", "%%%0")
             .. ":%d+: "

-- the factory's answer (called from Lua, so that a constructor it
-- tail-calls blames a line of this file: see new_lock)
local function call(factory, key)
    local lock, err = factory(key)
    return lock, err
end

-- A lock for key, or nil and err.  A factory that raises raises through
-- get(): a misuse its constructor blames on the factory's line shows there;
-- one whose factory tail-called the constructor (`return redis_lock.new(
-- ...)`: the factory's frame is gone, and the blame lands on our call)
-- shows at the line of the get() call.
local function new_lock(self, key, level)
    local factory = self.lock_factory
    if not factory then
        return resty_lock:new(self.lock_dict, self.lock_opts)
    end
    local ok, lock, err = pcall(call, factory, key)
    if not ok then
        if type(lock) == "string" and str_find(lock, HERE) then
            -- level 3 from load_miss: new_lock <- load_miss (tail-called
            -- by get, in its frame) <- get's caller; 4 from refresh
            error(str_gsub(lock, HERE, "", 1), level)
        end
        error(lock, 0)
    end
    if not lock then
        return nil, err or "opts.lock returned no lock"
    end
    return lock
end

-- what the loader returned, as value, err, ttl (err set on failure)
local function loaded(ok, value, err, ttl, neg_ttl, lttl)
    if not ok then
        return nil, "loader threw an error: " .. tostring(value)
    end
    if value == nil and err ~= nil then
        return nil, err
    end
    if lttl ~= nil then
        if not seconds_ok(lttl) then
            return nil, "loader returned a bad ttl (a number from 0 to "
                        .. MAX_TEXT .. " expected)"
        end
        return value, nil, lttl
    end
    return value, nil, value == nil and neg_ttl or ttl
end

-- Inside nginx, a miss that finds the key being loaded must not wait for
-- the lock alone: every waiter would then take the lock in turn just to
-- find the value.  It waits for the lock or the value, whichever comes
-- first: the lock's own wait (resty.shmlock.lock.nginx_wait, every wait
-- inside nginx and its deadline rule), which looks for the value at every
-- poll and is woken by the loader's release in its worker; for a lock
-- factory's lock, that module's poll of trylock and the value.  elapsed
-- when the lock is ours; nil, "loaded" once the value is in the zone;
-- nil, err otherwise.
local function poll_lock(self, lock, lkey, key, vkey)
    local function loaded_now()
        local found, _, ferr = fetch(self, key, vkey, 0)
        return found or ferr ~= nil
    end
    if lock._lock_unless then
        local elapsed, err = lock:_lock_unless(lkey, loaded_now)
        if err == "done" then
            return nil, "loaded"
        end
        return elapsed, err
    end
    local start = now_ms()
    return nginx_wait.poll(function()
        local elapsed, err = lock:trylock(lkey)
        if elapsed then
            return true, (now_ms() - start) / 1000
        end
        if err ~= "timeout" then
            return true, nil, err
        end
        if loaded_now() then
            return true, nil, "loaded"
        end
        return false
    end, tonumber(lock.timeout) or 5)
end

-- With the key's lock held: calls the loader, stores its value and
-- releases the lock.  value, nil, 3; or, when the loader failed, with
-- keep_stale (a refresh: the stale value stays as it is) nil, err; else
-- the resurrected value, nil, 4 (resurrect_ttl) or nil, err.
local function run_loader(self, key, vkey, lock, ttl, neg_ttl, resurrect_ttl,
                          stale_ttl, keep_stale, loader, ...)
    count(self, "loads")
    -- what a set, delete or purge from now on must find changed
    local gen = gen_read(self, slot_of(vkey))
    local ok, lvalue, lerr, lttl = pcall(loader, ...)
    local value, err, vttl = loaded(ok, lvalue, lerr, ttl, neg_ttl, lttl)
    if err == nil then
        local bad
        ok, err, bad = store(self, key, vkey, value, vttl,
                             extra_ttl(stale_ttl, resurrect_ttl), gen)
        -- false: a change began while the loader ran; its value is the
        -- caller's, not the cache's
        if ok or ok == false then
            lock:unlock()
            return value, nil, 3
        end
        if bad then
            err = "loader returned a value that cannot be cached: " .. err
        end
    end
    count(self, "loader_errors")

    local found
    if not keep_stale then
        found, value = resurrect(self, key, vkey, resurrect_ttl, stale_ttl,
                                 gen)
    end
    lock:unlock()
    if found then
        count(self, "stale")
        return value, nil, 4
    end
    return nil, err
end

-- An L1 and L2 miss: one loader call per key across the host.
local function load_miss(self, key, vkey, ttl, neg_ttl, resurrect_ttl,
                         stale_ttl, loader, ...)
    count(self, "misses")
    local lock, err = new_lock(self, key, 3)
    if not lock then
        return nil, "could not create lock: " .. tostring(err)
    end

    local lkey = self.lock_prefix .. key
    local elapsed
    if ngx and resty_lock.can_sleep() and lock.trylock then
        elapsed, err = poll_lock(self, lock, lkey, key, vkey)
    else
        elapsed, err = lock:lock(lkey)
    end
    if elapsed ~= 0 then
        count(self, "lock_waits")
    end

    -- while we waited, another process may have loaded the value
    local found, value, ferr = fetch(self, key, vkey, 0)
    if found or ferr then
        if elapsed then
            lock:unlock()
        end
        if ferr then
            return nil, ferr
        end
        count(self, "hits_l2")
        return value, nil, 2
    end

    if not elapsed then
        found, value = resurrect(self, key, vkey, resurrect_ttl, stale_ttl,
                                 nil)
        if found then
            count(self, "stale")
            return value, nil, 4
        end
        return nil, "could not acquire lock: " .. tostring(err)
    end

    return run_loader(self, key, vkey, lock, ttl, neg_ttl, resurrect_ttl,
                      stale_ttl, false, loader, ...)
end

-- The background refresh of a stale entry, in a timer of the worker whose
-- request found it stale; the key's lock is already ours.
local function refresh_timer(premature, self, key, vkey, lock, ttl, neg_ttl,
                             resurrect_ttl, stale_ttl, loader, ...)
    if premature then
        lock:unlock()
        return
    end
    local _, err = run_loader(self, key, vkey, lock, ttl, neg_ttl,
                              resurrect_ttl, stale_ttl, true, loader, ...)
    if err then
        ngx.log(ngx.WARN, "resty.shmlock.cache \"", self.name, "\": could ",
                "not refresh the stale value of \"", key, "\" (served ",
                "until its stale_ttl runs out): ", err)
    end
end

-- A stale entry was found: the caller that takes the key's lock (without
-- waiting) refreshes it, inside nginx in a timer (the caller does not
-- wait), outside nginx at once.  Returns a fresh value and its hit_level
-- when this caller has one (it refreshed, or someone just had), else
-- nothing: serve the stale value.
local function refresh(self, key, vkey, ttl, neg_ttl, resurrect_ttl,
                       stale_ttl, loader, ...)
    local lock = new_lock(self, key, 4)
    if not lock or not lock.trylock then
        return
    end
    if not lock:trylock(self.lock_prefix .. key) then
        return
    end
    -- refreshed since we looked?
    local found, value, ferr = fetch(self, key, vkey, 0)
    if found or ferr then
        lock:unlock()
        if found then
            return value, 2
        end
        return
    end
    count(self, "refreshes")

    if ngx then
        local ok, err = ngx.timer.at(0, refresh_timer, self, key, vkey, lock,
                                     ttl, neg_ttl, resurrect_ttl, stale_ttl,
                                     loader, ...)
        if not ok then
            lock:unlock()
            ngx.log(ngx.WARN, "resty.shmlock.cache \"", self.name, "\": ",
                    "could not start the refresh of \"", key, "\": ", err)
        end
        return
    end

    local level
    value, ferr, level = run_loader(self, key, vkey, lock, ttl, neg_ttl,
                                    resurrect_ttl, stale_ttl, true, loader,
                                    ...)
    if ferr == nil then
        return value, level
    end
end

-- per-call options: ttl, neg_ttl, resurrect_ttl, stale_ttl (level: get's
-- caller)
local function call_opts(self, opts)
    if type(opts) ~= "table" then
        error("opts must be a table", 3)
    end
    local ttl, neg_ttl, resurrect_ttl = opts.ttl, opts.neg_ttl,
                                        opts.resurrect_ttl
    local stale_ttl = opts.stale_ttl
    if stale_ttl == nil then
        stale_ttl = self.stale_ttl
    else
        check_ttl(stale_ttl, "opts.stale_ttl", 3)
    end
    if ttl == nil then
        ttl = self.ttl
    else
        check_ttl(ttl, "opts.ttl", 3)
    end
    if neg_ttl == nil then
        neg_ttl = self.neg_ttl
    else
        check_ttl(neg_ttl, "opts.neg_ttl", 3)
    end
    if resurrect_ttl == nil then
        resurrect_ttl = self.resurrect_ttl
    else
        check_ttl(resurrect_ttl, "opts.resurrect_ttl", 3, true)
    end
    return ttl, neg_ttl, resurrect_ttl, stale_ttl
end


-- syntax: value, err, hit_level = c:get(key, opts?, loader, ...)
-- hit_level: 1 (L1), 2 (L2), 3 (the loader ran), 4 (a stale value served:
-- stale_ttl while one caller refreshes it, or resurrect_ttl because the
-- loader failed or the lock timed out)
function _M.get(self, key, opts, loader, ...)
    check_self(self, 2)
    check_key(key, 2)
    if type(loader) ~= "function" then
        error("loader must be a function", 2)
    end

    local lru = self.lru
    local old
    if lru then
        old = lru:get(key)
        if old and old.exp <= now_ms() then
            -- expired by the monotonic clock (see set_l1)
            lru:delete(key)
            old = nil
        end
        if old then
            -- the hit: one load of the key's generation word
            local gens = self.gens
            local gen
            if gens then
                gen = gens[old.slot]
            else
                gen = self.dict:get(self.gen_key) or 0
            end
            if gen == old.gen then
                local hits = self.l1_hits
                hits[0] = hits[0] + 1
                local value = old.v
                if value == NIL then
                    return nil, nil, 1
                end
                return value, nil, 1
            end
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
            self.l1_hits[0] = self.l1_hits[0] + 1
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
        if select(2, header(s)) then
            return nil          -- 0.1.0's: absent
        end
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
        check_ttl(ttl, "ttl", 2)
    end
    local vkey = self.prefix .. key
    -- the loads running now must not store over this value
    local bumped, berr = gen_bump(self, slot_of(vkey), INVALIDATE)
    if not bumped then
        return nil, berr
    end
    local ok, err, bad = store(self, key, vkey, value, ttl,
                               extra_ttl(self.stale_ttl, self.resurrect_ttl))
    if bad then
        error("bad value: " .. err, 2)
    end
    if not ok then
        return nil, err
    end
    return true
end


-- syntax: ok, err = c:delete(key)
-- Removes the key from L2 and from this process's L1; every process's
-- next get misses.
function _M.delete(self, key)
    check_self(self, 2)
    check_key(key, 2)
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


-- syntax: stats, err = c:stats()
-- The counters of every process using this cache (from the zone), this
-- process's own counts added first.  nil, err if the zone cannot be read.
function _M.stats(self)
    check_self(self, 2)
    flush_stats(self)
    local dict, prefix = self.dict, self.stats_prefix
    local res = {}
    for i = 1, #COUNTERS do
        local name = COUNTERS[i]
        local n, err = dict:get(prefix .. name)
        if err then
            return nil, err
        end
        res[name] = n or 0
    end
    return res
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

-- syntax: ok, err = c:purge()
-- Removes every key of this cache from L2 and from every process's L1
-- (each revalidates against the zone at its next hit).
function _M.purge(self)
    check_self(self, 2)
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

return _M
