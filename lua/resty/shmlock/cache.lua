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
-- never) and the payload.  The zone may keep the entry longer than its
-- logical expiry (resurrect_ttl): such a stale entry is a miss for get(),
-- but a loader failure can serve it again.

local ffi = require "ffi"
local buffer = require "string.buffer"
local C = require "resty.shmlock.lib"
local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local version = require "resty.shmlock.version"
local nginx = require "resty.shmlock.internal.nginx"
local options = require "resty.shmlock.internal.options"
local now_ms = require("resty.shmlock.internal.clock").now_ms

local ffi_new = ffi.new
local ffi_copy = ffi.copy
local ffi_cast = ffi.cast
local type = type
local tostring = tostring
local tonumber = tonumber
local error = error
local pcall = pcall
local setmetatable = setmetatable
local getmetatable = getmetatable
local str_byte = string.byte
local str_find = string.find
local str_gsub = string.gsub
local min = math.min
local seconds_ok = options.seconds_ok
local at_least_ms = options.at_least_ms
local MAX_SECONDS = options.MAX_SECONDS
local MAX_TEXT = options.MAX_TEXT

local _M = { _VERSION = version }
local mt = { __index = _M }

local DEFAULT_TTL = 30
local DEFAULT_NEG_TTL = 5
local DEFAULT_L1_SIZE = 1000

-- type tags
local T_NIL = "-"
local T_FALSE = "f"
local T_TRUE = "t"
local T_NUMBER = "n"
local T_STRING = "s"
local T_TABLE = "T"
local B_NIL, B_FALSE, B_TRUE = str_byte(T_NIL), str_byte(T_FALSE),
                               str_byte(T_TRUE)
local B_NUMBER, B_STRING, B_TABLE = str_byte(T_NUMBER), str_byte(T_STRING),
                                    str_byte(T_TABLE)
local HEADER = 9

-- the L1 marker of a cached nil (lrucache cannot hold nil)
local NIL = {}

-- scratch space, allocated once; no call below yields while using it
local buf = buffer.new()
local dbl = ffi_new("double[1]")
local u8p = ffi.typeof("const uint8_t *")

local ngx = nginx.api()


-- Debian's lua-resty-lrucache reads ngx.now once, when it loads, and needs
-- nothing else from ngx.  Outside nginx we load it in an environment whose
-- ngx.now is the zone's clock, so no global `ngx` ever appears (other
-- modules take a global ngx to mean "inside nginx").
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

local function encode(value, expiry)
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

    if typ == "string" then
        buf:put(value)
    elseif typ == "number" then
        dbl[0] = value
        buf:putcdata(dbl, 8)
    elseif typ == "table" then
        local ok, err = pcall(encode_table, value)
        if not ok then
            buf:reset()
            return nil, "cannot serialise the table: " .. tostring(err)
        end
    end
    return buf:get()
end


local function decode_table()
    return buf:decode()
end

-- Returns ok, value, expiry (ms; 0 = never); nil, err for a string that
-- is not one of ours.
local function decode(s)
    if type(s) ~= "string" or #s < HEADER then
        return nil, "not a cache entry"
    end
    local p = ffi_cast(u8p, s)
    local tag = p[0]
    ffi_copy(dbl, p + 1, 8)
    local expiry = dbl[0]

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
-- set and delete (an ngx.shared dict inside nginx)
local function resolve_dict(dict, what)
    if type(dict) == "string" then
        local zone, err = shdict.open(dict)
        if not zone then
            return nil, "could not open zone \"" .. dict .. "\": " .. err
        end
        return zone
    end
    if type(dict) == "table" and dict.get and dict.get_stale and dict.set
       and dict.delete
    then
        return dict
    end
    error(what .. " must be a zone or a zone name", 4)
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

    local ttl = ttl_option(opts, "ttl", DEFAULT_TTL)
    local neg_ttl = ttl_option(opts, "neg_ttl", DEFAULT_NEG_TTL)
    local resurrect_ttl = ttl_option(opts, "resurrect_ttl", false, true)
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
        -- names have no ':' or '#': the two key spaces cannot collide
        prefix = name .. ":",
        lock_prefix = name .. "#lock:",
    }, mt)
