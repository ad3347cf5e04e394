-- resty.shmlock.internal.clock (internal): the one clock every module
-- measures time by, and a sleep for plain LuaJIT.
--
-- The clock is CLOCK_MONOTONIC, read by the C core: the clock zones
-- expire entries by, the same in every process on the host.
--
-- cached_ms: nginx (1.13+) keeps that very clock in its exported
-- ngx_current_msec, updated once per event-loop turn, so inside nginx a
-- lock can hand the core this reading instead of paying a clock_gettime
-- per lock; a reading stale by the handler's run time shortens the lock's
-- life by that much, as resty.lock's cached ngx.now() does.  cached_ms()
-- answers 0 ("read the clock yourself") outside nginx, or where the symbol
-- is missing or does not match our clock (an older nginx kept wall time in
-- it).

local ffi = require "ffi"
local C = require "resty.shmlock.lib"
local nginx = require "resty.shmlock.internal.nginx"

local ffi_new = ffi.new
local ffi_errno = ffi.errno
local floor = math.floor
local pcall = pcall
local tonumber = tonumber

local _M = {}


-- syntax: us = clock.now_us()
-- monotonic microseconds, comparable between processes
local function now_us()
    return tonumber(C.shmlock_now_us())
end
_M.now_us = now_us

-- syntax: ms = clock.now_ms()
-- the same clock in milliseconds
local function now_ms()
    return tonumber(C.shmlock_now_ms())
end
_M.now_ms = now_ms

-- syntax: s = clock.now()
-- the same clock in seconds
function _M.now()
    return now_us() / 1000000
end


local function zero()
    return 0
end

local function nginx_msec()
    if not nginx.api() then
        return nil
    end
    pcall(ffi.cdef, "uintptr_t ngx_current_msec;")
    local ok, v = pcall(function() return ffi.C.ngx_current_msec end)
    if not ok then
        return nil
    end
    -- the cached reading lags the clock, never leads it
    local lag = now_ms() - tonumber(v)
    if lag < 0 or lag > 1000 then
        return nil
    end
    return function()
        return ffi.C.ngx_current_msec
    end
end

-- syntax: ms = clock.cached_ms()
_M.cached_ms = nginx_msec() or zero


-- each declaration alone: another module may have declared some of them
for _, decl in ipairs {
    "struct timespec { long tv_sec; long tv_nsec; };",
    "int nanosleep(const struct timespec *req, struct timespec *rem);",
} do
    pcall(ffi.cdef, decl)
end

local EINTR = 4
local req = ffi_new("struct timespec")
local rem = ffi_new("struct timespec")

-- syntax: clock.sleep(seconds)
-- Blocks the process (outside nginx only: inside, ngx.sleep), the whole
-- time even when signals interrupt it.
function _M.sleep(seconds)
    local sec = floor(seconds)
    req.tv_sec = sec
    req.tv_nsec = floor((seconds - sec) * 1e9)
    while ffi.C.nanosleep(req, rem) ~= 0 do
        if ffi_errno() ~= EINTR then
            return
        end
        req.tv_sec = rem.tv_sec    -- interrupted by a signal: sleep the rest
        req.tv_nsec = rem.tv_nsec
    end
end


return _M
