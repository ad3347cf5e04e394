-- A child process of spec/25-key_kinds_spec.lua, under LuaJIT (the FFI)
-- or a PUC Lua (the C module): user keys whose bytes spell a holder
-- group's record or head (src/group.h) against the groups of the key they
-- name, through every acquire path.  Two zones under DIR: "kinds" (the
-- locks; made by the spec) and "board" (counters, flags, results).
--
--     lua key_kinds.lua DIR fuzz SEED WORKER WORKERS OPS
--         OPS random operations on random keys (below), with exclusion
--         counters on the board; stores "stats:WORKER" and counts
--         violations ("violations", the first one's text under "first")
--         and unexpected errors ("errors", "first_error")
--     lua key_kinds.lua DIR plant KIND KEY CRAFTED   (keys in hex)
--         takes KEY's group (KIND "shared": a shared hold; "permit": a
--         semaphore permit; "head": a permit, keeping the semaphore
--         head's ticket), lets it go, plants that ticket in the lock
--         handle its next lock() takes (the hint of
--         shmlock_slot_acquire_hint: any bytes are a safe hint), locks
--         CRAFTED, says so ("planted" = its answer), holds it until
--         "tried" is set, then unlocks
--     lua key_kinds.lua DIR try CRAFTED              (in hex)
--         once "planted" is set: lock(CRAFTED, 0), trylock, lock_shared
--         and a semaphore's acquire; stores their answers under "tried"
--
-- The fuzz's keys, all from SEED (every worker has the same ones): 300
-- base keys, one of each length 1 .. 300, of random bytes weighted to
-- NUL, 0xff, 'r' and 's'; each with the spellings of records and heads
-- of the layouts before and after 10 (VARIANTS).  The workers go through
-- the bases a window at a time, by a counter they share, so that all of
-- them work on the same few keys at once.  Each operation: an exclusive
-- lock (fast, hinted, slow, waiting: marks and handoffs under
-- contention), a trylock, a shared hold, a semaphore permit (2 permits),
-- or the hint attack: the ticket of a record or head this worker held
-- last planted in the lock handle its next lock() takes, then a lock of
-- a key spelt as that record.  Inside, each checks its counters: an
-- exclusive holder alone (no other writer, no reader), a reader with no
-- writer, at most 2 permit holders; and an exclusive holder that the
-- key's lookup (inspect) finds it the holder: a lock taken in a slot
-- that is not the key's is a lock nobody else sees.
-- luacheck: ignore 311

local dir, mode = assert(arg[1], "usage: key_kinds.lua DIR MODE ..."), arg[2]
local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local semaphore = require "resty.shmlock.semaphore"
local slots = require "resty.shmlock.lock.slots"
local codes = require "resty.shmlock.internal.codes"
local core = require "resty.shmlock.internal.core"

local floor = math.floor
local char = string.char
local sleep = core.sleep

local locks = assert(shdict.open("kinds", { dir = dir }))
local board = assert(shdict.open("board", { dir = dir }))
local zone = shdict._zone_handle(locks)

local TIMEOUT = 0.02
local PERMITS = 2

-- a key given in hex (an argument cannot hold a NUL byte)
local function unhex(s)
    return (s:gsub("..", function(h) return char(tonumber(h, 16)) end))
end

-- waits until board[name] is set (at most `secs` seconds)
local function await(name, secs)
    for _ = 1, secs * 1000 do
        local v = board:get(name)
        if v ~= nil then
            return v
        end
        sleep(0.001)
    end
    error("no " .. name .. " within " .. secs .. " s")
end

-- The ticket of a group of key just taken by object `holder`, copied:
-- a shared hold's record, a permit's record, or the semaphore's head.
local function group_ticket(kind, holder, key)
    local tk = slots.ticket()
    if kind == "shared" then
        slots.copy(tk, core.ffi and holder.sh.lk.tk
                       or core.mod.lock_object_ticket(holder))
    elseif kind == "permit" then
        slots.copy(tk, holder.permit.ticket)
    else
        assert(slots.C.shmlock_group_head(zone, codes.SEMAPHORE, key, #key,
                                          tk) == codes.OK)
    end
    return tk
end

-- Puts ticket tk in the lock handle object lk's next lock() takes: a
-- lock and unlock of a key of this process's own leave that handle on
-- top of the pool of handles (the last put back is the first taken, in
-- either binding).
local function plant(lk, tk)
    if not core.ffi then
        -- a PUC Lua lock object is the C module's: its record is its own
        core.mod.lock_object_ticket(lk, tk)
        return
    end
    local own = "key_kinds:own:" .. core.self_pid()
    assert(lk:lock(own) == 0)
    local cd = lk.cd
    assert(lk:unlock() == 1)
    slots.lock.ticket(cd, tk)
end


if mode == "plant" then
    local kind, key, crafted = arg[3], unhex(arg[4]), unhex(arg[5])
    local holder
    if kind == "shared" then
        holder = assert(resty_lock:new(locks))
        assert(holder:lock_shared(key) == 0)
    else
        holder = assert(semaphore:new(locks, { permits = 1 }))
        assert(holder:acquire(key) == 0)
    end
    local tk = group_ticket(kind, holder, key)
    if kind == "shared" then
        assert(holder:unlock() == 1)
    else
        assert(holder:release() == 1)
    end
    local lk = assert(resty_lock:new(locks, { timeout = 0 }))
    plant(lk, tk)
    local got, err = lk:lock(crafted)
    board:set("planted", tostring(got or err))
    await("tried", 20)
    if got then
        assert(lk:unlock() == 1)
    end
    print("ok")
    return
end

if mode == "try" then
    local crafted = unhex(arg[3])
    await("planted", 20)
    local lk = assert(resty_lock:new(locks, { timeout = 0 }))
    local sem = assert(semaphore:new(locks, { permits = 1, timeout = 0 }))
    local answers = {}
    local function note(got, err)
        answers[#answers + 1] = tostring(got or err)
        if got then
            if lk:owned() then
                lk:unlock()
            end
        end
    end
    note(lk:lock(crafted, 0))
    note(lk:trylock(crafted))
    -- a shared hold and a permit of the crafted key are its own groups:
    -- free, whatever P holds
    note(lk:lock_shared(crafted, 0))
    local got, err = sem:acquire(crafted, 0)
    answers[#answers + 1] = tostring(got or err)
    if got then
        sem:release()
    end
    board:set("tried", table.concat(answers, " "))
    print("ok")
    return
end

assert(mode == "fuzz", "unknown mode " .. tostring(mode))

local seed, worker = assert(tonumber(arg[3])), assert(tonumber(arg[4]))
local workers, ops = assert(tonumber(arg[5])), assert(tonumber(arg[6]))

-- Park and Miller's generator: exact in doubles and in 5.3's integers
local function generator(s)
    local x = s % 2147483646 + 1
    return function(n)
        x = x * 48271 % 2147483647
        return x % n + 1
    end
end

-- the keys: from the seed alone
local BASES = 300
local bases = {}
do
    local rand = generator(seed)
    local lengths = {}
    for i = 1, BASES do
        lengths[i] = i
    end
    for i = BASES, 2, -1 do
        local j = rand(i)
        lengths[i], lengths[j] = lengths[j], lengths[i]
    end
    for i = 1, BASES do
        local bytes = {}
        for j = 1, lengths[i] do
            local r = rand(100)
            bytes[j] = r <= 25 and 0 or r <= 40 and 255 or r <= 50 and 114
                       or r <= 60 and 115 or rand(256) - 1
        end
        for j = 1, #bytes do
            bytes[j] = char(bytes[j])
        end
        bases[i] = table.concat(bytes)
    end
end

-- each base's spellings: itself, then records and heads of K = base as
-- layouts before 10 spelt them ("\0" kind i>>8 i&255 K, the semaphore's
-- head index 0xffff) and as layout 10 does (4 bytes of index, then K)
local VARIANTS = {
    "", "\0r\0\0", "\0s\0\0", "\0s\255\255", "\0\0\0\0", "\0r\0\1",
    "\0\0\0\1",
}
-- the spellings a planted ticket of each kind names
local ATTACKS = {
    shared = { 2, 5, 6, 7 }, permit = { 3, 5, 7 }, head = { 4, 1 },
}

local rand = generator(seed * 7919 + worker * 104729)
local objects = {}
for i = 1, 3 do
    objects[i] = assert(resty_lock:new(locks, { timeout = TIMEOUT }))
end
local sems = {}
for i = 1, 2 do
    sems[i] = assert(semaphore:new(locks, { permits = PERMITS,
                                            timeout = TIMEOUT }))
end
local stats = { lock = 0, trylock = 0, shared = 0, permit = 0, attack = 0,
                timeout = 0, nomem = 0, taken = 0 }
local saved             -- { kind, base, tk }: the group held last

local function violation(what)
    board:incr("violations", 1, 0)
    board:add("first", what)
end

local function unexpected(what, err)
    board:incr("errors", 1, 0)
    board:add("first_error", what .. ": " .. tostring(err))
end

local function hold(long)
    local n = rand(3) - 1
    if long then
        sleep(0.003 + 0.001 * n)
    elseif n > 0 then
        sleep(0.0003 * n)
    end
end

local self_pid = core.self_pid()

-- the exclusion checks around a hold of key (b, v) of `kind` (long: an
-- attack's, held longer, so that others come while it holds)
local function inside(kind, b, v, long)
    local id = b .. ":" .. v
    local w, r, s = "W" .. id, "R" .. id, "S" .. id
    if kind == "x" then
        local n = board:incr(w, 1, 0)
        local readers = board:get(r) or 0
        if n ~= 1 or readers ~= 0 then
            violation(("worker %d: key %d:%d exclusive with %d writers, %d "
                       .. "readers"):format(worker, b, v, n, readers))
        end
        local info, err = resty_lock.inspect(locks, VARIANTS[v] .. bases[b])
        if not info or info.kind ~= "lock" or info.pid ~= self_pid then
            violation(("worker %d: key %d:%d held, but its lookup finds %s")
                      :format(worker, b, v, info and (tostring(info.kind)
                                                      .. " of "
                                                      .. tostring(info.pid))
                                            or tostring(err)))
        end
        hold(long)
        board:incr(w, -1)
    elseif kind == "r" then
        board:incr(r, 1, 0)
        local writers = board:get(w) or 0
        if writers ~= 0 then
            violation(("worker %d: key %d:%d shared with %d writers")
                      :format(worker, b, v, writers))
        end
        hold()
        board:incr(r, -1)
    else
        local n = board:incr(s, 1, 0)
        if n > PERMITS then
            violation(("worker %d: key %d:%d has %d permit holders")
                      :format(worker, b, v, n))
        end
        hold()
        board:incr(s, -1)
    end
end

-- an answer that is no hold: timeouts and a full table are expected
local function refused(what, err)
    if err == "timeout" or err == "locked" then
        stats.timeout = stats.timeout + 1
    elseif err == "no memory" then
        stats.nomem = stats.nomem + 1
    else
        unexpected(what, err)
    end
end

local function exclusive(lk, b, v, try, attack)
    local key = VARIANTS[v] .. bases[b]
    local got, err
    if try then
        got, err = lk:trylock(key)
    else
        got, err = lk:lock(key)
    end
    if not got then
        return refused("lock", err)
    end
    stats.taken = stats.taken + 1
    inside("x", b, v, attack)
    local ok, uerr = lk:unlock()
    if ok ~= 1 then
        unexpected("unlock", uerr)
    end
end

local function shared(lk, b, v)
    local key = VARIANTS[v] .. bases[b]
    local got, err = lk:lock_shared(key)
    if not got then
        return refused("lock_shared", err)
    end
    stats.taken = stats.taken + 1
    inside("r", b, v)
    saved = { kind = "shared", base = b, tk = group_ticket("shared", lk, key) }
    local ok, uerr = lk:unlock()
    if ok ~= 1 then
        unexpected("unlock shared", uerr)
    end
end

local function permit(sem, b, v)
    local key = VARIANTS[v] .. bases[b]
    local got, err = sem:acquire(key)
    if not got then
        return refused("acquire", err)
    end
    stats.taken = stats.taken + 1
    inside("s", b, v)
    local kind = rand(2) == 1 and "permit" or "head"
    saved = { kind = kind, base = b, tk = group_ticket(kind, sem, key) }
    local ok, rerr = sem:release()
    if ok ~= 1 then
        unexpected("release", rerr)
    end
end

board:incr("ready", 1, 0)
for _ = 1, 20000 do
    if board:get("ready") >= workers then
        break
    end
    sleep(0.001)
end

for _ = 1, ops do
    local n = board:incr("ops", 1, 0)
    local b = (floor((n - 1) / 48) * 3 + rand(3) - 1) % BASES + 1
    local v = rand(#VARIANTS)
    local r = rand(100)
    if r <= 30 then
        stats.lock = stats.lock + 1
        exclusive(objects[rand(3)], b, v)
    elseif r <= 40 then
        stats.trylock = stats.trylock + 1
        exclusive(objects[rand(3)], b, v, true)
    elseif r <= 60 then
        stats.shared = stats.shared + 1
        shared(objects[rand(3)], b, v)
    elseif r <= 75 then
        stats.permit = stats.permit + 1
        permit(sems[rand(2)], b, v)
    elseif saved then
        -- the hint attack: the last group's ticket in the handle the next
        -- lock() takes, then a key spelt as that group's record or head
        stats.attack = stats.attack + 1
        local lk = objects[rand(3)]
        plant(lk, saved.tk)
        local pick = ATTACKS[saved.kind]
        exclusive(lk, saved.base, pick[rand(#pick)], false, true)
    end
end

board:set("stats:" .. worker,
          ("lock=%d trylock=%d shared=%d permit=%d attack=%d taken=%d "
           .. "timeout=%d nomem=%d"):format(stats.lock, stats.trylock,
                                            stats.shared, stats.permit,
                                            stats.attack, stats.taken,
                                            stats.timeout, stats.nomem))
print("ok")
