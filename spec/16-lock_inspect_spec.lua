-- resty_lock.inspect(): what holds a lock key, seen from another process:
-- the holder's pid and whether it lives (a child SIGKILLed while holding),
-- the ttl left, the starving waiter marked on the lock, and the waiters
-- counted on the key's wait word.

local proc = require "harness.proc"
local fixture = require "helpers.fixture"
local env = require "helpers.lock_env"
local holder = require "helpers.lock_holder"
local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local slot = require "helpers.lock_slot"

describe("resty_lock.inspect()", function()
    local fx = fixture.new { dir = "block", env = true, children = "assert" }
    local dict

    before_each(function()
        dict = fx:zone("inspect", { size = "64k" })
    end)

    it("answers nil, 'not locked' for a free key, also after unlock()",
       function()
        assert.same({ nil, "not locked" }, { resty_lock.inspect(dict, "k") })
        local lock = resty_lock:new(dict)
        assert.equal(0, lock:lock("k"))
        assert.equal(1, lock:unlock())
        assert.same({ nil, "not locked" }, { resty_lock.inspect(dict, "k") })
    end)

    it("gives this process's lock: pid, alive, ttl, no mark, no waiter",
       function()
        local lock = resty_lock:new(dict, { exptime = 10 })
        assert.equal(0, lock:lock("k"))
        local info = assert(resty_lock.inspect(dict, "k"))
        assert.equal(env.pid(), info.pid)
        assert.is_true(info.alive)
        assert.is_true(info.ttl > 9.9 and info.ttl <= 10, info.ttl)
        assert.is_nil(info.marked)
        assert.equal(0, info.waiters)
        -- the same through the zone's name and with the colon call
        assert.same(info.pid, resty_lock.inspect("inspect", "k").pid)
        assert.same(info.pid, resty_lock:inspect("inspect", "k").pid)
        assert.equal(1, lock:unlock())
    end)

    it("gives ttl 0 for a lock that never expires", function()
        local lock = resty_lock:new(dict, { exptime = 0 })
        assert.equal(0, lock:lock("k"))
        assert.equal(0, resty_lock.inspect(dict, "k").ttl)
        lock:unlock()
    end)

    it("tells a live holder from one SIGKILLed while holding", function()
        local pid = holder.hold(dict, "k", 20)
        local info = assert(resty_lock.inspect(dict, "k"))
        assert.equal(pid, info.pid)
        assert.is_true(info.alive)
        assert.is_true(info.ttl > 19 and info.ttl <= 20, info.ttl)

        proc.kill(pid)
        assert.equal("signal", proc.wait(pid, 5).how)
        info = assert(resty_lock.inspect(dict, "k"))
        assert.equal(pid, info.pid)
        assert.is_false(info.alive)
        -- inspect changed nothing: the dead holder still holds it
        assert.equal(pid, (slot.owner(dict, "k")))
    end)

    it("counts the waiters asleep on the key and names the marked one",
       function()
        local pid = holder.hold(dict, "k", 20)
        local w1 = holder.wait(dict, "k", 10)
        local w2 = holder.wait(dict, "k", 10)
        local info = env.wait_for(function()
            local i = resty_lock.inspect(dict, "k")
            return i and i.waiters == 2 and i.marked and i
        end, 5)
        assert.is_truthy(info, "never saw two waiters and a mark")
        assert.equal(pid, info.pid)
        assert.is_true(info.marked.pid == w1 or info.marked.pid == w2)
        assert.is_true(info.marked.alive)
        -- the deadline of a 10 s wait, some of which has passed (how much
        -- depends on the machine's load): what is left and what has
        -- passed add up to the 10 s (the mark keeps milliseconds)
        local m = info.marked
        assert.is_true(m.deadline > 0 and m.deadline <= 10, m.deadline)
        assert.is_true(m.waited >= 0 and m.waited < 10, m.waited)
        assert.is_true(math.abs(m.waited + m.deadline - 10) <= 0.002,
                       m.waited .. " + " .. m.deadline)

        -- the holder dies: the marked waiter gets the lock, then the other
        proc.kill(pid)
        proc.wait(pid, 5)
        assert.same({ how = "exit", code = 0, msg = "" }, proc.wait(w1, 5))
        assert.same({ how = "exit", code = 0, msg = "" }, proc.wait(w2, 5))
        assert.same({ nil, "not locked" }, { resty_lock.inspect(dict, "k") })
    end)

    it("reads a stale mark's deadline as past", function()
        local lock = resty_lock:new(dict)
        assert.equal(0, lock:lock("stale"))
        assert.is_true(slot.mark(dict, "stale", { pid = env.pid(), id = 7,
                                                  since = 1, till = 2 }))
        local m = assert(resty_lock.inspect(dict, "stale")).marked
        assert.equal(env.pid(), m.pid)
        assert.is_true(m.alive)
        assert.is_true(m.deadline < 0)
        assert.equal(1, lock:unlock())
    end)

    it("answers nil, 'not locked' for a key that only holds a value: "
       .. "locks are not the dictionary's entries", function()
        assert.is_true(dict:set("n", 1))
        assert.is_true(dict:set("s", "hello"))
        assert.equal(1, dict:rpush("l", "a list"))
        for _, k in ipairs { "n", "s", "l" } do
            assert.same({ nil, "not locked" },
                        { resty_lock.inspect(dict, k) })
        end
        -- and a lock on such a key leaves its value alone
        local lock = resty_lock:new(dict)
        assert.equal(0, lock:lock("s"))
        assert.equal("hello", dict:get("s"))
        assert.equal(env.pid(), resty_lock.inspect(dict, "s").pid)
        assert.equal(1, lock:unlock())
        assert.equal("hello", dict:get("s"))
    end)

    it("answers new()'s, the key's and the zone's errors", function()
        local none = { resty_lock.inspect("no-such-zone", "k") }
        assert.equal(2, #none)
        assert.matches('^dictionary not found: no zone "no%-such%-zone" in ',
                       none[2])
        assert.same({ nil, "dictionary not found: a number is no dict" },
                    { resty_lock.inspect(42, "k") })
        assert.same({ nil, "nil key" }, { resty_lock.inspect(dict) })
        assert.same({ nil, "empty key" }, { resty_lock.inspect(dict, "") })
        assert.same({ nil, "key too long" },
                    { resty_lock.inspect(dict, ("x"):rep(65536)) })
        local gone = assert(shdict.open("gone"))
        assert.is_true(shdict.destroy("gone"))
        assert.same({ nil, "zone destroyed" },
                    { resty_lock.inspect(gone, "k") })
        -- and it never creates a zone
        assert.is_false(env.exists(fx.dir .. "/shmlock.no-such-zone"))
    end)
end)
