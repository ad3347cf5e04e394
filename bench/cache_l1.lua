-- (8) The cache's L1 hit, outside nginx, one process, JIT on: what
-- coherence costs a hit.
--
--   coherent   resty.shmlock.cache get(), an L1 hit: lrucache get, then
--              one load of the key's generation word in the zone
--   unchecked  the L1 hit of 0.1.0 (no coherence), the same argument
--              checks and lrucache get, written out here as it was
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

local keys = {}
for i = 1, NKEYS do
    keys[i] = "key:" .. i
end

local function loader(key)
    return "value of " .. key
end

for i = 1, NKEYS do
    assert(c:get(keys[i], nil, loader, keys[i]))
end
-- every key is an L1 hit now (the first get of each revalidated once)
for i = 1, NKEYS do
    local v, err, level = c:get(keys[i], nil, error)
    assert(v == "value of " .. keys[i] and err == nil and level == 1,
           "not an L1 hit")
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

-- the timed loops were hits: no loader ran, nothing moved
for i = 1, NKEYS do
    local _, _, level = c:get(keys[i], nil, error)
    assert(level == 1, "a timed get was not an L1 hit")
end
