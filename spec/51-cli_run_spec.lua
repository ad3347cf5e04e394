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

    -- `shmlock --dir DIR <words...>` started in the background: its pid
    -- (the shmlock process itself: the child execs it)
    local function start(words)
        return proc.spawn(function()
            local argv = { "/usr/bin/env", "-u", "LUA_PATH", "-u",
                           "SHMLOCK_DIR", BIN, "--dir", dir }
            for _, w in ipairs(words) do
                argv[#argv + 1] = w
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

        it("gives up after --wait with exit 1, the command never run, and "
           .. "frees the lock at once when the command is killed (kill -9)",
           function()
            local pid = start { "run", "jobs", "k", "--", "sleep", "60" }
            local cmd_pid = holder_of("k")
            assert.is_number(cmd_pid, "the lock was never taken")
            -- the holder is the command's process, not shmlock's
            assert.are_not.equal(pid, cmd_pid)

            local ran = dir .. "/ran"
            local status, out, err = shmlock { "run", "--wait", "0.1",
                                               "jobs", "k", "--", "touch",
                                               ran }
            assert.same({ 1, "", 'shmlock: lock "k" in zone "jobs" still '
                                 .. "held after --wait 0.1\n" },
                        { status, out, err })
            assert.is_false(env.exists(ran))

            assert.equal(0, env.kill(cmd_pid, 9))
            local r = proc.wait(pid, 10)
            assert.same({ "exit", 128 + 9 }, { r.how, r.code })
            -- released by shmlock as it saw the command end
            assert.is_nil(resty_lock.inspect(dict, "k"))
        end)

        it("forwards SIGTERM to the command, and exits with its status",
           function()
            local pid = start { "run", "jobs", "k", "--", "sleep", "60" }
            local cmd_pid = holder_of("k")
            assert.is_number(cmd_pid)
            assert.equal(0, env.kill(pid, 15))
            local r = proc.wait(pid, 10)
            assert.same({ "exit", 128 + 15 }, { r.how, r.code })
            assert.is_true(gone(cmd_pid))
            assert.is_nil(resty_lock.inspect(dict, "k"))
        end)

        it("renews the lock: a command outliving --exptime keeps it",
           function()
            local pid = start { "run", "--exptime", "1", "jobs", "k", "--",
                                "sleep", "60" }
            local cmd_pid = holder_of("k")
            assert.is_number(cmd_pid)
            -- three exptimes later (a lower bound: later is as good)
            proc.sleep(3)
            local info = assert(resty_lock.inspect(dict, "k"))
            assert.same({ cmd_pid, true }, { info.pid, info.alive })
            assert.is_true(info.ttl > 0 and info.ttl <= 1, info.ttl)
            assert.equal(1, (shmlock { "run", "--wait", "0", "jobs", "k",
                                       "true" }))
            assert.equal(0, env.kill(cmd_pid, 9))
            assert.equal(128 + 9, proc.wait(pid, 10).code)
            assert.is_nil(resty_lock.inspect(dict, "k"))
        end)

        it("leaves the lock to the command when shmlock is killed (kill -9), "
           .. "free at once when the command ends", function()
            local pid = start { "run", "jobs", "k", "--", "sleep", "60" }
            local cmd_pid = holder_of("k")
            assert.is_number(cmd_pid)
            assert.equal(0, env.kill(pid, 9))
            assert.same({ "signal", 9 }, { proc.wait(pid, 10).how,
                                           9 })
            -- the command runs on, holding the lock
            local info = assert(resty_lock.inspect(dict, "k"))
            assert.same({ cmd_pid, true }, { info.pid, info.alive })
            assert.equal(1, (shmlock { "run", "--wait", "0", "jobs", "k",
                                       "true" }))
            -- once it is gone, the next run takes the key without waiting
            assert.equal(0, env.kill(cmd_pid, 9))
            assert.is_true(gone(cmd_pid), "the command was never reaped")
            assert.equal(0, (shmlock { "run", "--wait", "0", "jobs", "k",
                                       "true" }))
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

        it("frees a run's lock: the next run gets it", function()
            local pid = start { "run", "jobs", "k", "--", "sleep", "60" }
            local cmd_pid = holder_of("k")
            assert.is_number(cmd_pid)
            assert.equal(0, (shmlock { "unlock", "jobs", "k" }))
            assert.equal(0, (shmlock { "run", "--wait", "0", "jobs", "k",
                                       "true" }))
            assert.equal(0, env.kill(cmd_pid, 9))
            assert.equal(128 + 9, proc.wait(pid, 10).code)
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
                         .. 'opts.mode = "0660", and attach with --group G\n',
                         err)
            assert.falsy(err:find("nogroup"))
            -- as nobody, it works
            status = shmlock({ "locks", "theirs" }, "setpriv --reuid=65534 "
                             .. "--regid=65534 --clear-groups", copy)
            assert.equal(0, status)
        end)
    end)
end)
