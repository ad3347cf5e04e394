-- (1) Uncontended lock+unlock pairs, outside nginx, one process, JIT on.
--
--   shmlock_new     resty.shmlock: new() + lock() + unlock() per iteration
--   shmlock_reused  resty.shmlock: one object, lock() + unlock()
--   shmlock_reused_lua54, _lua51   the reused pair under PUC Lua 5.4 and
--                   5.1 (bench/puc_pair.lua, a child each)
--   flock           flock(2) LOCK_EX + LOCK_UN on an open file (FFI)
--   redis           SET key token NX PX 30000, then compare-and-delete by
--                   EVALSHA, over loopback to a redis-server of our own
--                   (lua-redis, one connection); BENCH_REDIS_PORT
--
-- The C floor (one compare-exchange on a MAP_SHARED word) is
-- bench/floor_cas.c, run by bench/run.sh.

local bench = require "bench"
local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local flock_lock = require "flock_lock"

local SECTION = "uncont"
local KEY = "bench-uncontended"

local zone = assert(shdict.open("bench_uncont", { size = "1m" }))

bench.log("(1) uncontended lock+unlock, ns per pair")

bench.bench(SECTION, "shmlock_new", function(n)
    for _ = 1, n do
        local lock = resty_lock:new("bench_uncont")
        lock:lock(KEY)
        lock:unlock()
    end
end)

-- a check that the loop did what it says (outside the timed part)
do
    local lock = assert(resty_lock:new("bench_uncont"))
    assert(lock:lock(KEY) == 0)
    assert(resty_lock.inspect(zone, KEY), "the lock is not in the zone")
    assert(lock:unlock() == 1)
    assert(resty_lock.inspect(zone, KEY) == nil)
end

local reused = assert(resty_lock:new("bench_uncont"))
bench.bench(SECTION, "shmlock_reused", function(n)
    for _ = 1, n do
        reused:lock(KEY)
        reused:unlock()
    end
end)

-- the same pair under PUC Lua (the C module's lock object: each method one
-- call of the core), each interpreter a child of this run (issue 33: at
-- least 3 times as fast as flock(2) below)
for _, lua in ipairs { "lua5.4", "lua5.1" } do
    local p = io.popen(lua .. " puc_pair.lua bench_uncont " .. bench.reps
                       .. " 2>&1")
    local line = p:read("*a")
    p:close()
    local ns = {}
    for v in line:gmatch("[%d.]+") do
        ns[#ns + 1] = tonumber(v)
    end
    if #ns == bench.reps then
        local med, lo, hi = bench.summary(ns)
        bench.result(SECTION, "shmlock_reused_" .. lua:gsub("%.", ""), "ns",
                     med, lo, hi, #ns, lua .. ", the C module")
    else
        bench.log("  " .. lua .. ": skipped (" .. line:gsub("\n.*", "")
                  .. ")")
    end
end

local dir = os.getenv("SHMLOCK_DIR") or "/tmp"
local fl = flock_lock.new(dir .. "/bench-flock.lock")
bench.bench(SECTION, "flock", function(n)
    for _ = 1, n do
        fl:lock()
        fl:unlock()
    end
end)
fl:close()

local port = tonumber(os.getenv("BENCH_REDIS_PORT") or "")
if port then
    local redis = require "redis"
    local client = assert(redis.connect("127.0.0.1", port))
    local sha = client:script("load", [[
if redis.call("get", KEYS[1]) == ARGV[1] then
    return redis.call("del", KEYS[1])
end
return 0]])
    local prefix = bench.pid() .. ":"
    local serial = 0
    bench.bench(SECTION, "redis", function(n)
        for _ = 1, n do
            serial = serial + 1
            local token = prefix .. serial
            if not client:set(KEY, token, "NX", "PX", 30000) then
                error("redis lock taken")
            end
            if client:evalsha(sha, 1, KEY, token) ~= 1 then
                error("redis unlock failed")
            end
        end
    end, { start = 10, note = "loopback, one connection" })
    client:quit()
else
    bench.log("  redis: skipped (BENCH_REDIS_PORT not set)")
end
