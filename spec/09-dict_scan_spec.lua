-- dict:scan(): a walk over the keys in steps of whole hash buckets, and
-- get_keys(0) and the cache's purge(), which walk so too: every key live
-- for the whole walk comes once, each step walks a bounded number of
-- buckets, and a walk ends whatever another process writes meanwhile.

local proc = require "harness.proc"
local fixture = require "helpers.fixture"
local cache = require "resty.shmlock.cache"

local function sorted(t)
    table.sort(t)
    return t
end

-- walks the whole zone with scan(count): the keys met (key -> times) and
-- the steps taken; each step's keys are checked with on_step(keys)
local function walk(d, count, on_step)
    local seen, steps, cursor = {}, 0, 0
    repeat
        local next_cursor, keys = d:scan(cursor, count)
        assert.is_number(next_cursor, keys)
        if on_step then
            on_step(keys)
        end
        for _, k in ipairs(keys) do
            seen[k] = (seen[k] or 0) + 1
        end
        cursor = next_cursor
        steps = steps + 1
        assert.is_true(steps < 1e7, "the walk does not end")
    until cursor == 0
    return seen, steps
end

describe("dict:scan()", function()
    local fx = fixture.new { children = "assert" }

    for _, shards in ipairs({ 1, 4 }) do
        it("meets every live key once from cursor 0 back to 0 ("
           .. shards .. " shards)", function()
            local d = fx:zone("s", { size = "4m", shards = shards })
            local want = {}
            for i = 1, 3000 do
                assert.is_true((d:set("k" .. i, i)))
                want["k" .. i] = 1
            end
            assert.equal(1, (d:lpush("list", "x")))
            want.list = 1
            assert.is_true((d:set("a\0b", "nul")))
            want["a\0b"] = 1
            assert.is_true((d:set("gone", 1, 0.001)))
            proc.sleep(0.01)
            for _, count in ipairs({ 1, 10, 100, 5000 }) do
                assert.same(want, (walk(d, count)))
            end
        end)
    end

    it("walks count buckets per step: an empty zone in shards x "
       .. "ceil(buckets / count) steps", function()
        local d = fx:zone("s", { size = "4m", shards = 4 })
        local _, per_bucket = walk(d, 1)
        local buckets = per_bucket / 4
        assert.equal(0, buckets % 1)
        for _, count in ipairs({ 7, 100, 1024 }) do
            local _, steps = walk(d, count)
            assert.equal(4 * math.ceil(buckets / count), steps)
        end
        -- the default count: 100
        local _, steps = walk(d)
        assert.equal(4 * math.ceil(buckets / 100), steps)
    end)

    it("ends a step after the bucket that brought it to count keys",
       function()
        local d = fx:zone("s", { size = "4m", shards = 1 })
        for i = 1, 20000 do
            assert.is_true((d:set("k" .. i, i)))
        end
        local most = 0
        local seen = walk(d, 10, function(keys)
            most = math.max(most, #keys)
        end)
        local n = 0
        for _ in pairs(seen) do
            n = n + 1
        end
        assert.equal(20000, n)
        -- 10 keys, but for the last bucket's others (a chain is short)
        assert.is_true(most >= 10 and most < 20, "a step of " .. most)
    end)

    it("returns keys larger than its buffer, one bucket at a time",
       function()
        local d = fx:zone("s", { size = "1m", shards = 1 })
        local want = {}
        for i = 1, 3 do
            local k = string.rep(string.char(96 + i), 60000)
            assert.is_true((d:set(k, i)))
            want[k] = 1
        end
        assert.same(want, (walk(d, 1)))
        assert.equal(3, #d:get_keys(0))
    end)

    it("ends the walk at a cursor beyond the zone", function()
        local d = fx:zone("s", { size = "64k" })
        assert.is_true((d:set("k", 1)))
        assert.same({ 0, {} }, { d:scan(2 ^ 40) })
        assert.same({ 0, {} }, { d:scan(2 ^ 31) })
    end)

    it("raises on a bad cursor or count", function()
        local d = fx:zone("s", { size = "64k" })
        for _, c in ipairs({ -1, 1.5, 0 / 0, 2 ^ 53, "0", true }) do
            assert.has_error(function() d:scan(c) end, 'bad "cursor" argument')
        end
        assert.has_error(function() d:scan() end, 'bad "cursor" argument')
        for _, n in ipairs({ 0, -1, 1.5, 0 / 0, 2 ^ 31, "1" }) do
            assert.has_error(function() d:scan(0, n) end,
                             'bad "count" argument')
        end
        assert.has_error(function() d.scan({}, 0) end, 'bad "zone" argument')
    end)

    it("answers nil, 'zone destroyed' on a destroyed zone", function()
        local shdict = require "resty.shmlock.shdict"
        local d = fx:zone("s", { size = "64k" })
        assert.is_true((shdict.destroy("s", { dir = fx.dir })))
        assert.same({ nil, "zone destroyed" }, { d:scan(0) })
        assert.same({ nil, "zone destroyed" }, { d:get_keys(0) })
    end)
end)

describe("walks while another process never stops inserting", function()
    local fx = fixture.new { children = "assert" }

    -- The inserter adds keys until told to stop (zone key "stop"), or
    -- until the zone is 90% full ("full"; it evicts nothing): get_keys(0)
    -- started over whenever the zone had grown during its walk, and ended
    -- only then.  Now it walks each bucket once, and is done long before
    -- (a walk is faster per key than an insert; 200 000 keys are there).
    local function inserter(d, started)
        started:close_read()
        local i = 0
        while not d:get("stop") do
            i = i + 1
            assert(d:set("new:" .. i, i))
            if i == 1000 then
                started:notify()
            end
            if i % 1000 == 0
               and d:free_space() < d:capacity() / 10 then
                assert(d:set("full", i))
                break
            end
        end
        while not d:get("stop") do
            proc.sleep(0.001)
        end
    end

    -- scan's walk, counting its steps and the keys it returned; no
    -- assertion per step (busted's are slow: the inserter would win)
    local function fast_walk(d, count)
        local seen, steps, returned, cursor = {}, 0, 0, 0
        repeat
            local next_cursor, keys = d:scan(cursor, count)
            if not next_cursor then
                error(keys)
            end
            for i = 1, #keys do
                seen[keys[i]] = (seen[keys[i]] or 0) + 1
            end
            returned = returned + #keys
            cursor = next_cursor
            steps = steps + 1
        until cursor == 0
        return seen, steps, returned
    end

    it("get_keys(0), a cache's purge() and scan end, and meet every key "
       .. "live throughout", function()
        local d = fx:zone("walk", { size = "256m" })
        local stable = {}
        for i = 1, 200000 do
            assert.is_true((d:set("stable:" .. i, i)))
            stable[#stable + 1] = "stable:" .. i
        end
        local c = assert(cache.new("c", { dict = d }))
        for i = 1, 100 do
            assert.is_true((c:set("k" .. i, i)))
        end

        local started = proc.pipe()
        local pid = proc.spawn(inserter, d, started)
        started:close_write()
        assert.is_true(started:await(30), "the inserter did not start")

        local keys = d:get_keys(0)
        assert.same({ true }, { c:purge() })
        assert.is_nil(d:get("full"), "get_keys(0) and purge() ended when "
                                     .. "the zone was full")
        local seen, steps, returned = fast_walk(d, 1000)
        assert.is_true((d:set("stop", true)))
        assert.same("exit", proc.wait(pid, 60).how)

        -- a step walks 1000 buckets, or returns 1000 keys or more, or
        -- ends its shard: whatever the inserter did
        local _, empty = fast_walk(fx:zone("empty", {
            size = "256m", shards = d:shards() }), 1000)
        assert.is_true(steps <= empty + returned / 1000,
                       steps .. " steps for " .. returned .. " keys")
        local got = {}
        for _, k in ipairs(stable) do
            assert.equal(1, seen[k], k)
        end
        for _, k in ipairs(keys) do
            if k:sub(1, 7) == "stable:" then
                got[#got + 1] = k
            end
        end
        assert.same(sorted(stable), sorted(got))
        for i = 1, 100 do
            assert.is_nil(c:peek("k" .. i))
        end
    end)
end)
