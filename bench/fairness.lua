-- (4) Fairness: 3 processes contend for one key for DURATION seconds
-- (10 s; 2 s with BENCH_QUICK=1).  Each loops: lock, hold HOLD, unlock,
-- work THINK outside the lock.  Per process: acquisitions and the worst
-- wait in lock().  Results: the median, min and max over the 3 processes
-- (acquisitions; worst wait) and the worst wait of all.
--
--   shmlock   resty.shmlock
--   flock     flock(2)
--   polling   resty.lock's algorithm over a zone (nanosleep)

local bench = require "bench"
local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local flock_lock = require "flock_lock"
local polling_lock = require "polling_lock"

local SECTION = "fair"
local KEY = "bench-fair"
local NPROC = 3
local DURATION = tonumber(os.getenv("BENCH_FAIR_SECONDS") or "")
                 or (bench.quick and 2 or 10)
local HOLD_NS = 10e3
local THINK_NS = 10e3

local dir = os.getenv("SHMLOCK_DIR") or "/tmp"
local now_ns = bench.now_ns
local spin_ns = bench.spin_ns

-- shared words: [0] start time, then per process i: count, worst wait
local START = 0
local w = bench.shared_words(8 + 2 * NPROC)

local function contender(i, make)
    local lock, unlock = make()
    local count, worst = 0, 0
    local deadline = now_ns() + 30e9
    while w[START] == 0 do
        if now_ns() > deadline then error("no start signal") end
    end
    local start = tonumber(w[START])
    while now_ns() < start do end
    local stop = start + DURATION * 1e9
    while true do
        local t0 = now_ns()
        if t0 >= stop then break end
        local ok, lerr = lock()
        if not ok then error("lock failed: " .. tostring(lerr)) end
        local waited = now_ns() - t0
        if waited > worst then worst = waited end
        count = count + 1
        spin_ns(HOLD_NS)
        local uok, uerr = unlock()
        if not uok then error("unlock failed: " .. tostring(uerr)) end
        spin_ns(THINK_NS)
    end
    w[8 + 2 * i] = count
    w[8 + 2 * i + 1] = worst
end

local function run(variant, make)
    w[START] = 0
    local pids = {}
    for i = 0, NPROC - 1 do
        w[8 + 2 * i], w[8 + 2 * i + 1] = -1, -1
        pids[#pids + 1] = bench.spawn(contender, i, make)
    end
    w[START] = now_ns() + 0.2e9       -- every child is up by then
    bench.wait_all(pids)
    local counts, worsts, list = {}, {}, {}
    for i = 0, NPROC - 1 do
        counts[#counts + 1] = tonumber(w[8 + 2 * i])
        worsts[#worsts + 1] = tonumber(w[8 + 2 * i + 1]) / 1e6
        list[#list + 1] = counts[#counts]
    end
    local note = NPROC .. " processes, " .. DURATION .. " s, hold "
                 .. HOLD_NS / 1e3 .. " us, think " .. THINK_NS / 1e3
                 .. " us; per process: " .. table.concat(list, " / ")
    local med, lo, hi = bench.summary(counts)
    bench.result(SECTION, variant .. "_acq", "count", med, lo, hi, NPROC,
                 note)
    med, lo, hi = bench.summary(worsts)
    bench.result(SECTION, variant .. "_worst", "ms", med, lo, hi, NPROC,
                 note)
end

bench.log("(4) fairness: %d processes, %g s each; acquisitions per process"
          .. " and worst wait", NPROC, DURATION)

assert(shdict.open("bench_fair", { size = "1m" }))

run("shmlock", function()
    local l = assert(resty_lock:new("bench_fair", { timeout = 30,
                                                     exptime = 60 }))
    return function() return l:lock(KEY) end,
           function() return l:unlock() end
end)

run("flock", function()
    local l = flock_lock.new(dir .. "/bench-fair.lock")
    return function() return l:lock() end,
           function() return l:unlock() end
end)

run("polling", function()
    local zone = assert(shdict.open("bench_fair"))
    local l = assert(polling_lock:new(zone, { timeout = 30, exptime = 60 }))
    return function() return l:lock(KEY) end,
           function() return l:unlock() end
end)

shdict.destroy("bench_fair")
