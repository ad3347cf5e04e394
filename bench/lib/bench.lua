-- bench: what every benchmark script shares.
--
--   * a monotonic clock (CLOCK_MONOTONIC, the same clock in every process
--     of the host, so two processes can time a handoff between them);
--   * measure(): repetitions of a timed loop, calibrated to a target
--     duration, summarised as median, min and max;
--   * result lines for bench/report.lua (one tab-separated line each);
--   * child processes (through harness.proc, scripts/lua/harness/proc.lua:
--     the one process helper of the checkout), a shared anonymous mapping,
--     spinning, sleeping.
--
-- Environment: BENCH_QUICK=1 (fewer, shorter repetitions), BENCH_OUT (the
-- results file results are appended to; default stdout only).

local ffi = require "ffi"
local bit = require "bit"
local proc = require "harness.proc"

local floor = math.floor
local sort = table.sort
local concat = table.concat
local fmt = string.format
local io_write = io.write
local tonumber = tonumber

-- Each declaration alone: harness.proc, resty.core or our own modules may
-- have declared some of them (all as struct timespec), and ffi.cdef
-- refuses a second declaration.
for _, decl in ipairs{
    "struct timespec { long tv_sec; long tv_nsec; };",
    "int clock_gettime(int clk, struct timespec *ts);",
    "int nanosleep(const struct timespec *req, struct timespec *rem);",
    "void *mmap(void *addr, size_t len, int prot, int flags, int fd,"
        .. " long off);",
    "int sched_yield(void);",
} do
    pcall(ffi.cdef, decl)
end

local C = ffi.C

local _M = {}

_M.quick = os.getenv("BENCH_QUICK") == "1"

local CLOCK_MONOTONIC = 1
local ts = ffi.new("struct timespec")

-- seconds, as a double (ns resolution: 2^53 ns is 104 days of uptime)
local function now()
    C.clock_gettime(CLOCK_MONOTONIC, ts)
    return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end
_M.now = now

-- nanoseconds since boot as a double, exact below 2^53
local function now_ns()
    C.clock_gettime(CLOCK_MONOTONIC, ts)
    return tonumber(ts.tv_sec) * 1e9 + tonumber(ts.tv_nsec)
end
_M.now_ns = now_ns

-- busy-waits `ns` nanoseconds (the clock call keeps the loop honest: the
-- JIT cannot hoist loads of shared memory across a C call)
function _M.spin_ns(ns)
    local deadline = now_ns() + ns
    while now_ns() < deadline do end
end

local req = ffi.new("struct timespec")
function _M.sleep(sec)
    local s = floor(sec)
    req.tv_sec = s
    req.tv_nsec = floor((sec - s) * 1e9)
    C.nanosleep(req, nil)
end


-- ---- statistics ----

local function sorted(t)
    local s = {}
    for i = 1, #t do s[i] = t[i] end
    sort(s)
    return s
end

-- nearest-rank percentile of a sorted array, p in [0, 100]
local function pct(s, p)
    local n = #s
    if n == 0 then return 0 / 0 end
    local i = math.ceil(p / 100 * n)
    if i < 1 then i = 1 end
    if i > n then i = n end
    return s[i]
end
_M.percentile = pct

function _M.median(t)
    local s = sorted(t)
    local n = #s
    if n % 2 == 1 then
        return s[(n + 1) / 2]
    end
    return (s[n / 2] + s[n / 2 + 1]) / 2
end

