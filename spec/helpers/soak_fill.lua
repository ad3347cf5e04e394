-- helpers.soak_fill: a zone that fills up under a marked lock, in cycles,
-- run by one process (the conductor) with children it forks for each
-- cycle: a holder H of key "k" (exptime 0, so only its unlock or its death
-- frees it), a waiter W1 that starves and marks the lock (resty.shmlock's
-- starvation mode), then the zone filled with pinned entries (safe_add,
-- no expiry) until not even an empty value fits.  Three cycles in turn:
--
-- * handoff: a second waiter W2 with a short timeout must return "timeout"
--   on time and without spinning; then H's unlock must hand the lock to
--   W1 (a cas to a shorter value, in a full zone) within HANDOFF_LIMIT;
-- * give up: W1 itself has a short timeout and must return on time; H's
--   unlock must then free the key, which another process takes at once;
-- * dead holder: H is SIGKILLed; W1 must take the lock over within
--   HANDOFF_LIMIT of the kill.
--
-- Then the key must be free, the zone must verify, and flush_all +
-- flush_expired must give all its memory back.

local proc = require "harness.proc"
local env = require "helpers.lock_env"
local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local board = require "helpers.soak_board"
local checkout = require "helpers.checkout"
local slot = require "helpers.lock_slot"

local fmt = string.format
local random = math.random
local tostring = tostring
local tonumber = tonumber

