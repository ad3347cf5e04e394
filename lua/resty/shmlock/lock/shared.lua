-- resty.shmlock.lock.shared (internal): shared (reader) holds of a lock
-- key, lock:lock_shared(key, timeout?) of resty.shmlock (docs/lock.md).
--
-- The holds are the C core's holder groups of kind SHMLOCK_SHARED
-- (src/group.h draws them; the ABI: shmlock_group_* in src/shmlock.h):
-- one record slot per reader, counted by a head that is the key's own
-- lock slot, so that the exclusive lock (resty.shmlock.lock.zone) and the
-- readers each find the other held.  As many readers as the key's shard
-- has slots for (then "no memory", at once); none while an exclusive
-- holder holds; an exclusive waiter that marks the slot
-- (zone.lua's starvation mode) keeps new readers out, and the last reader
-- out hands the key to it.  Readers never mark: a stream of writers may
-- keep a reader waiting (to its timeout), never the other way round.
--
-- This file is also a lock backend, as resty.shmlock.lock.zone is (the
-- interface: see resty.shmlock), so that resty.shmlock.lock.wait
-- waits for a shared hold with the lock's own rules (resty.lock's steps,
-- then the queue; blocking_timeout where the phase cannot yield).  Its
-- `tok` is the hold's handle below; readers place no mark, so it has no
-- accept or withdraw.
--
-- The handle: kept in the lock object's `sh` field from its first shared
-- hold on, and reused by the next (a collected object releases the hold
-- it has); it keeps the pid that took the hold, so that a copy in a
-- forked child holds nothing there (token.ours), and its zone.  One per
-- binding: resty.shmlock.lock.shared.handle (LuaJIT: a cdata with a
-- finalizer) and .handle.capi (PUC Lua: a table with __gc, a userdata
-- proxy under 5.1).
--
-- Bindings.  The logic is written once, here, over the lock slots'
-- primitives of this interpreter's binding (resty.shmlock.lock.slots):
-- its calls keep the ABI's names and argument order (C.shmlock_group_*,
-- the wait words); under LuaJIT C is the library itself, so a hold's
-- acquire and release are the FFI calls, nothing in between; under PUC
-- Lua, the C module's functions of the same names (src/lua/lock.c).
-- Tickets are read through the primitives (slots.owner, .hash, .state).
--
-- A writer that marked the key and then died (or, inside nginx, was
-- aborted, or gave up without withdrawing its mark) would keep readers
-- out until its deadline: a reader's look for dead holders clears such a
-- mark (as a release or another writer would).
--
-- Waking.  Outside nginx a shared waiter sleeps on the key's wait word,
-- as the exclusive lock's waiters do: an exclusive release wakes one, and
-- a reader that gets in wakes the next (shmlock_group_acquire).  A reader
-- release wakes one sleeper of the key, every one after a handoff; and,
-- here, the marked word of the key (zone.marked_hash), where a marked
-- exclusive waiter sleeps (one load when nobody sleeps there).  A waiter
-- whose sleep no release cut short drops dead holders
-- (shmlock_group_reclaim: dead readers, and a dead exclusive holder).

local slots = require "resty.shmlock.lock.slots"
local core = require "resty.shmlock.internal.core"
local shared_handle = core.ffi and require "resty.shmlock.lock.shared.handle"
                      or require "resty.shmlock.lock.shared.handle.capi"
local errors = require "resty.shmlock.errors"
local codes = require "resty.shmlock.internal.codes"
local clock = require "resty.shmlock.internal.clock"
local token = require "resty.shmlock.internal.token"
local backoff = require "resty.shmlock.internal.backoff"
local options = require "resty.shmlock.internal.options"
local zone_backend = require "resty.shmlock.lock.zone"

local C = slots.C
local ceil = math.ceil
local min = math.min
local max = math.max
local now_us = clock.now_us
local ours = token.ours
local self_pid = token.self
local next_id = token.next_id
local next_step = backoff.next
local MIN_SLEEP = backoff.MIN_SLEEP
local marked_hash = zone_backend.marked_hash
local look_at = zone_backend.look_at
local seen = zone_backend.seen
local state = zone_backend.state
local read_mark = zone_backend.read_mark
local mark_of = zone_backend.mark_of
local mark_alive = zone_backend.mark_alive
local now_ms = clock.now_ms
local hash_of = slots.hash
local owner = slots.owner
local take = shared_handle.take

local OK = codes.OK
local NOT_FOUND = codes.NOT_FOUND
local EXISTS = codes.EXISTS
local TIMEOUT = codes.TIMEOUT
local KEEP_TTL = codes.KEEP_TTL
local SHARED = codes.SHARED
local ACQUIRED = zone_backend.ACQUIRED
local BUSY = zone_backend.BUSY
local FAILED = zone_backend.FAILED

-- a waiter sleeps at most this long between looks for dead holders
local CHECK_EVERY_US = 100000

local _M = {}

local moved = slots.ticket()    -- a swap's result, not kept