end


-- the zone expiry of an entry with logical ttl `ttl`: a stale copy stays
-- for resurrect_ttl more seconds.  At most MAX_SECONDS, and never below
-- 1 ms but for 0: an ngx.shared dict would truncate it to 0, never expires
-- (our zones round it up by themselves).
local function zone_exptime(ttl, resurrect_ttl)
    if ttl ~= 0 and resurrect_ttl then
        ttl = min(ttl + resurrect_ttl, MAX_SECONDS)
    end
    return at_least_ms(ttl)
end

local function set_l1(self, key, value, remaining)
    local lru = self.lru
    if lru then
        if value == nil then
            value = NIL
        end
        lru:set(key, value, remaining)
    end
end

-- the L2 string of value with logical ttl `ttl`, or nil and err
local function entry(value, ttl)
    local expiry = 0
    if ttl > 0 then
        expiry = now_ms() + ttl * 1000
    end
    return encode(value, expiry)
end

-- Stores entry s (of value) in L2 and value in L1.  true, or nil and err.
local function store(self, key, vkey, s, value, ttl, resurrect_ttl)
    local ok, err = self.dict:set(vkey, s, zone_exptime(ttl, resurrect_ttl))
    if not ok then
        return nil, "could not store the value: " .. tostring(err)
    end
    set_l1(self, key, value, ttl > 0 and ttl or nil)
    return true
end

-- An L2 lookup.  Returns found, value, err: found is true for a fresh
-- entry (copied into L1 for the rest of its ttl).  With `stale`, an entry
-- past its logical expiry or the zone's is found as well.
local function fetch(self, key, vkey, stale)
    local dict = self.dict
    local s, err
    if stale then
        s, err = dict:get_stale(vkey)
    else
        s, err = dict:get(vkey)
    end
    if s == nil then
        return false, nil, err
    end
    local ok, value, expiry = decode(s)
    if not ok then
        return false, nil, "bad entry in the zone for key \"" .. key .. "\": "
                            .. value
    end
    if stale then
        return true, value
    end

    local remaining
    if expiry > 0 then
        remaining = expiry - now_ms()
        if remaining <= 0 then
            return false
        end
        remaining = remaining / 1000
    end
    set_l1(self, key, value, remaining)
    return true, value
end

-- The loader failed: with resurrect_ttl, serve the stale value (if the
-- zone still has one) and keep it for resurrect_ttl more seconds.  Only a
-- holder of the key's lock writes it back.
local function resurrect(self, key, vkey, resurrect_ttl, holding)
    if not resurrect_ttl then
        return false
    end
    local found, value = fetch(self, key, vkey, true)
    if not found then
        return false
    end
    if holding then
        local s = entry(value, resurrect_ttl)
        if s then
            store(self, key, vkey, s, value, resurrect_ttl, resurrect_ttl)
        end
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
local function new_lock(self, key)
    local factory = self.lock_factory
    if not factory then
        return resty_lock:new(self.lock_dict, self.lock_opts)
    end
    local ok, lock, err = pcall(call, factory, key)
    if not ok then
        if type(lock) == "string" and str_find(lock, HERE) then
            -- level 3: new_lock <- load_miss (tail-called by get, in its
            -- frame) <- get's caller
            error(str_gsub(lock, HERE, "", 1), 3)
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

-- Inside nginx a lock waiter sleeps in ngx.sleep steps that grow (the
-- lock cannot be woken there), so a miss that finds the key being loaded
-- polls instead: every POLL_STEP it looks for the value in the zone (a
-- lock-free read) and tries the lock, until the value is there, the lock
-- is ours (the loader failed: our turn), or the lock's timeout is spent.
local POLL_STEP = 0.001

-- elapsed when the lock is ours; nil, "loaded" once the value is in the
-- zone; nil, err otherwise
local function poll_lock(self, lock, lkey, key, vkey)
    local limit = tonumber(lock.timeout) or 5
    local waited = 0
    local sleep = ngx.sleep
    while true do
        local elapsed, err = lock:trylock(lkey)
        if elapsed then
            return waited
        end
        if err ~= "timeout" then
            return nil, err
        end
        local found, _, ferr = fetch(self, key, vkey)
        if found or ferr then
            return nil, "loaded"
        end
        if waited >= limit then
            return nil, "timeout"
        end
        sleep(POLL_STEP)
        waited = waited + POLL_STEP
    end
