-- A child process for the resty.shmlock multi-process specs and benchmark.
--
--     luajit spec/helpers/lock_worker.lua <mode> name=value ...
--
-- Every mode opens the zone `zone` under `dir`, waits until the key "go"
-- exists (so that all children start together), runs, and prints one line
-- of results ("name=value ..."), or "error <message>".
--
-- modes:
--   count     n times: lock key, counter = counter + 1 (get, then set),
--             unlock.  Prints done, max_wait (s).  With keys=K, iteration
--             i takes key ":" j and counter "counter:" j, j = i % K.
--             With wakes=1 (the test build), also the wake-ups of our
--             releases: wake_calls, woken, woken_max (shmlock_test_wakes).
--   fair      for `secs` seconds: lock key, hold `hold_us` microseconds
--             (busy), unlock, rest `rest_us`.  Prints done, max_wait, p99,
--             the longest hold and the longest handoff it saw (max_hold,
--             max_handoff: a loaded machine's H and L).
--   hold      lock key (exptime), store our pid under "pid", then hold it
--             `secs` seconds (the parent may SIGKILL us), or with
--             release=NAME until the parent has set key NAME and waits
--             for the key (secs: a ceiling), and unlock; prints the
--             monotonic release time in us (released_us).
--   wait      lock key (it is held), print the monotonic time in us at
--             which we got it (got_us), the elapsed lock() returned, and
--             when each of our futex waits began (froms: us, comma
--             separated; helpers.fake_clock's record).
--   pingpong  `rounds` times: wait until "round" is i, lock key (the parent
--             holds it and releases it once we wait), store the time we
--             got it under "got<i>", unlock.  Prints done; with record=1
--             also woken and waits: how many of our futex waits a release
--             ended (not their timeout), of how many (helpers.fake_clock's
--             record).

local ffi = require "ffi"
local C = require "resty.shmlock.lib"
local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local zone_lock = require "resty.shmlock.lock.zone"
local clock = require "resty.shmlock.internal.clock"

ffi.cdef[[
int shmlock_lua_usleep(unsigned int usec) __asm__("usleep");
]]

local now_us = clock.now_us

local mode = arg[1]
local o = {}
for i = 2, #arg do
    local k, v = arg[i]:match("^([%w_]+)=(.*)$")
    o[k] = tonumber(v) or v
end

local function fail(msg)
    io.write("error ", tostring(msg), "\n")
    io.flush()
    os.exit(1)
end

local dict, err = shdict.open(o.zone, { dir = o.dir })
if not dict then
    fail(err)
end

local opts = {
    exptime = o.exptime, timeout = o.timeout, step = o.step,
    max_step = o.max_step,
}
local key = o.key or "lock"

if o.starve_after then
    zone_lock.STARVE_AFTER = o.starve_after
end

-- counted ready, so that the parent lets everyone go at once (a loaded
-- machine starts the processes of a run far apart)
dict:incr("ready", 1, 0)
local go_deadline = now_us() + 30 * 1000000
while not dict:get("go") do
    if now_us() > go_deadline then
        fail("never told to go")
    end
    ffi.C.shmlock_lua_usleep(200)
end

-- the lock module over helpers.fake_clock's record of the real waits
local function recorded()
    package.path = "spec/?.lua;" .. package.path
    return require("helpers.fake_clock").new { real = true }
end

-- with wakes=1 (the test build): the wake-ups of our releases, as
-- " wake_calls=.. woken=.. woken_max=.." (shmlock_test_wakes); else ""
local function wakes()
    if not o.wakes then
        return ""
    end
    local w = ffi.new("uint64_t[3]")
    package.path = "spec/?.lua;" .. package.path    -- from the checkout
    require("helpers.test_hooks").shmlock_test_wakes(w, 0)
    return (" wake_calls=%d woken=%d woken_max=%d"):format(
        tonumber(w[0]), tonumber(w[1]), tonumber(w[2]))
end

local function spin(us)
    local t = now_us() + us
    while now_us() < t do end
end

if mode == "count" then
    local lock = resty_lock:new(dict, opts)
    local max_wait = 0
    for i = 1, o.n do
        local lkey, counter = key, "counter"
        if o.keys then
            lkey = key .. ":" .. i % o.keys
            counter = "counter:" .. i % o.keys
        end
        local t0 = now_us()
        local elapsed, e = lock:lock(lkey)
        if not elapsed then
            fail("lock: " .. e)
        end
        local w = now_us() - t0
        if w > max_wait then
            max_wait = w
        end
        local v = dict:get(counter) or 0
        dict:set(counter, v + 1)
        local ok, e2 = lock:unlock()
        if not ok then
            fail("unlock: " .. e2)
        end
    end
    io.write(("done=%d max_wait=%.6f%s\n"):format(o.n, max_wait / 1e6,
                                                   wakes()))

elseif mode == "fair" then
    local waits = {}
    local done = 0
    local stop = now_us() + o.secs * 1e6
    local hold_us, rest_us = o.hold_us or 0, o.rest_us or 0
    -- what this machine took, for the fairness bound's H and L: the
    -- longest hold (the spin, plus any preemption inside it) and the
    -- longest handoff (from the release stamped in "released" to the
    -- waiter that release let in holding the key)
    local max_hold, max_handoff = 0, 0
    repeat              -- (at least once, however late this process runs)
        local lock = resty_lock:new(dict, opts)
        local t0 = now_us()
        local elapsed, e = lock:lock(key)
        local got = now_us()
        if not elapsed then
            fail("lock: " .. e)
        end
        done = done + 1
        waits[done] = got - t0
        local released = dict:get("released")
        if elapsed > 0 and released and got - released > max_handoff then
            max_handoff = got - released
        end
        local v = dict:get("counter") or 0
        if hold_us > 0 then
            spin(hold_us)
        end
        dict:set("counter", v + 1)
        local t = now_us()
        dict:set("released", t)
        if t - got > max_hold then
            max_hold = t - got
        end
        lock:unlock()
        if rest_us > 0 then
            spin(rest_us)
        end
    until now_us() >= stop
    table.sort(waits)
    io.write(("done=%d max_wait=%.6f p99=%.6f p50=%.6f max_hold=%.6f "
              .. "max_handoff=%.6f%s\n"):format(done,
             waits[done] / 1e6, waits[math.ceil(done * 0.99)] / 1e6,
             waits[math.ceil(done * 0.5)] / 1e6, max_hold / 1e6,
             max_handoff / 1e6, wakes()))

elseif mode == "hold" then
    local lock = resty_lock:new(dict, opts)
    local elapsed, e = lock:lock(key)
    if not elapsed then
        fail("lock: " .. e)
    end
    dict:set("pid", C.shmlock_self_pid())
    if o.release then
        -- until the parent has set key `release` and waits for the key
        -- (secs: a ceiling)
        local stop = now_us() + o.secs * 1e6
        while not (dict:get(o.release)
                   and resty_lock.inspect(dict, key).waiters > 0)
              and now_us() < stop do
            ffi.C.shmlock_lua_usleep(1000)
        end
    else
        ffi.C.shmlock_lua_usleep(o.secs * 1e6)
    end
    local t = now_us()
    lock:unlock()
    io.write(("released_us=%d\n"):format(t))

elseif mode == "wait" then
    local fc = recorded()
    local lock = fc:require("resty.shmlock"):new(dict, opts)
    local elapsed, e = lock:lock(key)
    local t = now_us()
    if not elapsed then
        fail("lock: " .. e)
    end
    lock:unlock()
    local froms = {}
    for i, w in ipairs(fc.waits) do
        froms[i] = ("%d"):format(w.from)
    end
    io.write(("got_us=%d elapsed=%.6f froms=%s\n"):format(t, elapsed,
             table.concat(froms, ",")))

elseif mode == "pingpong" then
    -- record=1: the waits recorded (the benchmark's figures go without)
    local fc = o.record and recorded() or { waits = {} }
    local lock = (o.record and fc:require("resty.shmlock") or resty_lock)
                 :new(dict, opts)
    for i = 1, o.rounds do
        -- bounded: a parent that failed never moves the round on
        local deadline = now_us() + 30 * 1000000
        while dict:get("round") ~= i do
            if now_us() > deadline then
                fail("round " .. i .. " never came")
            end
            ffi.C.shmlock_lua_usleep(100)
        end
        local elapsed, e = lock:lock(key)
        local t = now_us()
        if not elapsed then
            fail("lock: " .. e)
        end
        dict:set("got" .. i, t)
        lock:unlock()
    end
    local woken = 0
    for _, w in ipairs(fc.waits) do
        if w.woken then
            woken = woken + 1
        end
    end
    io.write(("done=%d woken=%d waits=%d\n"):format(o.rounds, woken,
                                                    #fc.waits))

else
    fail("unknown mode " .. tostring(mode))
end
io.flush()
