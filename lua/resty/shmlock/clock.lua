-- resty.shmlock.clock: the zone clock as nginx has it cached.
--
-- Zones expire entries by CLOCK_MONOTONIC in milliseconds.  nginx (1.13+)
-- keeps that very clock in its exported ngx_current_msec, updated once per
-- event-loop turn, so inside nginx a lock can hand the core this reading
-- (shmlock_dict_store_at) instead of paying a clock_gettime per lock; a
-- reading stale by the handler's run time shortens the lock's life by that
-- much, as resty.lock's cached ngx.now() does.  cached_ms() answers 0
-- ("read the clock yourself") outside nginx, or where the symbol is
-- missing or does not match our clock (an older nginx kept wall time in it).

local ffi = require "ffi"
local C = require "resty.shmlock.lib"

local type = type
local pcall = pcall
local rawget = rawget
local tonumber = tonumber

local _M = {}

local function zero()
    return 0
end

local function nginx_msec()
    local ngx = rawget(_G, "ngx")
    if type(ngx) ~= "table" or type(ngx.get_phase) ~= "function" then
        return nil
    end
    pcall(ffi.cdef, "uintptr_t ngx_current_msec;")
    local ok, v = pcall(function() return ffi.C.ngx_current_msec end)
    if not ok then
        return nil
    end
    -- the cached reading lags the clock, never leads it
    local lag = tonumber(C.shmlock_now_ms()) - tonumber(v)
    if lag < 0 or lag > 1000 then
        return nil
    end
    return function()
        return ffi.C.ngx_current_msec
    end
end

_M.cached_ms = nginx_msec() or zero

return _M
