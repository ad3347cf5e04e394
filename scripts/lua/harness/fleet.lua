-- harness.fleet: the fleet case, for the benchmark (bench/fleet.lua) and
-- the demo (demo/fleet.lua): hosts (zone directories on this machine) x
-- processes asking for one cold key of a cache at the same moment, with
-- one redis-server on a free 127.0.0.1 port that this module starts and
-- stops.  It counts the loader's calls and the commands Redis ran (INFO
-- commandstats, those the scripts ran included) and times each caller from
-- the start barrier to its value.
--
--     local fleet = require "harness.fleet"
--     local redis = fleet.redis_start(work_dir)
--     local r = fleet.stampede{ redis = redis, dir = work_dir, hosts = 3,
--                               per_host = 8, mode = "fleet", ms = 100 }
--     -- r.calls, r.commands, r.sent, r.latencies (ms, sorted), r.levels
--     fleet.redis_stop(redis)
--
-- Modes: "fleet" (cache.new with opts.redis), "recipe" (docs/redis.md's
-- lock factory of resty.shmlock.redis locks), "host" (the host tier
-- alone), "stale_down" (opts.redis, the key stale on every host and Redis
-- stopped by SIGSTOP while the callers ask).

local ffi = require "ffi"
local socket = require "socket"
local redis = require "redis"
local proc = require "harness.proc"
local core = require "resty.shmlock.internal.core"
local shdict = require "resty.shmlock.shdict"
local cache = require "resty.shmlock.cache"
local redis_lock = require "resty.shmlock.redis"

pcall(ffi.cdef, "int execvp(const char *file, char *const argv[]);")
pcall(ffi.cdef, "int kill(int pid, int sig);")

local format = string.format

local _M = {}

local SIGTERM, SIGSTOP, SIGCONT = 15, 19, 18

local function free_port()
    local s = assert(socket.bind("127.0.0.1", 0))
    local _, port = s:getsockname()
    s:close()
    return tonumber(port)
end

local function client(port, timeout)
    return redis.connect("127.0.0.1", port, timeout or 5)
end

