-- resty.shmlock.cache.load (internal): the cache's misses: one loader
-- call per key across the host.  On an L1 and L2 miss, get() takes a
-- resty.shmlock lock on the key (or opts.lock's), looks at L2 again
-- (another process may have loaded the value while we waited), calls the
-- loader only if the value is still missing, stores it and releases the
-- lock.  The waiters wake on that release and find the value in L2.  A
-- stale entry (stale_ttl) is refreshed by the one caller that takes the
-- key's lock without waiting; a failed loader may serve the stale value
-- again (resurrect_ttl).

local store = require "resty.shmlock.cache.store"
local stats = require "resty.shmlock.cache.stats"
local fleet = require "resty.shmlock.cache.fleet"
local fleet_log = require "resty.shmlock.cache.fleet_log"
local resty_lock = require "resty.shmlock"
local nginx = require "resty.shmlock.internal.nginx"
local options = require "resty.shmlock.internal.options"
local now_ms = require("resty.shmlock.internal.clock").now_ms
-- (its waits are inside nginx only)
local waits = require "resty.shmlock.lock.wait"

local type = type
local tostring = tostring
local tonumber = tonumber
local error = error
local pcall = pcall
local str_find = string.find
local str_gsub = string.gsub
local seconds_ok = options.seconds_ok
local MAX_TEXT = options.MAX_TEXT
local count = stats.count
local fetch = store.fetch
local fetch_stale = store.fetch_stale
local put = store.put
local gen_read = store.gen_read
local slot_of = store.slot_of
local extra_ttl = store.extra_ttl
local fleet_load = fleet.load
local fleet_recheck = fleet_log.recheck

local _M = {}

local ngx = nginx.api()

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
        put(self, key, vkey, value, resurrect_ttl,
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

-- the loader's call, counted: value, err, ttl (as loaded's)
local function call_loader(self, ttl, neg_ttl, loader, ...)
    count(self, "loads")
    local ok, lvalue, lerr, lttl = pcall(loader, ...)
    return loaded(ok, lvalue, lerr, ttl, neg_ttl, lttl)
end

-- Inside nginx, a miss that finds the key being loaded must not wait for
-- the lock alone: every waiter would then take the lock in turn just to
-- find the value.  It waits for the lock or the value, whichever comes
-- first: the lock's own wait (resty.shmlock.lock.wait, every wait
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
    if resty_lock._is_lock(lock) then
        local elapsed, err = resty_lock._lock_unless(lock, lkey, loaded_now)
        if err == "done" then
            return nil, "loaded"
        end
        return elapsed, err
    end
    local start = now_ms()
    return waits.poll(function()
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

-- With the key's lock held: calls the loader (with opts.redis, the fleet
-- tier: Redis's value, or the loader under the fleet's single flight),
-- stores its value and releases the lock.  value, nil, 3 (5: the value
-- came from Redis); or, when the loader failed, with keep_stale (a
-- refresh: the stale value stays as it is) nil, err; else the
-- resurrected value, nil, 4 (resurrect_ttl) or nil, err.
local function run_loader(self, key, vkey, lock, ttl, neg_ttl, resurrect_ttl,
                          stale_ttl, keep_stale, loader, ...)
    -- what a set, delete or purge from now on must find changed
    local gen = gen_read(self, slot_of(vkey))
    local value, err, vttl, level, refused, waited_out, mark
    if self.fleet then
        value, err, vttl, level, refused, waited_out, mark =
            fleet_load(self, key, ttl, neg_ttl, call_loader, loader, ...)
    else
        value, err, vttl = call_loader(self, ttl, neg_ttl, loader, ...)
        level = 3
    end
    if level == 5 then
        count(self, "hits_fleet")
    end
    if err == nil then
        if refused then
            -- another host's change came first: the value is the
            -- caller's, not the cache's
            lock:unlock()
            return value, nil, level
        end
        local ok, bad
        ok, err, bad = put(self, key, vkey, value, vttl,
                           extra_ttl(stale_ttl, resurrect_ttl), gen)
        -- false: a change began while the loader ran; its value is the
        -- caller's, not the cache's
        if ok or ok == false then
            if ok and mark then
                fleet_recheck(self, vkey, mark)
            end
            lock:unlock()
            return value, nil, level
        end
        if bad then
            err = "loader returned a value that cannot be cached: " .. err
        end
    end
    if not waited_out then
        count(self, "loader_errors")
    end

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

-- syntax: value, err, hit_level = load.miss(self, key, vkey, ttl, neg_ttl,
--                                           resurrect_ttl, stale_ttl,
--                                           loader, ...)
-- (get() tail-calls it: see new_lock's error levels)
_M.miss = load_miss

-- syntax: value, hit_level = load.refresh(self, key, vkey, ttl, neg_ttl,
--                                         resurrect_ttl, stale_ttl,
--                                         loader, ...)
_M.refresh = refresh

return _M