function _M.summary(t)
    local s = sorted(t)
    return _M.median(s), s[1], s[#s]
end

_M.sorted = sorted


-- ---- results ----

local out_path = os.getenv("BENCH_OUT")
local out

-- One result: section, id, unit, median, min, max, repetitions, note.
-- Also printed for the person watching.
function _M.result(section, id, unit, med, lo, hi, reps, note)
    local line = concat({ section, id, unit, fmt("%.6g", med),
                          fmt("%.6g", lo), fmt("%.6g", hi),
                          tostring(reps or 1), note or "" }, "\t")
    if out_path then
        out = out or assert(io.open(out_path, "a"))
        out:write(line, "\n")
        out:flush()
    end
    io_write(fmt("  %-8s %-34s %12.4g %-6s (min %.4g, max %.4g, n=%d)\n",
                 section, id, med, unit, lo, hi, reps or 1))
    io.stdout:flush()
end

function _M.log(...)
    io_write(fmt(...), "\n")
    io.stdout:flush()
end


-- ---- repetitions ----

-- How long one repetition runs, and how many there are.
_M.rep_seconds = _M.quick and 0.05 or 0.25
_M.reps = _M.quick and 3 or 7

-- run(n) performs n iterations of the operation.  Calibrates n so that one
-- repetition lasts about rep_seconds, then times `reps` repetitions.
-- Returns a table of ns per iteration, one per repetition.
function _M.measure(run, opts)
    local target = opts and opts.seconds or _M.rep_seconds
    local reps = opts and opts.reps or _M.reps
    local n = opts and opts.start or 100

    -- warm-up and calibration: also lets the JIT compile the loop
    local t
    while true do
        local t0 = now()
        run(n)
        t = now() - t0
        if t >= target / 10 or n >= 1e9 then
            break
        end
        n = n * 4
    end
    n = math.max(1, floor(n * target / t))

    local ns = {}
    for i = 1, reps do
        local t0 = now()
        run(n)
        ns[i] = (now() - t0) * 1e9 / n
    end
    return ns, n
end

-- measure() then result() in ns per iteration
function _M.bench(section, id, run, opts)
    local ns, n = _M.measure(run, opts)
    local med, lo, hi = _M.summary(ns)
    _M.result(section, id, "ns", med, lo, hi, #ns,
              (opts and opts.note or "") .. (opts and opts.note and "; " or "")
              .. n .. " iterations per repetition")
    return med
end


-- ---- processes and shared memory ----

local PROT_RW = 3
local MAP_SHARED_ANON = 0x01 + 0x20

-- an anonymous shared mapping of n int64 (zeroed); children forked after
-- this call see the same words
function _M.shared_words(n)
    local p = C.mmap(nil, n * 8, PROT_RW, MAP_SHARED_ANON, -1, 0)
    if ffi.cast("intptr_t", p) == -1 then
        error("mmap failed")
    end
    return ffi.cast("int64_t *", p)
end

-- Seconds a benchmark's child may live, and the parent waits for them at
-- most: far beyond any section's run (BENCH_CHILD_SECONDS to change it).
_M.child_seconds = tonumber(os.getenv("BENCH_CHILD_SECONDS") or "") or 600

local child_opts = { alarm = _M.child_seconds, die_with_parent = true }

-- forks a child running fn(...); it dies with its parent, and after
-- child_seconds at the latest
function _M.spawn(fn, ...)
    return proc.spawn_with(child_opts, fn, ...)
end

-- waits for every pid, child_seconds at most (then they are killed);
-- raises if one did not exit 0, saying how each such child ended
function _M.wait_all(pids)
    local failed = {}
    for i, r in ipairs(proc.wait_all(pids, _M.child_seconds)) do
        if r.how ~= "exit" or r.code ~= 0 then
            failed[#failed + 1] = fmt("child %d (pid %d): %s %s %s", i,
                                      pids[i], r.how,
                                      tostring(r.code or r.sig), r.msg)
        end
    end
    if #failed > 0 then
        error(#failed .. " child process(es) failed:\n  "
              .. concat(failed, "\n  "))
    end
end

_M.pid = proc.getpid

-- a uniform random permutation of 1..n (Fisher-Yates, fixed seed so every
-- peer sees the same order)
function _M.permutation(n, seed)
    local p = {}
    for i = 1, n do p[i] = i end
    local x = seed or 12345
    for i = n, 2, -1 do
        -- xorshift32
        x = bit.bxor(x, bit.lshift(x, 13))
        x = bit.bxor(x, bit.rshift(x, 17))
        x = bit.bxor(x, bit.lshift(x, 5))
        local j = bit.band(x, 0x7fffffff) % i + 1
        p[i], p[j] = p[j], p[i]
    end
    return p
end

return _M
