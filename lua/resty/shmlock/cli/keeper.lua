-- resty.shmlock.cli.keeper (internal): the process of `shmlock run` that
-- holds KEY (resty.shmlock.cli.hold) for COMMAND's process group, and
-- frees it once no process of that group is left.
--
-- Why a process of its own: a lock of a zone belongs to a process (its
-- holder is judged by its pid: a dead holder's lock is free at once).
-- flock(1)'s lock lives as long as any process keeps its descriptor:
-- COMMAND's children started in the background keep it after COMMAND
-- exits, and a kill -9 of flock itself changes nothing.  Neither COMMAND
-- (which may exit before its children) nor shmlock (which a user may
-- kill) can be that holder; the keeper is.  It lives in a session of its
-- own (no terminal: a Ctrl-C, a hangup or a signal to shmlock's process
-- group does not reach it), looks at COMMAND's process group every
-- CHECK_MS (kill(-pgid, 0)) and at once when shmlock says COMMAND ended,
-- and releases the hold as soon as the group is empty.  Whoever kills the
-- keeper itself frees the lock at once, as `shmlock unlock` would: it is
-- the holder.
--
-- Until it has the hold, the keeper dies with shmlock (PR_SET_PDEATHSIG):
-- COMMAND never runs when shmlock is killed while it waits, as with
-- flock(1).  Once it has the hold it tells shmlock ("ok"), then COMMAND
-- (the "go" COMMAND's process waits for before it execs), and from then on
-- outlives shmlock.
--
-- At every look it also makes sure the hold is still its own (it learns so
-- that `shmlock unlock` took it, or that it expired while the keeper was
-- stopped), and renews it every third of --exptime: a hold lost is reported
-- ('... lost: ... (the command runs on)') through shmlock, or on the
-- keeper's stderr once shmlock is gone, and the keeper ends.
--
-- The keeper holds no pipe of its caller: stdin and stdout are /dev/null,
-- stderr too when it is a pipe or a socket, and every other inherited
-- pipe is closed, so that a caller reading shmlock's output to its end
-- (`out=$(shmlock run ...)`) is not kept waiting by the keeper.
--
-- Reports to shmlock, one line each on its pipe: "ok", "timeout",
-- "error <exit status> <message>", "lost <message>".

local hold = require "resty.shmlock.cli.hold"
local process = require "resty.shmlock.cli.process"
local fs = require "resty.shmlock.cli.fs"
local commands = require "resty.shmlock.cli.commands"
local output = require "resty.shmlock.cli.output"
local clock = require "resty.shmlock.internal.clock"

local format = string.format
local floor = math.floor
local min = math.min
local max = math.max

local _M = {
    -- the keeper's exit statuses, as shmlock reads them
    RELEASED = 0,   -- COMMAND's group ended: the hold was released
    LOST = 3,       -- the hold was taken from it, or expired (reported)
    GAVE_UP = 4,    -- no hold: --wait ran out, an error (reported), or
                    -- shmlock died meanwhile
}

-- how often the keeper looks at COMMAND's process group and its hold (ms)
local CHECK_MS = 100
-- every how many looks the look at the group is a thorough one (/proc)
local SCAN_EVERY = 10
-- the longest wait a lock takes (s; no --wait: for as long as it takes)
local MAX_WAIT = 1e12

local function now()
    return clock.now_ms() / 1000
end


-- the caller's pipes are not ours to keep open (see above); fds we use:
-- keep[fd] = true
local function let_go_of_pipes(keep)
    process.null(0)
    process.null(1)
    local stderr = not fs.is_pipe(2)
    if not stderr then
        process.null(2)
    end
    local names = fs.names("/proc/self/fd") or {}
    for _, name in ipairs(names) do
        local fd = tonumber(name)
        if fd and fd > 2 and not keep[fd] and fs.is_pipe(fd) then
            process.close(fd)
        end
    end
    return stderr
end


-- a line for shmlock; once shmlock is gone (its pipe closed), a message
-- goes to our stderr, if we kept it
local function report(k, line, message)
    if k.report_fd and process.write(k.report_fd, line .. "\n") then
        return
    end
    k.report_fd = nil
    if message and k.stderr then
        process.write(2, "shmlock: " .. message .. "\n")
    end
end


-- takes the hold, waiting at most cmd.wait; true, or it reported why not
local function take(k, h)
    local cmd = k.cmd
    local deadline = now() + (cmd.wait or MAX_WAIT)
    local elapsed, err
    repeat
        -- (the clock may already be past a --wait 0 deadline; a round
        -- may be cut to exptime, as resty.lock's timeout is)
        elapsed, err = h:take(k.key, min(MAX_WAIT,
                                         max(0, deadline - now())))
    until elapsed or err ~= "timeout" or now() >= deadline
    if elapsed then
        return true
    end
    if err == "timeout" then
        report(k, "timeout")
    else
        report(k, format("error %d %s", commands.status_of(err), err))
    end
    return false
end


-- why a renewal failed, for the message
local function lost_because(k, err)
    if err ~= "expired" then
        return err
    end
    if (k.cmd.exptime or 0) > 0 then
        return "released from outside (shmlock unlock), or expired"
    end
    return "released from outside (shmlock unlock)"
end


-- while COMMAND's group lives: watch, renew; then release.  Returns the
-- keeper's exit status.
local function watch(k, h)
    local exptime = k.cmd.exptime or 0
    local every = exptime > 0 and exptime / 3 or nil
    local next_renew = every and now() + every
    local ctl = k.ctl_fd
    local looks = 0
    while true do
        local ms = CHECK_MS
        if next_renew then
            ms = min(ms, max(0, floor((next_renew - now()) * 1000)))
        end
        local ready = process.poll(ctl and { ctl } or {}, ms)
        local told = ctl and ready[ctl]
        if told then
            local s = process.read(ctl)
            if s == nil or s == "" then
                -- shmlock is gone: nothing more will come
                process.close(ctl)
                ctl = nil
            end
            -- else "end": COMMAND ended; the group is looked at now
        end
        -- the thorough look (a zombie is no process: see group_alive) at
        -- most every SCAN_EVERY looks, and at once when told or left
        looks = looks + 1
        local thorough = told or looks % SCAN_EVERY == 0
        if not process.group_alive(k.pgid, thorough) then
            h:release()
            return _M.RELEASED
        end
        local ok, err
        if next_renew and now() >= next_renew then
            ok, err = h:renew()
            next_renew = now() + every
        elseif not h:held() then
            -- why: a renewal of a hold not ours any more answers
            -- "expired", in a zone that failed the zone's error
            ok, err = h:renew()
        else
            ok = true
        end
        if not ok then
            local msg = format("%s in zone \"%s\" lost: %s (the command "
                               .. "runs on)", k.what, k.zone,
                               lost_because(k, err))
            report(k, "lost " .. msg, msg)
            return _M.LOST
        end
    end
end


-- syntax: keeper.run(k): never returns
-- k: { cmd (the parsed command line), dict, zone (its name), key, pgid
-- (COMMAND's process group), front (shmlock's pid), report_fd, go_fd,
-- ctl_fd, close = { fds of shmlock's to close }, mask (the signal mask
-- to restore) }.
function _M.run(k)
    process.die_with_parent(true)
    if process.getppid() ~= k.front then
        process.exit(_M.GAVE_UP)        -- shmlock died before the line above
    end
    process.setsid()
    process.set_name("shmlock-keeper")
    for _, fd in ipairs(k.close) do
        process.close(fd)
    end
    -- SIGPIPE stays blocked: a report to a shmlock gone is an error, not
    -- the keeper's death (which would free the lock)
    process.restore_signals(k.mask)
    process.block { process.SIGPIPE }
    k.stderr = let_go_of_pipes { [k.report_fd] = true, [k.go_fd] = true,
                                 [k.ctl_fd] = true }
    local cmd = k.cmd
    k.what = hold.describe(k.kind, output.printable(k.key), cmd.permits)

    local h, err = hold.new(k.dict, k.kind, cmd.exptime or 0, cmd.permits)
    if not h then
        report(k, format("error %d %s", commands.status_of(err), err))
        process.exit(_M.GAVE_UP)
    end
    if not take(k, h) then
        process.exit(_M.GAVE_UP)
    end
    -- ours: from now on the keeper outlives shmlock, unless shmlock died
    -- while we took it (then COMMAND must not run, as with flock(1))
    process.die_with_parent(false)
    if process.getppid() ~= k.front then
        h:release()
        process.exit(_M.GAVE_UP)
    end
    -- shmlock hears of it before COMMAND can run (and end)
    report(k, "ok")
    process.write(k.go_fd, "go\n")
    process.close(k.go_fd)
    process.exit(watch(k, h))
end

return _M
