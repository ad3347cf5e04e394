-- helpers.cache_cold: many processes miss the same key of a cache at once.
--
-- stampede(c, n, opts) forks n children that wait at a start barrier, then
-- each builds its own view of cache `c` (same zones and options, an empty
-- L1), counts itself as arrived and calls get("k") with a loader that
-- counts its calls in the zone.  The loader first waits until all n
-- children have arrived (so every caller is in flight while it runs,
-- whatever the scheduling), then sleeps opts.loader_sleep seconds.
-- opts.fail: the loader returns nil, "down" instead of "value".
-- opts.slow: a caller served a stale value (hit_level 4) counts as slow
-- when its get() took longer than this many seconds (res.slow_stale).
-- opts.no_lock: the children's caches get a lock that locks nothing (the
-- control: shows the test would see a broken lock); a child then counts
-- itself as arrived in that lock(), after its cache missed, so that every
-- child misses before any loader returns.
--
-- Returns { loader_calls, max_inflight (most loader calls running at the
-- same moment), levels = { [hit_level] = callers }, errors (callers that
-- got "down"), slow_stale, failures = { "child i: ..." } }.

local proc = require "harness.proc"
local cache = require "resty.shmlock.cache"

local _M = {}

local EXPECTED_ERROR = 20

-- locks nothing; counts the caller as arrived
local function no_lock(dict)
    return {
        lock = function()
            dict:incr("stampede:arrived", 1)
            return 0
        end,
        unlock = function() return 1 end,
    }
end

-- the loader: counts calls and the number running at once
local function loader(dict, n, seconds, fail)
    dict:incr("stampede:calls", 1, 0)
    local running = dict:incr("stampede:inflight", 1, 0)
    local max = dict:get("stampede:max") or 0
    while running > max do
        if dict:cas("stampede:max", max, running) then
            break
        end
        max = dict:get("stampede:max") or 0
    end
    local deadline = proc.now() + 20
    while dict:get("stampede:arrived") < n and proc.now() < deadline do
        proc.sleep(0.005)
    end
    proc.sleep(seconds)
    dict:incr("stampede:inflight", -1)
    if fail then
        return nil, "down"
    end
    return "value"
end

local function child(c, n, start, opts)
    if not start:wait_release(20) then
        error("never released")
    end
    local mine
    if opts.no_lock then
        mine = assert(cache.new(c.name, {
            dict = c.dict,
            lock = function() return no_lock(c.dict) end,
            resurrect_ttl = c.resurrect_ttl or nil,
        }))
    else
        mine = assert(cache.new(c.name, {
            dict = c.dict,
            lock_dict = c.lock_dict,
            lock_opts = c.lock_opts,
            resurrect_ttl = c.resurrect_ttl or nil,
            stale_ttl = c.stale_ttl,
        }))
        c.dict:incr("stampede:arrived", 1)
    end
    local t0 = proc.now()
    local value, err, level = mine:get("k", nil, loader, c.dict, n,
                                       opts.loader_sleep or 0, opts.fail)
    if level == 4 and proc.now() - t0 > (opts.slow or 1e9) then
        c.dict:incr("stampede:slow_stale", 1, 0)
    end
    if err == "down" and opts.fail then
        return EXPECTED_ERROR
    end
    if err then
        error("get: " .. tostring(err))
    end
    if value ~= "value" then
        error("get returned " .. tostring(value))
    end
    return level
end

function _M.stampede(c, n, opts)
    local dict = c.dict
    dict:set("stampede:calls", 0)
    dict:set("stampede:inflight", 0)
    dict:set("stampede:max", 0)
    dict:set("stampede:arrived", 0)
    dict:set("stampede:slow_stale", 0)

    local start = proc.pipe()
    local pids = {}
    for i = 1, n do
        pids[i] = proc.spawn(child, c, n, start, opts)
    end
    start:release()
    start:close()

    local res = { levels = {}, errors = 0, failures = {} }
    for i, r in ipairs(proc.wait_all(pids, 60)) do
        if r.how == "exit" and r.code == EXPECTED_ERROR then
            res.errors = res.errors + 1
        elseif r.how == "exit" and r.code >= 1 and r.code <= 4 then
            res.levels[r.code] = (res.levels[r.code] or 0) + 1
        else
            res.failures[#res.failures + 1] = "child " .. i .. ": " .. r.how
                .. " " .. tostring(r.code or r.sig) .. " " .. r.msg
        end
    end
    res.loader_calls = dict:get("stampede:calls")
    res.max_inflight = dict:get("stampede:max")
    res.slow_stale = dict:get("stampede:slow_stale")
    return res
end

return _M
