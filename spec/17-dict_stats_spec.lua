-- dict:stats(): the zone's figures and counters, kept in the zone, so
-- exact across processes: what several processes did adds up to the
-- last figure, for each counter, and a zone's figures are its shards'.

local proc = require "harness.proc"
local fixture = require "helpers.fixture"
local checkout = require "helpers.checkout"
local shdict = require "resty.shmlock.shdict"
local children = require "helpers.children"

local pack = checkout.pack

local FIELDS = { "capacity", "free_space", "entries", "evictions", "expired",
                 "spins", "sleeps", "takeovers", "recoveries" }
local COUNTERS = { "evictions", "expired", "spins", "sleeps", "takeovers",
                   "recoveries" }

local expect_clean_exits = children.expect_clean_exits
local spawn_holder = children.mutex_holder

-- the stats, checked for shape: every field a whole number >= 0, one
-- table per shard, the zone's figures the sums of its shards' (capacity:
-- the whole file, more than its shards')
local function stats(dict)
    local st = assert(dict:stats())
    assert.equal(dict:shards(), st.shards)
    assert.equal(st.shards, #st.shard)
    assert.equal(dict:capacity(), st.capacity)
    for _, f in ipairs(FIELDS) do
        local sum = 0
        for s, one in ipairs(st.shard) do
            local v = one[f]
            assert.is_true(type(v) == "number" and v >= 0 and v % 1 == 0,
                           "shard " .. s .. " " .. f .. ": " .. tostring(v))
            sum = sum + v
        end
        if f == "capacity" then
            assert.is_true(sum > 0 and sum < st.capacity)
        else
            assert.equal(sum, st[f], f .. ": the shards' sum")
        end
    end
    return st
end

-- the counters of a stats table, for assert.same
local function counters(st)
    local t = {}
    for _, f in ipairs(COUNTERS) do
        t[f] = st[f]
    end
    return t
end

-- the counters no contention changes
local function changes(st)
    return { evictions = st.evictions, expired = st.expired,
             takeovers = st.takeovers, recoveries = st.recoveries }
end

local function zero_but(t)
    local all = {}
    for _, f in ipairs(COUNTERS) do
        all[f] = t[f] or 0
    end
    return all
end


describe("resty.shmlock.shdict stats()", function()
    local fx = fixture.new { dir = "test", children = "assert" }

    it("describes a new zone: its size, its shards, no counts", function()
        local dict = fx:zone("fresh", { size = "4m" })
        local st = stats(dict)
        assert.equal(4, st.shards)
        assert.equal(dict:free_space(), st.free_space)
        assert.equal(0, st.entries)
        assert.same(zero_but {}, counters(st))
        for _, one in ipairs(st.shard) do
            assert.equal(st.shard[1].capacity, one.capacity)
            assert.equal(st.shard[1].free_space, one.free_space)
            assert.same(zero_but {}, counters(one))
        end
        assert.is_nil(st.shard[1].shards)
        assert.is_nil(st.shard[1].shard)
    end)

    it("counts live entries only: an expired one not yet freed is not "
       .. "an entry, but still takes its space", function()
        local dict = fx:zone("live", { size = "64k" })
        assert.is_true((dict:set("stays", "v")))
        assert.is_true((dict:add("pinned", 1)))
        assert.is_true((dict:set("goes", "v", 0.001)))
        proc.sleep(0.01)
        local st = stats(dict)
        assert.equal(2, st.entries)
        assert.equal(#dict:get_keys(0), st.entries)
        assert.equal(dict:free_space(), st.free_space)
        assert.equal(0, st.expired)
        assert.equal(1, dict:flush_expired())
        local after = stats(dict)
        assert.equal(2, after.entries)
        assert.equal(1, after.expired)
        assert.equal(st.free_space + 64, after.free_space)
    end)

    it("returns nil, 'zone destroyed' once any process destroyed the zone",
       function()
        local dict = fx:zone("gone", { size = "64k" })
        local pid = proc.spawn(function()
            assert(shdict.destroy("gone", { dir = fx.dir }))
        end)
        expect_clean_exits({ pid })
        assert.same({ n = 2, nil, "zone destroyed" }, pack(dict:stats()))
    end)

    it("raises when called on something that is not a dict", function()
        local dict = fx:zone("misuse", { size = "64k" })
        assert.has_error(function() dict.stats({}) end, 'bad "zone" argument')
        assert.has_error(function() dict.stats() end, 'bad "zone" argument')
    end)

    it("counts, exactly, the expired entries of 4 processes that "
       .. "flush_expired frees (and stores freed before it)", function()
        local PROCS, SHORT, KEEP = 4, 500, 100
        local dict = fx:zone("expiry", { size = "4m" })
        local pids = {}
        for p = 1, PROCS do
            pids[p] = proc.spawn(function()
                for i = 1, SHORT do
                    assert(dict:set(p .. ":short:" .. i, i, 0.001))
                end
                for i = 1, KEEP do
                    assert(dict:set(p .. ":keep:" .. i, i))
                end
            end)
        end
        expect_clean_exits(pids)
        proc.sleep(0.01)
        local freed = dict:flush_expired()
        local st = stats(dict)
        assert.is_true(freed > 0 and freed <= PROCS * SHORT)
        assert.equal(PROCS * SHORT, st.expired)
        assert.equal(PROCS * KEEP, st.entries)
        assert.same({ evictions = 0, expired = PROCS * SHORT, takeovers = 0,
                      recoveries = 0 }, changes(st))
    end)

    it("counts the expired entries that stores free to make room (the LRU "
       .. "tail, the sweep of pinned ones) once each, across 4 processes",
       function()
        local PROCS, EACH = 4, 64
        local dict = fx:zone("room", { size = "64k", shards = 1 })
        local tally = fx:zone("room-tally", { size = "64k" })
        local phase2 = proc.pipe()
        local done, pids = {}, {}
        for p = 1, PROCS do
            done[p] = proc.pipe()
            pids[p] = proc.spawn(function()
                phase2:close_write()
                done[p]:close_read()
                -- one-chunk entries that expire at once, evictable and
                -- pinned
                for i = 1, EACH do
                    assert(dict:set(p .. "s" .. i, i, 0.02))
                    assert(dict:add(p .. "a" .. i, i, 0.02))
                end
                done[p]:notify()
                if not phase2:wait_release(20) then
                    error("never released")
                end
                -- pinned entries that never expire, until the zone is
                -- full: room made only from the expired ones
                local added = 0
                for i = 1, 100000 do
                    local ok, err, forcible = dict:add(p .. "k" .. i, i)
                    if not ok then
                        assert(err == "no memory", err)
                        break
                    end
                    assert(forcible == false)
                    added = added + 1
                end
                assert(tally:incr("added", added, 0))
            end)
            done[p]:close_write()
        end
        for p = 1, PROCS do
            assert.is_true(done[p]:await(20))
            done[p]:close()
        end
        proc.sleep(0.05)                -- every first entry has expired
        phase2:release()
        expect_clean_exits(pids)
        phase2:close()

        local freed = dict:flush_expired()
        local st = stats(dict)
        assert.equal(2 * PROCS * EACH, st.expired)
        assert.is_true(freed < st.expired / 2, "flush_expired freed "
                       .. freed .. ": the stores freed too few")
        assert.equal(tally:get("added"), st.entries)
        assert.same({ evictions = 0, expired = 2 * PROCS * EACH,
                      takeovers = 0, recoveries = 0 }, changes(st))
    end)

    it("counts each live entry evicted: the forcible stores of 4 processes"
       .. " in a full shard", function()
        local PROCS, STORES = 4, 2000
        local dict = fx:zone("evict", { size = "64k", shards = 1 })
        local tally = fx:zone("evict-tally", { size = "64k" })
        local pids = {}
        for p = 1, PROCS do
            pids[p] = proc.spawn(function()
                -- a key of at most 16 bytes and a number: one chunk each,
                -- so a store into the full shard evicts exactly one entry
                local forced = 0
                for i = 1, STORES do
                    local ok, err, forcible = dict:set(p .. ":" .. i, i)
                    assert(ok, err)
                    if forcible then
                        forced = forced + 1
                    end
                end
                assert(tally:incr("forcible", forced, 0))
            end)
        end
        expect_clean_exits(pids)
        local st = stats(dict)
        local forced = tally:get("forcible")
        assert.is_true(forced > 0)
        assert.equal(PROCS * STORES - st.entries, forced)
        assert.same({ evictions = forced, expired = 0, takeovers = 0,
                      recoveries = 0 }, changes(st))
    end)

    it("counts an expired entry the LRU CLOCK frees as expired, not as an "
       .. "eviction", function()
        local dict = fx:zone("clock", { size = "64k", shards = 1 })
        -- at the LRU tail, entries read since they were written (a
        -- second turn each); then expiring ones filling the shard
        for i = 1, 100 do
            assert.is_true((dict:set("l" .. i, i)))
        end
        local left = dict:free_space() / 64
        for i = 1, left do
            assert.is_true((dict:set("e" .. i, i, 0.02)))
        end
        assert.equal(0, dict:free_space())
        for i = 1, 100 do
            assert.equal(i, dict:get("l" .. i))
        end
        proc.sleep(0.05)

        -- the 64 entries looked at near the tail are live: the CLOCK
        -- turns the 100 read ones over and frees the first expired one
        assert.same({ true, nil, false }, { dict:set("new", 1) })
        local st = stats(dict)
        assert.same({ evictions = 0, expired = 1, takeovers = 0,
                      recoveries = 0 }, changes(st))
        assert.equal(101, st.entries)
        assert.equal(left - 1, dict:flush_expired())
        assert.equal(left, stats(dict).expired)
    end)

    it("counts one takeover and one recovery for each shard whose holder "
       .. "was killed", function()
        local dict = fx:zone("dead", { size = "4m" })
        assert.is_true((dict:set("before", "kept")))
        local holder = spawn_holder(dict)
        proc.kill(holder)
        assert.equal("signal", proc.wait(holder, 5).how)

        local st = stats(dict)
        assert.equal(4, st.shards)
        for s, one in ipairs(st.shard) do
            -- the takeover's acquisition slept: the owner is suspected
            -- dead only after a whole sleep
            assert.same(zero_but { takeovers = 1, recoveries = 1,
                                   sleeps = 1 }, counters(one),
                        "shard " .. (s - 1))
        end
        assert.equal("kept", dict:get("before"))
        -- counted once: the next acquisitions wait for nobody
        assert.same(counters(st), counters(stats(dict)))
    end)

    it("counts an acquisition that slept on the futex, once", function()
        local dict = fx:zone("sleep", { size = "64k" })
        local go = proc.pipe()
        local holder = spawn_holder(dict, go)
        local waiter = proc.spawn(function()
            go:close()
            assert(dict:set("k", "v"))
        end)
        assert.is_true(proc.await_futex_sleep(waiter, 10))
        proc.sleep(0.02)            -- several sleeps: still one acquisition
        go:notify()
        go:close()
        expect_clean_exits({ holder, waiter })
        local st = stats(dict)
        assert.same(zero_but { sleeps = 1 }, counters(st))
        assert.equal("v", dict:get("k"))
    end)

    it("counts the acquisitions that had to wait when 4 processes "
       .. "contend for one shard", function()
        local PROCS, LEAST = 4, 20000
        local dict = fx:zone("busy", { size = "64k" })
        local tally = fx:zone("busy-tally", { size = "64k" })
        local start = proc.pipe()
        local pids = {}
        for p = 1, PROCS do
            pids[p] = proc.spawn(function()
                if not start:wait_release(10) then
                    error("never released")
                end
                -- until the parent has seen enough (the stop key is in
                -- another zone: reading it takes no mutex of this one)
                local n = 0
                repeat
                    for _ = 1, 100 do
                        assert(dict:incr("n", 1, 0))
                    end
                    n = n + 100
                until tally:get("stop")
                assert(tally:incr("done", n, 0))
            end)
        end
        start:release()
        -- which acquisitions wait is up to the scheduler: that some do,
        -- within 10 s, is what a maintained counter shows
        local deadline, st = proc.now() + 10
        repeat
            proc.sleep(0.01)
            st = stats(dict)
        until (st.spins > 0 and (dict:get("n") or 0) >= LEAST)
              or proc.now() > deadline
        assert(tally:set("stop", true))
        expect_clean_exits(pids)
        start:close()

        local total = tally:get("done")
        assert.equal(total, dict:get("n"))
        st = stats(dict)
        print(string.format("\n  %d processes, %d incr on one shard: %d "
                            .. "spins, %d sleeps", PROCS, total, st.spins,
                            st.sleeps))
        assert.is_true(st.spins > 0, "no acquisition spun")
        -- each acquisition counted once at most (incr, and stats' own)
        assert.is_true(st.spins + st.sleeps < total)
        assert.same({ evictions = 0, expired = 0, takeovers = 0,
                      recoveries = 0 }, changes(st))
    end)
end)
