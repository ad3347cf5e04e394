-- helpers.readable_copy: what a process of another user (nobody) needs
-- from the checkout, copied where that user can read it.  The checkout
-- may sit where no other user can enter (a clone in /root, mode 0700 on
-- Debian, where root clones by default): a child run as nobody with the
-- checkout's paths finds no module and cannot exec bin/shmlock.  So a
-- spec that runs one points it at this copy, never at the checkout.
--
--     local copy = readable_copy.new()   -- in setup (or a test)
--     sh("setpriv ... env " .. copy.env .. " luajit script.lua")
--     copy:remove()                       -- in teardown
--
-- copy.dir          the directory (mode 0755, files a+r) in /tmp: not
--                   $TMPDIR (maybe private too), not /dev/shm (maybe
--                   noexec: no script exec'd, no library mapped from it)
-- copy.LUA_PATH     its modules (lua/), then the default path
-- copy.SHMLOCK_LIB  its copy of the library under test ($SHMLOCK_LIB, the
--                   test build by default; the ASan build in make
--                   test-asan); libshmlock.so is copied beside it too
-- copy.BIN          its bin/shmlock (which finds the copy's modules)
-- copy.env          LUA_PATH=... SHMLOCK_LIB=..., quoted, for `env` or a
--                   shell command line

local proc = require "harness.proc"
local checkout = require "helpers.checkout"

local _M = {}
local mt = {}
mt.__index = mt

local function q(s)
    return "'" .. s:gsub("'", "'\\''") .. "'"
end

local function run(cmd)
    local ok = os.execute(cmd)
    assert(ok == true or ok == 0, "readable_copy: failed: " .. cmd)
end

function _M.new()
    local root = checkout.ROOT
    local lib = os.getenv("SHMLOCK_LIB") or root .. "/libshmlock-test.so"
    local dir = checkout.trim(checkout.sh("mktemp -d /tmp/shmlock-spec-XXXXXX"))
    assert(dir:match("^/tmp/shmlock%-spec%-%w+$"), "readable_copy: mktemp")
    local libname = lib:match("[^/]+$")
    local cmds = {
        "mkdir " .. q(dir .. "/bin"),
        "cp -R " .. q(root .. "/lua") .. " " .. q(dir .. "/lua"),
        "cp " .. q(root .. "/bin/shmlock") .. " " .. q(dir .. "/bin/"),
        "cp " .. q(lib) .. " " .. q(dir .. "/" .. libname),
    }
    if libname ~= "libshmlock.so" then
        cmds[#cmds + 1] = "{ ! [ -e " .. q(root .. "/libshmlock.so")
                          .. " ] || cp " .. q(root .. "/libshmlock.so")
                          .. " " .. q(dir .. "/") .. "; }"
    end
    -- whatever the umask made of the copies: readable by all
    cmds[#cmds + 1] = "chmod -R a+rX " .. q(dir)
    cmds[#cmds + 1] = "chmod 0755 " .. q(dir)
    run(table.concat(cmds, " && "))
    local copy = setmetatable({
        dir = dir,
        LUA_PATH = dir .. "/lua/?.lua;" .. dir .. "/lua/?/init.lua;;",
        SHMLOCK_LIB = dir .. "/" .. libname,
        BIN = dir .. "/bin/shmlock",
    }, mt)
    copy.env = "LUA_PATH=" .. q(copy.LUA_PATH) .. " SHMLOCK_LIB="
               .. q(copy.SHMLOCK_LIB)
    return copy
end

function mt:remove()
    proc.rmtree(self.dir)
end

return _M
