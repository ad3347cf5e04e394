-- resty.shmlock.lock.inspect (internal): what a lock key holds, for
-- resty_lock.inspect() and the shmlock command.  Reads only.
--
-- On a zone: the key's lock slot (resty.shmlock.lock.zone: its state, and
-- the mark of a starving waiter), the holder's process, and the waiters
-- counted on the key's wait word.  On an ngx.shared dict: the key's value
-- and ttl through the dict's own methods, an owner number or a compact
-- token whose pid resty.shmlock.lock.ngx_shared reads (holder_pid).

local slots = require "resty.shmlock.lock.slots"
local zone_backend = require "resty.shmlock.lock.zone"
local codes = require "resty.shmlock.internal.codes"
local clock = require "resty.shmlock.internal.clock"
local errors = require "resty.shmlock.errors"
local core = require "resty.shmlock.internal.core"
-- (ngx.shared dicts exist only inside nginx, under LuaJIT)
local ngx_shared = core.part("ngx_shared")
local holder_pid = ngx_shared and ngx_shared.holder_pid
local proc_alive = core.proc_alive

local C = slots.C
local tonumber = tonumber
local min = math.min
local sub = string.sub
local ipairs = ipairs
local is_head = slots.is_head
local now_ms = clock.now_ms
local state = zone_backend.state
local NEVER = zone_backend.NEVER

local OK = codes.OK
local NOT_FOUND = codes.NOT_FOUND
local GROUP_MAX = codes.GROUP_MAX
local SHARED = codes.SHARED

local _M = {}

-- reads of an ngx.shared key whose value changes between its get and ttl
local TRIES = 8


