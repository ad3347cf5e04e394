-- resty.shmlock when the zone says no: a full zone under a marked lock
-- (real processes), and zone errors injected into the lock's C calls.
-- Whatever fails, every loop ends (at the caller's deadline, or after a
-- few retries), a waiter returns "timeout" on time without burning CPU, a
-- release that fails while the lock is still ours keeps it held (never
-- "expired"), and no key is left to an owner who stopped waiting.

local proc = require "harness.proc"
local fixture = require "helpers.fixture"
local checkout = require "helpers.checkout"
local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local env = require "helpers.lock_env"
local slot = require "helpers.lock_slot"
local handle = require "resty.shmlock.lock.handle"
local fake_clock = require "helpers.fake_clock"
local hooks = require "helpers.test_hooks"
local EXISTS = require("resty.shmlock.internal.codes").EXISTS

local function gc()
    collectgarbage()
    collectgarbage()
end

-- the zone clock in ms
local function now_ms()
    return math.floor(env.now_us() / 1000)
end

-- fills the zone with entries that never expire, smaller and smaller,
-- until not even an empty string fits
local function fill(dict)
    local i = 0
    for _, size in ipairs({ 200, 50, 10, 0 }) do
        local ok, err
        repeat
            i = i + 1
            ok, err = dict:add("f" .. i, string.rep("x", size))
        until not ok
        assert.equal("no memory", err)
    end
    return i
end

local write_file, read_file = checkout.write_file, checkout.read_file


describe("resty.shmlock in a full zone (processes)", function()
    local fx = fixture.new { dir = "block", children = "reap" }
    local dir, dict, n

    setup(function()
        dir = fx.dir
        n = 0
    end)

    before_each(function()
        n = n + 1
        dict = assert(shdict.open("full" .. n, { dir = dir, size = "32k" }))
    end)

    -- Forks a waiter W on key "k" with `timeout`; it writes
    -- "<elapsed> <err> <wall s> <cpu s>" to a file, unlocks what it got.
    local function waiter(timeout)
        local out = dir .. "/waiter" .. n
        local pid = proc.spawn(function()
            local lock = assert(resty_lock:new(dict, { timeout = timeout }))
            local t0, cpu0 = env.now(), env.cpu()
            local elapsed, err = lock:lock("k")
            local wall, cpu = env.now() - t0, env.cpu() - cpu0
            if elapsed then
                assert(lock:unlock() == 1, "W's unlock")
            end
            write_file(out, ("%s %s %.3f %.3f"):format(tostring(elapsed),
                                                       tostring(err), wall,
                                                       cpu))
        end)
        local function result()
            local s = read_file(out)
            if not s then
                return nil
            end
            local elapsed, err, wall, cpu =
                s:match("^(%S+) (%S+) (%S+) (%S+)$")
            return { elapsed = elapsed, err = err, wall = tonumber(wall),
                     cpu = tonumber(cpu) }
        end
        return pid, result
    end

    -- A holds "k" (exptime 0: never expires by itself), W starves and
    -- marks it, then the zone fills up
    local function marked_then_full(timeout)
        local holder = assert(resty_lock:new(dict, { exptime = 0 }))
        assert.equal(0, holder:lock("k"))
        local pid, result = waiter(timeout)
        assert.truthy(env.wait_for(function()
            return slot.marked(dict, "k")
        end, 20), "W never marked the lock")
        fill(dict)
        return holder, pid, result
    end

    it("a marked waiter times out on time, without spinning; the holder's "
       .. "unlock then frees the key", function()
        local holder, pid, result = marked_then_full(1)

        -- on time: not before its timeout; after it, any lateness a loaded
        -- machine makes (a waiter that ignored its timeout would wait for
        -- the holder, whose unlock comes after this wait: the wait fails)
        local res = proc.wait(pid, 30)
        assert.same({ "exit", 0, "" }, { res.how, res.code, res.msg })
        local r = result()
        assert.same({ "nil", "timeout" }, { r.elapsed, r.err })
        assert.is_true(r.wall >= 1, "W waited " .. r.wall)
        -- CPU seconds: a spinning waiter burns its whole second (a busy
        -- machine only lowers that)
        assert.is_true(r.cpu < 0.1, "W used " .. r.cpu .. " s of CPU")

        -- the unlock does not wait for anything (the waiter is gone): 5 s
        -- is a ceiling only a wait reaches, not a margin
        local t0 = env.now()
        assert.same({ 1 }, { holder:unlock() })
        assert.is_true(env.now() - t0 < 5)
        assert.is_false(holder:owned())
        assert.is_nil(slot.info(dict, "k"))

        -- another process takes the key at once
        local other = proc.spawn(function()
            local lock = assert(resty_lock:new(dict))
            local elapsed, err = lock:trylock("k")
            assert(elapsed == 0, "trylock: " .. tostring(err))
            assert(lock:unlock() == 1)
        end)
        res = proc.wait(other, 20)
        assert.same({ "exit", 0, "" }, { res.how, res.code, res.msg })
    end)

    -- needs the C core to cas a value to a shorter one without free
    -- memory (until then unlock() answers nil, "no memory", and keeps the
    -- lock held)
    it("the holder's unlock hands the lock to the marked waiter", function()
        -- (W's 30 s: it must still wait when the unlock comes, however
        -- slowly a loaded machine marks and fills)
        local holder, pid, result = marked_then_full(30)

        assert.same({ 1 }, { holder:unlock() })
        assert.is_false(holder:owned())

        local res = proc.wait(pid, 30)
        assert.same({ "exit", 0, "" }, { res.how, res.code, res.msg })
        local r = result()
        assert.equal("nil", r.err)
        assert.is_number(tonumber(r.elapsed), "W waited " .. r.elapsed)
        assert.is_nil(slot.info(dict, "k"))
    end)
end)


