-- helpers.soak_sem: a semaphore's permits in the soak (spec/soak.lua),
-- run by one process (the conductor) with children it forks and kills.
--
-- CHILDREN children take permits of one key (PERMITS of them, a 60 s
-- lease) in a loop: acquire, a marker "h:<pid>" in the zone, a count of
-- the markers of live processes (at most PERMITS, else a violation), a
-- hold of 0-2 ms, the marker deleted, release.  Some children arm the
-- test build's crash countdown and die at a random structural write (a
-- slot's CAS, a record, the zone's own writes); the conductor SIGKILLs a
-- random child every 20-200 ms, holding, waiting or in between, and
-- starts another.  A dead child's marker stays until the conductor reaps
-- it (a zombie counts as dead: the library's rule), its permit until the
-- next acquirer finds the key full: that acquirer must get it at once.
--
-- It checks, while it runs: no more than PERMITS live holders at once, no
-- answer but a permit or "timeout" (and timeouts only while the permits
-- are held by live processes: a wait of 5 s behind 1-2 ms holds), the
-- zone verifying; at the end: no permit left held once every child is
-- gone, the zone verifying.

local proc = require "harness.proc"
local shdict = require "resty.shmlock.shdict"
local semaphore = require "resty.shmlock.semaphore"
local board = require "helpers.soak_board"
local lib = require "helpers.test_hooks"

local fmt = string.format
local random = math.random
local tostring = tostring

local _M = {
    NAME = "semsoak",
    PERMITS = 3,
    CHILDREN = 6,
    ROUNDS = 400,           -- a child's rounds before it ends by itself
}

local KEY = "s"


local function violation(cfg, msg)
    board.report(cfg.fd, "V " .. cfg.who .. ": " .. msg)
end


-- how many live processes mark themselves holders
local function live_holders(dict)
    local n = 0
    for _, k in ipairs(dict:get_keys(0)) do
        local pid = tonumber(k:match("^h:(%d+)$"))
        if pid and lib.shmlock_proc_alive(pid, 0) ~= 0 then
            n = n + 1
        end
    end
    return n
end


local function child(cfg, dict)
    if random() < 0.3 then
        lib.shmlock_test_crash_at(random(1, 60))
    end
    local me = "h:" .. proc.getpid()
    local sem = assert(semaphore:new(dict, { permits = _M.PERMITS,
                                             timeout = 5, exptime = 60 }))
    local b = board.attach(cfg.addr)
    for _ = 1, _M.ROUNDS do
        if b.stop ~= 0 then
            return
        end
        local elapsed, err = sem:acquire(KEY)
        if elapsed then
            dict:set(me, true)
            local n = live_holders(dict)
            if n > _M.PERMITS then
                violation(cfg, fmt("%d live holders of %d permits", n,
                                   _M.PERMITS))
            end
            if random() < 0.5 then
                proc.sleep(random(0, 2) / 1000)
            end
            dict:delete(me)
            local ok
            ok, err = sem:release()
            if ok ~= 1 then
                violation(cfg, "release: " .. tostring(ok) .. " "
                               .. tostring(err))
            end
            dict:incr("rounds", 1, 0)
        elseif err == "timeout" then
            dict:incr("timeouts", 1, 0)
        else
            violation(cfg, "acquire: " .. tostring(err))
        end
    end
end


-- syntax: soak_sem.conduct(cfg)
-- cfg: addr, fd, lane, who, dir, seed.
function _M.conduct(cfg)
    math.randomseed(cfg.seed)
    local b = board.attach(cfg.addr)
    local lane = b.lane[cfg.lane]
    local dict = assert(shdict.open(_M.NAME, { dir = cfg.dir,
                                               size = "256k" }))
    local kids = {}             -- pid -> true (false: killed by us)
    local n_kids = 0
    local deaths = { killed = 0, at_write = 0 }
    board.beat(lane)

    local function reap()
        for pid, ours in pairs(kids) do
            local r = proc.try_wait(pid)
            if r then
                kids[pid] = nil
                n_kids = n_kids - 1
                dict:delete("h:" .. pid)
                if r.how == "exit" and r.code ~= 0 then
                    violation(cfg, fmt("child %d: exit %d %s", pid, r.code,
                                       tostring(r.msg)))
                elseif r.how == "signal" and r.sig ~= proc.SIGKILL then
                    violation(cfg, fmt("child %d: signal %d", pid, r.sig))
                elseif r.how == "signal" then
                    deaths[ours and "at_write" or "killed"] =
                        deaths[ours and "at_write" or "killed"] + 1
                end
            end
        end
    end

    local checks = 0
    while b.stop == 0 do
        while n_kids < _M.CHILDREN do
            kids[proc.spawn(child, cfg, dict)] = true
            n_kids = n_kids + 1
            board.add(lane, "children")
        end
        proc.sleep(random(20, 200) / 1000)
        local victims = {}
        for pid, ours in pairs(kids) do
            if ours then
                victims[#victims + 1] = pid
            end
        end
        if #victims > 0 then
            local pid = victims[random(#victims)]
            kids[pid] = false
            proc.kill(pid, proc.SIGKILL)
        end
        reap()
        checks = checks + 1
        if checks % 10 == 0 then
            local ok, err = dict:verify()
            if not ok then
                violation(cfg, "verify: " .. tostring(err))
            end
        end
        board.beat(lane)
    end

    for pid in pairs(kids) do
        proc.kill(pid, proc.SIGKILL)
    end
    for pid in pairs(kids) do
        proc.wait(pid, 10)
    end
    local sem = assert(semaphore:new(dict, { permits = _M.PERMITS }))
    local left = sem:count(KEY)
    if left ~= 0 then
        violation(cfg, fmt("%s permits held once every child is gone",
                           tostring(left)))
    end
    local ok, err = dict:verify()
    if not ok then
        violation(cfg, "verify at the end: " .. tostring(err))
    end
    board.report(cfg.fd, fmt("semaphore: %d rounds, %d timeouts; children "
                             .. "SIGKILLed: %d holding or waiting, %d at a "
                             .. "structural write", dict:get("rounds") or 0,
                             dict:get("timeouts") or 0, deaths.killed,
                             deaths.at_write))
    board.beat(lane)
end

return _M