end

-- An L1 and L2 miss: one loader call per key across the host.
local function load_miss(self, key, vkey, ttl, neg_ttl, resurrect_ttl,
                         loader, ...)
    local lock, err = new_lock(self, key)
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

    -- while we waited, another process may have loaded the value
    local found, value, ferr = fetch(self, key, vkey)
    if found or ferr then
        if elapsed then
            lock:unlock()
        end
        if ferr then
            return nil, ferr
        end
        return value, nil, 2
    end

    if not elapsed then
        found, value = resurrect(self, key, vkey, resurrect_ttl, false)
        if found then
            return value, nil, 4
        end
        return nil, "could not acquire lock: " .. tostring(err)
    end

    local ok, lvalue, lerr, lttl = pcall(loader, ...)
    local vttl
    value, err, vttl = loaded(ok, lvalue, lerr, ttl, neg_ttl, lttl)
    if err == nil then
        local s
        s, err = entry(value, vttl)
        if s then
            ok, err = store(self, key, vkey, s, value, vttl, resurrect_ttl)
            if ok then
                lock:unlock()
                return value, nil, 3
            end
        else
            err = "loader returned a value that cannot be cached: " .. err
        end
    end

    found, value = resurrect(self, key, vkey, resurrect_ttl, true)
    lock:unlock()
    if found then
        return value, nil, 4
    end
    return nil, err
end

-- per-call options: ttl, neg_ttl, resurrect_ttl (level: get's caller)
local function call_opts(self, opts)
    if type(opts) ~= "table" then
        error("opts must be a table", 3)
    end
    local ttl, neg_ttl, resurrect_ttl = opts.ttl, opts.neg_ttl,
                                        opts.resurrect_ttl
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
    return ttl, neg_ttl, resurrect_ttl
end


-- syntax: value, err, hit_level = c:get(key, opts?, loader, ...)
-- hit_level: 1 (L1), 2 (L2), 3 (the loader ran), 4 (a stale value served
-- because the loader failed or the lock timed out: resurrect_ttl)
function _M.get(self, key, opts, loader, ...)
    check_self(self, 2)
    check_key(key, 2)
    if type(loader) ~= "function" then
        error("loader must be a function", 2)
    end

    local lru = self.lru
    if lru then
        local value = lru:get(key)
        if value ~= nil then
            if value == NIL then
                return nil, nil, 1
            end
            return value, nil, 1
        end
    end

    local ttl, neg_ttl, resurrect_ttl = self.ttl, self.neg_ttl,
                                        self.resurrect_ttl
    if opts ~= nil then
        ttl, neg_ttl, resurrect_ttl = call_opts(self, opts)
    end

    local vkey = self.prefix .. key
    local found, value, err = fetch(self, key, vkey)
    if found then
        return value, nil, 2
    end
    if err then
        return nil, err
    end
    -- (a tail call: get's frame becomes load_miss's, see new_lock)
    return load_miss(self, key, vkey, ttl, neg_ttl, resurrect_ttl, loader,
                     ...)
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
-- Stores in L2 and in this process's L1.  ttl defaults to the cache's ttl
-- (neg_ttl for a nil value).
function _M.set(self, key, value, ttl)
    check_self(self, 2)
    check_key(key, 2)
    if ttl == nil then
        ttl = value == nil and self.neg_ttl or self.ttl
    else
        check_ttl(ttl, "ttl", 2)
    end
    local s, err = entry(value, ttl)
    if not s then
        error("bad value: " .. err, 2)
    end
    return store(self, key, self.prefix .. key, s, value, ttl,
                 self.resurrect_ttl)
end


-- syntax: ok, err = c:delete(key)
-- Removes the key from L2 and from this process's L1.
function _M.delete(self, key)
    check_self(self, 2)
    check_key(key, 2)
    local ok, err = self.dict:delete(self.prefix .. key)
    if not ok then
        return nil, err
    end
    if self.lru then
        self.lru:delete(key)
    end
    return true
end


return _M
