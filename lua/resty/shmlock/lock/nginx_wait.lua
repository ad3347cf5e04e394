-- resty.shmlock.lock.nginx_wait (internal): how resty.shmlock waits for a
-- held key inside nginx.  Every entry takes the timeout of the wait as an
-- argument (the lock object's, or a per-call one).
--
-- Where the phase may yield (sleep):
--
-- 1. resty.lock's steps, exactly: ngx.sleep(step), try again, step =
--    min(max(0.001, step * ratio), timeout left, max_step); elapsed is the
--    sum of the steps.  Short waits (the ones resty.lock's own tests pin:
--    0.127 s behind a 0.1 s holder with the defaults) are resty.lock's to
--    the digit.
-- 2. Queued, once the steps add up to QUEUE_AFTER (0.2 s; with the default
--    steps, at 0.255 s): no more growing steps, which let fresh arrivals
--    barge past a waiter asleep for up to max_step, again and again (a
--    waiter could starve to its timeout).  A queued waiter looks at the
--    key every 1 or 2 ms (drawn at random at each pause, so that waiters
--    do not poll in lockstep; nginx's timers count whole milliseconds),
--    and on a zone marks it as the standalone lock's starving waiters do
--    (resty.shmlock.lock.zone: "Starvation mode"): the oldest queued
--    waiter's mark makes the lock's release hand the key straight to it,
--    and a marked lock is never free, so nobody barges in.  Its mark
--    carries its deadline: a waiter that times out withdraws it, and one
--    that died (a killed worker) leaves a mark that goes stale at that
--    deadline.  Queued waiters of one worker wait on a semaphore of the
--    key (ngx.semaphore, one per key per worker), which that worker's
--    unlock() posts: a handoff to a waiter of the releasing worker is
--    taken at the next turn of its event loop, not at the next poll.
--    elapsed = the steps slept + the time measured in the queue.
--
--    The bound, on a zone, for a waiter that reaches the queue:
--
--        worst wait <= Q + (W + 1) * (H + L)
--
--    Q: the time its steps take to add up to QUEUE_AFTER (at most
--    QUEUE_AFTER + max_step, plus the timers' lateness); W: the waiters
--    queued on the key before it; H: the longest hold; L: the time a
--    handed-to waiter needs to notice (a poll, at most 2 ms plus timer
--    lateness, in another worker; an event-loop turn in the same one).
--
--    On an ngx.shared dict there is no compare-and-swap, so no mark and
--    no handoff: queued waiters poll every 1-2 ms and are woken by their
--    own worker's releases, but a fresh arrival can still take the key
--    first; no bound.
--
-- Where the phase cannot yield (block; only with opts.blocking_timeout):
-- the worker itself waits, up to the timeout: a few tries at once (a
-- short hold ends before a sleep would), then on a zone the standalone
-- lock's wait (resty.shmlock.lock.zone.block: a futex on the key's wait
-- word, woken by the release, starvation mode included), on an
-- ngx.shared dict nanosleep(2) polls of 0.1 ms growing to 1 ms.  Nothing
-- else runs in that worker meanwhile.

local nginx = require "resty.shmlock.internal.nginx"
local clock = require "resty.shmlock.internal.clock"
local random = require "resty.shmlock.internal.random"
local backoff = require "resty.shmlock.internal.backoff"
local zone_backend = require "resty.shmlock.lock.zone"

local floor = math.floor
local min = math.min
local max = math.max
local pcall = pcall
local require = require
local now_us = clock.now_us
local nanosleep = clock.sleep
local rand = random.number
local next_step = backoff.next
local MIN_SLEEP = backoff.MIN_SLEEP
local ACQUIRED = zone_backend.ACQUIRED
local MARKED = zone_backend.MARKED
local FAILED = zone_backend.FAILED

local ngx = nginx.api()
local ngx_sleep = ngx and ngx.sleep

local _M = {
    -- seconds of resty.lock's steps after which a waiter queues
    QUEUE_AFTER = 0.2,
}

-- a queued waiter asks whether the holder's process lives at most this
-- often (a /proc read: not at every 1 ms poll)
local CHECK_EVERY_US = 100000

-- tries at once before a blocking wait sleeps
local SPINS = 20

-- the first and the longest pause of a blocking poll (ngx.shared dicts)
local POLL_FIRST, POLL_MAX = 0.0001, 0.001

-- this worker's queues: key -> { sema = semaphore, n = waiters }
local queues = {}

-- ngx.semaphore's new, loaded at the first queued wait (a stand-in ngx, as
-- in the specs, has none: its waiters only poll); false when unavailable
local sema_new


local function semaphore()
    if sema_new == nil then
        local ok, mod = pcall(require, "ngx.semaphore")
        sema_new = ok and mod.new or false
        if not ok and ngx.log then
            ngx.log(ngx.WARN, "resty.shmlock: ngx.semaphore is not "
                    .. "available (", mod, "): queued lock waiters will "
                    .. "only poll")
        end
    end
    return sema_new
end


local function join(key)
    local q = queues[key]
    if q then
        q.n = q.n + 1
        return q
    end
    local new = semaphore()
    if not new then
        return nil
    end
    local sema = new(0)
    if not sema then
        return nil
    end
    q = { sema = sema, n = 1 }
    queues[key] = q
    return q
end


local function leave(key, q)
    if q then
        q.n = q.n - 1
        if q.n == 0 then
            queues[key] = nil
        end
    end
end


-- syntax: nginx_wait.released(key)
-- This worker released key: wake its queued waiters on it (they look at
-- the key again; the one the lock was handed to, if any, runs with it).
function _M.released(key)
    local q = queues[key]
    if q then
        local sema = q.sema
        local waiting = -sema:count()
        if waiting > 0 then
            sema:post(waiting)
        end
    end
end


-- syntax: n = nginx_wait.queued(key)
-- How many waiters of this worker are queued on key.
function _M.queued(key)
    local q = queues[key]
    return q and q.n or 0
end


-- the queued part of a wait: up to `left` seconds; since: the wait's start
-- (ms, zone clock); elapsed counts from `spent` (the steps slept)
local function queue(backend, store, key, klen, tok, expiry, left, since,
                     spent)
    local start = now_us()
    local deadline = start + left * 1000000
    local till = floor(deadline / 1000)
    local next_check = start + CHECK_EVERY_US
    local withdraw = backend.withdraw
    local marked = false
    local q = join(key)

    while true do
        local ok, err = backend.add(store, key, klen, tok, #tok, expiry)
        if ok then
            leave(key, q)
            return spent + (now_us() - start) / 1000000
        end
        if ok == nil then
            leave(key, q)
            return nil, err
        end

        local now = now_us()
        local check = now >= next_check
        if check then
            next_check = now + CHECK_EVERY_US
        end
        local got
        got, err = backend.look(store, key, klen, tok, expiry, check, since,
                                till)
        if got == ACQUIRED then
            leave(key, q)
            return spent + (now_us() - start) / 1000000
        end
        if got == FAILED then
            -- a mark of ours goes stale at our deadline
            leave(key, q)
            return nil, err
        end
        if got == MARKED then
            marked = true
        end

        now = now_us()
        if now >= deadline then
            leave(key, q)
            if marked and withdraw and withdraw(store, key, klen, tok) then
                return spent + (now_us() - start) / 1000000
            end
            return nil, "timeout"
        end

        -- 1 or 2 ms (nginx's timers count whole milliseconds); never below
        -- 1 ms, so the last pause may pass the deadline by less than that
        local pause = rand() < 0.5 and 0.001 or 0.002
        pause = max(MIN_SLEEP, min(pause, (deadline - now) / 1000000))
        if q then
            q.sema:wait(pause)
        else
            ngx_sleep(pause)
        end
    end
end


-- syntax: elapsed, err = nginx_wait.sleep(backend, store, key, klen, tok,
--                                         expiry, timeout, step, ratio,
--                                         max_step)
-- The wait where the phase may yield, after add found the key held (see
-- the top of this file).  tok: a Lua string.  elapsed: the steps' sum,
-- plus the time measured in the queue; nil, "timeout"; nil and the
-- store's error.
function _M.sleep(backend, store, key, klen, tok, expiry, timeout, step,
                  ratio, max_step)
    local since = floor(now_us() / 1000)
    local elapsed = 0
    step = min(max(step, MIN_SLEEP), timeout)

    -- ngx.sleep counts whole milliseconds: a shorter sleep is ngx.sleep(0),
    -- which nginx without the delayed-events patch logs as a warning on
    -- every call.  With less than MIN_SLEEP left, the wait is over
    -- ("timeout" up to 1 ms early, as the Redis lock's; 1e-9 absorbs the
    -- rounding of the subtractions).
    while timeout > 0 and step >= MIN_SLEEP - 1e-9 do
        ngx_sleep(step)
        elapsed = elapsed + step
        timeout = timeout - step

        local ok, err = backend.add(store, key, klen, tok, #tok, expiry)
        if ok then
            return elapsed
        end
        if ok == nil then
            return nil, err
        end
        local got
        got, err = backend.look(store, key, klen, tok, expiry, true)
        if got == ACQUIRED then
            return elapsed
        end
        if got == FAILED then
            return nil, err
        end

        if timeout <= 0 then
            break
        end
        if elapsed >= _M.QUEUE_AFTER then
            return queue(backend, store, key, klen, tok, expiry, timeout,
                         since, elapsed)
        end
        step = min(next_step(step, ratio, max_step), timeout)
    end
    return nil, "timeout"
end


-- nanosleep(2) polls of an ngx.shared dict, up to `left` seconds
local function poll(backend, store, key, klen, tok, expiry, left)
    local start = now_us()
    local deadline = start + left * 1000000
    local pause = POLL_FIRST
    while true do
        local now = now_us()
        if now >= deadline then
            return nil, "timeout"
        end
        nanosleep(min(pause, (deadline - now) / 1000000))
        pause = min(pause * 2, POLL_MAX)
        local ok, err = backend.add(store, key, klen, tok, #tok, expiry)
        if ok then
            return (now_us() - start) / 1000000
        end
        if ok == nil then
            return nil, err
        end
    end
end


-- syntax: elapsed, err = nginx_wait.block(backend, store, key, klen, tok,
--                                         expiry, timeout, step, ratio,
--                                         max_step)
-- The wait where the phase cannot yield: blocks the worker up to timeout
-- seconds (see the top of this file).  elapsed is measured; nil,
-- "timeout"; nil and the store's error.
function _M.block(backend, store, key, klen, tok, expiry, timeout, step,
                  ratio, max_step)
    local start = now_us()
    for _ = 1, SPINS do
        local ok, err = backend.add(store, key, klen, tok, #tok, expiry)
        if ok then
            return (now_us() - start) / 1000000
        end
        if ok == nil then
            return nil, err
        end
    end

    local spent = (now_us() - start) / 1000000
    local left = timeout - spent
    if left <= 0 then
        return nil, "timeout"
    end
    local elapsed, err
    if backend.block then
        elapsed, err = backend.block(store, key, klen, tok, expiry, left,
                                     step, ratio, max_step)
    else
        elapsed, err = poll(backend, store, key, klen, tok, expiry, left)
    end
    -- the worker's cached time stood still while it was blocked
    if ngx and ngx.update_time then
        ngx.update_time()
    end
    if not elapsed then
        return nil, err
    end
    return spent + elapsed, nil
end


return _M
