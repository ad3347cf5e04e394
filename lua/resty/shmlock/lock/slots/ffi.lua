-- resty.shmlock.lock.slots.ffi (internal): the lock slots' primitives over
-- LuaJIT's FFI, for resty.shmlock.lock.zone (the algorithm, written once)
-- and resty.shmlock.lock.inspect.  resty.shmlock.lock.slots.capi gives the
-- same over the C module (PUC Lua); resty.shmlock.lock.slots picks one.
--
-- The interface:
--
--     C                  the slot calls by their ABI names, in its
--                        argument order (shmlock_slot_acquire, _release,
--                        _extend, _look, _read_mark, _alive,
--                        shmlock_wait_begin, _end, shmlock_wake_waiters,
--                        shmlock_wait_count, shmlock_hash) and the
--                        holder groups' (shmlock_group_acquire,
--                        _release, _extend, _head): here the
--                        library itself, so that a hot path calling
--                        C.shmlock_slot_acquire is the FFI call, nothing
--                        in between
--     tk = ticket()      a ticket (zeroed); m = mark(): a mark
--     copy(dst, src, marked)      dst = src, its MARKED flag set (true)
--                                 cleared (false) or kept (nil)
--     pid, id = owner(tk); start32(tk); expiry(tk) (zone clock ms,
--         NEVER: none); marked(tk); hash(tk)
--     pid, id, expiry, marked = state(tk)
--     pid, id = mark_owner(m); since, till = mark_times(m)
--     pid, id, exptime, since, till = mark_state(m)
--     alive = mark_alive(m)       the starver of m may be alive
--     rc = swap_keep(zone, seen, marked, exp_ms, out)   the same owner
--     rc = swap_to_mark(zone, seen, m, out)             a handoff to m
--     rc = swap_to(zone, seen, id, exp_ms, out)         to our waiter id
--     rc = place_mark(zone, seen, id, ask, since, till, out)
--     rc, next, list = scan(zone, cursor, max)  { ticket, key, key_len,
--         kind (the slot's: codes.SLOT_LOCK ...), index (a record's) }
--     head = is_head(pid)         a ticket's pid field is a holder group's
--                                 head (src/group.h), no process's
--     rc, count = group_reclaim(zone, kind, key, klen)   the holders left
--     rc, count, list = group_holders(zone, kind, key, klen, max)
--         at most max holders' tickets (list: 1 .. at most max); count:
--         how many there are (rc AGAIN: more than max)
--
-- and the lock's calls (shmlock_lock_*, src/shmlock_lock.c), in `lock`:
--
--     cd = lock.new(zone)          a lock object's record (shmlock_lock_t;
--                                  fields id, pid, held, marked, waited,
--                                  ask); lock.zone(cd, zone) changes it
--     rc = lock.acquire(cd, key, klen, exp_ms, now_ms); lock.retry: the
--                                  same, keeping cd's owner id
--     rc = lock.look(cd, key, klen, exp_ms, flags, since, till, ask)
--     rc = lock.release(cd, flags); rc = lock.extend(cd, exp_ms)
--     rc = lock.withdraw(cd, key, klen); yes = lock.holds(cd, key, klen)
--     yes = lock.here(zone, key, klen, shared)
--     rc, elapsed_us = lock.wait(cd, key, klen, exp_ms, start_us,
--                                timeout_us, step, ratio, max_step, flags)
--     lock.verdict(cd, gone)       cd.ask is gone (true) or alive; nil:
--                                  the verdicts cleared
--     pid, to = lock.dead(cd)      a dead holder taken over (0: none),
--                                  cleared
--     rc, elapsed_us = lock.shared_wait(cd, ...)   as lock.wait, for a
--                                  shared hold (shmlock_shared_wait; LuaJIT
--                                  only: under PUC Lua the lock object is
--                                  the C module's)
--     tk = lock.ticket(cd)         a copy of cd's ticket; lock.ticket(cd,
--                                  tk): cd's ticket becomes tk (a hint)
-- Tickets' 64-bit words are read as 32-bit halves (a uint64_t field read
-- from Lua is a boxed number; its halves are plain ones).

local ffi = require "ffi"
local bit = require "bit"
local C = require "resty.shmlock.lib"
local core = require "resty.shmlock.internal.core"

local ffi_new = ffi.new
local ffi_cast = ffi.cast
local ffi_copy = ffi.copy
local ffi_str = ffi.string
local tonumber = tonumber
local band = bit.band
local bor = bit.bor
local bnot = bit.bnot
local rshift = bit.rshift
local self_pid = core.self_pid

local ticket_t = ffi.typeof("shmlock_ticket_t")
local mark_t = ffi.typeof("shmlock_mark_t")
local U32P = ffi.typeof("uint32_t *")
local U64 = ffi.typeof("uint64_t")
local TICKET_SIZE = ffi.sizeof(ticket_t)

