-- (10) Instructions per operation, counted by callgrind: a figure that does
-- not depend on the machine's mood, for the operations of issues 22 and
-- 33, through the public Lua API, outside nginx: LuaJIT with its traces
-- warm, and PUC Lua 5.4 and 5.1 (the C module's binding).
--
-- For each operation, its interpreter runs this script under
-- `valgrind --tool=callgrind` twice: a loop of N operations and a loop of
-- 0, each after the same warm-up loop (WARM operations: the loop's traces
-- are compiled before the counted loop starts).  The figure is
-- (Ir(N) - Ir(0)) / N: what one more operation costs, everything else
-- (start, library load, zone creation, warm-up, exit) counted in both and
-- gone in the difference.  The key is a variable, read from a table in
-- the loop, as a handler's is (LuaJIT folds a literal key into its trace).
--
-- usage: luajit instructions.lua                 all operations, a table
--        luajit instructions.lua NAME...         only these
--        LUA instructions.lua --child OP N       (one counted run)
--
-- Seeds: LuaJIT seeds its PRNG (string hashes, where machine code goes,
-- so which traces it records) from getrandom(2); INSTR_PRELOAD, the shim
-- bench/fixed_random.c built by run.sh, gives it a fixed seed
-- (FIXED_RANDOM_SEED picks which).  PUC Lua seeds its string hashes from
-- the time and addresses.  A count moves with the seed (a few percent,
-- also with unrelated edits of the Lua modules, which move tables in
-- memory), so each operation is counted INSTR_SEEDS times (3), with
-- seeds 1, 2, ..., and the median is the figure.
--
-- Environment: SHMLOCK_DIR (where the zones go), BENCH_OUT (results for
-- report.lua, section "instr"), INSTR_PRELOAD (the shim), VALGRIND
-- (default valgrind), INSTR_N (default 100000), INSTR_SEEDS (3).

local N = tonumber(os.getenv("INSTR_N") or "") or 100000
local SEEDS = tonumber(os.getenv("INSTR_SEEDS") or "") or 3
local WARM = 5000

-- { id, what, target, at most } (bench/lib/instr_ops.lua)
local OPS = require("instr_ops").OPS


-- ---- the counted run (under callgrind) ----

local function child(op, n)
    local shdict = require "resty.shmlock.shdict"
    local resty_lock = require "resty.shmlock"
    local name = "instr_" .. op
    local zone = assert(shdict.open(name, { size = "1m" }))
    local body, holder
    -- the key, a variable as a handler's is (a literal is folded by
    -- LuaJIT into its trace): read from this table at every operation
    local keys = { ("k"):rep(1) }

    if op == "lock_reused" then
        local lock = assert(resty_lock:new(name))
        body = function(k)
            for _ = 1, k do
                local key = keys[1]
                lock:lock(key)
                lock:unlock()
            end
        end
    elseif op == "lock_new" then
        body = function(k)
            for _ = 1, k do
                local key = keys[1]
                local lock = resty_lock:new(name)
                lock:lock(key)
                lock:unlock()
            end
        end
    elseif op == "trylock_held" then
        -- (referenced to the end: collected, it would release the key)
        holder = assert(resty_lock:new(name))
        assert(holder:lock("k") == 0)
        local lock = assert(resty_lock:new(name))
        body = function(k)
            for _ = 1, k do
                lock:trylock(keys[1])
            end
        end
    elseif op == "set_number" then
        assert(zone:set("k", 1))
        body = function(k)
            for i = 1, k do
                zone:set(keys[1], i)
            end
        end
    elseif op == "get_number" or op == "get_number_ttl" then
        assert(zone:set("k", 12345, op == "get_number_ttl" and 3600 or 0))
        body = function(k)
            for _ = 1, k do
                zone:get(keys[1])
            end
        end
    elseif op == "cache_hit" or op == "cache_hit_fleet" then
        -- an L1 hit; with opts.redis (a Redis at BENCH_REDIS_PORT) and a
        -- fleet_lag longer than the run, the change log is read once, in
        -- the warm-up: what is counted is the hit itself
        local cache = require "resty.shmlock.cache"
        local opts = { dict = zone, ttl = 3600 }
        if op == "cache_hit_fleet" then
            local port = assert(tonumber(os.getenv("BENCH_REDIS_PORT")),
                                "BENCH_REDIS_PORT: a redis-server's port")
            local redis = require "redis"
            opts.redis = function(timeout)
                return redis.connect("127.0.0.1", port, timeout)
            end
            opts.fleet_lag = 3600
        end
        holder = assert(cache.new(name, opts))
        assert(holder:get("k", nil, function() return "v" end) == "v")
        local function loader()
            error("not an L1 hit")
        end
        local c = holder
        body = function(k)
            for _ = 1, k do
                c:get(keys[1], nil, loader)
            end
        end
    elseif op == "cache_hit_unchecked" then
        -- the reference: the same hit without coherence
        -- (bench/lib/l1_unchecked.lua), an lrucache as the cache's
        local cache = require "resty.shmlock.cache"
        holder = assert(cache.new(name, { dict = zone, ttl = 3600 }))
        local old = require("l1_unchecked").new(holder, 10)
        old.lru:set("k", "v", 3600)
        local function loader()
            error("not an L1 hit")
        end
        body = function(k)
            for _ = 1, k do
                old:get("k", nil, loader)
            end
        end
        holder = old
    else
        error("unknown operation " .. tostring(op))
    end

    body(WARM)
    local t0 = os.clock()
    body(n)
    if os.getenv("INSTR_DEBUG") then
        io.stderr:write(op, " ", n, ": ", os.clock() - t0, " s\n")
    end
    -- the loop did what it says
    if op == "trylock_held" then
        assert(holder:owned())
        assert(select(2, resty_lock:new(name):trylock("k")) == "timeout")
    elseif op == "cache_hit_unchecked" then
        assert(select(3, holder:get("k", nil, error)) == 1)
    elseif op:find("^cache_hit") then
        assert(select(3, holder:get("k", nil, error)) == 1)
        local st = holder:stats()
        assert(st.hits_l1 >= n and st.loads + (st.hits_fleet or 0) == 1,
               "not L1 hits")
        assert(op == "cache_hit" or st.log_reads == 1 and st.redis_errors == 0,
               "the fleet tier called Redis in the loop")
    elseif op:find("^get") then
        assert(zone:get("k") == 12345)
    elseif op:find("^lock") then
        assert(resty_lock.inspect(zone, "k") == nil,
               "the loop left the key locked")
    end
    assert(shdict.destroy(name))
