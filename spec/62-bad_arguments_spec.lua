-- Bad arguments never crash the process (issue 30): the sweep
-- (spec/every_lua/sweep.lua: every public function and method, wrong
-- selves and bad values) under LuaJIT, in a child process, so that a
-- crash is seen as its signal; under `make test-asan` against the
-- library built with ASan (the child inherits LD_PRELOAD and
-- SHMLOCK_LIB).  Each PUC Lua runs the same sweep, the C module's
-- functions included, in `make test-every-lua`, under valgrind and ASan.
-- Then the crashes the sweep found, each pinned on its own.

local checkout = require "helpers.checkout"

local sh, trim = checkout.sh, checkout.trim
local ROOT = checkout.ROOT
local PUC = { "lua5.1", "lua5.2", "lua5.3", "lua5.4" }

local dir

before_each(function()
    dir = trim(sh("mktemp -d /tmp/shmlock-sweep.XXXXXX"))
end)

after_each(function()
    sh("rm -rf '" .. dir .. "'")
end)

-- `lua` runs code (a file of spec/every_lua with args, or -e CODE) from
-- dir with the checkout's modules: its output, and its exit status as the
-- shell says it (128 + n: killed by signal n)
local function run(lua, what, limit)
    local out = sh("cd '" .. dir .. "' && SHMLOCK_DIR='" .. dir .. "' "
                   .. "LUA_PATH='" .. checkout.LUA_PATH .. "' timeout -s KILL "
                   .. (limit or 120) .. " " .. lua .. " " .. what .. " 2>&1; echo \"status=$?\"")
    local status = tonumber(out:match("status=(%d+)\n?$"))
    return trim(out:gsub("status=%d+\n?$", "")), status
end

-- the last call the sweep started (its progress file)
local function last_call()
    return trim(checkout.read_file(dir .. "/sweep/progress") or "")
               :match("[^\n]*$")
end


