-- resty.shmlock.lock.zone (internal): the lock backend of resty.shmlock
-- for our zones (the interface: see resty.shmlock; the store is the zone).
--
-- The key holds the holder's host token (resty.shmlock.internal.token),
-- stored with add (so it is never evicted while live) and the lock's
-- exptime.
-- Everything below is compare-and-swap on that one value, so a late
-- holder can never release or extend somebody else's lock.
--
-- Starvation mode (fairness).  A waiter that has waited STARVE_AFTER
-- becomes *starving*; it marks the held lock by appending itself to the
-- value (cas, keeping the holder's TTL):
--
--     "<holder token>|<starver token>|<starver exptime ms>|<since ms>|"
--     .. "<until ms>"
--
-- A release of a marked lock hands it over: cas(value -> starver token),
-- so the key is never free in between and nobody can barge in.  Only one
-- mark at a time; a starving waiter that has waited longer (smaller
-- <since>) replaces a younger one's mark.  So once starving, a waiter gets
-- the lock after at most one handoff per older concurrent waiter, plus one
-- release race to place its mark:
--
--     worst wait <= STARVE_AFTER + (W + 1) * (H + L)
--
-- W: concurrent waiters on the key, H: the longest hold, L: the time a
-- woken waiter needs to run (futex wake-up plus scheduling).  Measured
-- with 4 processes on 2 CPUs, 50 us holds: worst wait ~10-15 ms (~25-50 ms
-- without starvation mode).  Waiters inside nginx wait with resty.lock's
-- ngx.sleep steps first (no mark: a handoff to a sleeping poller would
-- leave the lock idle for a step), but cannot barge past a mark either: a
-- marked lock is never free.  Once queued (resty.shmlock.lock.nginx_wait)
-- they mark too, polling every 1-2 ms; their mark asks for a short
-- exptime (<starver exptime>: nginx_wait.ACCEPT), which the waiter the
-- lock reaches extends to the lock's (accept), so that a handoff to a
-- waiter nginx killed meanwhile lapses soon.
--
-- Giving up.  A starver whose timeout passes withdraws its mark (cas back
-- to the holder's token) unless the lock reached it.  <until> is its
-- deadline (zone clock, ms): from then on the mark is stale, whether or
-- not the withdrawal worked.  A release does not hand the lock to a stale
-- mark (it frees the key), a dead holder's lock is not handed to it, and
-- any starver may replace it.  So a withdrawal that fails (a zone error)
-- cannot leave the key to an owner who stopped waiting: the starver
-- returns "timeout" at once and its mark is ignored.  A handoff before the
-- deadline reaches a starver still waiting: it finds the lock at its next
-- look, or when it reads the key to withdraw (only if that read fails too
-- is the lock left to its exptime).  A mark without <until> (written by
-- an older version) never goes stale.
--
-- Bounded loops.  A compare-and-swap that fails with CHANGED (someone
-- changed the value between our read and our write) is retried, at most
-- RETRIES times; NOT_FOUND means our lock expired; any other code (no
-- memory, a broken zone) is final and returned as it is (resty.shmlock.
-- errors), never taken for "expired".  A waiter's loop ends at its
-- deadline; it never sleeps less than backoff.MIN_SLEEP at a time, but
-- the last sleep, cut to the deadline.
--
-- Waking.  Outside nginx a waiter sleeps on the key's wait word in the zone
-- (a futex).  It counts itself as a waiter and reads the word before it
-- looks at the key (shmlock_wait_begin), so a release in between cuts the
-- sleep short; a release bumps the word only when a waiter is counted
-- (shmlock_wake_waiters), so an uncontended unlock makes no atomic write.
-- A release wakes one sleeper, not the herd (only one can take the key:
-- the others would wake to find it taken, and sleep again); a handoff
-- wakes them all, so that the starver it is for is among them.  A waiter
-- woken that leaves without the key (its deadline, stop(), an error)
-- passes the wake-up on to the next sleeper, so that none is lost while
-- the key is free; one lost all the same (a woken waiter killed before it
-- looked) costs the others at most CHECK_EVERY_US.
--
-- Dead holders.  A waiter that finds a holder token whose process is gone
-- takes the key at once (cas from the dead token), or hands it to a live
-- starver marked on it.  The holder's process is checked at the first look
-- and after every wait that no release cut short (those are at most
-- CHECK_EVERY_US long outside nginx; inside, every ngx.sleep step).  A
-- release does not hand the key to a starver whose process is gone.
--
-- Aborted waiters (inside nginx).  _M.gone(tok) says whether tok is a
-- queued waiter of this process that nginx aborted (nginx_wait sets it;
-- elsewhere it answers false): such a token is treated as a dead
-- process's, as holder (taken over) and as starver (not handed to,
-- replaced).

local ffi = require "ffi"
local C = require "resty.shmlock.lib"
local errors = require "resty.shmlock.errors"
local codes = require "resty.shmlock.internal.codes"
local clock = require "resty.shmlock.internal.clock"
local token = require "resty.shmlock.internal.token"
local options = require "resty.shmlock.internal.options"
local backoff = require "resty.shmlock.internal.backoff"
local log_event = require("resty.shmlock.internal.log").event

local ffi_new = ffi.new
local ffi_str = ffi.string
local type = type
local tonumber = tonumber
local floor = math.floor
local ceil = math.ceil
local min = math.min
local max = math.max
local str_sub = string.sub
local str_match = string.match
local str_format = string.format
local valid = token.valid
local ms = options.ms
local cached_ms = clock.cached_ms
local now_us = clock.now_us
local now_ms = clock.now_ms
local next_step = backoff.next
local MIN_SLEEP = backoff.MIN_SLEEP

local OK = codes.OK
local NOT_FOUND = codes.NOT_FOUND
local EXISTS = codes.EXISTS
local CHANGED = codes.CHANGED
local AGAIN = codes.AGAIN
local TIMEOUT = codes.TIMEOUT
local T_NIL, T_STRING = codes.TNIL, codes.TSTRING
local KEEP_TTL = codes.KEEP_TTL

-- a waiter sleeps at most this long between looks at the holder, so that
-- a holder that dies while we wait is noticed within it
local CHECK_EVERY_US = 100000

-- tries of a compare-and-swap that keeps failing with CHANGED
local RETRIES = 32

-- outcomes of one look at a busy key
-- (FAILED: the zone answered an error, given with it: a destroyed or
-- corrupt zone, no memory to take a free key; the wait ends with it)
local BUSY, ACQUIRED, MARKED, FAILED = 0, 1, 2, 3

local _M = {
    BUSY = BUSY, ACQUIRED = ACQUIRED, MARKED = MARKED, FAILED = FAILED,
    -- seconds of waiting after which a waiter starts starvation mode
    STARVE_AFTER = 0.002,
}

-- scratch space for the C calls, allocated once; each is filled right
-- before its call (no allocation in between, so no GC finalizer can run
-- and reuse it)
local val = ffi_new("shmlock_value_t")
local old = ffi_new("shmlock_value_t")
val.type = T_STRING
old.type = T_STRING
local out = ffi_new("shmlock_value_t")
local forcible = ffi_new("int[1]")
local buf_size = 256
local buf = ffi_new("char[?]", buf_size)


-- syntax: expiry = zone.expiry(seconds)
-- The exptime as add and look take it: milliseconds.
_M.expiry = ms


-- The key's value: a string, nil when absent, true for a value that is
-- not a string (not ours: treated as a holder we cannot identify); nil,
-- err when the zone fails.
local function read(zone, key, klen)
    local rc = C.shmlock_dict_get(zone, key, klen, 0, out, buf, buf_size)
    -- AGAIN: the buffer is too small; grow it and ask again, twice at most
    -- (the value may grow in between)
    for _ = 1, 2 do
        if rc ~= AGAIN then
            break
        end
        buf_size = tonumber(out.len)
        buf = ffi_new("char[?]", buf_size)
        rc = C.shmlock_dict_get(zone, key, klen, 0, out, buf, buf_size)
    end
    if rc ~= OK then
        return nil, errors[rc]
    end
    if out.type == T_NIL then
        return nil
    end
    if out.type ~= T_STRING then
        return true
    end
    return ffi_str(buf, out.len)
end


local function cas(zone, key, klen, from, to, exp_ms)
    old.str = from
    old.len = #from
    val.str = to
    val.len = #to
    return C.shmlock_dict_cas(zone, key, klen, old, val, exp_ms, forcible)
end


-- all: a handoff, which must reach the one waiter it is for; else one
-- sleeper is woken (see "Waking")
local function wake(zone, key, klen, all)
    C.shmlock_wake_waiters(zone, C.shmlock_hash(key, klen), all and 1 or 0)
end


-- holder, starver, starver's exptime (ms), starver's wait start (ms),
-- starver's deadline (ms; nil in a mark without one)
local split = token.split


-- whether a starver marked with deadline `till` may still be waiting
local function waiting(till)
    return not till or till > now_ms()
end


-- syntax: gone = zone.gone(tok)
-- Whether tok is a waiter of this process known to be gone (see "Aborted
-- waiters"); resty.shmlock.lock.nginx_wait replaces it inside nginx.
function _M.gone()
    return false
end


-- syntax: ok, err = zone.add(zone, key, klen, tok, tlen, exp_ms)
-- true: acquired; false: held by someone; nil, err: the zone said no.
-- tok: a string or a pointer to tlen bytes.
function _M.add(zone, key, klen, tok, tlen, exp_ms)
    local rc = C.shmlock_lock_acquire(zone, key, klen, tok, tlen, exp_ms,
                                      cached_ms())
    if rc == OK then
        return true
    end
    if rc == EXISTS then
        return false
    end
    return nil, errors[rc]
end


-- A marked lock being released: hand it to the marked waiter if it may
-- still be waiting, else free the key.  A key no longer ours is left as
-- it is: 1, "expired" (see release).
local function hand_off(zone, key, klen, tok)
    for _ = 1, RETRIES do
        local v, err = read(zone, key, klen)
        if err then
            return nil, err
        end
        if type(v) ~= "string" then
            return 1, "expired"
        end
        local holder, starver, s_exp, _, till = split(v)
        if holder ~= tok then
            return 1, "expired"
        end
        local rc, to
        if starver and waiting(till) and not _M.gone(starver)
           and token.alive(starver)
        then
            to = starver
            rc = cas(zone, key, klen, v, starver, s_exp)
        else
            -- the mark was withdrawn, or is stale: a plain release
            old.str = v
            old.len = #v
            rc = C.shmlock_dict_cad(zone, key, klen, old)
        end
        if rc == OK then
            wake(zone, key, klen, to)
            return 1
        end
        if rc == NOT_FOUND then
            return 1, "expired"
        end
        if rc ~= CHANGED then
            return nil, errors[rc]
        end
        -- CHANGED: the mark moved meanwhile
    end
    return nil, errors[CHANGED]
end


-- syntax: ok, err = zone.release(zone, key, klen, tok, tlen)
-- 1 when we released our lock; 1, "expired" when the key no longer holds
-- our token (our lock expired: the key is free, or someone else holds it
-- and it is left untouched; 1, as resty.lock's unlock answers, so that a
-- caller such as lua-resty-mlcache keeps the value it computed); nil, err
-- when the zone failed (the key may still be ours).  key and tok: Lua
-- strings or char pointers (the handle's copies).
function _M.release(zone, key, klen, tok, tlen)
    local rc = C.shmlock_lock_release(zone, key, klen, tok, tlen)
    if rc == OK then
        return 1
    end
    if rc == CHANGED then
        return hand_off(zone, key, klen, ffi_str(tok, tlen))
    end
    if rc == NOT_FOUND then
        return 1, "expired"
    end
    return nil, errors[rc]
end


-- syntax: ok, err = zone.renew(zone, key, klen, tok, new_tok, seconds)
-- Moves our lock to a fresh token with a new expiry, keeping a starver's
-- mark.  A new token (not just a new TTL) makes a marker's cas, which
-- copies the TTL it read just before, fail if we extended in between.
-- true; nil, "expired"; nil, err when the zone failed (still ours).
function _M.renew(zone, key, klen, tok, new_tok, seconds)
    local exp_ms = ms(seconds)
    local v = tok
    for _ = 1, RETRIES do
        local rc = cas(zone, key, klen, v, new_tok .. str_sub(v, #tok + 1),
                       exp_ms)
        if rc == OK then
            return true
        end
        if rc == NOT_FOUND then
            return nil, "expired"
        end
        if rc ~= CHANGED then
            return nil, errors[rc]
        end
        -- CHANGED: marked (or unmarked) meanwhile, or no longer ours
        local err
        v, err = read(zone, key, klen)
        if err then
            return nil, err
        end
        if type(v) ~= "string" or split(v) ~= tok then
            return nil, "expired"
        end
    end
    return nil, errors[CHANGED]
end


-- syntax: held = zone.holds(zone, key, klen, tok)
function _M.holds(zone, key, klen, tok)
    local v = read(zone, key, klen)
    return type(v) == "string" and split(v) == tok
end


-- The holder is dead: take the key, or give it to a live starver still
-- waiting.  Either way an operator may want to know (a notice).
local function take_over(zone, key, klen, v, holder, tok, exp_ms, starver,
                         s_exp, till)
    local to = tok
    if starver and starver ~= tok and waiting(till) and not _M.gone(starver)
       and token.alive(starver)
    then
        to, exp_ms = starver, s_exp
    end
    if cas(zone, key, klen, v, to, exp_ms) ~= OK then
        return BUSY
    end
    wake(zone, key, klen, to ~= tok)
    if type(key) ~= "string" then
        key = ffi_str(key, klen)
    end
    local aborted = _M.gone(holder)
    log_event("notice", 'lock "' .. key .. '": '
              .. (aborted and "an aborted waiter of process "
                  or "holder process ")
              .. (str_match(holder, "^(%d+):") or "?")
              .. (aborted and "" or " is dead")
              .. "; its lock "
              .. (to == tok and "taken over" or "handed to the next waiter"))
    return to == tok and ACQUIRED or BUSY
end


-- (%.0f: tostring would write 1e+15 for a long exptime or timeout)
local function mark(zone, key, klen, v, holder, tok, exp_ms, since, till)
    local marked = str_format("%s|%s|%.0f|%.0f|%.0f", holder, tok, exp_ms,
                              since, till)
    if cas(zone, key, klen, v, marked, KEEP_TTL) == OK then
        return MARKED
    end
    return BUSY
end


-- syntax: outcome, err = zone.look(zone, key, klen, tok, exp_ms,
--                                       check, since, till, ask)
-- One look at a key our add found busy.  check: ask whether the holder's
-- process lives (a holder that took the key since our last look was alive
-- a moment ago: not worth a /proc read); since, till: our wait start and
-- deadline in ms if we are starving (may mark the lock), else nil; ask:
-- the exptime (ms) our mark asks for, if not exp_ms (a waiter that then
-- finds the key handed to it extends it: accept).  FAILED comes with the
-- zone's error.
local function look(zone, key, klen, tok, exp_ms, check, since, till, ask)
    local v, err = read(zone, key, klen)
    if err then
        return FAILED, err
    end
    if v == nil then
        -- released since our add: one more try
        local rc = C.shmlock_lock_acquire(zone, key, klen, tok, #tok, exp_ms,
                                          cached_ms())
        if rc == OK then
            return ACQUIRED
        end
        if rc ~= EXISTS then
            return FAILED, errors[rc]
        end
        return BUSY
    end
    if v == true then
        return BUSY
    end
    local holder, starver, s_exp, s_since, s_till = split(v)
    if holder == tok then
        -- handed over to us (and maybe marked by the next starver already)
        return ACQUIRED
    end
    if (check and not token.alive(holder)) or _M.gone(holder) then
        return take_over(zone, key, klen, v, holder, tok, exp_ms, starver,
                         s_exp, s_till)
    end
    if starver == tok then
        return MARKED
    end
    if since and valid(holder)
       and (not starver or s_since > since or not waiting(s_till)
            or _M.gone(starver) or (check and not token.alive(starver)))
    then
        return mark(zone, key, klen, v, holder, tok, ask or exp_ms, since,
                    till)
    end
    return BUSY
end
_M.look = look


-- A starver giving up: remove its mark, unless the lock reached it.
-- true if we hold the lock after all.  A mark it fails to remove (the
-- zone failed) is stale from our deadline on: see "Giving up" above.
local function withdraw(zone, key, klen, tok)
    for _ = 1, RETRIES do
        local v = read(zone, key, klen)
        if type(v) ~= "string" then
            return false
        end
        local holder, starver = split(v)
        if holder == tok then
            return true
        end
        if starver ~= tok then
            return false
        end
        if cas(zone, key, klen, v, holder, KEEP_TTL) ~= CHANGED then
            return false
        end
    end
    return false
end
_M.withdraw = withdraw


-- syntax: ok, err = zone.accept(zone, key, klen, tok, exp_ms)
-- A waiter the lock was handed to (with the short exptime its mark asked
-- for) makes it its own for exp_ms, keeping a mark placed since.  false
-- when the key no longer holds tok (the handoff lapsed); nil, err when
-- the zone failed (the key is left to its short exptime).
function _M.accept(zone, key, klen, tok, exp_ms)
    for _ = 1, RETRIES do
        local v, err = read(zone, key, klen)
        if err then
            return nil, err
        end
        if type(v) ~= "string" or split(v) ~= tok then
            return false
        end
        local rc = cas(zone, key, klen, v, v, exp_ms)
        if rc == OK then
            return true
        end
        if rc == NOT_FOUND then
            return false
        end
        if rc ~= CHANGED then
            return nil, errors[rc]
        end
    end
    return nil, errors[CHANGED]
end


-- syntax: holder = zone.holder(zone, key, klen)
-- The token holding key, or nil.
function _M.holder(zone, key, klen)
    local v = read(zone, key, klen)
    if type(v) ~= "string" then
        return nil
    end
    return (split(v))
end


-- syntax: elapsed, err = zone.block(zone, key, klen, tok, exp_ms, timeout,
--                                   step, ratio, max_step, stop?)
-- Waits outside nginx, after add found the key held: sleeps on the key's
-- wait word, at most one backoff step at a time (at least MIN_SLEEP: a
-- release wakes us anyway, so a shorter step only burns CPU) and never
-- past the deadline; elapsed is measured.  stop: called after every look
-- that found the key busy; an error it returns ends the wait with it
-- (nginx_wait.block: the key is held by this very worker).
function _M.block(zone, key, klen, tok, exp_ms, timeout, step, ratio,
                  max_step, stop)
    local hash = C.shmlock_hash(key, klen)

    local start = now_us()
    local deadline = start + timeout * 1000000
    local starve_at = start + _M.STARVE_AFTER * 1000000
    local since = floor(start / 1000)
    local till = floor(deadline / 1000)
    local marked = false
    local check = true      -- false: the last sleep was cut by a wake-up

    while true do
        -- counted as a waiter before looking: see shmlock_wait_begin
        local seq = C.shmlock_wait_begin(zone, hash)
        local now = now_us()
        local starving = now >= starve_at
        local got, err = look(zone, key, klen, tok, exp_ms, check,
                              starving and since or nil,
                              starving and till or nil)
        if got == ACQUIRED then
            C.shmlock_wait_end(zone, hash, seq, 0)
            return (now_us() - start) / 1000000
        end
        if got == FAILED then
            -- a mark of ours goes stale at our deadline: see "Giving up"
            C.shmlock_wait_end(zone, hash, seq, 0)
            if not check then
                C.shmlock_wake_waiters(zone, hash, 0)   -- pass it on
            end
            return nil, err
        end
        if got == MARKED then
            marked = true
        end

        now = now_us()
        local stopped = stop and stop()
        if stopped or now >= deadline then
            C.shmlock_wait_end(zone, hash, seq, 0)
            if not check then
                C.shmlock_wake_waiters(zone, hash, 0)   -- pass it on
            end
            if marked and withdraw(zone, key, klen, tok) then
                return (now_us() - start) / 1000000
            end
            return nil, stopped or "timeout"
        end

        -- at least 1 us: 0 would not sleep at all
        local us = ceil(min(max(step, MIN_SLEEP) * 1000000, deadline - now,
                            CHECK_EVERY_US))
        check = C.shmlock_wait_end(zone, hash, seq, us) == TIMEOUT
        step = next_step(step, ratio, max_step)
    end
end


return _M
