-- lock:lock_shared(key, timeout?): shared (reader) holds of a lock key
-- (resty.shmlock.lock.shared).  The returns of each method; between real
-- processes: many readers at once, readers and writers excluding each
-- other (a board that a violation would leave wrong), a writer let in
-- past a stream of readers that never lets the key go on its own, a
-- holder SIGKILLed at every structural write of its acquire, its release
-- and a release that hands the key to a waiting writer, a collected
-- object, a forked child.  What is asserted cannot be changed by
-- lateness: counts, states, returns.

local resty_lock = require "resty.shmlock"
local proc = require "harness.proc"
local fixture = require "helpers.fixture"
local children = require "helpers.children"

local function gc()
    collectgarbage()
    collectgarbage()
end

-- the shared holders of key now (0: none)
local function readers(dict, key)
    local info = resty_lock.inspect(dict, key)
    return info and info.kind == "shared" and #info.holders or 0
end

describe("lock:lock_shared", function()
    local fx = fixture.new { dir = "test", children = "assert" }
    local dict

    before_each(function()
        dict = fx:zone("shared", { size = "256k" })
    end)

    it("holds shared with any number of readers, and answers as lock()",
       function()
        local a = assert(resty_lock:new(dict))
        local b = assert(resty_lock:new(dict))
        local w = assert(resty_lock:new(dict))
        assert.same({ 0 }, { a:lock_shared("k") })
        assert.same({ 0 }, { b:lock_shared("k") })
        assert.equal(2, readers(dict, "k"))
        assert.same({ nil, "locked" }, { a:lock_shared("k") })
        assert.same({ nil, "locked" }, { a:lock("other") })
        assert.same({ nil, "locked" }, { a:trylock("other") })
        assert.is_true(a:owned())
        -- an exclusive lock waits for the readers
        assert.same({ nil, "timeout" }, { w:lock("k", 0) })
        assert.same({ nil, "timeout" }, { w:trylock("k") })
        assert.same({ true }, { a:expire() })
        assert.same({ true }, { a:expire(10) })
        assert.same({ 1 }, { a:unlock() })
        assert.same({ nil, "unlocked" }, { a:unlock() })
        assert.same({ nil, "unlocked" }, { a:expire() })
        assert.is_false(a:owned())
        assert.same({ 1 }, { b:unlock() })
        assert.same({ nil, "not locked" }, { resty_lock.inspect(dict, "k") })
        -- and readers wait for an exclusive holder
        assert.same({ 0 }, { w:lock("k") })
        assert.same({ nil, "locked" }, { w:lock_shared("k") })
        assert.same({ nil, "timeout" }, { a:lock_shared("k", 0) })
        assert.same({ nil, "timeout" }, { a:lock_shared("k", 0.01) })
        assert.same({ 1 }, { w:unlock() })
        assert.same({ 0 }, { a:lock_shared("k", 0) })
        assert.same({ 1 }, { a:unlock() })
        -- the object locks exclusive again afterwards
        assert.same({ 0 }, { a:lock("k") })
        assert.same({ 1 }, { a:unlock() })
    end)

    it("compiles: a lock_shared/unlock loop", function()
        local jit_v = require "jit.v"
        local out = os.tmpname()
        jit.flush()
        jit_v.on(out)
        local l = assert(resty_lock:new(dict))
        for _ = 1, 20000 do
            l:lock_shared("hot")
            l:unlock()
        end
        jit_v.off()
        local f = io.open(out)
        local log = f:read("*a")
        f:close()
        os.remove(out)
        -- traces were recorded (which function starts them varies)
        assert.truthy(log:find("%[TRACE%s+%d+ "), log)
        -- warm-up artifacts, as in spec/10's hot path
        local warmup = { "leaving loop in root trace",
                         "loop unroll limit reached",
                         "NYI: return to lower frame" }
        for line in log:gmatch("[^\n]+") do
            if (line:find("TRACE ---", 1, true)
                and line:find("shmlock", 1, true))
               or line:find("NYI", 1, true)
            then
                local benign = false
                for _, reason in ipairs(warmup) do
                    benign = benign or line:find(reason, 1, true) ~= nil
                end
                assert.is_true(benign, line)
            end
        end
        assert.same({ nil, "not locked" }, { resty_lock.inspect(dict, "hot") })
    end)

    it("refuses bad keys and timeouts as lock() does", function()
        local l = assert(resty_lock:new(dict))
        assert.same({ nil, "nil key" }, { l:lock_shared(nil) })
        assert.same({ nil, "empty key" }, { l:lock_shared("") })
        local max = require("resty.shmlock.internal.codes").KEY_MAX
        assert.same({ nil, "key too long" },
                    { l:lock_shared(("x"):rep(max - 3)) })
        assert.same({ 0 }, { l:lock_shared(("x"):rep(max - 4)) })
        assert.same({ 1 }, { l:unlock() })
        assert.has_error(function() l:lock_shared("k", -1) end,
                         "timeout must be >= 0")
        assert.same({ 0 }, { l:lock_shared("k") })
        assert.has_error(function() l:expire(-1) end, 'bad "exptime" argument')
        assert.same({ 1 }, { l:unlock() })
    end)

    it("takes a number key as the string every Lua gives it", function()
        local r = assert(resty_lock:new(dict))
        local w = assert(resty_lock:new(dict, { timeout = 0 }))
        assert.same({ 0 }, { r:lock_shared(1e15) })
        assert.equal(1, readers(dict, "1000000000000000"))
        assert.same({ nil, "timeout" }, { w:lock("1000000000000000") })
        assert.same({ 1 }, { r:unlock() })
    end)

    it("gives a lease: an expired shared hold no longer excludes; its "
       .. "unlock answers 1, 'expired' and its expire nil, 'expired'",
       function()
        local r = assert(resty_lock:new(dict, { exptime = 0.001 }))
        local w = assert(resty_lock:new(dict))
        assert.same({ 0 }, { r:lock_shared("k") })
        proc.sleep(0.01)          -- at least: the lease is over by then
        assert.same({ 0 }, { w:lock("k", 0) })
        assert.same({ nil, "expired" }, { r:expire() })
        assert.is_false(r:owned())
        assert.same({ nil, "unlocked" }, { r:unlock() })
        assert.same({ 1 }, { w:unlock() })
        assert.same({ 0 }, { r:lock_shared("k") })
        proc.sleep(0.01)
        assert.same({ 1, "expired" }, { r:unlock() })
    end)

    it("releases the shared hold of a collected object", function()
        local a = assert(resty_lock:new(dict))
        assert.same({ 0 }, { a:lock_shared("k") })
        a = nil                                         -- luacheck: ignore
        gc()
        assert.same({ nil, "not locked" }, { resty_lock.inspect(dict, "k") })
        local w = assert(resty_lock:new(dict))
        assert.same({ 0 }, { w:lock("k", 0) })
        assert.same({ 1 }, { w:unlock() })
    end)

    it("holds nothing in a forked child: owned() false, unlock() and "
       .. "expire() 'unlocked', a hold of its own, the parent's kept",
       function()
        local l = assert(resty_lock:new(dict))
        assert.same({ 0 }, { l:lock_shared("k") })
        children.expect_clean_exits({ proc.spawn(function()
            assert(l:owned() == false, "owned() in the child")
            local ok, err = l:unlock()
            assert(ok == nil and err == "unlocked", tostring(err))
            ok, err = l:expire()
            assert(ok == nil and err == "unlocked", tostring(err))
            assert(readers(dict, "k") == 1, "the parent's hold")
            assert(l:lock_shared("k") == 0)
            assert(readers(dict, "k") == 2, "the child's own hold")
            assert(l:unlock() == 1)
            l = nil
            gc()
            assert(readers(dict, "k") == 1, "the parent's hold")
        end) })
        assert.is_true(l:owned())
        assert.equal(1, readers(dict, "k"))
        assert.same({ 1 }, { l:unlock() })
    end)

    it("answers nil and why on an ngx.shared dict, and keeps the phase "
       .. "rule on a zone (a stand-in ngx)",
       function()
        local saved_ngx, saved = _G.ngx, package.loaded["resty.shmlock"]
        -- (the wait module decides where to wait: loaded with the ngx too)
        local saved_wait = package.loaded["resty.shmlock.lock.wait"]
        local gone = package.loaded["resty.shmlock.lock.wait"].gone
        local store = {}
        local phase = "content"
        _G.ngx = {
            get_phase = function() return phase end,
            sleep = function() end,
            shared = { fallback = {
                add = function(_, k, v)
                    if store[k] then return false, "exists" end
                    store[k] = v
                    return true
                end,
                get = function(_, k) return store[k] end,
                delete = function(_, k) store[k] = nil return true end,
            } },
        }
        package.loaded["resty.shmlock"] = nil
        package.loaded["resty.shmlock.lock.wait"] = nil
        local ok, err = pcall(function()
            local nginx_lock = require "resty.shmlock"
            local l = assert(nginx_lock:new("fallback"))
            assert.equal("ngx.shared", l.store)
            -- the dict named, and what to do
            assert.same({ nil, 'shared holds need a zone: "fallback" is a '
                          .. "lua_shared_dict, and inside nginx a "
                          .. "lua_shared_dict name is that dict: give the "
                          .. "zone another name, or pass the zone object "
                          .. '(shdict.open("fallback"))' },
                        { l:lock_shared("k") })
            assert.same({ nil, "unlocked" }, { l:unlock() })
            -- on a zone, the phase rule of lock()
            phase = "log"
            local w = assert(nginx_lock:new(dict))
            assert.same({ 0 }, { w:lock("k") })
            local r = assert(nginx_lock:new(dict))
            assert.same({ nil, "cannot wait in log phase" },
                        { r:lock_shared("k") })
            r = assert(nginx_lock:new(dict, { blocking_timeout = 1 }))
            assert.same({ nil, "cannot wait in log phase: held by this "
                          .. "worker" }, { r:lock_shared("k") })
            assert.same({ 1 }, { w:unlock() })
            assert.same({ 0 }, { r:lock_shared("k") })
            assert.same({ 1 }, { r:unlock() })
        end)
        package.loaded["resty.shmlock"] = saved
        package.loaded["resty.shmlock.lock.wait"] = saved_wait
        package.loaded["resty.shmlock.lock.zone"].on_gone(gone)
        _G.ngx = saved_ngx
        assert(ok, err)
    end)

    it("with blocking_timeout, refuses at once a wait only this process's "
       .. "own shared hold could end, and waits for another's (a stand-in "
       .. "ngx, log phase)", function()
        local saved_ngx, saved = _G.ngx, package.loaded["resty.shmlock"]
        -- (the wait module decides where to wait: loaded with the ngx too)
        local saved_wait = package.loaded["resty.shmlock.lock.wait"]
        local gone = package.loaded["resty.shmlock.lock.wait"].gone
        _G.ngx = { get_phase = function() return "log" end,
                   sleep = function() end }
        package.loaded["resty.shmlock"] = nil
        package.loaded["resty.shmlock.lock.wait"] = nil
        local pids = {}
        -- a child holding key shared (released when told, or once a
        -- waiter sleeps on the key: when_waited)
        local function reader(key, when_waited)
            local held, go = proc.pipe(), proc.pipe()
            pids[#pids + 1] = proc.spawn(function()
                held:close_read()
                go:close_write()
                local l = assert(resty_lock:new(dict))
                assert(l:lock_shared(key) == 0)
                held:notify()
                if when_waited then
                    for _ = 1, 20000 do
                        local info = resty_lock.inspect(dict, key)
                        if info and info.waiters > 0 then
                            break
                        end
                        proc.sleep(0.001)
                    end
                else
                    assert(go:await(30))
                end
                assert(l:unlock() == 1)
            end)
            held:close_write()
            go:close_read()
            assert(held:await(20))
            return go
        end
        local ok, err = pcall(function()
            local nginx_lock = require "resty.shmlock"
            local refused = { nil, "cannot wait in log phase: held by this "
                                   .. "worker" }
            local opts = { timeout = 30, blocking_timeout = 30 }
            local own = assert(nginx_lock:new(dict))
            local w = assert(nginx_lock:new(dict, opts))
            -- a writer, the key held shared by this process alone
            assert.same({ 0 }, { own:lock_shared("a") })
            assert.same(refused, { w:lock("a") })
            assert.same({ 1 }, { own:unlock() })
            -- ... and by another process too
            local go = reader("m")
            assert.same({ 0 }, { own:lock_shared("m") })
            assert.same(refused, { w:lock("m") })
            assert.same({ 1 }, { own:unlock() })
            go:notify()
            -- a reader behind a writer (another process) that waits for
            -- this process's shared hold
            assert.same({ 0 }, { own:lock_shared("b") })
            pids[#pids + 1] = proc.spawn(function()
                local l = assert(resty_lock:new(dict, { timeout = 60 }))
                local e, why = l:lock("b")
                assert(e, why)
                assert(l:unlock() == 1)
            end)
            for _ = 1, 20000 do
                if (resty_lock.inspect(dict, "b") or {}).marked then
                    break
                end
                proc.sleep(0.001)
            end
            assert.truthy(resty_lock.inspect(dict, "b").marked)
            local r = assert(nginx_lock:new(dict, opts))
            assert.same(refused, { r:lock_shared("b") })
            assert.same({ 1 }, { own:unlock() })        -- the writer's turn
            -- the key held shared by another process only: a writer
            -- waits, and gets it at the release
            reader("c", true)
            local elapsed, why = w:lock("c")
            assert.is_nil(why)
            assert.is_true(elapsed > 0)
            assert.same({ 1 }, { w:unlock() })
        end)
        package.loaded["resty.shmlock"] = saved
        package.loaded["resty.shmlock.lock.wait"] = saved_wait
        package.loaded["resty.shmlock.lock.zone"].on_gone(gone)
        _G.ngx = saved_ngx
        children.expect_clean_exits(pids)
        assert(ok, err)
    end)

    it("takes over a SIGKILLed exclusive holder's key at once", function()
        local held = proc.pipe()
        local pid = proc.spawn(function()
            held:close_read()
            local l = assert(resty_lock:new(dict))
            assert(l:lock("k") == 0)
            held:notify()
            proc.sleep(30)
        end)
        held:close_write()
        assert.is_true(held:await(20))
        proc.kill(pid, 9)
        assert.equal("signal", proc.wait(pid, 20).how)
        local r = assert(resty_lock:new(dict))
        assert.same({ 0 }, { r:lock_shared("k", 0) })
        assert.same({ 1 }, { r:unlock() })
    end)

    it("lets readers in at once past the mark of a writer SIGKILLed while "
       .. "it waited", function()
        local r = assert(resty_lock:new(dict))
        assert.same({ 0 }, { r:lock_shared("k") })
        local writer = proc.spawn(function()
            local w = assert(resty_lock:new(dict, { timeout = 60 }))
            w:lock("k")
        end)
        while true do
            local info = resty_lock.inspect(dict, "k")
            if info and info.marked then
                break
            end
            proc.sleep(0.001)
        end
        local r2 = assert(resty_lock:new(dict))
        assert.same({ nil, "timeout" }, { r2:lock_shared("k", 0) })
        proc.kill(writer, 9)
        assert.equal("signal", proc.wait(writer, 20).how)
        -- its mark asked to keep readers out for 60 s
        assert.same({ 0 }, { r2:lock_shared("k", 0) })
        assert.is_nil(resty_lock.inspect(dict, "k").marked)
        assert.same({ 1 }, { r2:unlock() })
        assert.same({ 1 }, { r:unlock() })
    end)

    it("wakes the marked writer's own wait word when the last reader "
       .. "releases", function()
        -- a marked waiter sleeps on a word of its own (resty.shmlock.lock.
        -- zone, "Waking"); counted as a sleeper there ourselves, we see
        -- the word bumped by the release
        local C = require "resty.shmlock.lib"
        local zone_lock = require "resty.shmlock.lock.zone"
        local zone = dict._zone
        local word = zone_lock.marked_hash(C.shmlock_hash("k", 1))
        local r = assert(resty_lock:new(dict))
        assert.same({ 0 }, { r:lock_shared("k") })
        local writer = proc.spawn(function()
            local w = assert(resty_lock:new(dict, { timeout = 60 }))
            assert(w:lock("k"))
            assert(w:unlock() == 1)
        end)
        while not (resty_lock.inspect(dict, "k") or {}).marked do
            proc.sleep(0.001)
        end
        local before = C.shmlock_wait_begin(zone, word)
        assert.same({ 1 }, { r:unlock() })
        local after = C.shmlock_wait_begin(zone, word)
        C.shmlock_wait_end(zone, word, after, 0)
        C.shmlock_wait_end(zone, word, before, 0)
        assert.are_not.equal(before, after)
        children.expect_clean_exits({ writer })
    end)

    it("lets 4 processes hold shared at once", function()
        local held, go = proc.pipe(), proc.pipe()
        local pids = {}
        for i = 1, 4 do
            pids[i] = proc.spawn(function()
                held:close_read()
                local l = assert(resty_lock:new(dict, { timeout = 30 }))
                assert(l:lock_shared("k") == 0, "not at once")
                held:notify()
                assert(go:wait_release(30))
                assert(l:unlock() == 1)
            end)
        end
        held:close_write()
        go:close_read()
        for _ = 1, 4 do
            assert.is_true(held:await(20))
        end
        local info = assert(resty_lock.inspect(dict, "k"))
        assert.equal("shared", info.kind)
        assert.equal(4, #info.holders)
        local seen = {}
        for _, h in ipairs(info.holders) do
            assert.is_true(h.alive)
            assert.is_true(h.ttl > 0 and h.ttl <= 30)
            seen[h.pid] = true
        end
        for i = 1, 4 do
            assert.is_true(seen[pids[i]], "holder " .. pids[i])
        end
        local w = assert(resty_lock:new(dict))
        assert.same({ nil, "timeout" }, { w:lock("k", 0) })
        go:release()
        children.expect_clean_exits(pids)
        assert.same({ 0 }, { w:lock("k", 0) })
        assert.same({ 1 }, { w:unlock() })
    end)

    it("excludes writers from readers and readers from writers: 3 readers "
       .. "and 2 writers x 200 rounds on a board", function()
        local start = proc.pipe()
        local pids = {}
        for i = 1, 5 do
            local writer = i <= 2
            pids[i] = proc.spawn(function()
                start:close_write()
                local l = assert(resty_lock:new(dict, { timeout = 60 }))
                assert(start:wait_release(30))
                for _ = 1, 200 do
                    if writer then
                        assert(l:lock("k"))
                        local w = assert(dict:incr("writers", 1, 0))
                        if w ~= 1 or (dict:get("readers") or 0) ~= 0 then
                            dict:incr("bad", 1, 0)
                        end
                        -- read-modify-write, in two steps
                        local v = dict:get("v") or 0
                        proc.yield()
                        assert(dict:set("v", v + 1))
                        assert(dict:incr("writers", -1))
                    else
                        assert(l:lock_shared("k"))
                        assert(dict:incr("readers", 1, 0))
                        if (dict:get("writers") or 0) ~= 0 then
                            dict:incr("bad", 1, 0)
                        end
                        local v = dict:get("v")
                        proc.yield()
                        if dict:get("v") ~= v then
                            dict:incr("bad", 1, 0)
                        end
                        assert(dict:incr("readers", -1))
                    end
                    assert(l:unlock() == 1)
                end
            end)
        end
        start:close_read()
        start:release()
        children.expect_clean_exits(pids, 120)
        assert.is_nil(dict:get("bad"))
        assert.equal(400, dict:get("v"))
        assert.same({ nil, "not locked" }, { resty_lock.inspect(dict, "k") })
    end)

    it("lets a writer in past a stream of readers that never leaves the "
       .. "key free on its own", function()
        -- a reader leaves only while another reader is in (its decrement
        -- of `inside` leaves 1 or more: the others counted there still
        -- hold), or once a writer has marked the key: without the mark,
        -- and new readers kept out by it, the key never has 0 readers
        local start = proc.pipe()
        local pids = {}
        for i = 1, 3 do
            pids[i] = proc.spawn(function()
                start:close_write()
                local l = assert(resty_lock:new(dict, { timeout = 60 }))
                assert(start:wait_release(30))
                while not dict:get("stop") do
                    assert(l:lock_shared("k"))
                    assert(dict:incr("reads", 1, 0))
                    assert(dict:incr("inside", 1, 0))
                    while true do
                        local info = resty_lock.inspect(dict, "k")
                        if dict:get("stop") or (info and info.marked) then
                            assert(dict:incr("inside", -1))
                            break
                        end
                        if assert(dict:incr("inside", -1)) >= 1 then
                            break
                        end
                        assert(dict:incr("inside", 1))
                        proc.sleep(0.0002)
                    end
                    assert(l:unlock() == 1)
                end
            end)
        end
        start:close_read()
        start:release()
        -- the stream has started
        while (dict:get("reads") or 0) < 20 do
            proc.sleep(0.001)
        end
        local w = assert(resty_lock:new(dict, { timeout = 60 }))
        local elapsed, err = w:lock("k")
        assert.is_nil(err)
        assert.is_number(elapsed)
        assert.equal(0, dict:get("inside"))
        assert.is_true(dict:set("stop", true))
        assert.same({ 1 }, { w:unlock() })
        children.expect_clean_exits(pids, 60)
    end)

    it("shows in inspect and `shmlock locks` one row per shared holder, "
       .. "which `shmlock unlock` releases", function()
        local checkout = require "helpers.checkout"
        local jd = require "helpers.json_decode"
        local function shmlock(...)
            local out = fx.dir .. "/.out"
            local status = checkout.sh("cd / && env -u LUA_PATH -u SHMLOCK_DIR "
                                       .. checkout.ROOT .. "/bin/shmlock --dir "
                                       .. fx.dir .. " " .. table.concat({ ... },
                                                                        " ")
                                       .. " >" .. out .. " 2>&1; echo $?")
            local o = checkout.read_file(out)
            os.remove(out)
            return tonumber(status), o
        end
        local held = proc.pipe()
        local pid = proc.spawn(function()
            held:close_read()
            local l = assert(resty_lock:new(dict, { exptime = 0 }))
            assert(l:lock_shared("k") == 0)
            held:notify()
            proc.sleep(30)
        end)
        held:close_write()
        assert.is_true(held:await(20))
        local l = assert(resty_lock:new(dict))
        assert.same({ 0 }, { l:lock_shared("k") })
        local info = assert(resty_lock.inspect(dict, "k"))
        assert.equal("shared", info.kind)
        assert.is_nil(info.pid)
        table.sort(info.holders, function(x, y) return x.pid < y.pid end)
        local mine = { pid = proc.getpid(), alive = true }
        local child = { pid = pid, alive = true, ttl = 0 }
        local want = pid < mine.pid and { child, mine } or { mine, child }
        for i, h in ipairs(info.holders) do
            assert.equal(want[i].pid, h.pid)
            assert.equal(want[i].alive, h.alive)
            if want[i].ttl then
                assert.equal(0, h.ttl)
            else
                assert.is_true(h.ttl > 0 and h.ttl <= 30)
            end
        end

        local status, out = shmlock("--json", "locks", "shared")
        assert.equal(0, status, out)
        local rows = jd.decode(out)
        assert.equal(2, #rows)
        for _, row in ipairs(rows) do
            assert.equal("shared", row.kind)
            assert.equal("k", row.key)
            assert.is_true(row.pid == pid or row.pid == mine.pid)
        end
        status, out = shmlock("locks", "shared")
        assert.equal(0, status, out)
        assert.equal(2, select(2, out:gsub("k %(shared%)", "")))

        proc.kill(pid, 9)
        assert.equal("signal", proc.wait(pid, 20).how)
        info = assert(resty_lock.inspect(dict, "k"))
        assert.equal(2, #info.holders)     -- inspect drops nobody
        status, out = shmlock("unlock", "shared", "k")
        assert.equal(0, status, out)
        assert.equal("released k (2 shared holds)\n", out)
        assert.same({ nil, "not locked" }, { resty_lock.inspect(dict, "k") })
        assert.same({ 1, "expired" }, { l:unlock() })
        status = shmlock("unlock", "shared", "k")
        assert.equal(5, status)
    end)

    describe("a shared holder SIGKILLed at every structural write", function()
        local lib = require "helpers.test_hooks"

        -- the key is free at once for an exclusive lock and for readers
        local function check_free(where)
            local w = assert(resty_lock:new(dict))
            assert.same({ 0 }, { w:lock("k", 0) }, where)
            assert.same({ 1 }, { w:unlock() }, where)
            assert.same({ 0 }, { w:lock_shared("k", 0) }, where)
            assert.same({ 1 }, { w:unlock() }, where)
            assert.same({ nil, "not locked" },
                        { resty_lock.inspect(dict, "k") }, where)
        end

        it("of its acquire: the lock reclaimed at once", function()
            local crashes = 0
            for n = 1, 60 do
                local held = proc.pipe()
                local pid = proc.spawn(function()
                    held:close_read()
                    local l = assert(resty_lock:new(dict))
                    lib.shmlock_test_crash_at(n)
                    local ok = l:lock_shared("k")
                    lib.shmlock_test_crash_at(0)
                    assert(ok == 0)
                    held:notify()
                    proc.sleep(30)
                end)
                held:close_write()
                local got = held:await(20)
                held:close_read()
                if got then
                    proc.kill(pid, 9)
                end
                local r = proc.wait(pid, 20)
                assert.equal("signal", r.how, r.msg)
                check_free("killed at write " .. n)
                if got then
                    break
                end
                crashes = crashes + 1
            end
            assert.is_true(crashes > 0, "no write to crash at")
            assert.is_true(crashes < 60, "never completed")
        end)

        it("of its release: the lock reclaimed at once", function()
            local crashes = 0
            for n = 1, 60 do
                local pid = proc.spawn(function()
                    local l = assert(resty_lock:new(dict))
                    assert(l:lock_shared("k") == 0)
                    lib.shmlock_test_crash_at(n)
                    local ok = l:unlock()
                    lib.shmlock_test_crash_at(0)
                    assert(ok == 1)
                end)
                local r = proc.wait(pid, 20)
                check_free("killed at write " .. n)
                if r.how == "exit" then
                    assert.equal(0, r.code, r.msg)
                    break
                end
                assert.equal("signal", r.how, r.msg)
                crashes = crashes + 1
            end
            assert.is_true(crashes > 0, "no write to crash at")
            assert.is_true(crashes < 60, "never completed")
        end)

        it("of a release that hands the key to a waiting writer: the writer "
           .. "gets it", function()
            local crashes = 0
            for n = 1, 60 do
                local held, go = proc.pipe(), proc.pipe()
                local reader = proc.spawn(function()
                    held:close_read()
                    local l = assert(resty_lock:new(dict))
                    assert(l:lock_shared("k") == 0)
                    held:notify()
                    assert(go:wait_release(30))
                    lib.shmlock_test_crash_at(n)
                    local ok = l:unlock()
                    lib.shmlock_test_crash_at(0)
                    assert(ok == 1)
                end)
                held:close_write()
                go:close_read()
                assert.is_true(held:await(20))
                local writer = proc.spawn(function()
                    go:close_write()    -- the reader waits for its EOF
                    local w = assert(resty_lock:new(dict, { timeout = 30 }))
                    local elapsed, err = w:lock("k")
                    assert(elapsed, err)
                    assert(readers(dict, "k") == 0)
                    assert(w:unlock() == 1)
                end)
                -- the writer has marked the key
                while true do
                    local info = resty_lock.inspect(dict, "k")
                    if info and info.marked then
                        break
                    end
                    proc.sleep(0.001)
                end
                go:release()
                local r = proc.wait(reader, 20)
                assert.same({ how = "exit", code = 0, msg = "" },
                            proc.wait(writer, 40),
                            "the writer, reader killed at write " .. n)
                check_free("killed at write " .. n)
                if r.how == "exit" then
                    assert.equal(0, r.code, r.msg)
                    break
                end
                assert.equal("signal", r.how, r.msg)
                crashes = crashes + 1
            end
            assert.is_true(crashes > 0, "no write to crash at")
            assert.is_true(crashes < 60, "never completed")
        end)
    end)
end)
