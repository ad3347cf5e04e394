-- resty.shmlock.redis against a real redis-server that this file starts on
-- a free 127.0.0.1 port and stops in teardown.

local checkout = require "helpers.checkout"
local fixture = require "helpers.fixture"
local server_helper = require "helpers.redis_server"
local resty_mock = require "helpers.redis_resty_mock"
local fake_clock = require "helpers.fake_clock"
local socket = require "socket"
local harness_proc = require "harness.proc"
local spec_children = require "helpers.children"

local now, sleep = socket.gettime, socket.sleep

-- a holder that stands for a process of another host: no host single
-- flight, so that the waiters of this process wait on Redis
local ELSEWHERE = { dict = false }

-- what a host's turn adds to a fence counter's lifetime, in ms
local SPAN = require("resty.shmlock.redis.host").TURN_SPAN * 1000

local redis_lock
local server
local raw          -- a plain lua-redis client for looking at the keys

local function client(timeout)
    return server:client(timeout)
end

-- the error f() raised, to check that misuse points at the caller's line
local function raised(f)
    local ok, err = pcall(f)
    assert.is_false(ok)
    return err
end

-- ms since t0 (now()): how much of a lifetime set after t0 may be gone
-- when read, on a machine that may be late anywhere
local function passed_ms(t0)
    return (now() - t0) * 1000 + 1
end

-- polls cond() for up to `within` seconds
local function eventually(cond, within)
    local deadline = now() + (within or 10)
    while not cond() do
        if now() > deadline then
            return false
        end
        sleep(0.01)
    end
    return true
end

-- the Redis lock module on a clock that only its sleeps move
-- (helpers.fake_clock): how long it waits is then exact whatever the load
local function faked(opts)
    local fc = fake_clock.new(opts)
    return fc:require("resty.shmlock.redis"), fc
end

local function commandstats()
    local stats = {}
    local info = raw:info("commandstats")
    for name, line in pairs(info.commandstats or {}) do
        stats[name] = tonumber(line:match("calls=(%d+)"))
    end
    return stats
end


