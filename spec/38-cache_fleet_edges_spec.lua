-- The fleet tier (resty.shmlock.cache with opts.redis) at its edges: a
-- value fetched in its last millisecond in Redis, a lock that never
-- expires (lock_opts.exptime = 0), keys of any bytes.  Hosts are zone
-- directories (helpers.fleet_hosts); Redis a private redis-server on a
-- free 127.0.0.1 port (helpers.redis_server).  Behaviour is pinned by
-- counts, never by timer margins.

local proc = require "harness.proc"
local fixture = require "helpers.fixture"
local server_helper = require "helpers.redis_server"
local fleet_hosts = require "helpers.fleet_hosts"
local codec = require "resty.shmlock.cache.codec"
local fleet = require "resty.shmlock.cache.fleet"
local redis = require "redis"
local resty_lock = require "resty.shmlock"

describe("the fleet tier at its edges", function()
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

    it("lock_opts.exptime = 0 (a host lock that never expires): still one "
       .. "loader call for 3 hosts", function()
        local hosts = fleet_hosts.new(fx.dir, 3)
        fx:defer(function() hosts:destroy({ "forever" }) end)
        local res = hosts:stampede(2, function()
            return fleet_hosts.cache("forever", port,
                                     { lock_opts = { exptime = 0 } })
        end, "k", 0.3)
        assert.same({}, res.failures)
        assert.equal(1, res.calls)
    end)

    it("a value fetched from Redis in its last millisecond is not kept "
       .. "for ever: PTTL 0 is a ttl, not 'never expires'", function()
        -- Redis answers PTTL 0 for a key in the millisecond it expires
        -- (expiry is "now > when"); fetch as often as Redis can answer
        -- around a value's end, each fetch a miss of the host (its zone
        -- entry deleted, no L1), and look at what the zone kept
        local zone = fx:zone("edge")
        local c = fleet_hosts.cache("edge", port, { dict = zone,
                                                    l1_size = 0,
                                                    fleet_lag = 1e6 })
        local vkey = "shmlock:1:{edge}:v:k"
        -- (a value is "<its generation>:<entry>": the generation a set
        -- gives it)
        assert.is_true(c:set("k", "v"))
        local gen = raw:get(vkey):match("^([^:]*):")
        local entry = gen .. ":" .. codec.encode("v", 0, 0)
        zone:delete("edge:k")
        local fetched, forever = 0, 0
        for _ = 1, 30 do
            raw:eval("return redis.call('SET', KEYS[1], ARGV[1], 'PX', 3)",
                     1, vkey, entry)
            for _ = 1, 100000 do
                local v, err, level = c:get("k", nil, function()
                    return "loaded"
                end)
                assert.is_nil(err)
                if level ~= 5 then
                    assert.equal("loaded", v)
                    break
                end
                fetched = fetched + 1
                -- (0 and not stale: "never expires")
                local ttl, _, _, stale = c:peek("k", true)
                if ttl == 0 and not stale then
                    forever = forever + 1
                end
                zone:delete("edge:k")
            end
            zone:delete("edge:k")
        end
        io.stderr:write(("\n    %d fetches of 3 ms values, %d kept for "
                         .. "ever\n"):format(fetched, forever))
        assert.equal(0, forever)
    end)

    -- the id of the client Redis runs `cmd` for (CLIENT LIST's cmd=), or
    -- nil; waits up to 20 s
    local function client_in(cmd)
        local deadline = proc.now() + 20
        while proc.now() < deadline do
            local list = raw:raw_cmd("CLIENT LIST")
            for line in list:gmatch("[^\n]+") do
                if line:find(" cmd=" .. cmd .. " ", 1, true) then
                    return line:match("^id=(%d+) ")
                end
            end
            proc.sleep(0.005)
        end
    end

    it("a host waiting for another's load (XREAD BLOCK) whose connection "
       .. "is killed asks again: one loader call, Redis not marked down",
       function()
        local hosts = fleet_hosts.new(fx.dir, 2)
        fx:defer(function() hosts:destroy({ "fleet" }) end)
        local board = hosts.board
        local started, go = proc.pipe(), proc.pipe()
        local loader = hosts:spawn(1, function()
            started:close_read()
            go:close_write()
            local c = fleet_hosts.cache("fleet", port)
            local v = c:get("k", nil, function()
                board:incr("calls", 1, 0)
                started:notify()
                assert(go:await(20), "never let go")
                return "loaded"
            end)
            assert(v == "loaded", tostring(v))
        end)
        started:close_write()
        go:close_read()
        assert.is_true(started:await(20), "the load never started")
        local waiter = hosts:spawn(2, function()
            local c = fleet_hosts.cache("fleet", port)
            local v, err, level = c:get("k", nil, function()
                board:incr("calls", 1, 0)
                return "loaded again"
            end)
            local s = c:stats()
            board:set("waiter", ("%s %s %s errors=%d down=%d"):format(
                tostring(v), tostring(err), tostring(level),
                s.redis_errors, s.redis_down))
        end)
        local id = client_in("xread")
        assert.truthy(id, "the waiter never waited on the wake stream")
        raw:raw_cmd("CLIENT KILL ID " .. id)
        go:notify()
        assert.same({ how = "exit", code = 0, msg = "" },
                    proc.wait(loader, 20))
        assert.same({ how = "exit", code = 0, msg = "" },
                    proc.wait(waiter, 20))
        assert.equal(1, board:get("calls"))
        assert.equal("loaded nil 5 errors=0 down=0", board:get("waiter"))
    end)

    it("a purged value does not come back when the change log is evicted "
       .. "(a new log's purge generation starts again)", function()
        local hosts = fleet_hosts.new(fx.dir, 2)
        fx:defer(function() hosts:destroy({ "fleet" }) end)
        local a = hosts:cache_on(1, "fleet", port)
        local function loader(v)
            return v
        end
        assert.same({ "old", nil, 3 }, { a:get("k", nil, loader, "old") })
        assert.is_true(a:purge())
        -- nobody reads "k" in Redis after the purge (purges are lazy there),
        -- then the log goes, as allkeys-* eviction may take it
        assert.equal(1, raw:del("shmlock:1:{fleet}:log"))
        local b = hosts:cache_on(2, "fleet", port)
        assert.same({ "new", nil, 3 }, { b:get("k", nil, loader, "new") })
        assert.same({ "new", nil, 5 },
                    { hosts:cache_on(1, "fleet", port):get("k", nil, loader,
                                                           "newer") })
    end)

    it("a stopped Redis costs a call one redis_timeout: a kept connection "
       .. "that timed out is not tried again on a new one", function()
        local zone = fx:zone("stopped")
        local connects = 0
        local c = assert(require("resty.shmlock.cache").new("stopped", {
            dict = zone, redis_timeout = 0.2, fleet_lag = 60,
            redis = function(timeout)
                connects = connects + 1
                return redis.connect("127.0.0.1", port, timeout)
            end,
        }))
        assert.same({ "v", nil, 3 }, { c:get("warm", nil, function()
            return "v"
        end) })
        assert.equal(1, connects)
        server:pause()
        local ok, err = pcall(function()
            -- the fetch times out on the kept connection; Redis is then
            -- down for the host, and the miss loads here alone
            assert.same({ "cold", nil, 3 }, { c:get("cold", nil, function()
                return "cold"
            end) })
            assert.equal(1, connects)
            assert.equal(1, c:stats().redis_down)
        end)
        server:resume()
        assert(ok, err)
    end)

    it("while Redis is down and the host's values demoted, a get does not "
       .. "wait for the process that probes Redis", function()
        local zone = fx:zone("probe")
        -- (shut down: refused at once, so redis_timeout may be long)
        local c = fleet_hosts.cache("probe", port, { dict = zone,
                                                     fleet_lag = 0.05,
                                                     redis_timeout = 10 })
        assert.same({ "v", nil, 3 }, { c:get("warm", nil, function()
            return "v"
        end) })
        server:stop()
        fx:defer(function()
            server:restart()
            raw = server:client()
        end)
        proc.sleep(0.1)            -- (past fleet_lag: the log is due)
        c:get("warm", nil, function() return "v" end)
        assert.equal(1, c:stats().redis_down)
        -- another process of the host probes Redis, holding the host's
        -- log lock while it waits for Redis
        local held, done = proc.pipe(), proc.pipe()
        local prober = proc.spawn(function()
            held:close_read()
            done:close_write()
            local lock = assert(resty_lock:new(zone, { exptime = 60 }))
            assert(lock:lock("probe#fleet:log"))
            held:notify()
            local told = done:await(10)
            lock:unlock()
            return told and 0 or 1
        end)
        held:close_write()
        done:close_read()
        assert.is_true(held:await(20), "the prober never held the lock")
        proc.sleep(0.1)            -- (past the probe interval, fleet_lag)
        local v = c:get("warm", nil, function() return "v" end)
        done:notify()
        assert.equal("v", v)
        -- the get came back while the prober still held the lock
        assert.same({ how = "exit", code = 0, msg = "" },
                    proc.wait(prober, 20))
    end)

    -- host b keeps "old" (stale_ttl, resurrect_ttl: a stale copy would be
    -- served), then misses, while Redis forgets (how), a purge of the
    -- cache on host a; b's get must not serve the purged value, stale or not
    local function purged_while_behind(how)
        local hosts = fleet_hosts.new(fx.dir, 2)
        fx:defer(function() hosts:destroy({ "fleet" }) end)
        local saved = fleet.LOG_LENGTH
        fx:defer(function() fleet.LOG_LENGTH = saved end)
        fleet.LOG_LENGTH = 5
        local opts = { fleet_lag = 0.05, stale_ttl = 60, resurrect_ttl = 60 }
        local a = hosts:cache_on(1, "fleet", port, opts)
        local b = hosts:cache_on(2, "fleet", port, opts)
        local function loader(v) return v end
        assert.same({ "old", nil, 3 }, { b:get("k", nil, loader, "old") })
        how(a)
        proc.sleep(0.1)            -- (past fleet_lag: b reads the log)
        -- (the loader fails: a stale "old" would be resurrected)
        assert.same({ nil, "backend down" }, { b:get("k", nil, function()
            return nil, "backend down"
        end) })
        assert.is_nil(b:peek("k", true))
    end

    it("a purge reaches a host whose cursor the log was trimmed past: it "
       .. "purges, not only demotes", function()
        purged_while_behind(function(a)
            assert.is_true(a:purge())
            for i = 1, 10 do
                assert.is_true(a:set("other" .. i, i))
            end
        end)
    end)

    it("a purge in a log made again (FLUSHALL) reaches a host of the old "
       .. "log: it purges, not only demotes", function()
        purged_while_behind(function(a)
            raw:flushall()
            assert.is_true(a:purge())
        end)
    end)
end)
