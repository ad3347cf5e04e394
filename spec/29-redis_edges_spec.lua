-- resty.shmlock.redis and resty.shmlock.redis.semaphore at their edges:
-- what a stopped Redis costs a call.  Redis is a private redis-server on a
-- free 127.0.0.1 port (helpers.redis_server); behaviour is pinned by
-- counts (connections made), never by timer margins.

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
end)