-- LATE and HANDOFF_LIMIT are ceilings only a hang reaches, not margins:
-- a loaded machine wakes a sleeper late (a busy loop beside the soak has
-- made a dead holder's takeover take 0.63 s, for a waiter that looks at
-- the holder every 100 ms).  A waiter that ignores its timeout still fails
-- (it waits for H, who is only released after it returned), as does one
-- returning early (late < 0), a takeover or a handoff that does not
-- happen (W1 then times out), and a waiter that spins (CPU: CPU seconds,
-- which a busy machine does not inflate).
local _M = {
    NAME = "full",
    SIZE = "32k",
    SHORT = 0.3,            -- seconds: a short-timeout waiter's timeout
    LATE = 3,               -- seconds a waiter may return past its timeout
    CPU = 0.05,             -- CPU seconds a waiter may use per wait
    HANDOFF_LIMIT = 4,      -- seconds from unlock (or kill) to W1 holding
                            -- (W1's own timeout: 5 s)
}

local write_file = checkout.write_file

-- a child's result file, read once: it is removed
local function read_file(path)
    local s = checkout.read_file(path)
    os.remove(path)
    return s
end


-- H: locks "k", says so, unlocks when told; writes "<ret> <err> <us>"
-- (the unlock's returns and the time just before it)
local function spawn_holder(dict, out)
    local held, go = proc.pipe(), proc.pipe()
    local pid = proc.spawn(function()
        held:close_read()
        go:close_write()
        local lock = assert(resty_lock:new(dict, { exptime = 0 }))
        local elapsed, err = lock:lock("k")
        assert(elapsed == 0, "H: lock: " .. tostring(elapsed) .. " "
                             .. tostring(err))
        held:notify()
        assert(go:await(30), "H: never told to unlock")
        local t = board.now_us()
        local ok
        ok, err = lock:unlock()
        write_file(out, fmt("%s %s %d", tostring(ok), tostring(err), t))
    end)
    held:close_write()
    go:close_read()
    local ok = held:await(5)
    held:close()
    return pid, go, ok
end

-- a waiter: lock("k") with `timeout`; writes "<elapsed> <err> <wall s>
-- <cpu s> <got us> <unlock's ret>"
local function spawn_waiter(dict, timeout, out)
    return proc.spawn(function()
        local lock = assert(resty_lock:new(dict, { timeout = timeout }))
        local t0, cpu0 = env.now(), env.cpu()
        local elapsed, err = lock:lock("k")
        local got = board.now_us()
        local wall, cpu = env.now() - t0, env.cpu() - cpu0
        local unlocked = "-"
        if elapsed then
            unlocked = tostring(lock:unlock())
        end
        write_file(out, fmt("%s %s %.6f %.6f %d %s", tostring(elapsed),
                            tostring(err), wall, cpu, got, unlocked))
    end)
end

local function waiter_result(s)
    local elapsed, err, wall, cpu, got, unlocked =
        tostring(s):match("^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+)$")
    if not elapsed then
        return nil
    end
    return { elapsed = tonumber(elapsed), err = err, wall = tonumber(wall),
             cpu = tonumber(cpu), got = tonumber(got), unlocked = unlocked }
end

-- pins entries, smaller and smaller, until not even an empty one fits
local function fill(dict)
    local n = 0
    for _, size in ipairs({ 200, 50, 10, 0 }) do
        local ok, err
        repeat
            n = n + 1
            ok, err = dict:safe_add("f" .. n, string.rep("x", size))
        until not ok
        if err ~= "no memory" then
            return nil, err
        end
    end
    return n
end


local Cycle = {}
Cycle.__index = Cycle

function Cycle:fail(msg)
    board.report(self.cfg.fd, fmt("V %s: cycle %d (%s): %s", self.cfg.who,
                                  self.n, self.kind, msg))
    self.failed = true
end

function Cycle:file(name)
    return fmt("%s/fill.%d.%s", self.cfg.dir, self.cfg.pid, name)
end

-- waits for a child; true when it exited cleanly
function Cycle:reap(pid, name, timeout)
    local r = proc.wait(pid, timeout)
    if r.how ~= "exit" or r.code ~= 0 then
        self:fail(fmt("%s: %s %s %s", name, r.how, tostring(r.code or r.sig),
                      r.msg))
        return false
    end
    return true
end

-- true once W1 (pid) has marked H's lock (10 s: a fork and a 2 ms wait,
-- on a loaded machine)
function Cycle:await_mark(pid)
    local deadline = env.now() + 10
    repeat
        if slot.marked(self.dict, "k") == pid then
            return true
        end
        proc.sleep(0.001)
    until env.now() > deadline
    self:fail("W1 never marked the lock: k's mark is by pid "
              .. tostring(slot.marked(self.dict, "k")))
    return false
end

-- a waiter that was to time out: did it, on time, without spinning?
function Cycle:timed_out(r, name, timeout)
    if not r or r.err ~= "timeout" then
        self:fail(name .. " should have timed out: " .. tostring(r and r.err))
        return
    end
    local late = r.wall - timeout
    board.max(self.lane, "late_us", late * 1e6)
    board.max(self.lane, "cpu_us", r.cpu * 1e6)
    if late < 0 or late > _M.LATE then
        self:fail(fmt("%s returned after %.3f s, timeout %.3f s", name,
                      r.wall, timeout))
    end
    if r.cpu > _M.CPU then
        self:fail(fmt("%s used %.3f s of CPU waiting", name, r.cpu))
    end
end

-- W1 got the lock within HANDOFF_LIMIT of `since` (us) and unlocked it
function Cycle:got(r, since, what)
    if not r or not r.elapsed then
        self:fail("W1 did not get the lock after " .. what .. ": "
                  .. tostring(r and r.err))
        return
    end
    local dt = (r.got - since) / 1e6
    board.max(self.lane, "handoff_us", dt * 1e6)
    if dt > _M.HANDOFF_LIMIT then
        self:fail(fmt("W1 got the lock %.3f s after %s", dt, what))
    end
    if r.unlocked ~= "1" then
        self:fail("W1's unlock: " .. r.unlocked)
    end
end

function Cycle:run()
    local dict, kind = self.dict, self.kind
    local h_out = self:file("H")
    local h, go, held = spawn_holder(dict, h_out)
    board.add(self.lane, "children", kind == "handoff" and 3 or 2)
    if not held then
        self:fail("H never took k")
        proc.kill(h)
        self:reap(h, "H", 5)
        return
    end
    local w1_timeout = kind == "give up" and _M.SHORT or 5
    local w1 = spawn_waiter(dict, w1_timeout, self:file("W1"))
    if not self:await_mark(w1) then
        proc.kill(h)
        proc.kill(w1)
        proc.wait(h, 5)
        proc.wait(w1, 5)
        return
    end
    board.beat(self.lane)
    local w2
    if kind == "handoff" then
        w2 = spawn_waiter(dict, _M.SHORT, self:file("W2"))
    end
    local pinned, err = fill(dict)
    if not pinned then
        self:fail("fill: " .. tostring(err))
    else
        board.add(self.lane, "fills", pinned)
    end

    if w2 and self:reap(w2, "W2", 5) then
        self:timed_out(waiter_result(read_file(self:file("W2"))), "W2",
                       _M.SHORT)
    end
    if kind == "give up" and self:reap(w1, "W1", 5) then
        self:timed_out(waiter_result(read_file(self:file("W1"))), "W1",
                       _M.SHORT)
    end
    board.beat(self.lane)

    local since
    if kind == "dead holder" then
        since = board.now_us()
        proc.kill(h)
        local r = proc.wait(h, 5)
        if r.how ~= "signal" then
            self:fail("H was not killed: " .. r.how)
        end
    else
        go:notify()
        if self:reap(h, "H", 5) then
            local ret, e, t = tostring(read_file(h_out)):match(
                "^(%S+) (%S+) (%d+)$")
            if ret ~= "1" then
                self:fail(fmt("H's unlock in the full zone: %s, %s",
                              tostring(ret), tostring(e)))
            end
            since = tonumber(t)
        end
    end
    go:close()

    if kind ~= "give up" and since and self:reap(w1, "W1", 10) then
        self:got(waiter_result(read_file(self:file("W1"))), since,
                 kind == "dead holder" and "H's death" or "H's unlock")
        board.add(self.lane, kind == "dead holder" and "takeovers"
                             or "handoffs")
    end
    if kind == "give up" then
        -- the key is free: another process takes it at once
        local l = assert(resty_lock:new(dict))
        local elapsed, e = l:trylock("k")
        if elapsed ~= 0 then
            self:fail("trylock after H's unlock: " .. tostring(e))
        else
            l:unlock()
        end
    end
end

-- after a cycle: the key free, the zone whole, all memory back
function Cycle:clean(empty)
    local dict = self.dict
    local info = slot.info(dict, "k")
    if info then
        self:fail("k is still held by pid " .. info.pid)
        slot.release(dict, "k")
    end
    local ok, err = dict:verify()
    if not ok then
        self:fail("verify, full: " .. tostring(err))
    end
    dict:flush_all()
    dict:flush_expired()
    if dict:free_space() ~= empty then
        self:fail(fmt("free space %d after flush, %d before the cycle",
                      dict:free_space(), empty))
    end
    ok, err = dict:verify()
    if not ok then
        self:fail("verify, flushed: " .. tostring(err))
    end
end


local KINDS = { "handoff", "give up", "dead holder" }

-- syntax: soak_fill.conduct(cfg)
-- cfg: addr, fd, lane, who, dir, seed.
function _M.conduct(cfg)
    math.randomseed(cfg.seed)
    cfg.pid = proc.getpid()
    local b = board.attach(cfg.addr)
    local lane = b.lane[cfg.lane]
    local dict = assert(shdict.open(_M.NAME, { dir = cfg.dir,
                                               size = _M.SIZE }))
    dict:flush_all()
    dict:flush_expired()
    local empty = dict:free_space()
    board.beat(lane)

    local n = 0
    while b.stop == 0 do
        n = n + 1
        local c = setmetatable({ cfg = cfg, dict = dict, lane = lane, n = n,
                                 kind = KINDS[(n - 1) % #KINDS + 1] }, Cycle)
        c:run()
        c:clean(empty)
        proc.reap_all()
        board.add(lane, "cycles")
        board.beat(lane)
        proc.sleep(random(100, 400) / 1000)
    end
end

return _M
