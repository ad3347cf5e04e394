-- (8) The cache's L1 hit, outside nginx, one process, JIT on: what
-- coherence costs a hit.
--
--   coherent   resty.shmlock.cache get(), an L1 hit: lrucache get, then
--              one load of the key's generation word in the zone
--   coherent_fleet  the same with opts.redis (BENCH_REDIS_PORT: a Redis),
--              the change log read in the warm-up only
--   unchecked  the L1 hit of 0.1.0 (no coherence), the same argument
--              checks and lrucache get (bench/lib/l1_unchecked.lua)
--   lrucache   lua-resty-lrucache get alone (the floor)
--
-- 1000 keys, taken in turn; values with a ttl (lrucache reads the clock
-- at each get, as the cache's own entries always make it do).

local bench = require "bench"
local shdict = require "resty.shmlock.shdict"
local cache = require "resty.shmlock.cache"
local l1_unchecked = require "l1_unchecked"

local SECTION = "cache_l1"
local NKEYS = 1000
local TTL = 3600

local zone = assert(shdict.open("bench_cache_l1", { size = "4m" }))
local c = assert(cache.new("bench_l1", { dict = zone, ttl = TTL,
                                         l1_size = NKEYS }))

-- with opts.redis (a Redis at BENCH_REDIS_PORT): the same cache with the
-- fleet tier, its change log read in the warm-up only (fleet_lag longer
-- than the run): what is timed is the hit itself
local cf
local redis_port = tonumber(os.getenv("BENCH_REDIS_PORT") or "")
if redis_port then
    local redis = require "redis"
    cf = assert(cache.new("bench_l1f", {
        dict = zone, ttl = TTL, l1_size = NKEYS, fleet_lag = 3600,
        redis = function(timeout)
            return redis.connect("127.0.0.1", redis_port, timeout)
        end,
    }))
end

local keys = {}
for i = 1, NKEYS do
    keys[i] = "key:" .. i
end

local function loader(key)
    return "value of " .. key
end

-- Both caches load every key before either is checked: a load bumps its
-- key's generation word, shared with other keys (1024 words), and so
-- sends those keys' next get to the zone.  Were c checked before cf
-- loaded, c's first timed gets would revalidate, and LuaJIT would record
-- the timed loop's trace along that path: every hit after it would leave
-- the trace at the generation check (a side exit per get, ~10 ns).
for _, x in ipairs{ c, cf } do
    for i = 1, NKEYS do
        assert(x:get(keys[i], nil, loader, keys[i]))
    end
end
for _, x in ipairs{ c, cf } do
    -- every key is an L1 hit now (the first get of each revalidated once)
    for i = 1, NKEYS do
        local v, err, level = x:get(keys[i], nil, error)
        assert(v == "value of " .. keys[i] and err == nil and level == 1,
               "not an L1 hit")
    end
end

-- An unchecked get() up to its L1 hit (bench/lib/l1_unchecked.lua: the
-- cache's argument checks and an lrucache get, with no look at the key's
-- generation word: what an L1 hit costs without coherence)
local old = l1_unchecked.new(c, NKEYS)
local old_lru = old.lru
for i = 1, NKEYS do
    old_lru:set(keys[i], "value of " .. keys[i], TTL)
end

bench.log("(8) the cache's L1 hit, ns per get")

local floor_lru = old_lru
local variants = {
    { "coherent", NKEYS .. " keys in turn", function(n)
        local j = 0
        for _ = 1, n do
            j = j < NKEYS and j + 1 or 1
            c:get(keys[j], nil, loader)
        end
    end },
    { "unchecked", "an L1 hit without coherence", function(n)
        local j = 0
        for _ = 1, n do
            j = j < NKEYS and j + 1 or 1
            old:get(keys[j], nil, loader)
        end
    end },
    { "lrucache", "lua-resty-lrucache get alone", function(n)
        local j = 0
        for _ = 1, n do
            j = j < NKEYS and j + 1 or 1
            floor_lru:get(keys[j])
        end
    end },
}

if cf then
    table.insert(variants, 2, { "coherent_fleet",
                                NKEYS .. " keys in turn, opts.redis set",
                                function(n)
        local j = 0
        for _ = 1, n do
            j = j < NKEYS and j + 1 or 1
            cf:get(keys[j], nil, loader)
        end
    end })
end

-- The variants take turns, one repetition each per round, so that neither
-- the order nor a noisy moment of the machine favours one of them.
local samples, iterations = {}, {}
for _ = 1, bench.reps do
    for _, v in ipairs(variants) do
        local ns, n = bench.measure(v[3], { reps = 1 })
        samples[v[1]] = samples[v[1]] or {}
        table.insert(samples[v[1]], ns[1])
        iterations[v[1]] = n
    end
end
for _, v in ipairs(variants) do
    local med, lo, hi = bench.summary(samples[v[1]])
    bench.result(SECTION, v[1], "ns", med, lo, hi, #samples[v[1]],
                 v[2] .. "; " .. iterations[v[1]] .. " iterations per "
                 .. "repetition, the variants in turn")
end

-- the timed loops were hits: no loader ran, nothing moved, the fleet
-- tier read its log once (in the warm-up)
for _, x in ipairs{ c, cf } do
    for i = 1, NKEYS do
        local _, _, level = x:get(keys[i], nil, error)
        assert(level == 1, "a timed get was not an L1 hit")
    end
end
if cf then
    local st = assert(cf:stats())
    assert(st.log_reads == 1 and st.redis_errors == 0,
           "the fleet tier called Redis in the timed loops")
end
