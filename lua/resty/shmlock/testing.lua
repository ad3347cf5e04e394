-- resty.shmlock.testing: helpers for a user's specs (busted or any other
-- runner), under LuaJIT and PUC Lua alike (docs/testing.md).
--
--     local testing = require "resty.shmlock.testing"
--     setup(function() testing.zone_dir() end)        -- a fresh directory
--     teardown(function() testing.remove_zone_dir() end)
--     ...
--     local results = testing.processes(8, [[
--         local i, n = ...                -- this process's index, and n
--         ...                             -- starts with the 7 others
--     ]])
--
-- Zones outlive the processes that made them: a spec run that uses the
-- default directory finds the previous run's zones.  zone_dir() gives the
-- run a directory of its own, the default of every zone opened afterwards
-- in this process and in the processes it starts; remove_zone_dir()
-- removes it and restores the default.
--
-- processes() starts its children with io.popen/os.execute and the shell
-- (no FFI, no luaposix: the same under every interpreter), each the
-- interpreter running this, with this process's package.path and cpath.

local core = require "resty.shmlock.internal.core"
local shdict = require "resty.shmlock.shdict"
local version = require "resty.shmlock.version"

local type = type
local error = error
local tostring = tostring
local getenv = os.getenv
local concat = table.concat
local io_open = io.open
local io_popen = io.popen
local os_remove = os.remove

local _M = { _VERSION = version }

-- single quotes for the shell
local function quote(s)
    return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local function sh(cmd)
    local f = assert(io_popen(cmd .. " 2>&1", "r"))
    local out = f:read("*a")
    f:close()
    return (out:gsub("%s+$", ""))
end

local function read_file(path)
    local f = io_open(path, "rb")
    if not f then
        return nil
    end
    local s = f:read("*a")
    f:close()
    return s
end

local function write_file(path, s)
    local f = assert(io_open(path, "wb"))
    assert(f:write(s))
    f:close()
end

local made = {}            -- directories made by zone_dir(), in order
local saved = false        -- $SHMLOCK_DIR before the first zone_dir()

