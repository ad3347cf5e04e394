-- helpers.fleet_hosts: several hosts on one machine, for the fleet tier's
-- specs (resty.shmlock.cache with opts.redis).
--
-- A host is a zone directory: a process enters it by making it its
-- $SHMLOCK_DIR (enter), so that cache.new(name) opens that host's zone,
-- as on a machine of its own; processes of different hosts share only
-- Redis (and the spec's board, a zone of its own in the spec's directory,
-- opened by path: the loader counts its calls there).
--
--     local hosts = fleet_hosts.new(fx.dir, 3)    -- hosts.dirs[1..3]
--     local pid = hosts:spawn(2, function() ... end)  -- a process on host 2
--     local n = fleet_hosts.commands(raw)         -- Redis commands since
--                                                 -- fleet_hosts.reset(raw)

local proc = require "harness.proc"
local core = require "resty.shmlock.internal.core"
local shdict = require "resty.shmlock.shdict"
local cache = require "resty.shmlock.cache"
local redis = require "redis"

local _M = {}
local mt = { __index = _M }

-- syntax: hosts = fleet_hosts.new(dir, n)
function _M.new(dir, n)
    local self = setmetatable({ dirs = {}, dir = dir }, mt)
    for i = 1, n do
        local d = dir .. "/host" .. i
        os.execute("mkdir -p '" .. d .. "'")
        self.dirs[i] = d
    end
    self.board = assert(shdict.open("board", { dir = dir, size = "256k" }))
    return self
end

-- syntax: fleet_hosts.enter(dir): this process is on the host of dir now
function _M.enter(dir)
    assert(core.setenv("SHMLOCK_DIR", dir))
end

-- syntax: pid = hosts:spawn(i, fn, ...): a process on host i runs fn(...)
-- (its exit status: fn's number; opts.alarm: its longest life)
function _M.spawn(self, i, fn, ...)
    return self:spawn_with({}, i, fn, ...)
end

function _M.spawn_with(self, opts, i, fn, ...)
    local dir = self.dirs[i]
    return proc.spawn_with(opts, function(...)
        _M.enter(dir)
        return fn(...)
    end, ...)
end

-- syntax: connect = fleet_hosts.connect(port): opts.redis for the cache
function _M.connect(port)
    return function(timeout)
        return redis.connect("127.0.0.1", port, timeout)
    end
end

-- syntax: c = fleet_hosts.cache(name, port, opts?): a cache with the
-- fleet tier, in this process's host (opts: more of new()'s)
function _M.cache(name, port, opts)
    local o = { redis = _M.connect(port) }
    for k, v in pairs(opts or {}) do
        o[k] = v
    end
    return assert(cache.new(name, o))
end

-- syntax: c = hosts:cache_on(i, name, port, opts?): the same, made in
-- this process for host i (its zone opened by path: this process stays
-- where it is)
function _M.cache_on(self, i, name, port, opts)
    local o = { dict = assert(shdict.open(name, { dir = self.dirs[i] })) }
    for k, v in pairs(opts or {}) do
        o[k] = v
    end
    return _M.cache(name, port, o)
end

-- syntax: fleet_hosts.reset(raw): counting Redis's commands from now on
function _M.reset(raw)
    raw:raw_cmd("CONFIG RESETSTAT")
end

-- syntax: n, by_name = fleet_hosts.commands(raw)
-- The commands Redis ran since reset(raw), but the spec's own INFO and
-- CONFIG; by_name: { evalsha = n, ... }.
function _M.commands(raw)
    local info = raw:info("commandstats")
    local total, by = 0, {}
    for name, line in pairs(info.commandstats or {}) do
        local cmd = name:gsub("^cmdstat_", "")
        local n = tonumber(line:match("calls=(%d+)"))
        if cmd ~= "info" and not cmd:find("^config") then
            by[cmd] = n
            total = total + n
        end
    end
    return total, by
end

-- syntax: value = fleet_hosts.counting_loader(board, key, value, until_n,
--                                             seconds)
-- A loader that counts its calls on the board under "calls:<key>"; waits
-- (up to 20 s) until the board's "arrived" reaches until_n, then sleeps
-- `seconds` and returns `value`.
function _M.counting_loader(board, key, value, until_n, seconds)
    board:incr("calls:" .. key, 1, 0)
    local deadline = proc.now() + 20
    while (board:get("arrived") or 0) < (until_n or 0)
          and proc.now() < deadline
    do
        proc.sleep(0.002)
    end
    if seconds and seconds > 0 then
        proc.sleep(seconds)
    end
    return value
end

-- syntax: res = hosts:stampede(per_host, make, key, seconds)
-- per_host processes on each host, released together, each makes its
-- cache with make() (in its host) and gets `key` once; the loader (on the
-- board) waits until every process has arrived, then sleeps `seconds`.
-- Returns { calls = loader calls, levels = { [hit_level] = n },
-- failures = { "..." } }.
function _M.stampede(self, per_host, make, key, seconds)
    local board = self.board
    local total = per_host * #self.dirs
    board:set("arrived", 0)
    board:set("calls:" .. key, 0)
    local start = proc.pipe()
    local pids = {}
    for h = 1, #self.dirs do
        for _ = 1, per_host do
            pids[#pids + 1] = self:spawn(h, function()
                if not start:wait_release(20) then
                    error("never released")
                end
                local c = make()
                board:incr("arrived", 1, 0)
                local v, err, level = c:get(key, nil, _M.counting_loader,
                                            board, key, "value", total,
                                            seconds)
                if v ~= "value" then
                    error("get: " .. tostring(v) .. " " .. tostring(err))
                end
                return level
            end)
        end
    end
    start:release()
    start:close()
    local res = { levels = {}, failures = {} }
    for i, r in ipairs(proc.wait_all(pids, 60)) do
        if r.how == "exit" and r.code >= 1 and r.code <= 5 then
            res.levels[r.code] = (res.levels[r.code] or 0) + 1
        else
            res.failures[#res.failures + 1] = "process " .. i .. ": "
                .. r.how .. " " .. tostring(r.code or r.sig) .. " " .. r.msg
        end
    end
    res.calls = board:get("calls:" .. key)
    return res
end

-- syntax: hosts:destroy(names): the zones `names` of every host, and the
-- board
function _M.destroy(self, names)
    for _, d in ipairs(self.dirs) do
        for _, name in ipairs(names or {}) do
            shdict.destroy(name, { dir = d })
        end
    end
    shdict.destroy("board", { dir = self.dir })
end

return _M
