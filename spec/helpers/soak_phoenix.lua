-- helpers.soak_phoenix: a zone destroyed and made again, over and over,
-- by one process (the conductor) while others lock in it (the lockers).
--
-- Lockers reach the zone by name, as an application would:
-- resty_lock:new("phoenix") each round ($SHMLOCK_DIR names the soak's
-- directory).  They run helpers.soak_round rounds, where any call may
-- answer "zone destroyed" (the round is abandoned; the next one resolves
-- the name again) or the name may have no zone for a moment ("dictionary
-- not found").  Any other answer is a violation, and so is a second
-- holder inside one live zone (the in:K marker).
--
-- The conductor makes the zone (a random size and shard count) and names
-- the incarnation in its key "gen" (lockers keep their tallies per
-- incarnation, and skip a zone not named yet), lets the lockers work,
-- then destroys it, two ways in turn:
-- * checked: it takes every key's lock first, so that no round is under
--   way; the counters must then equal their tallies (that incarnation's
--   mutual exclusion, whatever the lockers went through), the zone must
--   verify; it destroys the zone while holding the locks, and its lock
--   objects and dict must then answer "zone destroyed";
-- * raw: at once, in the middle of the lockers' rounds and waits.

local ffi = require "ffi"
local C = require "helpers.test_hooks"
local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local board = require "helpers.soak_board"
local round = require "helpers.soak_round"

local fmt = string.format
local random = math.random
local tostring = tostring

pcall(ffi.cdef, "struct pollfd { int fd; short events; short revents; };")
pcall(ffi.cdef, "int poll(struct pollfd *fds, unsigned long nfds, "
                .. "int timeout);")

local _M = {
    NAME = "phoenix",
    KEYS = { "p1", "p2", "p3" },
}

local SIZES = { { "64k", 1 }, { "256k", 2 }, { "1m", 4 }, { "2m", 16 } }

local function sleep_ms(ms)
    ffi.C.poll(nil, 0, ms)
end

local function reporter(cfg)
    return function(msg)
        board.report(cfg.fd, "V " .. cfg.who .. ": " .. msg)
    end
end


-- syntax: soak_phoenix.locker(cfg)
-- cfg: addr, fd, lane, id, who, timeout, seed, crash_at, die_round,
-- die_point.
function _M.locker(cfg)
    math.randomseed(cfg.seed)
    local b = board.attach(cfg.addr)
    local lane = b.lane[cfg.lane]
    local violation = reporter(cfg)
    local ctx
    ctx = {
        lane = lane, id = cfg.id, me = round.me(cfg.id),
        tolerate = { ["zone destroyed"] = true },
        tallies = {},
        zone_id = function() return ctx.gen end,
        violation = violation,
        zone_name = function() return _M.NAME end,
        die = function(point)
            if point == cfg.die_point
               and board.get(lane, "rounds") + 1 == cfg.die_round
            then
                board.die(lane)
            end
        end,
    }
    board.beat(lane)
    if cfg.crash_at then
        C.shmlock_test_crash_at(cfg.crash_at)
    end

    local keys = _M.KEYS
    while b.stop == 0 do
        local lock, err = resty_lock:new(_M.NAME, { timeout = cfg.timeout })
        if not lock then
            if err:sub(1, 20) ~= "dictionary not found" then
                violation("new: " .. tostring(err))
            end
            board.add(lane, "absent")
            board.beat(lane)
            sleep_ms(1)
        else
            local d = lock.dict
            local gen
            gen, err = d:get("gen")
            board.add(lane, "ops")
            if gen ~= ctx.gen then
                ctx.gen, ctx.tallies = gen, {}
            end
            if not gen then
                if err ~= nil and err ~= "zone destroyed" then
                    violation("get gen: " .. tostring(err))
                end
                board.add(lane, err and "destroyed" or "absent")
                board.beat(lane)
                sleep_ms(1)
            else
                local r, out = round.enter(ctx, d, lock, keys[random(#keys)])
                if r then
                    out = round.leave(ctx, r)
                elseif out == "timeout"
                       and C.shmlock_zone_dead(d._zone) == 1
                then
                    board.add(lane, "dead_waits")
                end
                if out ~= "timeout" then
                    board.beat(lane)
                end
            end
        end
    end
end


-- takes every key's lock of d (in order: lockers hold one at a time);
-- the lock objects, or nil after reporting why not
local function lock_all(d, violation)
    local locks = {}
    for i, key in ipairs(_M.KEYS) do
        local l = assert(resty_lock:new(d, { timeout = 5 }))
        local elapsed, err = l:lock("L:" .. key)
        if not elapsed then
            violation(fmt("conductor: lock L:%s: %s", key, tostring(err)))
            for j = 1, i - 1 do
                locks[j]:unlock()
            end
            return nil
        end
        locks[i] = l
    end
    return locks
end

-- the checked destroy: see above
local function checked_destroy(d, lane, violation)
    local locks = lock_all(d, violation)
    if not locks then
        return false
    end
    local res, err = round.check(d, _M.KEYS, lane)
    if not res then
        violation("conductor: check: " .. err)
    else
        if res.violation then
            violation("conductor: " .. res.violation)
        end
        for _, key in ipairs(_M.KEYS) do
            local r = res[key]
            if r.n ~= r.sum then
                violation(fmt("conductor: c:%s is %d, its %d tallies add up "
                              .. "to %d", key, r.n, r.writers, r.sum))
            end
            if r.marker and round.alive(r.marker) then
                violation(fmt("conductor: in:%s is %s (alive) while we hold "
                              .. "L:%s", key, r.marker, key))
            end
        end
    end
    local ok
    ok, err = d:verify()
    if not ok then
        violation("conductor: verify: " .. tostring(err))
    end

    ok, err = shdict.destroy(_M.NAME)
    if not ok then
        violation("conductor: destroy: " .. tostring(err))
        return false
    end
    for i, key in ipairs(_M.KEYS) do
        local ret = { locks[i]:unlock() }
        if ret[1] ~= nil or ret[2] ~= "zone destroyed" then
            violation(fmt("conductor: unlock L:%s after destroy: %s, %s",
                          key, tostring(ret[1]), tostring(ret[2])))
        end
    end
    local v
    v, err = d:get("c:p1")
    if v ~= nil or err ~= "zone destroyed" then
        violation(fmt("conductor: get after destroy: %s, %s", tostring(v),
                      tostring(err)))
    end
    return true
end


-- syntax: soak_phoenix.conduct(cfg)
-- cfg: addr, fd, lane, who, seed.  The last zone is left for the
-- driver's final check.
function _M.conduct(cfg)
    math.randomseed(cfg.seed)
    local b = board.attach(cfg.addr)
    local lane = b.lane[cfg.lane]
    local violation = reporter(cfg)
    board.beat(lane)

    local n, made = 0, 0
    local pid = C.shmlock_self_pid()
    while b.stop == 0 do
        local size = SIZES[random(#SIZES)]
        local d, err = shdict.open(_M.NAME, { size = size[1],
                                              shards = size[2] })
        local ok
        if d then
            made = made + 1
            ok, err = d:safe_set("gen", pid .. ":" .. made)
        end
        if not ok then
            violation("conductor: open: " .. tostring(err))
            sleep_ms(10)
        else
            board.beat(lane)
            local until_us = board.now_us() + random(50, 300) * 1000
            while b.stop == 0 and board.now_us() < until_us do
                sleep_ms(5)
            end
            if b.stop ~= 0 then
                break
            end
            n = n + 1
            if n % 2 == 0 then
                ok = checked_destroy(d, lane, violation)
            else
                ok, err = shdict.destroy(_M.NAME)
                if not ok then
                    violation("conductor: destroy: " .. tostring(err))
                end
            end
            if ok then
                board.add(lane, "destroys")
            end
            board.beat(lane)
            sleep_ms(random(0, 20))
        end
    end
end

return _M
