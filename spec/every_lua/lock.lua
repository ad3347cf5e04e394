-- spec/every_lua/lock.lua DIR: the lock (resty.shmlock) under whichever
-- interpreter runs this (spec/60; make test-every-lua, under valgrind and
-- ASan): every method's returns and errors, a waiter woken by the release
-- in another process, a holder killed with SIGKILL taken over at once, a
-- starving waiter's mark and the handoff to it, the release of a
-- collected lock object, a lock object copied into a forked child
-- (luaposix's fork, or the C module's test build's); under PUC Lua, the C
-- module's holder-group calls.  Prints "ok" (with a note for a part
-- skipped) or raises.  Waits only for signals (a waiter counted on the
-- key's word, a value in the zone, a process gone), each bounded by a
-- deadline.
--
--     lua lock.lua DIR [PEER]       the checks; the other processes run
--                                   under PEER (default: this interpreter)
--     lua lock.lua DIR hold KEY     (a child) holds KEY until killed
--     lua lock.lua DIR wait KEY     (a child) waits for KEY, holds it until
--                                   the zone's "go" says so
-- luacheck: ignore 311 (each answer is read into the same locals)
local dir, role, key = assert(arg[1], "usage: lock.lua DIR"), arg[2], arg[3]
local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local core = require "resty.shmlock.internal.core"
local clock = require "resty.shmlock.internal.clock"

local d = assert(shdict.open("el_lock", { dir = dir, size = "1m" }))

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
    local lock = assert(resty_lock:new(d, { exptime = 600 }))
    eq(0, lock:lock(key), "the holder's lock")
    assert(d:set("holder_pid", core.self_pid()))
    clock.sleep(600)
    return
elseif role == "wait" then
    local lock = assert(resty_lock:new(d, { timeout = 60 }))
    assert(d:set("waiter_pid", core.self_pid()))
    local elapsed, err = lock:lock(key)
    eq(nil, err, "the waiter's lock")
    assert(elapsed > 0, "it waited")
    assert(d:set("waited", key))
    until_true(function() return d:get("go") == key end, "go")
    eq(1, lock:unlock(), "the waiter's unlock")
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

-- new: resty.lock's constructor and errors
local lock, err = resty_lock:new("el_no_such_zone")
eq(nil, lock, "new on no zone")
eq(true, err:find("^dictionary not found: no zone \"el_no_such_zone\"")
         ~= nil, err)
local ok, msg = pcall(resty_lock.new, resty_lock, d, { timeout = -1 })
eq(false, ok, "a bad option raises")
eq(true, msg:find("opts.timeout", 1, true) ~= nil, msg)
lock = assert(resty_lock.new(d, { timeout = 0.001 }))
local other = assert(resty_lock:new(d, { timeout = 0.001 }))

-- lock, trylock, owned, expire, unlock: every return
eq(nil, (lock:unlock()), "unlock of nothing")
eq("unlocked", select(2, lock:unlock()), "unlock of nothing: err")
eq("unlocked", select(2, lock:expire()), "expire of nothing")
eq(false, lock:owned(), "owned of nothing")
eq("nil key", select(2, lock:lock(nil)), "nil key")
eq("empty key", select(2, lock:lock("")), "empty key")
eq("key too long", select(2, lock:lock(("k"):rep(70000))), "key too long")
eq(0, lock:lock("k"), "lock")
eq("locked", select(2, lock:lock("k2")), "locked")
eq(true, lock:owned(), "owned")
eq("timeout", select(2, other:trylock("k")), "trylock of a held key")
eq("timeout", select(2, other:lock("k")), "lock of a held key")
eq(false, other:owned(), "not owned by the other")
eq(true, lock:expire(60), "expire")
local info = assert(resty_lock.inspect(d, "k"))
eq(core.self_pid(), info.pid, "inspect's pid")
eq(true, info.alive, "inspect's alive")
eq(true, info.ttl > 0 and info.ttl <= 60, "inspect's ttl " .. info.ttl)
eq(1, lock:unlock(), "unlock")
eq("unlocked", select(2, lock:unlock()), "unlock twice")
eq("not locked", select(2, resty_lock.inspect(d, "k")), "inspect free")
eq(0, other:trylock("k"), "trylock of a free key")
eq(true, other:expire(0.001), "a short expiry")
until_true(function() return not other:owned() end, "the lock expires")
local one, why = other:unlock()
eq(1, one, "unlock of an expired lock")
eq(nil, why, "released: nobody took it")
eq(0, lock:trylock("k"), "trylock again")
eq(true, other:expire() == nil, "expire of nothing held")
eq(1, lock:unlock(), "unlock again")

-- a waiter in another process, woken by the release
eq(0, lock:lock("w"), "lock w")
spawn("wait", "w")
until_true(function()
    local i = resty_lock.inspect(d, "w")
    return i and i.waiters >= 1
end, "the waiter counted on the key's word")
eq(1, lock:unlock(), "the release")
until_true(function() return d:get("waited") == "w" end, "the waiter's turn")
assert(d:set("go", "w"))
eq("ok\n", waiter_said("w"), "the waiter")

-- a starving waiter in another process marks the lock: the release hands
-- it over, the key never free in between
eq(0, lock:lock("x"), "lock x")
spawn("wait", "x")
until_true(function()
    local i = resty_lock.inspect(d, "x")
    return i and i.marked and i.marked.pid == d:get("waiter_pid")
end, "the waiter's mark")
eq(1, lock:unlock(), "the release hands over")
eq("timeout", select(2, lock:trylock("x")), "handed over, never free")
until_true(function() return d:get("waited") == "x" end, "the waiter's turn")
eq(d:get("waiter_pid"), assert(resty_lock.inspect(d, "x")).pid, "its holder")
assert(d:set("go", "x"))
eq("ok\n", waiter_said("x"), "the waiter")

-- a holder killed with SIGKILL: its lock is taken at once
spawn("hold", "h")
until_true(function() return d:get("holder_pid") end, "the holder's lock")
local hpid = d:get("holder_pid")
eq("timeout", select(2, lock:trylock("h")), "held by a live holder")
info = assert(resty_lock.inspect(d, "h"))
eq(hpid, info.pid, "the holder's pid") eq(true, info.alive, "alive")
assert(os.execute("kill -9 " .. hpid))
until_true(function() return not core.proc_alive(hpid) end, "the kill")
eq(false, assert(resty_lock.inspect(d, "h")).alive, "dead")
eq(0, lock:trylock("h"), "a dead holder's lock, taken at once")
eq(1, lock:unlock(), "unlock h")

-- a starving waiter marks the lock; the release hands it over
local zone = require "resty.shmlock.lock.zone"
local codes = require "resty.shmlock.internal.codes"
-- (the word a marked waiter sleeps on is the same for every interpreter:
-- a LuaJIT process's handoff wakes a Lua 5.1 process's waiter)
eq(4034013619, zone.marked_hash(core.hash("a")), "the marked waiter's word")
eq(0, lock:lock("m"), "lock m")
local w = zone.handle(d._zone)
eq(codes.EXISTS, zone.acquire(w, "m", 1, 30000), "the waiter's first try")
local now = clock.now_ms()
eq(zone.MARKED, zone.look(d._zone, "m", 1, w, 30000, false, now,
                          now + 60000), "the waiter marks")
info = assert(resty_lock.inspect(d, "m"))
eq(core.self_pid(), info.marked.pid, "inspect's marked waiter")
eq(true, info.marked.alive, "the marked waiter lives")
eq(1, lock:unlock(), "the release hands over")
eq(zone.ACQUIRED, zone.look(d._zone, "m", 1, w, 30000, false, now,
                            now + 60000), "the waiter holds it")
eq("timeout", select(2, lock:trylock("m")), "held by the waiter")
eq(1, zone.release(d._zone, w), "the waiter releases")
-- a mark withdrawn: the holder's release frees the key
eq(0, lock:lock("m"), "lock m again")
eq(zone.MARKED, zone.look(d._zone, "m", 1, w, 30000, false, now,
                          now + 60000), "marked again")
eq(false, zone.withdraw(d._zone, "m", 1, w), "withdrawn")
eq(1, lock:unlock(), "the release")
eq("not locked", select(2, resty_lock.inspect(d, "m")), "free")

-- a lock object collected while holding releases its lock.  Referenced
-- until the "held" check (a collector may run at any allocation), then
-- dropped and collected by full collections until its release shows; one
-- is enough (a full collection runs the finalizers of what it frees), ten
-- without the release fail.  (Made in a function: its registers are gone
-- when it returns, none of this chunk's keeps a copy.)
local function new_holder(k)
    local l = assert(resty_lock:new(d))
    eq(0, l:lock(k), "lock " .. k)
    return l
end
local dropped = new_holder("g")
eq(core.self_pid(), assert(resty_lock.inspect(d, "g")).pid, "held")
eq(true, dropped:owned(), "owned")
dropped = nil -- luacheck: ignore 311
for _ = 1, 10 do
    collectgarbage()
    if select(2, resty_lock.inspect(d, "g")) == "not locked" then break end
end
eq("not locked", select(2, resty_lock.inspect(d, "g")), "released by GC")
eq(0, other:trylock("g"), "g is free")
eq(1, other:unlock(), "unlock g")

-- the C module's holder-group calls themselves (resty.shmlock.semaphore's
-- under PUC Lua: spec/every_lua/semaphore.lua runs the semaphore)
if not core.ffi then
    local mod, K = core.mod, core.mod.K
    local t1, t2, t3 = mod.ticket(), mod.ticket(), mod.ticket()
    local sem = K.SEMAPHORE
    eq(K.OK, mod.group_acquire(d._zone, sem, "s", 1, 11, 2, 0, t1), "permit 1")
    eq(K.OK, mod.group_acquire(d._zone, sem, "s", 1, 12, 2, 60000, t2),
       "permit 2")
    eq(K.EXISTS, mod.group_acquire(d._zone, sem, "s", 1, 13, 2, 0, t3),
       "full")
    local head = mod.ticket()
    eq(K.OK, mod.group_head(d._zone, sem, "s", 1, head), "the head")
    eq(false, select(4, mod.ticket_state(head)), "the head unmarked")
    eq(K.NOT_FOUND, mod.group_head(d._zone, sem, "none", 4, head),
       "no head")
    local rc, count = mod.group_reclaim(d._zone, sem, "s", 1)
    eq(K.OK, rc, "reclaim") eq(2, count, "two holders")
    local holders
    rc, count, holders = mod.group_holders(d._zone, sem, "s", 1, 8)
    eq(K.OK, rc, "holders") eq(2, count, "holders' count")
    eq(core.self_pid(), (mod.ticket_state(holders[1])), "a holder's pid")
    eq(K.OK, mod.group_extend(d._zone, sem, "s", 1, t2, 1000), "extend")
    eq(K.OK, mod.group_release(d._zone, sem, "s", 1, t1), "release 1")
    eq(K.OK, mod.group_acquire(d._zone, sem, "s", 1, 13, 2, 0, t3), "again")
    eq(K.OK, mod.group_release(d._zone, sem, "s", 1, t2), "release 2")
    eq(K.OK, mod.group_release(d._zone, sem, "s", 1, t3), "release 3")
    eq(0, select(2, mod.group_reclaim(d._zone, sem, "s", 1)), "none left")
    -- room for up to GROUP_MAX holders (semaphore.inspect lists them all)
    eq(K.OK, (mod.group_holders(d._zone, sem, "s", 1, K.GROUP_MAX)),
       "holders, GROUP_MAX of room")
end

-- a lock object copied into a forked child holds nothing there
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
    eq(0, lock:lock("f"), "lock f")
    local pid = assert(fork())
    if pid == 0 then
        local copy_ok = lock:owned() == false
            and select(2, lock:unlock()) == "unlocked"
            and select(2, lock:trylock("f")) == "timeout"
        lock = nil -- luacheck: ignore 311
        collectgarbage()
        collectgarbage()
        copy_ok = copy_ok and select(2, other:trylock("f")) == "timeout"
        d:set("child", copy_ok and "not a holder" or "a holder")
        exit(0)
    end
    eq(0, wait(pid), "the child's exit status")
    eq("not a holder", d:get("child"), "the copy in the child")
    eq(true, lock:owned(), "still the parent's")
    eq("timeout", select(2, other:trylock("f")), "still held")
    eq(1, lock:unlock(), "the parent's unlock")
else
    notes[#notes + 1] = "no fork: luaposix is not installed for " .. _VERSION
                        .. " (the C module's test build has one)"
end

print("ok" .. (#notes > 0 and " (" .. table.concat(notes, "; ") .. ")"
               or ""))
