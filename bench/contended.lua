-- (9) Contended: NPROC plain LuaJIT processes (32) on one key for DURATION
-- seconds (3 s; 1 s with BENCH_QUICK=1).  Each loops: lock, hold HOLD
-- (busy), unlock, work THINK outside the lock.  Per variant: acquisitions
-- per second (all processes), CPU time per acquisition (user + system,
-- getrusage of each process) and voluntary context switches per
-- acquisition (ru_nvcsw: sleeps), each the median of REPS runs with its
-- range; the runs alternate between the variants.  A release that wakes
-- every sleeper shows as context switches and CPU per acquisition; one
-- that wakes one, as neither.
--
--   shmlock   resty.shmlock (a release wakes one sleeper)
--   flock     flock(2)

local ffi = require "ffi"
local bench = require "bench"
local contend = require "contend"
local shdict = require "resty.shmlock.shdict"

pcall(ffi.cdef, [[
struct shmlock_bench_rusage {
    long  utime_s, utime_us, stime_s, stime_us;
    long  maxrss, ixrss, idrss, isrss, minflt, majflt, nswap, inblock,
          oublock, msgsnd, msgrcv, nsignals, nvcsw, nivcsw;
};
int getrusage(int who, struct shmlock_bench_rusage *usage);
]])

local SECTION = "contended"
local KEY = "bench-contended"
local NPROC = tonumber(os.getenv("BENCH_CONTENDED_PROCS") or "") or 32
local DURATION = tonumber(os.getenv("BENCH_CONTENDED_SECONDS") or "")
                 or (bench.quick and 1 or 3)
local REPS = bench.quick and 1 or 3
local HOLD_NS = 20e3
local THINK_NS = 20e3

local dir = os.getenv("SHMLOCK_DIR") or "/tmp"
local now_ns = bench.now_ns
local spin_ns = bench.spin_ns

-- shared words: contend's start time, then per process i: count, cpu ns,
-- nvcsw
local FIRST = contend.FIRST
local w = bench.shared_words(FIRST + 3 * NPROC)

local function usage()
    local ru = ffi.new("struct shmlock_bench_rusage")
    assert(ffi.C.getrusage(0, ru) == 0)
    return (tonumber(ru.utime_s) + tonumber(ru.stime_s)) * 1e9
           + (tonumber(ru.utime_us) + tonumber(ru.stime_us)) * 1e3,
           tonumber(ru.nvcsw)
end

local function contender(i, make)
    local lock, unlock = make()
    local count = 0
    local start = contend.wait_start(w)
    local cpu0, cs0 = usage()
    local stop = start + DURATION * 1e9
    while now_ns() < stop do
        lock()
        count = count + 1
        spin_ns(HOLD_NS)
        unlock()
        spin_ns(THINK_NS)
    end
    local cpu1, cs1 = usage()
    w[FIRST + 3 * i] = count
    w[FIRST + 3 * i + 1] = cpu1 - cpu0
    w[FIRST + 3 * i + 2] = cs1 - cs0
end

-- one run: acquisitions per second, CPU us and context switches per
-- acquisition
local function once(make)
    contend.run(w, NPROC, 0.5, contender, make)
    local count, cpu, cs = 0, 0, 0
    for i = 0, NPROC - 1 do
        count = count + tonumber(w[FIRST + 3 * i])
        cpu = cpu + tonumber(w[FIRST + 3 * i + 1])
        cs = cs + tonumber(w[FIRST + 3 * i + 2])
    end
    return count / DURATION, cpu / 1e3 / count, cs / count
end

-- Alternates the variants rep by rep (shmlock 1, flock 1, shmlock 2, ...)
-- so drift in the machine's speed over the section lands on both sides of
-- the ratio instead of on one half.
local function run(variants)
    local got = {}
    for _, v in ipairs(variants) do
        got[v[1]] = { rates = {}, cpus = {}, css = {} }
    end
    for r = 1, REPS do
        for _, v in ipairs(variants) do
            local g = got[v[1]]
            g.rates[r], g.cpus[r], g.css[r] = once(v[2])
        end
    end
    local note = contend.note(NPROC, DURATION, HOLD_NS, THINK_NS)
    for _, v in ipairs(variants) do
        local variant, g = v[1], got[v[1]]
        local med, lo, hi = bench.summary(g.rates)
        bench.result(SECTION, variant .. "_rate", "acq/s", med, lo, hi, REPS,
                     note)
        med, lo, hi = bench.summary(g.cpus)
        bench.result(SECTION, variant .. "_cpu", "us/acq", med, lo, hi, REPS,
                     note)
        med, lo, hi = bench.summary(g.css)
        bench.result(SECTION, variant .. "_csw", "csw/acq", med, lo, hi,
                     REPS, note)
    end
end

bench.log("(9) contended: %d processes on one key, %g s x %d; acquisitions"
          .. "/s, CPU and voluntary context switches per acquisition",
          NPROC, DURATION, REPS)

assert(shdict.open("bench_contended", { size = "1m" }))

run({
    { "shmlock", contend.shmlock("bench_contended", KEY,
                                 { timeout = 60, exptime = 60 }) },
    { "flock", contend.flock(dir .. "/bench-contended.lock") },
})

shdict.destroy("bench_contended")
