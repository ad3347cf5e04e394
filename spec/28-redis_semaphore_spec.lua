-- resty.shmlock.redis.semaphore: each method's returns, leases on Redis's
-- clock, every caller's own limit, a permit board of 18 processes on 3
-- hosts that a violation would leave wrong, a SIGKILLed holder's permit,
-- waiters woken by a release and their host single flight.  Hosts are
-- zone directories (helpers.fleet_hosts); Redis is a private redis-server
-- on a free 127.0.0.1 port (helpers.redis_server).

local proc = require "harness.proc"
local fixture = require "helpers.fixture"
local server_helper = require "helpers.redis_server"
local fleet_hosts = require "helpers.fleet_hosts"
local shdict = require "resty.shmlock.shdict"
local rsem = require "resty.shmlock.redis.semaphore"
local permits = require "resty.shmlock.redis.permits"
local redis = require "redis"

local now, sleep = proc.now, proc.sleep
local SIGKILL = 9

-- the error f() raised, without its position (which must be this file's)
local function raised(f)
    local ok, err = pcall(f)
    assert.is_false(ok, "no error raised")
    assert.truthy(tostring(err):find("28%-redis_semaphore_spec%.lua:%d+: "),
                  "error does not point at the caller: " .. tostring(err))
    return (tostring(err):gsub("^.-28%-redis_semaphore_spec%.lua:%d+: ", ""))
end

local function eventually(cond, within)
    local deadline = now() + (within or 5)
    while not cond() do
        if now() > deadline then
            return false
        end
        sleep(0.005)
    end
    return true
end

-- the board: holders inside, counted by Redis itself, and the most seen
local ENTER = "local n = redis.call('INCR', KEYS[1]) "
              .. "if n > tonumber(redis.call('GET', KEYS[2]) or '0') then "
              .. "redis.call('SET', KEYS[2], n) end return n"

describe("resty.shmlock.redis.semaphore", function()
    local fx = fixture.new { dir = "test", children = "assert" }
    -- this process's own zones (shmlock_redis) in a directory of the block's
    fixture.new { dir = "block", env = true }
    local server, raw, port

    local function connect(timeout)
        return redis.connect("127.0.0.1", port, timeout or 2)
    end

    -- the hosts whose Redis waiter waits on a wake stream now
    local function waiting()
        return #server_helper.waiters(raw)
    end

    -- Redis's clock, ms
    local function redis_ms()
        local t = raw:time()
        return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end

    setup(function()
        server = server_helper.start()
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

    -- a semaphore of this process's host (its zone in the test's dir)
    local function sem(opts, client)
        local o = { dict = assert(shdict.open("shmlock_redis",
                                              { dir = fx.dir })) }
        for k, v in pairs(opts or {}) do
            o[k] = v
        end
        return assert(rsem.new(client or connect, o))
    end

    describe("methods", function()
        it("acquire, count, owned, expire and release", function()
            local s = sem({ permits = 2, exptime = 5 })
            -- a lease on Redis's clock, the set living as long: its end
            -- is 5 s after a time between these two reads of Redis's
            -- clock (exact bounds, whatever the load)
            local before = redis_ms()
            assert.equal(0, s:acquire("m"))
            local after = redis_ms()
            assert.same({ nil, "locked" }, { s:acquire("m") })
            assert.equal(1, s:count("m"))
            assert.is_true(s:owned())
            local score = tonumber(raw:zscore("sem:{m}", s.token))
            assert.is_true(score >= before + 5000 and score <= after + 5000,
                           score - before)
            assert.equal(score, raw:raw_cmd("PEXPIRETIME sem:{m}"))
            before = redis_ms()
            assert.is_true(s:expire(20))
            after = redis_ms()
            score = tonumber(raw:zscore("sem:{m}", s.token))
            assert.is_true(score >= before + 20000 and score <= after + 20000,
                           score - before)
            assert.equal(score, raw:raw_cmd("PEXPIRETIME sem:{m}"))
            assert.equal(1, s:release())
            assert.same({ nil, "unlocked" }, { s:release() })
            assert.same({ nil, "unlocked" }, { s:expire() })
            assert.same({ false, "unlocked" }, { s:owned() })
            assert.equal(0, s:count("m"))
            assert.same({ nil, "nil key" }, { s:acquire(nil) })
            assert.same({ nil, "empty key" }, { s:acquire("") })
            assert.same({ nil, "empty key" }, { s:count("") })
        end)

        it("permits is each caller's limit; a full key: 'timeout'",
           function()
            local a = sem({ permits = 2 })
            local b = sem({ permits = 2 })
            local one = sem({ permits = 1 })
            assert.equal(0, a:acquire("lim"))
            assert.same({ nil, "timeout" }, { one:acquire("lim", 0) })
            assert.equal(0, b:acquire("lim"))
            assert.same({ nil, "timeout" }, { sem({ permits = 2 })
                                                  :acquire("lim", 0.05) })
            assert.equal(0, sem({ permits = 3 }):acquire("lim"))
            assert.equal(3, a:count("lim"))
        end)

        it("a lease that ended: release 1, 'expired'; expire and owned "
           .. "say so; the permit is back", function()
            local s = sem({ exptime = 0.1 })
            assert.equal(0, s:acquire("e"))
            sleep(0.2)
            assert.same({ false, "expired" }, { s:owned() })
            assert.equal(0, s:count("e"))
            assert.same({ 1, "expired" }, { s:release() })
            assert.equal(0, s:acquire("e"))
            sleep(0.2)
            assert.same({ nil, "expired" }, { s:expire() })
            assert.same({ nil, "unlocked" }, { s:release() })
            -- taken by someone else meanwhile: still 1, "expired"
            assert.equal(0, s:acquire("e"))
            sleep(0.2)
            local other = sem()
            assert.equal(0, other:acquire("e"))
            assert.same({ 1, "expired" }, { s:release() })
            assert.is_true(other:owned())
        end)

        it("exptime 0: a permit that never ends", function()
            local s = sem({ exptime = 0 })
            assert.equal(0, s:acquire("never"))
            assert.equal("inf", raw:zscore("sem:{never}", s.token))
            assert.equal(-1, raw:pttl("sem:{never}"))
            assert.is_true(s:expire(1))
            assert.is_true(raw:pttl("sem:{never}") > 0)
            assert.is_true(s:expire(0))
            assert.equal(-1, raw:pttl("sem:{never}"))
            assert.equal(1, s:release())
        end)

        it("a copy in a forked child holds nothing there", function()
            local s = sem()
            assert.equal(0, s:acquire("fork"))
            local pid = proc.spawn(function()
                assert(s:release() == nil)
                assert(select(2, s:expire()) == "unlocked")
                assert(s:owned() == false)
            end)
            assert.equal(0, proc.wait(pid, 10).code)
            assert.is_true(s:owned())
            assert.equal(1, s:release())
        end)

        it("works with a connected client too (polling, no wake-ups)",
           function()
            local s = sem({ permits = 1 }, connect())
            assert.equal(0, s:acquire("cl"))
            local pid = proc.spawn(function()
                local other = assert(rsem.new(connect(), { timeout = 5,
                                                           dict = false }))
                assert(other:acquire("cl"))
                assert(other:release() == 1)
            end)
            sleep(0.2)
            assert.equal(1, s:release())
            assert.equal(0, proc.wait(pid, 10).code)
        end)

        it("raises on bad options at the caller's line", function()
            assert.equal("opts.permits must be an integer from 1 to "
                         .. rsem.PERMITS_MAX,
                         raised(function() rsem.new(connect,
                                                    { permits = 0 }) end))
            assert.equal("opts.permits must be an integer from 1 to "
                         .. rsem.PERMITS_MAX,
                         raised(function() rsem.new(connect,
                                                    { permits = 1.5 }) end))
            assert.equal("opts.exptime must be >= 0",
                         raised(function() rsem.new(connect,
                                                    { exptime = -1 }) end))
            assert.equal("opts.prefix must be a string",
                         raised(function() rsem.new(connect,
                                                    { prefix = 1 }) end))
            assert.equal("opts.dict must be a zone, a zone name or false",
                         raised(function() rsem.new(connect,
                                                    { dict = 7 }) end))
            assert.equal('bad "client" argument: a connected lua-redis '
                         .. 'client, lua-resty-redis object or a connect '
                         .. 'function expected',
                         raised(function() rsem.new(42) end))
            local s = sem()
            assert.equal("seconds must be >= 0",
                         raised(function() s:expire(-1) end))
            assert.equal("timeout must be a number",
                         raised(function() s:acquire("k", "1") end))
        end)

        it("runs its scripts by EVALSHA once Redis knows them", function()
            local s = sem()
            assert.equal(0, s:acquire("sha"))
            assert.is_true(s:expire())
            assert.is_true(s:owned())
            assert.equal(1, s:count("sha"))
            assert.equal(1, s:release())
            raw:config("resetstat")
            assert.equal(0, s:acquire("sha"))
            assert.is_true(s:expire())
            assert.is_true(s:owned())
            assert.equal(1, s:count("sha"))
            assert.equal(1, s:release())
            local stats = raw:info("commandstats").commandstats
            assert.is_nil(stats.cmdstat_eval)
            assert.matches("calls=5,", stats.cmdstat_evalsha)
            for name, script in pairs(permits) do
                assert.equal(script.sha, raw:script("load", script.src), name)
            end
        end)
    end)

    it("a permit board: 18 processes on 3 hosts, permits = 3, never more "
       .. "than 3 inside and 3 reached", function()
        local hosts = fleet_hosts.new(fx.dir, 3)
        fx:defer(function() hosts:destroy({ "shmlock_redis" }) end)
        local start = proc.pipe()
        local pids = {}
        for h = 1, 3 do
            for _ = 1, 6 do
                pids[#pids + 1] = hosts:spawn(h, function()
                    local c = connect()
                    local s = assert(rsem.new(connect, { permits = 3,
                                                         timeout = 30 }))
                    assert(start:wait_release(30))
                    for _ = 1, 8 do
                        assert(s:acquire("board"))
                        local n = c:eval(ENTER, 2, "inside", "most")
                        assert(n <= 3, n .. " inside")
                        sleep(0.002)
                        c:decr("inside")
                        assert(s:release() == 1)
                    end
                end)
            end
        end
        start:release()
        start:close()
        for i, r in ipairs(proc.wait_all(pids, 90)) do
            assert.equal(0, r.code, "process " .. i .. ": " .. r.msg)
        end
        assert.equal("3", raw:get("most"))
        assert.equal("0", raw:get("inside"))
    end)

    it("one waiter on Redis per host, not per process; a release wakes a "
       .. "waiting host at once, far within the backstop", function()
        local hosts = fleet_hosts.new(fx.dir, 3)
        fx:defer(function() hosts:destroy({ "shmlock_redis" }) end)
        local board = hosts.board
        local holder = assert(rsem.new(connect, { dict = false }))
        assert.equal(0, holder:acquire("wake"))
        local pids = {}
        for h = 1, 3 do
            for i = 1, 4 do
                pids[#pids + 1] = hosts:spawn(h, function()
                    local s = assert(rsem.new(connect, { timeout = 120,
                                                         max_step = 60 }))
                    assert(s:acquire("wake"))
                    board:set("at:" .. h .. ":" .. i, now())
                    assert(s:release() == 1)
                end)
            end
        end
        -- every process waits: on each host 3 for the host's turn (counted
        -- in the zone), and the turn's holder on Redis
        local zones = {}
        for h = 1, 3 do
            zones[h] = assert(shdict.open("shmlock_redis",
                                          { dir = hosts.dirs[h] }))
        end
        assert.is_true(eventually(function()
            for h = 1, 3 do
                if zones[h]:get("sem:{wake}#n") ~= 3 then
                    return false
                end
            end
            return waiting() == 3
        end, 60))
        assert.equal(3, waiting())
        local released = now()
        assert.equal(1, holder:release())
        for i, r in ipairs(proc.wait_all(pids, 150)) do
            assert.equal(0, r.code, "process " .. i .. ": " .. r.msg)
        end
        local last = 0
        for h = 1, 3 do
            for i = 1, 4 do
                last = math.max(last, board:get("at:" .. h .. ":" .. i)
                                      - released)
            end
        end
        -- 12 holders one after the other, each woken by the release
        -- before it: a poll would take the backstop, 60 s (the time
        -- itself is no margin on a loaded box: only a missed wake-up
        -- reaches this ceiling)
        assert.is_true(last < 30, last)
    end)

    it("gives a SIGKILLed holder's permit back when its lease ends, not "
       .. "before (the delay is reported)", function()
        local hosts = fleet_hosts.new(fx.dir, 2)
        fx:defer(function() hosts:destroy({ "shmlock_redis" }) end)
        local board = hosts.board
        local ready = proc.pipe()
        local holder = hosts:spawn(1, function()
            ready:close_read()
            local s = assert(rsem.new(connect, { exptime = 1 }))
            -- (before the acquire: its lease ends 1 s after this, or later)
            board:set("asked", now())
            assert(s:acquire("dead") == 0)
            ready:notify()
            sleep(30)
        end)
        ready:close_write()
        assert.is_true(ready:await(10))
        local waiters = {}
        for h = 1, 2 do
            waiters[h] = hosts:spawn(h, function()
                local s = assert(rsem.new(connect, { timeout = 60,
                                                     max_step = 0.5 }))
                assert(s:acquire("dead"))
                board:set("at:" .. h, now())
                assert(s:release() == 1)
            end)
        end
        proc.kill(holder, SIGKILL)
        proc.wait(holder, 5)
        for h = 1, 2 do
            assert.equal(0, proc.wait(waiters[h], 90).code)
            local took = board:get("at:" .. h) - board:get("asked")
            io.stderr:write(("\n    host %d took the permit %.0f ms after "
                             .. "the lease began (lease 1 s, backstop "
                             .. "0.5 s)\n"):format(h, took * 1000))
            -- not before the lease ended (Redis's clock; 10 ms for the
            -- clocks' ms rounding); only a waiter that stopped trying
            -- reaches the ceiling (its timeout is 60 s)
            assert.is_true(took >= 0.99, "host " .. h .. ": " .. took)
            assert.is_true(took < 30, "host " .. h .. ": " .. took)
        end
    end)
end)
