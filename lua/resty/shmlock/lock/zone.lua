-- resty.shmlock.lock.zone (internal): the lock backend of resty.shmlock
-- for our zones (the interface: see resty.shmlock; the store is the zone).
--
-- A zone's locks live in its lock slots (src/slot.h; the ABI:
-- shmlock_slot_* in src/shmlock.h), not among the dictionary's entries:
-- one 64-byte slot per key, kept after a release, whose state (owner and
-- stamp) changes by one 16-byte compare-and-swap.  The owner is the
-- holder's pid with an id of the acquisition (token.next_id: a 32-bit
-- number from the process's one counter, so no two lock objects of any
-- Lua VM of a process share one); the stamp holds the expiry, a serial
-- moved on by every change and the MARKED flag.  An acquire hands out a
-- ticket (the slot and the state it set), which the lock object's handle
-- (resty.shmlock.lock.handle, cd.tk) keeps: release and extend act only
-- while the slot is still in exactly that state, so a late holder can
-- never release or extend somebody else's lock, even one taken by
-- another lock object of its own process.
--
-- The `tok` of this backend's functions is that handle: cd.id is the
-- acquisition's id, cd.tk the ticket, written by whatever made the lock
-- ours (an acquire, a takeover, a handoff seen by a look).
--
-- Starvation mode (fairness).  A waiter that has waited STARVE_AFTER
-- becomes *starving*; it marks the held lock (shmlock_slot_mark: the
-- slot's mark record names it, with the exptime it asks for, when it
-- began to wait and its deadline, then MARKED is set in the state).  A
-- release of a marked lock fails (CHANGED), and the holder hands the lock
-- over: a swap of the state to the starver, so the key is never free in
-- between and nobody can barge in.  Only one mark at a time; a starving
-- waiter that has waited longer (smaller since) replaces a younger one's
-- mark.  So once starving, a waiter gets the lock after at most one
-- handoff per older concurrent waiter, plus one release race to place its
-- mark:
--
--     worst wait <= STARVE_AFTER + (W + 1) * (H + L)
--
-- W: concurrent waiters on the key, H: the longest hold, L: the time a
-- woken waiter needs to run (futex wake-up plus scheduling).  Waiters
-- inside nginx wait with resty.lock's ngx.sleep steps first (no mark: a
-- handoff to a sleeping poller would leave the lock idle for a step), but
-- cannot barge past a mark either: a marked lock is never free.  Once
-- queued (resty.shmlock.lock.nginx_wait) they mark too, polling every 1-2
-- ms; their mark asks for a short exptime (nginx_wait.ACCEPT), which the
-- waiter the lock reaches extends to the lock's (accept), so that a
-- handoff to a waiter nginx killed meanwhile lapses soon.
--
-- A mark changes the state's MARKED flag alone, keeping its serial: the
-- holder's ticket still names its lock (release and extend answer
-- CHANGED, "marked", rather than "not yours"), and clearing the mark gives
-- the holder's state back exactly.  An extend of a marked lock keeps the
-- mark (the holder's ticket follows the new state, without the flag).
--
-- Giving up.  A starver whose timeout passes withdraws its mark (a swap
-- that clears the flag) unless the lock reached it.  Its deadline is in
-- the mark: from then on the mark is stale, whether or not the withdrawal
-- worked.  A release does not hand the lock to a stale mark (it clears the
-- mark and frees the key), a dead holder's lock is not handed to it, and
-- any starver may replace it.  So a withdrawal that fails (a zone error)
-- cannot leave the key to an owner who stopped waiting.  A handoff before
-- the deadline reaches a starver still waiting: it finds the lock at its
-- next look, or when it looks to withdraw.
--
-- Expiry.  An expired lock is free: the next acquire takes it (an
-- acquire of an expired lock that is marked takes it too, dropping the
-- mark: its waiter marks again).  A holder whose lock expired and was not
-- taken meanwhile still releases it, and is told so: 1, "expired".
--
-- Bounded loops.  A swap that fails because the state moved (CHANGED) is
-- retried, at most RETRIES times; any other code (no memory, a broken
-- zone) is final and returned as it is (resty.shmlock.errors).  A
-- waiter's loop ends at its deadline; it never sleeps less than
-- backoff.MIN_SLEEP at a time, but the last sleep, cut to the deadline.
--
-- Waking.  Outside nginx a waiter sleeps on the key's wait word in the zone
-- (a futex).  It counts itself as a waiter and reads the word before it
-- looks at the key (shmlock_wait_begin), so a release in between cuts the
-- sleep short; a release bumps the word only when a waiter is counted, so
-- an uncontended unlock makes no further write.  A release wakes one
-- sleeper, not the herd (only one can take the key).  A marked waiter
-- sleeps on a wait word of its own (the key's hash, salted: marked_hash),
-- and a handoff wakes the sleepers of that word only: the starver it is
-- for, not the herd.  A waiter that finds its mark gone looks again at
-- once rather than sleep on that word, where a release would not wake
-- it.  A waiter woken that
-- leaves without the key (its deadline, stop(), an error) passes the
-- wake-up on to the next sleeper, so that none is lost while the key is
-- free; one lost all the same (a woken waiter killed before it looked)
-- costs the others at most CHECK_EVERY_US.  So does a handoff whose
-- releaser is killed after its swap and before its wake-up: the starver,
-- asleep on its own word, looks again within CHECK_EVERY_US and finds
-- the lock its own (see "Dead holders": even if the slot does not know
-- its process).
--
-- Dead holders.  A waiter that finds a holder whose process is gone
-- (shmlock_slot_alive: the pid, and its start time where the slot knows
-- it, so a reused pid is not taken for the holder) takes the key at once
-- (a swap from the dead holder's state), or hands it to a live starver
-- marked on it.  The holder's process is checked at the first look and
-- after every wait that no release cut short (those are at most
-- CHECK_EVERY_US long outside nginx; inside, every ngx.sleep step).  A
-- release does not hand the key to a starver whose process is gone.
--
-- A handoff writes the starver's process into the slot's hint after its
-- swap (src/slot.c, slot_swap_hint: a swap from a stale state must not
-- overwrite the holder's).  A releaser killed between the two leaves the
-- slot naming the starver as owner beside the releaser's process: the
-- owner's process unknown (its pid alone is asked whether it lives).  The
-- starver knows the lock for its own by the owner word then: its pid and
-- its id (ours_in_seen).  No other live process has our pid, and the id
-- is this acquisition's; the one other owner it could name is a dead
-- earlier process of our pid that drew the same id (ids come from random
-- blocks per process: token.next_id), whose lock a takeover would take
-- all the same.  A known hint of another start time stays a dead
-- process's: never ours.  The starver takes the lock at its next look
-- (or when it looks to withdraw) and writes its process again (a swap to
-- the same state: take_seen), so that the others judge it by its start
-- time again, not by its pid alone.  (Before, it took only a hint with
-- its start time for its own: it waited to its timeout, its mark on its
-- own lock, and the key stayed held, by its owner id, until the
-- handoff's exptime.)  The last reader out of shared holds hands the key
-- over with the starver's process written before its swap (src/group.c:
-- a head's hint is read by nobody), so that handoff leaves no such slot.
--
-- Shared holds (resty.shmlock.lock.shared) keep a head in the key's slot
-- whose pid is no process's (slots.is_head): never taken over as a dead
-- holder; at those same checks the key's dead readers are dropped
-- (shmlock_group_reclaim), the last of them handing the key to our mark.
-- A starver marks a head as any holder, and the last reader out hands the
-- key over as a release does.
--
-- Aborted waiters (inside nginx).  _M.gone(id) says whether the id of
-- this process is a queued waiter that nginx aborted (nginx_wait sets it;
-- elsewhere it answers false): such an owner is treated as a dead
-- process's, as holder (taken over) and as starver (not handed to,
-- replaced).
--
-- Bindings.  The algorithm is written once, here, over the slots'
-- primitives of this interpreter's binding (resty.shmlock.lock.slots: the
-- FFI's or the C module's).  Its calls keep the ABI's names and argument
-- order (C.shmlock_slot_acquire ...): under LuaJIT, C is the library
-- itself, so the hot paths (add, a release's first try) are the FFI calls
-- they always were; under PUC Lua, the C module's functions of the same
-- names.  Tickets and marks are read and made through the primitives.

local slots = require "resty.shmlock.lock.slots"
local errors = require "resty.shmlock.errors"
local codes = require "resty.shmlock.internal.codes"
local clock = require "resty.shmlock.internal.clock"
local core = require "resty.shmlock.internal.core"
local options = require "resty.shmlock.internal.options"
local backoff = require "resty.shmlock.internal.backoff"
local log_event = require("resty.shmlock.internal.log").event

local C = slots.C
local floor = math.floor
local ceil = math.ceil
local min = math.min
local max = math.max
local band = core.bit.band
local bxor = core.bit.bxor
local ms = options.ms
local cached_ms = clock.cached_ms
local now_us = clock.now_us
local now_ms = clock.now_ms
local self_pid = core.self_pid
local start32 = require("resty.shmlock.internal.token").start32
local owner = slots.owner
local ticket_start32 = slots.start32
local expiry_of = slots.expiry
local marked_in = slots.marked
local copy = slots.copy
local mark_owner = slots.mark_owner
local mark_times = slots.mark_times
local next_step = backoff.next
local MIN_SLEEP = backoff.MIN_SLEEP

local OK = codes.OK
local NOT_FOUND = codes.NOT_FOUND
local EXISTS = codes.EXISTS
local CHANGED = codes.CHANGED
local TIMEOUT = codes.TIMEOUT
local KEEP_TTL = codes.KEEP_TTL

-- a waiter sleeps at most this long between looks at the holder, so that
-- a holder that dies while we wait is noticed within it
local CHECK_EVERY_US = 100000

-- tries of a swap that keeps failing because the state moved
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


local SHARED = codes.SHARED
local AGAIN = codes.AGAIN
local GROUP_MAX = codes.GROUP_MAX
local is_head = slots.is_head    -- a shared holds' head (src/group.h)
local NEVER = 2 ^ 40 - 1        -- the expiry of a lock without one

_M.ticket_t = slots.ticket_t            -- (FFI only)
_M.TICKET_SIZE = slots.TICKET_SIZE

-- scratch space for the C calls, allocated once; each is filled right
-- before its call (no allocation in between, so no GC finalizer can run
-- and reuse it)
local seen = slots.ticket()             -- a look's: the slot's state
local moved = slots.ticket()            -- a swap's result we do not keep
local mark = slots.mark()               -- a mark read


-- syntax: pid, id, expiry, marked = zone.state(tk)
-- A ticket's state, as numbers: the owner's pid and id (0, 0: free), the
-- expiry (ms of the zone clock; zone.NEVER: none), whether it is marked.
_M.state = slots.state
_M.NEVER = NEVER


-- syntax: pid, id, exptime, since, till = zone.mark_of()
-- The mark zone.read_mark read last, as numbers (the starver's pid and
-- id, the exptime it asks for, when it began to wait, its deadline).
function _M.mark_of()
    return slots.mark_state(mark)
end


-- syntax: rc = zone.read_mark(zone, tk)
-- Reads the mark of the marked state tk (codes: OK, CHANGED: tk is not
-- the slot's state any more, or its mark is being written).
function _M.read_mark(zone, tk)
    return C.shmlock_slot_read_mark(zone, tk, mark)
end


-- whether the starver of the mark read last may still be waiting
local function waiting(now)
    local _, till = mark_times(mark)
    return till > now
end


-- syntax: tk = zone.holders_ticket()
-- A copy of the state the last look saw (zone.look_at), as its holder's
-- ticket (without the MARKED flag): a release with it is the holder's,
-- handing a marked lock over (`shmlock unlock`).
function _M.holders_ticket()
    local tk = slots.ticket()
    copy(tk, seen, false)
    return tk
end


-- whether the holder in seen is this process's waiter `id`, or a waiter
-- of this process that nginx aborted (see "Aborted waiters")
local function gone_owner(pid, id)
    return pid == self_pid() and _M.gone(id)
end


-- whether the mark read last is cd's (a waiter of this process)
local function marked_by(cd)
    local pid, id = mark_owner(mark)
    return id == cd.id and pid == self_pid()
end


-- whether the starver of the mark read last is alive
local function starver_alive()
    return slots.mark_alive(mark)
end


-- syntax: alive = zone.mark_alive()
-- Whether the starver of the mark zone.read_mark read last is alive.
_M.mark_alive = starver_alive


-- whether the lock may go to the starver of the mark read last
local function starver_ok(now)
    return waiting(now) and not gone_owner(mark_owner(mark))
           and starver_alive()
end


-- The wait word a marked waiter sleeps on: the key's hash with this
-- salt, so that a handoff wakes the marked waiter (and whoever shares that
-- word), not every waiter of the key (see "Waking").
local MARKED_SALT = 0x5bd1e995

local function marked_hash(hash)
    return band(bxor(hash, MARKED_SALT), 0xffffffff) % 4294967296
end
_M.marked_hash = marked_hash


-- handoff: the lock went to the marked waiter: wake it on its own word;
-- else one sleeper of the key is woken (see "Waking")
local function wake(zone, hash, handoff)
    if handoff then
        C.shmlock_wake_waiters(zone, marked_hash(hash), 1)
    else
        C.shmlock_wake_waiters(zone, hash, 0)
    end
end


-- syntax: expiry = zone.expiry(seconds)
-- The exptime as add and look take it: milliseconds.
_M.expiry = ms


-- syntax: gone = zone.gone(id)
-- Whether id, of this process, is a waiter known to be gone (see "Aborted
-- waiters"); resty.shmlock.lock.nginx_wait replaces it inside nginx.
function _M.gone()
    return false
end


-- syntax: key = zone.ident(cd)
-- The key nginx_wait's registry knows a waiter by: its id.
function _M.ident(cd)
    return cd.id
end


-- syntax: ok, err = zone.add(zone, key, klen, cd, _, exp_ms)
-- true: acquired (cd.tk: our ticket); false: held by someone; nil, err:
-- the zone said no.
function _M.add(zone, key, klen, cd, _, exp_ms)
    local rc = C.shmlock_slot_acquire(zone, key, klen, cd.id, exp_ms,
                                      cached_ms(), cd.tk)
    if rc == OK then
        return true
    end
    if rc == EXISTS then
        return false
    end
    return nil, errors[rc]
end


-- syntax: ok, err = zone.release(zone, tk)
-- Releases the lock of ticket tk (a handle's): 1; 1, "expired" when it
-- had expired (released all the same if nobody took it meanwhile; else
-- the key is left untouched: 1, as resty.lock's unlock answers, so that a
-- caller such as lua-resty-mlcache keeps the value it computed); nil, err
-- when the zone failed (the key may still be ours).  A marked lock is
-- handed to its starver, or its stale mark dropped and the key freed.
local function release(zone, tk)
    for _ = 1, RETRIES do
        local rc = C.shmlock_slot_release(zone, tk)
        if rc == OK then
            return 1
        end
        if rc == NOT_FOUND then
            return 1, "expired"
        end
        if rc ~= CHANGED then
            return nil, errors[rc]
        end
        -- marked: our state with the flag
        copy(seen, tk, true)
        rc = C.shmlock_slot_read_mark(zone, seen, mark)
        if rc == OK then
            if starver_ok(now_ms()) then
                rc = slots.swap_to_mark(zone, seen, mark, moved)
                if rc == OK then
                    wake(zone, slots.hash(seen), true)
                    return 1
                end
            else
                -- a stale mark: cleared, which gives our state back
                rc = slots.swap_keep(zone, seen, false, KEEP_TTL, moved)
            end
        end
        if rc ~= OK and rc ~= CHANGED then
            return nil, errors[rc]
        end
        -- the mark moved meanwhile (or we cleared it): again
    end
    return nil, errors[CHANGED]
end
_M.release = release


-- A marked lock of ours gets a new expiry: the marked state's, keeping
-- the mark; our ticket follows (without the flag).  The codes.
local function extend_marked(zone, cd, exp_ms)
    copy(seen, cd.tk, true)
    local rc = slots.swap_keep(zone, seen, true, exp_ms, moved)
    if rc == OK then
        copy(cd.tk, moved, false)
    end
    return rc
end


-- our lock (cd.tk) gets a new expiry: the codes, OK, NOT_FOUND (not
-- ours), or the zone's
local function extend(zone, cd, exp_ms)
    for _ = 1, RETRIES do
        local rc = C.shmlock_slot_extend(zone, cd.tk, exp_ms, 0)
        if rc ~= CHANGED then
            return rc
        end
        rc = extend_marked(zone, cd, exp_ms)
        if rc ~= CHANGED then
            return rc
        end
    end
    return CHANGED
end


-- syntax: ok, err = zone.renew(zone, cd, seconds)
-- A new expiry for our lock, keeping a starver's mark: true; nil,
-- "expired"; nil, err when the zone failed (still ours).
function _M.renew(zone, cd, seconds)
    local rc = extend(zone, cd, ms(seconds))
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
-- for) makes it its own for exp_ms, keeping a mark placed since.  false
-- when the lock is no longer ours (the handoff lapsed); nil, err when the
-- zone failed (the key is left to its short exptime).
function _M.accept(zone, _, _, cd, exp_ms)
    local rc = extend(zone, cd, exp_ms)
    if rc == OK then
        return true
    end
    if rc == NOT_FOUND then
        return false
    end
    return nil, errors[rc]
end


-- syntax: rc = zone.look_at(zone, key, klen)
-- The state of key's slot, into the scratch ticket zone.seen (codes: OK,
-- NOT_FOUND when the key never had a slot, or the zone's).
local function look_at(zone, key, klen)
    return C.shmlock_slot_look(zone, key, klen, seen)
end
_M.look_at = look_at
_M.seen = seen


-- whether seen (a look's) holds a lock of ours (cd): our owner (pid and
-- id), and the slot's hint our process by its start time, so that a
-- process that reuses a pid never takes for its own a lock of its earlier
-- owner's that the slot knows; or the hint unknown (0: not of our pid),
-- as a handoff leaves it until the releaser writes our process, and for
-- good if the releaser died in between (see "Dead holders"): the one
-- live process of our pid is this one, and our id is cd's alone
local function ours_in_seen(cd, pid, id)
    if id ~= cd.id or pid ~= self_pid() then
        return false
    end
    local s = ticket_start32(seen)
    return s == start32() or s == 0
end


-- seen is ours (ours_in_seen): cd.tk becomes its ticket.  A hint
-- unknown is written again (a swap to the same state: our process goes
-- in, src/slot.c's slot_swap_hint), so that the others judge us by our
-- start time again, not by our pid alone; if the state moved meanwhile
-- (a mark placed), the hint stays unknown and the lock ours.
local function take_seen(zone, cd)
    if ticket_start32(seen) == 0
       and slots.swap_keep(zone, seen, marked_in(seen), KEEP_TTL, moved) == OK
    then
        copy(cd.tk, moved, false)
    else
        copy(cd.tk, seen, false)
    end
end


-- syntax: held = zone.holds(zone, key, klen, cd)
function _M.holds(zone, key, klen, cd)
    if look_at(zone, key, klen) ~= OK then
        return false
    end
    return ours_in_seen(cd, owner(seen)) and expiry_of(seen) > now_ms()
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
local group_tickets = _M.group_tickets

-- whether one of key's live shared holds is this process's
local function shared_here(zone, key, klen)
    local list, count = group_tickets(zone, SHARED, key, klen)
    if not list then
        return false
    end
    local me = self_pid()
    for i = 1, count do
        if owner(list[i]) == me then
            return true
        end
    end
    return false
end


-- syntax: here = zone.here(zone, key, klen, shared?)
-- Whether a wait for key could only end by a release of this very process
-- (which cannot come while the process blocks): key held exclusive by
-- it; or, for an exclusive waiter, a shared hold of it among the key's
-- readers (a writer waits for every reader); for a shared waiter
-- (shared), a hold of it among the readers while a writer's mark keeps
-- new readers out (that writer waits for this process's hold).
function _M.here(zone, key, klen, shared)
    if look_at(zone, key, klen) ~= OK then
        return false
    end
    local pid, id = owner(seen)
    if is_head(pid) then
        if shared and not marked_in(seen) then
            return false
        end
        return shared_here(zone, key, klen)
    end
    return pid == self_pid() and id ~= 0 and expiry_of(seen) > now_ms()
end


-- the key is free, or freed since our add: one more try
local function again(zone, key, klen, cd, exp_ms)
    local rc = C.shmlock_slot_acquire(zone, key, klen, cd.id, exp_ms,
                                      cached_ms(), cd.tk)
    if rc == OK then
        return ACQUIRED
    end
    if rc ~= EXISTS then
        return FAILED, errors[rc]
    end
    return BUSY
end


-- The lock in seen is ours to take (its holder is dead, or it expired
-- with a mark on it): take it, or give it to a live starver still waiting
-- (has_mark: the mark was read).  An operator may want to know of a dead
-- holder (a notice).
local function take_over(zone, key, cd, exp_ms, has_mark, dead)
    local to_starver = has_mark and not marked_by(cd)
                       and starver_ok(now_ms())
    local rc
    if to_starver then
        rc = slots.swap_to_mark(zone, seen, mark, moved)
    else
        rc = slots.swap_to(zone, seen, cd.id, exp_ms, cd.tk)
    end
    if rc ~= OK then
        if rc == CHANGED then
            return BUSY
        end
        return FAILED, errors[rc]
    end
    wake(zone, slots.hash(seen), to_starver)
    if dead then
        local pid, id = owner(seen)
        local aborted = gone_owner(pid, id)
        log_event("notice", 'lock "' .. key .. '": '
                  .. (aborted and "an aborted waiter of process "
                      or "holder process ")
                  .. pid .. (aborted and "" or " is dead")
                  .. "; its lock "
                  .. (to_starver and "handed to the next waiter"
                      or "taken over"))
    end
    return to_starver and BUSY or ACQUIRED
end


local function place_mark(zone, cd, ask, since, till)
    if slots.place_mark(zone, seen, cd.id, ask, since, till, moved) == OK then
        return MARKED
    end
    return BUSY
end


-- syntax: outcome, err = zone.look(zone, key, klen, cd, exp_ms,
--                                  check, since, till, ask)
-- One look at a key our add found busy.  check: ask whether the holder's
-- process lives (a holder that took the key since our last look was alive
-- a moment ago: not worth a /proc read); since, till: our wait start and
-- deadline in ms if we are starving (may mark the lock), else nil; ask:
-- the exptime (ms) our mark asks for, if not exp_ms (a waiter that then
-- finds the key handed to it extends it: accept).  ACQUIRED: cd.tk is our
-- ticket.  FAILED comes with the zone's error.
local function look(zone, key, klen, cd, exp_ms, check, since, till, ask)
    local rc = look_at(zone, key, klen)
    if rc == NOT_FOUND then
        return again(zone, key, klen, cd, exp_ms)
    end
    if rc ~= OK then
        return FAILED, errors[rc]
    end
    local pid, id = owner(seen)
    if pid == 0 and id == 0 then
        return again(zone, key, klen, cd, exp_ms)
    end
    if check and is_head(pid) then
        -- shared holds (resty.shmlock.lock.shared): their head is no
        -- process; dead readers are dropped (the last hands the key to our
        -- mark, or frees it), then we look again
        slots.group_reclaim(zone, SHARED, key, klen)
        return _M.look(zone, key, klen, cd, exp_ms, false, since, till, ask)
    end
    if ours_in_seen(cd, pid, id) then
        -- handed over to us (and maybe marked by the next starver already)
        take_seen(zone, cd)
        return ACQUIRED
    end
    local is_marked = marked_in(seen)
    if expiry_of(seen) <= now_ms() then
        -- expired: free; a mark on it is dropped (its waiter marks again)
        if is_marked then
            return take_over(zone, key, cd, exp_ms, false, false)
        end
        return again(zone, key, klen, cd, exp_ms)
    end
    local has_mark = is_marked
                     and C.shmlock_slot_read_mark(zone, seen, mark) == OK
    if (check and C.shmlock_slot_alive(seen) == 0) or gone_owner(pid, id) then
        return take_over(zone, key, cd, exp_ms, has_mark, true)
    end
    if has_mark and marked_by(cd) then
        return MARKED
    end
    if since and (is_marked and not has_mark) then
        return BUSY     -- a mark being written: look again
    end
    if since
       and (not has_mark or mark_times(mark) > since
            or not waiting(now_ms())
            or gone_owner(mark_owner(mark))
            or (check and not starver_alive()))
    then
        return place_mark(zone, cd, ask or exp_ms, since, till)
    end
    return BUSY
end
_M.look = look


-- syntax: got = zone.withdraw(zone, key, klen, cd)
-- A starver giving up: remove its mark, unless the lock reached it.
-- true if we hold the lock after all (cd.tk).  A mark it fails to remove
-- (the zone failed) is stale from our deadline on: see "Giving up" above.
function _M.withdraw(zone, key, klen, cd)
    for _ = 1, RETRIES do
        if look_at(zone, key, klen) ~= OK then
            return false
        end
        if ours_in_seen(cd, owner(seen)) then
            take_seen(zone, cd)
            return true
        end
        if not marked_in(seen) then
            return false
        end
        local rc = C.shmlock_slot_read_mark(zone, seen, mark)
        if rc == OK then
            if not marked_by(cd) then
                return false
            end
            rc = slots.swap_keep(zone, seen, false, KEEP_TTL, moved)
        end
        if rc ~= CHANGED then
            return false
        end
    end
    return false
end


-- syntax: elapsed, err = zone.block(zone, key, klen, cd, exp_ms, timeout,
--                                   step, ratio, max_step, stop?)
-- Waits outside nginx, after add found the key held: sleeps on the key's
-- wait word, at most one backoff step at a time (at least MIN_SLEEP: a
-- release wakes us anyway, so a shorter step only burns CPU) and never
-- past the deadline; elapsed is measured.  stop: called after every look
-- that found the key busy; an error it returns ends the wait with it
-- (nginx_wait.block: the key is held by this very worker).  cd.tk: our
-- ticket when we got the lock.
function _M.block(zone, key, klen, cd, exp_ms, timeout, step, ratio,
                  max_step, stop)
    local hash = C.shmlock_hash(key, klen)

    local start = now_us()
    local deadline = start + timeout * 1000000
    local starve_at = start + _M.STARVE_AFTER * 1000000
    local since = floor(start / 1000)
    local till = floor(deadline / 1000)
    local marked = false
    local check = true      -- false: the last sleep was cut by a wake-up

    local on = hash         -- the word this round sleeps on
    while true do
        -- counted as a waiter before looking: see shmlock_wait_begin
        local seq = C.shmlock_wait_begin(zone, on)
        local now = now_us()
        local starving = now >= starve_at
        local got, err = look(zone, key, klen, cd, exp_ms, check,
                              starving and since or nil,
                              starving and till or nil)
        if got == ACQUIRED then
            C.shmlock_wait_end(zone, on, seq, 0)
            return (now_us() - start) / 1000000
        end
        if got == FAILED then
            -- a mark of ours goes stale at our deadline: see "Giving up"
            C.shmlock_wait_end(zone, on, seq, 0)
            if not check and on == hash then
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
            C.shmlock_wait_end(zone, on, seq, 0)
            if not check and on == hash then
                C.shmlock_wake_waiters(zone, hash, 0)   -- pass it on
            end
            if marked and _M.withdraw(zone, key, klen, cd) then
                return (now_us() - start) / 1000000
            end
            return nil, stopped or "timeout"
        end

        local next_on = got == MARKED and marked_hash(hash) or hash
        if next_on ~= on then
            -- marked now, or no longer: the next round waits on the other
            -- word, looking first (a wake-up meant for us may have gone to
            -- the word we leave)
            C.shmlock_wait_end(zone, on, seq, 0)
            on = next_on
            check = false
        else
            -- at least 1 us: 0 would not sleep at all
            local us = ceil(min(max(step, MIN_SLEEP) * 1000000,
                                deadline - now, CHECK_EVERY_US))
            check = C.shmlock_wait_end(zone, on, seq, us) == TIMEOUT
            step = next_step(step, ratio, max_step)
        end
    end
end


return _M
