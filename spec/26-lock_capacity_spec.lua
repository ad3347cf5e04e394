-- How many locks a zone holds at once (issue 34): its slot table is a
-- floor, and locks past it spill into the shard's chunks, two each,
-- taking memory back from `set` entries as a `set` does.  So a 10 MiB
-- zone holds at least 50,000 locks at once (an ngx.shared dict of 10m
-- with resty.lock: about 81,000, and then its LRU evicts live locks; the
-- fixed slot tables before: about 3,300); "no memory" comes only when the
-- zone's memory is held by locks and `add` entries; a zone full of `set`
-- entries refuses no lock.  Counts, not timings.

local fixture = require "helpers.fixture"
local resty_lock = require "resty.shmlock"
local semaphore = require "resty.shmlock.semaphore"

-- locks of keys prefix1, prefix2, ... taken until "no memory" (at most
-- `most`): the lock objects, held, and the error that stopped it
local function lock_until_full(dict, prefix, most)
    local held = {}
    for i = 1, most do
        local lock = assert(resty_lock:new(dict))
        local elapsed, err = lock:lock(prefix .. i)
        if not elapsed then
            return held, err
        end
        held[i] = lock
    end
    return held, nil
end

local function unlock_all(held)
    for _, lock in ipairs(held) do
        assert.equal(1, (lock:unlock()))
    end
end

describe("a zone's lock slots", function()
    local fx = fixture.new { dir = "test" }

    it("hold at least 50,000 locks at once in a 10 MiB zone, then answer "
       .. "\"no memory\" with the zone's memory used up", function()
        local dict = fx:zone("cap", { size = "10m" })
        local held, err = lock_until_full(dict, "lock:", 200000)
        assert.equal("no memory", err)
        assert.is_true(#held >= 50000, #held .. " locks held at once")
        print(("\n%d locks held at once in a 10 MiB zone"):format(#held))
        -- the memory is really used: the refused key's shard has no room
        -- left (keys spread over the shards by their hashes: the others
        -- are as full, within a percent)
        local st = dict:stats()
        local least = st.capacity
        for _, one in ipairs(st.shard) do
            least = math.min(least, one.free_space)
        end
        assert.is_true(least < 128, "a shard's free space: " .. least)
        assert.is_true(st.free_space < 0.02 * st.capacity,
                       "free space left: " .. st.free_space)
        assert.equal(#held, st.slots_used)
        assert.is_true(dict:verify())
        -- released, the chunks go back to the dictionary
        unlock_all(held)
        assert.is_true(dict:stats().slots_used < st.slots_used / 10)
        assert.is_true(dict:free_space() > 0.8 * dict:capacity())
        assert.is_true(dict:verify())
    end)

    it("never refuse a lock in a zone full of set entries: the entries "
       .. "make room", function()
        local dict = fx:zone("setfull", { size = "1m" })
        local value = ("v"):rep(40)
        local i = 0
        repeat
            i = i + 1
            local ok, err, forcible = dict:set("entry" .. i, value)
            assert.is_true(ok, err)
        until forcible
        assert.is_true(dict:free_space() < 256)
        -- as many locks as in an empty zone of that size
        local empty = fx:zone("empty", { size = "1m" })
        local want = lock_until_full(empty, "lock:", 100000)
        local held, err = lock_until_full(dict, "lock:", 100000)
        assert.equal("no memory", err)
        assert.equal(#want, #held)
        assert.is_true(#held > 5000, #held .. " locks in 1 MiB")
        assert.equal(0, #dict:get_keys(0))
        assert.is_true(dict:verify())
        unlock_all(held)
        unlock_all(want)
    end)

    it("leave live add() entries alone: only the floor's locks fit in a "
       .. "zone full of them", function()
        local dict = fx:zone("addfull", { size = "1m" })
        local i = 0
        while true do
            i = i + 1
            local ok, err = dict:add("entry" .. i, ("a"):rep(40))
            if not ok then
                assert.equal("no memory", err)
                break
            end
        end
        local n = #dict:get_keys(0)
        local floor = dict:stats().slots
        local held, err = lock_until_full(dict, "lock:", 100000)
        assert.equal("no memory", err)
        assert.equal(floor - floor / 8, #held)
        assert.equal(n, #dict:get_keys(0))
        assert.is_true(dict:verify())
        unlock_all(held)
    end)

    it("give semaphore permits and shared holds the same room", function()
        local dict = fx:zone("groups", { size = "1m" })
        local floor = dict:stats().slots
        local sems, shared = {}, {}
        for i = 1, 3 * floor do
            local sem = assert(semaphore:new(dict, { permits = 1000 }))
            assert.equal(0, (sem:acquire("sem" .. i % 7)))
            sems[i] = sem
            local reader = assert(resty_lock:new(dict))
            assert.equal(0, (reader:lock_shared("shared" .. i % 5)))
            shared[i] = reader
        end
        assert.is_true(dict:stats().slots_used > 2 * floor)
        assert.is_true(dict:verify())
        for i = 1, 3 * floor do
            assert.equal(1, (sems[i]:release()))
            assert.equal(1, (shared[i]:unlock()))
        end
        assert.is_true(dict:verify())
    end)
    -- A lock object's handle keeps its last ticket as the next acquire's
    -- hint.  A spilled slot's ticket counts chunks: its index is not a
    -- floor slot's.  Taken as one, it named an unrelated floor slot, which
    -- could hold the very key, free: the acquire succeeded there with the
    -- ticket still naming the spilled slot, unlock answered 1, "expired"
    -- and the key stayed locked until its exptime.  (The handles' pool,
    -- emptied first by locks held in another zone, gives the first handle
    -- put back to the next lock: the spilled lock's.)
    it("release a key locked through the handle of a spilled lock",
       function()
        local dict = fx:zone("spillhint", { size = "64k" })
        local other_zone = fx:zone("spillpool", { size = "64k" })
        local pool_drain = {}
        for i = 1, 100 do
            pool_drain[i] = assert(resty_lock:new(other_zone))
            assert(pool_drain[i]:lock("d" .. i))
        end
        local SPILL = 2 ^ 31
        local by_slot, spilled = {}, {}
        for i = 1, 2000 do
            local lock = assert(resty_lock:new(dict))
            assert(lock:lock("k" .. i))
            local slot = lock.cd.tk.slot
            if slot >= SPILL then
                spilled[#spilled + 1] = lock
            else
                by_slot[slot] = lock
            end
            if #spilled >= 50 then
                break
            end
        end
        -- a spilled lock whose index, as a floor slot of its shard, is a
        -- held key's
        local from, floor
        for _, lock in ipairs(spilled) do
            floor = by_slot[lock.cd.tk.slot - SPILL]
            if floor then
                from = lock
                break
            end
        end
        assert.is_truthy(from, "no spilled index names a held floor slot")
        local key = floor.key
        assert.equal(1, (from:unlock()))
        assert.equal(1, (floor:unlock()))
        local again = assert(resty_lock:new(dict))
        assert.equal(0, (again:lock(key)))
        assert.same({ 1 }, { again:unlock() })
        assert.same({ nil, "not locked" }, { resty_lock.inspect(dict, key) })
        local other = assert(resty_lock:new(dict))
        assert.equal(0, (other:trylock(key)))
        assert.equal(1, (other:unlock()))
        assert.is_true(dict:verify())
        unlock_all(pool_drain)
    end)
end)
