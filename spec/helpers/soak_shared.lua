-- helpers.soak_shared: shared (reader) holds in the soak (spec/soak.lua),
-- run by one process (the conductor) in cycles, in a zone of its own
-- (NAME).  Each cycle forks READERS readers and WRITERS writers that,
-- for about CYCLE seconds, take key "k" shared (lock_shared) or exclusive
-- (lock) over and over:
--
-- * a writer, once in, finds no live writer's marker ("w": nil, or left
--   by a writer that died holding), writes its own, does a read-modify-
--   write of "v" in two steps, and removes the marker before unlock();
-- * a reader, once in, finds no live writer's marker, and "v" the same
--   at the end of its hold as at its start.
--
-- Any break of the exclusion is reported as a violation.  Meanwhile the
-- conductor SIGKILLs a child at a random moment in half the cycles, and a
-- third of the children die at a random structural write of the library
-- (shmlock_test_crash_at: inside acquire, release, a handoff to a waiting
-- writer, or a dictionary write); nobody may then wait for the dead: a
-- wait that runs out (TIMEOUT, far beyond any hold) is a violation.  At
-- the end of a cycle the key must be free at once for a writer and a
-- reader, and the zone must verify.

local proc = require "harness.proc"
local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local board = require "helpers.soak_board"
local round = require "helpers.soak_round"
local lib = require "helpers.test_hooks"

local fmt = string.format
local random = math.random
local tostring = tostring

local _M = {
    NAME = "rw",
    SIZE = "256k",
    READERS = 3,
    WRITERS = 2,
    CYCLE = 1.0,            -- seconds of rounds per child
    TIMEOUT = 20,           -- seconds a child may wait for "k"
    CRASH_SHARE = 1 / 3,    -- children that die at a structural write
    CRASH_WRITES = 400,     -- ... at one of their first that many
}


-- one child's rounds; violations go to the report pipe
local function child(cfg, dict, writer, id, crash_at)
    local who = fmt("%s: %s %s", cfg.who, writer and "writer" or "reader", id)
    local function fail(msg)
        board.report(cfg.fd, "V " .. who .. ": " .. msg)
    end
    local b = board.attach(cfg.addr)
    local me = round.me(id)
    local l = assert(resty_lock:new(dict, { timeout = _M.TIMEOUT,
                                            exptime = 60 }))
    if crash_at then
        lib.shmlock_test_crash_at(crash_at)
    end
    local stop = board.now_us() + _M.CYCLE * 1e6
    while b.stop == 0 and board.now_us() < stop do
        local elapsed, err
        if writer then
            elapsed, err = l:lock("k")
        else
            elapsed, err = l:lock_shared("k")
        end
        if not elapsed then
            fail((writer and "lock" or "lock_shared") .. ": " .. tostring(err))
            return
        end
        local w = dict:get("w")
        if w and round.alive(w) then
            fail("in beside a live writer " .. tostring(w))
        end
        if writer then
            dict:set("w", me)
            local v = dict:get("v") or 0
            proc.yield()
            dict:set("v", v + 1)
            dict:delete("w")
        else
            local v = dict:get("v")
            proc.yield()
            if dict:get("v") ~= v then
                fail(fmt("v changed under a shared hold: %s, then %s",
                         tostring(v), tostring(dict:get("v"))))
            end
        end
        local ok
        ok, err = l:unlock()
        if ok ~= 1 or err then
            fail("unlock: " .. tostring(ok) .. " " .. tostring(err))
        end
    end
end


local function check_free(cfg, dict, n)
    local function fail(msg)
        board.report(cfg.fd, fmt("V %s: cycle %d: %s", cfg.who, n, msg))
    end
    local l = assert(resty_lock:new(dict))
    local elapsed, err = l:lock("k", 0)
    if elapsed ~= 0 then
        fail("k not free at once for a writer: " .. tostring(err))
    else
        l:unlock()
    end
    elapsed, err = l:lock_shared("k", 0)
    if elapsed ~= 0 then
        fail("k not free at once for a reader: " .. tostring(err))
    else
        l:unlock()
    end
    local ok
    ok, err = dict:verify()
    if not ok then
        fail("verify: " .. tostring(err))
    end
    -- a writer killed holding leaves its marker: dead, so harmless
    local w = dict:get("w")
    if w and not round.alive(w) then
        dict:delete("w")
    end
end


-- syntax: soak_shared.conduct(cfg)
-- cfg: addr, fd, lane, who, dir, seed.
function _M.conduct(cfg)
    math.randomseed(cfg.seed)
    local b = board.attach(cfg.addr)
    local lane = b.lane[cfg.lane]
    local dict = assert(shdict.open(_M.NAME, { dir = cfg.dir,
                                               size = _M.SIZE }))
    board.beat(lane)
    local n, children, killed, crashed = 0, 0, 0, 0
    while b.stop == 0 do
        n = n + 1
        local pids, fated = {}, {}
        for i = 1, _M.READERS + _M.WRITERS do
            local crash_at = random() < _M.CRASH_SHARE
                             and random(1, _M.CRASH_WRITES) or nil
            local pid = proc.spawn(child, cfg, dict, i <= _M.WRITERS,
                                   n .. "." .. i, crash_at)
            pids[i] = pid
            fated[pid] = crash_at ~= nil
        end
        board.add(lane, "children", #pids)
        children = children + #pids
        local kill_at = random() < 0.5
                        and board.now_us() + random() * _M.CYCLE * 1e6
        local victim = pids[random(#pids)]
        -- reap, beating, until every child is done
        local left = #pids
        local deadline = board.now_us() + (_M.CYCLE + _M.TIMEOUT + 10) * 1e6
        local done = {}
        while left > 0 do
            board.beat(lane)
            if kill_at and board.now_us() >= kill_at then
                kill_at = nil
                if not done[victim] then
                    proc.kill(victim, 9)
                    fated[victim] = true
                end
            end
            for _, pid in ipairs(pids) do
                local r = not done[pid] and proc.try_wait(pid)
                if r then
                    done[pid], left = true, left - 1
                    local sigkill = r.how == "signal" and r.sig == 9
                    if sigkill and fated[pid] then
                        if pid == victim then
                            killed = killed + 1
                        else
                            crashed = crashed + 1
                        end
                    elseif not (r.how == "exit" and r.code == 0) then
                        board.report(cfg.fd, fmt("V %s: cycle %d: child %d "
                                                 .. "%s %s %s", cfg.who, n,
                                                 pid, r.how,
                                                 tostring(r.code or r.sig),
                                                 tostring(r.msg)))
                    end
                end
            end
            if left > 0 and board.now_us() > deadline then
                for _, pid in ipairs(pids) do
                    if not done[pid] then
                        board.report(cfg.fd, fmt("V %s: cycle %d: child %d "
                                                 .. "stuck", cfg.who, n, pid))
                        proc.kill(pid, 9)
                        proc.wait(pid, 5)
                        done[pid], left = true, left - 1
                    end
                end
            end
            proc.sleep(0.005)
        end
        check_free(cfg, dict, n)
        board.add(lane, "cycles")
        board.beat(lane)
    end
    -- a line of the soak's output (not a violation)
    board.report(cfg.fd, fmt("shared holds: %d cycles, %d readers and "
                             .. "writers (%d SIGKILLed, %d died at a "
                             .. "structural write), v = %s", n, children,
                             killed, crashed, tostring(dict:get("v"))))
end

return _M
