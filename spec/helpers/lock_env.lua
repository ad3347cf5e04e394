-- Test environment for the resty.shmlock specs: child processes (luajit
-- workers), signals, the environment, sleeping, a monotonic clock.
-- Temporary directories are helpers.fixture's (harness.proc's tmpdir).

local ffi = require "ffi"
local C = require "resty.shmlock.lib"
local clock = require "resty.shmlock.internal.clock"
local checkout = require "helpers.checkout"

ffi.cdef[[
int shmlock_spec_kill(int pid, int sig) __asm__("kill");
int shmlock_spec_usleep(unsigned int usec) __asm__("usleep");
struct shmlock_spec_rusage {
    long utime_sec, utime_usec, stime_sec, stime_usec;
    long rest[14];
};
int shmlock_spec_getrusage(int who, struct shmlock_spec_rusage *usage)
    __asm__("getrusage");
]]

local _M = {}

_M.now_us = clock.now_us

function _M.now()
    return clock.now_us() / 1e6
end

function _M.sleep(seconds)
    ffi.C.shmlock_spec_usleep(seconds * 1e6)
end

local usage = ffi.new("struct shmlock_spec_rusage")

-- CPU seconds (user + system) this process has used so far
function _M.cpu()
    assert(ffi.C.shmlock_spec_getrusage(0, usage) == 0)     -- RUSAGE_SELF
    return tonumber(usage.utime_sec + usage.stime_sec)
           + tonumber(usage.utime_usec + usage.stime_usec) / 1e6
end

function _M.exists(path)
    local f = io.open(path, "rb")
    if f then
        f:close()
        return true
    end
    return false
end

-- through the library's binding, which then reads $SHMLOCK_DIR again
function _M.setenv(name, value)
    assert(require("resty.shmlock.internal.core").setenv(name, value))
end

function _M.kill(pid, sig)
    return ffi.C.shmlock_spec_kill(pid, sig or 9)
end

function _M.pid()
    return C.shmlock_self_pid()
end

-- A pid that belongs to no process.
function _M.dead_pid()
    local f = io.popen("sh -c 'echo $$'")
    local pid = tonumber(f:read("*l"))
    f:close()
    return pid
end

-- an owner token as the C library makes them (shmlock_token_next)
function _M.token(pid, start, serial)
    return ("%d:%d:%016x"):format(pid, start, serial)
end

local path = "LUA_PATH='" .. checkout.LUA_PATH .. "' "

-- Starts spec/helpers/lock_worker.lua; returns a handle to :read("*a").
function _M.worker(mode, args)
    local parts = {}
    for k, v in pairs(args) do
        parts[#parts + 1] = k .. "=" .. tostring(v)
    end
    return io.popen(path .. "exec luajit spec/helpers/lock_worker.lua " .. mode
                    .. " " .. table.concat(parts, " "))
end

-- "a=1 b=x" -> { a = 1, b = "x" }; nil, line for an error line
function _M.parse(line)
    if not line or line:match("^error") then
        return nil, line
    end
    local t = {}
    for k, v in line:gmatch("([%w_]+)=(%S+)") do
        t[k] = tonumber(v) or v
    end
    return t
end

-- Waits (at most `secs`, 30 by default: a deadline, not a margin) until
-- fn() returns a true value; returns it.
function _M.wait_for(fn, secs)
    local deadline = _M.now() + (secs or 30)
    repeat
        local v = fn()
        if v then
            return v
        end
        _M.sleep(0.001)
    until _M.now() > deadline
    return nil
end

return _M
