-- helpers.soak_fork: the soak's forkers.  A forker is a process that
-- locks a key of the fork zone (the forkers contend for the same few
-- keys) and, while it holds, makes a child in one of the ways this machine
-- has (harness.proc.fork_kinds(): fork(), a raw clone system call,
-- _Fork()).  The child uses the lock object it inherited in every way, in
-- a random order: owned(), unlock(), expire(), lock() and trylock() of the
-- key, a token of its own, a lock of another key, collection.  None may
-- act on the parent's lock.  After the child, the parent's lock must be
-- exactly as before and its unlock() must answer 1.  An in:K marker
-- checks mutual exclusion between the forkers.
--
-- Now and then a forker starts a process in another time namespace
-- (`unshare --time --monotonic 100000`, where the kernel lets us), which
-- must be refused every zone of the soak.

local ffi = require "ffi"
local proc = require "harness.proc"
local checkout = require "helpers.checkout"
local board = require "helpers.soak_board"
local round = require "helpers.soak_round"
local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local token = require "resty.shmlock.internal.token"
local slot = require "helpers.lock_slot"

local fmt = string.format
local random = math.random
local tostring = tostring

local _M = {
    NAME = "forks",
    SIZE = "256k",
    KEYS = 4,
    TIMENS_EVERY = 2,       -- seconds between time-namespace probes
    PAUSE_MS = { 10, 40 },  -- between cycles: a forker alone would fork
                            -- some 200 children a second, and the host's
                            -- pids would wrap around within minutes
}

local KINDS = proc.fork_kinds()

-- what unshare --time runs: open every zone of the soak, print the answers
local TIMENS_SCRIPT = [[
local shdict = require "resty.shmlock.shdict"
local dir = arg[1]
for i = 2, #arg do
    local d, err = shdict.open(arg[i], { dir = dir, create = false })
    if d then
        local l = require("resty.shmlock"):new(d, { timeout = 0 })
        print(arg[i] .. " opened " .. tostring(l:trylock("L:k1")))
    else
        print(arg[i] .. " " .. tostring(err))
    end
end
]]

-- syntax: ok = soak_fork.can_unshare_time()
-- Whether `unshare --time` works here (it takes CAP_SYS_ADMIN and a
-- kernel of 5.6 or later); and why not.
function _M.can_unshare_time()
    local p = io.popen("unshare --time --fork --monotonic 100000 true 2>&1")
    local out = p:read("*a")
    local ok = p:close()
    if ok == true or ok == 0 then
        return true
    end
    return false, (out:gsub("%s+$", ""))
end


-- the child: the inherited lock object, used every way; the violations
local CHILD_STEPS = {
    function(c)
        return c.lock:owned() == false or "owned() is true"
    end,
    function(c)
        local ok, err = c.lock:unlock()
        return (ok == nil and err == "unlocked")
               or fmt("unlock: %s, %s", tostring(ok), tostring(err))
    end,
    function(c)
        local ok, err = c.lock:expire(random(1, 100))
        return (ok == nil and err == "unlocked")
               or fmt("expire: %s, %s", tostring(ok), tostring(err))
    end,
    function(c)
        local ok, err = c.lock:lock(c.key, 0)
        return (ok == nil and err == "timeout")
               or fmt("lock(key, 0): %s, %s", tostring(ok), tostring(err))
    end,
    function(c)
        local ok, err = c.lock:trylock(c.key)
        return (ok == nil and err == "timeout")
               or fmt("trylock: %s, %s", tostring(ok), tostring(err))
    end,
    function(c)
        local other = assert(resty_lock:new(c.dict))
        local ok, err = other:trylock(c.key)
        return (ok == nil and err == "timeout")
               or fmt("another object's trylock: %s, %s", tostring(ok),
                      tostring(err))
    end,
    function(c)
        local t = ffi.string(token.next())
        local pid = tonumber(t:match("^(%d+):"))
        return (pid == proc.getpid() and t ~= c.parent_token)
               or fmt("token %s minted in child %d", t, proc.getpid())
    end,
    function(c)
        local key = "c:" .. proc.getpid()
        local elapsed = c.lock:lock(key)
        local ok = elapsed == 0 and c.lock:unlock()
        return ok == 1 or fmt("the copy's own lock of %s: %s, %s", key,
                              tostring(elapsed), tostring(ok))
    end,
}

local function child(c)
    local order = {}
    for i = 1, #CHILD_STEPS do
        order[i] = i
    end
    for i = #order, 2, -1 do
        local j = random(i)
        order[i], order[j] = order[j], order[i]
    end
    for _, i in ipairs(order) do
        local r = CHILD_STEPS[i](c)
        if r ~= true then
            c.violation("child made by " .. c.kind .. ": " .. r)
        end
    end
    -- last: the copy collected (its finalizer must release nothing); the
    -- forker's frames below hold it through the forker object only
    c.forker.lock = nil
    c.lock = nil
    collectgarbage()
    collectgarbage()
end


local Forker = {}
Forker.__index = Forker