-- The shared holders of key now: a list of { pid, alive, ttl } (ttl 0: no
-- expiry); nil, err when the zone failed.
local function shared_holders(zone, key)
    local list, n = zone_backend.group_tickets(zone, SHARED, key, #key)
    if not list then
        return nil, errors[n]
    end
    local out = {}
    local now = now_ms()
    for i = 1, n do
        local tk = list[i]
        local pid, _, expiry = state(tk)
        out[i] = {
            pid = pid,
            alive = C.shmlock_slot_alive(tk) ~= 0,
            ttl = expiry == NEVER and 0 or (expiry - now) / 1000,
        }
    end
    return out
end

-- slots read per step of a listing
local STEP = 64


-- { pid, alive, deadline, waited } of the starving waiter marked on the
-- lock in state tk, or nil (no mark, or the lock left state tk)
local function marked(zone, tk, now)
    if zone_backend.read_mark(zone, tk) ~= OK then
        return nil
    end
    local pid, _, _, since, till = zone_backend.mark_of()
    return {
        pid = pid,
        alive = zone_backend.mark_alive(),
        -- seconds left to its deadline; <= 0: the mark is stale (a
        -- release frees the key rather than hand it over)
        deadline = (till - now) / 1000,
        waited = (now - since) / 1000,
    }
end


-- syntax: info, err = inspect.ticket(zone, tk)
-- The lock in the state of ticket tk (a look's or a listing's): the table
-- documented in docs/lock.md (inspect), or nil, "not locked" (free or
-- expired).  A shared holds' head gives a pid no process has
-- (slots.is_head): inspect.key lists its holders instead.
local function of_ticket(zone, tk)
    local pid, id, expiry, is_marked = state(tk)
    if pid == 0 and id == 0 then
        return nil, "not locked"
    end
    local now = now_ms()
    if expiry ~= NEVER and expiry <= now then
        return nil, "not locked"
    end
    return {
        pid = pid,
        alive = C.shmlock_slot_alive(tk) ~= 0,
        -- 0: no expiry, as ngx.shared.DICT's ttl says
        ttl = expiry == NEVER and 0 or (expiry - now) / 1000,
        marked = is_marked and marked(zone, tk, now) or nil,
        -- asleep on the key's word, and on a marked waiter's own
        -- (resty.shmlock.lock.zone, "Waking")
        waiters = tonumber(C.shmlock_wait_count(zone, slots.hash(tk)))
                  + tonumber(C.shmlock_wait_count(zone,
                                 zone_backend.marked_hash(slots.hash(tk)))),
    }
end
_M.ticket = of_ticket


-- an ngx.shared dict's lock on key
local function shared_key(dict, key)
    local v, ttl, err
    for _ = 1, TRIES do
        v, err = dict:get(key)
        if v == nil then
            if err == "value is a list" then
                return nil, "not a lock"
            end
            return nil, err or "not locked"
        end
        ttl, err = dict:ttl(key)
        if ttl then
            if dict:get(key) == v then
                break
            end
        elseif err ~= "not found" then
            return nil, err
        end
        ttl = nil
    end
    if not ttl then
        return nil, "not locked"
    end
    -- an owner number or compact token (resty.shmlock.lock.ngx_shared,
    -- "The value"): the pid only, its start time is not kept
    local pid = holder_pid(v)
    if not pid then
        return nil, "not a lock"
    end
    return { kind = "lock", pid = pid, alive = proc_alive(pid), ttl = ttl }
end


-- syntax: info, err = inspect.key(dict, key, zone?)
-- dict: a zone's dict object or an ngx.shared dict; key: a checked key;
-- zone: the zone cdata (nil on an ngx.shared dict).  Returns the table
-- documented in docs/lock.md (inspect), or nil and "not locked", "not a
-- lock" (an ngx.shared dict's value that is no lock), or the store's
-- error.
function _M.key(dict, key, zone)
    if not zone then
        return shared_key(dict, key)
    end
    local rc, tk = zone_backend.look_at(zone, key, #key)
    if rc == NOT_FOUND then
        return nil, "not locked"
    end
    if rc ~= OK then
        return nil, errors[rc]
    end
    local info, err = of_ticket(zone, tk)
    if not info then
        return nil, err
    end
    if not is_head(info.pid) then
        info.kind = "lock"
        return info
    end
    -- shared holds: the head counts them; each holder's record says who
    local holders
    holders, err = shared_holders(zone, key)
    if not holders then
        return nil, err
    end
    if #holders == 0 then
        return nil, "not locked"
    end
    info.kind = "shared"
    info.pid, info.alive = nil, nil
    info.holders = holders
    return info
end


-- syntax: info, err = inspect.semaphore(zone, key)
-- The permits of a semaphore's key (resty.shmlock.semaphore.inspect;
-- docs/semaphore.md): { count, holders = { inspect's table of each
-- permit }, marked (the queued waiter whose turn is next, as a lock's
-- marked), waiters }; nil, "not locked" when no permit is held and no
-- waiter marked.  Dead holders are listed (alive = false) until an
-- acquirer drops them.
local GROUP_BATCH = 64
local SEMAPHORE = codes.SEMAPHORE

function _M.semaphore(zone, key)
    local klen = #key
    local rc, n, list = slots.group_holders(zone, SEMAPHORE, key, klen,
                                            GROUP_BATCH)
    -- more holders than the batch: again, with room for them all (bounded:
    -- a key has at most GROUP_MAX holders)
    for _ = 1, 4 do
        if rc ~= codes.AGAIN then
            break
        end
        rc, n, list = slots.group_holders(zone, SEMAPHORE, key, klen,
                                          min(n + GROUP_BATCH, GROUP_MAX))
    end
    if rc ~= OK and rc ~= codes.AGAIN then
        return nil, errors[rc]
    end
    local holders = {}
    for i = 1, #list do
        holders[#holders + 1] = of_ticket(zone, list[i])
    end
    local info = { count = #holders, holders = holders, waiters = 0 }
    local tk = slots.ticket()
    if C.shmlock_group_head(zone, SEMAPHORE, key, klen, tk) == OK then
        local _, _, _, is_marked = state(tk)
        info.marked = is_marked and marked(zone, tk, now_ms()) or nil
    end
    info.waiters = tonumber(C.shmlock_wait_count(zone,
                                                 C.shmlock_hash(key, klen)))
    if info.count == 0 and not info.marked then
        return nil, "not locked"
    end
    return info
end


-- a listed slot's kind, as the slot itself says (shmlock_slot_scan: the
-- key is the user's whatever its bytes, a record's index left out); a
-- semaphore's head counts permits and is no holder itself: nil
local KINDS = {
    [codes.SLOT_LOCK] = "lock",
    [codes.SLOT_SHARED] = "shared",
    [codes.SLOT_PERMIT] = "semaphore",
}


-- The head (of the list heads) of a shared hold's key, by its full
-- length and the bytes both show (a long key's slot keeps its first
-- bytes only, a record's 4 fewer than its head's)
local function head_of(heads, info)
    for _, head in ipairs(heads) do
        if head.key_len == info.key_len
           and sub(head.key, 1, #info.key) == sub(info.key, 1, #head.key)
        then
            return head
        end
    end
end


-- syntax: locks, err = inspect.locks(zone)
-- Every lock held in the zone (a walk over its slots): a list of
-- inspect's tables, each with kind ("lock", or "semaphore" and "shared"
-- for a permit or a shared hold of the key: resty.shmlock.semaphore,
-- lock_shared), key (the key, or its first bytes when the slot keeps no
-- more: key_len tells) and key_len; nil and the zone's error.  A lock
-- taken or released during the walk may be missing.
function _M.locks(zone)
    local list = {}
    local heads = {}        -- the shared holds' heads' infos
    local at = 0
    repeat
        local rc, next_at, step = slots.scan(zone, at, STEP)
        if rc ~= OK then
            return nil, errors[rc]
        end
        for i = 1, #step do
            local slot = step[i]
            local kind, key, len = KINDS[slot.kind], slot.key, slot.key_len
            local info = kind and of_ticket(zone, slot.ticket)
            if info and is_head(info.pid) then
                -- a shared holds' head is no holder: its mark and waiters
                -- go to the key's shared holders, listed one by one
                info.key, info.key_len = key, len
                heads[#heads + 1] = info
            elseif info then
                info.kind, info.key, info.key_len = kind, key, len
                list[#list + 1] = info
            end
        end
        at = next_at
    until at == 0
    for _, info in ipairs(list) do
        if info.kind == "shared" then
            local head = head_of(heads, info)
            if head then
                info.marked, info.waiters = head.marked, head.waiters
            end
        end
    end
    return list
end


return _M
