-- Every Lua (docs/every-lua.md): the modules under PUC Lua 5.1 to 5.4 and
-- LuaJIT, through the C module where there is no FFI; zones shared by
-- processes of every interpreter at once; the error where no binding
-- loads.  Runs under LuaJIT's busted and starts each interpreter as a
-- child process (an interpreter missing here fails the spec: `make deps`
-- installs them all).

local checkout = require "helpers.checkout"

local sh, trim = checkout.sh, checkout.trim
local ROOT = checkout.ROOT

local LUA_PATH = ROOT .. "/lua/?.lua;" .. ROOT .. "/lua/?/init.lua;;"
local PUC = { "lua5.1", "lua5.2", "lua5.3", "lua5.4" }
local ALL = { "luajit", "lua5.1", "lua5.2", "lua5.3", "lua5.4" }

-- modules only LuaJIT loads: the FFI binding itself, the Lua lock
-- object's FFI side (its slots' primitives, its handles, its shared holds,
-- the lock in an ngx.shared dict, which exists only inside nginx; under
-- PUC Lua the lock object is the C module's), the semaphore's permit
-- handle (a cdata) and the command (FFI calls); and the C module's side,
-- which only PUC Lua loads
local LUAJIT_ONLY = {
    "^resty%.shmlock%.lib$", "^resty%.shmlock%.internal%.core%.ffi$",
    "^resty%.shmlock%.lock%.slots%.ffi$", "^resty%.shmlock%.lock%.handle$",
    "^resty%.shmlock%.lock%.ngx_shared$", "^resty%.shmlock%.lock%.shared$",
    "^resty%.shmlock%.semaphore%.permit$", "^resty%.shmlock%.cli%.",
}
local PUC_ONLY = {
    "^resty%.shmlock%.internal%.core%.capi$", "^resty%.shmlock%.shdict%.capi$",
    "^resty%.shmlock%.lock%.slots%.capi$",
    "^resty%.shmlock%.semaphore%.permit%.capi$",
}

local function matches(name, patterns)
    for _, p in ipairs(patterns) do
        if name:find(p) then
            return true
        end
    end
    return false
end