-- syntax: dir = testing.zone_dir(base?)
-- Makes a directory of its own under base (default /dev/shm), mode 0700,
-- and makes it $SHMLOCK_DIR, the default directory of the zones this
-- process opens from now on and of the processes it starts.  Raises if
-- the directory cannot be made.
function _M.zone_dir(base)
    base = base or "/dev/shm"
    if type(base) ~= "string" or base:find("[%z\n]") then
        error("base must be a directory name", 2)
    end
    local dir = sh("mktemp -d " .. quote(base .. "/shmlock-test.XXXXXX"))
    if dir:sub(1, 1) ~= "/" then
        error("resty.shmlock.testing: cannot make a directory in " .. base
              .. ": " .. dir, 2)
    end
    if saved == false then
        saved = getenv("SHMLOCK_DIR") or nil
    end
    local ok, errno = core.setenv("SHMLOCK_DIR", dir)
    if not ok then
        sh("rm -rf " .. quote(dir))
        error("resty.shmlock.testing: cannot set SHMLOCK_DIR: "
              .. core.sys_strerror(errno), 2)
    end
    made[#made + 1] = dir
    return dir
end

-- syntax: testing.remove_zone_dir()
-- Removes the directories zone_dir() made (their zones with them: a
-- process still using one keeps its mapping, later opens make new zones)
-- and restores $SHMLOCK_DIR as it was before.
function _M.remove_zone_dir()
    for i = #made, 1, -1 do
        sh("rm -rf " .. quote(made[i]))
        made[i] = nil
    end
    if saved ~= false then
        core.setenv("SHMLOCK_DIR", saved)
        saved = false
    end
end

-- the interpreter running this process
local function interpreter()
    local exe = sh("readlink /proc/" .. core.self_pid() .. "/exe")
    if exe:sub(1, 1) ~= "/" then
        error("resty.shmlock.testing: cannot tell the interpreter: " .. exe,
              3)
    end
    return exe
end

-- the first lines of every child: its arguments, then the start barrier
-- (a counter in a zone of the run's directory: each child adds itself and
-- waits for the n-th, at most `wait` seconds)
local PRELUDE = [[
local i, n, dir, wait = tonumber(arg[1]), tonumber(arg[2]), arg[3],
                        tonumber(arg[4])
if wait > 0 then
    local shdict = require "resty.shmlock.shdict"
    local clock = require "resty.shmlock.internal.clock"
    local z = assert(shdict.open("barrier", { dir = dir, size = "64k" }))
    assert(z:incr("ready", 1, 0))
    local deadline = clock.now() + wait
    while z:get("ready") < n do
        if clock.now() > deadline then
            error("resty.shmlock.testing: " .. z:get("ready") .. " of " .. n
                  .. " processes started within " .. wait .. " s")
        end
        clock.sleep(0.001)
    end
end
local chunk = assert(loadfile(arg[5]))
chunk(i, n)
]]

-- the most processes one processes() call starts (a count beyond any
-- test's, which would only exhaust the host's processes)
local MAX_PROCESSES = 1024

-- syntax: results = testing.processes(n, source, opts?)
-- Runs the Lua code `source` in n processes of this interpreter started
-- together: each receives (i, n) as `...` and starts its code once all n
-- have started (opts.together = false: at once).  Waits for all of them,
-- each for at most opts.timeout seconds (default 60; then it is killed).
-- results[i] = { ok = true when it exited with status 0, status = its
-- exit status, output = what it wrote to stdout and stderr }.  The
-- children inherit $SHMLOCK_DIR (zone_dir()) and this process's
-- package.path and package.cpath.
function _M.processes(n, source, opts)
    if type(n) ~= "number" or not (n >= 1 and n <= MAX_PROCESSES)
       or n % 1 ~= 0
    then
        error("n must be an integer from 1 to " .. MAX_PROCESSES, 2)
    end
    if type(source) ~= "string" then
        error("source must be a string of Lua code", 2)
    end
    opts = opts or {}
    if type(opts) ~= "table" then
        error("opts must be a table", 2)
    end
    local timeout = opts.timeout or 60
    if type(timeout) ~= "number" or not (timeout > 0) then -- luacheck: ignore 581 (NaN)
        error("opts.timeout must be a number > 0", 2)
    end
    local wait = opts.together == false and 0 or timeout / 2
    local lua = interpreter()
    local work = sh("mktemp -d /dev/shm/shmlock-procs.XXXXXX")
    if work:sub(1, 1) ~= "/" then
        error("resty.shmlock.testing: cannot make a directory: " .. work, 2)
    end
    write_file(work .. "/prelude.lua", PRELUDE)
    write_file(work .. "/child.lua", source)

    local env = "LUA_PATH=" .. quote(package.path) .. " LUA_CPATH="
                .. quote(package.cpath) .. " "
    local cmds = {}
    for i = 1, n do
        local out = work .. "/" .. i
        cmds[#cmds + 1] = "( " .. env .. "timeout -s KILL " .. timeout .. " "
            .. quote(lua) .. " " .. quote(work .. "/prelude.lua") .. " "
            .. i .. " " .. n .. " " .. quote(work) .. " " .. wait .. " "
            .. quote(work .. "/child.lua") .. " > " .. quote(out .. ".out")
            .. " 2>&1; echo $? > " .. quote(out .. ".rc") .. " ) &"
    end
    sh(concat(cmds, " ") .. " wait")

    local results = {}
    for i = 1, n do
        local out = work .. "/" .. i
        local status = tonumber(read_file(out .. ".rc") or "")
        results[i] = { ok = status == 0, status = status,
                       output = read_file(out .. ".out") or "" }
    end
    shdict.destroy("barrier", { dir = work })
    for _, f in ipairs { "prelude.lua", "child.lua" } do
        os_remove(work .. "/" .. f)
    end
    sh("rm -rf " .. quote(work))
    return results
end

return _M