function Forker:violation(msg)
    board.report(self.cfg.fd, "V " .. self.cfg.who .. ": " .. msg)
end

-- one cycle: lock, fork a child that plays with the copy, check, unlock
function Forker:cycle()
    local dict, lane = self.dict, self.lane
    local key = "k" .. random(_M.KEYS)
    self.lock = assert(resty_lock:new(dict, { timeout = 2, exptime = 30 }))
    lane.state = board.WAITING
    local elapsed, err = self.lock:lock(key)
    board.add(lane, "locks")
    lane.state = board.IDLE
    if not elapsed then
        if err == "timeout" then
            board.add(lane, "timeouts")
        else
            self:violation("lock " .. key .. ": " .. tostring(err))
        end
        return
    end
    lane.state = board.HOLDING
    local marker = "in:" .. key
    local m = dict:get(marker)
    if m and round.alive(m) then
        self:violation(fmt("%s held while %s is in it", key, m))
    end
    dict:set(marker, self.me)

    local kind = KINDS[random(#KINDS)]
    -- the holder's owner (pid and id: a starving forker may mark the
    -- lock meanwhile, which changes neither)
    local function holder()
        local pid, id = slot.owner(dict, key)
        return tostring(pid) .. ":" .. tostring(id)
    end
    local before = holder()
    local c = { forker = self, lock = self.lock, dict = dict, key = key,
                kind = kind.name, parent_token = before,
                violation = function(msg) self:violation(msg) end }
    local pid = proc.spawn_with({ fork = kind.fork, alarm = 30,
                                  die_with_parent = true }, child, c)
    board.add(lane, kind.fork == KINDS[1].fork and "forks" or "forks_raw")
    local r = proc.wait(pid, 10)
    if r.how ~= "exit" or r.code ~= 0 then
        self:violation(fmt("child made by %s: %s %s %s", kind.name, r.how,
                           tostring(r.code or r.sig), r.msg))
    end

    local now = holder()
    if now ~= before then
        self:violation(fmt("%s changed holder while its child (made by %s) "
                           .. "ran: %s -> %s", key, kind.name,
                           tostring(before), tostring(now)))
    end
    if not self.lock:owned() then
        self:violation(key .. ": owned() false after the child")
    end
    if dict:get(marker) == self.me then
        dict:delete(marker)
    else
        self:violation(fmt("%s: marker %s replaced by %s", key, self.me,
                           tostring(dict:get(marker))))
    end
    local ret = { self.lock:unlock() }
    self.lock = nil
    board.add(lane, "locks")
    lane.state = board.IDLE
    if ret[1] ~= 1 or ret[2] ~= nil then
        self:violation(fmt("%s: unlock after a child made by %s: %s, %s", key,
                           kind.name, tostring(ret[1]), tostring(ret[2])))
    else
        board.add(lane, "rounds")
    end
end

-- a process in another time namespace must be refused every zone
function Forker:timens()
    local cfg = self.cfg
    local cmd = fmt("LUA_PATH=%q unshare --time --fork --monotonic 100000 "
                    .. "luajit %q %q %s 2>&1", checkout.LUA_PATH,
                    self.script, cfg.dir, table.concat(cfg.timens_zones, " "))
    local p = io.popen(cmd)
    local out = p:read("*a")
    p:close()
    local n = 0
    for line in out:gmatch("[^\n]+") do
        local answer = line:match("^%S+ (.*)$")
        n = n + 1
        if answer ~= "zone made in another time namespace"
           and answer ~= "not found"
        then
            self:violation(fmt("a process in another time namespace: %s",
                               line))
        end
    end
    if n ~= #cfg.timens_zones then
        self:violation("the time-namespace probe said: " .. out)
    end
    board.add(self.lane, "timens")
end

-- syntax: soak_fork.forker(cfg)
-- cfg: addr, fd, lane, id, who, dir, seed; timens: probe another time
-- namespace now and then, with timens_zones (names in dir).
function _M.forker(cfg)
    math.randomseed(cfg.seed)
    local b = board.attach(cfg.addr)
    local self = setmetatable({
        cfg = cfg, lane = b.lane[cfg.lane], me = round.me(cfg.id),
        dict = assert(shdict.open(_M.NAME, { dir = cfg.dir,
                                             size = _M.SIZE })),
    }, Forker)
    if cfg.timens then
        self.script = cfg.dir .. "/timens." .. proc.getpid() .. ".lua"
        checkout.write_file(self.script, TIMENS_SCRIPT)
    end
    board.beat(self.lane)
    local next_timens = 0
    while b.stop == 0 do
        self:cycle()
        board.beat(self.lane)
        proc.sleep(random(_M.PAUSE_MS[1], _M.PAUSE_MS[2]) / 1000)
        if cfg.timens and board.now_us() >= next_timens then
            self:timens()
            next_timens = board.now_us() + _M.TIMENS_EVERY * 1e6
            board.beat(self.lane)
        end
    end
    if self.script then
        os.remove(self.script)
    end
end

return _M
