-- The edges found by trying the library as an attacker and as a new user
-- would: several Lua VMs in one process, a zone destroyed and made again
-- by another process, a pid reused after a kill inside a shard's mutex,
-- files planted or loosened in the zone directory, another pid namespace.
-- Each test here failed on the code before its fix (lost exclusion, a
-- hang, or a wrong answer).

local ffi = require "ffi"
local proc = require "harness.proc"
local fixture = require "helpers.fixture"
local children = require "helpers.children"
local vm = require "helpers.vm"
local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local token = require "resty.shmlock.internal.token"
local lib = require "helpers.test_hooks"
local env = require "helpers.lock_env"
local layout = require "helpers.zone_layout"
local checkout = require "helpers.checkout"

local fmt = string.format

local CLEAN = { how = "exit", code = 0, msg = "" }

local function exit_of(r)
    return { how = r.how, code = r.code, sig = r.sig, msg = r.msg }
end

-- a shell command's output, stderr included
local function sh(cmd)
    return checkout.sh(cmd .. " 2>&1")
end

local function is_root()
    return sh("id -u"):match("^0") ~= nil
end

local LUA_PATH = checkout.LUA_PATH


describe("resty.shmlock at the edges", function()
    local fx = fixture.new { children = "assert" }
    local dir

    before_each(function()
        dir = fx.dir
    end)

    local function open(name, opts)
        opts = opts or {}
        opts.dir = dir
        opts.size = opts.size or "64k"
        return assert(shdict.open(name, opts))
    end

    describe("with several Lua VMs in one process", function()
        it("never lets one VM's lock pass for another's", function()
            local d = open("vms")
            local other = vm.new()
            finally(function() other:close() end)

            -- the other VM takes its first token's lock and keeps holding
            assert.same({ true, "0" }, { other:run(fmt([[
                local resty_lock = require "resty.shmlock"
                local shdict = require "resty.shmlock.shdict"
                D = assert(shdict.open("vms", { dir = %q }))
                HELD = assert(resty_lock:new(D))
                return HELD:lock("k")
            ]], dir)) })
            local holder = d:get("k")

            -- ours, taken here as the first lock of this VM's module too,
            -- must wait for it
            local mine = resty_lock:new(d, { timeout = 0 })
            assert.same({ nil, "timeout" }, { mine:lock("k") })
            assert.equal(holder, d:get("k"))

            assert.same({ true, "1" }, { other:run("return HELD:unlock()") })
            assert.equal(0, mine:lock("k"))
            assert.equal(1, mine:unlock())
        end)

        it("hands out tokens no other VM of the process hands out",
           function()
            local other = vm.new()
            finally(function() other:close() end)
            local ok, theirs = other:run([[
                local token = require "resty.shmlock.internal.token"
                local ffi = require "ffi"
                local t = {}
                for i = 1, 2000 do
                    t[i] = ffi.string(token.next())
                end
                return table.concat(t, " ")
            ]])
            assert.is_true(ok, theirs)
            local seen = {}
            for tok in theirs:gmatch("%S+") do
                seen[tok] = true
            end
            for _ = 1, 2000 do
                local tok = ffi.string(token.next())
                assert.is_nil(seen[tok], "token handed out twice: " .. tok)
                seen[tok] = true
            end
        end)
    end)

    describe("when another process destroys the zone and makes it again",
             function()
        it("reaches the new zone by name, and refuses the old mapping",
           function()
            -- names resolve in $SHMLOCK_DIR for resty_lock:new()
            env.setenv("SHMLOCK_DIR", dir)
            finally(function() env.setenv("SHMLOCK_DIR", nil) end)
            local old = assert(shdict.open("phoenix"))
            local mine = assert(resty_lock:new("phoenix"))
            assert.equal(0, mine:lock("mine"))

            local go = proc.pipe()
            local held = proc.pipe()
            local pid = proc.spawn(function()
                held:close_read()
                assert(shdict.destroy("phoenix"))
                local d = assert(shdict.open("phoenix", { size = "32k" }))
                local l = assert(resty_lock:new(d))
                assert(l:lock("k") == 0)
                held:notify()
                assert(go:await(20), "never told to go")
                assert(l:unlock() == 1)
            end)
            held:close_write()
            assert.is_true(held:await(5))

            -- the old objects refuse to act on a zone nobody else sees
            assert.same({ nil, "zone destroyed" }, { old:get("k") })
            assert.same({ nil, "zone destroyed" }, { mine:unlock() })
            assert.is_nil(shdict.opened("phoenix"))

            -- the name reaches the new zone, where the child holds "k"
            local new = assert(shdict.open("phoenix"))
            assert.is_false(rawequal(old, new))
            assert.equal(32768, new:capacity())
            local l = assert(resty_lock:new("phoenix", { timeout = 0 }))
            assert.same({ nil, "timeout" }, { l:lock("k") })

            go:notify()
            assert.same(CLEAN, exit_of(proc.wait(pid, 10)))
            assert.equal(0, l:lock("k"))
            assert.equal(1, l:unlock())
            go:close()
            held:close()
        end)

        it("answers 'zone destroyed' to a lock object of the old zone",
           function()
            local d = open("gone")
            local l = assert(resty_lock:new(d))
            assert.is_true(shdict.destroy("gone", { dir = dir }))
            assert.same({ nil, "zone destroyed" }, { l:lock("k") })
            assert.same({ nil, "zone destroyed" }, { l:trylock("k") })
        end)

        it("ends a wait in a zone destroyed meanwhile with its error",
           function()
            local d = open("mid-wait")
            local held = proc.pipe()
            local pid = proc.spawn(function()
                held:close_read()
                local l = assert(resty_lock:new(d))
                assert(l:lock("k") == 0)
                held:notify()
                proc.sleep(0.2)
                assert(shdict.destroy("mid-wait", { dir = dir }))
                proc.sleep(1)
            end)
            held:close_write()
            assert.is_true(held:await(5))
            held:close()
            -- a wait to the timeout would last 60 s: a bound far from
            -- both that timer lag cannot reach
            local l = assert(resty_lock:new(d, { timeout = 60,
                                                 exptime = 60 }))
            local t0 = proc.now()
            assert.same({ nil, "zone destroyed" }, { l:lock("k") })
            assert.is_true(proc.now() - t0 < 30, "waited to the timeout")
            assert.same(CLEAN, exit_of(proc.wait(pid, 5)))
        end)

        it("replaces a dead zone a destroyer left behind (killed between "
           .. "the mark and the unlink)", function()
            local path = dir .. "/shmlock.halfway"
            local d = open("halfway")
            assert.is_true(d:set("k", "old"))
            -- the file as a destroyer leaves it: marked dead, still there
            sh(fmt("cp %q %q.copy", path, path))
            local f = assert(io.open(path .. ".copy", "r+b"))
            f:seek("set", ffi.offsetof(layout.ZONE_HDR, "dead"))
            f:write("\1\0\0\0")
            f:close()
            assert.is_true(shdict.destroy("halfway", { dir = dir }))
            sh(fmt("mv %q.copy %q", path, path))

            -- attaching only: the dead file goes, nothing takes its place
            assert.same({ nil, "not found" },
                        { shdict.open("halfway", { dir = dir,
                                                   create = false }) })
            local again = open("halfway")
            assert.same({ nil, nil }, { again:get("k") })
            assert.is_true(again:set("k", "new"))
            assert.same({ true }, { again:verify() })
        end)

        it("unmaps zones whose objects are collected", function()
            local function mappings()
                local n = 0
                for line in io.lines("/proc/self/maps") do
                    if line:find(dir, 1, true) then
                        n = n + 1
                    end
                end
                return n
            end
            local before = mappings()
            for i = 1, 1000 do
                local d = open("many" .. i, { size = "32k" })
                d:set("k", i)
            end
            collectgarbage()
            collectgarbage()
            assert.is_true(mappings() - before < 10,
                           (mappings() - before) .. " zones still mapped")
            -- a zone in use stays mapped, and one mapping serves all
            local a = open("kept")
            local b = assert(shdict.open("kept", { dir = dir }))
            assert.equal(a, b)
            collectgarbage()
            assert.equal(1, mappings() - before)
            a:set("x", 1)
            assert.equal(1, b:get("x"))
        end)
    end)

    describe("when a pid is reused after a kill inside a shard mutex",
             function()
        local NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"

        it("takes the mutex over although a live process has the pid",
           function()
            if not is_root() then
                pending("needs root to write " .. NS_LAST_PID)
                return
            end
            local d = open("reuse")
            d:set("k", "before")
            local held = proc.pipe()
            local victim = proc.spawn(function()
                held:close_read()
                lib.shmlock_test_mutex_lock(d._zone)
                held:notify()
                proc.sleep(20)
            end)
            held:close_write()
            assert.is_true(held:await(5))
            held:close()
            -- a pid is reused at least a clock tick (10 ms) after the
            -- dead process started: its start time then tells them apart
            proc.sleep(0.05)
            proc.kill(victim, proc.SIGKILL)
            proc.wait(victim, 5)

            local impostor = children.sleeper_with_pid(victim)
            assert.is_not_nil(impostor, "could not reuse pid " .. victim)

            -- before: every call on the shard blocked while it lived
            local worker = proc.spawn(function()
                assert(d:get("k") == "before")
                assert(d:set("k", "after"))
                assert(d:verify())
            end)
            assert.same(CLEAN, exit_of(proc.wait(worker, 5)))
            assert.equal("after", d:get("k"))
            proc.kill(impostor, proc.SIGKILL)
            proc.wait(impostor, 5)
        end)
    end)

    describe("with files planted in the zone directory", function()
        it("creates a zone whatever temporary names were planted",
           function()
            -- a fresh process (its counters start from scratch) that
            -- waits for "go", then creates the zone
            local pidfile, go = dir .. "/pid", dir .. "/go"
            local script = dir .. "/creator.lua"
            local f = assert(io.open(script, "w"))
            f:write(fmt([[
local d, err = require("resty.shmlock.shdict").open("squat", { dir = %q })
print(d and tostring(d:set("k", 1)) or err)]], dir))
            f:close()
            local out = assert(io.popen(fmt(
                "sh -c 'echo $$ > %s; while [ ! -e %s ]; do sleep 0.01; "
                .. "done; LUA_PATH=\"%s\" exec luajit %s' 2>&1",
                pidfile, go, LUA_PATH, script)))
            local pid
            local deadline = proc.now() + 5
            while not pid and proc.now() < deadline do
                local pf = io.open(pidfile)
                pid = pf and tonumber(pf:read("*a"))
                if pf then pf:close() end
                proc.sleep(0.01)
            end
            assert.is_not_nil(pid)
            -- the names the creator used to take: .shmlock.NAME.PID.N.tmp
            for n = 1, 16 do
                local path = fmt("%s/.shmlock.squat.%d.%d.tmp", dir, pid, n)
                assert(io.open(path, "w")):close()
                if is_root() then
                    sh("chown 65534 " .. path)
                end
            end
            assert(io.open(go, "w")):close()
            assert.equal("true\n", out:read("*a"))
            out:close()
            -- nothing of the creator's is left behind
            local left = sh("ls -A " .. dir .. " | grep -v '^.shmlock.squat.'"
                            .. " | grep -v '^pid$' | grep -v '^go$'"
                            .. " | grep -v '^creator.lua$'")
            assert.equal("shmlock.squat\n", left)
        end)

        -- in a fresh process: this one already has the zone mapped
        local function open_elsewhere(name)
            local out = sh(fmt("cd %q && LUA_PATH=%q luajit -e %q", ".",
                               LUA_PATH, fmt([[
local d, err = require("resty.shmlock.shdict").open(%q, { dir = %q })
print(d and "opened" or err)]], name, dir)))
            return (out:gsub("\n$", ""))
        end

        it("refuses a zone of ours that others may write", function()
            open("loose"):set("k", 1)
            local path = dir .. "/shmlock.loose"
            assert.equal("opened", open_elsewhere("loose"))
            sh("chmod 0666 " .. path)
            assert.equal("zone file mode 0666 is writable by others",
                         open_elsewhere("loose"))
            sh("chmod 0602 " .. path)
            assert.equal("zone file mode 0602 is writable by others",
                         open_elsewhere("loose"))
            sh("chmod 0620 " .. path)
            local group = checkout.trim(sh("stat -c %G " .. path))
            assert.equal("zone file mode 0620 is group-writable: pass "
                         .. 'opts.group = "' .. group .. '" to trust group '
                         .. group, open_elsewhere("loose"))
            sh("chmod 0640 " .. path)
            assert.equal("opened", open_elsewhere("loose"))
        end)

        it("names another user's zone as such", function()
            if not is_root() then
                pending("needs root to chown")
                return
            end
            open("theirs")
            sh("chown 65534:0 " .. dir .. "/shmlock.theirs")
            assert.equal("zone file owned by another user (uid 65534): "
                         .. "run as nobody (the zone's owner), or share the "
                         .. "zone with a group on purpose: create it with "
                         .. 'opts.group = "G" and opts.mode = "0660", and '
                         .. 'attach with opts.group = "G"; a file left '
                         .. "from an earlier setup (nginx's user changed, "
                         .. "say) goes with `shmlock --dir " .. dir
                         .. " destroy theirs` run as root or nobody, and "
                         .. "the next open makes the zone anew",
                         open_elsewhere("theirs"))
        end)
    end)

    describe("from another pid namespace", function()
        it("refuses to attach, naming the cause", function()
            open("ns"):set("k", 1)
            local probe = sh("unshare -p -f --mount-proc true")
            if probe ~= "" then
                if is_root() then
                    error("unshare failed as root: " .. probe)
                end
                pending("unshare -p not permitted here: " .. probe)
                return
            end
            local out = sh(fmt("LUA_PATH=%q unshare -p -f --mount-proc "
                               .. "luajit -e %q", LUA_PATH, fmt([[
local d, err = require("resty.shmlock.shdict").open("ns", { dir = %q })
print(d and ("opened " .. tostring(d:get("k"))) or err)]], dir)))
            assert.equal("zone made in another pid namespace\n", out)
        end)
    end)
end)