describe("bad arguments", function()
    it("never crash LuaJIT: every public function and method, wrong selves "
       .. "and bad values (the sweep)", function()
        sh("mkdir '" .. dir .. "/sweep'")
        local out, status = run("luajit", "'" .. ROOT
                                 .. "/spec/every_lua/sweep.lua' '" .. dir
                                 .. "/sweep'")
        assert.equal(0, status, "the sweep died (status " .. tostring(status)
                     .. ") in: " .. tostring(last_call()) .. "\n" .. out)
        assert.truthy(out:find("^ok %d+ calls$"), out)
        -- (a sweep that lost its table would call little)
        assert.truthy(tonumber(out:match("%d+")) > 5000, out)
    end)

    it("semaphore methods on a zone name, a dict or {} raise (was SIGSEGV: "
       .. "a NULL zone reached the FFI)", function()
        local out, status = run("luajit", [[-e '
            local shdict = require "resty.shmlock.shdict"
            local semaphore = require "resty.shmlock.semaphore"
            local d = assert(shdict.open("sem_self"))
            for _, self in ipairs { "sem_self", d, {} } do
                for _, m in ipairs { "count", "acquire", "release",
                                     "expire", "owned" } do
                    local ok, err = pcall(semaphore[m], self, "key")
                    print(m, ok, (tostring(err):gsub("^[^:]*:%d+: ", "")))
                end
            end
            print("alive")']], 30)
        assert.equal(0, status, out)
        local want = {}
        for _ = 1, 3 do
            for _, m in ipairs { "count", "acquire", "release", "expire",
                                 "owned" } do
                want[#want + 1] = m .. "\tfalse\tbad semaphore object (use "
                                  .. "sem:method(), not sem.method())"
            end
        end
        want[#want + 1] = "alive"
        assert.equal(table.concat(want, "\n"), out)
    end)

    it("lock methods on a wrong self raise, naming the misuse; opts.group "
       .. "with a NUL byte raises (getgrnam would see a shorter name)",
       function()
        local shdict = require "resty.shmlock.shdict"
        local resty_lock = require "resty.shmlock"
        local semaphore = require "resty.shmlock.semaphore"
        local d = assert(shdict.open("lock_self", { dir = dir }))
        local sem = assert(semaphore:new(d))
        for _, self in ipairs { "lock_self", d, sem, {}, 5 } do
            for _, m in ipairs { "lock", "trylock", "lock_shared", "unlock",
                                 "expire", "owned" } do
                local ok, err = pcall(resty_lock[m], self, "key")
                assert.is_false(ok)
                assert.equal("bad lock object (use lock:method(), not "
                             .. "lock.method())",
                             (tostring(err):gsub("^[^:]*:%d+: ", "")), m)
            end
        end
        assert.has_error(function()
            shdict.open("grouped", { dir = dir, group = "root\0x" })
        end, 'bad "opts.group" argument')
        shdict.destroy("lock_self", { dir = dir })
    end)

    it("a zeroed ticket releases, extends and swaps nothing: the zone "
       .. "verifies (its release made an empty slot live)", function()
        local ffi = require "ffi"
        local C = require "resty.shmlock.lib"
        local shdict = require "resty.shmlock.shdict"
        local d = assert(shdict.open("zeroed", { dir = dir }))
        local zone = d._zone
        local zero = ffi.new("shmlock_ticket_t")
        local out = ffi.new("shmlock_ticket_t")
        assert.equal(C.SHMLOCK_NOT_FOUND, C.shmlock_slot_release(zone, zero))
        assert.equal(C.SHMLOCK_NOT_FOUND,
                     C.shmlock_slot_extend(zone, zero, 1000, 0))
        -- (an owner of this process: the swap's arguments are good)
        local owner = ffi.cast("uint64_t", C.shmlock_self_pid()) * 2 ^ 32 + 7
        assert.equal(C.SHMLOCK_CHANGED,
                     C.shmlock_slot_swap(zone, zero, owner, 0, 0, 1000, 0,
                                         out))
        assert.same({ true }, { d:verify() })
        -- a lock still works in every slot
        local lock = assert(require("resty.shmlock"):new(d))
        assert.equal(0, lock:lock("k"))
        assert.equal(1, lock:unlock())
        assert.same({ true }, { d:verify() })
        shdict.destroy("zeroed", { dir = dir })
    end)

    it("a zone collected with the library's last reference closes before "
       .. "the library goes (was SIGSEGV: busted drops the modules between "
       .. "spec files)", function()
        -- a zone alone; then a zone with a held lock, a shared hold and a
        -- permit: every module dropped from package.loaded, and
        -- everything collected
        local DROP = [[
            for name in pairs(package.loaded) do
                if name:find("^resty%.shmlock") then
                    package.loaded[name] = nil
                end
            end]]
        local out, status = run("luajit", [[-e '
            local shdict = require "resty.shmlock.shdict"
            local d = assert(shdict.open("gczone"))
            ]] .. DROP .. [[
            shdict, d = nil, nil
            collectgarbage()
            collectgarbage()
            print("alive")']], 30)
        assert.equal(0, status, out)
        assert.equal("alive", out)
        out, status = run("luajit", [[-e '
            local shdict = require "resty.shmlock.shdict"
            local d = assert(shdict.open("gczone"))
            local l = assert(require("resty.shmlock"):new(d))
            assert(l:lock("a") == 0)
            local r = assert(require("resty.shmlock"):new(d))
            assert(r:lock_shared("b") == 0)
            local s = assert(require("resty.shmlock.semaphore"):new(d))
            assert(s:acquire("c") == 0)
            ]] .. DROP .. [[
            shdict, d, l, r, s = nil, nil, nil, nil, nil
            collectgarbage()
            collectgarbage()
            print("alive")']], 30)
        assert.equal(0, status, out)
        assert.equal("alive", out)
    end)

    it("core.slot_hash(key, NaN) raises under every PUC Lua (was SIGSEGV: "
       .. "NaN passed the length check)", function()
        for _, lua in ipairs(PUC) do
            local out, status = run(lua, [[-e '
                local C = require("resty.shmlock.internal.core").mod
                for _, n in ipairs { 0/0, -1, 4, 1/0 } do
                    local ok, err = pcall(C.slot_hash, "abc", n)
                    print(ok, (tostring(err):gsub("^[^:]*:%d+: ", "")))
                end
                print(C.slot_hash("abc", 3) == C.slot_hash("abc"))']], 30)
            assert.equal(0, status, lua .. ": " .. out)
            local bad = "false\tbad argument #2 to '?' (bad key length)"
            assert.equal(table.concat({ bad, bad, bad, bad, "true" }, "\n"),
                         (out:gsub("to %S+ %(", "to '?' (")), lua)
        end
    end)

    it("the C module raises on a number its integer type cannot hold, "
       .. "under every PUC Lua", function()
        for _, lua in ipairs(PUC) do
            local out, status = run(lua, [[-e '
                local core = require "resty.shmlock.internal.core"
                local shdict = require "resty.shmlock.shdict"
                local C = core.mod
                local z = assert(shdict.open("ranges"))._zone
                local function try(f, ...)
                    local ok, err = pcall(f, ...)
                    print(ok, (tostring(err):gsub("^[^:]*:%d+: ", "")
                                            :gsub("^(bad argument #%d+ to )%S+ %(", "%1f (")))
                end
                try(C.wait_count, z, 0/0)
                try(C.wait_count, z, 2^32)
                try(C.dict_scan, z, -1, 10)
                try(C.dict_stats, z, 2^31)
                try(C.group_acquire, z, C.K.SEMAPHORE, "g", 1, 1, 1, 2^63,
                    C.ticket())
                try(C.sleep, 0/0)
                try(C.sleep, 2^53)
                try(C.setenv, "SHMLOCK_DIR", "/tmp\0/x")
                try(C.getgrnam, "root\0x")
                print(C.bit_tobit(0/0), C.bit_band(1/0, -1))']], 30)
            assert.equal(0, status, lua .. ": " .. out)
            local lines = {}
            for line in out:gmatch("[^\n]+") do
                lines[#lines + 1] = line
            end
            assert.equal(10, #lines, lua .. ": " .. out)
            for i = 1, 5 do
                assert.truthy(lines[i]:find("^false\tbad argument #%d to f "
                                            .. "%(number out of range: "),
                              lua .. ": " .. lines[i])
            end
            assert.equal("false\tbad argument #1 to f (seconds up to 1e12 "
                         .. "expected)", lines[6], lua)
            assert.equal(lines[6], lines[7], lua)
            assert.equal("false\tbad argument #2 to f (string with a NUL "
                         .. "byte)", lines[8], lua)
            assert.equal("false\tbad argument #1 to f (string with a NUL "
                         .. "byte)", lines[9], lua)
            assert.equal("0\t0", lines[10], lua)
        end
    end)
end)
