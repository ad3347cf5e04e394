-- resty.shmlock.cli.groups (internal): a key's holder groups seen from
-- the shell: a semaphore's permits and a key's shared holds (src/group.h:
-- one record per holder), listed, looked for, and released whoever holds
-- them (`shmlock unlock`, `shmlock run`'s keeper).

local slots = require "resty.shmlock.lock.slots"
local zone_backend = require "resty.shmlock.lock.zone"
local codes = require "resty.shmlock.internal.codes"
local errors = require "resty.shmlock.errors"

local C = slots.C
local min = math.min
local owner = slots.owner
local marked_hash = zone_backend.marked_hash

local OK = codes.OK
local AGAIN = codes.AGAIN
local NOT_FOUND = codes.NOT_FOUND
local GROUP_MAX = codes.GROUP_MAX

local _M = {
    KIND = { semaphore = codes.SEMAPHORE, shared = codes.SHARED },
}

-- holders asked for at first; a key with more is asked again with room
local BATCH = 64


-- syntax: list, err = groups.holders(zone, kind, key)
-- The tickets of key's holders of kind (codes.SEMAPHORE, codes.SHARED)
-- with a lease running (alive or not), a list; nil and the zone's error.
function _M.holders(zone, kind, key)
    local n = BATCH
    -- bounded: a key has at most GROUP_MAX holders, and the second ask
    -- has room for them all unless more came meanwhile
    for _ = 1, 4 do
        local rc, count, list = slots.group_holders(zone, kind, key, #key, n)
        if rc == OK then
            return list
        end
        if rc ~= AGAIN then
            return nil, errors[rc]
        end
        n = min(count + BATCH, GROUP_MAX)
    end
    return nil, errors[AGAIN]
end


-- syntax: yes = groups.has(zone, kind, key, tk)
-- Whether the holder of ticket tk (its owner: pid and id) is among key's
-- holders of kind.  false when the zone fails.
function _M.has(zone, kind, key, tk)
    local list = _M.holders(zone, kind, key)
    if not list then
        return false
    end
    local pid, id = owner(tk)
    for i = 1, #list do
        local p, d = owner(list[i])
        if p == pid and d == id then
            return true
        end
    end
    return false
end


-- syntax: pids, err = groups.release(zone, kind, key, pid?)
-- Releases key's holds of kind, each as its holder's release would (the
-- last shared hold hands the key to a marked exclusive waiter): every
-- one, or those of process pid.  The pids of the holds released, one per
-- hold (empty: none); nil and the zone's error.
function _M.release(zone, kind, key, pid)
    local list, err = _M.holders(zone, kind, key)
    if not list then
        return nil, err
    end
    local klen = #key
    local pids = {}
    for i = 1, #list do
        local tk = list[i]
        local p = owner(tk)
        if not pid or p == pid then
            local rc = C.shmlock_group_release(zone, kind, key, klen, tk)
            if kind == codes.SHARED then
                -- a handoff's starver sleeps on the key's marked word
                C.shmlock_wake_waiters(zone, marked_hash(slots.hash(tk)), 1)
            end
            if rc == OK then
                pids[#pids + 1] = p
            elseif rc ~= NOT_FOUND then
                return nil, errors[rc]
            end
        end
    end
    return pids
end

return _M