-- syntax: r = fleet.redis_start(dir): { port, pid } of a redis-server
-- (no persistence, loopback only, its files in dir), answering PING
function _M.redis_start(dir)
    local port = free_port()
    local args = { "redis-server", "--port", tostring(port), "--bind",
                   "127.0.0.1", "--save", "", "--appendonly", "no",
                   "--dir", dir, "--logfile", dir .. "/redis.log",
                   "--daemonize", "no" }
    local pid = proc.spawn_with({ alarm = 3600, die_with_parent = true },
                                function()
        local argv = ffi.new("char *[?]", #args + 1)
        local keep = {}
        for i, a in ipairs(args) do
            keep[i] = ffi.new("char[?]", #a + 1, a)
            argv[i - 1] = keep[i]
        end
        ffi.C.execvp("redis-server", argv)
        error("cannot run redis-server (Debian package redis-server)")
    end)
    local deadline = proc.now() + 10
    while proc.now() < deadline do
        local ok, c = pcall(client, port, 0.2)
        if ok and pcall(c.ping, c) then
            pcall(c.quit, c)
            return { port = port, pid = pid }
        end
        proc.sleep(0.02)
    end
    ffi.C.kill(pid, SIGTERM)
    proc.wait(pid, 5)
    error("redis-server did not answer on 127.0.0.1:" .. port
          .. " (see " .. dir .. "/redis.log)")
end

-- syntax: fleet.redis_stop(r)
function _M.redis_stop(r)
    ffi.C.kill(r.pid, SIGCONT)
    ffi.C.kill(r.pid, SIGTERM)
    proc.wait(r.pid, 10)
end

local function reset_stats(port)
    local c = client(port)
    c:flushall()
    c:raw_cmd("CONFIG RESETSTAT")
    return c
end

-- commands Redis ran since reset_stats (the harness's own INFO, CONFIG and
-- FLUSHALL aside); and those the processes sent (scripts, XREAD)
local function count_commands(c)
    local total, sent = 0, 0
    for name, line in pairs(c:info("commandstats").commandstats or {}) do
        local cmd = name:gsub("^cmdstat_", "")
        local n = tonumber(line:match("calls=(%d+)"))
        if cmd ~= "info" and not cmd:find("^config") and cmd ~= "flushall"
        then
            total = total + n
            if cmd == "evalsha" or cmd == "eval" or cmd == "xread" then
                sent = sent + n
            end
        end
    end
    return total, sent
end

-- the cache of a mode, in this process's host
local function make_cache(mode, port, opts)
    local o = { ttl = opts.ttl, stale_ttl = opts.stale_ttl }
    if mode == "recipe" then
        o.lock = function()
            local ok, c = pcall(client, port, 1)
            if not ok then
                return nil, c
            end
            return redis_lock.new(c, { exptime = 30, timeout = 5 })
        end
    elseif mode ~= "host" then
        o.redis = function(timeout)
            return redis.connect("127.0.0.1", port, timeout)
        end
    end
    return assert(cache.new("fleet_" .. mode, o))
end

-- the hosts' directories under dir
local function host_dirs(dir, n)
    local dirs = {}
    for i = 1, n do
        dirs[i] = dir .. "/host" .. i
        os.execute("mkdir -p '" .. dirs[i] .. "'")
    end
    return dirs
end

-- the value of `key` on every host before the run: loaded on the first,
-- from Redis on the others (a stale one: the run waits for its ttl)
local function warm(dirs, mode, port, opts, key)
    for _, d in ipairs(dirs) do
        local pid = proc.spawn_with({ die_with_parent = true }, function()
            assert(core.setenv("SHMLOCK_DIR", d))
            local c = make_cache(mode, port, opts)
            assert(c:get(key, nil, function() return "old" end) == "old")
        end)
        local r = proc.wait(pid, 30)
        assert(r.how == "exit" and r.code == 0, "warming: " .. r.msg)
    end
end

-- syntax: r = fleet.stampede(o)
-- o: redis ({ port, pid }), dir (a work directory), hosts, per_host, mode,
-- ms (the loader's time, 100), key ("k").  r: { calls, commands, sent,
-- latencies = { ms, sorted }, levels = { [hit_level] = n }, slowest }.
function _M.stampede(o)
    local port, key = o.redis.port, o.key or "k"
    local n = o.hosts * o.per_host
    local run_dir = format("%s/%s-%dx%d", o.dir, o.mode, o.hosts, o.per_host)
    os.execute("rm -rf '" .. run_dir .. "'")
    local dirs = host_dirs(run_dir, o.hosts)
    local board = assert(shdict.open("board", { dir = run_dir,
                                                 size = "256k" }))
    local opts = { ttl = 30 }
    local rc = reset_stats(port)
    if o.mode == "stale_down" then
        opts = { ttl = 0.2, stale_ttl = 60 }
        warm(dirs, o.mode, port, opts, key)
        proc.sleep(0.25)
        rc:raw_cmd("CONFIG RESETSTAT")
        ffi.C.kill(o.redis.pid, SIGSTOP)
    end
    board:set("arrived", 0)
    board:set("calls", 0)
    local ms = o.ms or 100

    local start = proc.pipe()
    local pids = {}
    for h = 1, o.hosts do
        for i = 1, o.per_host do
            pids[#pids + 1] = proc.spawn_with({ die_with_parent = true,
                                                alarm = 120 }, function()
                assert(core.setenv("SHMLOCK_DIR", dirs[h]))
                local c = make_cache(o.mode, port, opts)
                assert(start:wait_release(60), "never released")
                local t0 = board:get("t0")
                board:incr("arrived", 1)
                local v, err, level = c:get(key, nil, function()
                    board:incr("calls", 1)
                    -- every caller is in flight while the loader runs
                    local deadline = proc.now() + 20
                    while board:get("arrived") < n
                          and proc.now() < deadline do
                        proc.sleep(0.002)
                    end
                    proc.sleep(ms / 1000)
                    return "new"
                end)
                assert(v, err)
                board:set(format("lat:%d:%d", h, i),
                          (proc.now() - t0) * 1000)
                return level
            end)
        end
    end
    board:set("t0", proc.now())
    start:release()
    start:close()
    local r = { levels = {}, latencies = {} }
    for i, res in ipairs(proc.wait_all(pids, 120)) do
        assert(res.how == "exit" and res.code >= 1 and res.code <= 5,
               format("%s: process %d: %s %s %s", o.mode, i, res.how,
                      tostring(res.code or res.sig), res.msg))
        r.levels[res.code] = (r.levels[res.code] or 0) + 1
    end
    if o.mode == "stale_down" then
        ffi.C.kill(o.redis.pid, SIGCONT)
    end
    for h = 1, o.hosts do
        for i = 1, o.per_host do
            r.latencies[#r.latencies + 1] = board:get(format("lat:%d:%d",
                                                             h, i))
        end
    end
    table.sort(r.latencies)
    r.slowest = r.latencies[#r.latencies]
    r.calls = board:get("calls")
    r.commands, r.sent = count_commands(rc)
    pcall(rc.quit, rc)
    shdict.destroy("board", { dir = run_dir })
    for _, d in ipairs(dirs) do
        shdict.destroy("fleet_" .. o.mode, { dir = d })
    end
    os.execute("rm -rf '" .. run_dir .. "'")
    return r
end

return _M
