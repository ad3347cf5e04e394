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
local contend = require "contend"
local shdict = require "resty.shmlock.shdict"

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

-- shared words: contend's start time, then per process i: count, worst
-- wait
local FIRST = contend.FIRST
local w = bench.shared_words(FIRST + 2 * NPROC)

local function contender(i, make)
    local lock, unlock = make()
    local count, worst = 0, 0
    local start = contend.wait_start(w)
    local stop = start + DURATION * 1e9
    while true do
        local t0 = now_ns()
        if t0 >= stop then break end
        lock()
        local waited = now_ns() - t0
        if waited > worst then worst = waited end
        count = count + 1
        spin_ns(HOLD_NS)
        unlock()
        spin_ns(THINK_NS)
    end
    w[FIRST + 2 * i] = count
    w[FIRST + 2 * i + 1] = worst
end

local function run(variant, make)
    for i = 0, NPROC - 1 do
        w[FIRST + 2 * i], w[FIRST + 2 * i + 1] = -1, -1
    end
    contend.run(w, NPROC, 0.2, contender, make)
    local counts, worsts, list = {}, {}, {}
    for i = 0, NPROC - 1 do
        counts[#counts + 1] = tonumber(w[FIRST + 2 * i])
        worsts[#worsts + 1] = tonumber(w[FIRST + 2 * i + 1]) / 1e6
        list[#list + 1] = counts[#counts]
    end
    local note = contend.note(NPROC, DURATION, HOLD_NS, THINK_NS)
                 .. "; per process: " .. table.concat(list, " / ")
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

local opts = { timeout = 30, exptime = 60 }
run("shmlock", contend.shmlock("bench_fair", KEY, opts))
run("flock", contend.flock(dir .. "/bench-fair.lock"))
run("polling", contend.polling("bench_fair", KEY, opts))

shdict.destroy("bench_fair")
