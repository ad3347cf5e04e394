-- (2) Dictionary operations outside nginx at 1e3, 1e5 and 1e6 keys: how
-- the cost of an operation grows with the number of keys.
--
-- Keys "key:<i>", number values.  Every operation walks the key set in one
-- shuffled order (random access, each key once per pass); the zone is
-- sized to hold every key without eviction (checked).
--
--   get, set (overwrite), incr    on a full key set
--   delete, add                   alternating passes over the whole set:
--                                 delete every key, then add every key
--
-- usage: luajit dict_size.lua [sizes...]   (default 1000 100000 1000000)

local bench = require "bench"
local shdict = require "resty.shmlock.shdict"

local SECTION = "size"

local sizes = {}
for i = 1, #arg do
    sizes[i] = tonumber(arg[i])
end
if #sizes == 0 then
    sizes = { 1e3, 1e5, 1e6 }
end

bench.log("(2) dictionary ops by key count, ns per op")

local function one_size(n)
    local name = "bench_size_" .. n
    shdict.destroy(name)
    -- 64 bytes per entry here; twice that, plus room for the buckets
    local dict = assert(shdict.open(name, { size = n * 128 + 4 * 1024 * 1024 }))

    local perm = bench.permutation(n, 7919)
    local keys = {}
    for i = 1, n do
        keys[i] = "key:" .. perm[i]
    end
    perm = nil -- luacheck: ignore 311 (the table is garbage before the zone fills)

    for i = 1, n do
        local ok, err, forcible = dict:set(keys[i], i)
        if not ok or forcible then
            error("populating " .. n .. " keys: " .. tostring(err)
                  .. (forcible and " (evicted)" or ""))
        end
    end

    local j = 0
    local tag = "_" .. n

    bench.bench(SECTION, "get" .. tag, function(m)
        for _ = 1, m do
            j = j + 1
            if j > n then j = 1 end
            if not dict:get(keys[j]) then error("miss") end
        end
    end)

    bench.bench(SECTION, "set" .. tag, function(m)
        for _ = 1, m do
            j = j + 1
            if j > n then j = 1 end
            dict:set(keys[j], j)
        end
    end)

    bench.bench(SECTION, "incr" .. tag, function(m)
        for _ = 1, m do
            j = j + 1
            if j > n then j = 1 end
            dict:incr(keys[j], 1)
        end
    end)

    -- the structure alone: a 1e3-key hot subset of this zone (caches hold
    -- it, so what remains is the cost of a bigger table, chains and all)
    if n > 1000 then
        local h = 0
        bench.bench(SECTION, "get_hot" .. tag, function(m)
            for _ = 1, m do
                h = h + 1
                if h > 1000 then h = 1 end
                if not dict:get(keys[h]) then error("miss") end
            end
        end, { note = "1000-key hot subset" })
        bench.bench(SECTION, "set_hot" .. tag, function(m)
            for _ = 1, m do
                h = h + 1
                if h > 1000 then h = 1 end
                dict:set(keys[h], h)
            end
        end, { note = "1000-key hot subset" })
    end

    -- the memory hierarchy alone: a LuaJIT table lookup of the same keys
    -- in the same order
    local tbl = {}
    for i = 1, n do tbl[keys[i]] = i end
    bench.bench(SECTION, "luatable_get" .. tag, function(m)
        for _ = 1, m do
            j = j + 1
            if j > n then j = 1 end
            if not tbl[keys[j]] then error("miss") end
        end
    end, { note = "reference: a Lua table" })
    tbl = nil

    -- delete and add: whole passes, each timed on its own, until a
    -- repetition has done at least `ops` of each
    local ops = bench.quick and 2e5 or 1e6
    local passes = math.max(1, math.ceil(ops / n))
    local now = bench.now
    local del_ns, add_ns = {}, {}
    local function delete_pass()
        for i = 1, n do
            dict:delete(keys[i])
        end
    end
    local function add_pass()
        for i = 1, n do
            if not dict:add(keys[i], i) then error("add failed") end
        end
    end
    delete_pass()           -- warm-up: the JIT compiles both loops
    add_pass()
    for r = 1, bench.reps do
        local td, ta = 0, 0
        for _ = 1, passes do
            local t0 = now()
            delete_pass()
            local t1 = now()
            add_pass()
            local t2 = now()
            td = td + (t1 - t0)
            ta = ta + (t2 - t1)
        end
        del_ns[r] = td * 1e9 / (passes * n)
        add_ns[r] = ta * 1e9 / (passes * n)
    end
    local note = passes * n .. " ops per repetition"
    local med, lo, hi = bench.summary(del_ns)
    bench.result(SECTION, "delete" .. tag, "ns", med, lo, hi, #del_ns, note)
    med, lo, hi = bench.summary(add_ns)
    bench.result(SECTION, "add" .. tag, "ns", med, lo, hi, #add_ns, note)

    local ok, err = dict:verify()
    if not ok then
        error("zone corrupt after the benchmark: " .. tostring(err))
    end
    keys = nil
    shdict.destroy(name)
    collectgarbage()
end

for _, n in ipairs(sizes) do
    one_size(n)
end
