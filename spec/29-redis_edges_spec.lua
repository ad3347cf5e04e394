-- resty.shmlock.redis and resty.shmlock.redis.semaphore at their edges:
-- what a stopped Redis costs a call.  Redis is a private redis-server on a
-- free 127.0.0.1 port (helpers.redis_server); behaviour is pinned by
-- counts (connections made), never by timer margins.

local proc = require "harness.proc"
local fixture = require "helpers.fixture"
local server_helper = require "helpers.redis_server"
local redis_lock = require "resty.shmlock.redis"
local scripts = require "resty.shmlock.redis.scripts"
local socket = require "socket"
local redis = require "redis"

describe("resty.shmlock.redis at its edges", function()
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

    -- a connect function that counts its calls in n[1]
    local function counting(n)
        return function(timeout)
            n[1] = n[1] + 1
            return redis.connect("127.0.0.1", port, timeout)
        end
    end

    it("a stopped Redis costs a failed lock() its timeout and the "
       .. "clean-up's: a kept connection that timed out is not tried again "
       .. "on a new one", function()
        local n = { 0 }
        local lock = assert(redis_lock.new(counting(n), {
            dict = fx:zone("turns"), redis_timeout = 0.2, timeout = 1,
        }))
        assert.equal(0, (lock:lock("warm")))
        assert.equal(1, lock:unlock())
        assert.equal(1, n[1])
        server:pause()
        local ok, err = pcall(function()
            assert.same({ nil, "redis connection error: timeout" },
                        { lock:lock("k") })
            -- one more connection: the compare-and-delete sent after a
            -- lost reply (docs/redis.md, Failures)
            assert.equal(2, n[1])
        end)
        server:resume()
        assert(ok, err)
    end)

    it("a key that starts with '}' is one slot on a Redis Cluster too, and "
       .. "no two keys share a name", function()
        -- ("}x": the tag of "lock:{}x}" is empty, and Redis then hashes
        -- the whole name: the lock key and its fence key apart)
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
        local function connect(timeout)
            return redis.connect("127.0.0.1", cluster.port, timeout)
        end
        local keys = { "}", "}x", "\\}x", "\\", "\\\\", "x}", "{}" }
        local locks = {}
        for i, key in ipairs(keys) do
            locks[i] = assert(redis_lock.new(connect, { dict = false,
                                                        timeout = 0 }))
            -- each its own lock: all held at once
            assert.same({ 0, nil, 1 }, { locks[i]:lock(key) })
            assert.is_true(locks[i]:owned())
            assert.is_true(locks[i]:expire(10))
        end
        for i, key in ipairs(keys) do
            local other = assert(redis_lock.new(connect, { dict = false }))
            assert.same({ nil, "timeout" }, { other:trylock(key) })
            assert.equal(1, locks[i]:unlock())
        end
    end)

    it("a transfer whose taking times out (Redis stalls) leaves no lock "
       .. "nobody holds: the key is free once Redis answers again",
       function()
        local zone = fx:zone("turns")
        local function connect(timeout)
            return redis.connect("127.0.0.1", port, timeout)
        end
        local holder = assert(redis_lock.new(connect, {
            dict = zone, exptime = 30, redis_timeout = 0.1 }))
        assert.equal(0, (holder:lock("k")))
        -- the host's next process: Redis stalls (DEBUG SLEEP) just as it
        -- sends the transfer's take, longer than its redis_timeout
        local taker = proc.spawn(function()
            local lock = assert(redis_lock.new(function(timeout)
                local c = connect(timeout)
                local evalsha = c.evalsha
                c.evalsha = function(client, sha, ...)
                    if sha == scripts.extend.sha then
                        local s = socket.tcp()
                        assert(s:connect("127.0.0.1", port))
                        -- (shorter than the transfer's lease, HANDOFF)
                        assert(s:send("DEBUG SLEEP 0.3\r\n"))
                        socket.sleep(0.05)
                    end
                    return evalsha(client, sha, ...)
                end
                return c
            end, { dict = zone, exptime = 30, timeout = 5,
                   redis_timeout = 0.1 }))
            local elapsed, err = lock:lock("k")
            if elapsed then
                lock:unlock()
            end
            return elapsed and 0 or err == "redis connection error: timeout"
                   and 1 or 2
        end)
        -- it waits for the host's turn: then the key is handed to it
        local deadline = proc.now() + 20
        while zone:get("lock:{k}#n") ~= 1 do
            assert.is_true(proc.now() < deadline, "the taker never waited")
            proc.sleep(0.005)
        end
        assert.equal(1, holder:unlock())
        local r = proc.wait(taker, 20)
        assert.equal("exit", r.how)
        assert.is_true(r.code == 0 or r.code == 1, r.msg)
        -- Redis answers again: nobody holds the key
        assert.equal("PONG", raw:ping() and "PONG")
        local other = assert(redis_lock.new(connect, { dict = false }))
        assert.same({ 0, nil }, { (other:trylock("k")) })
        assert.equal(1, other:unlock())
    end)
end)
