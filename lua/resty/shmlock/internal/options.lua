-- resty.shmlock.internal.options (internal): resty.lock's options,
-- checked and clamped in one place for every lock flavour (zones,
-- ngx.shared dicts, Redis, the cache's lock_opts), and the limits every
-- time given in seconds obeys (locks, dictionaries, caches).
--
-- Defaults: exptime 30, timeout 5, step 0.001, ratio 2, max_step 0.5 (s);
-- beyond resty.lock, blocking_timeout 0 (s; not clamped: the lock takes
-- the smaller of it and the timeout).
-- Clamping, as resty.lock: a given timeout is at most exptime (unless
-- exptime is 0: a lock that never expires does not cut its waiters'
-- timeout to nothing), and a given step at most the timeout.  Misuse raises at the line of the caller of
-- the public function: "<name> must be a table", "<name>.<option> must be
-- a number" (NaN included), "... must be >= 0" (exptime, timeout,
-- blocking_timeout), "... must be > 0" (step, ratio, max_step: zero would
-- never back off, or loop for ever), "... must be <= 1e12" (infinity
-- included: see MAX_SECONDS; the same bound for ratio, which is no time,
-- keeps one rule for all six).  <name> is "opts" for a lock's new(),
-- "opts.lock_opts" for the cache's.

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

local POSITIVE = { step = true, ratio = true, max_step = true }

-- v, checked as `label` (a number, not NaN, >= 0 or > 0 when positive, at
-- most MAX_SECONDS); errors at `level` counted from check()'s caller
local function check(v, label, positive, level)
    if type(v) ~= "number" or v ~= v then
        error(label .. " must be a number", level + 1)
    end
    if positive then
        if v <= 0 then
            error(label .. " must be > 0", level + 1)
        end
    elseif v < 0 then
        error(label .. " must be >= 0", level + 1)
    end
    if v > MAX_SECONDS then
        error(label .. " must be <= " .. _M.MAX_TEXT, level + 1)
    end
    return v
end

-- a timeout at most exptime, as resty.lock's; exptime 0 (never expires)
-- leaves it as given (resty.lock would make it 0: a waiter asking for
-- 3 s would give up at once)
local function clamp(timeout, exptime)
    if exptime == 0 then
        return timeout
    end
    return min(timeout, exptime)
end

-- opts[field], checked; errors at `level` counted from number()'s caller
local function number(opts, name, field, level)
    local v = opts[field]
    if v == nil then
        return nil
    end
    -- not a tail call: error levels count this frame
    v = check(v, name .. "." .. field, POSITIVE[field], level + 1)
    return v
end

-- syntax: exptime, timeout, step, ratio, max_step, blocking_timeout =
--             options.lock(opts, name, level)
-- opts: the table the caller was given (or nil), known to it as `name`;
-- level: where misuse points, as error() counts from options.lock's
-- caller (2: the caller of the function calling options.lock).
function _M.lock(opts, name, level)
    local exptime, timeout, step, ratio, max_step, blocking
    if opts ~= nil then
        if type(opts) ~= "table" then
            error(name .. " must be a table", level + 1)
        end
        exptime = number(opts, name, "exptime", level + 1)
        timeout = number(opts, name, "timeout", level + 1)
        step = number(opts, name, "step", level + 1)
        ratio = number(opts, name, "ratio", level + 1)
        max_step = number(opts, name, "max_step", level + 1)
        blocking = number(opts, name, "blocking_timeout", level + 1)
    end

    exptime = exptime or 30
    if timeout then
        timeout = clamp(timeout, exptime)
        if step then
            step = min(step, timeout)
        end
    end
    return exptime, timeout or 5, step or 0.001, ratio or 2, max_step or 0.5,
           blocking or 0
end

-- syntax: timeout = options.timeout(v, exptime, level)
-- The timeout argument of one lock() call (not nil), checked and clamped
-- as a given opts.timeout is: a number from 0 to MAX_SECONDS, at most the
-- lock's exptime unless that is 0.  Misuse raises "timeout must be a number" (NaN
-- included), "timeout must be >= 0", "timeout must be <= 1e12"; level as
-- options.lock's.
function _M.timeout(v, exptime, level)
    return clamp(check(v, "timeout", false, level + 1), exptime)
end

-- syntax: v = options.seconds(v, label, level, positive?)
-- A time in seconds (not nil) given as `label` (e.g. "opts.fence_ttl"),
-- checked: "<label> must be a number" (NaN included), "... must be >= 0"
-- ("... must be > 0" when positive), "... must be <= 1e12"; level as
-- options.lock's.
function _M.seconds(v, label, level, positive)
    v = check(v, label, positive, level + 1)
    return v
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
