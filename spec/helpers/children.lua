-- helpers.children: child processes the specs share (harness.proc's).
--
--     local children = require "helpers.children"
--     children.expect_clean_exits(pids, 60)   -- each exited 0, or the
--                                             -- test fails naming it
--     local pid = children.mutex_holder(dict, go)
--     local pid = children.sleeper_with_pid(pid)  -- root: a pid reused

local proc = require "harness.proc"
local lib = require "helpers.test_hooks"
local luassert = require "luassert"

local _M = {}

-- syntax: results = children.expect_clean_exits(pids, timeout?)
-- Waits for every child (timeout seconds, 60 by default); each must have
-- exited 0.  Returns proc.wait_all's results.
function _M.expect_clean_exits(pids, timeout)
    local res = proc.wait_all(pids, timeout or 60)
    for i, r in ipairs(res) do
        luassert.same({ how = "exit", code = 0, msg = "" },
                      { how = r.how, code = r.code, msg = r.msg },
                      "child " .. i .. " (pid " .. pids[i] .. ")")
    end
    return res
end

-- syntax: pid = children.mutex_holder(dict, go?)
-- A child that takes every shard's mutex of dict's zone (a test hook of
-- libshmlock-test.so), says so, then holds them until a byte comes
-- through the pipe `go` (then it releases them and exits 0) or until it
-- is killed (after 20 s it exits 4).  Returns once the mutexes are held.
function _M.mutex_holder(dict, go)
    local held = proc.pipe()
    local pid = proc.spawn(function()
        held:close_read()
        lib.shmlock_test_mutex_lock(dict._zone)
        held:notify()
        if go and go:await(20) then
            lib.shmlock_test_mutex_unlock(dict._zone)
            return 0
        end
        proc.sleep(20)
        return 4
    end)
    held:close_write()
    luassert.is_true(held:await(5), "the holder never took the mutex")
    held:close()
    return pid
end

local NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"

-- syntax: child = children.sleeper_with_pid(pid)
-- A child that sleeps 20 s and got exactly `pid` (through ns_last_pid:
-- root only), for a test of pid reuse; nil when ns_last_pid cannot be
-- written or other processes kept taking the pid first.
function _M.sleeper_with_pid(pid)
    for _ = 1, 50 do
        local f = io.open(NS_LAST_PID, "w")
        if not f then
            return nil
        end
        f:write(tostring(pid - 1))
        f:close()
        local child = proc.spawn(function() proc.sleep(20) end)
        if child == pid then
            return child
        end
        proc.kill(child, proc.SIGKILL)
        proc.wait(child, 5)
    end
    return nil
end

return _M
