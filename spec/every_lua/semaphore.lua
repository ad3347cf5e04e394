-- spec/every_lua/semaphore.lua DIR: the semaphore (resty.shmlock.semaphore)
-- under whichever interpreter runs this (spec/60; make test-every-lua,
-- under valgrind and ASan): every method's returns and errors, inspect,
-- leases, a waiter in another process woken by the release (its steps
-- too long for anything else to end its sleep in time), a holder
-- killed with SIGKILL whose permit is back at once, the release of a
-- collected semaphore object, an object copied into a forked child
-- (luaposix's fork, or the C module's test build's).  Prints "ok" (with a
-- note for a part skipped) or raises.  Waits only for signals (a waiter
-- counted on the key's word, a value in the zone, a process gone), each
-- bounded by a deadline.
--
--     lua semaphore.lua DIR [PEER]     the checks; the other processes run
--                                      under PEER (default: this one)
--     lua semaphore.lua DIR hold KEY   (a child) holds a permit of KEY
--                                      until killed
--     lua semaphore.lua DIR wait KEY   (a child) waits for KEY's permit,
--                                      holds it until the zone's "go" says so
--     lua semaphore.lua DIR board N P  (spec/60, every interpreter at once)
--                                      N rounds on the board: a permit of
--                                      "board" (P permits), counted in by
--                                      every holder; prints "ok" or what
--                                      broke the limit
-- luacheck: ignore 311 (each answer is read into the same locals)
local dir, role, key = assert(arg[1], "usage: semaphore.lua DIR"), arg[2],
                       arg[3]
local shdict = require "resty.shmlock.shdict"
local semaphore = require "resty.shmlock.semaphore"
local core = require "resty.shmlock.internal.core"
local clock = require "resty.shmlock.internal.clock"

local d = assert(shdict.open("el_sem", { dir = dir, size = "1m" }))

local function eq(want, got, what)
    if want ~= got then
        error(what .. ": expected " .. tostring(want) .. ", got "
              .. tostring(got), 2)
    end
end

-- waits until cond() is true, at most 60 s (a deadline, not a margin)
local function until_true(cond, what)
    local deadline = clock.now() + 60
    while not cond() do
        if clock.now() > deadline then
            error("never happened: " .. what, 2)
        end
        clock.sleep(0.001)
    end
end

if role == "hold" then
    local sem = assert(semaphore:new(d, { permits = 1, exptime = 600 }))
    eq(0, sem:acquire(key), "the holder's acquire")
    assert(d:set("holder_pid", core.self_pid()))
    clock.sleep(600)
    return
elseif role == "wait" then
    -- steps of 300 s: within the check's 60 s only the release's wake-up
    -- ends its sleep
    local sem = assert(semaphore:new(d, { permits = 1, timeout = 300,
                                          step = 300, max_step = 300 }))
    assert(d:set("waiter_pid", core.self_pid()))
    local elapsed, err = sem:acquire(key)
    eq(nil, err, "the waiter's acquire")
    assert(elapsed > 0, "it waited")
    assert(d:set("waited", key))
    until_true(function() return d:get("go") == key end, "go")
    eq(1, sem:release(), "the waiter's release")
    print("ok")
    return
elseif role == "board" then
    -- every holder counts itself in on the board while it holds: more
    -- than P at once is a violation, whichever interpreters hold
    local n, p = assert(tonumber(key)), assert(tonumber(arg[4]))
    local sem = assert(semaphore:new(d, { permits = p, timeout = 60 }))
    for _ = 1, n do
        local _, err = sem:acquire("board")
        if err then
            print("acquire: " .. err)
            return
        end
        local inside = assert(d:incr("inside", 1, 0))
        if inside > p then
            assert(d:incr("violations", 1, 0))
        end
        local held = sem:count("board")
        if held > p then
            assert(d:incr("violations", 1, 0))
        end
        -- held a moment, so that holders overlap
        clock.sleep(0.0002)
        assert(d:incr("inside", -1))
        eq(1, sem:release(), "the release")
        assert(d:incr("rounds", 1, 0))
    end
    print("ok")
    return
end

local lua, script = role or arg[-1], arg[0]     -- (role: PEER here)
local function spawn(what, k)
    assert(os.execute(lua .. " '" .. script .. "' '" .. dir .. "' " .. what
                      .. " " .. k .. " > '" .. dir .. "/" .. what .. k
                      .. ".out' 2>&1 &"))
end

-- the output of the waiter on k, once it is there
local function waiter_said(k)
    local out
    until_true(function()
        local f = io.open(dir .. "/wait" .. k .. ".out")
        out = f and f:read("*a")
        if f then f:close() end
        return out and out ~= ""
    end, "the waiter's output")
    return out
end
local notes = {}

-- new: the lock's constructor and errors, and permits
local sem, err = semaphore:new("el_no_such_zone")
eq(nil, sem, "new on no zone")
eq(true, err:find("^dictionary not found: no zone \"el_no_such_zone\"")
         ~= nil, err)
eq("dictionary not found: a number is no dict",
   select(2, semaphore.new(42)), "new on a number")
local ok, msg = pcall(semaphore.new, semaphore, d, { timeout = -1 })
eq(false, ok, "a bad option raises")
eq(true, msg:find("opts.timeout", 1, true) ~= nil, msg)
ok, msg = pcall(semaphore.new, semaphore, d, { permits = 0 })
eq(false, ok, "bad permits raise")
eq(true, msg:find("opts.permits must be an integer from 1 to 16777215", 1,
                  true) ~= nil, msg)
sem = assert(semaphore.new(d, { permits = 2, timeout = 0.001 }))
local s2 = assert(semaphore:new(d, { permits = 2, timeout = 0.001 }))
local s3 = assert(semaphore:new(d, { permits = 2, timeout = 0.001 }))

-- acquire, release, expire, count, owned: every return
eq(nil, (sem:release()), "release of nothing")
eq("unlocked", select(2, sem:release()), "release of nothing: err")
eq("unlocked", select(2, sem:expire()), "expire of nothing")
eq(false, sem:owned(), "owned of nothing")
eq("nil key", select(2, sem:acquire(nil)), "nil key")
eq("empty key", select(2, sem:acquire("")), "empty key")
eq("key too long", select(2, sem:acquire(("k"):rep(70000))), "key too long")
eq("nil key", select(2, sem:count(nil)), "count: nil key")
eq(0, sem:count("k"), "count of a free key")
eq("not locked", select(2, semaphore.inspect(d, "k")), "inspect free")
eq(true, select(2, semaphore.inspect("el_no_such_zone", "k"))
         :find("^dictionary not found: no zone") ~= nil, "inspect")
eq(0, sem:acquire("k"), "acquire")
eq("locked", select(2, sem:acquire("k2")), "locked")
eq(true, sem:owned(), "owned")
eq(0, s2:acquire("k"), "the second permit")
eq(2, sem:count("k"), "two held")
eq("timeout", select(2, s3:acquire("k")), "full: timeout")
eq("timeout", select(2, s3:acquire("k", 0)), "full, no wait: timeout")
eq(false, s3:owned(), "not owned by the third")
eq(true, sem:expire(60), "expire")
local info = assert(semaphore.inspect(d, "k"))
eq(2, info.count, "inspect's count")
eq(2, #info.holders, "inspect's holders")
eq(core.self_pid(), info.holders[1].pid, "a holder's pid")
eq(true, info.holders[1].alive, "a holder's alive")
eq(0, info.waiters, "no waiter")
eq(nil, info.marked, "no mark")
local ttls = { info.holders[1].ttl, info.holders[2].ttl }
table.sort(ttls)
eq(true, ttls[2] > 0 and ttls[2] <= 60, "the longer lease " .. ttls[2])
eq(1, sem:release(), "release")
eq("unlocked", select(2, sem:release()), "release twice")
eq(0, s3:acquire("k"), "a permit back")
eq(1, s2:release(), "release 2")
eq(1, s3:release(), "release 3")
eq("not locked", select(2, semaphore.inspect(d, "k")), "all back")

-- inspect lists every holder, more than its first batch (64) too
local many = {}
for i = 1, 70 do
    many[i] = assert(semaphore:new(d, { permits = 100 }))
    eq(0, many[i]:acquire("many"), "permit " .. i)
end
info = assert(semaphore.inspect(d, "many"))
eq(70, info.count, "70 holders") eq(70, #info.holders, "70 listed")
for i = 1, 70 do
    eq(1, many[i]:release(), "release " .. i)
end

-- a lease that runs out: the permit is free for another, and the late
-- holder is told
local short = assert(semaphore:new(d, { permits = 1, exptime = 0.001 }))
eq(0, short:acquire("l"), "a short lease")
until_true(function() return sem:count("l") == 0 end, "the lease runs out")
local one = assert(semaphore:new(d, { permits = 1, timeout = 0 }))
eq(0, one:acquire("l"), "the lease's permit taken")
local r, why = short:release()
eq(1, r, "release of a lapsed lease") eq("expired", why, "told so")
eq(1, sem:count("l"), "the other's permit stays")
-- and its expire: the object holds nothing afterwards, as the lock (a
-- lease of 30 s cut to 1 ms: the object's next permit keeps 30 s)
local cut = assert(semaphore:new(d, { permits = 1 }))
eq(0, cut:acquire("l2"), "a lease")
eq(true, cut:expire(0.001), "cut short")
until_true(function() return sem:count("l2") == 0 end, "it runs out")
eq("expired", select(2, cut:expire(10)), "expire of a lapsed lease")
eq(false, cut:owned(), "the lapsed permit is forgotten")
eq("unlocked", select(2, cut:release()), "nothing left to release")
eq(0, cut:acquire("l2"), "a permit again, not 'locked'")
eq(true, cut:owned(), "held again")
eq(1, cut:release(), "release l2")
eq(1, one:release(), "release l")

-- a waiter in another process, woken by the release
eq(0, one:acquire("w"), "acquire w")
spawn("wait", "w")
until_true(function()
    local i = semaphore.inspect(d, "w")
    return i and i.waiters >= 1
end, "the waiter counted on the key's word")
eq(1, one:release(), "the release")
until_true(function() return d:get("waited") == "w" end, "the waiter's turn")
info = assert(semaphore.inspect(d, "w"))
eq(d:get("waiter_pid"), info.holders[1].pid, "its holder")
eq("timeout", select(2, one:acquire("w")), "held by the waiter")
assert(d:set("go", "w"))
eq("ok\n", waiter_said("w"), "the waiter")

-- a holder killed with SIGKILL: its permit is back at once
spawn("hold", "h")
until_true(function() return d:get("holder_pid") end, "the holder's permit")
local hpid = d:get("holder_pid")
eq("timeout", select(2, one:acquire("h")), "held by a live holder")
info = assert(semaphore.inspect(d, "h"))
eq(hpid, info.holders[1].pid, "the holder's pid")
eq(true, info.holders[1].alive, "alive")
assert(os.execute("kill -9 " .. hpid))
until_true(function() return not core.proc_alive(hpid) end, "the kill")
eq(false, assert(semaphore.inspect(d, "h")).holders[1].alive, "dead")
eq(0, one:acquire("h"), "a dead holder's permit, back at once")
eq(1, one:count("h"), "one holder: ours")
eq(1, one:release(), "release h")

-- an object collected while holding gives its permit back.  Referenced
-- until the "held" check (a collector may run at any allocation), then
-- dropped and collected by full collections until its permit is back; one
-- is enough (a full collection runs the finalizers of what it frees), ten
-- without the release fail.  (Made in a function: its registers are gone
-- when it returns, none of this chunk's keeps a copy.)
local function new_holder(k)
    local s = assert(semaphore:new(d, { permits = 1 }))
    eq(0, s:acquire(k), "acquire " .. k)
    return s
end
local dropped = new_holder("g")
eq(1, sem:count("g"), "held")
eq(true, dropped:owned(), "owned")
dropped = nil -- luacheck: ignore 311
for _ = 1, 10 do
    collectgarbage()
    if sem:count("g") == 0 then break end
end
eq(0, sem:count("g"), "released by GC")
eq(0, one:acquire("g"), "g is free")
eq(1, one:release(), "release g")

-- an object copied into a forked child holds nothing there
-- (luaposix, or the C module's test build: make test-every-lua's ASan one)
local has_posix, unistd = pcall(require, "posix.unistd")
local fork, exit, wait
if has_posix then
    local posix_wait = require("posix.sys.wait").wait
    fork, exit = unistd.fork, unistd._exit
    wait = function(pid)
        local _, how, status = posix_wait(pid)
        return how == "exited" and status or -1
    end
elseif core.mod and core.mod.test_fork then
    fork, exit, wait = core.mod.test_fork, core.mod.test_exit,
                       core.mod.test_wait
end
if fork then
    eq(0, one:acquire("f"), "acquire f")
    local pid = assert(fork())
    if pid == 0 then
        local copy_ok = one:owned() == false
            and select(2, one:release()) == "unlocked"
            and select(2, one:expire()) == "unlocked"
            and select(2, one:acquire("f")) == "timeout"
        one = nil -- luacheck: ignore 311
        collectgarbage()
        collectgarbage()
        local again = assert(semaphore:new(d, { permits = 1, timeout = 0 }))
        copy_ok = copy_ok and select(2, again:acquire("f")) == "timeout"
        d:set("child", copy_ok and "not a holder" or "a holder")
        exit(0)
    end
    eq(0, wait(pid), "the child's exit status")
    eq("not a holder", d:get("child"), "the copy in the child")
    eq(true, one:owned(), "still the parent's")
    eq(1, sem:count("f"), "still held")
    eq(1, one:release(), "the parent's release")
else
    notes[#notes + 1] = "no fork: luaposix is not installed for " .. _VERSION
                        .. " (the C module's test build has one)"
end

print("ok" .. (#notes > 0 and " (" .. table.concat(notes, "; ") .. ")"
               or ""))
