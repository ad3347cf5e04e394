-- helpers.lock_holder: child processes (harness.proc) that hold or wait
-- for a lock, for the specs that look at locks from outside
-- (spec/16-lock_inspect_spec.lua, spec/50-cli_spec.lua).

local proc = require "harness.proc"
local resty_lock = require "resty.shmlock"

local _M = {}

-- syntax: pid = lock_holder.hold(dict, key, exptime?)
-- A child that takes key in dict (a dict object or a zone name) and holds
-- it until it is killed (or its alarm rings); returns once it holds.
function _M.hold(dict, key, exptime)
    local held = proc.pipe()
    local pid = proc.spawn(function()
        held:close_read()
        local lock = assert(resty_lock:new(dict, { exptime = exptime or 30 }))
        assert(lock:lock(key) == 0, "the key was not free")
        held:notify()
        proc.sleep(60)
    end)
    held:close_write()
    local ok = held:await(5)
    held:close()
    assert(ok, "the holder child did not take the lock")
    return pid
end

-- syntax: pid = lock_holder.wait(dict, key, timeout)
-- A child that waits up to timeout seconds in lock(key); it exits 0 if it
-- got the lock, 1 on "timeout".
function _M.wait(dict, key, timeout)
    return proc.spawn(function()
        local lock = assert(resty_lock:new(dict, { timeout = timeout }))
        local elapsed, err = lock:lock(key)
        if elapsed then
            lock:unlock()
            return 0
        end
        assert(err == "timeout", err)
        return 1
    end)
end

return _M
