-- resty.shmlock.lock.shared (internal): shared (reader) holds of a lock
-- key, lock:lock_shared(key, timeout?) of resty.shmlock (docs/lock.md),
-- for the lock objects of LuaJIT (under PUC Lua the lock object is the C
-- module's, src/lua/lock_object.c, which makes the same calls).
--
-- The algorithm is the C core's (src/shmlock_shared.c, shmlock_shared_*:
-- the key's holder group of kind SHMLOCK_SHARED, whose head is the key's
-- own lock slot, so that the exclusive lock and the readers each find the
-- other held; as many readers as the key's shard has slots for; none
-- while an exclusive holder holds; a writer's mark keeps new readers out
-- and the last reader out hands the key to it; readers never mark; a
-- look drops dead readers, a dead exclusive holder and the mark of a
-- writer that no longer waits).  Each step here is one call of it, on the
-- hold's handle (resty.shmlock.lock.handle.hold: the core's record, with
-- a copy of the key, kept in the lock object's `sh` field; a collected
-- object's hold is released by its finalizer).
--
-- This file is also a lock backend, as resty.shmlock.lock.zone is (the
-- interface: see resty.shmlock), so that resty.shmlock.lock.wait waits
-- for a shared hold with the lock's own rules (resty.lock's steps, then
-- the queue; blocking_timeout where the phase cannot yield; outside nginx
-- the core's wait, one call).  Its `tok` is the hold's handle; readers
-- place no mark, so it has no accept or withdraw.

local slots = require "resty.shmlock.lock.slots"
local handle = require "resty.shmlock.lock.handle"
local errors = require "resty.shmlock.errors"
local codes = require "resty.shmlock.internal.codes"
local token = require "resty.shmlock.internal.token"
local zone_backend = require "resty.shmlock.lock.zone"

local C = slots.C
local L = slots.lock
local ours = token.ours
local hold = handle.hold
local decided = zone_backend.decided
local waited = zone_backend.waited
local answer = zone_backend.answer

local OK = codes.OK
local NOT_FOUND = codes.NOT_FOUND
local EXISTS = codes.EXISTS
local LOOK_CHECK = codes.LOOK_CHECK
local ASK_FLAG = zone_backend.ASK_FLAG
local ACQUIRED = zone_backend.ACQUIRED
local BUSY = zone_backend.BUSY
local FAILED = zone_backend.FAILED

local _M = {}


-- ---------------------------------------------------------------------
-- The backend's interface (see resty.shmlock), for resty.shmlock.lock.wait.

-- syntax: ok, err = shared.add(zone, key, klen, cd, _, exp_ms)
-- Another try (cd's owner id): true: a shared hold is ours; false: the
-- key is held exclusive (or marked for a writer); nil, err: the zone said
-- no.
local function add(_, key, klen, cd, _, exp_ms)
    local rc = C.shmlock_shared_retry(cd.lk, key, klen, exp_ms)
    if rc == OK then
        return true
    end
    if rc == EXISTS then
        return false
    end
    return nil, errors[rc]
end
_M.add = add


-- syntax: outcome, err = shared.look(zone, key, klen, cd, exp_ms, check)
-- One look at a key our add found held: with check, its dead holders and
-- a dead writer's mark dropped first; then a try.  ACQUIRED, BUSY, or
-- FAILED with the zone's error.  (No mark: since, till and ask,
-- zone.look's, are not used.)
function _M.look(_, key, klen, cd, exp_ms, check)
    local rc = decided(C.shmlock_shared_look, cd.lk, key, klen, exp_ms,
                       (check and LOOK_CHECK or 0) + ASK_FLAG)
    if rc == OK then
        return ACQUIRED
    end
    if rc == EXISTS then
        return BUSY
    end
    return FAILED, errors[rc]
end


-- syntax: here = shared.here(zone, key, klen)
-- Whether a shared waiter for key would wait for this very process (a
-- blocking wait could never end): key held exclusive by it, or a writer
-- that keeps readers out waits for a shared hold of it (zone.here).
function _M.here(zone, key, klen)
    return L.here(zone, key, klen, true)
end


-- syntax: ident = shared.ident(cd)
function _M.ident(cd)
    return cd.lk.id
end


-- syntax: elapsed, err = shared.block(zone, key, klen, cd, exp_ms, timeout,
--                                     step, ratio, max_step, stop?)
-- Waits outside nginx (or blocking, where the phase cannot yield): the
-- core's wait (shmlock_shared_wait: the key's wait word, woken by a
-- release, at most a backoff step and 0.1 s at a time, dead holders
-- dropped after a sleep no release cut short).  stop: as zone.block's.
function _M.block(_, key, klen, cd, exp_ms, timeout, step, ratio, max_step,
                  stop)
    local rc, us = waited(L.shared_wait, cd.lk, key, klen, exp_ms, timeout,
                          step, ratio, max_step, stop)
    return answer(rc, us, stop)
end


-- ---------------------------------------------------------------------
-- The lock object's side: resty.shmlock calls these with its object's
-- hold handle (the object keeps it, in its `sh` field, and its own
-- fields; nothing here reads or writes the object).

-- syntax: yes = shared.holds(cd)
-- Whether the handle cd (or nil) holds a shared hold of this process.  A
-- copy in a forked child holds nothing: it forgets the parent's hold
-- (which stays the parent's).
function _M.holds(cd)
    if not cd then
        return false
    end
    local lk = cd.lk
    if lk.held == 0 then
        return false
    end
    if not ours(lk.pid) then
        lk.held = 0             -- this copy's: the parent still holds
        return false
    end
    return true
end


-- syntax: cd, rc = shared.acquire(cd, zone, key, klen, exp_ms)
-- A first try for a shared hold of key (checked; klen its length), on
-- the handle cd (an earlier hold's, reused if the key fits; nil: a new
-- one): the handle to keep, and the core's code (OK: held; EXISTS: held
-- exclusive, or marked for a writer: wait with this backend, tok = cd).
function _M.acquire(cd, zone, key, klen, exp_ms)
    cd = hold(cd, zone, key, klen)
    return cd, C.shmlock_shared_acquire(cd.lk, key, klen, exp_ms)
end


-- syntax: ok, err = shared.release(cd)
-- As resty.shmlock's unlock: 1; 1, "expired" (the lease ran out).
function _M.release(cd)
    local rc = C.shmlock_shared_release(cd.lk, cd.key, cd.key_len)
    if rc == OK then
        return 1
    end
    if rc == NOT_FOUND then
        return 1, "expired"
    end
    return nil, errors[rc]
end


-- syntax: ok, err = shared.extend(cd, exp_ms)
-- A new lease (0: never): true; nil, "expired" (the hold is gone, and
-- the handle holds nothing); nil, err.
function _M.extend(cd, exp_ms)
    local rc = C.shmlock_shared_extend(cd.lk, cd.key, cd.key_len, exp_ms)
    if rc == OK then
        return true
    end
    if rc == NOT_FOUND then
        return nil, "expired"
    end
    return nil, errors[rc]
end


-- syntax: yes = shared.owned(cd)
-- Whether the hold of cd is still a holder of its key.
function _M.owned(cd)
    return C.shmlock_shared_owned(cd.lk, cd.key, cd.key_len) ~= 0
end

return _M
