-- spec/every_lua/lock_shared.lua DIR: shared holds (lock:lock_shared of
-- resty.shmlock) under whichever interpreter runs this (spec/60; make
-- test-every-lua, under valgrind and ASan): the returns and errors of
-- lock_shared and of unlock, expire and owned on a shared hold, inspect's
-- shared rows, leases; with a process of PEER: a reader waiting for an
-- exclusive holder and a writer waiting for the readers, each woken by
-- the release (their steps too long for anything else to end a sleep in
-- time), the writer's mark keeping new readers out and the last reader
-- handing the key to it, a SIGKILLed shared holder dropped at once and a
-- SIGKILLed exclusive holder's key taken by a reader at once; the release
-- of a collected object's hold; an object copied into a forked child
-- (luaposix's fork, or the C module's test build's).  Prints "ok" (with a
-- note for a part skipped) or raises.  Waits only for signals (a waiter
-- counted on the key's word, a mark, a value in the zone, a process
-- gone), each bounded by a deadline.
--
--     lua lock_shared.lua DIR [PEER]     the checks; the other processes
--                                        run under PEER (default: this one)
--     lua lock_shared.lua DIR hold KEY   (a child) holds KEY shared until
--                                        killed
--     lua lock_shared.lua DIR xhold KEY  (a child) holds KEY exclusive
--                                        until killed
--     lua lock_shared.lua DIR wait KEY   (a child) waits for a shared hold
--                                        of KEY, holds it until "go"
--     lua lock_shared.lua DIR xwait KEY  (a child) waits for KEY
--                                        exclusive, holds it until "go"
--     lua lock_shared.lua DIR board N    (spec/60, every interpreter at
--                                        once) N rounds on the board, a
--                                        write every third: readers check
--                                        that no writer is in and that the
--                                        counter holds still, writers
--                                        that they are alone, and add one
--                                        to the counter by a get and a set
--                                        (an overlap loses it); prints
--                                        "ok" or what broke
-- luacheck: ignore 311 (each answer is read into the same locals)
local dir, role, key = assert(arg[1], "usage: lock_shared.lua DIR"), arg[2],
                       arg[3]
local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local core = require "resty.shmlock.internal.core"
local clock = require "resty.shmlock.internal.clock"
local codes = require "resty.shmlock.internal.codes"

local d = assert(shdict.open("el_shared", { dir = dir, size = "1m" }))

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

-- steps of 300 s: within the checks' 60 s only a release's wake-up ends a
-- waiter's sleep
local WAITER = { timeout = 300, step = 300, max_step = 300 }

if role == "hold" or role == "xhold" then
    local lock = assert(resty_lock:new(d, { exptime = 600 }))
    if role == "hold" then
        eq(0, lock:lock_shared(key), "the holder's lock_shared")
    else
        eq(0, lock:lock(key), "the holder's lock")
    end
    assert(d:set("holder_pid" .. key, core.self_pid()))
    clock.sleep(600)
    return
elseif role == "wait" or role == "xwait" then
    local lock = assert(resty_lock:new(d, WAITER))
    assert(d:set("waiter_pid" .. key, core.self_pid()))
    local elapsed, err
    if role == "wait" then
        elapsed, err = lock:lock_shared(key)
    else
        elapsed, err = lock:lock(key)
    end
    eq(nil, err, "the waiter's lock")
    assert(elapsed > 0, "it waited")
    assert(d:set("waited", key))
    until_true(function() return d:get("go") == key end, "go")
    eq(1, lock:unlock(), "the waiter's unlock")
    print("ok")
    return
elseif role == "board" then
    local n = assert(tonumber(key))
    local lock = assert(resty_lock:new(d, { timeout = 60 }))
    local function bad(what)
        assert(d:incr("violations", 1, 0))
        assert(d:set("violation", what))
    end
    for i = 1, n do
        local write = i % 3 == 0
        local _, err
        if write then
            _, err = lock:lock("board")
        else
            _, err = lock:lock_shared("board")
        end
        if err then
            print((write and "lock: " or "lock_shared: ") .. err)
            return
        end
        if write then
            if assert(d:incr("writers", 1, 0)) ~= 1 then
                bad("two writers in")
            end
            if (d:get("readers") or 0) ~= 0 then
                bad("a writer beside readers")
            end
            -- a get and a set: an overlapping writer's add is lost
            local c = d:get("counter") or 0
            clock.sleep(0.0002)
            assert(d:set("counter", c + 1))
            assert(d:incr("writers", -1))
        else
            assert(d:incr("readers", 1, 0))
            if (d:get("writers") or 0) ~= 0 then
                bad("a reader beside a writer")
            end
            local c = d:get("counter")
            clock.sleep(0.0002)
            if d:get("counter") ~= c then
                bad("the counter moved under a reader")
            end
            assert(d:incr("readers", -1))
        end
        eq(1, lock:unlock(), "the unlock")
        assert(d:incr(write and "writes" or "reads", 1, 0))
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
local function waiter_said(what, k)
    local out
    until_true(function()
        local f = io.open(dir .. "/" .. what .. k .. ".out")
        out = f and f:read("*a")
        if f then f:close() end
        return out and out ~= ""
    end, "the waiter's output")
    return out
