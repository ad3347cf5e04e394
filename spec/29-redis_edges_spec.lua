-- resty.shmlock.redis and resty.shmlock.redis.semaphore at their edges:
-- what a stopped Redis costs a call.  Redis is a private redis-server on a
-- free 127.0.0.1 port (helpers.redis_server); behaviour is pinned by
-- counts (connections made), never by timer margins.

local proc = require "harness.proc"
local fixture = require "helpers.fixture"
local server_helper = require "helpers.redis_server"
local redis_lock = require "resty.shmlock.redis"
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
end)
