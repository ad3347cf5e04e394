-- spec/soak.lua: the soak test (`make soak`; a short run is
-- spec/14-soak_spec.lua).  For SOAK_SECONDS, all at once:
--
-- * counter workers (helpers.soak_counter): processes, some with several
--   Lua VMs, doing lock-protected read-modify-write rounds on a few keys
--   of two zones (one shard, eight shards), with mutual exclusion checked
--   at every round and the counts checked exact at the end
--   (helpers.soak_round explains how kills cannot blur them);
-- * a kill storm: the driver SIGKILLs random workers at random moments
--   and respawns them; workers also die at a random structural write of
--   the library (shmlock_test_crash_at: inside a shard mutex, mid-update)
--   and at a random point of a critical section;
-- * pid reuse: now and then a worker takes a counter zone's mutexes
--   mid-round and is SIGKILLed there, and a live process is given its pid
--   (root: /proc/sys/kernel/ns_last_pid) before anybody can notice the
--   death; the others must go on within TAKEOVER_LIMIT;
-- * a zone filling up under marked locks (helpers.soak_fill);
-- * a zone destroyed and made again while others lock in it
--   (helpers.soak_phoenix);
-- * forkers (helpers.soak_fork): processes that make children while they
--   hold a lock, by fork(), a raw clone system call and _Fork(); each
--   child uses the lock object it inherited in every way, and none may
--   act on the parent's lock; and, where the kernel lets us, processes in
--   another time namespace, which every zone must refuse.
--
-- A hang detector watches every lane's and every counter key's progress.
-- At the end everything is stopped, every zone must verify, and the
-- figures are printed.  Output is TAP (prove -e luajit spec/soak.lua, or
-- plain luajit spec/soak.lua); the exit status is 0 only when every check
-- passed.
--
-- Environment: SOAK_SECONDS (300), SOAK_WORKERS (counter processes, 6),
-- SOAK_FORKERS (2),
-- SOAK_KILL_MS (mean interval between the storm's kills, 150),
-- SOAK_REUSE_EVERY (seconds between pid reuses, 10), SOAK_SEED,
-- SOAK_HANG_AFTER (10 s), SOAK_BREAK (the self-test: "lock" or "hang").

-- run outside busted: the one line that finds helpers.checkout, which sets
-- the require roots
package.path = ((arg and arg[0] or ""):match("^(.-)soak%.lua$") or "spec/")
               .. "?.lua;" .. package.path
require("helpers.checkout").use_path()

local ffi = require "ffi"
local proc = require "harness.proc"
local procs = require "helpers.soak_procs"
local board = require "helpers.soak_board"
local round = require "helpers.soak_round"
local counter = require "helpers.soak_counter"
local phoenix = require "helpers.soak_phoenix"
local fill = require "helpers.soak_fill"
local forkers = require "helpers.soak_fork"
local env = require "helpers.lock_env"
local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local lib = require "helpers.test_hooks"

local C = ffi.C
local fmt = string.format
local random = math.random
local floor = math.floor

local function num_env(name, default)
    return tonumber(os.getenv(name)) or default
end

local CFG = {
    seconds = num_env("SOAK_SECONDS", 300),
    workers = num_env("SOAK_WORKERS", 6),
    multi = 2,                  -- counter workers with several VMs
    vms = 3,                    -- VMs in each of those
    lockers = 2,                -- processes locking in the phoenix zone
    forkers = num_env("SOAK_FORKERS", 2),
    kill_ms = num_env("SOAK_KILL_MS", 150),
    reuse_every = num_env("SOAK_REUSE_EVERY", 10),
    seed = num_env("SOAK_SEED", os.time()),
    crash_share = 0.3,          -- workers that die at a structural write
    crash_writes = 3000,        -- ... at one of their first that many
    die_share = 0.25,           -- workers that die inside a round
    die_rounds = 200,           -- ... in one of their first that many
    hang_after = num_env("SOAK_HANG_AFTER", 10),    -- seconds without
                                -- progress that make a hang
    takeover_limit = 8,         -- seconds the others may stall after a
                                -- kill inside the mutex: a takeover that
                                -- does not happen at once waits forever
                                -- (the mutex) or the locks' exptime (30 s),
                                -- so 8 s tells it apart without judging
                                -- the machine's load (a loaded 2-core box
                                -- has stalled a run past 2 s)
    grace = 20,                 -- seconds to stop at the end
    overtime = num_env("SOAK_OVERTIME", 2),  -- times `seconds` the run may
                                -- go on while a scenario has not run yet
                                -- (in the self-test: while its break has
                                -- not shown): a loaded machine runs fewer
                                -- cycles in `seconds`, and what must be
                                -- seen is a count, not a rate
    progress_every = 10,        -- seconds (a quarter of a short run)
    -- the soak's self-test: "lock" makes the counter workers' locks skip
    -- a lock now and then, "hang" makes one worker stop inside a round;
    -- the soak must then fail
    breaks = os.getenv("SOAK_BREAK"),
}

CFG.progress_every = math.min(CFG.progress_every,
                              math.max(1, CFG.seconds / 4))

