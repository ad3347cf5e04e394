-- resty.shmlock.cli.run (internal): `shmlock run [--wait S] [--exptime S]
-- ZONE KEY -- COMMAND [ARG...]`, flock(1) for zones.
--
-- Who holds the lock: the process that runs COMMAND.  shmlock forks a
-- child; the child takes the lock (waiting as resty.shmlock waits), says
-- so up a pipe, and execs COMMAND: the same process, so the lock's holder
-- is COMMAND's process.  The parent then looks at the key's lock slot:
-- held by the child's pid, that state is the lock's ticket (resty.shmlock.
-- lock.zone), which it renews and releases.
-- shmlock stays as the parent: it forwards SIGTERM, SIGINT, SIGHUP and
-- SIGQUIT to COMMAND, renews the lock every third of --exptime (COMMAND
-- need not cooperate), and when COMMAND ends, however it ends (kill -9
-- included), releases the lock at once by its ticket and exits with
-- COMMAND's status (128 + N when signal N killed it).
--
-- If shmlock itself is killed (kill -9), COMMAND runs on and keeps the
-- lock, as flock(1)'s command keeps its file descriptor: without --exptime
-- (0, the default: no expiry) until COMMAND ends (its process is the
-- holder, and a dead holder's lock is free at once); with --exptime S,
-- until S seconds after the last renewal at most.

local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local zone_backend = require "resty.shmlock.lock.zone"
local codes = require "resty.shmlock.internal.codes"
local clock = require "resty.shmlock.internal.clock"
local commands = require "resty.shmlock.cli.commands"
local output = require "resty.shmlock.cli.output"
local process = require "resty.shmlock.cli.process"

local format = string.format
local tonumber = tonumber
local min = math.min
local max = math.max
local floor = math.floor

local EXIT = commands.EXIT
local fail = commands.fail

local _M = {}

-- the signals shmlock takes: the ones it forwards, and SIGCHLD
local FORWARD = { [process.SIGTERM] = true, [process.SIGINT] = true,
                  [process.SIGHUP] = true, [process.SIGQUIT] = true }
local SIGNALS = { process.SIGCHLD, process.SIGTERM, process.SIGINT,
                  process.SIGHUP, process.SIGQUIT }

-- the longest wait of one poll (ms): every loop wakes at least this often
local POLL_MS = 1000

local function now()
    return clock.now_ms() / 1000
end


-- In the child: take the lock, report on the pipe, exec COMMAND.  Never
-- returns.  The report: "ok\n", "timeout\n", or
-- "error <status> <message>\n".
local function child(cmd, dict, key, wfd, old_mask)
    process.restore_signals(old_mask)
    local exptime = cmd.exptime or 0
    local lock, err = resty_lock:new(dict, { exptime = exptime })
    local elapsed
    if lock then
        -- by default, until the key is free: lock() in rounds (a round
        -- may be cut to exptime, as resty.lock's timeout is)
        local deadline = now() + (cmd.wait or 1e12)
        repeat
            -- (the clock may already be past a --wait 0 deadline)
            elapsed, err = lock:lock(key, max(0, deadline - now()))
        until elapsed or err ~= "timeout" or now() >= deadline
    end
    if not elapsed then
        if err == "timeout" then
            process.write(wfd, "timeout\n")
            process.exit(1)
        end
        local status = commands.status_of(err)
        process.write(wfd, format("error %d %s\n", status, err))
        process.exit(status)
    end
    process.write(wfd, "ok\n")
    -- the pipe is close-on-exec: the parent sees its end at the exec
    local msg, errno = process.exec(cmd.command)
    io.stderr:write(format("shmlock: cannot run %s: %s\n", cmd.command[1],
                           msg))
    process.exit(errno == 2 and 127 or 126)       -- ENOENT: 127, as sh
end


-- the child's report, read until end of file (the exec, or its exit),
-- forwarding signals meanwhile; and the child's status if it ended first
local function report(pid, rfd, sigfd)
    local text = ""
    while true do
        local ready = process.poll({ rfd, sigfd }, POLL_MS)
        if ready[sigfd] then
            local sig = process.signal(sigfd)
            if FORWARD[sig] then
                process.kill(pid, sig)
            end
        end
        if ready[rfd] then
            local s = process.read(rfd)
            if s == nil or s == "" then
                return text
            end
            text = text .. s
            if text:find("\n", 1, true) and text:sub(1, 3) ~= "ok " then
                return text
            end
        end
    end
end


-- waits for the child to end (forwarding signals), its status
local function reap(pid, sigfd)
    while true do
        local status = process.reap(pid)
        if status then
            return status
        end
        local ready = process.poll({ sigfd }, POLL_MS)
        if ready[sigfd] then
            local sig = process.signal(sigfd)
            if FORWARD[sig] then
                process.kill(pid, sig)
            end
        end
    end
end


-- while the child (COMMAND) runs: renew the lock, forward signals; then
-- release it.  Returns COMMAND's status.
local function hold(ctx, cmd, dict, key, tk, pid, sigfd)
    local exptime = cmd.exptime or 0
    local every = exptime / 3
    local next_renew = exptime > 0 and now() + every or nil
    local zone = dict._zone
    while true do
        local status = process.reap(pid)
        if status then
            local ok, err = zone_backend.release(zone, tk)
            if not ok and err ~= "expired" then
                fail(ctx, EXIT.FAILED, format('lock "%s" in zone "%s" not '
                                              .. "released: %s",
                                              output.printable(key),
                                              dict.name, err))
            end
            return status
        end
        local ms = POLL_MS
        if next_renew then
            ms = min(ms, floor((next_renew - now()) * 1000))
        end
        local ready = ms > 0 and process.poll({ sigfd }, ms) or {}
        if ready[sigfd] then
            local sig = process.signal(sigfd)
            if FORWARD[sig] then
                process.kill(pid, sig)
            end
        end
        if next_renew and now() >= next_renew then
            local ok, err = zone_backend.renew(zone, { tk = tk }, exptime)
            next_renew = now() + every
            if not ok then
                -- released by someone (shmlock unlock), or the zone failed
                fail(ctx, EXIT.FAILED, format('lock "%s" in zone "%s" lost: '
                                              .. "%s (the command runs on)",
                                              output.printable(key),
                                              dict.name, err))
                next_renew = nil
            end
        end
    end
end


-- the ticket of the lock on key held by process pid (the child, now
-- COMMAND), or nil
local function held_by(dict, key, pid)
    if zone_backend.look_at(dict._zone, key, #key) ~= codes.OK then
        return nil
    end
    local holder = zone_backend.state(zone_backend.seen)
    if holder ~= pid then
        return nil
    end
    return zone_backend.holders_ticket()
end


-- syntax: status = run.run(ctx, cmd)
function _M.run(ctx, cmd)
    local name, key = cmd.operands[1], cmd.operands[2]
    if key == "" then
        return fail(ctx, EXIT.USAGE, "empty key")
    end
    -- the zone, made if absent (for --group: shared with the group)
    local dict, err = shdict.open(name, {
        dir = cmd.dir, group = cmd.group, mode = cmd.group and "0660" or nil,
    })
    if not dict then
        return fail(ctx, commands.status_of(err), format('zone "%s": %s',
                                                         name, err))
    end
    local sigfd, old_mask = process.take_signals(SIGNALS)
    if not sigfd then
        return fail(ctx, EXIT.FAILED, "cannot take signals: " .. old_mask)
    end
    local rfd, wfd = process.pipe()
    if not rfd then
        return fail(ctx, EXIT.FAILED, "cannot make a pipe: " .. wfd)
    end
    io.stdout:flush()
    io.stderr:flush()
    local pid
    pid, err = process.fork()
    if not pid then
        return fail(ctx, EXIT.FAILED, "cannot fork: " .. err)
    end
    if pid == 0 then
        process.close(rfd)
        process.close(sigfd)
        child(cmd, dict, key, wfd, old_mask)
    end
    process.close(wfd)

    local text = report(pid, rfd, sigfd)
    process.close(rfd)
    local tk = text == "ok\n" and held_by(dict, key, pid)
    if not tk then
        local status = reap(pid, sigfd)
        if text == "timeout\n" then
            return fail(ctx, 1, format('lock "%s" in zone "%s" still held '
                                       .. "after --wait %s",
                                       output.printable(key), name,
                                       cmd.wait))
        end
        local code, msg = text:match("^error (%d+) ([^\n]*)")
        if code then
            return fail(ctx, tonumber(code), format('zone "%s": %s', name,
                                                    msg))
        end
        return status   -- killed while waiting, or the exec failed
    end
    return hold(ctx, cmd, dict, key, tk, pid, sigfd)
end

return _M
