-- helpers.soak_counter: the soak's counter workers.  A worker is a
-- process with one or several Lua VMs (helpers.vm); each VM is a lane of
-- the board and runs rounds of helpers.soak_round on random keys of the
-- counter zones, plus a few plain dictionary calls on shared keys whose
-- values describe themselves (a torn or misplaced value does not parse).
--
-- A round is done in two steps, so that in a process of several VMs
-- another VM runs while one holds a lock: the process picks which VM
-- moves next, and now and then sends it to a key another VM of the
-- process holds.  That lock() must time out (the other VM cannot release
-- while we wait): exclusion between VMs of one process, checked both here
-- and by the in:K marker.

local ffi = require "ffi"
local C = require "helpers.test_hooks"
local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local board = require "helpers.soak_board"
local round = require "helpers.soak_round"

local fmt = string.format
local random = math.random
local tostring = tostring

local SHARED = 40               -- plain keys v:1 .. v:40 per zone

local _M = { SHARED = SHARED }
local mt = { __index = _M }


-- self-describing values, as spec/04-crash_spec.lua's storm
local function value_for(key, seq)
    return key .. "|" .. seq .. "|"
           .. string.char(97 + seq % 26):rep(seq % 150)
end

local function value_ok(key, v)
    if v == nil then
        return true
    end
    local k, seq, rest = tostring(v):match("^([^|]+)|(%d+)|(.*)$")
    seq = tonumber(seq)
    return k == key and #rest == seq % 150
           and not rest:find("[^" .. string.char(97 + seq % 26) .. "]")
end
_M.value_ok = value_ok