-- the hold of cd given back: the codes
local function release(cd)
    cd.held = 0
    local zone = cd.zone
    local rc = C.shmlock_group_release(zone, SHARED, cd.key, cd.key_len,
                                       cd.tk)
    -- a marked exclusive waiter sleeps on a word of its own
    C.shmlock_wake_waiters(zone, marked_hash(hash_of(cd.tk)), 1)
    return rc
end

-- (a collected object's hold, released by its handle's finalizer)
shared_handle.on_collect(release)


-- ---------------------------------------------------------------------
-- The backend's interface (see resty.shmlock), for resty.shmlock.lock.wait.

-- syntax: ok, err = shared.add(zone, key, klen, cd, _, exp_ms)
-- true: a shared hold is ours (cd.tk); false: the key is held exclusive
-- (or marked for an exclusive waiter); nil, err: the zone said no.
local function add(zone, key, klen, cd, _, exp_ms)
    local rc = C.shmlock_group_acquire(zone, SHARED, key, klen, cd.id, 0,
                                       exp_ms, cd.tk)
    if rc == OK then
        return true
    end
    if rc == EXISTS then
        return false
    end
    return nil, errors[rc]
end
_M.add = add


-- dead readers and a dead exclusive holder dropped (expired ones too)
local function reclaim(zone, key, klen)
    local rc, count = slots.group_reclaim(zone, SHARED, key, klen)
    if rc ~= OK then
        return nil, errors[rc]
    end
    return count
end


-- A mark that keeps readers out for a writer that no longer waits (dead,
-- aborted inside nginx, or past its deadline) is cleared: a swap from
-- the state seen that keeps its holder, as a release clears a stale mark.
local function clear_dead_mark(zone, key, klen)
    if look_at(zone, key, klen) ~= OK then
        return
    end
    local _, _, _, marked = state(seen)
    if not marked or read_mark(zone, seen) ~= OK then
        return
    end
    local pid, id, _, _, till = mark_of()
    if till > now_ms() and mark_alive()
       and not (pid == self_pid() and zone_backend.gone(id))
    then
        return
    end
    slots.swap_keep(zone, seen, false, KEEP_TTL, moved)
end


-- syntax: outcome, err = shared.look(zone, key, klen, cd, exp_ms, check)
-- One look at a key our add found held: check, drop its dead holders and
-- a dead writer's mark first; then add again.  ACQUIRED, BUSY, or FAILED
-- with the zone's error.  (No mark: since, till and ask, zone.look's, are
-- not used.)
function _M.look(zone, key, klen, cd, exp_ms, check)
    if check then
        local _, err = reclaim(zone, key, klen)
        if err then
            return FAILED, err
        end
        clear_dead_mark(zone, key, klen)
    end
    local ok, err = add(zone, key, klen, cd, nil, exp_ms)
    if ok then
        return ACQUIRED
    end
    if ok == nil then
        return FAILED, err
    end
    return BUSY
end


-- syntax: here = shared.here(zone, key, klen)
-- Whether a shared waiter for key would wait for this very process (a
-- blocking wait could never end): key held exclusive by it, or a writer
-- that keeps readers out waits for a shared hold of it (zone.here).
local zone_here = zone_backend.here
function _M.here(zone, key, klen)
    return zone_here(zone, key, klen, true)
end


-- syntax: ident = shared.ident(cd)
function _M.ident(cd)
    return cd.id
end


-- syntax: elapsed, err = shared.block(zone, key, klen, cd, exp_ms, timeout,
--                                     step, ratio, max_step, stop?)
-- Waits outside nginx (or blocking, where the phase cannot yield): sleeps
-- on the key's wait word, woken by a release, at most one backoff step
-- and CHECK_EVERY_US at a time; a sleep no release cut short is followed
-- by a look for dead holders.  stop: as zone.block's.
function _M.block(zone, key, klen, cd, exp_ms, timeout, step, ratio,
                  max_step, stop)
    local hash = C.shmlock_hash(key, klen)
    local start = now_us()
    local deadline = start + timeout * 1000000
    local check = true
    while true do
        local seq = C.shmlock_wait_begin(zone, hash)
        local got, err = _M.look(zone, key, klen, cd, exp_ms, check)
        if got ~= BUSY then
            C.shmlock_wait_end(zone, hash, seq, 0)
            if got == ACQUIRED then
                return (now_us() - start) / 1000000
            end
            return nil, err
        end
        local now = now_us()
        local stopped = stop and stop()
        if stopped or now >= deadline then
            C.shmlock_wait_end(zone, hash, seq, 0)
            if not check then
                C.shmlock_wake_waiters(zone, hash, 0)   -- pass it on
            end
            return nil, stopped or "timeout"
        end
        local us = ceil(min(max(step, MIN_SLEEP) * 1000000, deadline - now,
                            CHECK_EVERY_US))
        check = C.shmlock_wait_end(zone, hash, seq, us) == TIMEOUT
        step = next_step(step, ratio, max_step)
    end
end