describe("resty.shmlock.redis", function()
    -- the zones of host single flight (shmlock_redis) in a directory of
    -- this block's, for its children too
    fixture.new { dir = "block", env = true }

    setup(function()
        server = server_helper.start()
        raw = client()
        redis_lock = require "resty.shmlock.redis"
    end)

    teardown(function()
        if server then
            server:destroy()
        end
    end)

    before_each(function()
        if server.pid then
            raw:flushall()
        end
    end)


    describe("new()", function()
        it("works as module.new(client, opts) and module:new(client, opts)",
           function()
            local a = redis_lock.new(raw, { exptime = 7 })
            local b = redis_lock:new(raw, { exptime = 7 })
            assert.equal(7, a.exptime)
            assert.equal(7, b.exptime)
            assert.equal(0, a:lock("new"))
            assert.equal(1, a:unlock())
        end)

        it("has resty.lock's defaults and prefix \"lock:\"", function()
            local lock = redis_lock.new(raw)
            assert.same({ 30, 5, 0.001, 2, 0.5, "lock:" },
                        { lock.exptime, lock.timeout, lock.step, lock.ratio,
                          lock.max_step, lock.prefix })
        end)

        it("clamps as resty.lock: timeout <= exptime, step <= timeout",
           function()
            local lock = redis_lock.new(raw, { exptime = 2, timeout = 3,
                                               step = 4 })
            assert.same({ 2, 2, 2 }, { lock.exptime, lock.timeout, lock.step })
            -- no timeout given: neither is clamped (resty.lock does the same)
            lock = redis_lock.new(raw, { exptime = 2, step = 4 })
            assert.same({ 5, 4 }, { lock.timeout, lock.step })
        end)

        it("raises on a bad option, naming it, at the caller's line",
           function()
            local err = raised(function()
                redis_lock.new(raw, { exptime = "1" })
            end)
            assert.matches("20%-redis_spec%.lua:%d+: opts%.exptime must be a"
                           .. " number$", err)
            local cases = {
                { { timeout = -1 }, "opts.timeout must be >= 0" },
                { { exptime = -1 }, "opts.exptime must be >= 0" },
                { { step = 0 }, "opts.step must be > 0" },
                { { ratio = "2" }, "opts.ratio must be a number" },
                { { max_step = 0 }, "opts.max_step must be > 0" },
                { { timeout = 0 / 0 }, "opts.timeout must be a number" },
                { { prefix = 1 }, "opts.prefix must be a string" },
                { { exptime = math.huge }, "opts.exptime must be <= 1e12" },
                { { exptime = 1e12 + 1e6 }, "opts.exptime must be <= 1e12" },
                { { timeout = math.huge }, "opts.timeout must be <= 1e12" },
                { { max_step = -math.huge }, "opts.max_step must be > 0" },
                { 42, "opts must be a table" },
            }
            for _, case in ipairs(cases) do
                assert.has_error(function() redis_lock.new(raw, case[1]) end,
                                 case[2])
            end
        end)

        it("raises on something that is not a redis client", function()
            local err = raised(function() redis_lock.new({}, {}) end)
            assert.matches('20%-redis_spec%.lua:%d+: bad "client" argument',
                           err)
            assert.has_error(function() redis_lock.new(nil) end)
            assert.has_error(function() redis_lock:new("127.0.0.1") end)
        end)
    end)


    describe("lock()", function()
        it("returns 0, nil, fence and stores its token under "
           .. "<prefix>{key} with exptime", function()
            local lock = redis_lock.new(raw, { exptime = 10 })
            local t0 = now()
            local elapsed, err, fence = lock:lock("k")
            assert.same({ 0, nil, 1 }, { elapsed, err, fence })
            assert.equal(lock.token, raw:get("lock:{k}"))
            local pttl = raw:pttl("lock:{k}")
            assert.is_true(pttl >= 10000 - passed_ms(t0) and pttl <= 10000)
            assert.equal("1", raw:get("lock:{k}:fence"))
            assert.equal(1, lock:unlock())
            assert.is_false(raw:exists("lock:{k}"))
        end)

        it("uses opts.prefix", function()
            local lock = redis_lock.new(raw, { prefix = "app:" })
            assert.equal(0, lock:lock("k"))
            assert.is_true(raw:exists("app:{k}"))
            assert.is_false(raw:exists("lock:{k}"))
            assert.equal(1, lock:unlock())
        end)

        it("with exptime 0 takes a lock that never expires", function()
            local lock = redis_lock.new(raw, { exptime = 0 })
            assert.equal(0, lock:lock("forever"))
            assert.equal(-1, raw:pttl("lock:{forever}"))
            assert.equal(1, lock:unlock())
        end)

        it("returns nil, 'nil key' and nil, 'empty key'", function()
            local lock = redis_lock.new(raw)
            assert.same({ nil, "nil key" }, { lock:lock(nil) })
            assert.same({ nil, "empty key" }, { lock:lock("") })
        end)

        it("takes a number key as its string", function()
            local lock = redis_lock.new(raw)
            assert.equal(0, lock:lock(42))
            assert.is_true(raw:exists("lock:{42}"))
            assert.equal(1, lock:unlock())
        end)

        it("takes a float number key as the same Redis key under LuaJIT "
           .. "and Lua 5.4", function()
            -- 2^10 is "1024" by tostring under LuaJIT, "1024.0" under 5.4
            -- (resty.shmlock.internal.key).  Lua 5.4 has no redis-lua
            -- package here: 5.3's, plain Lua, serves it.
            local function lua54(code)
                return checkout.trim(checkout.sh("cd /tmp && LUA_PATH='"
                    .. checkout.ROOT .. "/lua/?.lua;;/usr/share/lua/5.3/?.lua'"
                    .. " lua5.4 -e \"local l = require('resty.shmlock.redis')"
                    .. ".new(require('redis').connect('127.0.0.1', "
                    .. server.port .. "), { timeout = 0 }); " .. code
                    .. "\" 2>&1"))
            end
            local lock = redis_lock.new(raw, { timeout = 0 })
            assert.equal(0, lock:lock(2 ^ 10))
            assert.equal("nil\ttimeout", lua54("print(l:lock(2 ^ 10))"))
            assert.equal(1, lock:unlock())
            -- taken under 5.4 (and kept: the process exits holding it)
            assert.equal("0\tnil", lua54("local e, err = l:lock(2 ^ 10); "
                                         .. "print(e, err)"))
            assert.same({ nil, "timeout" }, { lock:lock(2 ^ 10) })
            local keys = raw:keys("*")
            table.sort(keys)
            assert.same({ "lock:{1024}", "lock:{1024}:fence" }, keys)
        end)

        it("returns nil, 'locked' while this object holds a lock", function()
            local lock = redis_lock.new(raw)
            assert.equal(0, lock:lock("a"))
            assert.same({ nil, "locked" }, { lock:lock("a") })
            assert.same({ nil, "locked" }, { lock:lock("b") })
            assert.is_false(raw:exists("lock:{b}"))
            assert.equal(1, lock:unlock())
        end)

        it("waits for the holder and returns the measured elapsed time",
           function()
            local holder = redis_lock.new(raw, { exptime = 0.2, dict = false })
            local t_lock = now()
            assert.equal(0, holder:lock("w"))
            -- elapsed is measured: at least its sleeps' span (first start
            -- to last end), at most the call seen from here
            local mod, fc = faked { real = true }
            local waiter = mod.new(client(), { timeout = 2 })
            local t0 = now()
            local elapsed, err, fence = waiter:lock("w")
            local t1 = now()
            assert.is_nil(err)
            assert.equal(2, fence)
            -- not before the holder's lock expired (Redis counts ms)
            assert.is_true(t1 - t_lock >= 0.199, t1 - t_lock)
            local waits = fc.waits
            assert.is_true(#waits > 0)
            assert.is_true(elapsed * 1e6 >= waits[#waits].to - waits[1].from,
                           elapsed)
            assert.is_true(elapsed <= t1 - t0, elapsed)
            assert.equal(1, waiter:unlock())
        end)

        it("returns nil, 'timeout' at the deadline, never sleeping past it",
           function()
            local holder = redis_lock.new(raw, ELSEWHERE)
            assert.equal(0, holder:lock("t"))
            -- a large max_step: the backoff must still stop at the deadline
            local waiter = redis_lock.new(client(), { timeout = 0.3,
                                                      step = 0.25,
                                                      max_step = 10 })
            local t0 = now()
            assert.same({ nil, "timeout" }, { waiter:lock("t") })
            local took = now() - t0
            assert.is_true(took >= 0.29, took)
            -- the sleeps stop at the deadline: each >= 1 ms, the last one
            -- at most what was left, so they add up to 0.3 s less at most
            -- 1 ms (less than that left ends the wait)
            local mod, fc = faked()
            waiter = mod.new(client(), { timeout = 0.3, step = 0.25,
                                         max_step = 10 })
            assert.same({ nil, "timeout" }, { waiter:lock("t") })
            assert.is_true(#fc.sleeps >= 2, #fc.sleeps .. " sleeps")
            for _, s in ipairs(fc.sleeps) do
                assert.is_true(s >= 0.001, s)
            end
            assert.is_true(fc:slept() <= 0.3 + 1e-9
                           and fc:slept() > 0.299 - 1e-9, fc:slept())
            assert.equal(1, holder:unlock())
        end)

        it("tries at most once per ms, whatever step and max_step",
           function()
            local holder = redis_lock.new(raw, ELSEWHERE)
            assert.equal(0, holder:lock("spin"))
            for _, opts in ipairs({ { max_step = 1e-7 },
                                    { step = 1e-7, max_step = 1e-7 } }) do
                opts.timeout = 0.3
                local waiter = redis_lock.new(client(), opts)
                raw:config("resetstat")
                local t0 = now()
                assert.same({ nil, "timeout" }, { waiter:lock("spin") })
                local took = now() - t0
                assert.is_true(took >= 0.29, took)
                -- a first attempt and one per sleep of >= 1 ms
                local tries = commandstats().cmdstat_evalsha
                assert.is_true(tries <= 302, tries .. " tries in " .. took
                                             .. " s")
                -- each sleep >= 1 ms, on a clock only they move
                local mod, fc = faked()
                assert.same({ nil, "timeout" },
                            { mod.new(client(), opts):lock("spin") })
                assert.is_true(#fc.sleeps <= 300, #fc.sleeps .. " sleeps")
                for _, s in ipairs(fc.sleeps) do
                    assert.is_true(s >= 0.001, s)
                end
            end
            assert.equal(1, holder:unlock())
        end)

        it("with timeout 0 tries once", function()
            local holder = redis_lock.new(raw, ELSEWHERE)
            assert.equal(0, holder:lock("t0"))
            local mod, fc = faked()
            local waiter = mod.new(client(), { timeout = 0 })
            raw:config("resetstat")
            assert.same({ nil, "timeout" }, { waiter:lock("t0") })
            assert.same({}, fc.sleeps)
            assert.equal(1, commandstats().cmdstat_evalsha)
            assert.equal(1, holder:unlock())
        end)

        it("lock(key, timeout) overrides the object's timeout for one call",
           function()
            -- the holder's 0.6 s must outlast the timeouts: a run late for
            -- them is done again with a fresh key (5 runs at most)
            local waiter = redis_lock.new(client(), { timeout = 5 })
            local mod, fc = faked()
            local fwaiter = mod.new(client(), { timeout = 5 })
            local function run(key)
                local holder = redis_lock.new(raw, { exptime = 0.6,
                                                     dict = false })
                local held = now()
                assert.equal(0, holder:lock(key))
                fc.sleeps = {}
                -- 0: one try, no wait
                local r0 = { fwaiter:lock(key, 0) }
                local sleeps0 = #fc.sleeps
                -- 0.05: sleeps of 0.049 to 0.05 s, not the object's 5
                local t0 = now()
                local r1 = { waiter:lock(key, 0.05) }
                local took = now() - t0
                local r2 = { fwaiter:lock(key, 0.05) }
                if now() >= held + 0.6 then
                    return false
                end
                assert.same({ nil, "timeout" }, r0)
                assert.equal(0, sleeps0)
                assert.same({ nil, "timeout" }, r1)
                assert.is_true(took >= 0.045, took)
                assert.same({ nil, "timeout" }, r2)
                assert.is_true(fc:slept() <= 0.05 + 1e-9
                               and fc:slept() > 0.049 - 1e-9, fc:slept())
                -- a longer one gets the key once the holder's lock goes
                local elapsed, err, fence = waiter:lock(key, 3)
                assert.is_nil(err)
                assert.equal(2, fence)
                assert.is_true(elapsed >= 0 and elapsed < 3, elapsed)
                assert.equal(1, waiter:unlock())
                return true
            end
            local done = false
            for i = 1, 5 do
                done = run("pc" .. i)
                if done then
                    break
                end
            end
            assert.is_true(done, "5 runs, each late for a check")
            assert.equal(5, waiter.timeout)
            -- clamped to exptime, as opts.timeout, but for exptime 0 (a
            -- lock that never expires): then the waiter waits its timeout
            -- (resty.lock would give up at once)
            assert.equal(0, redis_lock.new(raw):lock("pc2"))
            local never = mod.new(client(), { exptime = 0 })
            fc.sleeps = {}
            assert.same({ nil, "timeout" }, { never:lock("pc2", 0.05) })
            assert.is_true(fc:slept() <= 0.05 + 1e-9
                           and fc:slept() > 0.049 - 1e-9, fc:slept())
        end)

        it("lock(key, timeout) raises on a bad timeout, at the caller's line",
           function()
            local lock = redis_lock.new(raw)
            local cases = {
                { "1", "timeout must be a number" },
                { 0 / 0, "timeout must be a number" },
                { -0.5, "timeout must be >= 0" },
                { math.huge, "timeout must be <= 1e12" },
                { 2e12, "timeout must be <= 1e12" },
            }
            for _, case in ipairs(cases) do
                local err = raised(function() lock:lock("bad", case[1]) end)
                assert.matches("20%-redis_spec%.lua:%d+: "
                               .. case[2]:gsub("%p", "%%%0") .. "$", err)
            end
            assert.is_nil(raw:get("lock:{bad}"))    -- nothing sent
        end)

        it("returns Redis's WRONGTYPE error at once for a key that is not a"
           .. " lock", function()
            raw:rpush("lock:{list}", "x")
            local mod, fc = faked()
            local lock = mod.new(raw, { timeout = 2 })
            assert.same({ nil, "redis error: WRONGTYPE Operation against a key"
                               .. " holding the wrong kind of value" },
                        { lock:lock("list") })
            assert.same({}, fc.sleeps)      -- at once
            assert.same({ nil, "redis error: WRONGTYPE Operation against a key"
                               .. " holding the wrong kind of value" },
                        { lock:trylock("list") })
            assert.equal("list", raw:type("lock:{list}"))
        end)

        it("returns the error and leaves no lock when the fence key is"
           .. " broken", function()
            raw:rpush("lock:{f}:fence", "x")
            raw:set("lock:{g}:fence", "not a number")
            local lock = redis_lock.new(raw)
            assert.same({ nil, "redis error: WRONGTYPE Operation against a key"
                               .. " holding the wrong kind of value" },
                        { lock:lock("f") })
            assert.same({ nil, "redis error: ERR value is not an integer or"
                               .. " out of range" },
                        { lock:lock("g") })
            assert.is_false(raw:exists("lock:{f}"))
            assert.is_false(raw:exists("lock:{g}"))
            assert.same({ false, "unlocked" }, { lock:owned() })
        end)
    end)


    describe("trylock()", function()
        it("returns 0, nil, fence on a free key", function()
            local lock = redis_lock.new(raw)
            assert.same({ 0, nil, 1 }, { lock:trylock("try") })
            assert.equal(lock.token, raw:get("lock:{try}"))
            assert.equal(1, lock:unlock())
        end)

        it("returns nil, 'timeout' at once on a held key, whatever the"
           .. " timeout", function()
            local holder = redis_lock.new(raw, ELSEWHERE)
            assert.equal(0, holder:lock("try"))
            local mod, fc = faked()
            local other = mod.new(client(), { timeout = 5 })
            assert.same({ nil, "timeout" }, { other:trylock("try") })
            assert.same({}, fc.sleeps)
            assert.equal(1, holder:unlock())
        end)

        it("returns nil, 'locked' / 'nil key' / 'empty key' as lock()",
           function()
            local lock = redis_lock.new(raw)
            assert.same({ nil, "nil key" }, { lock:trylock() })
            assert.same({ nil, "empty key" }, { lock:trylock("") })
            assert.equal(0, lock:trylock("x"))
            assert.same({ nil, "locked" }, { lock:trylock("y") })
            assert.equal(1, lock:unlock())
        end)
    end)


    describe("unlock()", function()
        it("returns 1, then nil, 'unlocked'", function()
            local lock = redis_lock.new(raw)
            assert.same({ nil, "unlocked" }, { lock:unlock() })
            assert.equal(0, lock:lock("u"))
            assert.same({ 1 }, { lock:unlock() })
            assert.same({ nil, "unlocked" }, { lock:unlock() })
            assert.is_false(raw:exists("lock:{u}"))
            assert.equal(0, lock:lock("u"))     -- the object is reusable
            assert.equal(1, lock:unlock())
        end)

        it("returns 1, 'expired' when the lock expired, then 'unlocked'",
           function()
            local lock = redis_lock.new(raw, { exptime = 0.05 })
            assert.equal(0, lock:lock("e"))
            sleep(0.1)
            assert.same({ 1, "expired" }, { lock:unlock() })
            assert.same({ nil, "unlocked" }, { lock:unlock() })
        end)

        it("after expiry and re-lock by B: A gets 1, 'expired' and B still"
           .. " holds", function()
            local a = redis_lock.new(raw, { exptime = 0.1 })
            local b = redis_lock.new(client())
            assert.equal(0, a:lock("steal"))
            sleep(0.2)
            local elapsed, _, fence = b:lock("steal")
            assert.equal(0, elapsed)
            assert.equal(2, fence)
            assert.same({ 1, "expired" }, { a:unlock() })
            assert.equal(b.token, raw:get("lock:{steal}"))
            assert.is_true(b:owned())
            assert.equal(1, b:unlock())
        end)
    end)


    describe("expire()", function()
        it("returns true and resets the expiry to exptime or the argument",
           function()
            local lock = redis_lock.new(raw, { exptime = 5 })
            assert.equal(0, lock:lock("x"))
            local t0 = now()
            assert.is_true(lock:expire(20))
            local pttl = raw:pttl("lock:{x}")
            assert.is_true(pttl >= 20000 - passed_ms(t0) and pttl <= 20000,
                           pttl)
            t0 = now()
            assert.is_true(lock:expire())
            pttl = raw:pttl("lock:{x}")
            assert.is_true(pttl >= 5000 - passed_ms(t0) and pttl <= 5000,
                           pttl)
            assert.is_true(lock:expire(0))      -- 0: never expires
            assert.equal(-1, raw:pttl("lock:{x}"))
            assert.equal(1, lock:unlock())
        end)

        -- a check that a lifetime still runs is sound only when the clock
        -- shows it was made before that lifetime's end: a run late for
        -- one is done again with a fresh key (5 runs at most)
        it("keeps the lock alive past its original expiry", function()
            local function run(key)
                local lock = redis_lock.new(raw, { exptime = 0.3 })
                local t0 = now()
                assert.equal(0, lock:lock(key))
                sleep(0.15)
                local t1 = now()
                local ok = lock:expire(1)
                if now() >= t0 + 0.3 then
                    return false
                end
                assert.is_true(ok)
                sleep(0.3)                      -- past the original 0.3 s
                local owned = lock:owned()
                local other = redis_lock.new(client())
                local r = { other:trylock(key) }
                if now() >= t1 + 1 then
                    return false
                end
                assert.is_true(owned)
                assert.same({ nil, "timeout" }, r)
                assert.equal(1, lock:unlock())
                return true
            end
            local done = false
            for i = 1, 5 do
                done = run("ext" .. i)
                if done then
                    break
                end
            end
            assert.is_true(done, "5 runs, each late for a check")
        end)

        it("returns nil, 'unlocked' without a lock", function()
            local lock = redis_lock.new(raw)
            assert.same({ nil, "unlocked" }, { lock:expire() })
            assert.same({ nil, "unlocked" }, { lock:expire(3) })
        end)

        it("after expiry and re-lock by B: A gets nil, 'expired' and B still"
           .. " holds", function()
            local a = redis_lock.new(raw, { exptime = 0.1 })
            local b = redis_lock.new(client())
            assert.equal(0, a:lock("steal2"))
            sleep(0.2)
            assert.equal(0, b:lock("steal2"))
            assert.same({ nil, "expired" }, { a:expire(10) })
            local pttl = raw:pttl("lock:{steal2}")
            assert.is_true(pttl > 10000, pttl)  -- B's 30 s, untouched
            assert.equal(b.token, raw:get("lock:{steal2}"))
            assert.same({ nil, "unlocked" }, { a:unlock() })
            assert.equal(1, b:unlock())
        end)

        it("raises on a bad argument", function()
            local lock = redis_lock.new(raw)
            assert.equal(0, lock:lock("bad"))
            local err = raised(function() lock:expire(-1) end)
            assert.matches('20%-redis_spec%.lua:%d+: bad "timeout" argument$',
                           err)
            assert.has_error(function() lock:expire("1") end,
                             'bad "timeout" argument')
            for _, bad in ipairs({ 0 / 0, math.huge, 1e12 + 1e6 }) do
                assert.has_error(function() lock:expire(bad) end,
                                 'bad "timeout" argument')
            end
            assert.is_true(lock:expire(1e12))
            assert.equal(1, lock:unlock())
        end)
    end)


    describe("owned()", function()
        it("returns true while held, false, 'unlocked' / 'expired' otherwise",
           function()
            local lock = redis_lock.new(raw, { exptime = 0.1 })
            assert.same({ false, "unlocked" }, { lock:owned() })
            assert.equal(0, lock:lock("o"))
            assert.same({ true }, { lock:owned() })
            sleep(0.2)
            assert.same({ false, "expired" }, { lock:owned() })
            -- owned() only looks: unlock() still reports the expiry
            assert.same({ 1, "expired" }, { lock:unlock() })
            assert.same({ false, "unlocked" }, { lock:owned() })
        end)
    end)


    describe("fencing tokens", function()
        it("start at 1 per key and strictly increase with every acquisition",
           function()
            local a = redis_lock.new(raw)
            local b = redis_lock.new(client())
            local last = 0
            for i = 1, 5 do
                local lock = i % 2 == 0 and b or a
                local _, _, fence = lock:lock("fenced")
                assert.equal(last + 1, fence)
                last = fence
                assert.equal(fence, lock.fence)
                assert.equal(1, lock:unlock())
            end
            local _, _, fence = a:trylock("other key")
            assert.equal(1, fence)
            assert.equal(1, a:unlock())
        end)

        it("live fence_ttl past the lock's exptime (and a host's turn), "
           .. "refreshed by every acquisition and by expire()", function()
            -- without host single flight: the lock's lifetime + fence_ttl;
            -- with it, a host's turn (TURN_SPAN) more
            for _, span in ipairs({ 0, SPAN }) do
                -- (exptime 10: the counter lives 12 s; each pttl is
                -- checked against what can have passed since the call)
                local opts = { exptime = 10, fence_ttl = 2 }
                if span == 0 then
                    opts.dict = false
                end
                local lock = redis_lock.new(raw, opts)
                raw:del("lock:{ft}:fence")
                local t0 = now()
                assert.equal(0, lock:lock("ft"))
                local pttl = raw:pttl("lock:{ft}:fence") - span
                assert.is_true(pttl >= 12000 - passed_ms(t0)
                               and pttl <= 12000, pttl)
                assert.equal(1, lock:unlock())
                sleep(0.3)              -- (at least: it runs down meanwhile)
                pttl = raw:pttl("lock:{ft}:fence") - span
                assert.is_true(pttl > -span and pttl <= 12000 - 300 + 1, pttl)
                -- the next acquisition refreshes it, and the count goes on
                t0 = now()
                local _, _, fence = lock:lock("ft")
                assert.equal(2, fence)
                pttl = raw:pttl("lock:{ft}:fence") - span
                assert.is_true(pttl >= 12000 - passed_ms(t0)
                               and pttl <= 12000, pttl)
                -- expire(t): the counter outlives the new lifetime as well
                t0 = now()
                assert.is_true(lock:expire(20))
                pttl = raw:pttl("lock:{ft}:fence") - span
                assert.is_true(pttl >= 22000 - passed_ms(t0)
                               and pttl <= 22000, pttl)
                assert.equal(1, lock:unlock())
            end
        end)

        it("default to a lifetime of exptime + 7 days", function()
            assert.equal(7 * 24 * 3600, redis_lock.FENCE_TTL)
            local lock = redis_lock.new(raw, { exptime = 10 })
            assert.equal(0, lock:lock("fd"))
            local ttl = raw:ttl("lock:{fd}:fence")
            assert.is_true(ttl > 7 * 24 * 3600
                           and ttl <= 7 * 24 * 3600 + 11 + SPAN / 1000, ttl)
            assert.equal(1, lock:unlock())
        end)

        it("do not expire with fence_ttl 0, or for a lock that never "
           .. "expires", function()
            local lock = redis_lock.new(raw, { fence_ttl = 0 })
            assert.equal(0, lock:lock("f0"))
            assert.equal(-1, raw:pttl("lock:{f0}:fence"))
            assert.equal(1, lock:unlock())
            lock = redis_lock.new(raw, { exptime = 0 })
            assert.equal(0, lock:lock("fe0"))
            assert.equal(-1, raw:pttl("lock:{fe0}:fence"))
            -- extended to a finite lifetime: the counter expires again
            assert.is_true(lock:expire(5))
            local pttl = raw:pttl("lock:{fe0}:fence")
            assert.is_true(pttl > 5000
                           and pttl <= (5 + 7 * 24 * 3600) * 1000 + SPAN)
            assert.equal(1, lock:unlock())
        end)

        it("start again at 1 only after fence_ttl with no lock", function()
            local lock = redis_lock.new(raw, { exptime = 0.1,
                                               fence_ttl = 0.2 })
            -- the second lock must come within the counter's 0.3 s (and a
            -- host's turn): a run late for it is done again with a fresh
            -- key (5 at most)
            local key, second
            for i = 1, 5 do
                key = "fgone" .. i
                local t0 = now()
                assert.same({ 0, nil, 1 }, { lock:lock(key) })
                assert.equal(1, lock:unlock())
                second = { lock:lock(key) }
                assert.equal(1, lock:unlock())
                if now() < t0 + 0.3 + SPAN / 1000 then
                    break
                end
                second = nil
            end
            assert.same({ 0, nil, 2 }, second)
            assert.is_true(eventually(function()
                return raw:exists("lock:{" .. key .. "}:fence") == false
                       or raw:exists("lock:{" .. key .. "}:fence") == 0
            end, 10 + SPAN / 1000))
            assert.same({ 0, nil, 1 }, { lock:lock(key) })
            assert.equal(1, lock:unlock())
        end)

        it("raises on a bad opts.fence_ttl at the caller's line", function()
            for _, case in ipairs({ { "1", "must be a number" },
                                    { 0 / 0, "must be a number" },
                                    { -1, "must be >= 0" },
                                    { math.huge, "must be <= 1e12" } }) do
                local err = raised(function()
                    redis_lock.new(raw, { fence_ttl = case[1] })
                end)
                assert.matches("20%-redis_spec%.lua:%d+: opts%.fence_ttl "
                               .. case[2]:gsub("%p", "%%%0") .. "$", err)
            end
        end)

        it("survive the lock key's expiry", function()
            local lock = redis_lock.new(raw, { exptime = 0.05 })
            local _, _, f1 = lock:lock("fe")
            sleep(0.1)
            assert.same({ 1, "expired" }, { lock:unlock() })
            local _, _, f2 = lock:lock("fe")
            assert.equal(f1 + 1, f2)
            assert.equal(1, lock:unlock())
        end)
    end)


    describe("scripts", function()
        it("run by EVALSHA once Redis knows them (the SHA1s are right)",
           function()
            local lock = redis_lock.new(raw)
            assert.equal(0, lock:lock("sha"))           -- load them all
            assert.is_true(lock:expire())
            assert.is_true(lock:owned())
            assert.equal(1, lock:unlock())
            raw:config("resetstat")
            assert.equal(0, lock:lock("sha"))
            assert.is_true(lock:expire())
            assert.is_true(lock:owned())
            assert.equal(1, lock:unlock())
            local stats = commandstats()
            assert.is_nil(stats.cmdstat_eval)
            assert.equal(4, stats.cmdstat_evalsha)
        end)

        it("fall back to EVAL on NOSCRIPT", function()
            raw:script("flush")
            raw:config("resetstat")
            local lock = redis_lock.new(raw)
            assert.same({ 0, nil, 1 }, { lock:lock("flushed") })
            assert.equal(1, lock:unlock())
            assert.equal(0, lock:lock("flushed"))
            assert.equal(1, lock:unlock())
            local stats = commandstats()
            assert.equal(2, stats.cmdstat_eval)         -- once per script
            assert.equal(4, stats.cmdstat_evalsha)
        end)
    end)


    describe("across processes", function()
        it("4 luajit processes x 150 lock/GET/SET+1/unlock: exact counter,"
           .. " fences strictly increasing", function()
            local NPROC, N = 4, 150
            local cmd = string.format(
                "LUA_PATH='%s' exec luajit spec/helpers/redis_child.lua"
                .. " %d mp %d 2>&1", checkout.LUA_PATH, server.port, N)
            local children = {}
            for i = 1, NPROC do
                children[i] = assert(io.popen(cmd))
            end
            raw:set("go:mp", "1")

            local all = {}
            for i = 1, NPROC do
                local out = children[i]:read("*a")
                children[i]:close()
                assert.matches("\nDONE\n$", out)
                assert.is_nil(out:find("STALE", 1, true), out)
                local last = 0
                for f in out:match("FENCES ([%d ]+)\n"):gmatch("%d+") do
                    f = tonumber(f)
                    assert.is_true(f > last)    -- increasing per process
                    last = f
                    all[#all + 1] = f
                end
            end
            assert.equal(tostring(NPROC * N), raw:get("counter:mp"))
            -- one fence per acquisition, none shared: exactly 1 .. NPROC * N
            table.sort(all)
            assert.equal(NPROC * N, #all)
            for i = 1, #all do
                assert.equal(i, all[i])
            end
        end)
    end)


    -- the object copied into a child (fork(), a raw clone, _Fork()) holds
    -- nothing there; the child's checks fail it with a message
    for _, kind in ipairs(harness_proc.fork_kinds()) do
        describe("a lock object copied into a child made by " .. kind.name,
                 function()
            it("is not the holder there: unlock() and expire() answer "
               .. "'unlocked', owned() false, without touching Redis, lock() "
               .. "waits like any other caller's; the parent's lock stays",
               function()
                local lock = redis_lock.new(raw, { exptime = 30 })
                assert.equal(0, lock:lock("fk"))
                local tok = raw:get("lock:{fk}")
                local pid = harness_proc.spawn_with({ fork = kind.fork }, function()
                    local function same(want, got, what)
                        assert(want[1] == got[1] and want[2] == got[2],
                               what .. ": " .. tostring(got[1]) .. ", "
                               .. tostring(got[2]))
                    end
                    same({ nil, "unlocked" }, { lock:unlock() }, "unlock")
                    same({ nil, "unlocked" }, { lock:expire(100) }, "expire")
                    same({ false, "unlocked" }, { lock:owned() }, "owned")
                    -- the copy may lock anew (on the inherited connection,
                    -- which the parent leaves alone meanwhile): the key is
                    -- the parent's, another one is free
                    same({ nil, "timeout" }, { lock:lock("fk", 0) }, "lock")
                    same({ 0, nil }, { lock:trylock("fk2") }, "trylock")
                    same({ 1, nil }, { lock:unlock() }, "unlock of its own")
                end)
                spec_children.expect_clean_exits({ pid }, 30)
                assert.equal(tok, raw:get("lock:{fk}"))
                -- not extended to 100 s by the child
                local pttl = tonumber(raw:pttl("lock:{fk}"))
                assert.is_true(pttl > 0 and pttl <= 30000, tostring(pttl))
                assert.is_nil(raw:get("lock:{fk2}"))
                assert.is_true(lock:owned())
                assert.equal(1, lock:unlock())
            end)
        end)
    end


    describe("with a lua-resty-redis style client inside nginx", function()
        -- the module as loaded inside nginx: ngx.sleep and ngx.null exist
        local NULL = newproxy(false)
        local sleeps
        local saved_ngx, saved_mod
        -- the modules that ask, when they load, whether they are in nginx
        local NGINX_SIDE = { "resty.shmlock.redis", "resty.shmlock.lock.wait",
                             "resty.shmlock.redis.link" }
        local resty_lock

        setup(function()
            saved_ngx = rawget(_G, "ngx")
            saved_mod = {}
            for _, name in ipairs(NGINX_SIDE) do
                saved_mod[name] = package.loaded[name]
                package.loaded[name] = nil
            end
            _G.ngx = {
                get_phase = function() return "content" end,
                null = NULL,
                sleep = function(s)
                    sleeps[#sleeps + 1] = s
                    sleep(s)
                end,
            }
            resty_lock = require "resty.shmlock.redis"
            _G.ngx = saved_ngx
        end)

        teardown(function()
            for _, name in ipairs(NGINX_SIDE) do
                package.loaded[name] = saved_mod[name]
            end
        end)

        before_each(function()
            sleeps = {}
        end)

        it("locks, unlocks, extends and fences the same way", function()
            local lock = resty_lock.new(resty_mock.new(client(), NULL))
            assert.same({ 0, nil, 1 }, { lock:lock("r") })
            assert.is_true(lock:owned())
            assert.is_true(lock:expire(3))
            assert.equal(1, lock:unlock())
            assert.same({ nil, "unlocked" }, { lock:unlock() })
            assert.same({ false, "unlocked" }, { lock:owned() })
            assert.same({ 0, nil, 2 }, { lock:trylock("r") })
            assert.equal(1, lock:unlock())
        end)

        it("reads the null reply of a held key as busy and waits with"
           .. " ngx.sleep", function()
            local holder = resty_lock.new(resty_mock.new(client(), NULL),
                                          { exptime = 0.1, dict = false })
            local t0 = now()
            assert.equal(0, holder:lock("rw"))
            local waiter = resty_lock.new(resty_mock.new(client(), NULL),
                                          { timeout = 10 })
            local started = now()
            local elapsed, err, fence = waiter:lock("rw")
            assert.is_nil(err)
            assert.equal(2, fence)
            -- (when it began to wait 50 ms before the 0.1 s ran out at the
            -- earliest: a loaded machine may begin later)
            if started < t0 + 0.05 then
                assert.is_true(elapsed > 0.05)
                assert.is_true(#sleeps > 1)
            end
            for _, s in ipairs(sleeps) do
                assert.is_true(s > 0 and s <= 0.5)
            end
            assert.same({ 1, "expired" }, { holder:unlock() })
            assert.equal(1, waiter:unlock())
        end)

        it("never calls ngx.sleep below 1 ms, the last sleep before the"
           .. " deadline included", function()
            local holder = redis_lock.new(raw, ELSEWHERE)
            assert.equal(0, holder:lock("floor"))
            local waiter = resty_lock.new(resty_mock.new(client(), NULL))
            for i = 0, 40 do
                local timeout = 0.0005 + i * 0.00037
                local first = #sleeps + 1
                assert.same({ nil, "timeout" },
                            { waiter:lock("floor", timeout) })
                -- never asleep past the deadline (the clock runs on
                -- between the sleeps too: they add up to less)
                local slept = 0
                for j = first, #sleeps do
                    slept = slept + sleeps[j]
                end
                assert.is_true(slept <= timeout + 1e-9,
                               slept .. " s asleep, timeout " .. timeout)
            end
            assert.is_true(#sleeps > 40, #sleeps .. " sleeps")
            for _, s in ipairs(sleeps) do
                assert.is_true(s >= 0.001, "ngx.sleep(" .. s .. ")")
            end
            assert.equal(1, holder:unlock())
        end)

        it("reports error replies and NOSCRIPT the same way", function()
            raw:script("flush")
            raw:rpush("lock:{rl}", "x")
            local lock = resty_lock.new(resty_mock.new(client(), NULL))
            assert.same({ nil, "redis error: WRONGTYPE Operation against a key"
                               .. " holding the wrong kind of value" },
                        { lock:lock("rl") })
            assert.same({ 0, nil, 1 }, { lock:lock("rl2") })
            assert.equal(1, lock:unlock())
        end)

        it("reports connection errors as 'redis connection error: ...'",
           function()
            local c = client()
            local lock = resty_lock.new(resty_mock.new(c, NULL))
            assert.equal(0, lock:lock("rc"))
            c:quit()
            assert.same({ nil, "redis connection error: closed" },
                        { lock:unlock() })
            assert.same({ nil, "redis connection error: closed" },
                        { lock:expire() })
            assert.same({ nil, "redis connection error: closed" },
                        { lock:owned() })
            local other = resty_lock.new(resty_mock.new(c, NULL))
            assert.same({ nil, "redis connection error: closed" },
                        { other:lock("rc2") })
        end)
    end)


    describe("when Redis fails", function()
        it("a hung server: lock() fails within the client's socket timeout"
           .. " and leaves no lock once Redis resumes", function()
            local c = client(0.3)
            local lock = redis_lock.new(c, { timeout = 30 })
            assert.same({ 0, nil, 1 }, { lock:lock("hung") })  -- scripts known
            assert.equal(1, lock:unlock())

            server:pause()
            local t0 = now()
            local elapsed, err = lock:lock("hung")
            local took = now() - t0
            server:resume()

            assert.is_nil(elapsed)
            assert.equal("redis connection error: timeout", err)
            -- the attempt's and the clean-up's socket timeouts (0.3 s
            -- each), not the lock's 30 s (10 s: a ceiling, not a margin)
            assert.is_true(took >= 0.25 and took < 10, took)
            assert.same({ false, "unlocked" }, { lock:owned() })
            -- Redis then ran the acquire it had received (fence 2) and our
            -- compare-and-delete right after it: no lock left behind
            assert.is_true(eventually(function()
                return raw:get("lock:{hung}:fence") == "2"
            end))
            assert.is_false(raw:exists("lock:{hung}"))
        end)

        it("a stopped server: clear errors at once; a new client works once"
           .. " it is back", function()
            local c = client(1)
            local holder = redis_lock.new(c, { timeout = 30, dict = false })
            local waiter = redis_lock.new(c, { timeout = 30 })
            assert.same({ 0, nil, 1 }, { holder:lock("down") })

            server:stop()
            local t0 = now()
            local elapsed, err = waiter:lock("down")
            assert.is_nil(elapsed)
            assert.matches("^redis connection error: %S", err)
            elapsed, err = waiter:trylock("down")
            assert.is_nil(elapsed)
            assert.matches("^redis connection error: %S", err)
            local ok
            ok, err = holder:unlock()
            assert.is_nil(ok)
            assert.matches("^redis connection error: %S", err)
            ok, err = holder:expire()
            assert.is_nil(ok)
            assert.matches("^redis connection error: %S", err)
            ok, err = holder:owned()
            assert.is_nil(ok)
            assert.matches("^redis connection error: %S", err)
            -- at once: not after the waiters' 30 s (10 s: a ceiling)
            assert.is_true(now() - t0 < 10)
            -- a failed unlock keeps the state: we cannot know it released
            assert.same({ nil, "locked" }, { holder:lock("down") })

            -- the caller owns reconnection: connect anew, make new locks
            assert.has_error(function() server_helper.connect(server.port) end)
            server:restart()
            raw = client()
            local lock = redis_lock.new(client(1))
            -- the data went with the old server (no persistence), fences too
            assert.same({ 0, nil, 1 }, { lock:lock("down") })
            assert.is_true(lock:owned())
            assert.equal(1, lock:unlock())
        end)
    end)
end)


-- The server is not a child of the spec (timeout(1) runs it, and neither
-- is ours): once it has exited, its pid is free, and a signal by pid would
-- reach whoever took the pid next.  A soak run beside this spec once lost
-- a worker to "a SIGKILL nobody sent" that way.
describe("the specs' redis-server helper", function()
    local proc = require "harness.proc"
    local children = require "helpers.children"
    local ffi = require "ffi"

    it("never signals a process that took the pid of its dead server",
       function()
        if checkout.sh("id -u") ~= "0\n" then
            pending("needs root to write /proc/sys/kernel/ns_last_pid")
            return
        end
        local s = server_helper.start()
        local pid = s.pid
        ffi.C.kill(pid, 9)
        assert.is_true(eventually(function()
            return ffi.C.kill(pid, 0) ~= 0
        end, 5), "the server outlived SIGKILL")
        local taker = children.sleeper_with_pid(pid)
        if not taker then
            s:destroy()
            pending("could not have pid " .. pid .. " again")
            return
        end
        s:destroy()
        assert.is_nil(proc.try_wait(taker), "the helper signalled pid "
                      .. pid .. ", which another process had taken")
        proc.kill(taker)
        proc.wait(taker, 5)
    end)
end)