end

local function inspect(k)
    return resty_lock.inspect(d, k)
end
local notes = {}

local a = assert(resty_lock:new(d, { timeout = 0.001 }))
local b = assert(resty_lock:new(d, { timeout = 0.001 }))
local w = assert(resty_lock:new(d, { timeout = 0.001 }))

-- lock_shared, unlock, expire, owned: every return
eq(nil, (a:unlock()), "unlock of nothing")
eq("nil key", select(2, a:lock_shared(nil)), "nil key")
eq("empty key", select(2, a:lock_shared("")), "empty key")
eq("key too long", select(2, a:lock_shared(("k"):rep(codes.KEY_MAX - 3))),
   "key too long (a shared hold's: 4 bytes shorter)")
local ok, msg = pcall(a.lock_shared, a, "k", -1)
eq(false, ok, "a bad timeout raises")
eq(true, msg:find("timeout", 1, true) ~= nil, msg)
eq(0, a:lock_shared("k"), "lock_shared")
eq(0, b:lock_shared("k"), "a second reader")
eq("locked", select(2, a:lock_shared("k2")), "locked: lock_shared")
eq("locked", select(2, a:lock("k2")), "locked: lock")
eq(true, a:owned(), "owned")
eq("timeout", select(2, w:lock("k")), "an exclusive lock waits for readers")
eq("timeout", select(2, w:trylock("k")), "trylock beside readers")
eq(false, w:owned(), "not owned by the writer")
eq(true, a:expire(60), "expire")
local info = assert(inspect("k"))
eq("shared", info.kind, "inspect's kind")
eq(2, #info.holders, "inspect's holders")
eq(nil, info.pid, "no pid of a head")
eq(core.self_pid(), info.holders[1].pid, "a holder's pid")
eq(true, info.holders[1].alive, "a holder's alive")
local ttls = { info.holders[1].ttl, info.holders[2].ttl }
table.sort(ttls)
eq(true, ttls[2] > 0 and ttls[2] <= 60, "the longer lease " .. ttls[2])
eq(1, a:unlock(), "unlock")
eq("unlocked", select(2, a:unlock()), "unlock twice")
eq("unlocked", select(2, a:expire()), "expire of nothing")
eq(false, a:owned(), "owned of nothing")
eq(1, #assert(inspect("k")).holders, "one reader left")
eq(1, b:unlock(), "the last reader's unlock")
eq("not locked", select(2, inspect("k")), "inspect free")
eq(0, w:lock("k"), "the writer's turn")
eq("lock", assert(inspect("k")).kind, "an exclusive holder")
eq("timeout", select(2, a:lock_shared("k")), "a reader waits for a writer")
eq("timeout", select(2, a:lock_shared("k", 0)), "no wait: timeout")
eq(1, w:unlock(), "the writer's unlock")
eq(0, a:lock("k"), "the object locks exclusive after a shared hold")
eq(1, a:unlock(), "and unlocks")

-- a lease that runs out: the key is free for a writer, the late reader
-- is told
local short = assert(resty_lock:new(d, { exptime = 0.001 }))
eq(0, short:lock_shared("l"), "a short lease")
until_true(function() return w:trylock("l") == 0 end, "the lease runs out")
eq("expired", select(2, short:expire(10)), "expire of a lapsed lease")
eq(false, short:owned(), "the lapsed hold is not owned")
eq("unlocked", select(2, short:unlock()), "the lapsed hold is forgotten")
eq(1, w:unlock(), "unlock l")

-- a reader of PEER waiting for our exclusive lock, woken by the unlock
eq(0, w:lock("rw"), "lock rw")
spawn("wait", "rw")
until_true(function()
    local i = inspect("rw")
    return i and i.waiters >= 1
end, "the reader counted on the key's word")
eq(1, w:unlock(), "the unlock")
until_true(function() return d:get("waited") == "rw" end, "the reader's turn")
info = assert(inspect("rw"))
eq("shared", info.kind, "the reader holds")
eq(d:get("waiter_pidrw"), info.holders[1].pid, "its pid")
eq(0, a:lock_shared("rw", 0), "readers share it")
eq(1, a:unlock(), "our reader's unlock")
assert(d:set("go", "rw"))
eq("ok\n", waiter_said("wait", "rw"), "the reader")

-- a writer of PEER waiting for our readers: its mark keeps new readers
-- out, and the last reader's unlock hands the key straight to it
eq(0, a:lock_shared("ww"), "reader a")
eq(0, b:lock_shared("ww"), "reader b")
spawn("xwait", "ww")
until_true(function()
    local i = inspect("ww")
    return i and i.marked ~= nil and i.marked.pid == d:get("waiter_pidww")
end, "the writer's mark")
eq("timeout", select(2, w:lock_shared("ww", 0)), "a mark keeps readers out")
eq(1, a:unlock(), "reader a's unlock")
eq("shared", assert(inspect("ww")).kind, "b still reads")
eq(1, b:unlock(), "the last reader's unlock")
info = assert(inspect("ww"))
eq("lock", info.kind, "handed to the writer at once")
eq(d:get("waiter_pidww"), info.pid, "the writer holds")
until_true(function() return d:get("waited") == "ww" end, "the writer's turn")
eq("timeout", select(2, a:lock_shared("ww", 0)), "held by the writer")
assert(d:set("go", "ww"))
eq("ok\n", waiter_said("xwait", "ww"), "the writer")

-- a shared holder killed with SIGKILL: dropped at once, for a writer
spawn("hold", "h")
until_true(function() return d:get("holder_pidh") end, "the reader's hold")
local hpid = d:get("holder_pidh")
eq("timeout", select(2, w:trylock("h")), "held by a live reader")
eq(true, assert(inspect("h")).holders[1].alive, "alive")
assert(os.execute("kill -9 " .. hpid))
until_true(function() return not core.proc_alive(hpid) end, "the kill")
eq(false, assert(inspect("h")).holders[1].alive, "dead")
eq(0, w:trylock("h"), "a dead reader's key, free at once")
eq(1, w:unlock(), "unlock h")

-- an exclusive holder killed with SIGKILL: a reader takes its key at once
spawn("xhold", "x")
until_true(function() return d:get("holder_pidx") end, "the writer's hold")
hpid = d:get("holder_pidx")
eq("timeout", select(2, a:lock_shared("x", 0)), "held by a live writer")
assert(os.execute("kill -9 " .. hpid))
until_true(function() return not core.proc_alive(hpid) end, "the kill")
eq(0, a:lock_shared("x", 0), "a dead writer's key, a reader's at once")
eq(1, a:unlock(), "unlock x")

-- an object collected while holding releases its hold.  Referenced until
-- the "held" check (a collector may run at any allocation), then dropped
-- and collected by full collections until its release shows; one is
-- enough (a full collection runs the finalizers of what it frees), ten
-- without the release fail.  (Made in a function: its registers are gone
-- when it returns, none of this chunk's keeps a copy.)
local function new_holder(k)
    local l = assert(resty_lock:new(d))
    eq(0, l:lock_shared(k), "lock_shared " .. k)
    return l
end
local dropped = new_holder("g")
eq(1, #assert(inspect("g")).holders, "held")
eq(true, dropped:owned(), "owned")
dropped = nil
for _ = 1, 10 do
    collectgarbage()
    if select(2, inspect("g")) == "not locked" then break end
end
eq("not locked", select(2, inspect("g")), "released by GC")
eq(0, w:trylock("g"), "g is free")
eq(1, w:unlock(), "unlock g")

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
    eq(0, a:lock_shared("f"), "lock_shared f")
    local pid = assert(fork())
    if pid == 0 then
        local copy_ok = a:owned() == false
            and select(2, a:unlock()) == "unlocked"
            and select(2, a:expire()) == "unlocked"
            and select(2, a:lock("f", 0)) == "timeout"
        a = nil -- luacheck: ignore 311
        collectgarbage()
        collectgarbage()
        copy_ok = copy_ok and #assert(inspect("f")).holders == 1
        d:set("child", copy_ok and "not a holder" or "a holder")
        exit(0)
    end
    eq(0, wait(pid), "the child's exit status")
    eq("not a holder", d:get("child"), "the copy in the child")
    eq(true, a:owned(), "still the parent's")
    eq(1, #assert(inspect("f")).holders, "still held")
    eq(1, a:unlock(), "the parent's unlock")
else
    notes[#notes + 1] = "no fork: luaposix is not installed for " .. _VERSION
                        .. " (the C module's test build has one)"
end

print("ok" .. (#notes > 0 and " (" .. table.concat(notes, "; ") .. ")"
               or ""))
