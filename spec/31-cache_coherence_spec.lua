-- resty.shmlock.cache: the L1 of every process follows set(), delete()
-- and purge() of any process (docs/cache.md#coherence).
--
-- The writer publishes each round in a control zone after its change has
-- returned; a reader that sees the round must then get the new state from
-- its next get(), although its L1 held the old value.

local proc = require "harness.proc"
local fixture = require "helpers.fixture"
local cache = require "resty.shmlock.cache"
local fake_shared = require "helpers.fake_shared"

local pack = table.pack or function(...) -- luacheck: ignore 143
    return { n = select("#", ...), ... }
end

-- a set() through another view of cache "coh" (an L1 of its own)
local function twin_set(zone, key, value)
    return assert(cache.new("coh", { dict = zone })):set(key, value)
end

local READERS = 4
local ROUNDS = 60

describe("resty.shmlock.cache coherence", function()
    local fx = fixture.new { dir = "test", children = "assert" }
    local zone, ctl

    before_each(function()
        zone = fx:zone("coh-values", { size = "1m" })
        ctl = fx:zone("coh-ctl", { size = "64k" })
    end)

    local function new_cache(opts)
        opts = opts or {}
        opts.dict = zone
        return assert(cache.new("coh", opts))
    end

    -- the loader of the readers: counts its calls
    local function loader(key)
        ctl:incr("loads", 1, 0)
        return "loaded " .. key
    end

    -- A reader: warms its L1 with every key, then for each round the
    -- writer publishes, gets every key (twice: the second from its L1)
    -- and records what it saw for the writer to check.
    local function reader(id, keys, ready)
        local c = new_cache({ ttl = 0 })
        for _, k in ipairs(keys) do
            c:get(k, nil, loader, k)
        end
        ready:notify()
        local seen = 0
        local deadline = proc.now() + 60
        while seen < ROUNDS do
            local round = ctl:get("round") or 0
            if round > seen then
                seen = round
                local parts = {}
                for _, k in ipairs(keys) do
                    local v1 = c:get(k, nil, loader, k)
                    local v2, _, level = c:get(k, nil, loader, k)
                    if v1 ~= v2 or level ~= 1 then
                        error("round " .. round .. ": " .. k .. " read "
                              .. tostring(v1) .. " then " .. tostring(v2)
                              .. " (hit_level " .. tostring(level) .. ")")
                    end
                    parts[#parts + 1] = tostring(v1)
                end
                ctl:set("saw:" .. round .. ":" .. id,
                        table.concat(parts, ","))
                ctl:incr("acks:" .. round, 1, 0)
            elseif proc.now() > deadline then
                error("reader " .. id .. " stuck at round " .. seen)
            else
                proc.sleep(0.0005)
            end
        end
    end

    local function start_readers(keys)
        local pids = {}
        for i = 1, READERS do
            local ready = proc.pipe()
            pids[i] = proc.spawn(reader, i, keys, ready)
            ready:close_write()
            assert.is_true(ready:await(20), "reader " .. i .. " ready")
            ready:close()
        end
        return pids
    end

    -- publishes round r and waits for every reader's answer
    local function publish(r)
        ctl:set("round", r)
        local deadline = proc.now() + 20
        while (ctl:get("acks:" .. r) or 0) < READERS do
            assert.is_true(proc.now() < deadline, "acks of round " .. r)
            proc.sleep(0.0005)
        end
    end

    it("every process's next get() sees a set(), a delete() and a purge() "
       .. "of another process", function()
        local keys = { "a", "b", "c" }
        local c = new_cache({ ttl = 0 })
        for _, k in ipairs(keys) do
            assert.is_true(c:set(k, k .. " 0"))
        end
        local pids = start_readers(keys)

        local want = {}
        for _, k in ipairs(keys) do
            want[k] = k .. " 0"
        end
        for r = 1, ROUNDS do
            if r % 10 == 0 then
                assert.same({ n = 1, true }, pack(c:purge()))
                for _, k in ipairs(keys) do
                    want[k] = "loaded " .. k
                end
            elseif r % 3 == 0 then
                local k = keys[r % #keys + 1]
                assert.same({ n = 1, true }, pack(c:delete(k)))
                want[k] = "loaded " .. k
            else
                local k = keys[r % #keys + 1]
                assert.same({ n = 1, true }, pack(c:set(k, k .. " " .. r)))
                want[k] = k .. " " .. r
            end
            publish(r)
            local expect = {}
            for i, k in ipairs(keys) do
                expect[i] = want[k]
            end
            expect = table.concat(expect, ",")
            for i = 1, READERS do
                assert.equal(expect, ctl:get("saw:" .. r .. ":" .. i),
                             "reader " .. i .. ", round " .. r)
            end
        end
        for _, r in ipairs(proc.wait_all(pids, 30)) do
            assert.same({ how = "exit", code = 0, msg = "" }, r)
        end
    end)

    it("a hit spinning in a JIT-compiled loop sees another process's "
       .. "set()", function()
        local c = new_cache({ ttl = 0 })
        assert.is_true(c:set("k", "old"))
        local ready = proc.pipe()
        local pid = proc.spawn(function()
            local mine = new_cache({ ttl = 0 })
            local function fail() error("no load expected") end
            assert(mine:get("k", nil, fail) == "old")
            ready:notify()
            -- no exit from the loop's trace but the change itself: a
            -- load hoisted out of the loop would never see it (the loop
            -- then ends after its 1e8 hits, a few seconds)
            for i = 1, 1e8 do
                local v = mine:get("k", nil, fail)
                if v ~= "old" then
                    ctl:set("spun", i)
                    return v == "new" and 0 or 3
                end
            end
            return 4
        end)
        ready:close_write()
        assert.is_true(ready:await(20))
        ready:close()
        proc.sleep(0.2)             -- the loop is compiled and spinning
        assert.is_true(c:set("k", "new"))
        assert.same({ how = "exit", code = 0, msg = "" }, proc.wait(pid, 20))
        assert.is_true(ctl:get("spun") > 100)
    end)

    it("revalidates an L1 copy whose word moved without reloading or "
       .. "decoding it again", function()
        local c = new_cache({ ttl = 0 })
        local other = assert(cache.new("coh-other", { dict = zone }))
        local t = { 1, 2, 3 }
        assert.is_true(c:set("t", t))
        local function fail() error("no load expected") end
        local v, err, level = c:get("t", nil, fail)
        assert.same({ t, nil, 1 }, { v, err, level })
        -- another cache's purge in the same zone moves every word
        assert.is_true(other:purge())
        v, err, level = c:get("t", nil, fail)
        assert.is_nil(err)
        assert.equal(1, level)
        assert.is_true(rawequal(t, v), "the same table, not a decoded copy")
        -- a set() of the key itself is a fresh value
        assert.is_true(twin_set(zone, "t", { 4 }))
        v, err, level = c:get("t", nil, fail)
        assert.same({ { 4 }, nil, 2 }, { v, err, level })
    end)

    it("follows set(), delete() and purge() through a counter key in a "
       .. "dict without generation words (an ngx.shared dict)", function()
        local fake, store = fake_shared.new()
        local locks = fx:zone("coh-locks", { size = "64k" })
        local a = assert(cache.new("coh-f", { dict = fake, lock_dict = locks,
                                              ttl = 0 }))
        local b = assert(cache.new("coh-f", { dict = fake, lock_dict = locks,
                                              ttl = 0 }))
        local function load() return "loaded" end
        assert.is_true(a:set("k", "one"))
        assert.same({ n = 3, "one", nil, 2 }, pack(b:get("k", nil, load)))
        assert.same({ n = 3, "one", nil, 1 }, pack(b:get("k", nil, load)))
        assert.is_true(a:set("k", "two"))
        assert.same({ n = 3, "two", nil, 2 }, pack(b:get("k", nil, load)))
        assert.is_true(a:delete("k"))
        assert.same({ n = 3, "loaded", nil, 3 }, pack(b:get("k", nil, load)))
        assert.is_true(b:set("k", "three"))
        assert.same({ n = 3, "three", nil, 2 }, pack(a:get("k", nil, load)))
        assert.is_true(b:purge())
        assert.same({ n = 3, "loaded", nil, 3 }, pack(a:get("k", nil, load)))
        assert.is_number(store["coh-f#gen"])
        -- a change that cannot be announced is an error
        fake.incr = function() return nil, "no memory" end
        local err = "could not announce the change: no memory"
        assert.same({ n = 2, nil, err }, pack(a:set("k", "four")))
        assert.same({ n = 2, nil, err }, pack(a:delete("k")))
        assert.same({ n = 2, nil, err }, pack(a:purge()))
    end)

    it("purge() empties the cache's keys in the zone and leaves other "
       .. "caches' keys", function()
        local c = new_cache({ ttl = 0 })
        local other = assert(cache.new("coh-other", { dict = zone }))
        for i = 1, 50 do
            assert.is_true(c:set("k" .. i, i))
        end
        assert.is_true(other:set("k1", "kept"))
        assert.same({ n = 1, true }, pack(c:purge()))
        for i = 1, 50 do
            assert.same({ n = 1, nil }, pack(c:peek("k" .. i)))
        end
        assert.same({ n = 3, "kept", nil, 1 },
                    pack(other:get("k1", nil, error)))
        assert.same({ n = 3, "x", nil, 3 },
                    pack(c:get("k1", nil, function() return "x" end)))
    end)
end)
