-- resty.shmlock.redis.wait (internal): the one loop in which a host's
-- Redis waiter (the holder of the host's turn: resty.shmlock.redis.host)
-- waits for a key held on another host, for the Redis lock and the Redis
-- semaphore alike.
--
-- With a connect function, the waiter's failed try marked it in the key's
-- wake stream and answered an id (resty.shmlock.redis.wake): it waits for
-- an entry after that id (XREAD BLOCK: a release), and tries again when
-- one comes; between releases it tries every max_step seconds all the
-- same (the backstop: a lease that ran out wakes nobody, nor does a
-- release that found the stream gone).  Redis ends each of those waits
-- (a nil reply): nothing waits on a socket's timeout, so nothing is
-- logged inside nginx.  A wait that gets no answer (a connection killed,
-- a restart, Redis stopped) is followed by a try at once, which marks the
-- waiter anew; after two such in a row the waiter polls as below for the
-- rest of the wait, and so it does where Redis has no streams.
--
-- Without one (a connected client: no connection of the library's to
-- wait on), it polls as before wake-ups existed: it sleeps an
-- exponentially growing step (step, times ratio after each try, at most
-- max_step), each drawn from [step/2, step] so that waiters spread out,
-- never below MIN_SLEEP (a spin of Redis round trips; inside nginx,
-- ngx.sleep would truncate it to 0 and warn).
--
-- The deadline rule, for both: no wait goes past the deadline; when less
-- than MIN_SLEEP is left, the wait ends ("timeout") instead of a shorter
-- last wait.

local nginx = require "resty.shmlock.internal.nginx"
local clock = require "resty.shmlock.internal.clock"
local backoff = require "resty.shmlock.internal.backoff"
local random = require "resty.shmlock.internal.random"
local wake = require "resty.shmlock.redis.wake"

local max = math.max
local min = math.min
local now = clock.now
local next_step = backoff.next
local random_number = random.number
local wake_wait = wake.wait
local MIN_SLEEP = backoff.MIN_SLEEP

local _M = {}

local ngx = nginx.api()
local sleep = ngx and ngx.sleep or clock.sleep

-- syntax: res, err = wait.redis(o, deadline, attempt, x, y, z)
-- o: { link, wake, since, step, ratio, max_step }, the waiter's: wake,
-- the key's wake stream; since, the id the caller's failed try answered
-- (nil: none, or the caller did not try: the waiter polls).  attempt(x, y, z, wake, true)
-- (true: mark the waiter) answers a result (the key is ours), false and
-- the id to wait after (nil: none) when the key is still held, or nil,
-- err.  Returns the result, nil, "timeout", or nil and the attempt's
-- error.
function _M.redis(o, deadline, attempt, x, y, z)
    local link, w = o.link, o.wake
    local since = o.since
    local step = o.step
    local max_step = o.max_step
    local unanswered = 0
    local res, err
    while true do
        local left = deadline - now()
        if left < MIN_SLEEP then
            return nil, "timeout"
        end
        if since and unanswered < 2 then
            local woken = wake_wait(link, w, since, min(left, max_step))
            if woken == nil then
                unanswered = unanswered + 1
            else
                unanswered = 0
            end
        else
            local s = max(MIN_SLEEP, step * (0.5 + 0.5 * random_number()))
            if s > left then
                s = left
            end
            sleep(s)
            step = next_step(step, o.ratio, max_step)
        end
        res, err = attempt(x, y, z, w, true)
        if res ~= false then
            return res, err
        end
        since = err
    end
end

return _M
