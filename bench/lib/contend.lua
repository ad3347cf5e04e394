-- contend: what the contention benchmarks share ((4) bench/fairness.lua,
-- (9) bench/contended.lua): child processes on one lock, released together
-- at a start time written in a shared word, and the locks they contend on.
--
--   * makers: shmlock(), flock(), polling() return make(), which a child
--     calls to get its own lock() and unlock() (each raises on a failure);
--   * wait_start(w): in a child, waits for the start time and returns it;
--   * run(w, nproc, lead, child, make): child(i, make) in nproc processes,
--     started lead seconds from now, waited for;
--   * note(): the common part of the results' note.
--
-- Shared words (bench.shared_words): w[START] the start time in ns (0: not
-- yet), the children's results from w[FIRST] on.

local bench = require "bench"
local resty_lock = require "resty.shmlock"
local shdict = require "resty.shmlock.shdict"
local flock_lock = require "flock_lock"
local polling_lock = require "polling_lock"

local now_ns = bench.now_ns
local tonumber = tonumber
local tostring = tostring

local _M = {}

local START = 0
_M.START = START
_M.FIRST = 8

-- lock() and unlock() of l (over key, for the locks that take one)
local function checked(l, key)
    return function()
        local ok, err = l:lock(key)
        if not ok then error("lock failed: " .. tostring(err)) end
    end, function()
        local ok, err = l:unlock()
        if not ok then error("unlock failed: " .. tostring(err)) end
    end
end

-- resty.shmlock over the zone named zone (opts: resty_lock:new's)
function _M.shmlock(zone, key, opts)
    return function()
        return checked(assert(resty_lock:new(zone, opts)), key)
    end
end

-- flock(2) on the file at path
function _M.flock(path)
    return function()
        return checked(flock_lock.new(path))
    end
end

-- resty.lock's algorithm over the zone named zone (nanosleep)
function _M.polling(zone, key, opts)
    return function()
        local z = assert(shdict.open(zone))
        return checked(assert(polling_lock:new(z, opts)), key)
    end
end

-- in a child: the start time (ns), once it is reached; raises when none
-- is set within 30 s
function _M.wait_start(w)
    local deadline = now_ns() + 30e9
    while w[START] == 0 do
        if now_ns() > deadline then error("no start signal") end
    end
    local start = tonumber(w[START])
    while now_ns() < start do end
    return start
end

-- child(i, make) in nproc processes (i from 0), all started lead seconds
-- from now (every child is up by then); returns once all have exited
function _M.run(w, nproc, lead, child, make)
    w[START] = 0
    local pids = {}
    for i = 0, nproc - 1 do
        pids[#pids + 1] = bench.spawn(child, i, make)
    end
    w[START] = now_ns() + lead * 1e9
    bench.wait_all(pids)
end

function _M.note(nproc, duration, hold_ns, think_ns)
    return nproc .. " processes, " .. duration .. " s, hold " .. hold_ns / 1e3
           .. " us, think " .. think_ns / 1e3 .. " us"
end

return _M
