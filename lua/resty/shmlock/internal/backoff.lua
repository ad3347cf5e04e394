-- resty.shmlock.internal.backoff (internal): how every lock waits, step
-- by step, for a key someone else holds (resty.lock's steps: step, times
-- ratio after each try, at most max_step).
--
-- No wait is shorter than MIN_SLEEP, whatever step and max_step say:
-- below 1 ms, ngx.sleep does not sleep at all (it only yields, and nginx
-- without the delayed-events patch logs a warning) and a waiter would
-- spin; a Redis waiter would spin round trips.  Waits inside nginx and on
-- Redis end with "timeout" when less than MIN_SLEEP is left; outside
-- nginx the futex wait's last sleep may be cut to the deadline (a futex
-- waiter is woken by the release anyway).

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
