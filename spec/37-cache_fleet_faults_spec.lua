-- The fleet tier (resty.shmlock.cache with opts.redis) when Redis fails:
-- a change seen by a long-lived process on another host within fleet_lag
-- (+ 0.5 s) after killed connections, FLUSHALL (its new log's counter past
-- the host's cursor), a restart without persistence, DEBUG SLEEP and
-- SIGSTOP; a stopped Redis (stale values served, its calls timing out,
-- one loader call per host for a cold key, no herd of calls); set,
-- delete and purge that cannot reach Redis.  Real processes on hosts that are zone
-- directories (helpers.fleet_hosts), a private redis-server on a free
-- 127.0.0.1 port with DEBUG allowed from loopback.  What is asserted is
-- what the machine's load cannot change: which gets may return which
-- value, counts; the figures measured are printed.

local proc = require "harness.proc"
local fixture = require "helpers.fixture"
local server_helper = require "helpers.redis_server"
local fleet_hosts = require "helpers.fleet_hosts"

local SIGSTOP, SIGCONT = 19, 18

local function report(fmt, ...)
    io.stderr:write("\n    ", fmt:format(...), "\n")
end

-- A long-lived process on host `i`: gets "k" every 5 ms until the board
-- says "stop", recording each get's start and end (monotonic seconds) and
-- its value to FILE, "<start> <end> <value>" per line; the board's "seen"
-- is the last value it got.
local function watcher(hosts, i, port, lag, file)
    local board = hosts.board
    return hosts:spawn_with({ alarm = 120 }, i, function()
        local c = fleet_hosts.cache("fleet", port, { fleet_lag = lag,
                                                     redis_timeout = 0.3 })
        local out = assert(io.open(file, "w"))
        while not board:get("stop") do
            local t0 = proc.now()
            local v, err = c:get("k", nil, function() return "loaded" end)
            local t1 = proc.now()
            v = v or ("error: " .. tostring(err))
            out:write(("%.4f %.4f %s\n"):format(t0, t1, v))
            board:set("seen", v)
            proc.sleep(0.005)
        end
        out:close()
    end)
end

local function read_gets(file)
    local gets = {}
    for line in io.lines(file) do
        local t0, t1, v = line:match("^(%S+) (%S+) (.*)$")
        gets[#gets + 1] = { tonumber(t0), tonumber(t1), v }
    end
    return gets
end

describe("the fleet tier when Redis fails", function()
    local fx = fixture.new { dir = "test", children = "assert" }
    local server, raw

    setup(function()
        server = server_helper.start(nil, "--enable-debug-command local")
        raw = server:client()
    end)

    teardown(function()
        if server then
            server:destroy()
        end
    end)

    before_each(function()
        if not server.pid then
            server:restart()
        end
        server:resume()
        raw = server:client()
        raw:flushall()
    end)

    it("a set on host A is seen by a long-lived process on host B within "
       .. "fleet_lag + 0.5 s, also after each fault", function()
        local LAG = 0.5
        local BOUND = LAG + 0.5
        local hosts = fleet_hosts.new(fx.dir, 2)
        fx:defer(function() hosts:destroy({ "fleet" }) end)
        local board = hosts.board
        local file = fx.dir .. "/gets"
        local a = hosts:cache_on(1, "fleet", server.port,
                                 { fleet_lag = LAG, redis_timeout = 0.3 })
        local pid = watcher(hosts, 2, server.port, LAG, file)

        local sets = {}      -- { value, started, returned, fault }
        local faults = {}    -- when each fault began

        -- B has the value, then gets a while past the bound
        local function seen(value, fault, returned)
            local deadline = proc.now() + 10
            while board:get("seen") ~= value do
                assert.is_true(proc.now() < deadline, fault .. ": " .. value
                               .. " never seen; B has "
                               .. tostring(board:get("seen")))
                proc.sleep(0.01)
            end
            proc.sleep(math.max(0, BOUND - (proc.now() - returned)) + 0.3)
        end

        local function change(value, fault)
            local s0 = proc.now()
            local ok, err = a:set("k", value)
            local s1 = proc.now()
            -- after a fault, A itself may have Redis marked down until
            -- its probe: the set then says so, and is made again
            local deadline = s0 + 10
            while not ok and proc.now() < deadline do
                assert.matches("^redis .*%(changed on this host only", err)
                proc.sleep(0.05)
                s0 = proc.now()
                ok, err = a:set("k", value)
                s1 = proc.now()
            end
            assert.is_true(ok, err)
            sets[#sets + 1] = { value, s0, s1, fault }
            seen(value, fault, s1)
        end

        local function fault()
            faults[#faults + 1] = proc.now()
        end

        change("v1", "none")
        fault()
        raw:raw_cmd("CLIENT KILL TYPE normal SKIPME yes")
        change("v2", "CLIENT KILL")
        -- FLUSHALL with B stopped: the new log counts past B's cursor
        -- before B reads it again (only its epoch tells it is new)
        fault()
        proc.kill(pid, SIGSTOP)
        raw:flushall()
        local s0 = proc.now()
        assert.is_true(a:set("k", "v3"))         -- change 1 of the new log
        sets[#sets + 1] = { "v3", s0, proc.now(), "FLUSHALL" }
        for i = 1, 20 do
            assert.is_true(a:set("other" .. i, i))
        end
        proc.kill(pid, SIGCONT)
        seen("v3", "FLUSHALL", sets[#sets][3])
        fault()
        server:restart()
        raw = server:client()
        change("v4", "restart")
        fault()
        raw:raw_cmd("DEBUG SLEEP 1.5")
        change("v5", "DEBUG SLEEP 1.5")
        fault()
        server:pause()
        proc.sleep(1.5)
        server:resume()
        change("v6", "SIGSTOP 1.5 s")

        board:set("stop", true)
        assert.same({ how = "exit", code = 0, msg = "" }, proc.wait(pid, 20))

        -- every get that started BOUND after a set returned and ended
        -- before the next fault or set began returned that set's value
        local gets = read_gets(file)
        local worst = {}
        local function next_event(t)
            local first = math.huge
            for _, f in ipairs(faults) do
                if f > t and f < first then
                    first = f
                end
            end
            for _, s in ipairs(sets) do
                if s[2] > t and s[2] < first then
                    first = s[2]
                end
            end
            return first
        end
        for _, s in ipairs(sets) do
            local value, returned = s[1], s[3]
            local next_start = next_event(returned)
            local checked, first = 0, nil
            for _, g in ipairs(gets) do
                if g[1] >= returned + BOUND and g[2] < next_start then
                    checked = checked + 1
                    assert.equal(value, g[3], s[4] .. ": a get at +"
                                 .. (g[1] - returned) .. " s")
                end
                if not first and g[3] == value and g[1] >= s[2] then
                    first = g[2] - returned
                end
            end
            assert.is_true(checked > 0, s[4] .. ": no get to check")
            worst[#worst + 1] = ("%s %.2f s"):format(s[4], first or -1)
        end
        report("a set on host A first seen on host B (fleet_lag %.1f): %s",
               LAG, table.concat(worst, ", "))
    end)

    it("stopped Redis: a stale value is served (its calls time out: the "
       .. "delay reported), a cold key loaded once per host, values loaded "
       .. "then fresh for fleet_lag",
       function()
        local hosts = fleet_hosts.new(fx.dir, 3)
        fx:defer(function() hosts:destroy({ "fleet" }) end)
        local board = hosts.board
        local opts = { ttl = 0.3, stale_ttl = 60, fleet_lag = 1 }
        for i = 1, 3 do
            local c = hosts:cache_on(i, "fleet", server.port, opts)
            assert.equal("old", (c:get("warm", nil, function()
                return "old"
            end)))
        end
        proc.sleep(0.4)              -- "warm" is stale on every host
        server:pause()
        board:set("calls:cold", 0)
        local start = proc.pipe()
        local pids = {}
        for h = 1, 3 do
            for _ = 1, 4 do
                pids[#pids + 1] = hosts:spawn(h, function()
                    assert(start:wait_release(20), "never released")
                    local c = fleet_hosts.cache("fleet", server.port, opts)
                    local t0 = proc.now()
                    local v, err, level = c:get("warm", nil, function()
                        return "fresh"
                    end)
                    local took = proc.now() - t0
                    assert(v == "old" and level == 4 or v == "fresh"
                           and level == 3, tostring(v) .. " "
                           .. tostring(err) .. " " .. tostring(level))
                    -- each Redis call times out (redis_timeout 1 s): only
                    -- a call without a timeout, waiting for the server's
                    -- resume after this wait, reaches the ceiling
                    assert(took < 30, "the stale value took " .. took .. " s")
                    board:incr("warm:" .. level, 1, 0)
                    v, err, level = c:get("cold", nil, function()
                        board:incr("calls:cold", 1, 0)
                        proc.sleep(0.1)
                        return "cold"
                    end)
                    assert(v == "cold", tostring(v) .. " " .. tostring(err))
                    if level == 3 then
                        -- fresh for fleet_lag at most: the fleet may know
                        -- better
                        local ttl = c:peek("cold")
                        assert(ttl > 0 and ttl <= 1, "ttl " .. tostring(ttl))
                    end
                    local s = c:stats()
                    assert(s.redis_down == 1, "not marked down")
                    board:set("took:" .. proc.getpid(), took)
                end)
            end
        end
        start:release()
        start:close()
        for i, r in ipairs(proc.wait_all(pids, 60)) do
            assert.same({ how = "exit", code = 0, msg = "" },
                        { how = r.how, code = r.code, msg = r.msg },
                        "process " .. i)
        end
        server:resume()
        assert.equal(3, board:get("calls:cold"))
        local stale, fresh = board:get("warm:4") or 0, board:get("warm:3")
                                                        or 0
        assert.equal(12, stale + fresh)
        assert.is_true(fresh <= 3)
        local worst = 0
        for _, pid in ipairs(pids) do
            worst = math.max(worst, board:get("took:" .. pid) or 0)
        end
        report("Redis stopped: %d stale values served, %d refreshes, the "
               .. "slowest in %.2f s; the cold key loaded %d times (3 hosts)",
               stale, fresh, worst, board:get("calls:cold"))
    end)

    it("a Redis that is down gets one call per host per probe interval, "
       .. "not one per miss", function()
        local hosts = fleet_hosts.new(fx.dir, 3)
        fx:defer(function() hosts:destroy({ "fleet" }) end)
        local board = hosts.board
        local opts = { fleet_lag = 1, redis_timeout = 0.2 }
        for i = 1, 3 do
            hosts:cache_on(i, "fleet", server.port, opts):get("x", nil,
                function() return 1 end)
        end
        fleet_hosts.reset(raw)
        -- Redis stopped (SIGSTOP) until every worker is done, however long
        -- spawning them takes: what the hosts send meanwhile waits in its
        -- sockets, runs when it resumes, and INFO commandstats counts it
        server:pause()
        fx:defer(function() server:resume() end)
        local pids = {}
        for h = 1, 3 do
            for p = 1, 4 do
                pids[#pids + 1] = hosts:spawn(h, function()
                    local c = fleet_hosts.cache("fleet", server.port, opts)
                    board:incr("ready", 1, 0)
                    -- one 2 s window for all twelve, set when all are ready
                    local limit = proc.now() + 60
                    while not board:get("end") do
                        assert(proc.now() < limit, "no start")
                        proc.sleep(0.001)
                    end
                    local deadline = board:get("end")
                    local n = 0
                    while proc.now() < deadline do
                        n = n + 1
                        local v = c:get("cold:" .. p .. ":" .. n, nil,
                                        function() return n end)
                        assert(v == n)
                    end
                    board:incr("gets", n, 0)
                end)
            end
        end
        local limit = proc.now() + 60
        while (board:get("ready") or 0) < #pids and proc.now() < limit do
            proc.sleep(0.001)
        end
        assert.equal(#pids, board:get("ready"))
        board:set("end", proc.now() + 2)
        for i, r in ipairs(proc.wait_all(pids, 60)) do
            assert.same({ how = "exit", code = 0, msg = "" },
                        { how = r.how, code = r.code, msg = r.msg },
                        "process " .. i)
        end
        server:resume()
        -- a round trip after the resume: the event-loop turn that answers
        -- it has already run every command that waited in a socket
        raw:ping()
        raw:ping()
        local _, by = fleet_hosts.commands(raw)
        local sent = (by.evalsha or 0) + (by.eval or 0)
        report("Redis stopped: %d misses on 3 hosts in 2 s sent %d scripts",
               board:get("gets"), sent)
        assert.is_true(board:get("gets") > 100)
        -- per host: the first miss of each of its 4 processes (they start
        -- together, before any call failed), then one probe per second (at
        -- most 3 in 2 s); one per miss would be over a hundred
        assert.is_true(sent <= 3 * (4 + 3), sent .. " scripts")
    end)

    it("set, delete and purge that cannot reach Redis answer nil, "
       .. "'redis connection error: ...' and change this host", function()
        local hosts = fleet_hosts.new(fx.dir, 1)
        fx:defer(function() hosts:destroy({ "fleet" }) end)
        local a = hosts:cache_on(1, "fleet", server.port,
                                 { fleet_lag = 0.1, redis_timeout = 0.2 })
        assert.same({ 1, nil, 3 }, { a:get("k", nil, function() return 1 end) })
        server:stop()
        local ok, err = a:set("k", 2)
        assert.is_nil(ok)
        assert.matches("^redis connection error: .*connection refused.* "
                       .. "%(changed on this host only: other hosts keep "
                       .. "their copies for up to their ttl%)$", err)
        assert.equal(2, select(3, a:peek("k")))
        -- until the probe interval passes, the error is the one that
        -- marked Redis down, without a call
        ok, err = a:delete("k")
        assert.is_nil(ok)
        assert.matches("^redis connection error: .*changed on this host "
                       .. "only", err)
        assert.is_nil(a:peek("k"))
        ok, err = a:purge()
        assert.is_nil(ok)
        assert.matches("^redis connection error: ", err)
        local s = a:stats()
        assert.equal(1, s.redis_down)
        assert.is_true(s.redis_errors >= 1)
        server:restart()
        raw = server:client()
        proc.sleep(0.15)           -- the probe interval (fleet_lag, 0.1 s)
        assert.is_true(a:set("k", 3))
        assert.equal(0, a:stats().redis_down)
    end)
end)