-- Every process (VM) that ever writes a counter keeps its tallies there:
-- about 200 bytes per writer, some 130 writers a second.  The zones grow
-- with the run (28 MB each for 300 s), so that they never fill up.
local COUNTER_SIZE = (8 + math.ceil(CFG.seconds * 0.064)) * 1024 * 1024
local ZONES = {
    { name = "cnt1", size = COUNTER_SIZE, shards = 1 },
    { name = "cnt2", size = COUNTER_SIZE, shards = 8 },
}
local KEYS = 4                          -- k1 .. k4 in each counter zone
local SLOT_LANES = 4
local VICTIM_LANE = board.LANES - 2
local IMPOSTOR_LANE = board.LANES - 1
local TAKEOVER_US = CFG.takeover_limit * 1e6

local now_us = board.now_us
local out = io.stdout
local function say(s)
    out:write(s, "\n")
    out:flush()
end

math.randomseed(CFG.seed)


-- the run's state ----------------------------------------------------------

local dir, report, b, board_addr, can_reuse, can_timens, timens_why
local dicts = {}
local slots = {}
local running = {}              -- pid -> process record
local stopping = false
local S = {                     -- figures
    forks = 0, attempts = 0, orphans = 0, reuses = 0, reuse_failed = 0,
    victims = 0, worst_resume = 0, worst_impostor = 0,
    kills = { storm = 0, in_cs = 0, crash_at = 0, mutex = 0 },
    holding = {}, waiting = {},         -- kills by kind, of a lock holder
                                        -- or waiter
    violations = 0, hangs = 0, verifies = 0,
}
local totals = {}               -- board fields, summed over ended lanes
for _, name in ipairs(board.FIELDS) do
    totals[name] = 0
end
local messages = {}             -- the first violations
local hang_messages = {}
local rounds_of = {}            -- kind of process -> lock rounds done


local interrupted                -- the signal that cut the run short