describe("resty.shmlock when a zone call fails (injected)", function()
    local dir, dict, n
    local fx = fixture.new { dir = "block" }

    -- The lock's calls of the slots fail as a spec asks (the C core's
    -- seam, src/shmlock_lock.c): fail(name, rc) makes each call of
    -- shmlock_slot_<name> by the lock answer rc (nil: run again).
    local CALLS = { swap = hooks.SHMLOCK_TEST_LOCK_SWAP,
                    release = hooks.SHMLOCK_TEST_LOCK_RELEASE,
                    extend = hooks.SHMLOCK_TEST_LOCK_EXTEND }
    local function fail(name, rc)
        hooks.shmlock_test_lock_fail(CALLS[name], rc or 0)
    end

    setup(function()
        dir = fx.dir
        n = 0
    end)

    before_each(function()
        n = n + 1
        dict = assert(shdict.open("inject" .. n, { dir = dir }))
    end)

    after_each(function()
        for name in pairs(CALLS) do
            fail(name, nil)
        end
    end)

    local function new_lock(opts)
        return assert(resty_lock:new(dict, opts))
    end

    -- a starving waiter of this process no lock object is: alive (our
    -- pid), not queued anywhere
    local STARVER = 0xfffffff0

    -- the holder's lock on "k", marked by a starver of ours that waits
    -- for another minute
    local function held_and_marked()
        local holder = new_lock()
        assert.equal(0, holder:lock("k"))
        assert.is_true(slot.mark(dict, "k", { pid = env.pid(), id = STARVER,
                                              till = now_ms() + 60000 }))
        return holder, slot.state(dict, "k")
    end

    for _, case in ipairs({ { 3, "no memory" }, { 10, "corrupt zone" } }) do
        local rc, msg = case[1], case[2]

        it("unlock() returns nil, '" .. msg .. "' when the handoff fails, "
           .. "and keeps the lock held", function()
            local holder, marked = held_and_marked()
            fail("swap", rc)
            assert.same({ nil, msg }, { holder:unlock() })
            assert.is_true(holder:owned())
            assert.equal(marked, slot.state(dict, "k"))
            assert.same({ nil, "locked" }, { holder:lock("j") })
            -- the failure passes: unlock again hands the lock over
            fail("swap", nil)
            assert.same({ 1 }, { holder:unlock() })
            local pid, id = slot.owner(dict, "k")
            assert.same({ env.pid(), STARVER }, { pid, id })
        end)

        it("unlock() returns nil, '" .. msg .. "' when the release fails, "
           .. "and the GC still releases the lock", function()
            -- referenced until the key is checked held
            local holder = (function()
                local l = new_lock()
                assert.equal(0, l:lock("k"))
                fail("release", rc)
                assert.same({ nil, msg }, { l:unlock() })
                assert.is_true(l:owned())
                fail("release", nil)
                return l
            end)()
            assert.truthy(slot.info(dict, "k"))
            assert.is_true(holder:owned())
            holder = nil                                -- luacheck: ignore
            gc()
            assert.is_nil(slot.info(dict, "k"))
        end)

        it("expire() returns nil, '" .. msg .. "' and keeps the lock, "
           .. "as it was", function()
            local holder = new_lock()
            assert.equal(0, holder:lock("k"))
            local state = slot.state(dict, "k")
            fail("extend", rc)
            assert.same({ nil, msg }, { holder:expire(60) })
            assert.is_true(holder:owned())
            assert.equal(state, slot.state(dict, "k"))
            fail("extend", nil)
            assert.same({ 1 }, { holder:unlock() })
            assert.is_nil(slot.info(dict, "k"))
        end)
    end

    it("unlock() of a marked lock whose new mark a starver left half "
       .. "written (killed at each write of it) hands over or frees the key",
       function()
        -- the record of a mark is written under the shard's mutex, seq
        -- odd meanwhile: a lock-free read of it fails.  A starver killed
        -- (or preempted) there left the release's retries nothing but
        -- such reads; 32 of them answered 'changed' and the holder kept
        -- the key.  It must wait for the mutex, or take it over.
        local half = 0
        for w = 1, 64 do
            local holder = held_and_marked()
            local pid = proc.spawn(function()
                hooks.shmlock_test_crash_at(w)
                local ok = slot.mark(dict, "k", { pid = proc.getpid(),
                                                  id = 7, since = 0,
                                                  till = now_ms() + 60000 })
                hooks.shmlock_test_crash_at(0)
                assert(ok)
            end)
            local r = proc.wait(pid, 20)
            local _, _, _, marked = slot.owner(dict, "k")
            -- the flag set (the first mark's) but no record to read
            if marked and not slot.marked(dict, "k") then
                half = half + 1
            end
            assert.same({ 1 }, { holder:unlock() }, "killed at write " .. w)
            assert.is_false(holder:owned())
            -- to our live starver (the record was its), or freed (the
            -- dead starver's, complete or dropped): never kept
            local owner, id = slot.owner(dict, "k")
            if owner ~= 0 then
                assert.same({ env.pid(), STARVER }, { owner, id })
            end
            slot.release(dict, "k")
            if r.how == "exit" then
                assert.equal(0, r.code, r.msg)
                break
            end
            assert.equal("signal", r.how, r.msg)
        end
        -- the case above was met: a record left half written
        assert.is_true(half > 0, "no write left the mark half written")
    end)

    it("a starver whose withdrawal fails returns 'timeout' on time; its "
       .. "stale mark is not handed the lock", function()
        local holder = assert(resty_lock:new(dict))
        assert.equal(0, holder:lock("k"))

        -- a waiter outside nginx: it marks the lock after 2 ms; at its
        -- deadline the withdrawal (a swap that clears the mark) fails
        fail("swap", 3)
        local waiter = new_lock({ timeout = 0.1 })
        local zl = require "resty.shmlock.lock.zone"
        local me = handle.zone(dict._zone)
        local t0, cpu0 = env.now(), env.cpu()
        assert.equal(EXISTS, zl.acquire(me, "k", 1, waiter.expiry))
        assert.same({ nil, "timeout" },
                    { zl.block(waiter.target, "k", 1, me, waiter.expiry,
                               waiter.timeout, waiter.step, waiter.ratio,
                               waiter.max_step) })
        local wall, cpu = env.now() - t0, env.cpu() - cpu0
        assert.is_true(wall >= 0.1, "waited " .. wall)
        -- a spin would burn the whole wait (a loaded machine delays the
        -- waiter, it does not add to its CPU time)
        assert.is_true(cpu < 0.05, "CPU " .. cpu .. " s")
        local pid, id = slot.marked(dict, "k")
        assert.same({ env.pid(), me.id }, { pid, id })  -- the mark stayed

        -- the holder's release frees the key instead of handing it to
        -- a waiter who gave up
        fail("swap", nil)
        assert.same({ 1 }, { holder:unlock() })
        assert.is_nil(slot.info(dict, "k"))
        assert.is_nil(slot.marked(dict, "k"))

        -- on time: on a clock only its sleeps move, the steps add up to
        -- its 0.1 s, the last one cut to the deadline, then no more
        local fc = fake_clock.new()
        local fzl = fc:require("resty.shmlock.lock.zone")
        assert.equal(0, holder:lock("k"))
        fail("swap", 3)
        assert.equal(EXISTS, fzl.acquire(me, "k", 1, waiter.expiry))
        assert.same({ nil, "timeout" },
                    { fzl.block(waiter.target, "k", 1, me, waiter.expiry,
                                waiter.timeout, waiter.step, waiter.ratio,
                                waiter.max_step) })
        assert.same({ 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.037 },
                    fc.sleeps)
        fail("swap", nil)
        assert.same({ 1 }, { holder:unlock() })
    end)
end)
