-- resty.shmlock.redis.wait (internal): the one loop in which a host's
-- Redis waiter (the holder of the host's turn: resty.shmlock.redis.host)
-- waits for a key held on another host, for the Redis lock and the Redis
-- semaphore alike.
--
-- With a connect function, the waiter subscribes to the key's release
-- channel (resty.shmlock.redis.subscriber) and tries again when a release
-- is published; between releases it tries every max_step seconds all the
-- same (the backstop: a lease that ran out publishes nothing, and a
-- message lost with a broken connection costs one backstop at most).  It
-- subscribes before its first try here, so a release between the caller's
-- own try and the subscription is not missed.  A subscription that breaks
-- is made again at once, followed by a try; one that cannot be made
-- leaves the waiter polling.
--
-- Without one (a connected client: no connection to subscribe on), it
-- polls as before the subscriber existed: it sleeps an exponentially
-- growing step (step, times ratio after each try, at most max_step),
-- each drawn from [step/2, step] so that waiters spread out, never below
-- MIN_SLEEP (a spin of Redis round trips; inside nginx, ngx.sleep would
-- truncate it to 0 and warn).
--
-- The deadline rule, for both: no wait goes past the deadline; when less
-- than MIN_SLEEP is left, the wait ends ("timeout") instead of a shorter
-- last wait.

local nginx = require "resty.shmlock.internal.nginx"
local clock = require "resty.shmlock.internal.clock"
local backoff = require "resty.shmlock.internal.backoff"
local random = require "resty.shmlock.internal.random"
local subscriber = require "resty.shmlock.redis.subscriber"

local max = math.max
local min = math.min
local now = clock.now
local next_step = backoff.next
local random_number = random.number
local subscribe = subscriber.subscribe
local listen = subscriber.listen
local MIN_SLEEP = backoff.MIN_SLEEP

local _M = {}

local ngx = nginx.api()
local sleep = ngx and ngx.sleep or clock.sleep

-- syntax: res, err = wait.redis(o, deadline, attempt, x, y, z)
-- o: { link, channel, step, ratio, max_step, yield }, the waiter's (yield:
-- do not try before a release or a backstop); attempt(x, y, z): a result
-- (the key is ours), false (still held) or nil, err.  Returns the result,
-- nil, "timeout", or nil and the attempt's error.
function _M.redis(o, deadline, attempt, x, y, z)
    local link = o.link
    local sub = link.connect and subscribe(link, o.channel)
    local res, err
    if sub and not o.yield then
        res, err = attempt(x, y, z)
        if res ~= false then
            subscriber.close(sub)
            return res, err
        end
    end
    local step = o.step
    local max_step = o.max_step
    while true do
        local left = deadline - now()
        if left < MIN_SLEEP then
            res, err = nil, "timeout"
            break
        end
        if sub then
            local _, broken = listen(sub, min(left, max_step))
            if broken then
                sub = subscribe(link, o.channel)
            end
        else
            local s = max(MIN_SLEEP, step * (0.5 + 0.5 * random_number()))
            if s > left then
                s = left
            end
            sleep(s)
            step = next_step(step, o.ratio, max_step)
        end
        res, err = attempt(x, y, z)
        if res ~= false then
            break
        end
    end
    if sub then
        subscriber.close(sub)
    end
    return res, err
end

return _M
