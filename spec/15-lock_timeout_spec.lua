-- lock:lock(key, timeout): the per-call timeout of resty.shmlock, outside
-- nginx, against a holder in another process.  (Inside nginx, zones and
-- ngx.shared dicts: t/10-lock-timeout.t; the Redis lock: spec/20.)

local resty_lock = require "resty.shmlock"
local env = require "helpers.lock_env"
local fixture = require "helpers.fixture"
local children = require "helpers.children"
local forks = require "harness.proc"
local fake_clock = require "helpers.fake_clock"

-- the error f() raised; it must point at this file (the caller's line)
local function raised(f)
    local ok, err = pcall(f)
    assert.is_false(ok, "no error raised")
    assert.is_string(err)
    assert.truthy(err:find("15%-lock_timeout_spec%.lua:%d+: "),
                  "error does not point at the caller: " .. err)
    return (err:gsub("^.-15%-lock_timeout_spec%.lua:%d+: ", ""))
end

describe("lock:lock(key, timeout)", function()
    local fx = fixture.new { dir = "block", env = true }
    local dict, n = nil, 0

    before_each(function()
        n = n + 1
        dict = fx:zone("tlocks" .. n)
    end)

    -- a child process holding "lock" until we have set "release" and
    -- wait for the key (60 s at most); returns it once it holds
    local function holder()
        local proc = env.worker("hold", { zone = dict.name, dir = fx.dir,
                                          exptime = 30, secs = 60,
                                          release = "release" })
        assert(dict:set("go", true))
        assert.is_number(env.wait_for(function() return dict:get("pid") end,
                                      10), "the holder never took the key")
        return proc
    end

    -- a lock on a clock that only its sleeps move (helpers.fake_clock):
    -- how long it waits is then exact whatever the load
    local function faked(opts)
        local fc = fake_clock.new()
        return assert(fc:require("resty.shmlock"):new(dict, opts)), fc
    end

    it("overrides the object's timeout for one call, against a holder in "
       .. "another process", function()
        local proc = holder()
        local lock = assert(resty_lock:new(dict, { timeout = 5 }))

        -- 0: no wait at all
        local flock, fc = faked { timeout = 5 }
        assert.same({ nil, "timeout" }, { flock:lock("lock", 0) })
        assert.same({}, fc.sleeps)

        -- 0.05: times out after 0.05 s of steps, not the object's 5
        local t0 = env.now()
        assert.same({ nil, "timeout" }, { lock:lock("lock", 0.05) })
        local dt = env.now() - t0
        assert.is_true(dt >= 0.05, "timeout 0.05 waited " .. dt)
        assert.same({ nil, "timeout" }, { flock:lock("lock", 0.05) })
        assert.same({ 0.001, 0.002, 0.004, 0.008, 0.016, 0.019 }, fc.sleeps)

        -- a longer one gets the key when the holder lets go
        assert(dict:set("release", true))
        local elapsed, err = lock:lock("lock", 10)
        assert.is_nil(err)
        assert.is_true(elapsed > 0 and elapsed < 10, "elapsed " .. elapsed)
        local r = assert(env.parse(proc:read("*l")))
        proc:close()
        assert.is_number(r.released_us)
        assert.equal(1, lock:unlock())

        -- the object's own timeout is untouched
        assert.equal(5, lock.timeout)
    end)

    it("nil means the object's timeout", function()
        local other = assert(resty_lock:new(dict))
        assert.equal(0, other:lock("k"))
        local lock = assert(resty_lock:new(dict, { timeout = 0.05 }))
        local t0 = env.now()
        assert.same({ nil, "timeout" }, { lock:lock("k", nil) })
        local dt = env.now() - t0
        assert.is_true(dt >= 0.05, "waited " .. dt)
        local flock, fc = faked { timeout = 0.05 }
        assert.same({ nil, "timeout" }, { flock:lock("k", nil) })
        assert.same({ 0.001, 0.002, 0.004, 0.008, 0.016, 0.019 }, fc.sleeps)
        assert.equal(1, other:unlock())
        assert.equal(0, lock:lock("k", nil))
    end)

    it("is clamped to the object's exptime, as opts.timeout", function()
        local other = assert(resty_lock:new(dict))
        assert.equal(0, other:lock("k"))
        local lock = assert(resty_lock:new(dict, { exptime = 0.05 }))
        local t0 = env.now()
        assert.same({ nil, "timeout" }, { lock:lock("k", 60) })
        local dt = env.now() - t0
        assert.is_true(dt >= 0.05, "waited " .. dt)
        local flock, fc = faked { exptime = 0.05 }
        assert.same({ nil, "timeout" }, { flock:lock("k", 60) })
        assert.same({ 0.001, 0.002, 0.004, 0.008, 0.016, 0.019 }, fc.sleeps)

        -- exptime 0 (never expires) does not cut the timeout: the waiter
        -- sleeps its steps up to it (resty.lock would give up at once)
        local never, fc0 = faked { exptime = 0 }
        assert.same({ nil, "timeout" }, { never:lock("k", 0.05) })
        assert.same({ 0.001, 0.002, 0.004, 0.008, 0.016, 0.019 }, fc0.sleeps)
        assert.equal(1, other:unlock())
    end)

    -- a child holding "k" with exptime 0 until it sees a process asleep
    -- on the key, then releasing it (exit 0; 3: nobody waited)
    local function never_expiring_holder()
        local held = forks.pipe()
        local pid = forks.spawn(function()
            held:close_read()
            local mine = assert(resty_lock:new(dict.name, { exptime = 0 }))
            assert(mine:lock("k") == 0)
            held:notify()
            local deadline = forks.now() + 20
            while forks.now() < deadline do
                local info = resty_lock.inspect(dict, "k")
                if info and info.waiters > 0 then
                    return mine:unlock() == 1 and 0 or 5
                end
                forks.sleep(0.001)
            end
            return 3
        end)
        held:close_write()
        assert.is_true(held:await(10), "the child never took the key")
        held:close()
        return pid
    end

    -- resty.lock's clamping made the timeout 0 with exptime 0: "timeout"
    -- at once, where the caller asked to wait
    it("is not clamped by exptime 0 (never expires): the waiter gets a key "
       .. "released while it waits", function()
        local never = assert(resty_lock:new(dict, { exptime = 0,
                                                    timeout = 60 }))
        assert.equal(60, never.timeout)
        local pid = never_expiring_holder()
        local elapsed, err = never:lock("k")
        assert.is_nil(err)
        assert.is_true(elapsed > 0, "elapsed " .. tostring(elapsed))
        children.expect_clean_exits({ pid }, 30)
        assert.equal(1, never:unlock())

        -- the same with the per-call timeout
        never = assert(resty_lock:new(dict, { exptime = 0 }))
        pid = never_expiring_holder()
        elapsed, err = never:lock("k", 60)
        assert.is_nil(err)
        assert.is_true(elapsed > 0, "elapsed " .. tostring(elapsed))
        children.expect_clean_exits({ pid }, 30)
        assert.equal(1, never:unlock())
    end)

    it("takes a free key at once whatever the timeout", function()
        local lock = assert(resty_lock:new(dict))
        assert.same({ 0 }, { lock:lock("free", 0) })
        assert.equal(1, lock:unlock())
        assert.same({ 0 }, { lock:lock("free", 1e12) })
        assert.equal(1, lock:unlock())
    end)

    it("raises on a bad timeout, at the caller's line", function()
        local lock = assert(resty_lock:new(dict))
        assert.equal("timeout must be a number",
                     raised(function() lock:lock("k", "1") end))
        assert.equal("timeout must be a number",
                     raised(function() lock:lock("k", 0 / 0) end))
        assert.equal("timeout must be a number",
                     raised(function() lock:lock("k", false) end))
        assert.equal("timeout must be >= 0",
                     raised(function() lock:lock("k", -1) end))
        assert.equal("timeout must be <= 1e12",
                     raised(function() lock:lock("k", math.huge) end))
        assert.equal("timeout must be <= 1e12",
                     raised(function() lock:lock("k", 1e12 + 1) end))
        -- nothing was taken
        assert.is_nil(dict:get("k"))
        assert.equal(0, lock:lock("k"))
    end)
end)
