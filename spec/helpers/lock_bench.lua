-- Figures for resty.shmlock, from the root of the checkout:
--
--     LUA_PATH='lua/?.lua;lua/?/init.lua;spec/?.lua;scripts/lua/?.lua;;' \
--         luajit spec/helpers/lock_bench.lua
--
-- uncontended new+lock+unlock and lock+unlock per second (one process),
-- handoff latency (a waiter asleep on the lock, from the holder's unlock
-- to the waiter holding it), and worst waits of 4 contending processes
-- with and without starvation mode.

local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local env = require "helpers.lock_env"
local harness = require "harness.proc"

local dir = harness.tmpdir()
local zones = 0

local function zone()
    zones = zones + 1
    return assert(shdict.open("bench" .. zones, { dir = dir, size = "4m" }))
end

local function rate(n, f)
    local best = 0
    for _ = 1, 5 do
        local t0 = env.now()
        f(n)
        local r = n / (env.now() - t0)
        best = math.max(best, r)
    end
    return best
end

local function uncontended()
    local dict = zone()
    local reused = rate(2e6, function(n)
        local lock = resty_lock:new(dict)
        for _ = 1, n do
            lock:lock("key")
            lock:unlock()
        end
    end)
    local fresh = rate(2e6, function(n)
        for _ = 1, n do
            local lock = resty_lock:new(dict)
            lock:lock("key")
            lock:unlock()
        end
    end)
    print(("uncontended, one process: lock+unlock %.2f M pairs/s, "
           .. "new+lock+unlock %.2f M/s"):format(reused / 1e6, fresh / 1e6))
end

local function handoff(rounds)
    local dict = zone()
    local proc = env.worker("pingpong", { zone = dict.name, dir = dir,
                                          rounds = rounds, step = 0.2,
                                          max_step = 0.5 })
    dict:set("go", true)
    local lock = resty_lock:new(dict)
    local lat = {}
    for i = 1, rounds do
        assert(lock:lock("lock"))
        dict:set("round", i)
        env.sleep(0.002)
        local released = env.now_us()
        assert(lock:unlock())
        local got = assert(env.wait_for(function()
            return dict:get("got" .. i)
        end))
        lat[i] = (got - released) / 1000
    end
    proc:read("*a")
    proc:close()
    table.sort(lat)
    print(("handoff latency over %d releases: median %.3f ms, p99 %.3f ms, "
           .. "max %.3f ms"):format(rounds, lat[math.ceil(rounds / 2)],
                                    lat[math.ceil(rounds * 0.99)],
                                    lat[rounds]))
end

local function contention(starve_after, hold_us)
    local dict = zone()
    local procs = {}
    for i = 1, 4 do
        procs[i] = env.worker("fair", { zone = dict.name, dir = dir,
                                        secs = 3, hold_us = hold_us,
                                        starve_after = starve_after })
    end
    dict:set("go", true)
    local worst, p99, least, total = 0, 0, math.huge, 0
    for i = 1, 4 do
        local r = assert(env.parse(procs[i]:read("*l")))
        procs[i]:close()
        worst = math.max(worst, r.max_wait)
        p99 = math.max(p99, r.p99)
        least = math.min(least, r.done)
        total = total + r.done
    end
    print(("4 processes, hold %d us, starvation mode %s: worst wait "
           .. "%.1f ms, worst p99 %.2f ms, %d acquisitions (least %d)")
          :format(hold_us, starve_after > 1 and "off" or "on ",
                  worst * 1000, p99 * 1000, total, least))
end

uncontended()
handoff(1000)
for _, hold in ipairs({ 0, 50 }) do
    contention(0.002, hold)
    contention(1e6, hold)
end
harness.rmtree(dir)