local function modules()
    local names = {}
    for f in sh("cd '" .. ROOT .. "/lua' && find resty -name '*.lua' | sort")
             :gmatch("[^\n]+") do
        names[#names + 1] = f:gsub("%.lua$", ""):gsub("/", ".")
    end
    return names
end

-- runs `lua` on a file of spec/every_lua with args, from /tmp (nothing
-- of the checkout on the default paths); its output, trimmed
local function run(lua, script, args, env)
    return trim(sh("cd /tmp && " .. (env or "") .. " LUA_PATH='" .. LUA_PATH
                   .. "' " .. lua .. " '" .. ROOT .. "/spec/every_lua/"
                   .. script .. "' " .. (args or "") .. " 2>&1"))
end

local dir

before_each(function()
    dir = trim(sh("mktemp -d /tmp/shmlock-everylua.XXXXXX"))
end)

after_each(function()
    sh("rm -rf '" .. dir .. "'")
end)


describe("every Lua", function()
    it("has every interpreter installed", function()
        for _, lua in ipairs(ALL) do
            assert.truthy(trim(sh("command -v " .. lua)) ~= "", lua)
        end
    end)

    it("loads each module alone under each interpreter, writing no global",
       function()
        for _, lua in ipairs(ALL) do
            for _, name in ipairs(modules()) do
                local skip = lua == "luajit" and matches(name, PUC_ONLY)
                             or lua ~= "luajit" and matches(name, LUAJIT_ONLY)
                if not skip then
                    local out = sh("cd /tmp && LUA_PATH='" .. LUA_PATH .. "' "
                        .. lua .. " -e \"setmetatable(_G, { __newindex = "
                        .. "function(_, k) error('global ' .. tostring(k), 2)"
                        .. " end }); require '" .. name .. "'; print('ok')\""
                        .. " 2>&1")
                    assert.equal("ok", trim(out), lua .. ": " .. name)
                end
            end
        end
    end)

    it("runs every dictionary method under each interpreter", function()
        for _, lua in ipairs(ALL) do
            assert.equal("ok", run(lua, "dict.lua", dir), lua)
        end
    end)

    it("runs the cache, its loads under the lock included, under each "
       .. "interpreter", function()
        for _, lua in ipairs(ALL) do
            -- a zone of its own: the counters are exact per interpreter
            local own = dir .. "/" .. lua
            sh("mkdir '" .. own .. "'")
            assert.equal("ok", run(lua, "cache.lua", own), lua)
        end
    end)

    it("reads the cache values every other interpreter wrote, tables "
       .. "included", function()
        for _, lua in ipairs(ALL) do
            assert.equal("ok", run(lua, "cache_share.lua",
                                   "'" .. dir .. "' write " .. lua), lua)
        end
        for _, lua in ipairs(ALL) do
            assert.equal("ok", run(lua, "cache_share.lua", "'" .. dir
                                   .. "' read " .. table.concat(ALL, " ")),
                         lua)
        end
    end)

    it("picks the FFI under LuaJIT and the C module under PUC Lua", function()
        local probe = "print(require('resty.shmlock.internal.core').name)"
        local function binding(lua)
            return trim(sh("cd /tmp && LUA_PATH='" .. LUA_PATH .. "' " .. lua
                           .. " -e \"" .. probe .. "\" 2>&1"))
        end
        assert.equal("ffi", binding("luajit"))
        for _, lua in ipairs(PUC) do
            assert.equal("capi", binding(lua), lua)
        end
    end)

    it("shares a zone's counter, list and keys among all interpreters at "
       .. "once", function()
        local N = 2000
        local cmds = {}
        for _, lua in ipairs(ALL) do
            cmds[#cmds + 1] = "(LUA_PATH='" .. LUA_PATH .. "' " .. lua .. " '"
                              .. ROOT .. "/spec/every_lua/share.lua' '" .. dir
                              .. "' " .. lua .. " " .. N .. " > '" .. dir
                              .. "/" .. lua .. ".out' 2>&1) &"
        end
        sh("cd /tmp && " .. table.concat(cmds, " ") .. " wait")
        for _, lua in ipairs(ALL) do
            assert.equal("ok", trim(sh("cat '" .. dir .. "/" .. lua
                                       .. ".out'")), lua)
        end
        -- read back under each interpreter: the same exact figures
        local check = "local d = assert(require('resty.shmlock.shdict')"
            .. ".open('el_share', { dir = '" .. dir .. "', create = false }));"
            .. "local n = {}; for _ = 1, d:llen('list') do"
            .. " local v = d:lpop('list'); n[v] = (n[v] or 0) + 1 end;"
            .. "io.write(d:get('count'), ' ', d:get('lua5.1'), ' ',"
            .. " d:get('lua5.4'), ' ', d:get('luajit'))"
            .. "; for _, l in ipairs{" .. "'luajit','lua5.1','lua5.2',"
            .. "'lua5.3','lua5.4'} do io.write(' ', n[l] or 0) end;"
            .. "for _, l in ipairs{'luajit','lua5.1','lua5.2','lua5.3',"
            .. "'lua5.4'} do assert(d:rpush('list', l)) end"
        local n = #ALL * N
        for _, lua in ipairs(ALL) do
            local out = trim(sh("cd /tmp && LUA_PATH='" .. LUA_PATH .. "' "
                                .. lua .. " -e \"" .. check .. "\" 2>&1"))
            -- the list was pushed N times per process, then is refilled
            -- with one element per interpreter for the next reader
            local per = out:match("^%d+ Lua 5%.1 Lua 5%.4 Lua 5%.1 (.*)$")
            assert.equal(tostring(n), out:match("^(%d+)"), lua .. ": " .. out)
            assert.truthy(per, lua .. ": " .. out)
            if lua == "luajit" then
                assert.equal(string.rep(N .. " ", 5):sub(1, -2), per)
            else
                assert.equal("1 1 1 1 1", per, lua)
            end
        end
    end)

    -- spec/every_lua/<script> under each interpreter, in a directory of
    -- its own, its other process under the next interpreter (a peer);
    -- pending for the interpreters without luaposix (the fork), as the
    -- script reports
    local function each_with_peer(script)
        local skipped = {}
        for i, lua in ipairs(ALL) do
            local own = dir .. "/" .. lua
            sh("mkdir '" .. own .. "'")
            local peer = ALL[i % #ALL + 1]
            local out = run(lua, script, "'" .. own .. "' " .. peer)
            -- luaposix (the fork) is not packaged for every Lua
            local note = out:match("^ok %((no fork: .*)%)$")
            if note then
                skipped[#skipped + 1] = lua .. ": " .. note
            else
                assert.equal("ok", out, lua)
            end
        end
        if #skipped > 0 then
            pending(table.concat(skipped, "; "))
        end
    end

    it("runs the lock under each interpreter: returns, errors, GC, fork; "
       .. "a waiter woken by the release, a SIGKILLed holder and a mark's "
       .. "handoff, the other process of another interpreter", function()
        each_with_peer("lock.lua")
    end)

    it("runs the semaphore under each interpreter: returns, errors, "
       .. "inspect, leases, GC, fork; a waiter woken by the release and a "
       .. "SIGKILLed holder's permit back at once, the other process of "
       .. "another interpreter", function()
        each_with_peer("semaphore.lua")
    end)

    it("runs lock_shared under each interpreter: returns, errors, "
       .. "inspect, leases, GC, fork; with the other process of another "
       .. "interpreter, a reader and a writer woken by the release, the "
       .. "writer's mark and the last reader's handoff, SIGKILLed shared "
       .. "and exclusive holders", function()
        each_with_peer("lock_shared.lua")
    end)

    it("keeps readers and writers of every interpreter apart on one key, "
       .. "all at once", function()
        local N = 150
        local cmds = {}
        for i = 1, 2 do
            for _, lua in ipairs(ALL) do
                cmds[#cmds + 1] = "(LUA_PATH='" .. LUA_PATH .. "' " .. lua
                    .. " '" .. ROOT .. "/spec/every_lua/lock_shared.lua' '"
                    .. dir .. "' board " .. N .. " > '" .. dir .. "/b" .. i
                    .. lua .. ".out' 2>&1) &"
            end
        end
        sh("cd /tmp && " .. table.concat(cmds, " ") .. " wait")
        for i = 1, 2 do
            for _, lua in ipairs(ALL) do
                assert.equal("ok", trim(sh("cat '" .. dir .. "/b" .. i .. lua
                                           .. ".out'")), lua)
            end
        end
        -- every write counted once (an overlap of writers loses one),
        -- every round done, no violation, nobody inside, the key free
        local procs = 2 * #ALL
        local writes = procs * math.floor(N / 3)
        local got = trim(sh("cd /tmp && LUA_PATH='" .. LUA_PATH .. "' luajit "
            .. "-e \"local d = require('resty.shmlock.shdict').open("
            .. "'el_shared', { dir = '" .. dir .. "', create = false }); "
            .. "local l = require('resty.shmlock'); "
            .. "print(d:get('counter'), d:get('writes'), d:get('reads'), "
            .. "d:get('violations'), d:get('violation'), d:get('readers'), "
            .. "d:get('writers'), select(2, l.inspect(d, 'board')))\""))
        assert.equal(writes .. "\t" .. writes .. "\t" .. procs * N - writes
                     .. "\tnil\tnil\t0\t0\tnot locked", got)
    end)

    it("never lets more than `permits` hold a semaphore's key, every "
       .. "interpreter at once", function()
        local N, P = 150, 3
        local cmds = {}
        for i = 1, 2 do
            for _, lua in ipairs(ALL) do
                cmds[#cmds + 1] = "(LUA_PATH='" .. LUA_PATH .. "' " .. lua
                    .. " '" .. ROOT .. "/spec/every_lua/semaphore.lua' '"
                    .. dir .. "' board " .. N .. " " .. P .. " > '" .. dir
                    .. "/b" .. i .. lua .. ".out' 2>&1) &"
            end
        end
        sh("cd /tmp && " .. table.concat(cmds, " ") .. " wait")
        for i = 1, 2 do
            for _, lua in ipairs(ALL) do
                assert.equal("ok", trim(sh("cat '" .. dir .. "/b" .. i .. lua
                                           .. ".out'")), lua)
            end
        end
        -- every round counted, nobody over the limit, nothing left held
        local got = trim(sh("cd /tmp && LUA_PATH='" .. LUA_PATH .. "' luajit "
            .. "-e \"local d = require('resty.shmlock.shdict').open("
            .. "'el_sem', { dir = '" .. dir .. "', create = false }); "
            .. "local s = require('resty.shmlock.semaphore'):new(d); "
            .. "print(d:get('rounds'), d:get('violations'), d:get('inside'),"
            .. " s:count('board'))\""))
        assert.equal(2 * #ALL * N .. "\tnil\t0\t0", got)
    end)

    it("keeps one counter exact under the lock, every interpreter at once",
       function()
        local N = 500
        local takers = ALL
        for _, lua in ipairs(ALL) do
            assert.equal("ok", run(lua, "exclusion.lua", dir .. " 0"), lua)
        end
        local cmds = {}
        for i = 1, 2 do
            for _, lua in ipairs(takers) do
                cmds[#cmds + 1] = "(LUA_PATH='" .. LUA_PATH .. "' " .. lua
                    .. " '" .. ROOT .. "/spec/every_lua/exclusion.lua' '"
                    .. dir .. "' " .. N .. " > '" .. dir .. "/x" .. i .. lua
                    .. ".out' 2>&1) &"
            end
        end
        sh("cd /tmp && " .. table.concat(cmds, " ") .. " wait")
        for i = 1, 2 do
            for _, lua in ipairs(takers) do
                assert.equal("ok", trim(sh("cat '" .. dir .. "/x" .. i .. lua
                                           .. ".out'")), lua)
            end
        end
        local got = trim(sh("cd /tmp && LUA_PATH='" .. LUA_PATH .. "' luajit "
            .. "-e \"print(require('resty.shmlock.shdict').open('el_excl', "
            .. "{ dir = '" .. dir .. "' }):get('counter'))\""))
        assert.equal(tostring(2 * #takers * N), got)
    end)

    it("makes each number key the same string under each interpreter, "
       .. "the dictionary's methods taking it so", function()
        for _, lua in ipairs(ALL) do
            local own = dir .. "/" .. lua
            sh("mkdir '" .. own .. "'")
            assert.equal("ok", run(lua, "keys.lua", "'" .. own .. "'"), lua)
        end
        -- a few thousand numbers, exact %.14g ties among them: every line
        -- as LuaJIT's
        local function lines(lua)
            local t = {}
            for l in run(lua, "keys.lua", "'" .. dir .. "' sweep")
                     :gmatch("[^\n]+") do
                t[#t + 1] = l
            end
            return t
        end
        local want = lines("luajit")
        assert.is_true(#want > 3000, #want .. " lines")
        for _, lua in ipairs(PUC) do
            local got = lines(lua)
            for i = 1, math.max(#want, #got) do
                if got[i] ~= want[i] then
                    assert.equal(want[i], got[i], lua .. ", line " .. i)
                end
            end
        end
    end)

    it("lets no process of another interpreter take a number key one "
       .. "holds: lock, shared hold, semaphore, dict value", function()
        for _, holder in ipairs(ALL) do
            -- the holder keeps its keys until its stdin, a FIFO, ends:
            -- no timing (timeout(1) only ends a holder that never does)
            local fifo = dir .. "/" .. holder .. ".go"
            sh("mkfifo '" .. fifo .. "'")
            local p = assert(io.popen("cd /tmp && LUA_PATH='" .. LUA_PATH
                .. "' timeout 120 " .. holder .. " '" .. ROOT
                .. "/spec/every_lua/keys.lua' '" .. dir .. "' hold " .. holder
                .. " < '" .. fifo .. "' 2>&1"))
            local go = assert(io.open(fifo, "w"))
            local first = p:read("*l")
            local pid = first and first:match("^held (%d+)$")
            local tries = {}
            if pid then
                for _, lua in ipairs(ALL) do
                    if lua ~= holder then
                        tries[lua] = run(lua, "keys.lua", "'" .. dir
                                         .. "' try " .. holder .. " " .. pid)
                    end
                end
            end
            go:close()
            local rest = trim(p:read("*a"))
            p:close()
            assert.truthy(pid, holder .. ": " .. tostring(first) .. rest)
            for lua, out in pairs(tries) do
                assert.equal("ok", out, lua .. " against " .. holder)
            end
            assert.equal("ok", rest, holder)
        end
    end)

    it("names what is missing and how to get it where no binding loads",
       function()
        for _, lua in ipairs(PUC) do
            local v = lua:sub(4)
            -- a copy of the modules without the build next to them, and
            -- nothing on package.cpath
            local copy = dir .. "/" .. lua
            sh("mkdir -p '" .. copy .. "' && cp -r '" .. ROOT .. "/lua' '"
               .. copy .. "/'")
            local out = sh("cd /tmp && LUA_PATH='" .. copy .. "/lua/?.lua' "
                           .. "LUA_CPATH='/nonexistent/?.so' " .. lua
                           .. " -e \"require 'resty.shmlock.shdict'\" 2>&1")
            assert.truthy(out:find("no binding for Lua " .. v, 1, true), out)
            assert.truthy(out:find("the FFI binding needs LuaJIT", 1, true),
                          out)
            assert.truthy(out:find("apt-get install liblua" .. v, 1, true),
                          out)
            assert.truthy(out:find("luarocks --lua-version=" .. v, 1, true),
                          out)
            -- this Lua's paths, not LuaRocks' default Lua's
            assert.truthy(out:find('eval "$(luarocks --lua-version=' .. v
                                   .. ' path)"', 1, true), out)
            assert.truthy(out:find("build/lua" .. v .. "/resty/shmlock/core.so"
                                   .. " (absent)", 1, true), out)
            assert.is_nil(out:find("module 'ffi' not found", 1, true), out)
        end
    end)
end)
