-- resty.shmlock.cache with opts.redis, the fleet tier: one loader call per
-- miss across hosts, values from Redis (hit_level 5), a change on one host
-- cancelling a load on another, the change log's trim, the keys' format
-- and hash slot, the options.  Hosts are zone directories on this machine
-- (helpers.fleet_hosts); Redis is a private redis-server on a free
-- 127.0.0.1 port (helpers.redis_server), started and stopped here.  The
-- faults (Redis stopped, killed connections, FLUSHALL, a restart, DEBUG
-- SLEEP) are spec/37's.

local proc = require "harness.proc"
local fixture = require "helpers.fixture"
local server_helper = require "helpers.redis_server"
local fleet_hosts = require "helpers.fleet_hosts"
local checkout = require "helpers.checkout"
local cache = require "resty.shmlock.cache"
local redis_lock = require "resty.shmlock.redis"
local fleet = require "resty.shmlock.cache.fleet"
local scripts = require "resty.shmlock.cache.fleet_scripts"
local clock = require "resty.shmlock.internal.clock"
local redis = require "redis"

local function report(fmt, ...)
    io.stderr:write("\n    ", fmt:format(...), "\n")
end

-- the error f() raised, without its position (which must be this file's)
local function raised(f)
    local ok, err = pcall(f)
    assert.is_false(ok, "no error raised")
    assert.truthy(tostring(err):find("36%-cache_fleet_spec%.lua:%d+: "),
                  "error does not point at the caller: " .. tostring(err))
    return (tostring(err):gsub("^.-36%-cache_fleet_spec%.lua:%d+: ", ""))
end

describe("resty.shmlock.cache with opts.redis", function()
    local fx = fixture.new { dir = "test", children = "assert" }
    local server, raw, port

    setup(function()
        server = server_helper.start(nil, "--enable-debug-command local")
        port = server.port
        raw = server:client()
    end)

    teardown(function()
        if server then
            server:destroy()
        end
    end)

    before_each(function()
        raw:flushall()
    end)

    it("loads a cold key once for 3 hosts x 8 processes, in at most 100 "
       .. "Redis commands (the lock-factory recipe: one load per host)",
       function()
        local hosts = fleet_hosts.new(fx.dir, 3)
        fx:defer(function() hosts:destroy({ "fleet", "recipe" }) end)

        -- before: docs/redis.md's recipe, a lock factory of Redis locks
        fleet_hosts.reset(raw)
        local before = hosts:stampede(8, function()
            return assert(cache.new("recipe", { lock = function()
                local ok, client = pcall(redis.connect, "127.0.0.1", port, 1)
                if not ok then
                    return nil, client
                end
                return redis_lock.new(client, { exptime = 30, timeout = 5 })
            end }))
        end, "k", 0.1)
        local before_cmds = fleet_hosts.commands(raw)
        assert.same({}, before.failures)

        raw:flushall()
        fleet_hosts.reset(raw)
        local res = hosts:stampede(8, function()
            return fleet_hosts.cache("fleet", port)
        end, "k", 0.1)
        local cmds, by = fleet_hosts.commands(raw)
        assert.same({}, res.failures)
        report("3 hosts x 8 processes, one cold key: fleet tier %d loader "
               .. "call(s), %d Redis commands (INFO commandstats: those the "
               .. "scripts ran included), %d sent; "
               .. "lock-factory recipe %d loader calls, %d Redis commands",
               res.calls, cmds, (by.evalsha or 0) + (by.eval or 0)
               + (by.xread or 0), before.calls, before_cmds)

        assert.equal(3, before.calls)
        assert.equal(1, res.calls)
        assert.equal(1, res.levels[3])
        -- the other hosts took it from Redis, once each; the rest from
        -- their zone
        assert.equal(2, res.levels[5])
        assert.equal(21, (res.levels[2] or 0) + (res.levels[1] or 0))
        assert.is_true(cmds <= 100, cmds .. " commands")
        assert.is_true(cmds < before_cmds)
    end)

    it("serves another host's value from Redis, with its ttl, as "
       .. "hit_level 5", function()
        local hosts = fleet_hosts.new(fx.dir, 2)
        fx:defer(function() hosts:destroy({ "fleet" }) end)
        local a = hosts:cache_on(1, "fleet", port)
        local b = hosts:cache_on(2, "fleet", port)
        local calls = 0
        local function loader(v, ttl)
            calls = calls + 1
            return v, nil, ttl
        end
        -- Redis's clock (ms), read around each step: exact bounds for the
        -- ttls, whatever the load
        local function redis_ms()
            local t = raw:time()
            return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        end
        local began = clock.now_ms()
        local before = redis_ms()
        assert.same({ { id = 1 }, nil, 3 },
                    { a:get("t", nil, loader, { id = 1 }, 60) })
        local after = redis_ms()
        local b_before = redis_ms()
        assert.same({ { id = 1 }, nil, 5 },
                    { b:get("t", nil, loader, { id = 2 }) })
        assert.same({ { id = 1 }, nil, 1 },
                    { b:get("t", nil, loader, { id = 2 }) })
        assert.equal(1, calls)
        -- its ttl is Redis's (60 s from the load's write)
        local at = raw:raw_cmd("PEXPIRETIME shmlock:1:{fleet}:v:t")
        assert.is_true(at >= before + 60000 and at <= after + 60000,
                       at - before)
        -- and the zone copy's what Redis had left when host B read it (5
        -- ms for the clocks' ms rounding)
        local ttl = b:peek("t")
        local b_after = redis_ms()
        assert.is_true(ttl <= (at - b_before) / 1000 + 0.005,
                       ttl - (at - b_before) / 1000)
        assert.is_true(ttl >= (at - b_after) / 1000 - 0.005,
                       ttl - (at - b_after) / 1000)
        -- a cached nil travels too
        assert.same({ nil, nil, 3 }, { a:get("none", nil, loader, nil) })
        assert.same({ nil, nil, 5 }, { b:get("none", nil, loader, 1) })
        assert.equal(2, calls)
        local s = b:stats()
        assert.equal(2, s.hits_fleet)
        assert.equal(0, s.loads)
        assert.equal(0, s.redis_down)
        -- host B read the change log (not -1, never), during this test
        -- (1 ms: log_age is floored to ms)
        assert.is_true(s.log_age >= 0, s.log_age)
        assert.is_true(s.log_age * 1000 <= clock.now_ms() - began + 1,
                       s.log_age)
    end)

    it("a set on one host cancels a load in flight on another: Redis "
       .. "keeps the set's value, and so does the loading host", function()
        local hosts = fleet_hosts.new(fx.dir, 2)
        fx:defer(function() hosts:destroy({ "fleet" }) end)
        local board = hosts.board
        local started, go = proc.pipe(), proc.pipe()
        local pid = hosts:spawn(2, function()
            started:close_read()
            go:close_write()
            local b = fleet_hosts.cache("fleet", port, { fleet_lag = 0.2 })
            local v, err, level = b:get("k", nil, function()
                started:notify()
                assert(go:await(20), "never let go")
                return "old"
            end)
            board:set("first", tostring(v) .. " " .. tostring(err) .. " "
                               .. tostring(level))
            -- its zone did not keep the cancelled value: after the lag,
            -- the set's
            proc.sleep(0.3)
            v = b:get("k", nil, function() return "reloaded" end)
            board:set("then", tostring(v))
        end)
        started:close_write()
        go:close_read()
        assert.is_true(started:await(10), "the load never started")
        local a = hosts:cache_on(1, "fleet", port)
        assert.is_true(a:set("k", "new"))
        go:notify()
        assert.same({ how = "exit", code = 0, msg = "" }, proc.wait(pid, 20))
        -- the loader's caller still gets what its loader returned
        assert.equal("old nil 3", board:get("first"))
        assert.equal("new", board:get("then"))
        -- (its generation: the log's epoch, no purge yet)
        assert.truthy(raw:get("shmlock:1:{fleet}:v:k"):find("^%d+%.0:"))
        assert.same({ "new", nil, 2 },
                    { hosts:cache_on(2, "fleet", port):get("k", nil,
                                                           error) })
    end)

    it("waits for another host's load longer than redis_timeout, woken "
       .. "by its store", function()
        local hosts = fleet_hosts.new(fx.dir, 2)
        fx:defer(function() hosts:destroy({ "fleet" }) end)
        local opts = { redis_timeout = 0.2 }
        local started = proc.pipe()
        local pid = hosts:spawn(2, function()
            started:close_read()
            local b = fleet_hosts.cache("fleet", port, opts)
            local v = b:get("k", nil, function()
                started:notify()
                proc.sleep(0.8)
                return "slow"
            end)
            assert(v == "slow")
        end)
        started:close_write()
        assert.is_true(started:await(10), "the load never started")
        local a = hosts:cache_on(1, "fleet", port, opts)
        assert.same({ "slow", nil, 5 }, { a:get("k", nil, error) })
        assert.same({ how = "exit", code = 0, msg = "" }, proc.wait(pid, 20))
        local s = a:stats()
        assert.same({ 1, 0 }, { s.fleet_waits, s.redis_errors })
    end)

    it("a load lock this host took and never heard of (a lost reply) is "
       .. "its own at its next miss, not waited for", function()
        local hosts = fleet_hosts.new(fx.dir, 1)
        fx:defer(function() hosts:destroy({ "fleet" }) end)
        local a = hosts:cache_on(1, "fleet", port, {
            lock_opts = { timeout = 1 }, redis_timeout = 0.2, fleet_lag = 10,
        })
        assert.same({ 1, nil, 3 }, { a:get("warm", nil, function()
            return 1
        end) })
        -- Redis asleep: the fetch of "k" times out (the host loads on its
        -- own), and runs when Redis wakes: the key's load lock is taken
        local sleeper = proc.spawn(function()
            server:client(5):raw_cmd("DEBUG SLEEP 0.6")
        end)
        proc.sleep(0.1)
        assert.same({ "first", nil, 3 }, { a:get("k", nil, function()
            return "first", nil, 0.1
        end) })
        assert.same({ how = "exit", code = 0, msg = "" }, proc.wait(sleeper))
        assert.is_string(raw:get("shmlock:1:{fleet}:l:k"))
        proc.sleep(1.1)        -- the value's ttl and the probe interval
        assert.same({ "v", nil, 3 }, { a:get("k", nil, function()
            return "v"
        end) })
        assert.equal(0, a:stats().fleet_waits)
        assert.is_nil(raw:get("shmlock:1:{fleet}:l:k"))
    end)

    it("a host whose cursor the log was trimmed past demotes its values "
       .. "to stale", function()
        local hosts = fleet_hosts.new(fx.dir, 2)
        fx:defer(function() hosts:destroy({ "fleet" }) end)
        local saved = fleet.LOG_LENGTH
        fx:defer(function() fleet.LOG_LENGTH = saved end)
        fleet.LOG_LENGTH = 5
        local a = hosts:cache_on(1, "fleet", port, { fleet_lag = 0.05 })
        local b = hosts:cache_on(2, "fleet", port, { fleet_lag = 0.05,
                                                     stale_ttl = 60 })
        local function loader(v) return v end
        assert.equal("v1", (a:get("k", nil, loader, "v1")))
        assert.same({ "v1", nil, 5 }, { b:get("k", nil, loader, "x") })
        -- the change of k, then 10 more: the log keeps the last 5
        assert.is_true(a:set("k", "v2"))
        for i = 1, 10 do
            assert.is_true(a:set("other" .. i, i))
        end
        proc.sleep(0.1)
        local before = b:stats().demotions
        -- b cannot see the change of k: its copy is stale, not fresh
        -- (served stale while one caller refreshes it: that is this call,
        -- outside nginx, and it gets Redis's)
        assert.same({ "v2", nil, 5 }, { b:get("k", nil, loader, "x") })
        assert.equal(before + 1, b:stats().demotions)
    end)

    it("keys carry the format version and the cache's name as hash tag; "
       .. "every script runs on a one-node Redis Cluster (one slot each)",
       function()
        local cluster = server_helper.start(nil, "--cluster-enabled yes "
            .. "--cluster-config-file " .. fx.dir .. "/nodes.conf")
        fx:defer(function() cluster:destroy() end)
        local craw = cluster:client()
        craw:raw_cmd("CLUSTER ADDSLOTSRANGE 0 16383")
        local deadline = proc.now() + 10
        while not craw:raw_cmd("CLUSTER INFO"):find("cluster_state:ok") do
            assert.is_true(proc.now() < deadline, "cluster never ok")
            proc.sleep(0.05)
        end
        local hosts = fleet_hosts.new(fx.dir, 2)
        fx:defer(function() hosts:destroy({ "fleet" }) end)
        local a = hosts:cache_on(1, "fleet", cluster.port,
                                 { fleet_lag = 0.05 })
        local b = hosts:cache_on(2, "fleet", cluster.port,
                                 { fleet_lag = 0.05 })
        local function loader(v) return v end
        -- fetch and store; fetch that finds it; change; delete; purge;
        -- read; release (a failed loader)
        assert.same({ 1, nil, 3 }, { a:get("k", nil, loader, 1) })
        assert.same({ 1, nil, 5 }, { b:get("k", nil, loader, 2) })
        assert.is_true(a:set("k", 3))
        assert.is_true(a:delete("k"))
        assert.is_true(a:purge())
        proc.sleep(0.1)
        assert.same({ nil, "down" }, { b:get("x", nil, function()
            return nil, "down"
        end) })
        assert.same({ 4, nil, 3 }, { b:get("k", nil, loader, 4) })
        local s = b:stats()
        assert.equal(0, s.redis_errors)
        assert.equal(0, s.redis_down)
        local keys = craw:keys("*")
        table.sort(keys)
        assert.is_true(#keys >= 3)
        for _, k in ipairs(keys) do
            assert.truthy(k:find("^shmlock:1:{fleet}:"), k)
        end
        assert.equal(fleet.FORMAT, 1)
    end)

    it("knows each script by the SHA1 of its source, and loads one that "
       .. "Redis forgot (NOSCRIPT)", function()
        for name, s in pairs(scripts) do
            assert.equal(s.sha, raw:script("load", s.src), name)
        end
        raw:script("flush")
        local hosts = fleet_hosts.new(fx.dir, 1)
        fx:defer(function() hosts:destroy({ "fleet" }) end)
        local a = hosts:cache_on(1, "fleet", port)
        assert.same({ 1, nil, 3 }, { a:get("k", nil, function() return 1 end) })
        assert.equal(0, a:stats().redis_errors)
    end)

    it("an L1 hit with opts.redis calls no Redis and costs at most 1.3 "
       .. "times one without (callgrind, as bench/instructions.lua counts)",
       function()
        local root = checkout.ROOT
        local shim = fx.dir .. "/fixed_random.so"
        checkout.sh("cc -O2 -shared -fPIC -o '" .. shim .. "' '" .. root
                    .. "/bench/fixed_random.c' -ldl")
        os.execute("mkdir -p '" .. fx.dir .. "/zones'")
        fleet_hosts.reset(raw)
        -- (not under make test-asan's preloaded runtime and library:
        -- callgrind counts the production library, as the bench does)
        local out = checkout.sh("cd '" .. root .. "/bench' && env -u "
            .. "LD_PRELOAD -u SHMLOCK_LIB SHMLOCK_DIR='"
            .. fx.dir .. "/zones' BENCH_REDIS_PORT=" .. port
            .. " INSTR_N=20000 INSTR_SEEDS=1 INSTR_PRELOAD='" .. shim .. "' BENCH_DATA='"
            .. fx.dir .. "' LUA_PATH='" .. root .. "/lua/?.lua;lib/?.lua;"
            .. root .. "/scripts/lua/?.lua;;' luajit instructions.lua "
            .. "cache_hit cache_hit_fleet 2>&1")
        local function count(op)
            local n = tonumber(out:match("instr%s+" .. op .. "%s+([%d.]+) Ir"))
            assert.is_number(n, out)
            return n
        end
        local plain, with = count("cache_hit"), count("cache_hit_fleet")
        local _, by = fleet_hosts.commands(raw)
        local sent = (by.evalsha or 0) + (by.eval or 0)
        report("an L1 hit: %.0f instructions, %.0f with opts.redis (x%.2f);"
               .. " %d scripts sent by 2 runs of 5000 + 20000 and 5000 hits",
               plain, with, with / plain, sent)
        assert.is_true(with <= 1.3 * plain, with .. " > 1.3 x " .. plain)
        -- each run: a read of the log and a fetch, in its warm-up (and a
        -- first EVAL after NOSCRIPT)
        assert.is_true(sent <= 12, sent .. " scripts")
    end)

    it("stats() and shmlock stat show the fleet side", function()
        local hosts = fleet_hosts.new(fx.dir, 2)
        fx:defer(function() hosts:destroy({ "fleet" }) end)
        local a = hosts:cache_on(1, "fleet", port)
        local b = hosts:cache_on(2, "fleet", port)
        assert.equal(1, (a:get("k", nil, function() return 1 end)))
        assert.equal(1, (b:get("k", nil, error)))
        local s = b:stats()
        for _, name in ipairs({ "hits_fleet", "fleet_waits", "redis_errors",
                                "demotions", "log_reads", "host_only",
                                "log_age", "redis_down" }) do
            assert.is_number(s[name], name)
        end
        assert.same({ 1, 1, 0, 0 }, { s.hits_fleet, s.log_reads,
                                      s.redis_errors, s.redis_down })
        local out = checkout.sh("env -u SHMLOCK_DIR '" .. checkout.ROOT
                                .. "/bin/shmlock' --dir '" .. hosts.dirs[2]
                                .. "' stat fleet 2>&1")
        assert.matches("cache fleet\n", out)
        assert.matches("\n +hits_fleet +1\n", out)
        assert.matches("\n +log_reads +1\n", out)
        assert.matches("\n +log_age +%d+%.%d+s\n", out)
        assert.matches("\n +redis_down +0\n", out)
    end)

    it("raises on bad fleet options, naming them, at the caller's line",
       function()
        local f = function() end
        assert.equal("opts.redis must be a function",
                     raised(function() cache.new("c", { redis = "x" }) end))
        assert.equal("opts.redis excludes opts.lock",
                     raised(function()
                         cache.new("c", { redis = f, lock = f })
                     end))
        assert.equal("opts.fleet_lag must be > 0",
                     raised(function()
                         cache.new("c", { redis = f, fleet_lag = 0 })
                     end))
        assert.equal("opts.fleet_lag must be a number",
                     raised(function()
                         cache.new("c", { redis = f, fleet_lag = "1" })
                     end))
        assert.equal("opts.redis_timeout must be > 0",
                     raised(function()
                         cache.new("c", { redis = f, redis_timeout = -1 })
                     end))
    end)

    it("works from PUC Lua 5.1, 5.2 and 5.3 with lua-redis: a value "
       .. "LuaJIT loaded, a value each loads for the next", function()
        local hosts = fleet_hosts.new(fx.dir, 4)
        fx:defer(function() hosts:destroy({ "fleet" }) end)
        local a = hosts:cache_on(1, "fleet", port)
        assert.same({ { n = 1, s = "x" }, nil, 3 },
                    { a:get("t", nil, function()
                        return { n = 1, s = "x" }
                    end) })
        for i, lua in ipairs({ "lua5.1", "lua5.2", "lua5.3" }) do
            local out = checkout.trim(checkout.sh(
                "cd /tmp && SHMLOCK_DIR='" .. hosts.dirs[i + 1] .. "' "
                .. "LUA_PATH='" .. checkout.ROOT .. "/lua/?.lua;;' " .. lua
                .. " '" .. checkout.ROOT .. "/spec/every_lua/cache_fleet.lua' "
                .. port .. " " .. lua .. " 2>&1"))
            assert.equal("t 1 x 5 | " .. lua .. " 3 | ok", out)
        end
        assert.same({ "lua5.3", nil, 5 },
                    { a:get("lua5.3", nil, error) })
        assert.equal(0, a:stats().redis_errors)
    end)
end)
