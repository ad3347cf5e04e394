-- resty.shmlock.internal.backoff (internal): how every lock waits, step
-- by step, for a key someone else holds (resty.lock's steps: step, times
-- ratio after each try, at most max_step).
--
-- No wait is shorter than MIN_SLEEP, whatever step and max_step say (the
-- last one before a deadline excepted): below 1 ms, ngx.sleep does not
-- sleep at all (it only yields) and a waiter would spin; a futex waiter is
-- woken by the release anyway; a Redis waiter would spin round trips.

local min = math.min
local max = math.max

local MIN_SLEEP = 0.001

local _M = { MIN_SLEEP = MIN_SLEEP }

-- syntax: step = backoff.next(step, ratio, max_step)
-- The step after `step`: step * ratio, at most max_step, at least
-- MIN_SLEEP.
function _M.next(step, ratio, max_step)
    return max(MIN_SLEEP, min(step * ratio, max_step))
end

return _M
