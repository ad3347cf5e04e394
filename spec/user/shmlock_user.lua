-- A user's spec, as docs/testing.md writes one: it requires the library
-- and runs under busted as installed (Debian's /usr/bin/busted, Lua 5.2,
-- no .busted), from anywhere, twice in a row (scripts/test-busted.sh).
-- Not named *_spec.lua: the project's own suite does not collect it.

local testing = require "resty.shmlock.testing"
local shdict = require "resty.shmlock.shdict"
local cache = require "resty.shmlock.cache"
local resty_lock = require "resty.shmlock"

describe("an application's use of resty.shmlock", function()
    -- a zone directory for this run, removed at its end: the second run
    -- starts from empty zones as the first did
    setup(function()
        testing.zone_dir()
    end)
    teardown(function()
        testing.remove_zone_dir()
    end)

    it("counts from zero in a fresh zone", function()
        local d = assert(shdict.open("counts"))
        assert.equal(1, d:incr("hits", 1, 0))
    end)

    it("caches a value set by another process", function()
        local results = testing.processes(1, [[
            local cache = require "resty.shmlock.cache"
            local c = assert(cache.new("users"))
            assert(c:set("user:1", { name = "ann", roles = { "admin" } }))
        ]])
        assert.is_true(results[1].ok, results[1].output)
        local c = assert(cache.new("users"))
        local user, err, level = c:get("user:1", nil, error)
        assert.is_nil(err)
        assert.equal(2, level)
        assert.same({ name = "ann", roles = { "admin" } }, user)
        assert.equal(1, select(3, c:get("user:1", nil, error)))
    end)

    it("keeps a counter exact across processes started together",
       function()
        local results = testing.processes(4, [[
            local d = assert(require("resty.shmlock.shdict").open("counts"))
            for _ = 1, 500 do
                assert(d:incr("together", 1, 0))
            end
        ]])
        for i, r in ipairs(results) do
            assert.is_true(r.ok, i .. ": " .. r.output)
        end
        assert.equal(2000, assert(shdict.open("counts")):get("together"))
    end)

    it("calls the loader once for 8 processes missing at once", function()
        assert(shdict.open("locks"))
        assert(resty_lock:new("locks"))
        local results = testing.processes(8, [[
            local cache = require "resty.shmlock.cache"
            local d = assert(require("resty.shmlock.shdict").open("counts"))
            local c = assert(cache.new("stampede"))
            local v = assert(c:get("key", nil, function()
                assert(d:incr("loads", 1, 0))
                require("resty.shmlock.internal.clock").sleep(0.2)
                return "loaded"
            end))
            assert(v == "loaded")
        ]])
        for i, r in ipairs(results) do
            assert.is_true(r.ok, i .. ": " .. r.output)
        end
        assert.equal(1, assert(shdict.open("counts")):get("loads"))
    end)
end)
