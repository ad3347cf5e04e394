-- resty.shmlock.lock.slots.capi (internal): the lock slots' primitives
-- (the interface: resty.shmlock.lock.slots.ffi) over the C module
-- resty.shmlock.core (src/lua/lock.c), for PUC Lua 5.1 to 5.4.  Tickets
-- and marks are userdata holding the core's structs: their 64-bit owner
-- words never pass through a Lua number (pid << 32 | id does not fit the
-- doubles of Lua 5.1 and 5.2).

local core = require "resty.shmlock.internal.core"

local mod = core.mod
local ticket_state = mod.ticket_state
local mark_state = mod.mark_state
local slot_swap = mod.slot_swap
local slot_mark = mod.slot_mark
local slot_alive = mod.slot_alive

local _M = {
    -- the calls the zone backend makes by their ABI names (same arguments)
    C = {
        shmlock_slot_acquire = mod.slot_acquire,
        shmlock_slot_acquire_hint = mod.slot_acquire_hint,
        shmlock_slot_release = mod.slot_release,
        shmlock_slot_extend = mod.slot_extend,
        shmlock_slot_look = mod.slot_look,
        shmlock_slot_read_mark = mod.slot_read_mark,
        shmlock_slot_alive = slot_alive,
        shmlock_hash = mod.slot_hash,
        shmlock_wait_begin = mod.wait_begin,
        shmlock_wait_end = mod.wait_end,
        shmlock_wake_waiters = mod.wake_waiters,
        shmlock_wait_count = mod.wait_count,
        shmlock_group_acquire = mod.group_acquire,
        shmlock_group_release = mod.group_release,
        shmlock_group_extend = mod.group_extend,
        shmlock_group_head = mod.group_head,
    },
    ticket = mod.ticket,
    mark = mod.mark,
    copy = mod.ticket_copy,
    scan = mod.slot_scan,
    group_reclaim = mod.group_reclaim,
    group_holders = mod.group_holders,
    -- the lock's calls (the interface: resty.shmlock.lock.slots.ffi)
    lock = {
        new = mod.lock_new, zone = mod.lock_zone,
        acquire = mod.lock_acquire, retry = mod.lock_retry,
        look = mod.lock_look,
        release = mod.lock_release, extend = mod.lock_extend,
        withdraw = mod.lock_withdraw, holds = mod.lock_holds,
        here = mod.lock_here, wait = mod.lock_wait,
        verdict = mod.lock_verdict, dead = mod.lock_dead,
        ticket = mod.lock_ticket,
        sem_acquire = mod.sem_acquire, sem_retry = mod.sem_retry,
        sem_wait = mod.sem_wait, sem_here = mod.sem_here,
    },
}


-- a holder group's head: its pid field (resty.shmlock.lock.slots.ffi)
local HEAD_PID = 0xffff0000

function _M.is_head(pid)
    return pid >= HEAD_PID
end


function _M.owner(tk)
    local pid, id = ticket_state(tk)
    return pid, id
end

function _M.start32(tk)
    return (select(5, ticket_state(tk)))
end

function _M.expiry(tk)
    return (select(3, ticket_state(tk)))
end

function _M.marked(tk)
    return (select(4, ticket_state(tk)))
end

function _M.hash(tk)
    return (select(6, ticket_state(tk)))
end

function _M.state(tk)
    local pid, id, expiry, marked = ticket_state(tk)
    return pid, id, expiry, marked
end


function _M.mark_owner(m)
    local pid, id = mark_state(m)
    return pid, id
end

function _M.mark_times(m)
    local _, _, _, since, till = mark_state(m)
    return since, till
end

_M.mark_state = mark_state

function _M.mark_alive(m)
    return slot_alive(m) ~= 0
end


function _M.swap_keep(zone, seen, marked, exp_ms, out)
    return slot_swap(zone, seen, seen, marked, exp_ms, 0, out)
end

function _M.swap_to_mark(zone, seen, m, out)
    return slot_swap(zone, seen, m, false, nil, 0, out)
end

function _M.swap_to(zone, seen, id, exp_ms, out)
    return slot_swap(zone, seen, id, false, exp_ms, 0, out)
end

function _M.place_mark(zone, seen, id, ask, since, till, out)
    return slot_mark(zone, seen, id, ask, since, till, out)
end


return _M