-- SOAK_BREAK=lock (the soak's self-test): a lock object that now and
-- then does not lock at all
local function broken(lock)
    local fake = false
    local function take(method)
        return function(_, key)
            fake = random(20) == 1
            if fake then
                return 0
            end
            return lock[method](lock, key)
        end
    end
    return {
        lock = take("lock"),
        trylock = take("trylock"),
        unlock = function()
            if fake then
                fake = false
                return 1
            end
            return lock:unlock()
        end,
    }
end


-- syntax: w = soak_counter.new(cfg)
-- One lane: cfg.addr (the board), cfg.fd (report pipe), cfg.lane, cfg.id,
-- cfg.who, cfg.dir, cfg.zones (names), cfg.keys, cfg.timeout,
-- cfg.die_round / cfg.die_point (kill ourselves at that point of that
-- round: see soak_round), cfg.seed; the self-test's cfg.break_lock and
-- cfg.hang_round (stop for good inside that round).
function _M.new(cfg)
    math.randomseed(cfg.seed)
    local b = board.attach(cfg.addr)
    local lane = b.lane[cfg.lane]
    local self = setmetatable({
        cfg = cfg, board = b, lane = lane, seq = 0, dicts = {}, locks = {},
        r = false, held = false,
    }, mt)
    for i, name in ipairs(cfg.zones) do
        local d = assert(shdict.open(name, { dir = cfg.dir }))
        self.dicts[i] = d
        self.locks[i] = assert(resty_lock:new(d, { timeout = cfg.timeout }))
        if cfg.break_lock then
            self.locks[i] = broken(self.locks[i])
        end
    end
    local who = cfg.who
    self.ctx = {
        lane = lane, id = cfg.id, me = round.me(cfg.id), tolerate = {},
        tallies = {},
        violation = function(msg)
            board.report(cfg.fd, "V " .. who .. ": " .. msg)
        end,
        zone_name = function(d) return d.name end,
        die = function(point)
            local n = board.get(lane, "rounds") + 1
            if point == cfg.die_point and n == cfg.die_round then
                board.die(lane)
            end
            while point == 1 and n == cfg.hang_round do
                ffi.C.poll(nil, 0, 1000)
            end
        end,
    }
    board.beat(lane)
    return self
end


-- a few plain calls on the shared keys of a random zone
function _M:plain()
    local d = self.dicts[random(#self.dicts)]
    local ctx = self.ctx
    for _ = 1, 2 do
        self.seq = self.seq + 1
        local k = "v:" .. random(SHARED)
        local r = random(10)
        local ok, err
        if r <= 4 then
            ok, err = d:safe_set(k, value_for(k, self.seq))
        elseif r <= 8 then
            local v
            v, err = d:get(k)
            ok = not err
            if ok and not value_ok(k, v) then
                ctx.violation(fmt("%s: %s holds %q", d.name, k,
                                  tostring(v):sub(1, 60)))
            end
        elseif r == 9 then
            ok, err = d:incr("hits", 1, 0)
        else
            ok, err = d:delete(k)
        end
        board.add(self.lane, "ops")
        if not ok then
            ctx.violation(fmt("%s: plain call on %s: %s", d.name, k,
                              tostring(err)))
        end
    end
end


-- syntax: outcome = w:step(zi, ki, try)
-- Holding nothing: enters a round on key ki of zone zi ("held", or
-- "timeout", "violation"), with trylock() if try; holding: finishes it
-- ("done", "violation").
function _M:step(zi, ki, try)
    local r = self.r
    if r then
        self.r = false
        local out = round.leave(self.ctx, r)
        if out == "done" then
            self.board.key_beat[self.held] = board.now_us()
            self:plain()
        end
        return out
    end
    local out
    r, out = round.enter(self.ctx, self.dicts[zi], self.locks[zi], "k" .. ki,
                         try)
    if not r then
        return out
    end
    self.r = r
    self.held = (zi - 1) * self.cfg.keys + (ki - 1)
    return "held"
end

-- finishes a round under way (at stop)
function _M:finish()
    if self.r then
        return self:step()
    end
    return "idle"
end


-- cfg as Lua source (strings, numbers, lists of strings)
local function literal(v)
    if type(v) == "string" then
        return fmt("%q", v)
    elseif type(v) == "number" then
        return fmt("%.17g", v)
    elseif type(v) == "boolean" or v == nil then
        return tostring(v)
    end
    local parts = {}
    for k, x in pairs(v) do
        local key = type(k) == "number" and "[" .. k .. "]" or k
        parts[#parts + 1] = key .. " = " .. literal(x)
    end
    return "{ " .. table.concat(parts, ", ") .. " }"
end

-- the configuration of lane v of a worker
local function lane_cfg(cfg, v)
    local c = {}
    for k, x in pairs(cfg) do
        c[k] = x
    end
    c.lane = cfg.lane + v - 1
    c.id = cfg.id .. "." .. v
    c.seed = cfg.seed * 8 + v
    c.who = fmt("%s vm %d (pid %d)", cfg.who, v, C.shmlock_self_pid())
    c.die_round, c.die_point = nil, nil
    if cfg.die_vm == v then
        c.die_round, c.die_point = cfg.die_round, cfg.die_point
    end
    return c
end


-- syntax: soak_counter.main(cfg)
-- A worker process: cfg.vms lanes (the first in this VM), stepped in a
-- random order until the board says stop; then every round under way is
-- finished.  cfg.crash_at: die at that structural write of the library.
function _M.main(cfg)
    local vm = require "helpers.vm"
    math.randomseed(cfg.seed)
    local b = board.attach(cfg.addr)
    local report = function(msg)
        board.report(cfg.fd, "V " .. cfg.who .. ": " .. msg)
    end

    local lanes = { _M.new(lane_cfg(cfg, 1)) }
    for v = 2, cfg.vms do
        local other = vm.new()
        local ok, err = other:run(
            "W = require('helpers.soak_counter').new("
            .. literal(lane_cfg(cfg, v)) .. ") return 'ok'")
        if not ok then
            error("VM " .. v .. ": " .. tostring(err))
        end
        lanes[v] = other
    end
    if cfg.crash_at then
        C.shmlock_test_crash_at(cfg.crash_at)
    end

    local function step(v, zi, ki, try)
        if v == 1 then
            return lanes[1]:step(zi, ki, try)
        end
        local ok, out = lanes[v]:run(fmt("return W:step(%s, %s, %s)",
                                         tostring(zi), tostring(ki),
                                         tostring(try)))
        if not ok then
            error("VM " .. v .. ": " .. tostring(out))
        end
        return out
    end

    -- held[v]: "zi:ki" the VM v holds
    local held = {}
    local nzones, nkeys = #cfg.zones, cfg.keys
    while b.stop == 0 do
        local v = random(cfg.vms)
        local zi, ki = random(nzones), random(nkeys)
        local sibling
        if not held[v] then
            -- now and then, a key another VM of ours holds (each try
            -- costs lock()'s whole timeout)
            local u = random(cfg.vms)
            if u ~= v and held[u] and random() < 0.05 then
                zi, ki = held[u]:match("^(%d+):(%d+)$")
                zi, ki = tonumber(zi), tonumber(ki)
            end
            for w = 1, cfg.vms do
                if held[w] == zi .. ":" .. ki then
                    sibling = w
                end
            end
        end
        local out = step(v, zi, ki, sibling and random() < 0.5)
        if out == "held" then
            if sibling then
                report(fmt("VM %d took L:k%d of %s while VM %d held it", v,
                           ki, cfg.zones[zi], sibling))
            end
            held[v] = zi .. ":" .. ki
        else
            if sibling and out == "timeout" then
                board.add(b.lane[cfg.lane + v - 1], "sibling")
            end
            held[v] = nil
        end
    end
    for v = 1, cfg.vms do
        if held[v] then
            step(v)
        end
    end
    for v = 2, cfg.vms do
        lanes[v]:close()
    end
end

return _M
