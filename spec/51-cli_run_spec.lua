-- bin/shmlock's commands that act on locks: `run` (flock(1) for zones)
-- and `unlock`, and `--group` for every command; real processes, bin/shmlock
-- run as a user runs it (without LUA_PATH, from /).

local proc = require "harness.proc"
local fixture = require "helpers.fixture"
local checkout = require "helpers.checkout"
local readable_copy = require "helpers.readable_copy"
local env = require "helpers.lock_env"
local resty_lock = require "resty.shmlock"
local shdict = require "resty.shmlock.shdict"
local process = require "resty.shmlock.cli.process"

local BIN = checkout.ROOT .. "/bin/shmlock"
local sh = checkout.sh

local function q(s)
    return "'" .. s:gsub("'", "'\\''") .. "'"
end

-- the words of a shell command line, quoted
local function line(words)
    local t = {}
    for i, w in ipairs(words) do
        t[i] = q(w)
    end
    return table.concat(t, " ")
end

local function is_root()
    return checkout.trim(sh("id -u")) == "0"
end

describe("bin/shmlock run, unlock, --group", function()
    local fx = fixture.new { dir = "test", children = "reap" }
    local dir, dict

    before_each(function()
        dir = fx.dir
        dict = fx:zone("jobs", { size = "64k" })
    end)

    -- status, stdout, stderr of `shmlock --dir DIR <words...>`; prefix:
    -- words before it (setpriv ...); copy: a helpers.readable_copy whose
    -- bin/shmlock and library run instead of the checkout's (for another
    -- user: the checkout may be a clone only root can enter)
    local function shmlock(words, prefix, copy)
        local out, err = dir .. "/.out", dir .. "/.err"
        local bin = BIN
        if copy then
            bin = copy.BIN
            prefix = prefix .. " env SHMLOCK_LIB=" .. q(copy.SHMLOCK_LIB)
        end
        local status = sh("cd / && " .. (prefix or "") .. " env -u LUA_PATH "
                          .. "-u SHMLOCK_DIR " .. q(bin) .. " --dir "
                          .. q(dir) .. " " .. line(words) .. " >" .. q(out)
                          .. " 2>" .. q(err) .. "; echo $?")
        local o, e = checkout.read_file(out), checkout.read_file(err)
        os.remove(out)
        os.remove(err)
        return tonumber(status), o, e
    end

    -- argv exec'd in the background (stderr to err_path if given): its pid
    local function spawn_exec(argv, err_path)
        return proc.spawn(function()
            if err_path then
                argv = { "/bin/sh", "-c", 'exec "$@" 2>"$0"', err_path,
                         unpack(argv) }
            end
            -- the harness's pipe to this child must not reach the command
            -- (its end of file tells the parent the child is gone)
            for fd = 3, 1023 do
                process.close(fd)
            end
            process.exec(argv)
            return 98
        end)
    end

    -- `shmlock --dir DIR <words...>` started in the background: its pid
    -- (the shmlock process itself: the child execs it); err_path: where
    -- its stderr goes
    local function start(words, err_path)
        local argv = { "/usr/bin/env", "-u", "LUA_PATH", "-u", "SHMLOCK_DIR",
                       BIN, "--dir", dir }
        for _, w in ipairs(words) do
            argv[#argv + 1] = w
        end
        return spawn_exec(argv, err_path)
    end

    -- the pid holding lock `key` once someone holds it (10 s at most)
    local function holder_of(key)
        return env.wait_for(function()
            local info = resty_lock.inspect(dict, key)
            return info and info.alive and info.pid
        end, 10)
    end

    -- waits until pid is gone from /proc (reaped by whoever is its parent)
    local function gone(pid)
        return env.wait_for(function()
            return not env.exists("/proc/" .. pid)
        end, 10)
    end

    -- the text of file path once a command wrote it whole (a line: `echo
    -- $$ > f`), trimmed; nil after 10 s
    local function written(path)
        return env.wait_for(function()
            local s = checkout.read_file(path)
            return s and s:sub(-1) == "\n" and checkout.trim(s)
        end, 10)
    end

    -- pid is killed (-9) at the end of the test if it is still a process
    -- named comm (a command's sleep, a keeper the test did not end)
    local function kill_at_end(pid, comm)
        fx:defer(function()
            local name = pid and checkout.read_file("/proc/" .. pid .. "/comm")
            if name and checkout.trim(name) == comm then
                env.kill(pid, 9)
            end
        end)
        return pid
    end

    -- the pid a command wrote to path (`echo $$ > path`; `exec sleep`),
    -- killed at the end of the test
    local function pid_in(path)
        return kill_at_end(tonumber(written(path)), "sleep")
    end

    -- the keeper holding key (run's process that holds the lock), killed
    -- at the end of the test if it is still there
    local function keeper_of(key)
        return kill_at_end(holder_of(key), "shmlock-keeper")
    end

    -- the exit status of a shell command line run from /, its output
    -- dropped
    local function status_of(cmdline)
        return tonumber(sh("cd / && " .. cmdline
                           .. " >/dev/null 2>&1; echo $?"))
    end

    -- a command that says its pid in `file`, then sleeps (the same
    -- process: exec)
    local function sleeper(file)
        return { "sh", "-c", 'echo $$ > "$0"; exec sleep 60', file }
    end

    -- t's words, then u's
    local function cat(t, u)
        local r = { unpack(t) }
        for _, v in ipairs(u) do
            r[#r + 1] = v
        end
        return r
    end

    -- the command line `flock <options> FILE <command>` on the test's lock
    -- file: the same cases side by side, shmlock run answering as flock(1)
    local function flock(options, command)
        return "flock " .. line(options) .. " " .. q(dir .. "/flock") .. " "
               .. line(command)
    end

    describe("run", function()
        it("runs the command holding the lock, and exits with its status",
           function()
            local status, out, err = shmlock { "run", "jobs", "k", "--", "sh",
                "-c", 'echo "$0 $1"; exit 7', "a", "b" }
            assert.same({ 7, "a b\n", "" }, { status, out, err })
            assert.is_nil(resty_lock.inspect(dict, "k"))
            -- killed by a signal: 128 + N, as a shell says it
            status = shmlock { "run", "jobs", "k", "--", "sh", "-c",
                               "kill -TERM $$" }
            assert.equal(128 + 15, status)
            -- a command that is not there: 127, as sh
            status, out, err = shmlock { "run", "jobs", "k", "no-such-cmd" }
            assert.same({ 127, "", "shmlock: cannot run no-such-cmd: No such "
                                  .. "file or directory\n" },
                        { status, out, err })
            assert.is_nil(resty_lock.inspect(dict, "k"))
        end)

        it("makes the zone when it is absent", function()
            local status = shmlock { "run", "fresh", "k", "true" }
            assert.equal(0, status)
            assert.is_true(env.exists(dir .. "/shmlock.fresh"))
            assert.is_true(shdict.destroy("fresh", { dir = dir }))
        end)

        it("keeps two runs apart: a counter both update comes out exact",
           function()
            local counter = dir .. "/counter"
            checkout.write_file(counter, "0\n")
            local cmd = line { "run", "jobs", "k", "--", "sh", "-c",
                               'n=$(cat "$0"); sleep 0.002; '
                               .. 'echo $((n + 1)) > "$0"', counter }
            local pids = {}
            for i = 1, 2 do
                pids[i] = proc.spawn(function()
                    for _ = 1, 30 do
                        local ok = os.execute("env -u LUA_PATH " .. q(BIN)
                                              .. " --dir " .. q(dir) .. " "
                                              .. cmd)
                        if ok ~= 0 and ok ~= true then
                            return 3
                        end
                    end
                    return 0
                end)
            end
            for _, r in ipairs(proc.wait_all(pids, 120)) do
                assert.same({ "exit", 0 }, { r.how, r.code })
            end
            assert.equal("60\n", checkout.read_file(counter))
        end)

        it("gives up after --wait with exit 1 or --conflict-exit-code N, the "
           .. "command never run, as flock -w and -E; the lock is free once "
           .. "the command is killed (kill -9)", function()
            local pid = start(cat({ "run", "jobs", "k", "--" },
                                  sleeper(dir .. "/cmd")))
            local cmd_pid = pid_in(dir .. "/cmd")
            local keeper = keeper_of("k")
            assert.is_number(cmd_pid, "the command never ran")
            -- the holder is neither shmlock nor the command: its keeper
            assert.is_number(keeper)
            assert.are_not.equal(pid, keeper)
            assert.are_not.equal(cmd_pid, keeper)
            -- flock, holding its file the same way
            local fpid = spawn_exec(cat({ "flock", dir .. "/flock" },
                                        sleeper(dir .. "/fcmd")))
            local fcmd_pid = pid_in(dir .. "/fcmd")
            assert.is_number(fcmd_pid)

            local ran = dir .. "/ran"
            local status, out, err = shmlock { "run", "--wait", "0.1",
                                               "jobs", "k", "--", "touch",
                                               ran }
            assert.same({ 1, "", 'shmlock: lock "k" in zone "jobs" still '
                                 .. "held after --wait 0.1\n" },
                        { status, out, err })
            status, out, err = shmlock { "run", "--wait", "0",
                                         "--conflict-exit-code", "75",
                                         "jobs", "k", "touch", ran }
            assert.same({ 75, "", 'shmlock: lock "k" in zone "jobs" still '
                                  .. "held after --wait 0\n" },
                        { status, out, err })
            assert.same({ 1, 75 },
                        { status_of(flock({ "-w", "0.1" }, { "touch", ran })),
                          status_of(flock({ "-n", "-E", "75" },
                                          { "touch", ran })) })
            assert.is_false(env.exists(ran))

            -- the command killed: shmlock exits 128 + 9 once the lock is
            -- free, as flock
            assert.equal(0, env.kill(cmd_pid, 9))
            assert.equal(0, env.kill(fcmd_pid, 9))
            local r, fr = proc.wait(pid, 10), proc.wait(fpid, 10)
            assert.same({ "exit", 128 + 9 }, { r.how, r.code })
            assert.same({ "exit", 128 + 9 }, { fr.how, fr.code })
            assert.is_nil(resty_lock.inspect(dict, "k"))
            assert.same({ 0, 0 }, { (shmlock { "run", "--wait", "0", "jobs",
                                               "k", "true" }),
                                    status_of(flock({ "-n" }, { "true" })) })
        end)

        it("forwards SIGTERM to the command, and exits with its status",
           function()
            local pid = start(cat({ "run", "jobs", "k", "--" },
                                  sleeper(dir .. "/cmd")))
            local cmd_pid = pid_in(dir .. "/cmd")
            assert.is_number(cmd_pid)
            assert.equal(0, env.kill(pid, 15))
            local r = proc.wait(pid, 10)
            assert.same({ "exit", 128 + 15 }, { r.how, r.code })
            assert.is_true(gone(cmd_pid))
            assert.is_nil(resty_lock.inspect(dict, "k"))
        end)

        it("renews the lock: a command outliving --exptime keeps it",
           function()
            local pid = start(cat({ "run", "--exptime", "1", "jobs", "k",
                                    "--" }, sleeper(dir .. "/cmd")))
            local cmd_pid = pid_in(dir .. "/cmd")
            local keeper = keeper_of("k")
            assert.is_number(keeper)
            -- three exptimes later (a lower bound: later is as good)
            proc.sleep(3)
            local info = assert(resty_lock.inspect(dict, "k"))
            assert.same({ keeper, true }, { info.pid, info.alive })
            assert.is_true(info.ttl > 0 and info.ttl <= 1, info.ttl)
            assert.equal(1, (shmlock { "run", "--wait", "0", "jobs", "k",
                                       "true" }))
            assert.equal(0, env.kill(cmd_pid, 9))
            assert.equal(128 + 9, proc.wait(pid, 10).code)
            assert.is_nil(resty_lock.inspect(dict, "k"))
        end)

        it("holds the lock while a child the command left in the background "
           .. "runs, as flock(1), and frees it once that child ends",
           function()
            local bg = { "sh", "-c", 'sleep 60 & echo $! > "$0"' }
            bg[4] = dir .. "/bg"
            local status = shmlock(cat({ "run", "jobs", "k", "--" }, bg))
            bg[4] = dir .. "/fbg"
            local fstatus = status_of(flock({}, bg))
            assert.same({ 0, 0 }, { status, fstatus })
            local bg_pid, fbg_pid = pid_in(dir .. "/bg"), pid_in(dir .. "/fbg")
            assert.is_number(bg_pid)
            assert.is_number(fbg_pid)
            -- the command has exited; its child holds the lock on
            assert.same({ 1, 1 }, { (shmlock { "run", "--wait", "0", "jobs",
                                               "k", "true" }),
                                    status_of(flock({ "-n" }, { "true" })) })
            -- the child ends: the lock is free
            assert.equal(0, env.kill(bg_pid, 9))
            assert.equal(0, env.kill(fbg_pid, 9))
            assert.same({ 0, 0 }, { (shmlock { "run", "--wait", "10", "jobs",
                                               "k", "true" }),
                                    status_of(flock({ "-w", "10" },
                                                    { "true" })) })
        end)

        it("leaves a child that left the command's process group (setsid) "
           .. "on its own", function()
            assert.equal(0, (shmlock { "run", "jobs", "k", "--", "sh", "-c",
                                       'setsid sleep 60 & echo $! > "$0"',
                                       dir .. "/bg" }))
            local bg_pid = pid_in(dir .. "/bg")
            assert.is_number(bg_pid)
            assert.equal(0, (shmlock { "run", "--wait", "10", "jobs", "k",
                                       "true" }))
            assert.is_true(env.exists("/proc/" .. bg_pid))
        end)

        it("changes nothing when shmlock is killed (kill -9), as flock(1): "
           .. "the lock is held while the command runs, free once it ends",
           function()
            local pid = start(cat({ "run", "jobs", "k", "--" },
                                  sleeper(dir .. "/cmd")))
            local fpid = spawn_exec(cat({ "flock", dir .. "/flock" },
                                        sleeper(dir .. "/fcmd")))
            local cmd_pid, fcmd_pid = pid_in(dir .. "/cmd"),
                                      pid_in(dir .. "/fcmd")
            local keeper = keeper_of("k")
            assert.is_number(cmd_pid)
            assert.is_number(fcmd_pid)
            assert.equal(0, env.kill(pid, 9))
            assert.equal(0, env.kill(fpid, 9))
            assert.same({ "signal", "signal" }, { proc.wait(pid, 10).how,
                                                  proc.wait(fpid, 10).how })
            -- the command runs on, holding the lock
            local info = assert(resty_lock.inspect(dict, "k"))
            assert.same({ keeper, true }, { info.pid, info.alive })
            assert.same({ 1, 1 }, { (shmlock { "run", "--wait", "0", "jobs",
                                               "k", "true" }),
                                    status_of(flock({ "-n" }, { "true" })) })
            -- the command ends: the lock is free
            assert.equal(0, env.kill(cmd_pid, 9))
            assert.equal(0, env.kill(fcmd_pid, 9))
            assert.same({ 0, 0 }, { (shmlock { "run", "--wait", "10", "jobs",
                                               "k", "true" }),
                                    status_of(flock({ "-w", "10" },
                                                    { "true" })) })
            assert.is_true(gone(keeper))
        end)

        it("frees the lock at once when its keeper is killed, and says so",
           function()
            local pid = start(cat({ "run", "jobs", "k", "--" },
                                  sleeper(dir .. "/cmd")), dir .. "/err")
            local cmd_pid = pid_in(dir .. "/cmd")
            local keeper = keeper_of("k")
            assert.is_number(keeper)
            assert.equal(0, env.kill(keeper, 9))
            -- a dead holder's lock: the next run takes it
            assert.equal(0, (shmlock { "run", "--wait", "10", "jobs", "k",
                                       "true" }))
            -- shmlock said so, and gives the command's status
            assert.equal('shmlock: lock "k" in zone "jobs" lost: its keeper '
                         .. "(pid " .. keeper .. ") was killed by signal 9 "
                         .. "(the command runs on)", written(dir .. "/err"))
            assert.equal(0, env.kill(cmd_pid, 15))
            assert.equal(128 + 15, proc.wait(pid, 10).code)
        end)

        it("keeps none of its caller's pipes past the command: $(...) ends "
           .. "when the command does, as under flock(1)", function()
            local function captured(runner)
                local cmd = 'sleep 60 >/dev/null 2>&1 & echo $! > "$0"; '
                            .. "echo hi"
                return sh("cd / && timeout -s KILL 20 sh -c "
                          .. q('out=$(' .. runner .. " " .. line { "sh", "-c",
                               cmd } .. ' "$0"); echo "$out $?"') .. " "
                          .. q(dir .. "/" .. (runner:find("^flock") and "fbg"
                                              or "bg")))
            end
            local ours = captured(line { "env", "-u", "LUA_PATH", BIN,
                                         "--dir", dir, "run", "jobs", "k",
                                         "--" })
            local theirs = captured(flock({}, {}))
            pid_in(dir .. "/bg")
            pid_in(dir .. "/fbg")
            assert.same({ "hi 0\n", "hi 0\n" }, { ours, theirs })
        end)

        it("runs with SIGCHLD ignored by its caller (perl's $SIG{CHLD} = "
           .. '"IGNORE") as flock(1) does: the status, and COMMAND\'s '
           .. "SIGCHLD back to its default", function()
            local ignoring = "timeout -s KILL 20 perl -e "
                             .. q('$SIG{CHLD} = "IGNORE"; exec @ARGV') .. " --"
            local cmd = { "sh", "-c", "grep SigIgn /proc/self/status; exit 3" }
            local status, out, err = shmlock(cat({ "run", "jobs", "k", "--" },
                                                 cmd), ignoring)
            local fout = sh("cd / && " .. ignoring .. " " .. flock({}, cmd)
                            .. "; echo $?")
            assert.same({ fout, "" }, { out .. status .. "\n", err })
            assert.equal(3, status)
            -- (bit 17 of the mask: SIGCHLD)
            local mask = tonumber(out:match("SigIgn:%s*(%x+)"), 16)
            assert.equal(0, math.floor(mask / 2 ^ 16) % 2)
            assert.is_nil(resty_lock.inspect(dict, "k"))
        end)

        it("gives the command the terminal while it runs, and takes it back "
           .. "after, as the command has it under flock(1)", function()
            -- in a pseudo-terminal (script(1)): the command reads a line
            -- from it, then the shell that ran shmlock reads the next
            local function on_terminal(runner)
                local inner = runner .. " "
                              .. line { "sh", "-c", 'read x; echo "got $x"' }
                              .. '; read y; echo "after $y"'
                return sh("cd / && printf 'a\\nb\\n' | SHELL=/bin/sh timeout "
                          .. "-s KILL 20 script -qec " .. q(inner)
                          .. " /dev/null; echo \"status $?\"")
            end
            for _, runner in ipairs {
                line { "env", "-u", "LUA_PATH", BIN, "--dir", dir, "run",
                       "jobs", "k", "--" },
                flock({}, {}),
            } do
                local out = on_terminal(runner)
                assert.truthy(out:find("got a\r\n", 1, true), out)
                assert.truthy(out:find("after b\r\n", 1, true), out)
                assert.truthy(out:find("status 0\n$"), out)
            end
        end)

        it("passes a Ctrl-C that ended the command on to the shell that ran "
           .. "it: a script run from the terminal ends, as under flock(1)",
           function()
            -- a script (sh -c) in a pseudo-terminal runs the command, which
            -- says its pid on a fifo and sleeps; then Ctrl-C
            local fifo = dir .. "/ready"
            local function interrupted(runner)
                os.remove(fifo)
                assert(os.execute("mkfifo " .. q(fifo)) == 0)
                local script = runner .. " " .. line { "sh", "-c",
                    'echo $$ > "$0"; exec sleep 60', fifo } .. "; echo after"
                return sh("cd / && { read pid < " .. q(fifo) .. "; printf "
                          .. "'\\003'; } | SHELL=/bin/sh timeout -s KILL 20 "
                          .. "script -qec " .. q(script) .. " /dev/null "
                          .. "2>&1; echo \"status $?\"")
            end
            local ours = interrupted(line { "env", "-u", "LUA_PATH", BIN,
                                            "--dir", dir, "run", "jobs", "k",
                                            "--" })
            local theirs = interrupted(flock({}, {}))
            assert.same({ false, false }, { ours:find("after", 1, true) ~= nil,
                                            theirs:find("after", 1, true)
                                            ~= nil })
            assert.same({ "status 130", "status 130" },
                        { ours:match("status %d+"), theirs:match("status %d+") })
            assert.is_nil(resty_lock.inspect(dict, "k"))
        end)

        it("passes job control on to the shell: Ctrl-Z stops the job, fg "
           .. "gives the command the terminal again, as under flock(1)",
           function()
            -- an interactive bash in a pseudo-terminal (script(1)) runs the
            -- command, which says its pid on a fifo and reads a line; then
            -- Ctrl-Z (once the command waits), fg, the line, and the status
            local fifo = dir .. "/ready"
            local function job_control(runner)
                os.remove(fifo)
                assert(os.execute("mkfifo " .. q(fifo)) == 0)
                local cmd = runner .. " " .. line { "sh", "-c",
                    'echo $$ > "$0"; read x; echo "got $x"', fifo }
                local feeder = "printf '%s\\n' " .. q(cmd) .. "; read pid < "
                    .. q(fifo) .. "; printf '\\032'; i=0; until grep -q "
                    .. "'^State:.*T' /proc/$pid/status || [ $i -ge 2000 ]; "
                    .. "do sleep 0.01; i=$((i + 1)); done; printf 'fg\\nhello"
                    .. "\\necho \"done $?\"\\nexit\\n'"
                return sh("cd / && { " .. feeder .. "; } | SHELL=/bin/bash "
                          .. "timeout -s KILL 20 script -qec 'bash --norc "
                          .. "--noprofile -i' /dev/null 2>&1")
            end
            for _, runner in ipairs {
                line { "env", "-u", "LUA_PATH", BIN, "--dir", dir, "run",
                       "jobs", "k", "--" },
                flock({}, {}),
            } do
                local out = job_control(runner)
                assert.truthy(out:find("Stopped", 1, true), out)
                assert.truthy(out:find("got hello", 1, true), out)
                assert.truthy(out:find("done 0", 1, true), out)
            end
            assert.is_nil(resty_lock.inspect(dict, "k"))
        end)

        it("--shared: shared runs at once, an exclusive one kept out, as "
           .. "flock -s", function()
            local pids = {}
            for i, name in ipairs { "a", "b" } do
                pids[i] = start(cat({ "run", "--shared", "jobs", "k", "--" },
                                    sleeper(dir .. "/" .. name)))
                pids[i + 2] = spawn_exec(cat({ "flock", "-s",
                                               dir .. "/flock" },
                                             sleeper(dir .. "/f" .. name)))
            end
            -- all four run at once (each waits for no other)
            local cmds = {}
            for _, name in ipairs { "a", "b", "fa", "fb" } do
                cmds[#cmds + 1] = pid_in(dir .. "/" .. name)
                assert.is_number(cmds[#cmds], name .. " never ran")
            end
            -- an exclusive run does not get in; another shared one does
            assert.same({ 1, 1 }, { (shmlock { "run", "--wait", "0", "jobs",
                                               "k", "true" }),
                                    status_of(flock({ "-n", "-x" },
                                                    { "true" })) })
            assert.same({ 0, 0 }, { (shmlock { "run", "--shared", "--wait",
                                               "0", "jobs", "k", "true" }),
                                    status_of(flock({ "-n", "-s" },
                                                    { "true" })) })
            local info = assert(resty_lock.inspect(dict, "k"))
            assert.same({ "shared", 2 }, { info.kind, #info.holders })
            -- the shared holders end: the exclusive one gets in
            for i, pid in ipairs(cmds) do
                assert.equal(0, env.kill(pid, 9))
                assert.equal(128 + 9, proc.wait(pids[i], 10).code)
            end
            assert.same({ 0, 0 }, { (shmlock { "run", "--wait", "10", "jobs",
                                               "k", "true" }),
                                    status_of(flock({ "-w", "10" },
                                                    { "true" })) })
        end)

        it("--permits N: at most N commands at once on KEY", function()
            -- each run's command counts the commands in at once (a file
            -- each, made before counting, removed after): a third one
            -- beside two would count 3
            local slots, most = dir .. "/slots", dir .. "/most"
            assert(os.execute("mkdir " .. q(slots)) == 0)
            local body = 'touch "$0/$$"; n=$(ls "$0" | wc -l); '
                         .. 'echo "$n" >> "$1"; sleep 0.01; rm "$0/$$"'
            local pids = {}
            for i = 1, 4 do
                pids[i] = proc.spawn(function()
                    for _ = 1, 5 do
                        local ok = os.execute(
                            "env -u LUA_PATH " .. q(BIN) .. " --dir "
                            .. q(dir) .. " " .. line { "run", "--permits",
                            "2", "jobs", "k", "--", "sh", "-c", body, slots,
                            most })
                        if ok ~= 0 and ok ~= true then
                            return 3
                        end
                    end
                    return 0
                end)
            end
            for _, r in ipairs(proc.wait_all(pids, 120)) do
                assert.same({ "exit", 0 }, { r.how, r.code })
            end
            local counts = {}
            for n in checkout.read_file(most):gmatch("%d+") do
                counts[tonumber(n)] = (counts[tonumber(n)] or 0) + 1
            end
            assert.is_nil(counts[3], "three commands at once")
            assert.equal(20, (counts[1] or 0) + (counts[2] or 0))

            -- two hold; a third waits, or gives up with --wait
            local held = {}
            for i, name in ipairs { "a", "b" } do
                held[i] = start(cat({ "run", "--permits", "2", "jobs", "k",
                                      "--" }, sleeper(dir .. "/" .. name)))
            end
            local a, b = pid_in(dir .. "/a"), pid_in(dir .. "/b")
            assert.is_number(a)
            assert.is_number(b)
            assert.same({ 1, "", 'shmlock: the 2 permits of "k" in zone '
                                 .. '"jobs" still held after --wait 0\n' },
                        { shmlock { "run", "--permits", "2", "--wait", "0",
                                    "jobs", "k", "true" } })
            assert.equal(0, env.kill(a, 9))
            assert.equal(128 + 9, proc.wait(held[1], 10).code)
            assert.equal(0, (shmlock { "run", "--permits", "2", "--wait",
                                       "10", "jobs", "k", "true" }))
            assert.equal(0, env.kill(b, 9))
            assert.equal(128 + 9, proc.wait(held[2], 10).code)
        end)

        it("runs as an unprivileged user", function()
            if not is_root() then
                pending("needs root (setpriv)")
                return
            end
            sh("chmod 0755 " .. q(dir:match("^(.*)/[^/]*$")) .. " && chmod "
               .. "1777 " .. q(dir))
            local copy = readable_copy.new()
            fx:defer(function() copy:remove() end)
            local status, out = shmlock({ "run", "mine", "k", "--", "sh",
                                          "-c", "id -un; exit 3" },
                                        "setpriv --reuid=65534 "
                                        .. "--regid=65534 --clear-groups",
                                        copy)
            assert.same({ 3, "nobody\n" }, { status, out })
            assert.equal("nobody 600", checkout.trim(sh(
                "stat -c '%U %a' " .. q(dir .. "/shmlock.mine"))))
        end)
    end)

    describe("unlock", function()
        it("releases a lock whoever holds it, exit 5 when none is held",
           function()
            local lock = assert(resty_lock:new(dict))
            assert.equal(0, lock:lock("job"))
            local status, out, err = shmlock { "unlock", "jobs", "job" }
            assert.same({ 0, "released job (held by pid " .. env.pid()
                             .. ")\n", "" }, { status, out, err })
            assert.is_nil(resty_lock.inspect(dict, "job"))
            assert.is_false(lock:owned())

            status, out, err = shmlock { "unlock", "jobs", "job" }
            assert.same({ 5, "", 'shmlock: no lock "job" in zone "jobs"\n' },
                        { status, out, err })
            assert.is_true(dict:set("plain", "v"))
            status, out, err = shmlock { "unlock", "jobs", "plain" }
            -- a value is no lock (locks are not the dictionary's entries)
            assert.same({ 5, "", 'shmlock: no lock "plain" in zone "jobs"\n' },
                        { status, out, err })
            assert.equal("v", dict:get("plain"))
            assert.equal(3, (shmlock { "unlock", "nozone", "job" }))
        end)

        it("frees a run's lock: the next run gets it, and run says the "
           .. "lock was lost", function()
            local pid = start(cat({ "run", "jobs", "k", "--" },
                                  sleeper(dir .. "/cmd")), dir .. "/err")
            local cmd_pid = pid_in(dir .. "/cmd")
            local keeper = keeper_of("k")
            assert.is_number(keeper)
            assert.same({ 0, "released k (held by pid " .. keeper .. ")\n",
                          "" }, { shmlock { "unlock", "jobs", "k" } })
            assert.equal(0, (shmlock { "run", "--wait", "0", "jobs", "k",
                                       "true" }))
            assert.equal('shmlock: lock "k" in zone "jobs" lost: released '
                         .. "from outside (shmlock unlock) (the command runs "
                         .. "on)", written(dir .. "/err"))
            -- the command ran on; shmlock gives its status
            assert.is_true(env.exists("/proc/" .. cmd_pid))
            assert.equal(0, env.kill(cmd_pid, 9))
            assert.equal(128 + 9, proc.wait(pid, 10).code)
        end)

        it("frees a semaphore's permits (--pid: one process's), and a key's "
           .. "shared holds; --kind picks one where a key has several",
           function()
            local semaphore = require "resty.shmlock.semaphore"
            local sem = assert(semaphore:new(dict, { permits = 3 }))
            assert.equal(0, sem:acquire("db"))
            local pid = start(cat({ "run", "--permits", "3", "jobs", "db",
                                    "--" }, sleeper(dir .. "/cmd")),
                              dir .. "/err")
            local cmd_pid = pid_in(dir .. "/cmd")
            assert.is_number(cmd_pid)
            local keeper = kill_at_end(env.wait_for(function()
                local info = semaphore.inspect(dict, "db")
                for _, h in ipairs(info and info.holders or {}) do
                    if h.pid ~= env.pid() then
                        return h.pid
                    end
                end
            end, 10), "shmlock-keeper")
            assert.is_number(keeper)
            -- the run's permit only
            assert.same({ 0, "released db (1 semaphore permit of pid "
                             .. keeper .. ")\n", "" },
                        { shmlock { "unlock", "--pid", tostring(keeper),
                                    "jobs", "db" } })
            assert.same({ 5, "", 'shmlock: no semaphore permits on "db" of '
                                 .. "pid " .. keeper .. ' in zone "jobs"\n' },
                        { shmlock { "unlock", "--pid", tostring(keeper),
                                    "jobs", "db" } })
            local info = assert(semaphore.inspect(dict, "db"))
            assert.same({ 1, env.pid() }, { info.count, info.holders[1].pid })
            assert.equal('shmlock: permit of "db" (3 at most) in zone "jobs" '
                         .. "lost: released from outside (shmlock unlock) "
                         .. "(the command runs on)", written(dir .. "/err"))
            assert.equal(0, env.kill(cmd_pid, 9))
            assert.equal(128 + 9, proc.wait(pid, 10).code)

            -- a lock of the same key too: which one, --kind says
            local lock = assert(resty_lock:new(dict))
            assert.equal(0, lock:lock("db"))
            assert.same({ 2, "", 'shmlock: "db" in zone "jobs" holds a lock '
                                 .. "and semaphore permits: pick one with "
                                 .. "--kind lock or --kind semaphore\n" },
                        { shmlock { "unlock", "jobs", "db" } })
            assert.same({ 0, "released db (1 semaphore permit)\n", "" },
                        { shmlock { "unlock", "--kind", "semaphore", "jobs",
                                    "db" } })
            assert.same({ nil, "not locked" },
                        { semaphore.inspect(dict, "db") })
            assert.is_true(lock:owned())
            assert.same({ 5, "", 'shmlock: no lock "db" of pid 1 in zone '
                                 .. '"jobs"\n' },
                        { shmlock { "unlock", "--pid", "1", "jobs", "db" } })
            assert.same({ 5, "", 'shmlock: no shared holds on "db" in zone '
                                 .. '"jobs"\n' },
                        { shmlock { "unlock", "--kind", "shared", "jobs",
                                    "db" } })
            local status, out = shmlock { "--json", "unlock", "--kind", "lock",
                                          "jobs", "db" }
            assert.same({ 0, '{"alive":true,"key":"db","kind":"lock","pid":'
                             .. env.pid() .. ',"released":true,"zone":'
                             .. '"jobs"}\n' }, { status, out })
            assert.is_false(lock:owned())

            -- shared holds: every one, or one process's
            local readers = {}
            for i = 1, 2 do
                readers[i] = assert(resty_lock:new(dict))
                assert.equal(0, readers[i]:lock_shared("db"))
            end
            assert.same({ 5, "", 'shmlock: no shared holds on "db" of pid 1 '
                                 .. 'in zone "jobs"\n' },
                        { shmlock { "unlock", "--pid", "1", "jobs", "db" } })
            assert.same({ 0, "released db (2 shared holds of pid "
                             .. env.pid() .. ")\n", "" },
                        { shmlock { "unlock", "--pid", tostring(env.pid()),
                                    "jobs", "db" } })
            assert.same({ nil, "not locked" },
                        { resty_lock.inspect(dict, "db") })
        end)

        it("exits 2 for a bad --kind or --pid, or --kind with run", function()
            for _, words in ipairs {
                { "unlock", "--kind", "mutex", "jobs", "k" },
                { "unlock", "--pid", "0", "jobs", "k" },
                { "unlock", "--pid", "x", "jobs", "k" },
                { "run", "--kind", "lock", "jobs", "k", "true" },
                { "run", "--permits", "0", "jobs", "k", "true" },
                { "run", "--permits", "16777216", "jobs", "k", "true" },
                { "run", "--shared", "--permits", "2", "jobs", "k", "true" },
                { "run", "--conflict-exit-code", "256", "jobs", "k", "true" },
                { "unlock", "--shared", "jobs", "k" },
            } do
                local status, out, err = shmlock(words)
                assert.same({ 2, "" }, { status, out }, table.concat(words,
                                                                    " "))
                assert.truthy(err:find("^shmlock: .*\nTry 'shmlock "
                                       .. "%-%-help'%.\n$"), err)
            end
        end)
    end)

    describe("--group", function()
        it("trusts a zone shared with that group, by name or gid", function()
            if not is_root() then
                pending("needs root (a zone of group daemon)")
                return
            end
            fx:zone("shared", { size = "64k", mode = "0660",
                                group = "daemon" })
            local status, out, err = shmlock { "stat", "shared" }
            assert.same({ 4, "", 'shmlock: zone "shared": zone file mode '
                                 .. "0660 is group-writable: pass --group "
                                 .. "daemon to trust group daemon\n" },
                        { status, out, err })
            for _, g in ipairs { "daemon", "1" } do
                status, out = shmlock { "--group", g, "stat", "shared" }
                assert.equal(0, status)
                assert.truthy(out:find("\nmode +0660\n"), out)
            end
            assert.equal(0, (shmlock { "run", "--group", "daemon", "shared",
                                       "k", "true" }))
            assert.same({ 2, "", 'shmlock: zone "shared": unknown group '
                                 .. '"nosuchgroup"\n' },
                        { shmlock { "--group", "nosuchgroup", "stat",
                                    "shared" } })
        end)

        it("run makes a zone shared with the group (mode 0660)", function()
            if not is_root() then
                pending("needs root")
                return
            end
            assert.equal(0, (shmlock { "run", "--group", "daemon", "grp",
                                       "k", "true" }))
            assert.equal("660 daemon", checkout.trim(sh(
                "stat -c '%a %G' " .. q(dir .. "/shmlock.grp"))))
            assert.is_true(shdict.destroy("grp", { dir = dir }))
        end)

        it("root on a zone of nobody: advises running as nobody, not "
           .. "trusting nogroup", function()
            if not is_root() then
                pending("needs root (setpriv)")
                return
            end
            sh("chmod 0755 " .. q(dir:match("^(.*)/[^/]*$")) .. " && chmod "
               .. "1777 " .. q(dir))
            local copy = readable_copy.new()
            fx:defer(function() copy:remove() end)
            assert.equal(0, (shmlock({ "run", "theirs", "k", "true" },
                                     "setpriv --reuid=65534 --regid=65534 "
                                     .. "--clear-groups", copy)))
            local status, out, err = shmlock { "locks", "theirs" }
            assert.same({ 4, "" }, { status, out })
            assert.equal('shmlock: zone "theirs": zone file owned by another '
                         .. "user (uid 65534): run as nobody (the zone's "
                         .. "owner), or share the zone with a group on "
                         .. 'purpose: create it with --group G and '
                         .. 'opts.mode = "0660", and attach with --group G; '
                         .. "a file left from an earlier setup (nginx's user "
                         .. "changed, say) goes with `shmlock --dir " .. dir
                         .. " destroy theirs` run as root or nobody, and the "
                         .. "next open makes the zone anew\n", err)
            assert.falsy(err:find("nogroup"))
            -- as nobody, it works
            status = shmlock({ "locks", "theirs" }, "setpriv --reuid=65534 "
                             .. "--regid=65534 --clear-groups", copy)
            assert.equal(0, status)
        end)
    end)
end)
