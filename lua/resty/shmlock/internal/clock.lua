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

local core = require "resty.shmlock.internal.core"
local nginx = require "resty.shmlock.internal.nginx"

local C = core.C                -- nil without the FFI
local pcall = pcall
local tonumber = tonumber

local _M = {}


-- syntax: us = clock.now_us()
-- monotonic microseconds, comparable between processes
local now_us = core.ffi and function()
    return tonumber(C.shmlock_now_us())
end or core.now_us
_M.now_us = now_us

-- syntax: ms = clock.now_ms()
-- the same clock in milliseconds
local now_ms = core.ffi and function()
    return tonumber(C.shmlock_now_ms())
end or core.now_ms
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
    if not nginx.api() or not core.ffi then
        return nil
    end
    local ffi = require "ffi"
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


-- syntax: clock.sleep(seconds)
-- Blocks the process (outside nginx only: inside, ngx.sleep), the whole
-- time even when signals interrupt it.
_M.sleep = core.sleep


return _M
