-- The fleet tier (resty.shmlock.cache with opts.redis) at its edges: a
-- value fetched in its last millisecond in Redis, a lock that never
-- expires (lock_opts.exptime = 0), keys of any bytes.  Hosts are zone
-- directories (helpers.fleet_hosts); Redis a private redis-server on a
-- free 127.0.0.1 port (helpers.redis_server).  Behaviour is pinned by
-- counts, never by timer margins.

local fixture = require "helpers.fixture"
local server_helper = require "helpers.redis_server"
local fleet_hosts = require "helpers.fleet_hosts"
local codec = require "resty.shmlock.cache.codec"

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
        local entry = "0:" .. codec.encode("v", 0, 0)
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
end)
