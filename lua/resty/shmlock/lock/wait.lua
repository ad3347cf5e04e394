-- resty.shmlock.lock.wait (internal): every wait, in one place, and the
-- choice of where to wait (wait.wait: outside nginx the backend's own
-- wait, one call of the C core; inside nginx, by the phase).  The lock's
-- wait for a held key, the cache's wait for a key being loaded
-- (resty.shmlock.cache), the semaphore's wait for a permit
-- (resty.shmlock.semaphore: a backend of its own, whose waiters are kept
-- apart from the lock's by backend.space; a queued waiter marks the
-- semaphore's head when its turn is next, and the permit freed stays for
-- it: src/group.h), and the Redis waits (wait.redis, at the end).  Every
-- entry takes the timeout of the wait as an argument (the lock object's,
-- or a per-call one).  A change to how anything waits is a change here.
--
-- The deadline rule, for every wait here: a wait of `timeout` seconds
-- that starts at t0 (the monotonic clock, resty.shmlock.internal.clock)
-- ends at t0 + timeout.  No pause is shorter than MIN_SLEEP (ngx.sleep
-- counts whole milliseconds) or longer than the time left, but the last,
-- which may pass the deadline by less than MIN_SLEEP; with less than
-- MIN_SLEEP left, the wait is over ("timeout" up to 1 ms early).  Pauses
-- are never counted in place of reading the clock: a worker busy with
-- other requests (1000 waiters) makes every pause late, and the deadline
-- still holds.  (resty.lock's steps below also end when the steps slept
-- add up to the timeout, as resty.lock's do: whichever comes first.)
--
-- Where the phase may yield (sleep):
--
-- 1. resty.lock's steps, exactly: ngx.sleep(step), try again, step =
--    min(max(0.001, step * ratio), timeout left, max_step); elapsed is the
--    sum of the steps.  Short waits (the ones resty.lock's own tests pin:
--    0.127 s behind a 0.1 s holder with the defaults) are resty.lock's to
--    the digit.  (The cache's wait has no steps: it queues at once.)
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
--    carries its deadline: a waiter that times out withdraws it.  Each
--    queued waiter sleeps on a semaphore of its own (ngx.semaphore), which
--    the releases of its worker post (unlock() calls released(key)): a
--    handoff to a waiter of the releasing worker is taken at the next turn
--    of its event loop, not at the next poll.
--    elapsed = the steps slept + the time measured in the queue.
--
-- Aborted waiters.  nginx ends a waiting Lua thread without running any
-- of its Lua code (ngx.thread.kill, ngx.exit while the waiter is a light
-- thread, a client abort with lua_check_client_abort on, the end of a
-- request or of the worker); its mark, which names a live worker, stays.
-- Two rules keep such a ghost from holding a key:
--
-- * In its own worker a ghost is known exactly: a queued waiter is, at
--   any moment another Lua thread of the worker runs, asleep on its
--   semaphore, and nginx takes a killed thread off the semaphore's wait
--   queue (the semaphore's count rises).  The worker's registry of queued
--   waiters (token -> record) answers zone.gone(tok): the releaser of that
--   worker skips a ghost's mark (frees the key), and the queued waiters of
--   that worker take a key handed to a ghost at their next look, as a
--   dead holder's.  A ghost's record is kept until its mark cannot matter
--   any more (its deadline plus ACCEPT), then dropped; records of waiters
--   that end are dropped at once: the registry does not grow.
-- * Elsewhere (another worker, a plain LuaJIT process) nobody can tell a
--   ghost from a waiter, so a handoff must be accepted: a queued waiter's
--   mark asks for ACCEPT seconds (at most the lock's exptime) instead of
--   the exptime, and the waiter that finds the key handed to it moves it
--   to its full exptime (zone.accept).  A handoff to a ghost lapses after
--   ACCEPT, and the key is free again.  (A live waiter that needs longer
--   than ACCEPT to notice loses that handoff and waits on.)
--
--    The bound, on a zone, for a waiter that reaches the queue:
--
--        worst wait <= Q + (W + 1) * (H + L) + G * ACCEPT
--
--    Q: the time its steps take to add up to QUEUE_AFTER (at most
--    QUEUE_AFTER + max_step, plus the timers' lateness; 0 for the
--    cache's wait); W: the live waiters queued on the key before it; H:
--    the longest hold; L: the time a handed-to waiter needs to notice (a
--    poll, at most 2 ms plus timer lateness, in another worker; an
--    event-loop turn in the same one); G: the waiters ahead of it that
--    were aborted while queued in another worker than the releaser's.
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
-- else runs in that worker meanwhile, so a key held by this very worker
-- (a request or timer of it, which cannot run while it blocks) is never
-- waited for: nil, "cannot wait in <phase> phase: held by this worker"
-- at once, or as soon as the key is handed to this worker.

local nginx = require "resty.shmlock.internal.nginx"
local clock = require "resty.shmlock.internal.clock"
local random = require "resty.shmlock.internal.random"
local backoff = require "resty.shmlock.internal.backoff"
local zone_backend = require "resty.shmlock.lock.zone"

local floor = math.floor
local min = math.min
local max = math.max
local next = next
local pcall = pcall
local require = require
local tostring = tostring
local now_us = clock.now_us
local nanosleep = clock.sleep
local rand = random.number
local next_step = backoff.next
local MIN_SLEEP = backoff.MIN_SLEEP
local ACQUIRED = zone_backend.ACQUIRED
local MARKED = zone_backend.MARKED
local FAILED = zone_backend.FAILED

local YIELDABLE = nginx.YIELDABLE

local ngx = nginx.api()
local ngx_sleep = ngx and ngx.sleep
local get_phase = ngx and ngx.get_phase

local _M = {
    -- seconds of resty.lock's steps after which a waiter queues
    QUEUE_AFTER = 0.2,
    -- seconds a queued waiter has to accept a handoff (see the top)
    ACCEPT = 0.5,
}

-- a queued waiter asks whether the holder's process lives at most this
-- often (a /proc read: not at every 1 ms poll)
local CHECK_EVERY_US = 100000

-- tries at once before a blocking wait sleeps
local SPINS = 20

-- the first and the longest pause of a blocking poll (ngx.shared dicts)
local POLL_FIRST, POLL_MAX = 0.0001, 0.001

-- records of the registry looked at for dropping, per queued wait
local SWEEP = 4


-- syntax: deadline = wait.deadline(timeout)
-- The deadline rule (see the top): microseconds of the monotonic clock.
local function deadline_of(timeout)
    return now_us() + timeout * 1000000
end
_M.deadline = deadline_of


-- The next pause of a poll: 1 or 2 ms, drawn at random; cut to the time
-- left, never below MIN_SLEEP.
local function poll_pause(deadline, now)
    local pause = rand() < 0.5 and 0.001 or 0.002
    return max(MIN_SLEEP, min(pause, (deadline - now) / 1000000))
end


-- ---------------------------------------------------------------------
-- This worker's queued waiters.
--
-- by_tok: token -> record { key, sema, posted, running, till, dead }, of
-- every waiter queued now and of the ghosts still kept (dead: the ms of
-- the zone clock after which its record goes).  by_key: key -> { record
-- -> true } of the live ones, for released() and queued().

local by_tok = {}
local by_key = {}
local n_live, n_ghosts = 0, 0
local sweep_at      -- the token the sweep goes on from (nil: the start)

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


-- Whether the waiter of a record can still run.  It runs (the caller is
-- itself), or sleeps on its semaphore: counted there (count < 0; count
-- < 1 once posted, until it runs).  nginx takes a killed thread off the
-- semaphore, so a ghost counts nowhere.
local function lives(rec)
    if rec.running then
        return true
    end
    return rec.sema:count() < (rec.posted and 1 or 0)
end


local function unlist(rec)
    local set = by_key[rec.key]
    if set and set[rec] then
        set[rec] = nil
        n_live = n_live - 1
        if next(set) == nil then
            by_key[rec.key] = nil
        end
    end
end


-- a live record found dead: a ghost, kept while its mark can matter
local function bury(rec)
    unlist(rec)
    rec.dead = rec.till + _M.ACCEPT * 1000
    n_ghosts = n_ghosts + 1
end


local function drop(tok, rec)
    if by_tok[tok] == rec then
        by_tok[tok] = nil
        if rec.dead then
            n_ghosts = n_ghosts - 1
        else
            unlist(rec)
        end
    end
end


-- Looks at up to SWEEP records from where the last sweep stopped: buries
-- ghosts, drops those past their time.
local function sweep(now_ms)
    if sweep_at ~= nil and by_tok[sweep_at] == nil then
        sweep_at = nil      -- dropped meanwhile: start again
    end
    for _ = 1, SWEEP do
        local tok, rec = next(by_tok, sweep_at)
        if tok == nil then
            sweep_at = nil
            return
        end
        sweep_at = tok
        if not rec.dead and not lives(rec) then
            bury(rec)
        end
        if rec.dead and rec.dead <= now_ms then
            sweep_at = next(by_tok, tok)
            drop(tok, rec)
            if sweep_at == nil then
                return
            end
        end
    end
end


-- syntax: gone = wait.gone(tok)
-- Whether tok is a queued waiter of this worker that nginx aborted (see
-- "Aborted waiters").  Unknown tokens are not: their marks go stale at
-- their deadline, their handoffs lapse after ACCEPT.
local function gone(tok)
    local rec = by_tok[tok]
    if not rec then
        return false
    end
    if rec.dead then
        return true
    end
    if lives(rec) then
        return false
    end
    bury(rec)
    return true
end
_M.gone = gone


-- A record for a waiter that queues on key; nil where there is no
-- semaphore (it then only polls).  till: its deadline, ms.
local function join(key, tok, till)
    local new = semaphore()
    if not new then
        return nil
    end
    local sema = new(0)
    if not sema then
        return nil
    end
    sweep(floor(now_us() / 1000))
    local rec = { key = key, sema = sema, posted = false, running = true,
                  till = till, dead = false }
    local old = by_tok[tok]
    if old then
        drop(tok, old)
    end
    by_tok[tok] = rec
    local set = by_key[key]
    if not set then
        set = {}
        by_key[key] = set
    end
    set[rec] = true
    n_live = n_live + 1
    return rec
end


local function leave(tok, rec)
    if rec then
        drop(tok, rec)
    end
end


-- syntax: wait.released(key, space?)
-- This worker released key: wake its queued waiters on it (they look at
-- the key again; the one the lock was handed to, if any, runs with it).
-- space: the backend's (nil: the lock's; resty.shmlock.semaphore's own).
function _M.released(key, space)
    if n_live == 0 then
        return
    end
    if space then
        key = space .. key
    end
    local set = by_key[key]
    if not set then
        return
    end
    for rec in pairs(set) do
        if not rec.posted then
            if lives(rec) then
                rec.posted = true
                rec.sema:post(1)
            else
                bury(rec)       -- removes it from set: allowed in pairs
            end
        end
    end
end


-- syntax: n = wait.queued(key, space?)
-- How many live waiters of this worker are queued on key (nil: all keys;
-- space as for released).
function _M.queued(key, space)
    if key == nil then
        return n_live
    end
    if space then
        key = space .. key
    end
    local n = 0
    local set = by_key[key]
    if set then
        for rec in pairs(set) do
            if lives(rec) then
                n = n + 1
            else
                bury(rec)
            end
        end
    end
    return n
end


-- syntax: live, ghosts = wait.registry()
-- The records this worker keeps: queued waiters, and ghosts kept until
-- their marks cannot matter (see "Aborted waiters").
function _M.registry()
    return n_live, n_ghosts
end


zone_backend.on_gone(gone)


-- One pause of a queued waiter: on its semaphore (a release of this
-- worker cuts it short), else ngx.sleep.
local function pause(rec, seconds)
    if rec then
        rec.running = false
        rec.sema:wait(seconds)
        rec.running = true
        rec.posted = false
    else
        ngx_sleep(seconds)
    end
end


-- ---------------------------------------------------------------------
-- The lock's wait where the phase may yield.

-- The key reached us after a mark: make it ours for the lock's exptime
-- (see "Aborted waiters").  False when the handoff lapsed meanwhile.
local function accept(backend, store, key, klen, tok, expiry, marked)
    if not marked or not backend.accept then
        return true
    end
    return backend.accept(store, key, klen, tok, expiry)
end


-- the queued part of a wait, up to `deadline` (us); since: the wait's
-- start (ms, zone clock); elapsed counts from `spent` (the steps slept);
-- done: the caller's reason to stop waiting, or nil
local function queue(backend, store, key, klen, tok, expiry, deadline, since,
                     spent, done)
    local start = now_us()
    local till = floor(deadline / 1000)
    local next_check = start + CHECK_EVERY_US
    local withdraw = backend.withdraw
    -- what a mark asks for: ACCEPT seconds, at most the lock's exptime
    -- (0: never expires)
    local ask = floor(_M.ACCEPT * 1000)
    if expiry > 0 and expiry < ask then
        ask = expiry
    end
    local marked = false
    -- the registry's name of this waiter (a zone: its owner id), and of
    -- its key (a backend with a space of its own: the semaphore's)
    local ident = backend.ident(tok)
    local space = backend.space
    local rec = join(space and space .. key or key, ident, till)

    local function took()
        leave(ident, rec)
        return spent + (now_us() - start) / 1000000
    end

    while true do
        local ok, err = backend.add(store, key, klen, tok, nil, expiry)
        if ok then
            return took()
        end
        if ok == nil then
            leave(ident, rec)
            return nil, err
        end

        local now = now_us()
        local check = now >= next_check
        if check then
            next_check = now + CHECK_EVERY_US
        end
        local got
        got, err = backend.look(store, key, klen, tok, expiry, check, since,
                                till, ask)
        if got == ACQUIRED then
            if accept(backend, store, key, klen, tok, expiry, marked) then
                return took()
            end
            marked = false      -- the handoff lapsed: wait on
        elseif got == FAILED then
            -- a mark of ours goes stale at our deadline
            leave(ident, rec)
            return nil, err
        elseif got == MARKED then
            marked = true
        end

        -- the caller's reason to stop, else the deadline: either ends the
        -- wait, with the key if it reached us as we withdrew our mark
        local stop = done and done() and "done"
        if not stop then
            now = now_us()
            stop = now >= deadline and "timeout"
        end
        if stop then
            leave(ident, rec)
            if marked and withdraw and withdraw(store, key, klen, tok)
               and accept(backend, store, key, klen, tok, expiry, true)
            then
                return spent + (now_us() - start) / 1000000
            end
            return nil, stop
        end

        pause(rec, poll_pause(deadline, now))
    end
end


-- syntax: elapsed, err = wait.sleep(backend, store, key, klen, tok,
--                                         expiry, timeout, step, ratio,
--                                         max_step, done?)
-- The wait where the phase may yield, after add found the key held (see
-- the top of this file).  tok: a Lua string.  done: a function called
-- after every look (the cache's: "the value is there"); true ends the
-- wait with nil, "done" (or elapsed, if the key reached us meanwhile);
-- with done, the wait queues at once.  elapsed: the steps' sum, plus the
-- time measured in the queue; nil, "timeout"; nil and the store's error.
function _M.sleep(backend, store, key, klen, tok, expiry, timeout, step,
                  ratio, max_step, done)
    local deadline = deadline_of(timeout)
    local since = floor(now_us() / 1000)
    if done then
        return queue(backend, store, key, klen, tok, expiry, deadline, since,
                     0, done)
    end
    local elapsed = 0
    step = min(max(step, MIN_SLEEP), timeout)

    -- ngx.sleep counts whole milliseconds: a shorter sleep is ngx.sleep(0),
    -- which nginx without the delayed-events patch logs as a warning on
    -- every call.  With less than MIN_SLEEP left, the wait is over
    -- ("timeout" up to 1 ms early, as the Redis lock's; 1e-9 absorbs the
    -- rounding of the subtractions).
    while timeout > 0 and step >= MIN_SLEEP - 1e-9 do
        -- (a step of 1 ms less the rounding is slept as 1 ms: ngx.sleep
        -- truncates to whole ms, and 0.999 ms would be ngx.sleep(0))
        ngx_sleep(step < MIN_SLEEP and MIN_SLEEP or step)
        elapsed = elapsed + step
        timeout = timeout - step

        local ok, err = backend.add(store, key, klen, tok, nil, expiry)
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

        local left = (deadline - now_us()) / 1000000
        if timeout <= 0 or left < MIN_SLEEP - 1e-9 then
            break
        end
        if elapsed >= _M.QUEUE_AFTER then
            return queue(backend, store, key, klen, tok, expiry, deadline,
                         since, elapsed)
        end
        step = min(next_step(step, ratio, max_step), timeout, left)
    end
    return nil, "timeout"
end


-- syntax: a, b = wait.poll(attempt, timeout)
-- The cache's wait for a lock that is not ours (a lock factory's, with
-- trylock): calls attempt() until it answers true (then its other two
-- values are returned), pausing 1-2 ms in between, up to timeout seconds
-- by the deadline rule; then nil, "timeout".
function _M.poll(attempt, timeout)
    local deadline = deadline_of(timeout)
    while true do
        local stop, a, b = attempt()
        if stop then
            return a, b
        end
        local now = now_us()
        if now >= deadline then
            return nil, "timeout"
        end
        ngx_sleep(poll_pause(deadline, now))
    end
end


-- ---------------------------------------------------------------------
-- The wait where the phase cannot yield.

-- nanosleep(2) polls of an ngx.shared dict, up to `deadline`
local function poll(backend, store, key, klen, tok, expiry, deadline, stop)
    local start = now_us()
    local pause_s = POLL_FIRST
    while true do
        local now = now_us()
        if now >= deadline then
            return nil, "timeout"
        end
        nanosleep(min(pause_s, (deadline - now) / 1000000))
        pause_s = min(pause_s * 2, POLL_MAX)
        local ok, err = backend.add(store, key, klen, tok, nil, expiry)
        if ok then
            return (now_us() - start) / 1000000
        end
        if ok == nil then
            return nil, err
        end
        err = stop()
        if err then
            return nil, err
        end
    end
end


-- syntax: elapsed, err = wait.block(backend, store, key, klen, tok,
--                                         expiry, timeout, step, ratio,
--                                         max_step, phase)
-- The wait where the phase cannot yield: blocks the worker up to timeout
-- seconds (see the top of this file).  elapsed is measured; nil,
-- "timeout"; nil, "cannot wait in <phase> phase: held by this worker";
-- nil and the store's error.
function _M.block(backend, store, key, klen, tok, expiry, timeout, step,
                  ratio, max_step, phase)
    local deadline = deadline_of(timeout)
    local start = now_us()
    local refusal = "cannot wait in " .. tostring(phase)
                    .. " phase: held by this worker"
    local function stop()
        if backend.here(store, key, klen) then
            return refusal
        end
    end

    for _ = 1, SPINS do
        local ok, err = backend.add(store, key, klen, tok, nil, expiry)
        if ok then
            return (now_us() - start) / 1000000
        end
        if ok == nil then
            return nil, err
        end
        if _ == 1 then
            err = stop()
            if err then
                return nil, err
            end
        end
    end

    local spent = (now_us() - start) / 1000000
    if now_us() >= deadline then
        return nil, "timeout"
    end
    local elapsed, err
    if backend.block then
        elapsed, err = backend.block(store, key, klen, tok, expiry,
                                     (deadline - now_us()) / 1000000,
                                     step, ratio, max_step, stop)
    else
        elapsed, err = poll(backend, store, key, klen, tok, expiry, deadline,
                            stop)
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



-- ---------------------------------------------------------------------
-- The choice: where and how a wait that found the key held waits.

-- syntax: yes = wait.can_sleep()
-- True inside nginx, in a phase where ngx.sleep may yield.
function _M.can_sleep()
    return ngx ~= nil and YIELDABLE[get_phase()] == true
end


-- syntax: elapsed, err, refused = wait.wait(backend, store, key, klen,
--                                          tok, expiry, timeout, o, done?)
-- o: the waiting object's options (step, ratio, max_step,
-- blocking_timeout).  Outside nginx, the backend's own wait (the core's,
-- one call: backend.block); inside nginx where the phase may yield,
-- wait.sleep (done: as its); where it cannot, with o.blocking_timeout,
-- wait.block for at most that long; else no wait at all: nil, "cannot
-- wait in <phase> phase", true (the caller may still look once).
function _M.wait(backend, store, key, klen, tok, expiry, timeout, o, done)
    if not ngx then
        return backend.block(store, key, klen, tok, expiry, timeout, o.step,
                             o.ratio, o.max_step)
    end
    local phase = get_phase()
    if YIELDABLE[phase] then
        return _M.sleep(backend, store, key, klen, tok, expiry, timeout,
                        o.step, o.ratio, o.max_step, done)
    end
    local blocking = o.blocking_timeout
    if blocking > 0 then
        return _M.block(backend, store, key, klen, tok, expiry,
                        min(timeout, blocking), o.step, o.ratio, o.max_step,
                        phase)
    end
    return nil, "cannot wait in " .. tostring(phase) .. " phase", true
end


-- ---------------------------------------------------------------------
-- The Redis waits (resty.shmlock.redis, resty.shmlock.redis.semaphore):
-- a host's Redis waiter (the holder of the host's turn,
-- resty.shmlock.redis.host) waiting for a key held on another host.
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
-- wait on), it polls: it sleeps an exponentially growing step (step,
-- times ratio after each try, at most max_step), each drawn from [step/2,
-- step] so that waiters spread out, never below MIN_SLEEP (a spin of
-- Redis round trips; inside nginx, ngx.sleep would truncate it to 0 and
-- warn).
--
-- The deadline rule, for both: no wait goes past the deadline (seconds of
-- clock.now); when less than MIN_SLEEP is left, the wait ends ("timeout")
-- instead of a shorter last wait.

local now_s = clock.now
local sleep_s = ngx_sleep or nanosleep
-- (loaded by the first Redis wait: a lock alone needs no Redis module)
local wake_wait

-- syntax: res, err = wait.redis(o, deadline, attempt, x, y, z)
-- o: { link, wake, since, step, ratio, max_step }, the waiter's: wake,
-- the key's wake stream; since, the id the caller's failed try answered
-- (nil: none, or the caller did not try: the waiter polls).
-- attempt(x, y, z, wake, true) (true: mark the waiter) answers a result
-- (the key is ours), false and the id to wait after (nil: none) when the
-- key is still held, or nil, err.  Returns the result, nil, "timeout", or
-- nil and the attempt's error.
function _M.redis(o, deadline, attempt, x, y, z)
    if not wake_wait then
        wake_wait = require("resty.shmlock.redis.wake").wait
    end
    local link, w = o.link, o.wake
    local since = o.since
    local step = o.step
    local max_step = o.max_step
    local unanswered = 0
    local res, err
    while true do
        local left = deadline - now_s()
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
            local s = max(MIN_SLEEP, step * (0.5 + 0.5 * rand()))
            if s > left then
                s = left
            end
            sleep_s(s)
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
