-- resty.shmlock.options: resty.lock's options, checked and clamped in one
-- place for every lock flavour (zones, ngx.shared dicts, Redis), and the
-- limits every time given in seconds obeys (locks, dictionaries, caches).
--
-- Defaults: exptime 30, timeout 5, step 0.001, ratio 2, max_step 0.5 (s).
-- Clamping, as resty.lock: a given timeout is at most exptime, and a given
-- step at most the timeout.  Misuse raises at the caller of new():
-- "opts must be a table", "opts.<name> must be a number" (NaN included),
-- "opts.<name> must be >= 0" (exptime, timeout), "opts.<name> must be > 0"
-- (step, ratio, max_step: zero would never back off, or loop for ever),
-- "opts.<name> must be <= 1e12" (infinity included: see MAX_SECONDS; the
-- same bound for ratio, which is no time, keeps one rule for all five).
--
-- Waiters never sleep less than MIN_SLEEP at a time, whatever step and
-- max_step say (but the last sleep before the deadline may be shorter).

local type = type
local error = error
local min = math.min
local floor = math.floor

local _M = {}

-- The longest time, in seconds, any exptime, ttl, timeout or step may
-- give: 1e12 s, about 31,700 years.  Its milliseconds (1e15) stay below
-- the zone's own expiry limit (2^50 ms) and are exact in a double and an
-- int64_t; infinity and larger values would reach the C core as garbage.
local MAX_SECONDS = 1e12
_M.MAX_SECONDS = MAX_SECONDS
_M.MAX_TEXT = "1e12"            -- as the error messages spell it

-- The shortest sleep of a waiter, in seconds: below 1 ms, ngx.sleep does
-- not sleep at all (it only yields), and a waiter would spin.
_M.MIN_SLEEP = 0.001

local POSITIVE = { step = true, ratio = true, max_step = true }

-- level 4: number() <- lock() <- new() <- the caller of new()
local function number(opts, name)
    local v = opts[name]
    if v == nil then
        return nil
    end
    if type(v) ~= "number" or v ~= v then
        error("opts." .. name .. " must be a number", 4)
    end
    if POSITIVE[name] then
        if v <= 0 then
            error("opts." .. name .. " must be > 0", 4)
        end
    elseif v < 0 then
        error("opts." .. name .. " must be >= 0", 4)
    end
    if v > MAX_SECONDS then
        error("opts." .. name .. " must be <= " .. _M.MAX_TEXT, 4)
    end
    return v
end

-- syntax: exptime, timeout, step, ratio, max_step = options.lock(opts)
-- To be called from a lock constructor (errors point at its caller).
function _M.lock(opts)
    local exptime, timeout, step, ratio, max_step
    if opts ~= nil then
        if type(opts) ~= "table" then
            error("opts must be a table", 3)
        end
        exptime = number(opts, "exptime")
        timeout = number(opts, "timeout")
        step = number(opts, "step")
        ratio = number(opts, "ratio")
        max_step = number(opts, "max_step")
    end

    exptime = exptime or 30
    if timeout then
        timeout = min(timeout, exptime)
        if step then
            step = min(step, timeout)
        end
    end
    return exptime, timeout or 5, step or 0.001, ratio or 2, max_step or 0.5
end

-- syntax: ok = options.seconds_ok(v)
-- Whether v is a time in seconds we accept: a number from 0 to
-- MAX_SECONDS (not NaN, not infinite).
function _M.seconds_ok(v)
    return type(v) == "number" and v >= 0 and v <= MAX_SECONDS
end

-- syntax: ms = options.ms(seconds)
-- An expiry in seconds (checked: seconds_ok) as whole milliseconds,
-- rounded to the nearest; a positive one is never rounded down to 0
-- ("never expires").
function _M.ms(seconds)
    local ms = floor(seconds * 1000 + 0.5)
    if ms == 0 and seconds > 0 then
        return 1
    end
    return ms
end

-- syntax: seconds = options.at_least_ms(seconds)
-- An expiry for a store that truncates seconds to whole milliseconds
-- (ngx.shared.DICT): a positive time below 1 ms becomes 1 ms, so that it
-- cannot turn into 0, "never expires".
function _M.at_least_ms(seconds)
    if seconds > 0 and seconds < 0.001 then
        return 0.001
    end
    return seconds
end

return _M