end

if arg[1] == "--child" then
    child(arg[2], assert(tonumber(arg[3]), "N"))
    return
end


-- ---- the driver ----

local bench = require "bench"

local valgrind = os.getenv("VALGRIND") or "valgrind"
local script = arg[0]
local tmp = os.getenv("BENCH_DATA") or os.getenv("TMPDIR") or "/tmp"
local preload = os.getenv("INSTR_PRELOAD")
if not preload or preload == "" then
    bench.log("  INSTR_PRELOAD not set: LuaJIT's random seed makes the "
              .. "counts vary from run to run")
    preload = nil
end
if not os.getenv("SHMLOCK_DIR") then
    error("SHMLOCK_DIR: set it to a directory for the benchmark's zones")
end

-- the instructions (Ir) one run of `lua` executes, from callgrind's
-- summary
local function count(lua, op, n, seed)
    local out = string.format("%s/callgrind.%s.%s.%d", tmp, lua, op, n)
    local cmd = string.format(
        "FIXED_RANDOM_SEED=%d %s%s --tool=callgrind --callgrind-out-file=%s "
        .. "%s %s --child %s %d 2>%s.log", seed,
        preload and ("LD_PRELOAD=" .. preload .. " ") or "", valgrind, out,
        lua, script, op, n, out)
    local ok = os.execute(cmd)
    if ok ~= true and ok ~= 0 then
        local log = io.open(out .. ".log")
        error("callgrind run failed: " .. cmd .. "\n"
              .. (log and log:read("*a") or ""))
    end
    local f = assert(io.open(out))
    local ir
    for line in f:lines() do
        ir = tonumber(line:match("^summary:%s*(%d+)")
                      or line:match("^totals:%s*(%d+)")) or ir
    end
    f:close()
    os.remove(out)
    os.remove(out .. ".log")
    return assert(ir, "no summary line in " .. out)
end

local wanted = {}
for i = 1, #arg do
    wanted[arg[i]] = true
end

bench.log("(10) instructions per operation (callgrind, (Ir(%d) - Ir(0)) / %d,"
          .. " after %d operations of warm-up)", N, N, WARM)
bench.log("  %-40s %12s %8s %8s", "operation", "instructions", "target",
          "at most")
-- the median of the per-operation counts over SEEDS seeds, and their range
local function per_op(lua, op)
    local per = {}
    for seed = 1, SEEDS do
        per[seed] = (count(lua, op, N, seed) - count(lua, op, 0, seed)) / N
    end
    table.sort(per)
    return per[math.floor((#per + 1) / 2)], per[1], per[#per]
end

for _, o in ipairs(OPS) do
    local op, what, want, most = o[1], o[2], o[3], o[4]
    local lua = o.lua or "luajit"
    if op == "cache_hit_fleet" and not os.getenv("BENCH_REDIS_PORT") then
        bench.log("  %-40s (no BENCH_REDIS_PORT: not counted)", what)
    elseif next(wanted) == nil or wanted[op] then
        local per, lo, hi = per_op(lua, o.op or op)
        local mark = most and (per <= most and "ok" or "ABOVE") or ""
        bench.log("  %-40s %12.0f %8s %8s  %s", what, per,
                  want and tostring(want) or "-",
                  most and tostring(most) or "-", mark)
        bench.result("instr", op, "Ir", per, lo, hi, SEEDS,
                     what .. (want and ("; target " .. want .. ", at most "
                                        .. most) or ""))
    end
end