local LE = ffi.abi("le")
-- ticket: slot, hash, owner (id, pid), stamp (low, high), process (pid,
-- start time's low 32 bits)
local T_ID, T_PID = LE and 2 or 3, LE and 3 or 2
local T_LO, T_HI = LE and 4 or 5, LE and 5 or 4
local T_START = LE and 7 or 6
-- mark: owner (id, pid) first
local M_ID, M_PID = LE and 0 or 1, LE and 1 or 0

local SLOT_MARKED = C.SHMLOCK_SLOT_MARKED
local TWO32 = 2 ^ 32

local _M = {
    C = C,
    ticket_t = ticket_t,
    TICKET_SIZE = TICKET_SIZE,
}

-- scratch space, filled right before its call
local want = ffi_new(mark_t)            -- a mark we place
local probe = ffi_new(ticket_t)         -- a starver, to ask if it lives
local count_out = ffi_new("uint32_t[1]")


-- A holder group's head (src/group.h) has the top 16 bits of its owner
-- set: its pid field is at least this, which no process's is (Linux pids
-- are below 2^22).
local HEAD_PID = 0xffff0000

function _M.is_head(pid)
    return pid >= HEAD_PID
end


function _M.ticket()
    return ffi_new(ticket_t)
end

function _M.mark()
    return ffi_new(mark_t)
end


function _M.copy(dst, src, marked)
    ffi_copy(dst, src, TICKET_SIZE)
    local w = ffi_cast(U32P, dst)
    if marked == nil then
        return
    elseif marked then
        w[T_LO] = bor(w[T_LO], SLOT_MARKED)
    else
        w[T_LO] = band(w[T_LO], bnot(SLOT_MARKED))
    end
end


function _M.owner(tk)
    local w = ffi_cast(U32P, tk)
    return w[T_PID], w[T_ID]
end

function _M.start32(tk)
    return ffi_cast(U32P, tk)[T_START]
end

local function expiry(tk)
    local w = ffi_cast(U32P, tk)
    return w[T_HI] * 256 + rshift(w[T_LO], 24)
end
_M.expiry = expiry

local function marked(tk)
    return band(ffi_cast(U32P, tk)[T_LO], SLOT_MARKED) ~= 0
end
_M.marked = marked

function _M.hash(tk)
    return tk.hash
end

function _M.state(tk)
    local w = ffi_cast(U32P, tk)
    return w[T_PID], w[T_ID], expiry(tk), marked(tk)
end


function _M.mark_owner(m)
    local w = ffi_cast(U32P, m)
    return w[M_PID], w[M_ID]
end

function _M.mark_times(m)
    return tonumber(m.since_ms), tonumber(m.until_ms)
end

function _M.mark_state(m)
    local w = ffi_cast(U32P, m)
    return w[M_PID], w[M_ID], tonumber(m.exptime_ms), tonumber(m.since_ms),
           tonumber(m.until_ms)
end

function _M.mark_alive(m)
    probe.owner = m.owner
    probe.process = m.process
    return C.shmlock_slot_alive(probe) ~= 0
end


function _M.swap_keep(zone, seen, is_marked, exp_ms, out)
    return C.shmlock_slot_swap(zone, seen, seen.owner, 0,
                               is_marked and SLOT_MARKED or 0, exp_ms, 0, out)
end

function _M.swap_to_mark(zone, seen, m, out)
    return C.shmlock_slot_swap(zone, seen, m.owner, m.process, 0,
                               m.exptime_ms, 0, out)
end

function _M.swap_to(zone, seen, id, exp_ms, out)
    return C.shmlock_slot_swap(zone, seen, U64(self_pid()) * TWO32 + id, 0, 0,
                               exp_ms, 0, out)
end

function _M.place_mark(zone, seen, id, ask, since, till, out)
    want.owner = U64(self_pid()) * TWO32 + id
    want.process = 0
    want.exptime_ms = ask
    want.since_ms = since
    want.until_ms = till
    return C.shmlock_slot_mark(zone, seen, want, out)
end


function _M.scan(zone, cursor, max)
    local out = ffi_new("shmlock_slot_info_t[?]", max)
    local count = ffi_new("int[1]")
    local next_at = ffi_new("uint64_t[1]")
    local rc = C.shmlock_slot_scan(zone, cursor, out, max, count, next_at)
    local list = {}
    if rc == 0 then
        for i = 0, count[0] - 1 do
            local tk = ffi_new(ticket_t)
            ffi_copy(tk, out[i].ticket, TICKET_SIZE)
            list[i + 1] = { ticket = tk,
                            key = ffi_str(out[i].key, out[i].shown),
                            key_len = tonumber(out[i].key_len),
                            kind = tonumber(out[i].kind),
                            index = tonumber(out[i].index) }
        end
    end
    return rc, tonumber(next_at[0]), list
end


