-- resty.shmlock.semaphore: the returns of each method, and between real
-- processes: never more holders than `permits` (a counter in the zone that
-- every holder raises while inside), a SIGKILLed holder's permit back at
-- once, a collected object's permit back, a forked child holding nothing,
-- a waiter woken by the release.  What is asserted cannot be changed by
-- lateness: counts, states, returns.

local semaphore = require "resty.shmlock.semaphore"
local shdict = require "resty.shmlock.shdict"
local proc = require "harness.proc"
local fixture = require "helpers.fixture"
local children = require "helpers.children"

describe("resty.shmlock.semaphore", function()
    local fx = fixture.new { dir = "test", children = "assert" }
    local dict

    before_each(function()
        dict = fx:zone("sem", { size = "256k" })
    end)

    it("hands out `permits` permits of a key, then answers 'timeout'",
       function()
        local a = assert(semaphore:new(dict, { permits = 2 }))
        local b = assert(semaphore:new(dict, { permits = 2 }))
        local c = assert(semaphore:new(dict, { permits = 2 }))
        assert.same({ 0 }, { a:acquire("k") })
        assert.same({ 0 }, { b:acquire("k") })
        assert.same({ nil, "timeout" }, { c:acquire("k", 0) })
        assert.equal(2, a:count("k"))
        assert.same({ nil, "locked" }, { a:acquire("k") })
        assert.same({ 1 }, { a:release() })
        assert.same({ nil, "unlocked" }, { a:release() })
        assert.same({ 0 }, { c:acquire("k", 0) })
        assert.equal(0, a:count("other"))
        assert.same({ true }, { c:expire() })
        assert.same({ true }, { c:expire(10) })
        assert.same({ nil, "unlocked" }, { a:expire() })
        assert.same({ 1 }, { b:release() })
        assert.same({ 1 }, { c:release() })
        assert.equal(0, a:count("k"))
    end)

    it("takes a number key as the string every Lua gives it", function()
        local a = assert(semaphore:new(dict, { permits = 1 }))
        local b = assert(semaphore:new(dict, { permits = 1 }))
        assert.same({ 0 }, { a:acquire(1e15) })
        assert.same({ nil, "timeout" }, { b:acquire("1000000000000000", 0) })
        assert.equal(1, b:count("1000000000000000"))
        assert.equal(1, b:count(1e15))
        assert.equal(1, #assert(semaphore.inspect(dict, "1000000000000000"))
                             .holders)
        assert.same({ 1 }, { a:release() })
    end)

    it("counts every holder against the caller's own limit", function()
        local big = assert(semaphore:new(dict, { permits = 3 }))
        local big2 = assert(semaphore:new(dict, { permits = 3 }))
        local small = assert(semaphore:new(dict, { permits = 2 }))
        assert.same({ 0 }, { big:acquire("k") })
        assert.same({ 0 }, { big2:acquire("k") })
        assert.same({ nil, "timeout" }, { small:acquire("k", 0) })
        assert.same({ 1 }, { big2:release() })
        assert.same({ 0 }, { small:acquire("k", 0) })
        big:release()
        small:release()
    end)

    it("gives a lease: an expired permit counts no more, its release "
       .. "answers 1, 'expired'", function()
        local a = assert(semaphore:new(dict, { exptime = 0.001 }))
        local b = assert(semaphore:new(dict))
        assert.same({ 0 }, { a:acquire("k") })
        proc.sleep(0.01)          -- at least: the lease is over by then
        assert.same({ 0 }, { b:acquire("k", 0) })
        assert.same({ 1, "expired" }, { a:release() })
        assert.same({ nil, "unlocked" }, { a:release() })
        assert.same({ 1 }, { b:release() })
    end)

    it("after expire() answers nil, 'expired' the object holds nothing, "
       .. "as the lock: owned() false, acquire() takes a permit again",
       function()
        -- (a lease of 30 s cut to 1 ms: a's next permit keeps 30 s)
        local a = assert(semaphore:new(dict))
        local b = assert(semaphore:new(dict))
        assert.same({ 0 }, { a:acquire("k") })
        assert.same({ true }, { a:expire(0.001) })
        proc.sleep(0.01)          -- at least: the lease is over by then
        assert.same({ 0 }, { b:acquire("k", 0) })
        assert.same({ nil, "expired" }, { a:expire() })
        assert.is_false(a:owned())
        assert.same({ nil, "unlocked" }, { a:expire() })
        assert.same({ nil, "unlocked" }, { a:release() })
        -- (b holds the one permit: a's acquire now waits for it, not
        -- "locked")
        assert.same({ nil, "timeout" }, { a:acquire("k", 0) })
        assert.same({ 1 }, { b:release() })
        assert.same({ 0 }, { a:acquire("k", 0) })
        assert.is_true(a:owned())
        assert.same({ 1 }, { a:release() })
        assert.equal(0, b:count("k"))
    end)

    it("refuses bad input", function()
        assert.has_error(function() semaphore:new(dict, { permits = 0 }) end,
                         "opts.permits must be an integer from 1 to 16777215")
        assert.has_error(function() semaphore:new(dict, { permits = 1.5 }) end,
                         "opts.permits must be an integer from 1 to 16777215")
        assert.has_error(function() semaphore:new(dict, { exptime = -1 }) end,
                         "opts.exptime must be >= 0")
        -- the lock's words: what was tried (before: a bare "dictionary
        -- not found")
        assert.same({ nil, 'dictionary not found: no zone '
                           .. '"no_such_zone_here" in ' .. shdict.directory() },
                    { semaphore:new("no_such_zone_here") })
        assert.same({ nil, "dictionary not found: a number is no dict" },
                    { semaphore:new(42) })
        assert.same({ nil, 'dictionary not found: no zone '
                           .. '"no_such_zone_here" in ' .. shdict.directory() },
                    { semaphore.inspect("no_such_zone_here", "k") })
        local s = assert(semaphore.new(dict))
        assert.same({ nil, "nil key" }, { s:acquire(nil) })
        assert.same({ nil, "empty key" }, { s:acquire("") })
        assert.same({ nil, "nil key" }, { s:count(nil) })
        assert.has_error(function() s:acquire("k", -1) end,
                         "timeout must be >= 0")
    end)

    it("releases the permit of a collected object", function()
        local a = assert(semaphore:new(dict))
        assert.same({ 0 }, { a:acquire("k") })
        assert.equal(1, a:count("k"))
        a = nil                                         -- luacheck: ignore
        collectgarbage()
        collectgarbage()
        local b = assert(semaphore:new(dict))
        assert.equal(0, b:count("k"))
        assert.same({ 0 }, { b:acquire("k", 0) })
        b:release()
    end)

    it("gives a SIGKILLed holder's permit back at once", function()
        local held = proc.pipe()
        local pid = proc.spawn(function()
            held:close_read()
            local s = assert(semaphore:new(dict, { permits = 1 }))
            assert(s:acquire("k") == 0)
            held:notify()
            proc.sleep(30)
        end)
        held:close_write()
        assert.is_true(held:await(20))
        local s = assert(semaphore:new(dict, { permits = 1 }))
        proc.kill(pid, 9)
        local r = proc.wait(pid, 20)
        assert.equal("signal", r.how)
        assert.same({ 0 }, { s:acquire("k", 0) })
        assert.equal(1, s:count("k"))
        assert.same({ 1 }, { s:release() })
    end)

    it("holds nothing in a forked child: owned() false, release() "
       .. "'unlocked', the parent's permit kept", function()
        local s = assert(semaphore:new(dict, { permits = 1 }))
        assert.same({ 0 }, { s:acquire("k") })
        children.expect_clean_exits({ proc.spawn(function()
            assert(s:owned() == false, "owned() in the child")
            local ok, err = s:release()
            assert(ok == nil and err == "unlocked", tostring(err))
            ok, err = s:expire()
            assert(ok == nil and err == "unlocked", tostring(err))
            s = nil
            collectgarbage()
            collectgarbage()
        end) })
        assert.is_true(s:owned())
        assert.equal(1, s:count("k"))
        assert.same({ 1 }, { s:release() })
    end)

    it("wakes a waiter when the holder releases", function()
        local held, go = proc.pipe(), proc.pipe()
        local pid = proc.spawn(function()
            held:close_read()
            go:close_write()
            local s = assert(semaphore:new(dict, { permits = 1 }))
            assert(s:acquire("k") == 0)
            held:notify()
            assert(go:await(30))
            assert(s:release() == 1)
        end)
        held:close_write()
        go:close_read()
        assert.is_true(held:await(20))
        local s = assert(semaphore:new(dict, { permits = 1, timeout = 60,
                                               step = 60, max_step = 60 }))
        go:notify()
        -- the step is 60 s: only the release's wake-up ends this wait
        -- before the deadline
        local elapsed, err = s:acquire("k")
        assert.is_nil(err)
        assert.is_true(elapsed < 60)
        children.expect_clean_exits({ pid })
        s:release()
    end)

    it("never lets more than `permits` in: 6 processes x 300 rounds, "
       .. "limits 2 and 3 on one key (at most 3 inside), 2 on another",
       function()
        local start = proc.pipe()
        local pids = {}
        for i = 1, 6 do
            pids[i] = proc.spawn(function()
                start:close_write()
                local s = assert(semaphore:new(dict, { permits = 2 + i % 2,
                                                       timeout = 60 }))
                assert(start:wait_release(30))
                local two = assert(semaphore:new(dict, { permits = 2,
                                                         timeout = 60 }))
                for _ = 1, 300 do
                    -- limits 2 and 3 on one key: a caller's own limit
                    -- binds only when it acquires (a limit-3 caller may
                    -- join two holders of which one has limit 2), so
                    -- the bound of the key is the largest limit
                    assert(s:acquire("k"))
                    local n = assert(dict:incr("inside", 1, 0))
                    if n > 3 then
                        dict:incr("over", 1, 0)
                    end
                    dict:incr("done", 1, 0)
                    assert(dict:incr("inside", -1))
                    assert(s:release() == 1)
                    -- every caller's limit 2
                    assert(two:acquire("k2"))
                    n = assert(dict:incr("inside2", 1, 0))
                    if n > 2 then
                        dict:incr("over", 1, 0)
                    end
                    assert(dict:incr("inside2", -1))
                    assert(two:release() == 1)
                end
            end)
        end
        start:close_read()
        start:release()
        children.expect_clean_exits(pids, 120)
        assert.is_nil(dict:get("over"))
        assert.equal(1800, dict:get("done"))
        assert.equal(0, dict:get("inside"))
        local s = assert(semaphore:new(dict))
        assert.equal(0, s:count("k"))
        assert.equal(0, s:count("k2"))
    end)
    it("compiles its hot path: acquire/release loops, one object reused "
       .. "and a new one each time", function()
        local jit_v = require "jit.v"
        local out = os.tmpname()
        jit.flush()
        jit_v.on(out)
        local s = assert(semaphore:new(dict, { permits = 100 }))
        for _ = 1, 20000 do
            s:acquire("hot")
            s:release()
        end
        for _ = 1, 20000 do
            local t = semaphore:new(dict, { permits = 100 })
            t:acquire("hot")
            t:release()
        end
        jit_v.off()
        local f = io.open(out)
        local log = f:read("*a")
        f:close()
        os.remove(out)
        local traces = 0
        for _ in log:gmatch("%[TRACE%s+%d+ ") do
            traces = traces + 1
        end
        assert.is_true(traces >= 2, log)
        -- warm-up artifacts, as spec/10's lock loops
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
            if (line:find("TRACE ---", 1, true)
                and line:find("shmlock", 1, true))
               or line:find("NYI", 1, true)
            then
                assert.is_true(benign(line), line)
            end
        end
    end)
end)


-- Inside nginx, through a stand-in ngx (get_phase, and an ngx.sleep that
-- moves a fake clock and lets a hook run): the lock's steps, the phase
-- rules, blocking_timeout on a key this very process fills, and the
-- queue's turn.  The stand-in has no ngx.semaphore: queued waiters poll.
describe("resty.shmlock.semaphore inside nginx (stand-in ngx)", function()
    local fx = fixture.new { dir = "block", env = true }
    local fake = {}
    local nginx_sem         -- the module loaded with the stand-in ngx
    local dict, n = nil, 0

    setup(function()
        local saved_ngx = _G.ngx
        local reloaded = { "resty.shmlock.semaphore",
                           "resty.shmlock.lock.wait" }
        local saved = {}
        fake.shared = { limits = {} }       -- lua_shared_dict limits 1m;
        _G.ngx = {
            get_phase = function() return fake.phase end,
            sleep = function(s) return fake.sleep(s) end,
            shared = fake.shared,
        }
        for i, name in ipairs(reloaded) do
            saved[i] = package.loaded[name]
            package.loaded[name] = nil
        end
        nginx_sem = require "resty.shmlock.semaphore"
        -- turns of 60 s (renewed at half): a descheduled test never sees
        -- one end while it looks at it
        package.loaded["resty.shmlock.lock.wait"].ACCEPT = 60
        for i, name in ipairs(reloaded) do
            package.loaded[name] = saved[i]
        end
        _G.ngx = saved_ngx
    end)

    before_each(function()
        n = n + 1
        dict = fx:zone("nsem" .. n, { size = "256k" })
        fake.phase = "content"
        fake.clock = 0
        fake.steps = {}
        fake.on_sleep = nil
        fake.sleep = function(s)
            fake.steps[#fake.steps + 1] = s
            fake.clock = fake.clock + s
            if fake.on_sleep then
                fake.on_sleep(fake.clock)
            end
        end
    end)

    it("refuses a lua_shared_dict's name, even beside a zone of that "
       .. "name, naming the dict and what to do (the one name rule)",
       function()
        -- a zone file of that name in the default directory: the lock
        -- takes the name for the dict, and so does the semaphore now
        -- (before, it attached the zone)
        local zone = fx:zone("limits", { size = "64k" })
        local refusal = 'the semaphore needs a zone: "limits" is a '
            .. "lua_shared_dict, and inside nginx a lua_shared_dict name is "
            .. "that dict: give the zone another name, or pass the zone "
            .. 'object (shdict.open("limits"))'
        assert.same({ nil, refusal }, { nginx_sem:new("limits") })
        assert.same({ nil, refusal }, { nginx_sem:new(fake.shared.limits) })
        assert.same({ nil, refusal }, { nginx_sem.inspect("limits", "k") })
        -- the zone, given as its object, is a semaphore's
        local s = assert(nginx_sem:new(zone))
        assert.same({ 0 }, { s:acquire("k") })
        assert.equal(1, s:release())
        -- a name neither: the lock's words for what was tried (zones only:
        -- no lua_shared_dict would do)
        assert.same({ nil, 'dictionary not found: no zone "nowhere" in '
                           .. fx.dir }, { nginx_sem:new("nowhere") })
    end)

    it("waits with resty.lock's steps; elapsed is their sum (0.127)",
       function()
        local holder = assert(nginx_sem:new(dict))
        assert.equal(0, holder:acquire("k"))
        fake.on_sleep = function(now)
            if now >= 0.1 and holder:owned() then
                assert.equal(1, holder:release())
            end
        end
        local s = assert(nginx_sem:new(dict))
        local elapsed = assert(s:acquire("k"))
        assert.is_true(math.abs(elapsed - 0.127) < 1e-9, tostring(elapsed))
        assert.same({ 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064 },
                    fake.steps)
        assert.equal(1, s:release())
    end)

    it("refuses to wait where the phase cannot yield, takes a free permit "
       .. "there", function()
        local holder = assert(nginx_sem:new(dict))
        assert.equal(0, holder:acquire("k"))
        for _, phase in ipairs{ "init_worker", "log", "header_filter",
                                "balancer" } do
            fake.phase = phase
            local s = assert(nginx_sem:new(dict))
            assert.same({ nil, "cannot wait in " .. phase .. " phase" },
                        { s:acquire("k") })
            assert.same({ 0 }, { s:acquire("free") })
            assert.equal(1, s:release())
        end
        assert.same({}, fake.steps)
        holder:release()
    end)

    it("with blocking_timeout, refuses at once a key whose every holder "
       .. "is this process; waits for one held elsewhere", function()
        local holder = assert(nginx_sem:new(dict, { permits = 2 }))
        local holder2 = assert(nginx_sem:new(dict, { permits = 2 }))
        assert.equal(0, holder:acquire("k"))
        assert.equal(0, holder2:acquire("k"))
        fake.phase = "log"
        local s = assert(nginx_sem:new(dict, { permits = 2, timeout = 30,
                                               blocking_timeout = 30 }))
        assert.same({ nil, "cannot wait in log phase: held by this worker" },
                    { s:acquire("k") })
        -- one permit held by another process, released when told
        holder2:release()
        local held, go = proc.pipe(), proc.pipe()
        local pid = proc.spawn(function()
            held:close_read()
            go:close_write()
            local o = assert(semaphore:new(dict, { permits = 2 }))
            assert(o:acquire("k", 0) == 0)
            held:notify()
            assert(go:await(30))
            assert(o:release() == 1)
        end)
        held:close_write()
        go:close_read()
        assert.is_true(held:await(20))
        go:notify()
        local elapsed, err = s:acquire("k")
        assert.is_nil(err)
        assert.is_true(elapsed >= 0)
        children.expect_clean_exits({ pid })
        assert.equal(1, s:release())
        holder:release()
    end)

    it("with blocking_timeout, refuses at once a key whose every holder "
       .. "is this process, more of them than one batch of holders (70)",
       function()
        -- (room for 70 permits' slots in the key's shard)
        local big = fx:zone("nsem_many", { size = "2m", shards = 1 })
        local held = {}
        for i = 1, 70 do
            held[i] = assert(nginx_sem:new(big, { permits = 70 }))
            assert.equal(0, held[i]:acquire("many"))
        end
        fake.phase = "log"
        local s = assert(nginx_sem:new(big, { permits = 70, timeout = 30,
                                              blocking_timeout = 30 }))
        assert.same({ nil, "cannot wait in log phase: held by this worker" },
                    { s:acquire("many") })
        for i = 1, 70 do
            assert.equal(1, held[i]:release())
        end
    end)

    it("with blocking_timeout, a release by another process while this "
       .. "one waits is no wait on itself (one look: the listing decides)",
       function()
        local holder = assert(nginx_sem:new(dict, { permits = 2 }))
        assert.equal(0, holder:acquire("k"))
        local held, go, gone = proc.pipe(), proc.pipe(), proc.pipe()
        local pid = proc.spawn(function()
            held:close_read()
            go:close_write()
            gone:close_read()
            local o = assert(semaphore:new(dict, { permits = 2 }))
            assert(o:acquire("k", 0) == 0)
            held:notify()
            assert(go:await(30))
            -- (this process's waiter is blocked by now: full, 2 of 2)
            proc.sleep(0.2)
            assert(o:release() == 1)
            gone:notify()
        end)
        held:close_write()
        go:close_read()
        gone:close_write()
        assert.is_true(held:await(20))
        go:notify()
        fake.phase = "log"
        local s = assert(nginx_sem:new(dict, { permits = 2, timeout = 30,
                                               blocking_timeout = 30 }))
        local elapsed, err = s:acquire("k")
        assert.is_nil(err)
        assert.is_true(elapsed >= 0)
        assert.is_true(gone:await(20))
        children.expect_clean_exits({ pid })
        assert.equal(1, s:release())
        holder:release()
    end)

    it("queues after 0.2 s of steps; the queued waiter's turn keeps a "
       .. "fresh acquirer out even with room under its own limit", function()
        local a = assert(nginx_sem:new(dict, { permits = 2 }))
        local b = assert(nginx_sem:new(dict, { permits = 2 }))
        assert.equal(0, a:acquire("k"))
        assert.equal(0, b:acquire("k"))
        local seen = {}
        fake.on_sleep = function(now)
            if now < 0.3 or seen.done then
                return
            end
            local info = nginx_sem.inspect(dict, "k")
            if not (info and info.marked) then
                return          -- not queued and marked yet: look again
            end
            seen.marked = info.marked.pid == proc.getpid()
            local fresh = assert(nginx_sem:new(dict, { permits = 3 }))
            seen.fresh = { fresh:acquire("k", 0) }
            assert.equal(1, a:release())
            assert.equal(1, b:release())
            seen.done = true
        end
        local s = assert(nginx_sem:new(dict, { permits = 1, timeout = 20 }))
        local elapsed, err = s:acquire("k")
        assert.is_nil(err)
        assert.is_true(elapsed >= 0.2, tostring(elapsed))
        assert.is_true(seen.done)
        assert.is_true(seen.marked)
        assert.same({ nil, "timeout" }, seen.fresh)
        -- its turn is over: the mark went with its acquire
        local info = nginx_sem.inspect(dict, "k")
        assert.equal(1, info.count)
        assert.is_nil(info.marked)
        assert.equal(1, s:release())
    end)

    it("a queued waiter that times out withdraws its turn", function()
        local a = assert(nginx_sem:new(dict))
        assert.equal(0, a:acquire("k"))
        local s = assert(nginx_sem:new(dict, { timeout = 0.5 }))
        assert.same({ nil, "timeout" }, { s:acquire("k") })
        local info = nginx_sem.inspect(dict, "k")
        assert.is_nil(info.marked)
        assert.equal(1, a:release())
        local t = assert(nginx_sem:new(dict))
        assert.same({ 0 }, { t:acquire("k", 0) })
        t:release()
    end)
end)
