-- resty.shmlock.lock.zone (internal): the lock backend of resty.shmlock
-- for our zones (the interface: see resty.shmlock; the store is the zone).
--
-- The algorithm is the C core's (src/shmlock_lock.c: owner ids, the
-- ticket as a hint, dead holders, starvation marks and handoffs, expiry,
-- the wait outside nginx); each step here is one call of it
-- (shmlock_lock_*, through this interpreter's binding: the FFI, or the C
-- module's src/lua/lock.c under PUC Lua, resty.shmlock.lock.slots).  This
-- file maps its answers to the backend's, and tells the core the one thing
-- it cannot know: whether a waiter of this process that nginx aborted is
-- gone (_M.gone, which resty.shmlock.lock.wait replaces inside
-- nginx; the core asks, SHMLOCK_ASK, and is answered).
--
-- The `tok` of this backend's functions is the lock object's record, a
-- shmlock_lock_t (cd): its zone, its ticket, the acquisition's owner id,
-- whether it holds.
--
-- It also keeps the slots' read-only helpers the other modules use (a
-- key's slot state, its mark, the holders of a group), for inspection.

local slots = require "resty.shmlock.lock.slots"
local errors = require "resty.shmlock.errors"
local codes = require "resty.shmlock.internal.codes"
local clock = require "resty.shmlock.internal.clock"
local core = require "resty.shmlock.internal.core"
local options = require "resty.shmlock.internal.options"
local log_event = require("resty.shmlock.internal.log").event

local C = slots.C
local L = slots.lock
local min = math.min
local floor = math.floor
local band = core.bit.band
local bxor = core.bit.bxor
local ms = options.ms
local cached_ms = clock.cached_ms
local now_us = clock.now_us

local OK = codes.OK
local EXISTS = codes.EXISTS
local NOT_FOUND = codes.NOT_FOUND
local TIMEOUT = codes.TIMEOUT
local BUSY_RC = codes.BUSY
local ASK = codes.ASK
local AGAIN = codes.AGAIN
local GROUP_MAX = codes.GROUP_MAX
local LOOK_CHECK = codes.LOOK_CHECK
local LOOK_ASK = codes.LOOK_ASK
local LOOK_HERE = codes.LOOK_HERE

-- outcomes of one look at a busy key
-- (FAILED: the zone answered an error, given with it: a destroyed or
-- corrupt zone, no memory to take a free key; the wait ends with it)
local BUSY, ACQUIRED, MARKED, FAILED = 0, 1, 2, 3

local _M = {
    BUSY = BUSY, ACQUIRED = ACQUIRED, MARKED = MARKED, FAILED = FAILED,
    -- seconds of waiting after which a waiter starts starvation mode
    -- (src/shmlock_lock.c's LOCK_STARVE_AFTER_US)
    STARVE_AFTER = 0.002,
}

local NEVER = 2 ^ 40 - 1        -- the expiry of a lock without one
_M.NEVER = NEVER

-- asks tries: an answer per owner of this process a decision needs (a
-- holder and a mark's waiter: two at most), then again
local ASKS = 4


-- syntax: gone = zone.gone(id)
-- Whether id, of this process, is a waiter known to be gone (nginx
-- aborted it): the wait module's registry answers, inside nginx
-- (zone.on_gone); else none is.
local gone_of = function()
    return false
end

function _M.gone(id)
    return gone_of(id)
end

-- syntax: zone.on_gone(fn): fn(id) answers zone.gone from now on
function _M.on_gone(fn)
    gone_of = fn
end

-- whether some owner of this process may be gone: only inside nginx
-- (lock.wait's queued waiters)
local ASK_FLAG = require("resty.shmlock.internal.nginx").api() and LOOK_ASK
                 or 0


-- A call of the core that may ask whether an owner of this process is
-- gone: asked and answered until it decides.  call(cd, ...) -> rc
local function decided(call, cd, ...)
    local rc = call(cd, ...)
    if rc ~= ASK then
        return rc
    end
    for _ = 1, ASKS do
        L.verdict(cd, _M.gone(cd.ask) and true or false)
        rc = call(cd, ...)
        if rc ~= ASK then
            break
        end
    end
    L.verdict(cd, nil)
    return rc
end
-- (for the shared holds' calls too: resty.shmlock.lock.shared)
_M.decided = decided


-- syntax: rc, us = zone.waited(wait, cd, key, klen, exp_ms, timeout, step,
--                              ratio, max_step, stop?)
-- The core's wait outside nginx, wait(cd, ...) (L.wait, L.shared_wait),
-- asked and answered as decided() is; its start is now.
local function waited(wait, cd, key, klen, exp_ms, timeout, step, ratio,
                      max_step, stop)
    local flags = (stop and LOOK_HERE or 0) + ASK_FLAG
    local start = now_us()
    local rc, us
    for i = 1, ASKS do
        rc, us = wait(cd, key, klen, exp_ms, start, floor(timeout * 1e6),
                      step, ratio, max_step, flags)
        if rc ~= ASK or i == ASKS then
            break
        end
        L.verdict(cd, _M.gone(cd.ask) and true or false)
    end
    L.verdict(cd, nil)
    return rc, us
end
_M.waited = waited


-- syntax: elapsed, err = zone.answer(rc, us, stop?)
-- A blocking wait's end as block() returns it: the seconds waited, or
-- nil and "timeout", stop()'s refusal (the key held by this very
-- process), or the core's error.
local function answer(rc, us, stop)
    if rc == OK then
        return us / 1000000
    end
    if rc == TIMEOUT then
        return nil, "timeout"
    end
    if rc == BUSY_RC then
        return nil, stop and stop() or "timeout"
    end
    return nil, errors[rc]
end
_M.answer = answer
_M.ASK_FLAG = ASK_FLAG
_M.ASKS = ASKS


-- syntax: zone.dead_notice(key, pid, to)
-- Tells the operator of a dead holder's lock a call took over (to: 1
-- handed on to the next waiter, 2 an aborted waiter's, as
-- shmlock_lock_t's dead_to).
local function dead_notice(key, pid, to)
    local aborted = band(to, 2) ~= 0
    log_event("notice", 'lock "' .. key .. '": '
              .. (aborted and "an aborted waiter of process "
                  or "holder process ")
              .. pid .. (aborted and "" or " is dead") .. "; its lock "
              .. (band(to, 1) ~= 0 and "handed to the next waiter"
                  or "taken over"))
end
_M.dead_notice = dead_notice

-- a dead holder the last call took over, told to the operator
local function report_dead(cd, key)
    local pid, to = L.dead(cd)
    if pid ~= 0 then
        dead_notice(key, pid, to)
    end
end


-- syntax: cd = zone.handle(zone)
-- A fresh record for a lock object's acquisitions in zone.
_M.handle = L.new


-- syntax: expiry = zone.expiry(seconds)
-- The exptime as the calls take it: milliseconds.
_M.expiry = ms


-- syntax: key = zone.ident(cd)
-- The key lock.wait's registry knows a waiter by: its owner id.
function _M.ident(cd)
    return cd.id
end


-- the outcome of a look's rc
local function outcome(cd, key, rc)
    report_dead(cd, key)
    if rc == OK then
        return ACQUIRED
    end
    if rc == EXISTS then
        return cd.marked ~= 0 and MARKED or BUSY
    end
    return FAILED, errors[rc]
end


-- syntax: ok, err = zone.add(zone, key, klen, cd, _, exp_ms)
-- Another try for a waiter (cd's owner id, drawn by its first acquire):
-- true: ours; false: held by someone; nil, err: the zone said no.
function _M.add(_, key, klen, cd, _, exp_ms)
    local rc = L.retry(cd, key, klen, exp_ms, cached_ms())
    if rc == OK then
        return true
    end
    if rc == EXISTS then
        return false
    end
    return nil, errors[rc]
end


-- syntax: outcome, err = zone.look(zone, key, klen, cd, exp_ms,
--                                  check, since, till, ask)
-- One look at a key found busy.  check: ask whether the holder's process
-- lives (a /proc read); since, till: our wait start and deadline in ms if
-- we are starving (may mark the lock), else nil; ask: the exptime (ms)
-- our mark asks for, if not exp_ms.  ACQUIRED, BUSY, MARKED (our mark is
-- on the key), FAILED with the zone's error.
function _M.look(_, key, klen, cd, exp_ms, check, since, till, ask)
    local rc = decided(L.look, cd, key, klen, exp_ms,
                       (check and LOOK_CHECK or 0) + ASK_FLAG, since,
                       till, ask)
    return outcome(cd, key, rc)
end


-- syntax: ok, err = zone.release(zone, cd)
-- Releases cd's lock (a marked one handed to its waiter): 1; 1, "expired"
-- when it had expired and was taken; nil, err when the zone failed (the
-- key may still be ours).
local lock_release = L.release
function _M.release(_, cd)
    -- (the call itself first: only a lock handed on may ask; OK first,
    -- one compare on the pair's path)
    local rc = lock_release(cd, ASK_FLAG)
    if rc == OK then
        return 1
    end
    if rc == ASK then
        rc = decided(lock_release, cd, ASK_FLAG)
    end
    if rc == OK then
        return 1
    end
    if rc == NOT_FOUND then
        return 1, "expired"
    end
    return nil, errors[rc]
end


-- syntax: ok, err = zone.renew(zone, cd, seconds)
-- A new expiry for our lock, keeping a starver's mark: true; nil,
-- "expired"; nil, err when the zone failed (still ours).
function _M.renew(_, cd, seconds)
    local rc = L.extend(cd, ms(seconds))
    if rc == OK then
        return true
    end
    if rc == NOT_FOUND then
        return nil, "expired"
    end
    return nil, errors[rc]
end


-- syntax: ok, err = zone.accept(zone, key, klen, cd, exp_ms)
-- A waiter the lock was handed to (with the short exptime its mark asked
-- for) makes it its own for exp_ms.  false when the lock is no longer
-- ours (the handoff lapsed); nil, err when the zone failed.
function _M.accept(_, _, _, cd, exp_ms)
    local rc = L.extend(cd, exp_ms)
    if rc == OK then
        return true
    end
    if rc == NOT_FOUND then
        return false
    end
    return nil, errors[rc]
end


-- syntax: got = zone.withdraw(zone, key, klen, cd)
-- A starver giving up: its mark removed, unless the lock reached it
-- (true: ours after all).
function _M.withdraw(_, key, klen, cd)
    return L.withdraw(cd, key, klen) == OK
end


-- syntax: held = zone.holds(zone, key, klen, cd)
function _M.holds(_, key, klen, cd)
    return L.holds(cd, key, klen)
end


-- syntax: here = zone.here(zone, key, klen, shared?)
-- Whether a wait for key could only end by a release of this very process
-- (which cannot come while the process blocks): key held exclusive by
-- it; or, for an exclusive waiter, a shared hold of it among the key's
-- readers (a writer waits for every reader); for a shared waiter
-- (shared), a hold of it among the readers while a writer's mark keeps
-- new readers out.
function _M.here(zone, key, klen, shared)
    return L.here(zone, key, klen, shared)
end


-- syntax: elapsed, err = zone.block(zone, key, klen, cd, exp_ms, timeout,
--                                   step, ratio, max_step, stop?)
-- Waits outside nginx (or where an nginx phase cannot yield), after the
-- acquire found the key held: the core's wait (a futex on the key's wait
-- word, woken by the release; starvation mode; dead holders).  stop: a
-- blocking nginx phase's refusal, called when the key turns out held by
-- this very process (the core stops then).
function _M.block(_, key, klen, cd, exp_ms, timeout, step, ratio, max_step,
                  stop)
    local rc, us = waited(L.wait, cd, key, klen, exp_ms, timeout, step, ratio,
                          max_step, stop)
    report_dead(cd, key)
    return answer(rc, us, stop)
end


-- ---------------------------------------------------------------------
-- The slots, read only (inspection, shared holds, the semaphore, the CLI).

-- scratch space for the C calls, allocated once; each is filled right
-- before its call (no allocation in between, so no GC finalizer can run
-- and reuse it)
local mark = slots.mark()               -- a mark read


-- syntax: pid, id, expiry, marked = zone.state(tk)
-- A ticket's state, as numbers: the owner's pid and id (0, 0: free), the
-- expiry (ms of the zone clock; zone.NEVER: none), whether it is marked.
_M.state = slots.state


-- syntax: rc, tk = zone.look_at(zone, key, klen)
-- The state of key's slot now, a ticket of its own (codes: OK, NOT_FOUND
-- when the key never had a slot, or the zone's).
function _M.look_at(zone, key, klen)
    local tk = slots.ticket()
    return C.shmlock_slot_look(zone, key, klen, tk), tk
end


-- syntax: rc = zone.read_mark(zone, tk)
-- Reads the mark of the marked state tk (codes: OK, CHANGED: tk is not
-- the slot's state any more, or its mark is being written).
function _M.read_mark(zone, tk)
    return C.shmlock_slot_read_mark(zone, tk, mark)
end


-- syntax: pid, id, exptime, since, till = zone.mark_of()
-- The mark zone.read_mark read last, as numbers.
function _M.mark_of()
    return slots.mark_state(mark)
end


-- syntax: alive = zone.mark_alive()
-- Whether the starver of the mark zone.read_mark read last is alive.
function _M.mark_alive()
    return slots.mark_alive(mark)
end


-- The wait word a marked waiter sleeps on: the key's hash with this
-- salt (src/shmlock_lock.c), so that a handoff wakes the marked waiter,
-- not every waiter of the key.
local MARKED_SALT = 0x5bd1e995

function _M.marked_hash(hash)
    return band(bxor(hash, MARKED_SALT), 0xffffffff) % 4294967296
end


-- syntax: ok, err = zone.release_seen(zone, tk)
-- Releases the lock a look_at saw (tk, its state), as its holder would
-- (handed to a marked waiter): `shmlock unlock`.  1; 1, "expired"; nil,
-- err.
function _M.release_seen(zone, tk)
    local cd = L.new(zone)
    slots.copy(cd.tk, tk, false)
    return _M.release(zone, cd)
end


-- holders' tickets read at a time (more: again, with room for them all)
local HOLDERS_BATCH = 64

-- syntax: list, count = zone.group_tickets(zone, kind, key, klen)
-- The tickets of every holder of key's group of kind (SHARED, SEMAPHORE)
-- now, and how many; nil and the zone's code.
function _M.group_tickets(zone, kind, key, klen)
    local n = HOLDERS_BATCH
    while true do
        local rc, count, list = slots.group_holders(zone, kind, key, klen, n)
        if rc == OK then
            return list, count
        end
        if rc ~= AGAIN or n >= GROUP_MAX then
            return nil, rc
        end
        -- more holders than the batch: again, with room for them all
        -- (bounded: a key has at most GROUP_MAX holders)
        n = min(count + 16, GROUP_MAX)
    end
end


-- syntax: rc = zone.acquire(cd, key, klen, exp_ms)
-- The first try of an acquisition (a fresh owner id; the last ticket a
-- hint): the codes.
function _M.acquire(cd, key, klen, exp_ms)
    return L.acquire(cd, key, klen, exp_ms, cached_ms())
end


return _M