-- ---------------------------------------------------------------------
-- The lock object's side (resty.shmlock calls these; self is its lock
-- object: target, the zone; expiry, exptime and the wait options).

-- syntax: cd = shared.held(self)
-- The handle of self's shared hold, or nil.  A copy of the object in a
-- forked child holds nothing: it forgets the parent's hold (which stays
-- the parent's).
local function held(self)
    local cd = self.sh
    if not cd or cd.held == 0 then
        return nil
    end
    if not ours(cd.pid) then
        cd.held = 0             -- this copy's: the parent still holds
        self.key = false
        return nil
    end
    return cd
end
_M.held = held


-- syntax: elapsed, err = shared.lock(self, key, klen, wait, timeout)
-- A shared hold of key (checked; klen: its length) for the lock object
-- self, which holds nothing.  wait(self, backend, key, klen, tok,
-- may_wait, timeout): resty.shmlock's wait after a failed add (outside or
-- inside nginx).
function _M.lock(self, key, klen, wait, timeout)
    local zone = self.target
    local cd = take(self.sh, zone, key, klen, next_id())
    self.sh = cd
    local ok, err = add(zone, key, klen, cd, nil, self.expiry)
    local elapsed = 0
    if ok == false then
        -- a dead exclusive holder's key is ours at once, as a reader's
        elapsed, err = wait(self, _M, key, klen, cd, true, timeout)
        ok = elapsed ~= nil
    end
    if not ok then
        return nil, err
    end
    cd.held = 1
    self.key = key
    return elapsed
end


-- syntax: ok, err = shared.unlock(self)
-- As resty.shmlock's unlock: 1; 1, "expired" (the lease ran out);
-- nil, "unlocked".
function _M.unlock(self)
    local cd = held(self)
    if not cd then
        return nil, "unlocked"
    end
    self.key = false
    local rc = release(cd)
    if rc == OK then
        return 1
    end
    if rc == NOT_FOUND then
        return 1, "expired"
    end
    return nil, errors[rc]
end


-- syntax: ok, err = shared.expire(self, seconds?)
-- A new lease for self's shared hold (nil: the object's exptime; 0:
-- never): true; nil, "unlocked"; nil, "expired" (the object no longer
-- holds it).
function _M.expire(self, seconds)
    local cd = held(self)
    if not cd then
        return nil, "unlocked"
    end
    if seconds == nil then
        seconds = self.exptime
    elseif not options.seconds_ok(seconds) then
        error('bad "exptime" argument', 3)
    end
    local rc = C.shmlock_group_extend(cd.zone, SHARED, cd.key, cd.key_len,
                                      cd.tk, options.ms(seconds))
    if rc == OK then
        return true
    end
    if rc == NOT_FOUND then
        -- gone already: nothing to release
        cd.held = 0
        self.key = false
        return nil, "expired"
    end
    return nil, errors[rc]
end


-- the tickets of key's shared holders now (a list), and how many; nil, err
local function tickets(zone, key, klen)
    local list, n = zone_backend.group_tickets(zone, SHARED, key, klen)
    if not list then
        return nil, errors[n]
    end
    return list, n
end


-- syntax: yes = shared.owned(self)
-- Whether self's shared hold is still a holder of its key.
function _M.owned(self)
    local cd = held(self)
    if not cd then
        return false
    end
    local list, n = tickets(cd.zone, cd.key, cd.key_len)
    if not list then
        return false
    end
    local pid, id = owner(cd.tk)
    for i = 1, n do
        local p, d = owner(list[i])
        if d == id and p == pid then
            return true
        end
    end
    return false
end


-- syntax: holders = shared.holders(zone, key)
-- The shared holders of key now: a list of { pid, alive, ttl } (ttl 0: no
-- expiry), for inspect.  nil, err when the zone failed.
function _M.holders(zone, key)
    local list, n = tickets(zone, key, #key)
    if not list then
        return nil, n
    end
    local out = {}
    local now = now_ms()
    for i = 1, n do
        local tk = list[i]
        local pid, _, expiry = state(tk)
        out[i] = {
            pid = pid,
            alive = C.shmlock_slot_alive(tk) ~= 0,
            ttl = expiry == zone_backend.NEVER and 0 or (expiry - now) / 1000,
        }
    end
    return out
end


-- syntax: n, err = shared.release_all(zone, key)
-- Releases every shared hold of key, whoever holds it (`shmlock unlock`):
-- how many were released (each as its holder's release: the last hands
-- the key to a marked exclusive waiter); nil and the zone's error.
function _M.release_all(zone, key)
    local klen = #key
    local list, n = tickets(zone, key, klen)
    if not list then
        return nil, n
    end
    local done = 0
    for i = 1, n do
        local tk = list[i]
        local rc = C.shmlock_group_release(zone, SHARED, key, klen, tk)
        C.shmlock_wake_waiters(zone, marked_hash(hash_of(tk)), 1)
        if rc == OK then
            done = done + 1
        elseif rc ~= NOT_FOUND then
            return nil, errors[rc]
        end
    end
    return done
end

return _M
