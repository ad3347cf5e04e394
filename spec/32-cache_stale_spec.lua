-- resty.shmlock.cache: stale-while-revalidate (opts.stale_ttl) outside
-- nginx: an entry past its ttl is served at once while the one caller
-- that takes the key's lock refreshes it.  (Inside nginx, where the
-- refresh runs in a timer: t/31-cache-coherence.t.)

local proc = require "harness.proc"
local fixture = require "helpers.fixture"
local cache = require "resty.shmlock.cache"
local cold = require "helpers.cache_cold"

local pack = table.pack or function(...) -- luacheck: ignore 143
    return { n = select("#", ...), ... }
end

local function raised(f)
    local ok, err = pcall(f)
    assert(not ok, "no error raised")
    return (tostring(err):gsub("^[^:]*:%d+: ", ""))
end

describe("resty.shmlock.cache stale_ttl", function()
    local fx = fixture.new { dir = "test", children = "assert" }
    local zone, locks
    local serial = 0

    before_each(function()
        zone = fx:zone("stale-values", { size = "1m" })
        locks = fx:zone("stale-locks", { size = "1m" })
    end)

    local function new_cache(opts)
        serial = serial + 1
        opts = opts or {}
        opts.dict = zone
        opts.lock_dict = locks
        return assert(cache.new("stale" .. serial, opts))
    end

    -- a loader that counts its calls in calls[1]
    local function counting(calls, ...)
        local ret = pack(...)
        return function()
            calls[1] = calls[1] + 1
            return unpack(ret, 1, ret.n)
        end
    end

    -- key "k" of c loaded with "value" and a ttl of 0.1 s, then stale
    local function make_stale(c)
        assert.same({ n = 3, "value", nil, 3 }, pack(c:get("k", { ttl = 0.1 },
            function() return "value" end)))
        proc.sleep(0.15)
    end

    it("calls the loader once when 50 processes get a stale key at once; "
       .. "the others have the stale value at once", function()
        local c = new_cache({ stale_ttl = 30, lock_opts = { timeout = 30 } })
        make_stale(c)
        local res = cold.stampede(c, 50, { loader_sleep = 1, slow = 0.6 })
        assert.same({}, res.failures)
        assert.equal(1, res.loader_calls)
        assert.equal(1, res.levels[3], "the refresher")
        assert.is_true((res.levels[4] or 0) >= 1, "stale answers")
        -- (a caller that came after the refresh stored its value: the zone)
        assert.equal(49, (res.levels[4] or 0) + (res.levels[2] or 0))
        assert.equal(0, res.slow_stale, "stale answers slower than 0.6 s")
        -- refreshed: fresh for its ttl again
        local ttl = c:peek("k")
        assert.is_true(ttl > 25 and ttl <= 30, tostring(ttl))
    end)

    it("control: without stale_ttl, the 49 others wait for the loader",
       function()
        local c = new_cache({ lock_opts = { timeout = 30 } })
        make_stale(c)
        local res = cold.stampede(c, 50, { loader_sleep = 1, slow = 0.6 })
        assert.same({}, res.failures)
        assert.equal(1, res.loader_calls)
        assert.same({ [2] = 49, [3] = 1 }, res.levels)
    end)

    it("the caller that refreshes has the fresh value (hit_level 3); the "
       .. "next ones too", function()
        local c = new_cache({ stale_ttl = 10 })
        make_stale(c)
        local calls = { 0 }
        assert.same({ n = 3, "new", nil, 3 },
                    pack(c:get("k", nil, counting(calls, "new"))))
        assert.same({ n = 3, "new", nil, 1 },
                    pack(c:get("k", nil, counting(calls, "newer"))))
        assert.equal(1, calls[1])
    end)

    it("serves the stale value, without waiting, while another holds the "
       .. "key's lock", function()
        -- a wait for the lock would last its 60 s timeout: a bound far
        -- from both that timer lag cannot reach
        local c = new_cache({ stale_ttl = 10,
                              lock_opts = { timeout = 60, exptime = 60 } })
        make_stale(c)
        local lock = assert(require("resty.shmlock"):new(locks))
        assert.equal(0, lock:lock(c.name .. "#lock:k"))
        local calls = { 0 }
        local t0 = proc.now()
        assert.same({ n = 3, "value", nil, 4 },
                    pack(c:get("k", nil, counting(calls, "new"))))
        assert.is_true(proc.now() - t0 < 30)
        assert.equal(0, calls[1])
        lock:unlock()
    end)

    it("keeps serving the stale value when the refresh fails, until "
       .. "stale_ttl runs out; then get() loads, blocking", function()
        local c = new_cache({ stale_ttl = 0.4 })
        make_stale(c)
        local calls = { 0 }
        local down = counting(calls, nil, "down")
        assert.same({ n = 3, "value", nil, 4 }, pack(c:get("k", nil, down)))
        assert.same({ n = 3, "value", nil, 4 }, pack(c:get("k", nil, down)))
        assert.equal(2, calls[1], "each stale get tries one refresh")
        local ttl, _, value, stale = c:peek("k", true)
        assert.is_true(ttl < 0 and ttl > -0.4, tostring(ttl))
        assert.same({ "value", true }, { value, stale })
        proc.sleep(0.45)
        -- past ttl + stale_ttl: a miss, the loader's error
        assert.same({ n = 2, nil, "down" }, pack(c:get("k", nil, down)))
        assert.equal(3, calls[1])
        assert.same({ n = 3, "back", nil, 3 },
                    pack(c:get("k", nil, function() return "back" end)))
    end)

    it("leaves resurrect_ttl working past stale_ttl", function()
        -- stale from 0.1 s to 0.3 s after the load: the first get must
        -- come before that end (then the stale value is served); a loaded
        -- machine may be late, so at most 5 caches are tried
        local c, down, first
        for _ = 1, 5 do
            c = new_cache({ stale_ttl = 0.2, resurrect_ttl = 5 })
            local t0 = proc.now()
            make_stale(c)
            down = function() return nil, "down" end
            first = pack(c:get("k", nil, down))
            if proc.now() < t0 + 0.3 then
                break
            end
            first = nil
        end
        assert.same({ n = 3, "value", nil, 4 }, first)
        proc.sleep(0.25)
        -- the blocking load fails: resurrected for resurrect_ttl
        assert.same({ n = 3, "value", nil, 4 }, pack(c:get("k", nil, down)))
        local ttl = c:peek("k")
        assert.is_true(ttl > 4 and ttl <= 5, tostring(ttl))
    end)

    it("keeps zone entries ttl + stale_ttl (+ resurrect_ttl) seconds",
       function()
        local c = new_cache({ ttl = 10, stale_ttl = 20 })
        assert.is_true(c:set("a", "v"))
        local t = zone:ttl(c.prefix .. "a")
        assert.is_true(t > 29 and t <= 30, tostring(t))
        c = new_cache({ ttl = 10, stale_ttl = 20, resurrect_ttl = 5 })
        c:get("b", nil, function() return "v" end)
        t = zone:ttl(c.prefix .. "b")
        assert.is_true(t > 34 and t <= 35, tostring(t))
    end)

    it("takes stale_ttl per get(), 0 turning it off", function()
        local calls = { 0 }
        local c = new_cache({ stale_ttl = 10 })
        make_stale(c)
        assert.same({ n = 3, "new", nil, 3 }, pack(c:get("k",
            { stale_ttl = 0 }, counting(calls, "new"))))
        -- stale again: per-call stale_ttl serves it while refreshing
        c:set("k", "old", 0.05)
        proc.sleep(0.1)
        local lock = assert(require("resty.shmlock"):new(locks))
        assert.equal(0, lock:lock(c.name .. "#lock:k"))
        assert.same({ n = 3, "old", nil, 4 }, pack(c:get("k",
            { stale_ttl = 5 }, counting(calls, "x"))))
        lock:unlock()
        assert.equal(1, calls[1])
    end)

    it("raises on a bad stale_ttl, naming it", function()
        assert.equal("opts.stale_ttl must be a number", raised(function()
            cache.new("stale-bad", { dict = zone, stale_ttl = "1" })
        end))
        assert.equal("opts.stale_ttl must be >= 0", raised(function()
            cache.new("stale-bad", { dict = zone, stale_ttl = -1 })
        end))
        assert.equal("opts.stale_ttl must be <= 1e12", raised(function()
            cache.new("stale-bad", { dict = zone, stale_ttl = math.huge })
        end))
        local c = new_cache()
        assert.equal("opts.stale_ttl must be a number", raised(function()
            c:get("k", { stale_ttl = 0 / 0 }, error)
        end))
    end)
end)