function _M.group_reclaim(zone, kind, key, klen)
    local rc = C.shmlock_group_reclaim(zone, kind, key, klen, count_out)
    return rc, tonumber(count_out[0])
end

function _M.group_holders(zone, kind, key, klen, max)
    local out = ffi_new("shmlock_ticket_t[?]", max)
    local count = ffi_new("int[1]")
    local rc = C.shmlock_group_holders(zone, kind, key, klen, out, max, count)
    local n = count[0]
    local list = {}
    if rc == 0 or rc == C.SHMLOCK_AGAIN then
        for i = 0, (n < max and n or max) - 1 do
            local tk = ffi_new(ticket_t)
            ffi_copy(tk, out + i, TICKET_SIZE)
            list[i + 1] = tk
        end
    end
    return rc, n, list
end


-- ---- the lock's calls ----

local lock_t = ffi.typeof("shmlock_lock_t")
local how = ffi_new("shmlock_look_t")
local wait_arg = ffi_new("shmlock_wait_t")
local elapsed_out = ffi_new("int64_t[1]")

-- the wait's arguments (shmlock_wait_t), as the lock's, the shared holds'
-- and the semaphore's waits outside nginx take them
local function fill_wait(exp_ms, start_us, timeout_us, step, ratio, max_step,
                         flags)
    wait_arg.exptime_ms = exp_ms
    wait_arg.start_us = start_us
    wait_arg.timeout_us = timeout_us
    wait_arg.step = step
    wait_arg.ratio = ratio
    wait_arg.max_step = max_step
    wait_arg.flags = flags or 0
end

local lock = {
    acquire = C.shmlock_lock_acquire,
    retry = C.shmlock_lock_retry,
    release = C.shmlock_lock_release,
    extend = C.shmlock_lock_extend,
    withdraw = C.shmlock_lock_withdraw,
}
_M.lock = lock

function lock.new(zone)
    local cd = ffi_new(lock_t)
    cd.zone = zone
    return cd
end

function lock.zone(cd, zone)
    cd.zone = zone
end

function lock.look(cd, key, klen, exp_ms, flags, since, till, ask)
    how.exptime_ms = exp_ms
    how.flags = flags or 0
    how.since_ms = since or 0
    how.till_ms = till or 0
    how.ask_ms = ask or 0
    return C.shmlock_lock_look(cd, key, klen, how)
end

function lock.holds(cd, key, klen)
    return C.shmlock_lock_holds(cd, key, klen) ~= 0
end

function lock.here(zone, key, klen, shared)
    return C.shmlock_lock_here(zone, key, klen, shared and 1 or 0) ~= 0
end

function lock.wait(cd, key, klen, exp_ms, start_us, timeout_us, step, ratio,
                   max_step, flags)
    fill_wait(exp_ms, start_us, timeout_us, step, ratio, max_step, flags)
    local rc = C.shmlock_lock_wait(cd, key, klen, wait_arg, elapsed_out)
    return rc, tonumber(elapsed_out[0])
end

function lock.verdict(cd, gone)
    if gone == nil then
        cd.gone[0], cd.gone[1], cd.alive[0], cd.alive[1] = 0, 0, 0, 0
        return
    end
    local v = gone and cd.gone or cd.alive
    v[v[0] == 0 and 0 or 1] = cd.ask
end

function lock.ticket(cd, tk)
    if tk then
        ffi_copy(cd.tk, tk, TICKET_SIZE)
        return
    end
    local out = ffi_new(ticket_t)
    ffi_copy(out, cd.tk, TICKET_SIZE)
    return out
end

-- shared holds' wait outside nginx (shmlock_shared_wait): as the lock's
function lock.shared_wait(cd, key, klen, exp_ms, start_us, timeout_us, step,
                          ratio, max_step, flags)
    fill_wait(exp_ms, start_us, timeout_us, step, ratio, max_step, flags)
    local rc = C.shmlock_shared_wait(cd, key, klen, wait_arg, elapsed_out)
    return rc, tonumber(elapsed_out[0])
end

-- the semaphore's steps outside nginx (shmlock_sem_*): as the lock's
lock.sem_acquire = C.shmlock_sem_acquire
lock.sem_retry = C.shmlock_sem_retry

function lock.sem_wait(cd, key, klen, permits, exp_ms, start_us, timeout_us,
                       step, ratio, max_step, flags)
    fill_wait(exp_ms, start_us, timeout_us, step, ratio, max_step, flags)
    local rc = C.shmlock_sem_wait(cd, key, klen, permits, wait_arg,
                                  elapsed_out)
    return rc, tonumber(elapsed_out[0])
end

function lock.sem_here(zone, key, klen, permits)
    return C.shmlock_sem_here(zone, key, klen, permits) ~= 0
end

function lock.dead(cd)
    local pid, to = cd.dead, cd.dead_to
    cd.dead, cd.dead_to = 0, 0
    return pid, to
end


return _M
