-- resty.shmlock.cache: c:stats(), the counters of every process using a
-- cache, exact once each process has added its counts (stats() does).

local proc = require "harness.proc"
local fixture = require "helpers.fixture"
local cache = require "resty.shmlock.cache"
local resty_lock = require "resty.shmlock"

local CHILDREN = 8
local HITS = 2500              -- L1 hits per child: more than one flush

local function zeros(t)
    local all = { hits_l1 = 0, hits_l2 = 0, misses = 0, loads = 0,
                  loader_errors = 0, lock_waits = 0, stale = 0,
                  refreshes = 0 }
    for k, v in pairs(t) do
        all[k] = v
    end
    return all
end

describe("resty.shmlock.cache stats()", function()
    local fx = fixture.new { dir = "test", children = "assert" }
    local zone, locks

    before_each(function()
        zone = fx:zone("stats-values", { size = "1m" })
        locks = fx:zone("stats-locks", { size = "1m" })
    end)

    local function new_cache(opts)
        opts = opts or {}
        opts.dict = zone
        opts.lock_dict = locks
        return assert(cache.new("st", opts))
    end

    it("counts each kind of answer, exactly, in one process", function()
        local c = new_cache({ stale_ttl = 10, resurrect_ttl = 10 })
        assert.same(zeros({}), c:stats())
        local function v() return "v" end
        local function down() return nil, "down" end
        c:get("a", nil, v)                              -- miss, load
        c:get("a", nil, v)                              -- L1
        local other = new_cache()                       -- another L1
        other:get("a", nil, error)                      -- L2
        other:stats()                                   -- (its counts in)
        c:get("b", nil, down)                           -- miss, load, error
        c:get("c", { ttl = 0.05 }, v)                   -- miss, load
        proc.sleep(0.1)
        c:get("c", nil, down)           -- stale: refresh fails, stale served
        c:get("c", nil, v)              -- stale: refreshed (the loader ran)
        assert.same(zeros({ hits_l1 = 1, hits_l2 = 1, misses = 3, loads = 5,
                            loader_errors = 2, stale = 1, refreshes = 2 }),
                    c:stats())
    end)

    it("counts a wait for another process's lock", function()
        local c = new_cache({ lock_opts = { timeout = 10 } })
        local lock = assert(resty_lock:new(locks))
        assert.equal(0, lock:lock("st#lock:w"))
        local pid = proc.spawn(function()
            local mine = new_cache({ lock_opts = { timeout = 10 } })
            assert(mine:get("w", nil, function() return "loaded" end)
                   == "loaded")
            mine:stats()
        end)
        assert.is_true(proc.await_futex_sleep(pid, 10))
        assert.equal(1, lock:unlock())
        assert.same({ how = "exit", code = 0, msg = "" }, proc.wait(pid, 20))
        assert.same(zeros({ misses = 1, loads = 1, lock_waits = 1 }),
                    c:stats())
    end)

    it("adds up the counts of " .. CHILDREN .. " processes exactly",
       function()
        local c = new_cache({ stale_ttl = 30 })
        assert.is_true(c:set("shared", "s"))
        assert.is_true(c:set("old", "o", 0.05))
        proc.sleep(0.1)
        -- "old" stays stale: nobody can refresh it while we hold its lock
        local lock = assert(resty_lock:new(locks))
        assert.equal(0, lock:lock("st#lock:old"))

        local start = proc.pipe()
        local pids = {}
        for i = 1, CHILDREN do
            pids[i] = proc.spawn(function()
                if not start:wait_release(20) then
                    error("never released")
                end
                local mine = new_cache({ stale_ttl = 30 })
                local key = "own:" .. i
                local function v() return "v" end
                mine:get(key, nil, v)                        -- miss, load
                for _ = 1, HITS do
                    mine:get(key, nil, error)                -- L1
                end
                mine:get("fail:" .. i, nil, function()       -- miss, load,
                    error("down")                             -- error
                end)
                mine:get("shared", nil, error)               -- L2
                assert(mine:get("old", nil, error) == "o")   -- stale
                mine:stats()
            end)
        end
        start:release()
        start:close()
        for _, r in ipairs(proc.wait_all(pids, 60)) do
            assert.same({ how = "exit", code = 0, msg = "" }, r)
        end
        lock:unlock()
        assert.same(zeros({ hits_l1 = CHILDREN * HITS, hits_l2 = CHILDREN,
                            misses = 2 * CHILDREN, loads = 2 * CHILDREN,
                            loader_errors = CHILDREN, stale = CHILDREN }),
                    c:stats())
    end)

    it("does not count in a forked process what its parent counted",
       function()
        local c = new_cache()
        c:get("k", nil, function() return 1 end)        -- miss, load
        c:get("k", nil, error)                          -- L1
        local pid = proc.spawn(function()
            c:get("k", nil, error)                      -- L1
            c:get("j", nil, function() return 2 end)    -- miss, load
            c:stats()
        end)
        assert.same({ how = "exit", code = 0, msg = "" }, proc.wait(pid, 20))
        -- the child's L1 hit came before its first other event: lost
        assert.same(zeros({ hits_l1 = 1, misses = 2, loads = 2 }),
                    c:stats())
    end)

    it("keeps the counts apart per cache and across purge()", function()
        local a = new_cache()
        local b = assert(cache.new("st-other", { dict = zone,
                                                 lock_dict = locks }))
        a:get("k", nil, function() return 1 end)
        assert.is_true(a:purge())
        assert.same(zeros({ misses = 1, loads = 1 }), a:stats())
        assert.same(zeros({}), b:stats())
    end)
end)
