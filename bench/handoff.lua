-- (3) Contended handoff between 2 processes ping-ponging one key.
--
-- Round r: the holder waits until the other process has announced that it
-- is calling lock(), keeps holding for HOLD (so the waiter is really
-- asleep: in a futex, in flock(2), or in a polling sleep), writes the
-- release time (CLOCK_MONOTONIC, shared by every process) in a shared
-- mapping and unlocks.  The waiter's lock() returns; it reads the clock:
-- the difference is the handoff latency of round r.  The roles swap every
-- round.
--
--   shmlock   resty.shmlock (outside nginx: waiters sleep on the key's
--             futex word and wake on release)
--   flock     flock(2) LOCK_EX, blocking in the kernel
--   polling   resty.lock's algorithm (add + sleep step 0.001, ratio 2,
--             max_step 0.5) over a resty.shmlock.shdict zone, nanosleep
--   futex     bench/floor_futex (C, a futex mutex on a MAP_SHARED word):
--             the floor
--
-- Raw samples (µs, one per line) go to $BENCH_DATA/handoff_<variant>.dat.
--
-- With "semaphore" as its second argument (section 11), it runs instead,
-- in one run and the same way, the handoff of a semaphore's permit
-- (resty.shmlock.semaphore, permits = 1: the waiter sleeps on the key's
-- wait word and wakes on release) and the lock's (shmlock), their
-- repetitions taking turns, under section "sem_handoff".
--
-- usage: luajit handoff.lua path/to/floor_futex [semaphore]

local bench = require "bench"
local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local flock_lock = require "flock_lock"
local polling_lock = require "polling_lock"

local semaphore = require "resty.shmlock.semaphore"

local SEMAPHORE = arg[2] == "semaphore"
local SECTION = SEMAPHORE and "sem_handoff" or "handoff"
local KEY = "bench-handoff"
local HOLD_NS = 100e3
local REPS = bench.quick and 3 or 5
local ROUNDS = bench.quick and 400 or 2000          -- per repetition
local POLL_ROUNDS = bench.quick and 100 or 300      -- they take ~1 ms each

local floor_futex = arg[1]
local data_dir = os.getenv("BENCH_DATA") or "."
local dir = os.getenv("SHMLOCK_DIR") or "/tmp"

-- shared words
local TS, WAITING, ACQ = 0, 1, 2
local SAMPLES = 8
local w = bench.shared_words(SAMPLES + math.max(ROUNDS, POLL_ROUNDS) + 8)

local now_ns = bench.now_ns

local function wait_for(idx, value)
    local deadline = now_ns() + 30e9
    while w[idx] ~= value do
        if now_ns() > deadline then
            error("handoff: timed out waiting for the other process")
        end
    end
end

-- one process of the pair; first = 1 for the one that holds in odd rounds
local function player(first, rounds, make)
    local lock, unlock = make()
    if first == 1 then
        assert(lock())
        w[ACQ] = 0
    end
    for r = 1, rounds do
        if r % 2 == first then
            -- holder: release to a waiter that is asleep by now
            wait_for(WAITING, r)
            bench.spin_ns(HOLD_NS)
            w[TS] = now_ns()
            assert(unlock())
        else
            wait_for(ACQ, r - 1)
            w[WAITING] = r
            if not lock() then
                error("lock failed in round " .. r)
            end
            local t = now_ns()
            w[SAMPLES + r] = t - tonumber(w[TS])
            w[ACQ] = r
        end
    end
    if rounds % 2 == first then
        return
    end
    -- the last acquirer still holds
    assert(unlock())
end

-- runs one repetition; returns the samples in µs
local function one_rep(rounds, make)
    w[TS], w[WAITING], w[ACQ] = 0, 0, -1
    for r = 1, rounds do w[SAMPLES + r] = -1 end
    local pids = {}
    pids[1] = bench.spawn(player, 1, rounds, make)
    pids[2] = bench.spawn(player, 0, rounds, make)
    bench.wait_all(pids)
    local us = {}
    for r = 1, rounds do
        local v = tonumber(w[SAMPLES + r])
        if v < 0 then error("round " .. r .. " has no sample") end
        us[r] = v / 1e3
    end
    return us
