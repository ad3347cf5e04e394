-- resty.shmlock.cli.run (internal): `shmlock run [--wait S] [--exptime S]
-- [--shared | --permits N] [--conflict-exit-code N] ZONE KEY -- COMMAND
-- [ARG...]`, flock(1) for zones.
--
-- Three processes:
--
--   shmlock      (this one, the front) the process its caller waits for:
--                it exits with COMMAND's status, forwards SIGTERM,
--                SIGINT, SIGHUP and SIGQUIT to COMMAND, and relays the
--                keeper's reports.
--   COMMAND      forked first, in a process group of its own (its pid),
--                which stands for COMMAND and every process it starts
--                (background ones included): it waits for the keeper's
--                "go" on a pipe, then execs COMMAND.  Without the go (the
--                keeper gave up, or died) it exits and COMMAND never runs.
--   the keeper   (resty.shmlock.cli.keeper) takes the hold on KEY, holds
--                it while any process of COMMAND's group lives, and
--                releases it once the group is empty, whether shmlock is
--                still there or not.
--
-- So the lock lives as flock(1)'s does: after COMMAND exits, for as long
-- as a child it left in the background runs (one that leaves the group,
-- by setsid or setpgid, is on its own, as one that closes flock's
-- descriptor), and a kill -9 of shmlock changes nothing.
--
-- When COMMAND ends and its group is empty, shmlock tells the keeper,
-- waits (at most END_WAIT) until it has released the hold and exited,
-- and only then exits: a script's next `shmlock run --wait 0` on KEY gets
-- it, as the next flock -n does.  When the group lives on, shmlock exits
-- at once with COMMAND's status and leaves the hold to the keeper.
--
-- The terminal.  COMMAND's process group is not shmlock's, so when
-- shmlock's group is the terminal's foreground (an interactive shell's
-- job), COMMAND's group is made the foreground before COMMAND runs, as a
-- shell does for a job: COMMAND reads the terminal, and Ctrl-C reaches it
-- and its children as it would under flock(1).  shmlock takes the
-- terminal back when COMMAND ends.  Job control passes through: when
-- COMMAND stops (Ctrl-Z), shmlock takes the terminal back and stops its
-- own process group the same way, so that the shell sees its job
-- stopped; continued (fg, bg), it gives the terminal again to COMMAND's
-- group if its own has it, and continues COMMAND's group.  Without a
-- terminal (cron, a service, a pipeline's script) none of this happens.
--
-- SIGCHLD.  Its default action is set back first: a caller that ignores
-- it (SIG_IGN, inherited across exec: perl's and python's $SIG{CHLD} =
-- "IGNORE") would make the kernel reap our children, and waitpid never
-- give COMMAND's status.  COMMAND gets the default too, as under flock(1).
-- A child that cannot be waited for all the same (ECHILD) ends the wait
-- with an error; no loop waits for it for ever.

local shdict = require "resty.shmlock.shdict"
local commands = require "resty.shmlock.cli.commands"
local output = require "resty.shmlock.cli.output"
local process = require "resty.shmlock.cli.process"
local keeper = require "resty.shmlock.cli.keeper"
local hold = require "resty.shmlock.cli.hold"
local clock = require "resty.shmlock.internal.clock"

local format = string.format
local tonumber = tonumber
local sub = string.sub

local EXIT = commands.EXIT
local fail = commands.fail

local _M = {}

local SIGCHLD, SIGCONT = process.SIGCHLD, process.SIGCONT
local SIGSTOP, SIGTSTP = process.SIGSTOP, process.SIGTSTP
local SIGINT = process.SIGINT

-- the signals shmlock takes: the ones it forwards, SIGCHLD, SIGCONT
local FORWARD = { [process.SIGTERM] = true, [process.SIGINT] = true,
                  [process.SIGHUP] = true, [process.SIGQUIT] = true }
local SIGNALS = { SIGCHLD, SIGCONT, process.SIGTERM, process.SIGINT,
                  process.SIGHUP, process.SIGQUIT }
-- blocked, not taken: a terminal handed back from a background group
-- (SIGTTOU), a keeper gone when told COMMAND ended (SIGPIPE)
local BLOCKED = { process.SIGTTOU, process.SIGPIPE }

-- the longest wait of one poll (ms): every loop wakes at least this often
local POLL_MS = 1000

-- how long shmlock waits for the keeper to release the hold once
-- COMMAND's group is empty (s); past it the keeper is killed, which frees
-- the hold as well (a dead holder's)
local END_WAIT = 5

-- the exit status of COMMAND's process when it got no go
local NO_GO = 0

local function now()
    return clock.now_ms() / 1000
end


-- In COMMAND's process: wait for the go, take the terminal, exec COMMAND.
-- Never returns.
local function command(cmd, go_r, tty, front_pgrp)
    local got = ""
    while got ~= "go\n" do
        local s, errno = process.read(go_r)
        if s == nil and errno ~= process.EINTR or s == "" then
            process.exit(NO_GO)     -- no hold: COMMAND never runs
        end
        got = got .. (s or "")
    end
    process.close(go_r)
    if tty and process.foreground(tty) == front_pgrp then
        process.set_foreground(tty, process.getpid())
    end
    -- the pipes are close-on-exec
    local msg, errno = process.exec(cmd.command)
    io.stderr:write(format("shmlock: cannot run %s: %s\n", cmd.command[1],
                           msg))
    process.exit(errno == 2 and 127 or 126)       -- ENOENT: 127, as sh
end


-- In a forked child: fn(arg), which ends the process; an error it raises
-- ends it too (it must never return into the parent's code, which called
-- fork), with its message on stderr.
local function child(fn, arg)
    local ok, err = pcall(fn, arg)
    io.stderr:write("shmlock: internal error in a child: ", tostring(ok
                    and "it returned" or err), "\n")
    io.stderr:flush()
    process.exit(EXIT.FAILED)
end


-- what --wait running out says
local function refusal(st)
    local cmd, key = st.cmd, output.printable(st.key)
    if st.kind == "semaphore" then
        return format('the %d permit%s of "%s" in zone "%s" still held '
                      .. "after --wait %s", cmd.permits,
                      cmd.permits == 1 and "" or "s", key, st.name, cmd.wait)
    end
    return format('lock "%s" in zone "%s" still held%s after --wait %s', key,
                  st.name, st.kind == "shared" and " (exclusive)" or "",
                  cmd.wait)
end


-- a line of the keeper's
local function on_line(ctx, st, line)
    if line == "ok" or line == "timeout" or sub(line, 1, 6) == "error " then
        st.report = line
    elseif sub(line, 1, 5) == "lost " then
        st.lost = true
        fail(ctx, EXIT.FAILED, sub(line, 6))
    end
end


-- what the keeper wrote, as far as it is there: lines to on_line; the
-- pipe closed at its end
local function read_reports(ctx, st)
    local s = process.read(st.rep)
    if s == nil or s == "" then
        if s == "" then
            process.close(st.rep)
            st.rep = nil
        end
        return
    end
    st.buf = st.buf .. s
    while true do
        local i = st.buf:find("\n", 1, true)
        if not i then
            break
        end
        on_line(ctx, st, sub(st.buf, 1, i - 1))
        st.buf = sub(st.buf, i + 1)
    end
end


-- COMMAND stopped (job control): the terminal back, and shmlock's own
-- process group stopped the same way, so that the shell sees its job stop
local function stopped(st, sig)
    if process.foreground(st.tty) == st.pid then
        process.set_foreground(st.tty, st.pgrp)
    end
    process.kill(0, sig == SIGSTOP and SIGSTOP or SIGTSTP)
end


-- a signal taken
local function on_signal(st, sig)
    if FORWARD[sig] then
        if not st.status then
            st.forwarded = sig
            process.kill(st.pid, sig)
        end
    elseif sig == SIGCONT and not st.status then
        -- continued (fg, bg): COMMAND's group again, with the terminal if
        -- ours has it
        if st.tty and st.report == "ok"
           and process.foreground(st.tty) == st.pgrp then
            process.set_foreground(st.tty, st.pid)
        end
        process.kill(-st.pid, SIGCONT)
    end
end


-- what the keeper wrote and is in the pipe
local function drain(ctx, st)
    while st.rep and process.poll({ st.rep }, 0)[st.rep] do
        read_reports(ctx, st)
    end
end


-- the keeper's end, seen: its status (how: what became of it, when it
-- cannot be waited for)
local function keeper_ended(ctx, st, status, how)
    st.kstatus = status
    drain(ctx, st)          -- (all of it: the keeper is gone)
    if st.report == "ok" and not st.status and not st.lost
       and status ~= keeper.RELEASED then
        st.lost = true
        how = how or status > 128 and "was killed by signal " .. status - 128
              or "exited with " .. status
        fail(ctx, EXIT.FAILED, format('%s in zone "%s" lost: its keeper '
                                      .. "(pid %d) %s (the command runs on)",
                                      st.what, st.name, st.keeper, how))
    end
end


-- looks at both children; COMMAND's status into st.status when it ended
local function look_at_children(ctx, st)
    if not st.status then
        local status, stop = process.reap(st.pid, st.tty ~= nil)
        if status == false then
            st.status = EXIT.FAILED
            st.error = format("cannot wait for the command (pid %d): %s",
                              st.pid, stop)
        elseif status then
            st.status = status
        elseif stop and st.tty then
            stopped(st, stop)
        end
    end
    if not st.kstatus then
        local status, err = process.reap(st.keeper)
        if status == false then
            keeper_ended(ctx, st, EXIT.FAILED, "cannot be waited for: "
                                               .. err)
        elseif status then
            keeper_ended(ctx, st, status)
        end
    end
end


-- waits for the keeper to end, at most until `deadline`; then kills it
local function reap_keeper(ctx, st, deadline)
    while not st.kstatus and now() < deadline do
        local ready = process.poll({ st.sigfd }, POLL_MS)
        if ready[st.sigfd] then
            process.signal(st.sigfd)    -- (SIGCHLD, or one COMMAND missed)
        end
        look_at_children(ctx, st)
    end
    if not st.kstatus then
        process.kill(st.keeper, process.SIGKILL)
        while not st.kstatus do        -- ends: SIGKILL cannot be ignored
            process.poll({}, 10)
            look_at_children(ctx, st)
        end
    end
end


-- COMMAND, which had the terminal, was ended by its SIGINT (Ctrl-C), which
-- under flock(1) reaches the whole foreground process group: the caller's
-- too (a script run from the terminal ends there).  Passed on to our
-- group, shmlock ending by it as well (its default action back), so that
-- the shell that ran shmlock sees its child interrupted.  Not a SIGINT
-- shmlock forwarded itself, nor Ctrl-\ (a core dump of each).
local function interrupted(st)
    if not st.had_terminal or st.status ~= 128 + SIGINT
       or st.forwarded == SIGINT then
        return
    end
    io.stdout:flush()
    io.stderr:flush()
    process.default_signal(SIGINT)
    process.kill(0, SIGINT)
    process.restore_signals(st.mask)    -- delivered: shmlock ends here
end


-- COMMAND's process ended (or cannot be waited for): what shmlock answers
local function finish(ctx, st)
    -- what the keeper wrote before COMMAND could end is in the pipe
    drain(ctx, st)
    if st.tty and process.foreground(st.tty) == st.pid then
        process.set_foreground(st.tty, st.pgrp)
        st.had_terminal = true
    end
    if st.error then
        fail(ctx, EXIT.FAILED, st.error)
    end
    local report = st.report
    if report == "ok" then
        if not process.group_alive(st.pid, true) then
            process.write(st.ctl, "end\n")
            reap_keeper(ctx, st, now() + END_WAIT)
        end                             -- else the keeper holds on
        interrupted(st)
        return st.status
    end
    -- COMMAND never ran: the keeper is of no more use (its group is gone,
    -- so a hold it may have taken meanwhile is nobody's either)
    if not st.kstatus then
        process.kill(st.keeper, process.SIGKILL)
        reap_keeper(ctx, st, now())
    end
    if report == "timeout" then
        return fail(ctx, st.cmd.conflict_exit_code or 1, refusal(st))
    end
    local code, msg = (report or ""):match("^error (%d+) (.*)")
    if code then
        return fail(ctx, tonumber(code), format('zone "%s": %s', st.name,
                                                msg))
    end
    if st.status == NO_GO and st.kstatus ~= keeper.GAVE_UP then
        return fail(ctx, EXIT.FAILED, format('lock "%s" in zone "%s" not '
                                             .. "taken: its keeper (pid %d)"
                                             .. " ended (status %d)",
                                             output.printable(st.key),
                                             st.name, st.keeper,
                                             st.kstatus))
    end
    return st.status        -- killed while it waited (a forwarded signal)
end


-- until COMMAND's process ends: reports, signals, children
local function supervise(ctx, st)
    while not st.status do
        local fds = { st.sigfd }
        if st.rep then
            fds[2] = st.rep
        end
        local ready = process.poll(fds, POLL_MS)
        if st.rep and ready[st.rep] then
            read_reports(ctx, st)
        end
        if ready[st.sigfd] then
            on_signal(st, process.signal(st.sigfd))
        end
        look_at_children(ctx, st)
    end
    return finish(ctx, st)
end


-- forks the keeper; its pid, or nil and the error
local function start_keeper(st, cmd, dict, go_w)
    local rep_r, rep_w = process.pipe()
    if not rep_r then
        return nil, rep_w
    end
    local ctl_r, ctl_w = process.pipe()
    if not ctl_r then
        process.close(rep_r)
        process.close(rep_w)
        return nil, ctl_w
    end
    local pid, err = process.fork()
    if pid == 0 then
        child(keeper.run, {
            cmd = cmd, dict = dict, zone = st.name, key = st.key,
            kind = st.kind, pgid = st.pid, front = st.front,
            report_fd = rep_w, go_fd = go_w, ctl_fd = ctl_r,
            close = { st.sigfd, rep_r, ctl_w }, mask = st.mask,
        })
    end
    process.close(rep_w)
    process.close(ctl_r)
    if not pid then
        process.close(rep_r)
        process.close(ctl_w)
        return nil, err
    end
    st.rep, st.ctl = rep_r, ctl_w
    return pid
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
    process.default_signal(SIGCHLD)
    local sigfd, mask = process.take_signals(SIGNALS, BLOCKED)
    if not sigfd then
        return fail(ctx, EXIT.FAILED, "cannot take signals: " .. mask)
    end
    local st = {
        cmd = cmd, name = name, key = key, sigfd = sigfd, mask = mask,
        kind = cmd.shared and "shared" or cmd.permits and "semaphore"
               or "lock",
        tty = process.terminal(), pgrp = process.getpgrp(),
        front = process.getpid(), buf = "",
    }
    st.what = hold.describe(st.kind, output.printable(key), cmd.permits)

    -- COMMAND's process, in a group of its own, waiting for the go
    local go_r, go_w = process.pipe()
    if not go_r then
        return fail(ctx, EXIT.FAILED, "cannot make a pipe: " .. go_w)
    end
    io.stdout:flush()
    io.stderr:flush()
    local pid
    pid, err = process.fork()
    if pid == 0 then
        child(function()
            process.setpgid(0, 0)
            process.close(go_w)
            process.close(sigfd)
            process.restore_signals(mask)
            command(cmd, go_r, st.tty, st.pgrp)
        end)
    end
    process.close(go_r)
    if not pid then
        process.close(go_w)
        return fail(ctx, EXIT.FAILED, "cannot fork: " .. err)
    end
    process.setpgid(pid, pid)           -- (as the child does: no race)
    st.pid = pid

    st.keeper, err = start_keeper(st, cmd, dict, go_w)
    process.close(go_w)                 -- the keeper's alone now
    if not st.keeper then
        -- COMMAND's process sees the end of the pipe, and ends
        st.kstatus = 0
        local status = process.reap(pid)
        while status == nil do
            process.poll({}, 10)
            status = process.reap(pid)
        end
        return fail(ctx, EXIT.FAILED, "cannot start the keeper: " .. err)
    end
    return supervise(ctx, st)
end

return _M
