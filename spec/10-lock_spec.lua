-- resty.shmlock in one process: resty.lock's behaviours one by one, owner
-- tokens, the GC release, trylock/owned, dead holders, starvation-mode
-- handoff, and the nginx code path (with a stand-in `ngx`).

local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local zone_lock = require "resty.shmlock.lock.zone"
local handle = require "resty.shmlock.lock.handle"
local codes = require "resty.shmlock.internal.codes"
local slot = require "helpers.lock_slot"
local env = require "helpers.lock_env"
local fixture = require "helpers.fixture"
local fake_clock = require "helpers.fake_clock"
local checkout = require "helpers.checkout"
local clock = require "resty.shmlock.internal.clock"
local proc = require "harness.proc"
local children = require "helpers.children"

local function gc()
    collectgarbage()
    collectgarbage()
end

-- the error f() raised; it must point at this file (the caller's line)
local function raised(f)
    local ok, err = pcall(f)
    assert.is_false(ok, "no error raised")
    assert.is_string(err)
    assert.truthy(err:find("10%-lock_spec%.lua:%d+: "),
                  "error does not point at the caller: " .. err)
    return (err:gsub("^.-10%-lock_spec%.lua:%d+: ", ""))
end

-- l1 locks key for 20 ms, which pass (30 ms slept), then l2 takes it:
-- l1, l2
local function expired_then_taken(dict, key)
    local l1 = resty_lock:new(dict, { exptime = 0.02 })
    local l2 = resty_lock:new(dict)
    assert.equal(0, l1:lock(key))
    env.sleep(0.03)
    assert.equal(0, l2:lock(key))
    return l1, l2
end

describe("resty.shmlock", function()
    local fx = fixture.new { dir = "block", env = true }
    local dir, dict, n

    setup(function()
        dir = fx.dir
        n = 0
    end)

    before_each(function()
        n = n + 1
        dict = assert(shdict.open("locks" .. n))
    end)

    describe("new()", function()
        it("returns a lock for a dict object", function()
            local lock, err = resty_lock:new(dict)
            assert.is_nil(err)
            assert.is_table(lock)
            assert.equal(0, lock:lock("k"))
        end)

        it("works called as resty_lock.new(...) too", function()
            local lock = assert(resty_lock.new(dict, { timeout = 1 }))
            assert.equal(1, lock.timeout)
            lock = assert(resty_lock.new("locks" .. n, { timeout = 2 }))
            assert.equal(2, lock.timeout)
        end)

        it("finds a zone this process opened, by name", function()
            local lock = assert(resty_lock:new("locks" .. n))
            assert.equal(0, lock:lock("k"))
            assert.truthy(slot.info(dict, "k"))
        end)

        it("attaches a zone another process created, by name", function()
            local f = io.popen("LUA_PATH='" .. checkout.LUA_PATH
                .. "' luajit -e "
                .. "'assert(require(\"resty.shmlock.shdict\").open(\"other\"))"
                .. "; print(\"ok\")'")
            assert.equal("ok", f:read("*l"))
            f:close()
            assert.is_nil(shdict.opened("other"))

            local lock = assert(resty_lock:new("other"))
            assert.equal(0, lock:lock("k"))
            assert.truthy(slot.info(shdict.opened("other"), "k"))
        end)

        it("returns nil, 'dictionary not found: ...' naming the zone and "
           .. "directory tried for an unknown name, and creates no zone",
           function()
            assert.same({ nil, 'dictionary not found: no zone "nosuch" in '
                               .. dir },
                        { resty_lock:new("nosuch") })
            assert.is_false(env.exists(dir .. "/shmlock.nosuch"))
            assert.is_nil(shdict.opened("nosuch"))
        end)

        it("returns nil, 'incompatible zone' for a zone file it cannot use "
           .. "(another program's, an older layout)", function()
            local f = assert(io.open(dir .. "/shmlock.foreign", "wb"))
            f:write(("not a zone "):rep(4000))
            f:close()
            assert.same({ nil, "incompatible zone: " .. dir
                               .. "/shmlock.foreign is not a zone file" },
                        { resty_lock:new("foreign") })
        end)

        it("returns nil, 'dictionary not found: ...' for what is no dict",
           function()
            assert.same({ nil, "dictionary not found: a number is no dict" },
                        { resty_lock:new(1) })
            assert.same({ nil, "dictionary not found: a boolean is no dict" },
                        { resty_lock:new(true) })
            assert.same({ nil, "dictionary not found: a table is no dict" },
                        { resty_lock:new({}) })
            for _, v in ipairs({ "../x", "" }) do
                assert.same({ nil, 'dictionary not found: "' .. v
                                   .. '" is no zone name' },
                            { resty_lock:new(v) })
            end
            assert.same({ nil, "dictionary not found: no name" },
                        { resty_lock:new() })
        end)

        it("has resty.lock's defaults", function()
            local lock = resty_lock:new(dict)
            assert.equal(30, lock.exptime)
            assert.equal(5, lock.timeout)
            assert.equal(0.001, lock.step)
            assert.equal(2, lock.ratio)
            assert.equal(0.5, lock.max_step)
        end)

        it("clamps a given timeout to exptime and a given step to timeout",
           function()
            local lock = resty_lock:new(dict, { exptime = 2, timeout = 10,
                                                step = 3 })
            assert.equal(2, lock.exptime)
            assert.equal(2, lock.timeout)
            assert.equal(2, lock.step)

            lock = resty_lock:new(dict, { timeout = 1, step = 3 })
            assert.equal(1, lock.timeout)
            assert.equal(1, lock.step)
        end)

        it("leaves the default timeout and step unclamped, as resty.lock",
           function()
            local lock = resty_lock:new(dict, { exptime = 1 })
            assert.equal(5, lock.timeout)

            lock = resty_lock:new(dict, { timeout = 0 })
            assert.equal(0, lock.timeout)
            assert.equal(0.001, lock.step)
        end)

        it("raises on options of the wrong type", function()
            assert.has_error(function()
                resty_lock:new(dict, { timeout = "1" })
            end, "opts.timeout must be a number")
            assert.has_error(function()
                resty_lock:new(dict, { exptime = -1 })
            end, "opts.exptime must be >= 0")
            assert.has_error(function()
                resty_lock:new(dict, { step = {} })
            end, "opts.step must be a number")
            assert.has_error(function()
                resty_lock:new(dict, { ratio = 0 / 0 })
            end, "opts.ratio must be a number")
            assert.has_error(function()
                resty_lock:new(dict, { max_step = 0 })
            end, "opts.max_step must be > 0")
            assert.has_error(function()
                resty_lock:new(dict, "opts")
            end, "opts must be a table")
            assert.has_error(function()
                resty_lock:new(dict, { blocking_timeout = "0.5" })
            end, "opts.blocking_timeout must be a number")
            assert.has_error(function()
                resty_lock:new(dict, { blocking_timeout = -0.1 })
            end, "opts.blocking_timeout must be >= 0")
        end)

        it("takes blocking_timeout (default 0), not clamped by exptime",
           function()
            assert.equal(0, resty_lock:new(dict).blocking_timeout)
            assert.equal(0.5, resty_lock:new(dict, { blocking_timeout = 0.5,
                                                     exptime = 0.1 })
                                        .blocking_timeout)
        end)

        it("raises on an infinite or too large option (above 1e12), at "
           .. "the caller's line", function()
            for _, name in ipairs({ "exptime", "timeout", "step", "ratio",
                                    "max_step", "blocking_timeout" }) do
                for _, v in ipairs({ math.huge, 1e12 + 1e6 }) do
                    assert.equal("opts." .. name .. " must be <= 1e12",
                                 raised(function()
                                     resty_lock:new(dict, { [name] = v })
                                 end))
                end
            end
            assert.equal("opts.timeout must be >= 0", raised(function()
                resty_lock:new(dict, { timeout = -math.huge })
            end))
            assert.equal("opts.max_step must be > 0", raised(function()
                resty_lock:new(dict, { max_step = -math.huge })
            end))
            local lock = resty_lock:new(dict, { exptime = 1e12,
                timeout = 1e12, step = 1e12, ratio = 1e12, max_step = 1e12 })
            assert.equal(0, lock:lock("k"))
            -- beyond the slots' 2^40 ms (34 years): no expiry (ttl 0)
            assert.equal(0, slot.ttl(dict, "k"))
        end)
    end)

    describe("lock()", function()
        it("returns 0 for a free key and holds it as this process, with "
           .. "an owner id of its own", function()
            local lock = resty_lock:new(dict)
            assert.same({ 0 }, { lock:lock("k") })
            local pid, id = slot.owner(dict, "k")
            assert.equal(env.pid(), pid)
            assert.is_true(id ~= 0)
            local ttl = slot.ttl(dict, "k")
            assert.is_true(ttl > 25 and ttl <= 30)      -- (30: the default)
            -- not a dictionary entry
            assert.is_nil(dict:get("k"))
            assert.equal(1, lock:unlock())
            assert.equal(0, lock:lock("k"))
            local _, id2 = slot.owner(dict, "k")
            assert.not_equal(id, id2)       -- each acquisition its own
        end)

        it("returns as many values as resty.lock", function()
            local l1 = resty_lock:new(dict, { exptime = 0.02 })
            local l2 = resty_lock:new(dict, { timeout = 0.01 })
            assert.equal(1, select("#", l1:lock("k")))
            assert.equal(2, select("#", l2:lock("k")))
            env.sleep(0.03)
            assert.equal(1, select("#", l2:lock("k")))   -- waited
            assert.equal(1, select("#", l2:expire()))
            assert.equal(1, select("#", l2:unlock()))
            assert.equal(2, select("#", l2:unlock()))
            assert.equal(1, select("#", resty_lock:new(dict)))
            assert.equal(2, select("#", resty_lock:new("nosuch")))
        end)

        it("returns nil, 'locked' if the object holds a lock (any key)",
           function()
            local lock = resty_lock:new(dict)
            assert.equal(0, lock:lock("a"))
            assert.same({ nil, "locked" }, { lock:lock("a") })
            assert.same({ nil, "locked" }, { lock:lock("b") })
            assert.is_nil(slot.info(dict, "b"))
        end)

        it("returns nil, 'nil key' for nil and false", function()
            local lock = resty_lock:new(dict)
            assert.same({ nil, "nil key" }, { lock:lock(nil) })
            assert.same({ nil, "nil key" }, { lock:lock(false) })
        end)

        it("returns the dictionary's key errors", function()
            local lock = resty_lock:new(dict)
            assert.same({ nil, "empty key" }, { lock:lock("") })
            assert.same({ nil, "key too long" },
                        { lock:lock(string.rep("x", 65536)) })
        end)

        it("takes a number key as its string", function()
            local lock = resty_lock:new(dict)
            assert.equal(0, lock:lock(42))
            assert.truthy(slot.info(dict, "42"))
            assert.equal(1, lock:unlock())
            assert.is_nil(slot.info(dict, "42"))
        end)

        it("takes a number key as the string every Lua gives it",
           function()
            -- tostring gives "1e+15" and "-0" under LuaJIT
            local lock = resty_lock:new(dict)
            local other = resty_lock:new(dict, { timeout = 0 })
            assert.equal(0, lock:lock(1e15))
            assert.truthy(slot.info(dict, "1000000000000000"))
            assert.same({ nil, "timeout" }, { other:lock("1000000000000000") })
            assert.equal("lock", assert(resty_lock.inspect(dict, 1e15)).kind)
            assert.equal(1, lock:unlock())
            assert.equal(0, lock:lock(-0.0))
            assert.truthy(slot.info(dict, "0"))
            assert.equal(1, lock:unlock())
        end)

        -- the waits' lengths are pinned on a clock that moves only as the
        -- waiter sleeps (helpers.fake_clock): exact whatever the load; on
        -- the real clock only what lateness cannot break
        it("returns nil, 'timeout' after waiting timeout seconds", function()
            local l1 = resty_lock:new(dict, { timeout = 0.01 })
            local l2 = resty_lock:new(dict, { timeout = 0.01 })
            for _ = 1, 2 do
                assert.equal(0, l1:lock("foo"))
                local t0 = env.now()
                assert.same({ nil, "timeout" }, { l2:lock("foo") })
                local dt = env.now() - t0
                assert.is_true(dt >= 0.01, "waited " .. dt)
                assert.same({ 1 }, { l1:unlock() })
                assert.same({ nil, "unlocked" }, { l2:unlock() })
            end

            -- the steps, the last one cut to the deadline, and no more
            local fc = fake_clock.new()
            assert.equal(0, l1:lock("foo"))
            local faked = fc:require("resty.shmlock"):new(dict,
                                                          { timeout = 0.01 })
            assert.same({ nil, "timeout" }, { faked:lock("foo") })
            assert.same({ 0.001, 0.002, 0.004, 0.003 }, fc.sleeps)
            assert.same({ 1 }, { l1:unlock() })
        end)

        it("never sleeps past the deadline", function()
            local l1 = resty_lock:new(dict)
            local opts = { timeout = 0.05, step = 0.04, max_step = 0.5 }
            local l2 = resty_lock:new(dict, opts)
            assert.equal(0, l1:lock("foo"))
            local t0 = env.now()
            assert.same({ nil, "timeout" }, { l2:lock("foo") })
            local dt = env.now() - t0
            assert.is_true(dt >= 0.05, "waited " .. dt)

            -- 0.04, then the 0.01 left, not the next step of 0.08
            local fc = fake_clock.new()
            local faked = fc:require("resty.shmlock"):new(dict, opts)
            assert.same({ nil, "timeout" }, { faked:lock("foo") })
            assert.same({ 0.04, 0.01 }, fc.sleeps)
        end)

        it("does not wait with timeout = 0", function()
            local l1 = resty_lock:new(dict, { timeout = 0 })
            local fc = fake_clock.new()
            local l2 = fc:require("resty.shmlock"):new(dict, { timeout = 0 })
            assert.equal(0, l1:lock("foo"))
            assert.same({ nil, "timeout" }, { l2:lock("foo") })
            assert.same({}, fc.sleeps)
            assert.same({ 1 }, { l1:unlock() })
            assert.equal(0, l2:lock("foo"))
        end)

        -- elapsed is the time measured inside lock(): more than its
        -- waits from the first one's start to the last one's end (read
        -- around each futex wait), less than the call seen from outside
        it("returns the time waited when the lock expired by itself",
           function()
            local fc = fake_clock.new { real = true }
            local l1 = resty_lock:new(dict, { exptime = 0.1 })
            local l2 = fc:require("resty.shmlock"):new(dict)
            local t_lock = env.now_us()
            assert.equal(0, l1:lock("blah"))
            local t0 = env.now_us()
            local elapsed, err = l2:lock("blah")
            local t1 = env.now_us()
            assert.is_nil(err)
            -- not before the expiry (the zone's clock counts ms)
            assert.is_true(t1 - t_lock > 99000, "got it after "
                                                .. (t1 - t_lock) .. " us")
            local waits = fc.waits
            assert.is_true(#waits > 0)
            assert.is_true(elapsed * 1e6 >= waits[#waits].to - waits[1].from,
                           "elapsed " .. elapsed)
            assert.is_true(elapsed * 1e6 <= t1 - t0, "elapsed " .. elapsed)
            assert.equal(1, l2:unlock())
        end)

        -- a wait of 0.3 s behind a holder; whatever the steps, sleeps
        -- are at least 1 ms (cut to the deadline), never a spin
        for _, opts in ipairs({ { max_step = 1e-7 },
                                { step = 1e-7, max_step = 1e-7 } }) do
            local name = opts.step and "step and max_step" or "max_step"
            it("does not spin with a " .. name .. " of 1e-7 s", function()
                local holder = resty_lock:new(dict)
                assert.equal(0, holder:lock("k"))
                opts.timeout = 0.3
                local waiter = resty_lock:new(dict, opts)
                local t0, cpu0 = env.now(), env.cpu()
                assert.same({ nil, "timeout" }, { waiter:lock("k") })
                local wall, cpu = env.now() - t0, env.cpu() - cpu0
                assert.is_true(wall >= 0.3, "waited " .. wall)
                -- a spin would burn the whole wait (CPU time: a loaded
                -- machine delays the waiter, it does not add to its CPU)
                assert.is_true(cpu < 0.1, "CPU " .. cpu .. " s in a "
                                          .. wall .. " s wait")

                -- 1 ms sleeps, 300 of them, on a clock only they move
                local fc = fake_clock.new()
                local faked = fc:require("resty.shmlock"):new(dict, opts)
                assert.same({ nil, "timeout" }, { faked:lock("k") })
                assert.equal(300, #fc.sleeps)
                for i = 1, 300 do
                    assert.equal(0.001, fc.sleeps[i])
                end
                assert.equal(1, holder:unlock())
            end)
        end

        it("returns 'no memory' when the key's shard has no room left (its "
           .. "floor of lock slots held, no chunk to spill into), and takes "
           .. "locks again once one is free", function()
            local small = assert(shdict.open("small" .. n, { size = "32k" }))
            -- a dictionary full of add() entries: nothing to evict, every
            -- chunk used; the floor of lock slots is the locks' own
            local i = 0
            repeat
                i = i + 1
            until not small:add("fill" .. i, string.rep("x", 200))
            repeat
                i = i + 1
            until not small:add("fill" .. i, "")
            assert.equal(0, small:free_space())
            local held = {}
            local err
            for k = 1, 1000 do
                local lock = resty_lock:new(small)
                local ok
                ok, err = lock:lock("key" .. k)
                if not ok then
                    break
                end
                held[k] = lock
            end
            assert.equal("no memory", err)
            -- 7/8 of the slots (16 in a 32 KiB zone) can be held at once
            assert.equal(14, #held)
            local lock = resty_lock:new(small)
            assert.same({ nil, "no memory" }, { lock:lock("more") })
            assert.equal(1, held[3]:unlock())
            assert.same({ 0 }, { lock:lock("more") })
        end)
    end)

    describe("unlock()", function()
        it("returns 1 and frees the key", function()
            local lock = resty_lock:new(dict)
            for _ = 1, 2 do
                assert.equal(0, lock:lock("foo"))
                assert.same({ 1 }, { lock:unlock() })
                assert.is_nil(slot.info(dict, "foo"))
            end
        end)

        it("returns nil, 'unlocked' when the object holds nothing", function()
            local lock = resty_lock:new(dict)
            assert.same({ nil, "unlocked" }, { lock:unlock() })
            assert.equal(0, lock:lock("foo"))
            assert.equal(1, lock:unlock())
            assert.same({ nil, "unlocked" }, { lock:unlock() })
        end)

        it("returns 1, 'expired' and leaves the key alone when our lock "
           .. "expired and someone else took it", function()
            local l1, l2 = expired_then_taken(dict, "k")
            local state = slot.state(dict, "k")

            assert.same({ 1, "expired" }, { l1:unlock() })
            assert.equal(state, slot.state(dict, "k"))
            assert.is_true(l2:owned())
            assert.same({ nil, "unlocked" }, { l1:unlock() })
            assert.equal(1, l2:unlock())
        end)

        it("returns 1, 'expired' when our lock expired and the key was "
           .. "taken and released since (gone)", function()
            local l1, l2 = expired_then_taken(dict, "k")
            assert.same({ 1 }, { l2:unlock() })
            assert.is_nil(slot.info(dict, "k"))

            assert.same({ 1, "expired" }, { l1:unlock() })
            assert.same({ nil, "unlocked" }, { l1:unlock() })
            assert.equal(0, l1:lock("k"))
            assert.same({ 1 }, { l1:unlock() })
        end)

        it("returns 1, 'expired' and leaves a marked lock of another holder "
           .. "alone", function()
            local l1, l2 = expired_then_taken(dict, "k")
            -- a starving waiter's mark on l2's lock
            assert.is_true(slot.mark(dict, "k", { pid = 1, id = 255 }))
            local marked = slot.state(dict, "k")

            assert.same({ 1, "expired" }, { l1:unlock() })
            assert.equal(marked, slot.state(dict, "k"))
            assert.is_true(l2:owned())
            assert.equal(1, l2:unlock())
            -- handed to the marked waiter (pid 1 lives)
            local pid, id = slot.owner(dict, "k")
            assert.same({ 1, 255 }, { pid, id })
        end)

        it("returns 1 when our lock expired meanwhile but nobody took it, "
           .. "as resty.lock", function()
            local lock = resty_lock:new(dict, { exptime = 0.02 })
            assert.equal(0, lock:lock("k"))
            env.sleep(0.03)
            assert.same({ 1 }, { lock:unlock() })
            assert.equal(0, lock:lock("k"))
        end)
    end)

    describe("expire()", function()
        it("returns nil, 'unlocked' when the object holds nothing", function()
            local lock = resty_lock:new(dict)
            assert.same({ nil, "unlocked" }, { lock:expire() })
            assert.same({ nil, "unlocked" }, { lock:expire(10) })
        end)

        it("resets the lock to the object's exptime without argument",
           function()
            -- after 0.6 s of a 10 s lock: reset, 10 s from the expire()
            -- (less what passed until the ttl was read: however late a
            -- loaded machine is); not the lock's first 10 s, which had at
            -- most 9.4 s left
            local lock = resty_lock:new(dict, { exptime = 10 })
            assert.equal(0, lock:lock("k"))
            env.sleep(0.6)
            local t0 = env.now()
            assert.same({ true }, { lock:expire() })
            local ttl = slot.ttl(dict, "k")
            local dt = env.now() - t0
            assert.is_true(ttl >= 10 - dt - 0.002 and ttl <= 10, "ttl " .. ttl
                           .. " read " .. dt .. " s after the expire()")
            assert.is_true(lock:owned())
        end)

        it("sets the given timeout", function()
            local lock = resty_lock:new(dict, { exptime = 2 })
            assert.equal(0, lock:lock("k"))
            assert.same({ true }, { lock:expire(5) })
            local ttl = slot.ttl(dict, "k")
            assert.is_true(ttl > 2.5 and ttl <= 5, "ttl " .. ttl)
            -- and a later expire() without argument goes back to exptime
            assert.is_true(lock:expire())
            assert.is_true(slot.ttl(dict, "k") <= 2)
        end)

        -- resty.lock's test's times, five times longer.  A check that a
        -- lease still runs is sound only when the clock shows it was made
        -- before the lease's end: a run in which a loaded machine was late
        -- for one is done again with a fresh key (5 runs at most).
        it("follows resty.lock's expire() sequence", function()
            local function run(key)
                local l1 = resty_lock:new(dict, { timeout = 0, exptime = 0.5 })
                local l2 = resty_lock:new(dict, { timeout = 0, exptime = 0.5 })
                assert.same({ nil, "unlocked" }, { l1:expire() })
                local t = env.now()     -- (each lease ends after t + its length)
                assert.same({ 0 }, { l1:lock(key) })
                env.sleep(0.3)
                local ends = t + 0.5
                t = env.now()
                local r = { l1:expire() }
                if env.now() >= ends then
                    return false
                end
                assert.same({ true }, r)
                ends = t + 0.5
                env.sleep(0.3)
                r = { l2:lock(key) }
                if env.now() >= ends then
                    return false
                end
                assert.same({ nil, "timeout" }, r)
                t = env.now()
                assert.same({ true }, { l1:expire(1) })
                ends = t + 1
                local ended = env.now() + 1     -- (at the latest)
                env.sleep(0.75)
                r = { l2:lock(key) }
                if env.now() >= ends then
                    return false
                end
                assert.same({ nil, "timeout" }, r)
                env.sleep(math.max(0.5, ended + 0.01 - env.now()))
                assert.same({ 0 }, { l2:lock(key) })
                assert.same({ 1 }, { l2:unlock() })
                assert.same({ nil, "unlocked" }, { l2:expire(0.2) })
                return true
            end
            local done = false
            for i = 1, 5 do
                done = run("foo" .. i)
                if done then
                    break
                end
            end
            assert.is_true(done, "5 runs, each late for a check")
        end)

        it("returns nil, 'expired' and leaves the key alone when our lock "
           .. "expired and someone else took it", function()
            local l1, l2 = expired_then_taken(dict, "k")
            local state = slot.state(dict, "k")

            assert.same({ nil, "expired" }, { l1:expire(100) })
            assert.equal(state, slot.state(dict, "k"))
            assert.is_true(l2:owned())
            -- l1 holds nothing any more
            assert.same({ nil, "unlocked" }, { l1:unlock() })
            assert.same({ nil, "timeout" }, { l1:trylock("k") })
        end)

        it("raises on a bad timeout", function()
            local lock = resty_lock:new(dict)
            assert.equal(0, lock:lock("k"))
            assert.has_error(function() lock:expire(-1) end,
                             'bad "exptime" argument')
            assert.has_error(function() lock:expire("1") end,
                             'bad "exptime" argument')
        end)

        it("raises on a NaN, infinite or too large timeout (above 1e12), "
           .. "at the caller's line", function()
            local lock = resty_lock:new(dict)
            assert.equal(0, lock:lock("k"))
            for _, t in ipairs({ 0 / 0, math.huge, -math.huge, 1e12 + 1e6 })
            do
                assert.equal('bad "exptime" argument',
                             raised(function() lock:expire(t) end))
            end
            assert.is_true(lock:owned())
            assert.is_true(lock:expire(1e12))
            assert.equal(0, slot.ttl(dict, "k"))        -- beyond 2^40 ms
        end)
    end)

    describe("garbage collection", function()
        -- a lock object holding key; the caller keeps it referenced until
        -- it has checked the key held (a collection step may come at any
        -- allocation), then drops it
        local function take(d, key, opts)
            local lock = resty_lock:new(d, opts)
            assert.equal(0, lock:lock(key))
            return lock
        end

        it("releases the key of a lock object collected while holding",
           function()
            for _ = 1, 2 do
                gc()
                local lock = take(dict, "foo")
                assert.truthy(slot.info(dict, "foo"))
                assert.is_true(lock:owned())
                lock = nil                              -- luacheck: ignore
                gc()
                assert.is_nil(slot.info(dict, "foo"))
            end
        end)

        it("releases long keys too", function()
            local key = string.rep("k", 1000)
            local lock = take(dict, key)
            assert.truthy(slot.info(dict, key))
            assert.is_true(lock:owned())
            lock = nil                                  -- luacheck: ignore
            gc()
            assert.is_nil(slot.info(dict, key))
        end)

        it("does not release someone else's lock", function()
            -- referenced until the other has the key: a collection
            -- before would release a lock that is still its own
            local stale = take(dict, "foo", { exptime = 0.02 })
            env.sleep(0.03)
            local other = resty_lock:new(dict)
            assert.equal(0, other:lock("foo"))
            local state = slot.state(dict, "foo")
            assert.is_false(stale:owned())
            stale = nil                                 -- luacheck: ignore
            gc()
            assert.equal(state, slot.state(dict, "foo"))
            assert.is_true(other:owned())
        end)

        it("leaves unlocked objects' keys alone", function()
            local function cycle()
                local lock = resty_lock:new(dict)
                assert.equal(0, lock:lock("foo"))
                assert.equal(1, lock:unlock())
            end
            cycle()
            local other = resty_lock:new(dict)
            assert.equal(0, other:lock("foo"))
            gc()
            assert.is_true(other:owned())
        end)
    end)

    describe("trylock()", function()
        it("returns 0 for a free key", function()
            local lock = resty_lock:new(dict)
            assert.same({ 0 }, { lock:trylock("k") })
            assert.is_true(lock:owned())
        end)

        it("returns nil, 'timeout' at once for a held key", function()
            local l1 = resty_lock:new(dict)
            local l2 = resty_lock:new(dict, { timeout = 5 })
            local fc = fake_clock.new()
            local l3 = fc:require("resty.shmlock"):new(dict, { timeout = 5 })
            assert.equal(0, l1:lock("k"))
            assert.same({ nil, "timeout" }, { l2:trylock("k") })
            assert.same({ nil, "timeout" }, { l3:trylock("k") })
            assert.same({}, fc.sleeps)      -- not one sleep
        end)

        it("writes nothing when the key is held", function()
            -- a waiter's tries must not bounce the holder's lines: the
            -- shard's mutex and sequence word (lock-free readers retry
            -- when it moves) and the key's slot stay untouched
            local hooks = require "helpers.test_hooks"
            local l1 = resty_lock:new(dict)
            local l2 = resty_lock:new(dict)
            assert.equal(0, l1:lock("k"))
            local seq = hooks.shmlock_test_shard_seq(dict._zone, 0)
            local state = slot.state(dict, "k")
            for _ = 1, 10 do
                assert.same({ nil, "timeout" }, { l2:trylock("k") })
            end
            assert.equal(seq, hooks.shmlock_test_shard_seq(dict._zone, 0))
            assert.equal(state, slot.state(dict, "k"))
            assert.equal(1, l1:unlock())
            assert.equal(0, l2:trylock("k"))
            assert.not_equal(state, slot.state(dict, "k"))
        end)

        it("returns 'locked' and 'nil key' as lock()", function()
            local lock = resty_lock:new(dict)
            assert.same({ nil, "nil key" }, { lock:trylock() })
            assert.equal(0, lock:trylock("k"))
            assert.same({ nil, "locked" }, { lock:trylock("j") })
        end)
    end)

    describe("owned()", function()
        it("is true only while the object's lock is held", function()
            local lock = resty_lock:new(dict, { exptime = 0.02 })
            assert.is_false(lock:owned())
            assert.equal(0, lock:lock("k"))
            assert.is_true(lock:owned())
            assert.equal(1, lock:unlock())
            assert.is_false(lock:owned())

            assert.equal(0, lock:lock("k"))
            env.sleep(0.03)
            assert.is_false(lock:owned())
        end)
    end)

    -- the zone clock in ms, and a starver's deadline a minute ahead
    local function now_ms()
        return math.floor(env.now_us() / 1000)
    end
    local function later()
        return now_ms() + 60000
    end

    -- a starving waiter of this process no lock object is: alive (our
    -- pid), not queued anywhere
    local STARVER = 0xfffffff0
    local me = env.pid()

    describe("dead holders", function()
        it("lock() takes a key whose holder process is gone at once",
           function()
            slot.dead_holder(dict, "k")
            assert.is_false(slot.info(dict, "k").alive)
            -- at its first look: no sleep, 0 s on a clock only sleeps move
            local fc = fake_clock.new()
            local lock = fc:require("resty.shmlock"):new(dict)
            assert.same({ 0 }, { lock:lock("k") })
            assert.same({}, fc.sleeps)
            assert.is_true(lock:owned())
            assert.equal(1, lock:unlock())
        end)

        it("trylock() and timeout = 0 take it too", function()
            slot.dead_holder(dict, "k")
            assert.equal(0, resty_lock:new(dict):trylock("k"))
            slot.dead_holder(dict, "j")
            local lock = resty_lock:new(dict, { timeout = 0 })
            assert.equal(0, lock:lock("j"))
        end)

        it("keeps a live holder's lock", function()
            local l1 = resty_lock:new(dict)
            assert.equal(0, l1:lock("k"))
            assert.same({ nil, "timeout" },
                        { resty_lock:new(dict):trylock("k") })
        end)

        it("hands a dead holder's lock to the live waiter marked on it",
           function()
            slot.dead_holder(dict, "k")
            assert.is_true(slot.mark(dict, "k", { pid = me, id = STARVER,
                                                  exptime = 30000 }))
            assert.same({ nil, "timeout" },
                        { resty_lock:new(dict):trylock("k") })
            local pid, id, _, marked = slot.owner(dict, "k")
            assert.same({ me, STARVER, false }, { pid, id, marked })
        end)

        it("a dead holder's lock goes to the waiter, not to a stale mark",
           function()
            slot.dead_holder(dict, "k")
            assert.is_true(slot.mark(dict, "k", { pid = me, id = STARVER,
                                                  till = now_ms() - 1 }))
            local lock = resty_lock:new(dict)
            assert.equal(0, lock:trylock("k"))
            assert.is_true(lock:owned())
            assert.equal(1, lock:unlock())
        end)
    end)

    describe("waking", function()
        -- the key's wait word, as a waiter outside nginx counts itself on
        -- it (src/wait.h); a release is shmlock_wake_waiters(.., 0)
        local C, zone, h

        before_each(function()
            C = require "helpers.test_hooks"
            zone = dict._zone
            h = C.shmlock_hash("k", 1)
        end)

        it("a release wakes nobody while the sleeper an earlier one woke "
           .. "has not come back; then it wakes again", function()
            local a = C.shmlock_wait_begin(zone, h)     -- counted, looking
            C.shmlock_wake_waiters(zone, h, 0)          -- bumps the word
            C.shmlock_wake_waiters(zone, h, 0)          -- one on its way
            local b = C.shmlock_wait_begin(zone, h)
            assert.equal((a + 1) % 2 ^ 32, b)
            -- a back (it saw the word move): the next release wakes
            C.shmlock_wait_end(zone, h, a, 0)
            C.shmlock_wake_waiters(zone, h, 0)
            local c = C.shmlock_wait_begin(zone, h)
            assert.equal((b + 1) % 2 ^ 32, c)
            C.shmlock_wait_end(zone, h, c, 0)
            C.shmlock_wait_end(zone, h, b, 0)
            assert.equal(0, C.shmlock_wait_count(zone, h))
        end)

        it("a woken sleeper that never comes back (killed) holds up the "
           .. "wake-ups only until another's sleep times out", function()
            local a = C.shmlock_wait_begin(zone, h)
            C.shmlock_wake_waiters(zone, h, 0)          -- a woken, then gone
            local b = C.shmlock_wait_begin(zone, h)
            C.shmlock_wake_waiters(zone, h, 0)          -- none: a's pending
            assert.equal(codes.TIMEOUT, C.shmlock_wait_end(zone, h, b, 1000))
            local c = C.shmlock_wait_begin(zone, h)
            assert.equal(b, c)                          -- nobody woke b
            C.shmlock_wake_waiters(zone, h, 0)          -- woken again
            local d = C.shmlock_wait_begin(zone, h)
            assert.equal((c + 1) % 2 ^ 32, d)
            C.shmlock_wait_end(zone, h, d, 0)
            C.shmlock_wait_end(zone, h, c, 0)
            C.shmlock_wait_end(zone, h, a, 0)
            assert.equal(0, C.shmlock_wait_count(zone, h))
        end)

        it("the marked waiter takes the handoff while it spins, not "
           .. "woken from a sleep on its word", function()
            local holder = assert(resty_lock:new(dict, { exptime = 60 }))
            assert.same({ 0 }, { holder:lock("k") })
            local pid = proc.spawn(function()
                -- a spin of 10 s: the release below surely comes during it
                require("helpers.test_hooks").shmlock_test_lock_spin(10e6)
                local fc = fake_clock.new { real = true }
                local l = assert(fc:require("resty.shmlock"):new(dict,
                    { timeout = 30, exptime = 60 }))
                assert(l:lock("k"))
                local woken = 0
                for _, w in ipairs(fc.waits) do
                    woken = woken + (w.woken and 1 or 0)
                end
                assert(dict:set("waits", #fc.waits))
                assert(dict:set("woken", woken))
                assert(l:unlock() == 1)
            end)
            -- it marks the key once starving (2 ms of sleeps), then spins
            while not (resty_lock.inspect(dict, "k") or {}).marked do
                proc.sleep(0.001)
            end
            assert.same({ 1 }, { holder:unlock() })     -- the handoff
            children.expect_clean_exits({ pid })
            assert.is_true(dict:get("waits") >= 1)      -- slept, then marked
            assert.equal(0, dict:get("woken"))          -- no sleep cut short
        end)

        it("a waiter takes a key released during its first spin without "
           .. "a sleep", function()
            local holder = assert(resty_lock:new(dict, { exptime = 60 }))
            assert.same({ 0 }, { holder:lock("k") })
            local pid = proc.spawn(function()
                -- a first spin of 10 s: the release below comes during it
                require("helpers.test_hooks").shmlock_test_lock_first_spin(
                    10e6)
                local fc = fake_clock.new { real = true }
                local l = assert(fc:require("resty.shmlock"):new(dict,
                    { timeout = 30, exptime = 60 }))
                assert(dict:set("ready", true))
                local elapsed = assert(l:lock("k"))
                assert(dict:set("waits", #fc.waits))
                assert(dict:set("elapsed", elapsed))
                assert(l:unlock() == 1)
            end)
            -- CPU time (clock ticks) of pid, from /proc/<pid>/stat
            local function cpu_ticks()
                local f = assert(io.open("/proc/" .. pid .. "/stat", "rb"))
                local st = f:read("*a")
                f:close()
                local utime, stime = st:match("%) %a" .. (" %S+"):rep(10)
                                              .. " (%d+) (%d+)")
                return tonumber(utime) + tonumber(stime)
            end
            while not dict:get("ready") do
                proc.sleep(0.001)
            end
            -- once ready, the child burns CPU only in its wait's spin: 3
            -- ticks more (30 ms at 100 Hz) and it is surely spinning
            local ticks, give_up = cpu_ticks(), proc.now() + 5
            while cpu_ticks() < ticks + 3 and proc.now() < give_up do
                proc.sleep(0.005)
            end
            assert.equal("R", proc.state(pid))          -- not asleep
            assert.same({ 1 }, { holder:unlock() })
            children.expect_clean_exits({ pid })
            assert.equal(0, dict:get("waits"))          -- no sleep
            assert.is_true(dict:get("elapsed") > 0)     -- it waited
        end)

        it("a waiter checks a live holder by its pid at its first look, "
           .. "and reads /proc only after sleeps it kept the key across",
           function()
            local held, go = proc.pipe(), proc.pipe()
            local pid = proc.spawn(function()
                held:close_read()
                local l = assert(resty_lock:new(dict, { exptime = 60 }))
                assert(l:lock("k") == 0, "not at once")
                held:notify()
                assert(go:wait_release(30))
                assert(l:unlock() == 1)
            end)
            held:close_write()
            go:close_read()
            assert.is_true(held:await(20))
            local fc = fake_clock.new()
            local lock = fc:require("resty.shmlock"):new(dict,
                                                        { timeout = 0.005 })
            C.shmlock_test_proc_reads(1)
            assert.same({ nil, "timeout" }, { lock:lock("k") })
            assert.same({ 0.001, 0.002, 0.002 }, fc.sleeps)
            -- one /proc read after each sleep (the same holder), none
            -- before the first
            assert.equal(#fc.sleeps, tonumber(C.shmlock_test_proc_reads(0)))
            go:release()
            children.expect_clean_exits({ pid })
        end)
    end)

    describe("starvation mode", function()
        -- a waiter on key of this process: a handle whose acquire (its
        -- owner id drawn) found key held
        local function waiter(zone, key)
            local w = handle.zone(zone)
            assert.equal(codes.EXISTS, zone_lock.acquire(w, key, #key, 30000))
            return w
        end

        it("unlock() hands a marked lock to the marked waiter", function()
            local holder = resty_lock:new(dict)
            assert.equal(0, holder:lock("k"))
            assert.is_true(slot.mark(dict, "k", { pid = me, id = STARVER,
                                                  exptime = 5000 }))
            assert.is_true(holder:owned())

            assert.same({ 1 }, { holder:unlock() })
            local pid, id, _, marked = slot.owner(dict, "k")
            assert.same({ me, STARVER, false }, { pid, id, marked })
            local ttl = slot.ttl(dict, "k")
            assert.is_true(ttl > 2.5 and ttl <= 5)
            -- nobody barges in
            assert.same({ nil, "timeout" },
                        { resty_lock:new(dict):trylock("k") })
        end)

        it("expire() keeps the mark", function()
            local holder = resty_lock:new(dict)
            assert.equal(0, holder:lock("k"))
            assert.is_true(slot.mark(dict, "k", { pid = me, id = STARVER,
                                                  exptime = 5000,
                                                  since = 1 }))
            local before = slot.state(dict, "k")
            assert.is_true(holder:expire(20))
            assert.not_equal(before, slot.state(dict, "k"))  -- a new state
            assert.same({ me, STARVER, 5000, 1, 2 ^ 50 },
                        { slot.marked(dict, "k") })
            assert.is_true(holder:owned())
            assert.is_true(slot.ttl(dict, "k") > 19)
            assert.equal(1, holder:unlock())
            local pid, id = slot.owner(dict, "k")
            assert.same({ me, STARVER }, { pid, id })
        end)

        it("a starving waiter marks the lock unless an older one did",
           function()
            local holder = resty_lock:new(dict)
            assert.equal(0, holder:lock("k"))
            local zone, look = dict._zone, zone_lock.look
            local till = later()
            local w = waiter(zone, "k")
            local other = waiter(zone, "k")

            -- an older starver's mark stays
            assert.is_true(slot.mark(dict, "k", { pid = me, id = other.id,
                                                  since = 100, till = till }))
            assert.equal(zone_lock.BUSY,
                         look(zone, "k", 1, w, 30000, false, 200, till))
            -- a younger one's is replaced, keeping the holder's TTL
            assert.is_true(slot.mark(dict, "k", { pid = me, id = other.id,
                                                  since = 300, till = till }))
            local ttl = slot.ttl(dict, "k")
            assert.equal(zone_lock.MARKED,
                         look(zone, "k", 1, w, 30000, false, 200, till))
            assert.same({ me, w.id, 30000, 200, till },
                        { slot.marked(dict, "k") })
            assert.is_true(slot.ttl(dict, "k") <= ttl)
            -- and a waiter that is not starving does not mark
            assert.equal(zone_lock.MARKED,
                         look(zone, "k", 1, w, 30000, false, 200, till))
            assert.equal(zone_lock.BUSY,
                         look(zone, "k", 1, other, 30000, false, nil))

            assert.equal(1, holder:unlock())
            local pid, id = slot.owner(dict, "k")
            assert.same({ me, w.id }, { pid, id })
            -- the handoff reached w: its look finds the lock its own
            assert.equal(zone_lock.ACQUIRED,
                         look(zone, "k", 1, w, 30000, false, nil))
            assert.is_true(zone_lock.release(zone, w) == 1)
            assert.is_nil(slot.info(dict, "k"))
        end)

        it("unlock() frees a lock whose starver's deadline passed instead "
           .. "of handing it over", function()
            local holder = resty_lock:new(dict)
            assert.equal(0, holder:lock("k"))
            assert.is_true(slot.mark(dict, "k", { pid = me, id = STARVER,
                                                  till = now_ms() - 1 }))
            assert.is_true(holder:owned())
            assert.same({ 1 }, { holder:unlock() })
            assert.same({ nil, "unlocked" }, { holder:unlock() })
            assert.is_nil(slot.info(dict, "k"))
            assert.equal(0, resty_lock:new(dict):trylock("k"))
        end)

        it("unlock() hands the lock over just before the starver's deadline",
           function()
            local holder = resty_lock:new(dict)
            assert.equal(0, holder:lock("k"))
            assert.is_true(slot.mark(dict, "k", { pid = me, id = STARVER,
                                                  till = now_ms() + 1000 }))
            assert.same({ 1 }, { holder:unlock() })
            local pid, id = slot.owner(dict, "k")
            assert.same({ me, STARVER }, { pid, id })
        end)

        it("unlock() does not hand the lock to a starver whose process is "
           .. "gone", function()
            local holder = resty_lock:new(dict)
            assert.equal(0, holder:lock("k"))
            local dead = env.dead_pid()
            assert.is_true(slot.mark(dict, "k", { pid = dead, id = 7,
                                                  process = dead }))
            assert.same({ 1 }, { holder:unlock() })
            assert.is_nil(slot.info(dict, "k"))
        end)

        -- a waiter in another process, marked on k (held here), then
        -- killed with -9 and left unreaped: a zombie
        local function killed_starver()
            local pid = proc.spawn(function()
                local l = assert(resty_lock:new(dict,
                                                { timeout = 30, exptime = 60 }))
                l:lock("k")
            end)
            while not (resty_lock.inspect(dict, "k") or {}).marked do
                proc.sleep(0.001)
            end
            proc.kill(pid, 9)
            while proc.state(pid) ~= "Z" do
                proc.sleep(0.001)
            end
            return pid
        end

        it("a starver killed with -9 that a release hands the key to is "
           .. "taken over by the next waiter, a zombie", function()
            local holder = resty_lock:new(dict, { exptime = 60 })
            assert.equal(0, holder:lock("k"))
            local pid = killed_starver()
            -- the release hands the key over; kill(pid, 0) does not tell
            -- a zombie: the waiter's check of the holder takes it
            assert.same({ 1 }, { holder:unlock() })
            local fc = fake_clock.new()
            local lock = fc:require("resty.shmlock"):new(dict)
            assert.same({ 0 }, { lock:lock("k") })
            assert.same({}, fc.sleeps)          -- at its first look
            assert.is_true(lock:owned())
            assert.equal(1, lock:unlock())
            assert.equal(9, proc.wait(pid).sig)
        end)

        it("a starver killed with -9 and reaped gets no key: the release "
           .. "frees it", function()
            local holder = resty_lock:new(dict, { exptime = 60 })
            assert.equal(0, holder:lock("k"))
            local pid = killed_starver()
            assert.equal(9, proc.wait(pid).sig)
            assert.equal(pid, (slot.marked(dict, "k")))
            assert.same({ 1 }, { holder:unlock() })
            assert.is_nil(slot.info(dict, "k"))
            assert.equal(0, resty_lock:new(dict):trylock("k"))
        end)

        it("a starving waiter replaces a stale mark, even an older "
           .. "starver's", function()
            local holder = resty_lock:new(dict)
            assert.equal(0, holder:lock("k"))
            local w = waiter(dict._zone, "k")
            local till = later()
            assert.is_true(slot.mark(dict, "k", { pid = me, id = STARVER,
                                                  since = 100,
                                                  till = now_ms() - 1 }))
            assert.equal(zone_lock.MARKED,
                         zone_lock.look(dict._zone, "k", 1, w, 30000, false,
                                        200, till))
            assert.same({ me, w.id, 30000, 200, till },
                        { slot.marked(dict, "k") })
        end)

        it("a mark with a long exptime and deadline is handed over with "
           .. "them", function()
            local holder = resty_lock:new(dict)
            assert.equal(0, holder:lock("k"))
            local w = waiter(dict._zone, "k")
            assert.equal(zone_lock.MARKED,
                         zone_lock.look(dict._zone, "k", 1, w, 1e12, false,
                                        200, 1e15))
            assert.same({ me, w.id, 1e12, 200, 1e15 },
                        { slot.marked(dict, "k") })
            assert.same({ 1 }, { holder:unlock() })
            local pid, id = slot.owner(dict, "k")
            assert.same({ me, w.id }, { pid, id })
            -- 1e12 ms is within the slots' 2^40 ms: an expiry, not "never"
            assert.is_true(slot.ttl(dict, "k") > 1e9 - 10)
        end)

        it("withdraw() removes our mark, and answers true when the lock "
           .. "reached us first", function()
            local holder = resty_lock:new(dict)
            assert.equal(0, holder:lock("k"))
            local w = waiter(dict._zone, "k")
            local till = later()
            assert.equal(zone_lock.MARKED,
                         zone_lock.look(dict._zone, "k", 1, w, 30000, false,
                                        200, till))
            assert.is_false(zone_lock.withdraw(dict._zone, "k", 1, w))
            assert.is_nil(slot.marked(dict, "k"))
            assert.is_true(holder:owned())

            assert.equal(zone_lock.MARKED,
                         zone_lock.look(dict._zone, "k", 1, w, 30000, false,
                                        200, till))
            assert.equal(1, holder:unlock())
            assert.is_true(zone_lock.withdraw(dict._zone, "k", 1, w))
            assert.equal(1, zone_lock.release(dict._zone, w))
        end)
    end)

    describe("the hot path", function()
        -- The record keeps the slot its ticket names, for the zone object
        -- it was found in: a pooled handle taken for another zone, with
        -- the same ticket word (same key, same layout), must lock there,
        -- never in its last zone's slot.
        it("a handle moved to another zone locks in that zone", function()
            local za = fx:zone("hinta", { size = "64k" })
            local zb = fx:zone("hintb", { size = "64k" })
            -- (a first call on each zone makes its file check: the next
            -- ones take the fast paths)
            for _, zone in ipairs({ za, zb }) do
                local warm = resty_lock:new(zone)
                assert.equal(0, (warm:lock("warm")))
                assert.equal(1, (warm:unlock()))
            end
            local a = resty_lock:new(za)
            assert.equal(0, (a:lock("same")))
            local taken = a.cd
            assert.equal(1, (a:unlock()))
            -- (the pool gives the handle just put back to the next lock)
            local b = resty_lock:new(zb)
            assert.equal(0, (b:lock("same")))
            assert.is_true(rawequal(taken, b.cd))
            assert.same({ nil, "not locked" },
                        { resty_lock.inspect(za, "same") })
            assert.is_table((resty_lock.inspect(zb, "same")))
            local in_a, in_b = resty_lock:new(za), resty_lock:new(zb)
            assert.equal(0, (in_a:trylock("same")))
            assert.same({ nil, "timeout" }, { in_b:trylock("same") })
            assert.equal(1, (in_a:unlock()))
            assert.equal(1, (b:unlock()))
        end)

        it("compiles: new/lock/unlock and lock/unlock loops", function()
            local jit_v = require "jit.v"
            local out = os.tmpname()
            jit.flush()
            jit_v.on(out)
            local lock = resty_lock:new(dict)
            for _ = 1, 20000 do
                lock:lock("hot")
                lock:unlock()
            end
            for _ = 1, 20000 do
                local l = resty_lock:new(dict)
                l:lock("hot")
                l:unlock()
            end
            jit_v.off()
            local f = io.open(out)
            local log = f:read("*a")
            f:close()
            os.remove(out)

            -- traces were recorded (which function starts them varies
            -- from run to run: the loops may inline everything)
            local traces = 0
            for _ in log:gmatch("%[TRACE%s+%d+ ") do
                traces = traces + 1
            end
            assert.is_true(traces >= 2, log)
            -- warm-up artifacts, which depend on where the JIT happens to
            -- start a trace: an inner loop left by a root trace (compiled
            -- into the enclosing trace instead), an unroll limit, a trace
            -- started in a callee returning below its start frame
            local warmup = { "leaving loop in root trace",
                             "loop unroll limit reached",
                             "NYI: return to lower frame" }
            local function benign(line)
                for _, reason in ipairs(warmup) do
                    if line:find(reason, 1, true) then
                        return true
                    end
                end
                return false
            end
            for line in log:gmatch("[^\n]+") do
                if line:find("TRACE ---", 1, true)
                   and line:find("shmlock", 1, true)
                then
                    assert.is_true(benign(line), line)
                elseif line:find("NYI", 1, true) then
                    assert.is_true(benign(line), line)
                end
            end
        end)
    end)
end)


describe("resty.shmlock inside nginx (stand-in ngx)", function()
    local dir, dict, n
    local fake = {}     -- the stand-in's state
    local nginx_lock    -- resty.shmlock loaded with the stand-in ngx

    -- ngx.shared dicts: add/get/delete/replace with expiry on a fake clock
    local function shared_dict()
        local data, deadline, flags = {}, {}, {}
        local d = {}
        local function live(k)
            if data[k] ~= nil and deadline[k] and deadline[k] <= fake.clock
            then
                data[k], deadline[k], flags[k] = nil, nil, nil
            end
            return data[k]
        end
        -- as lua-resty-core: the flags after the value when not 0
        function d.get(_, k)
            local v = live(k)
            if v ~= nil and (flags[k] or 0) ~= 0 then
                return v, flags[k]
            end
            return v
        end
        -- as lua-resty-core: exptime * 1000 reaches nginx as a long of
        -- milliseconds, 0 = never
        local function expiry(exp)
            local ms = math.floor((exp or 0) * 1000)
            return ms > 0 and fake.clock + ms / 1000 or nil
        end
        function d.add(_, k, v, exp, f)
            if live(k) ~= nil then
                return false, "exists"
            end
            data[k], flags[k] = v, f
            deadline[k] = expiry(exp)
            return true
        end
        function d.replace(_, k, v, exp, f)
            if live(k) == nil then
                return false, "not found"
            end
            data[k], flags[k] = v, f
            deadline[k] = expiry(exp)
            return true
        end
        function d.delete(_, k)
            data[k], deadline[k], flags[k] = nil, nil, nil
            return true
        end
        return d
    end

    local fx = fixture.new { dir = "block", env = true }

    setup(function()
        dir = fx.dir
        n = 0
        fake.shared = { fallback = shared_dict() }
        local saved_ngx = _G.ngx
        -- the modules that ask at load time whether they run in nginx
        local reloaded = { "resty.shmlock", "resty.shmlock.lock.wait" }
        local saved = {}
        _G.ngx = {
            get_phase = function() return fake.phase end,
            sleep = function(s) return fake.sleep(s) end,
            shared = fake.shared,
        }
        for i, name in ipairs(reloaded) do
            saved[i] = package.loaded[name]
            package.loaded[name] = nil
        end
        -- their clock: the test's start on the real clock plus every
        -- stand-in sleep since (ngx.sleep's and a blocking poll's, which
        -- moves fake.clock too and is counted in fake.polls), so that a
        -- wait's deadline is reached by its sleeps alone, never by a
        -- loaded machine's lateness; ahead of the real clock, which the
        -- core judges marks' deadlines by
        local real_clock = package.loaded["resty.shmlock.internal.clock"]
        local function now_us()
            return fake.anchor_us + fake.slept * 1e6
        end
        package.loaded["resty.shmlock.internal.clock"] = setmetatable({
            now_us = now_us,
            now_ms = function() return math.floor(now_us() / 1000) end,
            now = function() return now_us() / 1e6 end,
            cached_ms = function() return 0 end,
            sleep = function(s)
                fake.polls[#fake.polls + 1] = s
                fake.slept = fake.slept + s
                fake.clock = fake.clock + s
            end,
        }, { __index = real_clock })
        nginx_lock = require "resty.shmlock"
        package.loaded["resty.shmlock.internal.clock"] = real_clock
        for i, name in ipairs(reloaded) do
            package.loaded[name] = saved[i]
        end
        _G.ngx = saved_ngx
    end)

    before_each(function()
        n = n + 1
        dict = assert(shdict.open("nginx" .. n))
        fake.phase = "content"
        fake.clock = 0
        fake.steps = {}
        fake.polls = {}
        fake.anchor_us, fake.slept = clock.now_us(), 0
        fake.on_sleep = nil
        fake.sleep = function(s)
            fake.steps[#fake.steps + 1] = s
            fake.slept = fake.slept + s
            fake.clock = fake.clock + s
            if fake.on_sleep then
                fake.on_sleep(fake.clock)
            end
        end
    end)

    -- a holder that releases once the waiter has slept `after` seconds
    local function held_until(d, key, after)
        local holder = assert(nginx_lock:new(d))
        assert.equal(0, holder:lock(key))
        fake.on_sleep = function(now)
            if now >= after and holder:owned() then
                assert.equal(1, holder:unlock())
            end
        end
    end

    local function near(a, b)
        return math.abs(a - b) < 1e-9
    end

    it("waits with ngx.sleep steps; elapsed is their sum (0.127)",
       function()
        held_until(dict, "blah", 0.1)
        local lock = nginx_lock:new(dict)
        local elapsed, err = lock:lock("blah")
        assert.is_nil(err)
        assert.is_true(near(0.127, elapsed), tostring(elapsed))
        assert.same({ 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064 },
                    fake.steps)
        assert.equal(1, lock:unlock())
        -- one value, as resty.lock's (ngx.say(lock:lock(k)) prints alike)
        held_until(dict, "blah", 0.1)
        assert.equal(1, select("#", nginx_lock:new(dict):lock("blah")))
    end)

    it("follows resty.lock's custom step, ratio and max_step", function()
        local cases = {
            { { step = 0.01 }, 0.15 },
            { { ratio = 3 }, 0.121 },
            { { max_step = 0.05 }, 0.113 },
        }
        for i, case in ipairs(cases) do
            fake.clock = 0
            held_until(dict, "k" .. i, 0.1)
            local elapsed = nginx_lock:new(dict, case[1]):lock("k" .. i)
            assert.is_true(near(case[2], elapsed), tostring(elapsed))
        end
    end)

    it("never sleeps less than 1 ms, whatever step, max_step and the "
       .. "timeout left", function()
        local holder = nginx_lock:new(dict)
        assert.equal(0, holder:lock("k"))
        for _, opts in ipairs({ { max_step = 1e-7 }, { step = 1e-7 },
                                { step = 1e-7, max_step = 1e-7 } }) do
            fake.steps, fake.clock = {}, 0
            opts.timeout = 0.0105
            assert.same({ nil, "timeout" },
                        { nginx_lock:new(dict, opts):lock("k") })
            local steps = fake.steps
            assert.is_true(#steps <= 12, #steps .. " steps")
            for i = 1, #steps do
                assert.is_true(steps[i] >= 0.001 - 1e-9, "step " .. steps[i])
            end
            -- "timeout" at 10.5 ms, or up to 1 ms early
            assert.is_true(fake.clock > 0.0095 - 1e-9
                           and fake.clock < 0.0105 + 1e-9,
                           fake.clock .. ": " .. table.concat(steps, ","))
        end
        -- a timeout below 1 ms: no sleep at all; a last step cut below
        -- 1 ms (1 + 2 + 4 ms, 0.4 ms left): not slept
        for _, case in ipairs({ { 0.0005, {} },
                                { 0.0074, { 0.001, 0.002, 0.004 } } }) do
            fake.steps, fake.clock = {}, 0
            assert.same({ nil, "timeout" },
                        { nginx_lock:new(dict, { timeout = case[1] })
                              :lock("k") })
            assert.same(case[2], fake.steps)
        end
        -- a step of 1 ms or more is resty.lock's, max_step as well
        fake.steps, fake.clock = {}, 0
        assert.same({ nil, "timeout" },
                    { nginx_lock:new(dict, { timeout = 0.01, step = 0.002,
                                             max_step = 0.003 }):lock("k") })
        assert.same({ 0.002, 0.003, 0.003, 0.002 }, fake.steps)
    end)

    it("sleeps a last step of 1 ms less a rounding error as 1 ms "
       .. "(ngx.sleep truncates to whole ms: 0.999 ms would be a 0 ms "
       .. "sleep, logged)", function()
        local holder = nginx_lock:new(dict)
        assert.equal(0, holder:lock("k"))
        -- 16 ms: 1 + 2 + 4 + 8 ms, and 0.016 - 0.015 is 0.000999... here
        fake.steps, fake.clock = {}, 0
        assert.same({ nil, "timeout" },
                    { nginx_lock:new(dict, { timeout = 0.016 }):lock("k") })
        assert.equal(5, #fake.steps)
        for _, s in ipairs(fake.steps) do
            assert.is_true(math.floor(s * 1000) >= 1, "ngx.sleep(" .. s .. ")")
        end
        assert.equal(1, holder:unlock())
    end)

    it("times out after the sum of its steps", function()
        local holder = nginx_lock:new(dict)
        assert.equal(0, holder:lock("k"))
        local lock = nginx_lock:new(dict, { timeout = 0.01 })
        assert.same({ nil, "timeout" }, { lock:lock("k") })
        assert.same({ 0.001, 0.002, 0.004 },
                    { fake.steps[1], fake.steps[2], fake.steps[3] })
        assert.is_true(near(0.01, fake.clock), tostring(fake.clock))
    end)

    it("queues once its steps add up to 0.2 s: 1-2 ms polls, a mark, "
       .. "the key handed over past fresh arrivals", function()
        local holder = assert(nginx_lock:new(dict))
        assert.equal(0, holder:lock("q"))
        local marked, barged
        fake.on_sleep = function(now)
            if now > 0.3 and holder:owned() then
                marked = slot.marked(dict, "q") ~= nil
                assert.equal(1, holder:unlock())
                barged = { nginx_lock:new(dict):trylock("q") }
            end
        end
        local lock = nginx_lock:new(dict, { timeout = 1 })
        local elapsed, err = lock:lock("q")
        assert.is_nil(err)
        assert.is_true(marked)
        assert.same({ nil, "timeout" }, barged)
        assert.is_true(elapsed >= 0.255 and elapsed < 0.5, tostring(elapsed))
        assert.same({ 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064,
                      0.128 }, { unpack(fake.steps, 1, 8) })
        for i = 9, #fake.steps do
            assert.is_true(fake.steps[i] == 0.001 or fake.steps[i] == 0.002,
                           "pause " .. fake.steps[i])
        end
        assert.is_true(lock:owned())
        assert.equal(1, lock:unlock())
    end)

    it("a queued waiter that times out withdraws its mark", function()
        local holder = assert(nginx_lock:new(dict))
        assert.equal(0, holder:lock("w"))
        local state = slot.state(dict, "w")
        local lock = nginx_lock:new(dict, { timeout = 0.3 })
        assert.same({ nil, "timeout" }, { lock:lock("w") })
        assert.equal(state, slot.state(dict, "w"))      -- no mark left
        assert.equal(1, holder:unlock())
        assert.is_nil(slot.info(dict, "w"))
    end)

    it("does not sleep with timeout = 0 or in trylock()", function()
        local holder = nginx_lock:new(dict)
        assert.equal(0, holder:lock("k"))
        assert.same({ nil, "timeout" },
                    { nginx_lock:new(dict, { timeout = 0 }):lock("k") })
        assert.same({ nil, "timeout" }, { nginx_lock:new(dict):trylock("k") })
        assert.same({}, fake.steps)
    end)

    for _, phase in ipairs({ "init", "init_worker", "set", "header_filter",
                             "body_filter", "log", "balancer" }) do
        it("in the " .. phase .. " phase takes a free key, and answers "
           .. "'cannot wait in " .. phase .. " phase' for a held one",
           function()
            fake.phase = phase
            local l1 = nginx_lock:new(dict)
            assert.same({ 0 }, { l1:lock("k") })
            assert.same({ nil, "cannot wait in " .. phase .. " phase" },
                        { nginx_lock:new(dict):lock("k") })
            assert.same({}, fake.steps)
            assert.equal(1, l1:unlock())
        end)
    end

    it("waits in rewrite, access, content and timer phases", function()
        for _, phase in ipairs({ "rewrite", "access", "content", "timer" }) do
            fake.phase = phase
            fake.clock = 0
            held_until(dict, phase, 0.002)
            assert.is_true(near(0.003, nginx_lock:new(dict):lock(phase)))
        end
    end)

    it("with blocking_timeout, never blocks on a key this worker holds "
       .. "(its holder cannot run meanwhile): an error at once", function()
        fake.phase = "log"
        local holder = assert(nginx_lock:new(dict))
        assert.equal(0, holder:lock("own"))
        local lock = nginx_lock:new(dict, { blocking_timeout = 5 })
        assert.same({ nil, "cannot wait in log phase: held by this worker" },
                    { lock:lock("own") })
        -- at once: no poll, no sleep
        assert.same({}, fake.polls)
        assert.same({}, fake.steps)
        assert.equal(1, holder:unlock())
        assert.equal(0, lock:lock("own"))
        assert.equal(1, lock:unlock())
    end)

    it("takes a dead holder's key even where it cannot wait", function()
        fake.phase = "log"
        slot.dead_holder(dict, "k")
        assert.same({ 0 }, { nginx_lock:new(dict):lock("k") })
    end)

    -- runs fn with a stand-in ngx whose ngx.log lines are returned
    local function logged(fn)
        local lines, saved = {}, _G.ngx
        _G.ngx = {
            get_phase = function() return fake.phase end,
            shared = fake.shared, INFO = 7, NOTICE = 6, WARN = 5, ERR = 4,
            log = function(level, ...)
                lines[#lines + 1] = level .. " " .. table.concat({ ... })
            end,
        }
        local ok, err = pcall(fn)
        _G.ngx = saved
        assert(ok, err)
        return lines
    end

    it("uses the ngx.shared dict of a name declared both ways, whatever "
       .. "zone file exists; lock.store says which", function()
        local name = "nginx" .. n      -- a zone of that name exists
        fake.shared[name] = shared_dict()
        local lock = nginx_lock:new(name)
        assert.equal("ngx.shared", lock.store)
        assert.equal(0, lock:lock("k"))
        assert.is_nil(dict:get("k"))
        assert.is_number(fake.shared[name]:get("k"))
        assert.equal(1, lock:unlock())
        -- the zone is reached through its object
        local zl = nginx_lock:new(dict)
        assert.equal("zone", zl.store)
        assert.equal(0, zl:lock("k"))
        assert.truthy(slot.info(dict, "k"))
        assert.equal(1, zl:unlock())
        fake.shared[name] = nil
    end)

    it("logs the store of each name once, at info", function()
        local name = "nginx" .. n
        fake.shared["logged_shared" .. n] = shared_dict()
        local lines = logged(function()
            for _ = 1, 3 do
                assert(nginx_lock:new(name))
                assert(nginx_lock:new("logged_shared" .. n))
            end
        end)
        assert.same({
            '7 shmlock: lock name "' .. name .. '" uses the zone "'
                .. name .. '"',
            '7 shmlock: lock name "logged_shared' .. n .. '" uses the '
                .. 'lua_shared_dict "logged_shared' .. n .. '"',
        }, lines)
    end)

    it("logs a dead holder's lock taken over, at notice", function()
        fake.phase = "log"
        local dead = slot.dead_holder(dict, "k")
        local lines = logged(function()
            assert.same({ 0 }, { nginx_lock:new(dict):lock("k") })
        end)
        assert.same({ '6 shmlock: lock "k": holder process '
                      .. dead .. " is dead; its lock taken "
                      .. "over" }, lines)
    end)

    describe("over an ngx.shared dict (no zone of that name)", function()
        local shared

        before_each(function()
            shared = fake.shared.fallback
        end)

        it("works like resty.lock, with our owner as the value", function()
            local lock = assert(nginx_lock:new("fallback"))
            assert.is_false(env.exists(dir .. "/shmlock.fallback"))
            assert.same({ 0 }, { lock:lock("k") })
            -- pid * 2^31 + serial bits (resty.shmlock.lock.ngx_shared)
            assert.equal(env.pid(),
                         math.floor(shared:get("k") / 2 ^ 31))
            assert.is_true(lock:owned())
            assert.same({ nil, "locked" }, { lock:lock("k") })
            assert.same({ true }, { lock:expire(1) })
            assert.same({ 1 }, { lock:unlock() })
            assert.is_nil(shared:get("k"))
            assert.same({ nil, "unlocked" }, { lock:unlock() })
        end)

        it("waits with resty.lock's steps", function()
            held_until("fallback", "blah", 0.1)
            local elapsed = nginx_lock:new("fallback"):lock("blah")
            assert.is_true(near(0.127, elapsed), tostring(elapsed))
            assert.same({ nil, "timeout" },
                        { nginx_lock:new("fallback", { timeout = 0 })
                                    :lock("blah") })
        end)

        it("with blocking_timeout, polls where the phase cannot yield",
           function()
            fake.phase = "log"
            -- held by another process (an ngx.shared lock never asks
            -- whether its holder lives)
            assert.is_true(shared:add("b", env.token(env.dead_pid(), 1, 1)))
            local lock = nginx_lock:new("fallback", { blocking_timeout = 0.05 })
            assert.same({ nil, "timeout" }, { lock:lock("b") })
            -- polls up to the 0.05 s (the last one cut to what is left)
            local took = 0
            for _, p in ipairs(fake.polls) do
                took = took + p
            end
            assert.is_true(took >= 0.05 - 1e-9 and took < 0.05 + 1e-6,
                           tostring(took))
            assert.same({}, fake.steps)
            assert.same({ nil, "cannot wait in log phase" },
                        { nginx_lock:new("fallback"):lock("b") })
            shared:delete("b")
            local elapsed = lock:lock("b")
            assert.equal(0, elapsed)
            assert.equal(1, lock:unlock())
        end)

        it("with blocking_timeout, never blocks on a key this worker holds",
           function()
            fake.phase = "log"
            local holder = assert(nginx_lock:new("fallback"))
            assert.equal(0, holder:lock("own"))
            local lock = nginx_lock:new("fallback", { blocking_timeout = 5 })
            assert.same({ nil, "cannot wait in log phase: held by this "
                               .. "worker" }, { lock:lock("own") })
            -- at once: no poll, no sleep
            assert.same({}, fake.polls)
            assert.same({}, fake.steps)
            assert.equal(1, holder:unlock())
        end)

        it("answers 'expired' and leaves another holder's lock alone",
           function()
            for _, method in ipairs({ "unlock", "expire" }) do
                local l1 = nginx_lock:new("fallback", { exptime = 0.01 })
                assert.equal(0, l1:lock(method))
                fake.clock = fake.clock + 0.02
                local l2 = nginx_lock:new("fallback")
                assert.equal(0, l2:lock(method))
                local tok = { shared:get(method) }
                -- unlock: 1, as resty.lock's (the lock is gone either way)
                assert.same({ method == "unlock" and 1 or nil, "expired" },
                            { l1[method](l1) })
                assert.same(tok, { shared:get(method) })
                assert.is_true(l2:owned())
                assert.same({ nil, "unlocked" }, { l1:unlock() })
            end
        end)

        it("unlock answers 1, 'expired' when our lock expired and the key "
           .. "is free", function()
            local l1 = nginx_lock:new("fallback", { exptime = 0.01 })
            assert.equal(0, l1:lock("gone"))
            fake.clock = fake.clock + 0.02
            assert.is_nil(shared:get("gone"))
            assert.same({ 1, "expired" }, { l1:unlock() })
            assert.same({ nil, "unlocked" }, { l1:unlock() })
        end)

        it("gives an exptime below 1 ms as 1 ms, not 0 (never expires)",
           function()
            local lock = nginx_lock:new("fallback", { exptime = 0.0001 })
            assert.equal(0, lock:lock("short"))
            fake.clock = fake.clock + 0.002
            assert.is_nil(shared:get("short"))

            lock = nginx_lock:new("fallback")
            assert.equal(0, lock:lock("renewed"))
            assert.is_true(lock:expire(0.0001))
            fake.clock = fake.clock + 0.002
            assert.is_nil(shared:get("renewed"))
        end)

        it("is released by the GC", function()
            -- referenced until the key is checked held
            local lock = (function()
                local l = nginx_lock:new("fallback")
                assert.equal(0, l:lock("gc"))
                return l
            end)()
            assert.is_number(shared:get("gc"))
            assert.is_true(lock:owned())
            lock = nil                                  -- luacheck: ignore
            gc()
            assert.is_nil(shared:get("gc"))
        end)
    end)
end)

describe("resty.shmlock.lock.ngx_shared: the value of a lock", function()
    local ngx_shared = require "resty.shmlock.lock.ngx_shared"
    local stored = ngx_shared.stored
    -- pid 12345, serial 0x00000001800000ff
    local tok = "12345:6789:00000001800000ff"      -- 27 bytes

    -- 4 characters as a little-endian 32-bit number (the bytes in memory)
    local function raw4(s)
        local a, b, c, d = s:byte(1, 4)
        return a + b * 256 + c * 65536 + d * 16777216
    end
    local number = 12345 * 2 ^ 31 + raw4("00ff")
    local flags = raw4("8000")

    -- nginx's node: 68 bytes, the key, the value; slab classes are powers
    -- of two up to half a page (2048), then whole pages
    local function class(n)
        if n > 2048 then
            return math.ceil(n / 4096) * 4096
        end
        local c = 8
        while c < n do
            c = c * 2
        end
        return c
    end

    it("is pid * 2^31 + the last 4 characters (flags: the 4 before) where "
       .. "8 bytes fit in the size class of resty.lock's entry (true), else "
       .. "a compact token of that class", function()
        for klen = 1, 5000 do
            local v, f = stored(tok, klen)
            local len = type(v) == "number" and 8 or #v
            assert.equal(class(68 + klen + 1), class(68 + klen + len),
                         "key of " .. klen .. " bytes")
            if type(v) == "number" then
                assert.equal(number, v)
                assert.equal(flags, f)
                assert.equal(12345, ngx_shared.holder_pid(v))
            else
                -- the pid's bytes, cut to the room; 31 bits of the serial
                assert.equal(("\57\48\0"):sub(1, #v), v)
                assert.equal(0xff, f)
            end
        end
        -- the boundaries: the room left by 1 byte of value
        assert.same({ number, flags }, { stored(tok, 52) })
        assert.same({ "\57\48\0", 0xff }, { stored(tok, 53) })
        assert.same({ "\57\48\0", 0xff }, { stored(tok, 57) })
        assert.same({ "\57\48", 0xff }, { stored(tok, 58) })
        assert.same({ "\57", 0xff }, { stored(tok, 59) })
        assert.same({ number, flags }, { stored(tok, 60) })
        assert.same({ "\57", 0xff }, { stored(tok, 1979) })  -- 2048
        assert.same({ number, flags }, { stored(tok, 1980) })  -- a page
        assert.equal(12345, ngx_shared.compact_pid("\57\48\0"))
        assert.equal(12345, ngx_shared.holder_pid("\57\48\0"))
        assert.is_nil(ngx_shared.compact_pid("\57\48"))
        assert.is_nil(ngx_shared.holder_pid(true))
        assert.is_nil(ngx_shared.holder_pid(0.5))
    end)

    it("tells apart the tokens of two processes and two serials", function()
        -- the largest pid (2^22 - 1) and hex digits: exact, flags an int
        local big = "4194303:1:ffffffffffffffff"
        local v, f = stored(big, 10)
        assert.same({ 4194303 * 2 ^ 31 + raw4("ffff"), raw4("ffff") },
                    { v, f })
        assert.is_true(v < 2 ^ 53 and f < 2 ^ 31)
        assert.equal(4194303, ngx_shared.holder_pid(v))
        local seen = {}
        for _, t in ipairs({ "12345:6789:00000001800000ff",
                             "12346:6789:00000001800000ff",  -- pid
                             "1234:6789:00000001800000ff",   -- pid
                             "12345:6789:0000000180000100",  -- last 4
                             "12345:6789:00000001900000ff",  -- the 4 before
                             "12345:6789:00000001000000ff",
                           }) do
            v, f = stored(t, 10)
            local id = string.format("%.0f/%d", v, f)
            assert.is_nil(seen[id], t .. " as " .. tostring(seen[id]))
            seen[id] = t
        end
    end)

    it("a token in a buffer (a pointer) is stored as the same string",
       function()
        local ffi = require "ffi"
        local buf = ffi.new("char[64]")
        ffi.copy(buf, tok)
        local dict = {}
        function dict.add(_, k, v, exp, f)
            dict.got = { k, v, exp, f }
            return true
        end
        assert.is_true(ngx_shared.add(dict, "key", 3, buf, #tok, 30))
        assert.same({ "key", number, 30, flags }, dict.got)
    end)
end)