local function violation(msg)
    if interrupted then
        return          -- the children took the signal too
    end
    S.violations = S.violations + 1
    if #messages < 30 then
        messages[#messages + 1] = msg
    end
    if S.violations <= 100 then
        say("# VIOLATION " .. msg)
    elseif S.violations == 101 then
        say("# (more violations: counted, not shown)")
    end
end

local function hang(msg)
    S.hangs = S.hangs + 1
    if #hang_messages < 30 then
        hang_messages[#hang_messages + 1] = msg
    end
    say("# HANG " .. msg)
end


-- the report pipe ----------------------------------------------------------

local pending = ""
local rbuf = ffi.new("char[65536]")
local pfd = ffi.new("struct pollfd[1]")

local function read_reports()
    while true do
        pfd[0].fd, pfd[0].events, pfd[0].revents = report.r, 1, 0
        if C.poll(pfd, 1, 0) <= 0 then
            break
        end
        local n = tonumber(C.read(report.r, rbuf, 65536))
        if n <= 0 then
            break
        end
        pending = pending .. ffi.string(rbuf, n)
    end
    for line in pending:gmatch("([^\n]*)\n") do
        if line:sub(1, 2) == "V " then
            violation(line:sub(3))
        else
            say("# " .. line)
        end
    end
    pending = pending:match("[^\n]*$")
end


-- lanes --------------------------------------------------------------------

local function clear_lane(l)
    local lane = b.lane[l]
    ffi.fill(lane, ffi.sizeof("soak_lane_t"))
    lane.beat_us = now_us()
end

-- adds a lane's counters to the totals (max for the worst-case ones)
local function harvest_lane(l, p)
    local lane = b.lane[l]
    for i, name in ipairs(board.FIELDS) do
        local v = lane.n[i - 1]
        if name:match("_us$") then
            totals[name] = math.max(totals[name], v)
        else
            totals[name] = totals[name] + v
        end
    end
    if lane.dying ~= 0 then
        p.dying = true
    end
    if lane.state == board.HOLDING then
        p.holding = true
    elseif lane.state == board.WAITING then
        p.waiting = true
    end
    clear_lane(l)
end

local function harvest(p)
    for l = p.base, p.base + p.lanes - 1 do
        rounds_of[p.kind] = (rounds_of[p.kind] or 0)
                            + board.get(b.lane[l], "rounds")
        harvest_lane(l, p)
    end
end

-- a figure: the totals plus what running lanes have counted so far
local function figure(name)
    local v = totals[name]
    for _, p in pairs(running) do
        for l = p.base, p.base + p.lanes - 1 do
            v = v + b.lane[l].n[board.INDEX[name]]
        end
    end
    return v
end


-- processes ----------------------------------------------------------------

local ALARM

local function fork(fn, arg, who, close)
    S.forks = S.forks + 1
    local c = { report.r }
    for _, fd in ipairs(close or {}) do
        c[#c + 1] = fd
    end
    return procs.fork(fn, arg, { alarm = ALARM, fd = report.w, who = who,
                                 close = c })
end

local function base_cfg(slot, serial)
    return {
        addr = board_addr, fd = report.w, lane = slot.base,
        id = tostring(serial), seed = CFG.seed * 1000 + serial,
        who = fmt("%s #%d", slot.kind, serial), dir = dir,
    }
end

-- the ways a worker may die by itself, drawn at its start
local function deaths(cfg, vms)
    if random() < CFG.crash_share then
        cfg.crash_at = random(1, CFG.crash_writes)
    end
    if random() < CFG.die_share then
        cfg.die_vm = random(vms)
        cfg.die_round = random(1, CFG.die_rounds)
        cfg.die_point = random(1, 4)
    end
end

local MAINS = {
    shared = require("helpers.soak_shared").conduct,   -- lock_shared
    counter = counter.main,
    locker = phoenix.locker,
    fill = fill.conduct,
    phoenix = phoenix.conduct,
    forker = forkers.forker,
    sem = require("helpers.soak_sem").conduct,
}

local serial = 0
local hang_planted = false

local function spawn(slot)
    serial = serial + 1
    local cfg = base_cfg(slot, serial)
    local lanes = 1
    if slot.kind == "counter" then
        lanes = slot.vms
        cfg.vms = slot.vms
        cfg.zones = {}
        for i, z in ipairs(ZONES) do
            cfg.zones[i] = z.name
        end
        cfg.keys = KEYS
        -- a VM cannot wait long for a key another VM of its process holds
        cfg.timeout = slot.vms > 1 and 0.003 or 2
        deaths(cfg, slot.vms)
        cfg.break_lock = CFG.breaks == "lock"
        if CFG.breaks == "hang" and not hang_planted and slot.vms == 1 then
            hang_planted = true
            cfg.crash_at, cfg.die_round = nil, nil
            cfg.hang_round = 30
        end
    elseif slot.kind == "locker" then
        cfg.timeout = 0.5
        deaths(cfg, 1)
    elseif slot.kind == "forker" then
        cfg.timens = can_timens
        cfg.timens_zones = { ZONES[1].name, ZONES[2].name, forkers.NAME,
                             fill.NAME, phoenix.NAME }
    end
    for l = slot.base, slot.base + lanes - 1 do
        clear_lane(l)
    end
    local pid = fork(MAINS[slot.kind], cfg, cfg.who)
    running[pid] = {
        pid = pid, slot = slot, kind = slot.kind, who = cfg.who,
        base = slot.base, lanes = lanes, started = now_us(),
        crash_at = cfg.crash_at,
        killable = (slot.kind == "counter" or slot.kind == "locker"
                    or slot.kind == "forker") and not cfg.hang_round,
    }
    slot.pid = pid
end


-- what a process's end means
local function classify(p, res)
    if p.hung or interrupted then
        return
    end
    if res.how == "signal" and res.sig == procs.SIGKILL then
        local kind = p.storm and "storm" or p.dying and "in_cs"
                     or p.kind == "victim" and "mutex"
                     or p.crash_at and "crash_at"
        if kind then
            S.kills[kind] = S.kills[kind] + 1
            -- where the lanes were when the process died
            if p.holding then
                S.holding[kind] = (S.holding[kind] or 0) + 1
            elseif p.waiting then
                S.waiting[kind] = (S.waiting[kind] or 0) + 1
            end
        else
            -- not the soak's: the kernel's (OOM), or a process outside
            -- that signalled a pid it no longer owned (the specs' Redis
            -- helper did, before it signalled through pidfds)
            violation(fmt("%s (pid %d, %.1f s old): killed by a SIGKILL the "
                          .. "soak did not send", p.who, p.pid,
                          (now_us() - (p.started or now_us())) / 1e6))
        end
    elseif res.how == "signal" then
        violation(fmt("%s: died of signal %d%s", p.who, res.sig,
                      res.sig == 14 and " (its alarm: it hung)" or ""))
    elseif res.code == 99 then
        return                  -- it reported its error itself
    elseif res.code ~= 0 then
        violation(fmt("%s: exit code %d", p.who, res.code))
    elseif p.slot and not stopping then
        violation(p.who .. ": ended before the soak did")
    end
end

local function on_exit(pid, res)
    local p = running[pid]
    if not p then
        S.orphans = S.orphans + 1       -- a conductor's child, orphaned
        return
    end
    running[pid] = nil
    harvest(p)
    classify(p, res)
    local slot = p.slot
    if slot and slot.pid == pid then
        slot.pid = nil
        if not stopping then
            spawn(slot)
        end
    end
end

local function reap_all()
    while true do
        local pid, res = procs.reap()
        if not pid then
            return
        end
        on_exit(pid, res)
    end
end

-- waits (reaping) until pid has ended, at most secs; true if it did
local function await_exit(pid, secs)
    local deadline = now_us() + secs * 1e6
    while running[pid] do
        local r, res = procs.reap(pid)
        if r then
            on_exit(r, res)
        elseif now_us() > deadline then
            return false
        else
            proc.sleep(0.001)
        end
    end
    return true
end


-- the storm ----------------------------------------------------------------

local next_kill = 0

local function storm()
    local now = now_us()
    if now < next_kill then
        return
    end
    next_kill = now - CFG.kill_ms * 1000 * math.log(1 - random())
    local targets = {}
    for _, p in pairs(running) do
        if p.killable and not p.storm and not p.hung then
            targets[#targets + 1] = p
        end
    end
    if #targets == 0 then
        return
    end
    local p = targets[random(#targets)]
    p.storm = true
    procs.kill(p.pid)
end


-- diagnostics and the hang detector ----------------------------------------

-- what the counter keys hold, read by a child (the zone mutex may be held
-- by a live process: the driver must not block on it)
local function diagnose()
    local pid = fork(function()
        for _, d in ipairs(dicts) do
            local parts = {}
            for k = 1, KEYS do
                local key = "k" .. k
                parts[#parts + 1] = fmt("L:%s=%s in:%s=%s", key,
                                        tostring(d:get("L:" .. key)), key,
                                        tostring(d:get("in:" .. key)))
            end
            board.report(report.w, "diag " .. d.name .. ": "
                                   .. table.concat(parts, " "))
        end
    end, nil, "diagnostics")
    running[pid] = { pid = pid, kind = "diag", who = "diagnostics",
                     base = 0, lanes = 0 }
    if not await_exit(pid, 3) then
        say("# diag: blocked for 3 s (a zone mutex held by a live process?)")
        running[pid].hung = true
        procs.kill(pid)
        await_exit(pid, 5)
    end
    read_reports()
end

local key_hung = {}

local function check_hangs()
    local now = now_us()
    local limit = CFG.hang_after * 1e6
    for pid, p in pairs(running) do
        if not p.hung then
            for l = p.base, p.base + p.lanes - 1 do
                local age = now - tonumber(b.lane[l].beat_us)
                if age > limit then
                    hang(fmt("%s (pid %d, lane %d): no progress for %.1f s; "
                             .. "%s", p.who, pid, l, age / 1e6,
                             procs.describe(pid)))
                    diagnose()
                    p.hung = true
                    procs.kill(pid)
                    break
                end
            end
        end
    end
    for i = 0, #ZONES * KEYS - 1 do
        local age = now - tonumber(b.key_beat[i])
        if age > limit and not key_hung[i] then
            key_hung[i] = true
            hang(fmt("%s k%d: no round for %.1f s", ZONES[floor(i / KEYS) + 1]
                     .name, i % KEYS + 1, age / 1e6))
            diagnose()
        elseif age <= limit then
            key_hung[i] = nil
        end
    end
end


-- pid reuse after a kill inside the mutex ------------------------------------

-- a round on key of zone zi, as a lane of its own
local function round_ctx(lane, id, who)
    return {
        lane = b.lane[lane], id = id, me = round.me(id), tolerate = {},
        tallies = {},
        violation = function(msg)
            board.report(report.w, "V " .. who .. ": " .. msg)
        end,
        zone_name = function(d) return d.name end,
        die = function() end,
    }
end

-- The victim: a round on key, killed between its counter write and its
-- tally write while it holds every shard mutex of the zone.
local function spawn_victim(zi, key)
    local held = proc.pipe()
    serial = serial + 1
    local id, who = "v" .. serial, "victim #" .. serial
    clear_lane(VICTIM_LANE)
    local pid = fork(function()
        held:close_read()
        local d = dicts[zi]
        local ctx = round_ctx(VICTIM_LANE, id .. ".1", who)
        ctx.die = function(point)
            if point == 2 then
                lib.shmlock_test_mutex_lock(d._zone)
                held:notify()
                proc.sleep(3600)
            end
        end
        local lock = assert(resty_lock:new(d, { timeout = 2 }))
        for _ = 1, 10 do
            local r = round.enter(ctx, d, lock, key)
            if r then
                round.leave(ctx, r)
            end
        end
        error("never took L:" .. key)
    end, nil, who)
    held:close_write()
    running[pid] = { pid = pid, kind = "victim", who = who,
                     base = VICTIM_LANE, lanes = 1, started = now_us() }
    S.victims = S.victims + 1
    -- (its life is bounded: 10 lock() calls of 2 s at most, then it
    -- errors out; under AddressSanitizer with every scenario running, the
    -- key's contention has kept it from the lock past 5 s: wait its whole
    -- life, so that only a victim that really never gets there is a hang)
    local ok = held:await(25)
    held:close()
    return pid, ok
end

-- A live process with the victim's pid, which then does a round on key
-- (the victim's lock, marker and half-done round are all in its way).
local function spawn_impostor(vpid, zi, key)
    local gate = proc.pipe()
    serial = serial + 1
    local id, who = "i" .. serial, "impostor #" .. serial
    clear_lane(IMPOSTOR_LANE)
    local pid, forks, err = procs.fork_as(vpid, function()
        gate:wait_release(30)
        local d = dicts[zi]
        local ctx = round_ctx(IMPOSTOR_LANE, id .. ".1", who)
        local lock = assert(resty_lock:new(d, { timeout = 5 }))
        local r, outcome = round.enter(ctx, d, lock, key)
        if not r then
            error("L:" .. key .. ": " .. tostring(outcome))
        end
        outcome = round.leave(ctx, r)
        if outcome ~= "done" then
            error("round: " .. outcome)
        end
    end, nil, { alarm = ALARM, fd = report.w, who = who,
                close = { report.r } }, 50)
    S.attempts = S.attempts + forks
    if not pid then
        gate:close()
        return nil, err
    end
    gate:close_read()
    running[pid] = { pid = pid, kind = "impostor", who = who,
                     base = IMPOSTOR_LANE, lanes = 1, started = now_us() }
    return pid, gate
end

-- the latest round time among zone zi's keys
local function zone_beat(zi)
    local t = 0
    for k = 0, KEYS - 1 do
        t = math.max(t, tonumber(b.key_beat[(zi - 1) * KEYS + k]))
    end
    return t
end

local function pid_reuse()
    local zi, key = random(#ZONES), "k" .. random(KEYS)
    local vpid, held = spawn_victim(zi, key)
    if not held then
        hang(fmt("victim (pid %d) never held %s's mutex: %s", vpid,
                 ZONES[zi].name, procs.describe(vpid)))
        running[vpid].hung = true
        procs.kill(vpid)
        await_exit(vpid, 5)
        return
    end
    -- the reused pid must start in a later clock tick (10 ms) than the
    -- victim did: pid and start time tell processes apart
    proc.sleep(math.max(0, running[vpid].started / 1e6 + 0.03
                           - now_us() / 1e6))

    -- nobody may look at the victim between its death and the impostor's
    -- birth (the impostor must be alive when they do): the counter
    -- workers are stopped meanwhile
    local stopped = {}
    if can_reuse then
        for pid, p in pairs(running) do
            if p.kind == "counter" then
                procs.kill(pid, procs.SIGSTOP)
                stopped[#stopped + 1] = pid
            end
        end
    end
    local vstart = tonumber(lib.shmlock_proc_start(vpid))
    procs.kill(vpid)
    if not await_exit(vpid, 5) then
        violation("the victim outlived SIGKILL for 5 s")
    end
    local impostor, gate
    if can_reuse then
        local why
        impostor, why = spawn_impostor(vpid, zi, key)
        if not impostor then
            S.reuse_failed = S.reuse_failed + 1
            say("# pid reuse: " .. tostring(why))
        else
            gate = why
            if tonumber(lib.shmlock_proc_start(impostor)) ~= vstart then
                S.reuses = S.reuses + 1
            else
                S.reuse_failed = S.reuse_failed + 1
                say("# pid reuse: the impostor started in the victim's "
                    .. "clock tick")
            end
        end
    end
    for _, pid in ipairs(stopped) do
        procs.kill(pid, procs.SIGCONT)
    end
    local t0 = now_us()
    if gate then
        gate:release()
        gate:close()
    end

    -- the others go on: a round in that zone
    local resumed
    while now_us() - t0 < 10e6 do
        if zone_beat(zi) > t0 then
            resumed = zone_beat(zi) - t0
            break
        end
        reap_all()
        proc.sleep(0.001)
    end
    if not resumed or resumed > TAKEOVER_US then
        violation(fmt("%s: no round for %s s after a kill inside its mutex",
                      ZONES[zi].name, resumed and fmt("%.3f", resumed / 1e6)
                                      or "10"))
    end
    S.worst_resume = math.max(S.worst_resume, resumed or 10e6)
    if impostor then
        if not await_exit(impostor, 10) then
            hang(fmt("impostor (pid %d) stuck for 10 s: %s", impostor,
                     procs.describe(impostor)))
            running[impostor].hung = true
            procs.kill(impostor)
            await_exit(impostor, 5)
        end
        S.worst_impostor = math.max(S.worst_impostor, now_us() - t0)
    end
end


-- every zone verifies while the soak goes on (checked by a child: the
-- driver must not block on a zone mutex)
local function verify_zones()
    local pid = fork(function()
        local zones = { shdict.open(phoenix.NAME, { create = false }) }
        for _, d in ipairs(dicts) do
            zones[#zones + 1] = d
        end
        for _, d in ipairs(zones) do
            local ok, err = d:verify()
            if not ok and err ~= "zone destroyed" then
                board.report(report.w, "V verifier: " .. d.name .. ": "
                                       .. tostring(err))
            end
        end
    end, nil, "verifier")
    running[pid] = { pid = pid, kind = "verifier", who = "verifier",
                     base = 0, lanes = 0 }
    -- (a walk of every zone under AddressSanitizer on a loaded box takes
    -- seconds: 20 s tells a stuck walk from a slow one)
    if not await_exit(pid, 20) then
        hang("verifier (pid " .. pid .. ") stuck for 20 s: "
             .. procs.describe(pid))
        running[pid].hung = true
        procs.kill(pid)
        await_exit(pid, 5)
    end
    S.verifies = S.verifies + 1
end


-- setup --------------------------------------------------------------------

local function setup()
    dir = proc.tmpdir()
    env.setenv("SHMLOCK_DIR", dir)      -- the phoenix zone goes by name
    procs.become_driver()
    b, board_addr = board.create()
    report = proc.pipe()
    can_reuse = procs.can_set_last_pid()
    can_timens, timens_why = forkers.can_unshare_time()
    for i, z in ipairs(ZONES) do
        dicts[i] = assert(shdict.open(z.name, { dir = dir, size = z.size,
                                                shards = z.shards }))
    end
    for i = 0, board.KEYS - 1 do
        b.key_beat[i] = now_us()
    end
    ALARM = floor(CFG.seconds * (1 + CFG.overtime) + CFG.grace + 120)

    local function slot(kind, vms)
        slots[#slots + 1] = { kind = kind, vms = vms or 1,
                              base = #slots * SLOT_LANES }
    end
    for i = 1, CFG.workers do
        slot("counter", i <= CFG.multi and CFG.vms or 1)
    end
    for _ = 1, CFG.lockers do
        slot("locker")
    end
    slot("fill")
    slot("sem")
    slot("phoenix")
    slot("shared")
    for _ = 1, CFG.forkers do
        slot("forker")
    end
end


-- the end ------------------------------------------------------------------

local function stop_all()
    stopping = true
    b.stop = 1
    local deadline = now_us() + CFG.grace * 1e6
    while next(running) and now_us() < deadline do
        reap_all()
        read_reports()
        proc.sleep(0.005)
    end
    for pid, p in pairs(running) do
        hang(fmt("%s (pid %d) did not stop within %d s: %s", p.who, pid,
                 CFG.grace, procs.describe(pid)))
        p.hung = true
        procs.kill(pid)
    end
    while next(running) do
        local pid, res = procs.reap()
        if pid then
            on_exit(pid, res)
        elseif pid == false then
            break
        end
    end
    S.orphans = S.orphans + procs.sweep(5)
    read_reports()
end

local tests = {}

local function check(ok, desc, details, todo)
    tests[#tests + 1] = { ok = ok, desc = desc, details = details or {},
                          todo = todo }
end

-- a counter key's lock at the end: free or a dead holder's, and ours at
-- once; what is wrong with it, or nil
local function lock_left(d, key, r)
    if r.lock and r.lock.alive then
        return fmt("%s L:%s held by pid %d, alive", d.name, key, r.lock.pid)
    end
    local l = assert(resty_lock:new(d, { timeout = 1 }))
    local t0 = now_us()
    local elapsed, err = l:lock("L:" .. key)
    local dt = (now_us() - t0) / 1e6
    local unlocked = elapsed and l:unlock()
    if not elapsed or dt > 0.5 or unlocked ~= 1 then
        return fmt("%s L:%s: lock %s, %s after %.3f s; unlock %s", d.name,
                   key, tostring(elapsed), tostring(err), dt,
                   tostring(unlocked))
    end
end

-- one counter zone at the end: adds its figures to `acc`, and what is
-- wrong to acc.bad (counts) and acc.locks (locks)
local function check_counter_zone(d, lane, acc)
    local keys = {}
    for k = 1, KEYS do
        keys[k] = "k" .. k
    end
    local res, err = round.check(d, keys, lane)
    if not res then
        acc.bad[#acc.bad + 1] = d.name .. ": " .. err
        return
    end
    acc.bad[#acc.bad + 1] = res.violation and d.name .. ": " .. res.violation
    for _, key in ipairs(keys) do
        local r = res[key]
        acc.sum, acc.writers = acc.sum + r.n, acc.writers + r.writers
        acc.tallies = acc.tallies + r.sum
        acc.reconciled = acc.reconciled + r.reconciled
        if r.n ~= r.sum then
            acc.bad[#acc.bad + 1] = fmt("%s %s: counter %d, tallies %d",
                                        d.name, key, r.n, r.sum)
        end
        if r.marker and round.alive(r.marker) then
            acc.bad[#acc.bad + 1] = fmt("%s in:%s is %s, alive", d.name, key,
                                        r.marker)
        end
        acc.locks[#acc.locks + 1] = lock_left(d, key, r)
    end
    for i = 1, counter.SHARED do
        local k = "v:" .. i
        local v = d:get(k)
        if not counter.value_ok(k, v) then
            acc.bad[#acc.bad + 1] = fmt("%s %s holds %q", d.name, k,
                                        tostring(v):sub(1, 40))
        end
    end
    acc.used[#acc.used + 1] = fmt("%s %.0f%%", d.name,
                                  100 - 100 * d:free_space() / d:capacity())
end

-- the counter zones: exact counts, no live marker, locks free or dead
local function check_counters()
    local acc = { sum = 0, writers = 0, tallies = 0, reconciled = 0,
                  bad = {}, locks = {}, used = {} }
    clear_lane(VICTIM_LANE)
    for _, d in ipairs(dicts) do
        check_counter_zone(d, b.lane[VICTIM_LANE], acc)
    end
    S.counts = acc
    check(#acc.bad == 0, fmt("counters exact: %d increments of %d keys = "
                             .. "the tallies of %d writers (%d reconciled "
                             .. "at the end); no live marker left", acc.sum,
                             #dicts * KEYS, acc.writers, acc.reconciled),
          acc.bad)
    check(#acc.locks == 0, "every lock free or held by a dead process at "
                           .. "the end, and taken at once", acc.locks)
end

-- the phoenix zone's last incarnation, and every zone's structure
local function check_zones()
    local bad = {}
    local last = shdict.open(phoenix.NAME, { create = false })
    if last then
        local res, err = round.check(last, phoenix.KEYS, b.lane[VICTIM_LANE])
        if not res then
            bad[#bad + 1] = "phoenix: " .. err
        else
            for _, key in ipairs(phoenix.KEYS) do
                local r = res[key]
                if r.n ~= r.sum then
                    bad[#bad + 1] = fmt("phoenix %s: counter %d, tallies %d",
                                        key, r.n, r.sum)
                end
            end
        end
    end
    local zones = { last }
    for _, d in ipairs(dicts) do
        zones[#zones + 1] = d
    end
    zones[#zones + 1] = shdict.open(fill.NAME, { dir = dir, create = false })
    zones[#zones + 1] = shdict.open(forkers.NAME, { dir = dir, create = false })
    local names = {}
    for _, d in ipairs(zones) do
        local ok, err = d:verify()
        names[#names + 1] = d.name
        if not ok then
            bad[#bad + 1] = d.name .. ": verify: " .. tostring(err)
        end
    end
    check(#bad == 0, "every zone verifies (" .. table.concat(names, ", ")
                     .. "); the phoenix zone's last incarnation is exact",
          bad)
end

-- the scenarios that have not run yet; n(name): a board figure (the
-- totals once every lane is harvested, figure() while the run goes on)
local function missing_scenarios(n)
    local k = S.kills
    local missing = {}
    local function need(ok, what)
        if not ok then
            missing[#missing + 1] = what
        end
    end
    need(k.storm > 0, "storm kills")
    need(k.crash_at > 0, "deaths at a structural write")
    need(k.in_cs > 0, "deaths inside a round")
    need(k.mutex > 0, "kills inside the mutex")
    need(not can_reuse or S.reuses > 0, "pid reuses")
    need(n("destroys") > 0, "zone destroys")
    need(n("handoffs") > 0 and n("takeovers") > 0,
         "full-zone handoffs and takeovers")
    need(n("sibling") > 0, "locks refused between VMs of one process")
    need(n("reconciled") > 0, "half-done rounds reconciled")
    need(CFG.forkers == 0 or n("forks") > 0,
         "children forked by fork() while holding")
    need(CFG.forkers == 0 or #proc.fork_kinds() == 1 or n("forks_raw") > 0,
         "children made by a raw clone or _Fork() while holding")
    need(CFG.forkers == 0 or not can_timens or n("timens") > 0,
         "processes in another time namespace")
    return missing
end

-- what the run must still see before it may end: a scenario not run
-- yet, or in the self-test the symptom of its break
local function still_to_see()
    if CFG.breaks == "lock" then
        return S.violations == 0 and { "a violation" } or {}
    elseif CFG.breaks == "hang" then
        return S.hangs == 0 and { "a hang" } or {}
    end
    return missing_scenarios(figure)
end

local function check_scenarios()
    local missing = missing_scenarios(function(name) return totals[name] end)
    check(#missing == 0, "every scenario ran", missing)
end

local function cleanup()
    for _, z in ipairs(ZONES) do
        shdict.destroy(z.name, { dir = dir })
    end
    shdict.destroy(fill.NAME, { dir = dir })
    shdict.destroy(forkers.NAME, { dir = dir })
    shdict.destroy(phoenix.NAME)
    proc.rmtree(dir)
    local f = io.open(dir)
    local left = procs.children_of(C.getpid())
    check(f == nil and #left == 0 and procs.reap() == false,
          "nothing left running, zone directory removed",
          { f and ("left: " .. dir) or nil,
            #left > 0 and ("running: " .. table.concat(left, " ")) or nil })
    if f then
        f:close()
    end
end


-- the summary --------------------------------------------------------------

local function summary(duration)
    local k = S.kills
    local kills = k.storm + k.in_cs + k.crash_at + k.mutex
    local lines = {
        fmt("soak: %.0f s, seed %d, %d counter workers (%d with %d VMs), %d "
            .. "phoenix lockers, %s", duration, CFG.seed, CFG.workers,
            CFG.multi, CFG.vms, CFG.lockers,
            can_reuse and "pid reuse on" or "pid reuse OFF (not root)"),
        fmt("processes started: %d (%d by the driver, %d for the full zone, "
            .. "%d by forkers holding a lock, %d forks to reuse a pid)",
            S.forks + totals.children + totals.forks + totals.forks_raw
            + S.attempts, S.forks, totals.children,
            totals.forks + totals.forks_raw, S.attempts),
        fmt("kills: %d (storm %d, at a structural write %d, inside a round "
            .. "%d, inside the mutex %d); of a lock holder: storm %d, at a "
            .. "write %d; of a waiter in lock(): storm %d, at a write %d",
            kills, k.storm, k.crash_at, k.in_cs, k.mutex,
            S.holding.storm or 0, S.holding.crash_at or 0,
            S.waiting.storm or 0, S.waiting.crash_at or 0),
        fmt("lock rounds: %d completed (counter workers %d, phoenix lockers "
            .. "%d, impostors %d), %d lock timeouts, %d refused between VMs "
            .. "of a process, %d half-done rounds of dead holders "
            .. "reconciled", totals.rounds, rounds_of.counter or 0,
            rounds_of.locker or 0, rounds_of.impostor or 0, totals.timeouts,
            totals.sibling, totals.reconciled + S.counts.reconciled),
        fmt("counter increments: %d; the tallies of their %d writers add up "
            .. "to %d (zones used: %s)", S.counts.sum, S.counts.writers,
            S.counts.tallies, table.concat(S.counts.used, ", ")),
        fmt("operations: %d dictionary calls, %d lock/unlock calls",
            totals.ops, totals.locks),
        fmt("zone destroys: %d (%d 'zone destroyed' answers, %d rounds "
            .. "abandoned, %d lock waits that ran out in a destroyed zone)",
            totals.destroys, totals.destroyed, totals.aborted,
            totals.dead_waits),
        fmt("full zone: %d cycles, %d handoffs, %d dead-holder takeovers, "
            .. "worst waiter lateness %.0f ms (CPU %.0f ms), worst handoff "
            .. "%.0f ms", totals.cycles, totals.handoffs, totals.takeovers,
            totals.late_us / 1000, totals.cpu_us / 1000,
            totals.handoff_us / 1000),
        fmt("forkers: %d lock rounds with a child using the inherited lock "
            .. "object (%d children by fork(), %d by a raw clone or "
            .. "_Fork()); %s", rounds_of.forker or 0, totals.forks,
            totals.forks_raw, can_timens and fmt("%d processes in another "
            .. "time namespace refused every zone", totals.timens)
            or "time namespaces skipped: " .. tostring(timens_why)),
        fmt("pid reuses forced: %d (%d not achieved), worst resume after a "
            .. "kill inside the mutex %.0f ms, worst impostor round %.0f ms",
            S.reuses, S.reuse_failed, S.worst_resume / 1000,
            S.worst_impostor / 1000),
        fmt("zones verified during the run: %d times; orphans reaped: %d",
            S.verifies, S.orphans),
        fmt("violations: %d, hangs: %d, duration: %.1f s", S.violations,
            S.hangs, duration),
    }
    return lines
end

local function progress(elapsed)
    local k = S.kills
    local n = 0
    for _ in pairs(running) do
        n = n + 1
    end
    say(fmt("# %4.0f s: %d running, kills %d, rounds %d, ops %d, destroys "
            .. "%d, full-zone cycles %d, pid reuses %d, violations %d, "
            .. "hangs %d", elapsed, n, k.storm + k.in_cs + k.crash_at
            + k.mutex, figure("rounds"), figure("ops"), figure("destroys"),
            figure("cycles"), S.reuses, S.violations, S.hangs))
end


-- main ---------------------------------------------------------------------

local function main()
    setup()
    local start = now_us()
    say(fmt("# soak: %d s, seed %d, zones in %s", CFG.seconds, CFG.seed, dir))
    if not can_timens then
        say("# time namespaces skipped: unshare --time: "
            .. tostring(timens_why))
    end
    if not can_reuse then
        say("# pid reuse skipped: /proc/sys/kernel/ns_last_pid cannot be "
            .. "written (it takes root); victims are still killed inside "
            .. "the mutex")
    end
    for _, slot in ipairs(slots) do
        spawn(slot)
    end

    local finish = start + CFG.seconds * 1e6
    local overtime = finish + CFG.overtime * CFG.seconds * 1e6
    local said_overtime = false
    local next_reuse = start + math.min(3, CFG.reuse_every) * 1e6
    local next_hang_check = start + 1e6
    local next_progress = start + CFG.progress_every * 1e6
    while true do
        local t = now_us()
        if t >= finish then
            local missing = t < overtime and still_to_see() or {}
            if #missing == 0 then
                break
            end
            if not said_overtime then
                said_overtime = true
                say("# running on (at most " .. (overtime - finish) / 1e6
                    .. " s more) until it has seen: "
                    .. table.concat(missing, ", "))
            end
        end
        interrupted = procs.interrupted()
        if interrupted then
            say("# interrupted by signal " .. interrupted .. ": stopping")
            break
        end
        reap_all()
        read_reports()
        storm()
        local now = now_us()
        -- (not in the hang self-test: its stopped worker holds one counter
        -- key for good, and a victim that drew that key could never take
        -- it: it errors out, a violation that self-test does not expect)
        if now >= next_reuse and CFG.breaks ~= "hang" then
            pid_reuse()
            next_reuse = now_us() + CFG.reuse_every * 1e6
        end
        if now >= next_hang_check then
            check_hangs()
            next_hang_check = now + 1e6
        end
        if now >= next_progress then
            verify_zones()
            progress((now - start) / 1e6)
            next_progress = now + CFG.progress_every * 1e6
        end
        proc.sleep(0.002)
    end
    stop_all()
    local duration = (now_us() - start) / 1e6

    check_counters()
    check_zones()
    check_scenarios()
    check(totals.dead_waits == 0,
          "a lock() waiting when its zone is destroyed returns "
          .. "'zone destroyed'",
          { fmt("%d waits answered 'timeout' after their whole timeout "
                .. "instead", totals.dead_waits) })
    check(S.violations == 0, fmt("no violations (%d)", S.violations),
          messages)
    check(S.hangs == 0, fmt("no hangs (%d)", S.hangs), hang_messages)
    if interrupted then
        check(false, "ran its whole time (interrupted by signal "
                     .. interrupted .. ")")
    end
    cleanup()

    local failed = 0
    for i, t in ipairs(tests) do
        say(fmt("%s %d - %s%s", t.ok and "ok" or "not ok", i, t.desc,
                t.todo and " # TODO " .. t.todo or ""))
        if not t.ok then
            if not t.todo then
                failed = failed + 1
            end
            for _, d in pairs(t.details) do
                say("#   " .. d)
            end
        end
    end
    for _, line in ipairs(summary(duration)) do
        say("# " .. line)
    end
    say("1.." .. #tests)
    return failed == 0
end

local ok, err = xpcall(main, debug.traceback)
if not ok then
    local msg = tostring(err):gsub("\n", "\n# ")
    say("not ok - the soak driver failed: " .. msg)
    say("1..1")
    procs.sweep(5)
    if dir then
        proc.rmtree(dir)
    end
end
os.exit(ok and err and 0 or 1)
