-- harness.redis_lock: the Redis lock under contention across hosts, for
-- its spec (spec/27-redis_hosts_spec.lua) and the benchmark
-- (bench/redis_lock.lua): hosts (zone directories on this machine) x
-- processes that each take one key's lock once, hold it for an instant
-- and let it go, all waiting behind a holder that lets go when every one
-- of them waits.  It counts the commands Redis ran for the whole episode
-- (INFO commandstats, those the scripts ran included), checks that no two
-- held the key at once (a board in a zone of the episode's), and times
-- each acquisition from the holder's release.
--
--     local rl = require "harness.redis_lock"
--     local r = rl.episode{ port = port, dir = work_dir, hosts = 3,
--                           per_host = 8, mode = "wake" }
--     -- r.commands, r.acquired, r.overlaps, r.last (s after the release),
--     -- r.latencies (s, sorted), r.failures
--
-- Modes: "wake" (resty.shmlock.redis with a connect function: host
-- single flight, transfers, wake-ups on release), "client" (the same
-- module given connected clients: host single flight, no wake-ups),
-- "today" (given connected clients and dict = false: each process polls
-- Redis on its own, as the lock did before host single flight), "plain"
-- (the plain SET NX PX polling loop: resty.lock's backoff, a
-- compare-and-delete to release).

local redis = require "redis"
local proc = require "harness.proc"
local core = require "resty.shmlock.internal.core"
local shdict = require "resty.shmlock.shdict"
local redis_lock = require "resty.shmlock.redis"

local format = string.format

local _M = {}

local function client(port, timeout)
    return redis.connect("127.0.0.1", port, timeout or 5)
end

-- syntax: n = rl.commands(c): the commands Redis ran since the last
-- CONFIG RESETSTAT (INFO, CONFIG and FLUSHALL aside)
function _M.commands(c)
    local total = 0
    for name, line in pairs(c:info("commandstats").commandstats or {}) do
        local cmd = name:gsub("^cmdstat_", "")
        if cmd ~= "info" and not cmd:find("^config") and cmd ~= "flushall"
        then
            total = total + tonumber(line:match("calls=(%d+)"))
        end
    end
    return total
end

-- the plain polling loop: SET NX PX, sleeping resty.lock's steps
local UNLOCK = "if redis.call('GET', KEYS[1]) == ARGV[1] then "
               .. "return redis.call('DEL', KEYS[1]) end return 0"

local plain_mt = {}
plain_mt.__index = plain_mt

local function plain(port, exptime, timeout)
    return setmetatable({ c = client(port), ms = exptime * 1000,
                          timeout = timeout }, plain_mt)
end

function plain_mt:lock(key)
    local k = "plain:{" .. key .. "}"
    local tok = tostring(proc.getpid()) .. ":" .. tostring(proc.now())
    local deadline = proc.now() + self.timeout
    local step = 0.001
    while true do
        if self.c:set(k, tok, "NX", "PX", self.ms) then
            self.k, self.tok = k, tok
            return 0
        end
        if proc.now() + step > deadline then
            return nil, "timeout"
        end
        proc.sleep(step)
        step = math.min(step * 2, 0.5)
    end
end

function plain_mt:unlock()
    self.c:eval(UNLOCK, 1, self.k, self.tok)
    return 1
end

-- syntax: lock = rl.lock(mode, port, opts): a lock object of the mode, in
-- this process's host
function _M.lock(mode, port, opts)
    if mode == "plain" then
        return plain(port, opts.exptime, opts.timeout)
    end
    local o = {}
    for k, v in pairs(opts) do
        o[k] = v
    end
    if mode == "wake" then
        return assert(redis_lock.new(function(timeout)
            return client(port, timeout)
        end, o))
    end
    if mode == "today" then
        o.dict = false
    end
    return assert(redis_lock.new(client(port), o))
end

-- syntax: dirs = rl.host_dirs(dir, n): the hosts' zone directories
function _M.host_dirs(dir, n)
    local dirs = {}
    for i = 1, n do
        dirs[i] = dir .. "/host" .. i
        os.execute("mkdir -p '" .. dirs[i] .. "'")
    end
    return dirs
end

-- syntax: r = rl.episode(o)
-- o: port, dir (a work directory), hosts, per_host, mode, key ("k"),
-- exptime (10), timeout (20), max_step (the lock's), settle (seconds the
-- holder keeps the key once every process waits: 0.3).
function _M.episode(o)
    local port, key = o.port, o.key or "k"
    local n = o.hosts * o.per_host
    local run = format("%s/%s-%dx%d", o.dir, o.mode, o.hosts, o.per_host)
    os.execute("rm -rf '" .. run .. "'")
    local dirs = _M.host_dirs(run, o.hosts)
    local board = assert(shdict.open("board", { dir = run, size = "256k" }))
    local opts = { exptime = o.exptime or 10, timeout = o.timeout or 20,
                   max_step = o.max_step }
    local rc = client(port)
    rc:flushall()

    -- the holder: a process of no host of the episode's
    local holder = _M.lock(o.mode == "plain" and "plain" or "today", port,
                           opts)
    assert(holder:lock(key) == 0, "the holder could not lock")

    board:set("arrived", 0)
    board:set("inside", 0)
    board:set("overlaps", 0)
    local start = proc.pipe()
    local pids = {}
    for h = 1, o.hosts do
        for i = 1, o.per_host do
            pids[#pids + 1] = proc.spawn_with({ die_with_parent = true,
                                                alarm = 120 }, function()
                assert(core.setenv("SHMLOCK_DIR", dirs[h]))
                local lock = _M.lock(o.mode, port, opts)
                assert(start:wait_release(60), "never released")
                board:incr("arrived", 1)
                local elapsed, err = lock:lock(key)
                assert(elapsed, err)
                if board:incr("inside", 1) ~= 1 then
                    board:incr("overlaps", 1)
                end
                board:set(format("at:%d:%d", h, i), proc.now())
                board:incr("inside", -1)
                assert(lock:unlock() == 1)
            end)
        end
    end
    rc:raw_cmd("CONFIG RESETSTAT")
    start:release()
    start:close()
    -- every process waits (each arrived, then one more backstop's worth)
    local deadline = proc.now() + 60
    while board:get("arrived") < n and proc.now() < deadline do
        proc.sleep(0.005)
    end
    proc.sleep(o.settle or 0.3)
    local released = proc.now()
    assert(holder:unlock() == 1, "the holder's unlock")

    local r = { failures = {}, latencies = {} }
    for i, res in ipairs(proc.wait_all(pids, 120)) do
        if not (res.how == "exit" and res.code == 0) then
            r.failures[#r.failures + 1] = format("%s: process %d: %s %s %s",
                o.mode, i, res.how, tostring(res.code or res.sig), res.msg)
        end
    end
    r.commands = _M.commands(rc)
    for h = 1, o.hosts do
        for i = 1, o.per_host do
            local at = board:get(format("at:%d:%d", h, i))
            if at then
                r.latencies[#r.latencies + 1] = at - released
            end
        end
    end
    table.sort(r.latencies)
    r.acquired = #r.latencies
    r.last = r.latencies[#r.latencies]
    r.overlaps = board:get("overlaps")
    pcall(rc.quit, rc)
    shdict.destroy("board", { dir = run })
    for _, d in ipairs(dirs) do
        shdict.destroy("shmlock_redis", { dir = d })
    end
    os.execute("rm -rf '" .. run .. "'")
    return r
end

return _M