end

local function c_rep(rounds)
    local file = os.tmpname()
    local cmd = string.format("%s %d %d > %s", floor_futex, rounds,
                              HOLD_NS, file)
    assert(os.execute(cmd) == 0, "floor_futex failed")
    local us = {}
    for line in io.lines(file) do
        us[#us + 1] = tonumber(line) / 1e3
    end
    os.remove(file)
    assert(#us == rounds, "floor_futex: " .. #us .. " samples")
    return us
end

-- variants: { name, rounds, make } measured together, their
-- repetitions taking turns (one of each, then again)
local function run_together(variants)
    local acc = {}
    for _, v in ipairs(variants) do
        acc[v[1]] = { med = {}, p99 = {}, all = {} }
    end
    for i = 1, REPS do
        for _, v in ipairs(variants) do
            local a = acc[v[1]]
            local us = v[3] and one_rep(v[2], v[3]) or c_rep(v[2])
            local s = bench.sorted(us)
            a.med[i] = bench.median(s)
            a.p99[i] = bench.percentile(s, 99)
            for j = 1, #us do a.all[#a.all + 1] = us[j] end
        end
    end
    return acc
end

local function run(variant, rounds, make, acc)
    acc = acc or run_together({ { variant, rounds, make } })[variant]
    local med, p99, all = acc.med, acc.p99, acc.all
    local note = rounds .. " handoffs per repetition, hold "
                 .. HOLD_NS / 1e3 .. " us"
    local m, lo, hi = bench.summary(med)
    bench.result(SECTION, variant .. "_p50", "us", m, lo, hi, REPS, note)
    m, lo, hi = bench.summary(p99)
    bench.result(SECTION, variant .. "_p99", "us", m, lo, hi, REPS, note)

    local f = assert(io.open(data_dir .. "/" .. SECTION .. "_" .. variant
                             .. ".dat", "w"))
    table.sort(all)
    for i = 1, #all do f:write(string.format("%.3f\n", all[i])) end
    f:close()
end

assert(shdict.open("bench_handoff", { size = "1m" }))

local function make_lock()
    local l = assert(resty_lock:new("bench_handoff", { timeout = 10 }))
    return function() return l:lock(KEY) end,
           function() return l:unlock() end
end

if SEMAPHORE then
    bench.log("(11) handoff of a semaphore's permit vs the lock's, between"
              .. " 2 processes, µs (median and p99 of each repetition)")
    local variants = {
        { "semaphore", ROUNDS, function()
            local s = assert(semaphore:new("bench_handoff",
                                           { permits = 1, timeout = 10 }))
            return function() return s:acquire(KEY) end,
                   function() return s:release() end
        end },
        { "shmlock", ROUNDS, make_lock },
    }
    local acc = run_together(variants)
    for _, v in ipairs(variants) do
        run(v[1], v[2], nil, acc[v[1]])
    end
    shdict.destroy("bench_handoff")
    return
end

bench.log("(3) handoff latency between 2 processes, µs (median and p99"
          .. " of each repetition)")

run("shmlock", ROUNDS, make_lock)

run("flock", ROUNDS, function()
    local l = flock_lock.new(dir .. "/bench-handoff.lock")
    return function() return l:lock() end,
           function() return l:unlock() end
end)

run("polling", POLL_ROUNDS, function()
    local zone = assert(shdict.open("bench_handoff"))
    local l = assert(polling_lock:new(zone, { timeout = 10 }))
    return function() return l:lock(KEY) end,
           function() return l:unlock() end
end)

if floor_futex then
    run("futex", ROUNDS)
else
    bench.log("  futex floor: skipped (no floor_futex program given)")
end

shdict.destroy("bench_handoff")
