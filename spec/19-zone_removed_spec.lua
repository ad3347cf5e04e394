-- A zone file removed behind our back (rm, systemd's RemoveIPC=yes) must
-- not split the processes that still map it from those that open the name
-- again: within SHMLOCK_WATCH_MS of the removal every call of a process
-- mapping the old file refuses with "zone file removed: ...", as for a
-- destroyed zone, so a lock held there cannot answer 1 at its unlock while
-- a fresh process holds the same key in the new zone.  Real processes;
-- "after the bound" is waited for on the very clock the check is gated by
-- (the test hooks tell its reading and the zone's next check), never by a
-- sleep of a guessed length.

local proc = require "harness.proc"
local fixture = require "helpers.fixture"
local checkout = require "helpers.checkout"
local env = require "helpers.lock_env"
local lib = require "helpers.test_hooks"
local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"

local REMOVED = "zone file removed: deleted while in use (rm, or systemd's "
                .. "RemoveIPC=yes at logout)"

-- Waits until this process's next call on the zone looks at its file:
-- the coarse clock has reached the zone's next check (10 s at most).
local function until_check_due(dict)
    assert(env.wait_for(function()
        return lib.shmlock_test_coarse_ms()
               >= lib.shmlock_test_watch_at(dict._zone)
    end, 10), "the zone's check never came due")
end

describe("a zone file removed behind our back", function()
    local fx = fixture.new { dir = "test", children = "assert" }
    local dir

    before_each(function()
        dir = fx.dir
    end)

    local function path(name)
        return dir .. "/shmlock." .. name
    end

    -- A fresh process (never mapped the old file) opens `name`, creating
    -- the zone anew, and takes lock `key` without waiting: what it printed.
    local function fresh_locker(name, key)
        local file = dir .. "/fresh.lua"
        checkout.write_file(file, ([[
local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local d = assert(shdict.open(%q, { dir = %q, size = "64k" }))
local lock = assert(resty_lock:new(d, { exptime = 60 }))
local elapsed, err = lock:trylock(%q)
io.write(elapsed and "locked" or ("failed: " .. tostring(err)))
]]):format(name, dir, key))
        return checkout.sh("LUA_PATH='" .. checkout.LUA_PATH .. "' luajit "
                           .. file .. " 2>&1")
    end

    -- Process A holds lock `key` in zone `name`; `remove(name)` takes the
    -- file away; a fresh process B then locks the key in the zone the name
    -- reaches now; once A's check is due, A's calls are answered.  Returns
    -- B's output and A's answers (unlock, get, set, a new lock by name).
    local function split(name, key, remove)
        local dict = fx:zone(name, { size = "64k" })
        local held, go, report = proc.pipe(), proc.pipe(), proc.pipe()
        local pid = proc.spawn(function()
            held:close_read()
            report:close_read()
            env.setenv("SHMLOCK_DIR", dir)      -- locks by name find it
            local lock = assert(resty_lock:new(name, { exptime = 60 }))
            assert(lock:lock(key))
            held:notify()
            assert(go:wait_release(20), "no go")
            until_check_due(dict)
            local ok, err = lock:unlock()
            local v, gerr = dict:get("x")
            local sok, serr = dict:set("x", 1)
            local l2 = assert(resty_lock:new(name, { exptime = 60 }))
            local t, lerr = l2:trylock("other")
            local lines = {
                "unlock=" .. tostring(ok) .. "|" .. tostring(err),
                "get=" .. tostring(v) .. "|" .. tostring(gerr),
                "set=" .. tostring(sok) .. "|" .. tostring(serr),
                "relock=" .. tostring(t) .. "|" .. tostring(lerr),
            }
            checkout.write_file(dir .. "/a.out", table.concat(lines, "\n"))
            report:notify()
        end)
        held:close_write()
        report:close_write()
        assert.is_true(held:await(20))
        remove(name)
        local b = fresh_locker(name, key)
        go:release()
        assert.is_true(report:await(30))
        local res = proc.wait(pid, 30)
        assert.same({ how = "exit", code = 0 }, { how = res.how,
                                                  code = res.code })
        local a = {}
        for k, v in checkout.read_file(dir .. "/a.out"):gmatch("(%w+)=([^\n]*)")
        do
            a[k] = v
        end
        return b, a
    end

    it("rm: the holder's unlock refuses once B holds the key anew", function()
        local b, a = split("rmz", "k", function(name)
            assert(os.remove(path(name)))
        end)
        -- the split is real: B made a new zone and holds the key there
        assert.equal("locked", b)
        -- and A learns it: its unlock does not answer 1
        assert.equal("nil|" .. REMOVED, a.unlock)
        assert.equal("nil|" .. REMOVED, a.get)
        assert.equal("false|" .. REMOVED, a.set)
        -- a new lock by name reaches the zone the name reaches now
        assert.equal("0|nil", a.relock)
    end)

    it("shmlock destroy: the holder's unlock answers \"zone destroyed\"",
       function()
        local b, a = split("dz", "k", function(name)
            local out = checkout.sh("cd / && env -u LUA_PATH '"
                                    .. checkout.ROOT .. "/bin/shmlock' --dir '"
                                    .. dir .. "' destroy " .. name
                                    .. " 2>&1; echo $?")
            assert.equal("destroyed " .. name .. "\n0\n", out)
        end)
        assert.equal("locked", b)
        assert.equal("nil|zone destroyed", a.unlock)
        assert.equal("nil|zone destroyed", a.get)
        assert.equal("0|nil", a.relock)
    end)

    it("marks the old zone dead for every process mapping it", function()
        local dict = fx:zone("shared", { size = "64k" })
        assert(dict:set("x", 1))
        local checked, report = proc.pipe(), proc.pipe()
        -- C maps the zone (inherited) and does not call until A checked
        local pid = proc.spawn(function()
            checked:close_write()
            report:close_read()
            assert(checked:wait_release(20))
            -- C's own check is not due (it read nothing since), yet the
            -- zone is dead: the mark is in the zone, not in A
            local v, err = dict:get("x")
            checkout.write_file(dir .. "/c.out", tostring(v) .. "|"
                                .. tostring(err))
            report:notify()
        end)
        report:close_write()
        assert(os.remove(path("shared")))
        until_check_due(dict)
        assert.same({ nil, REMOVED }, { dict:get("x") })
        assert.equal(2, lib.shmlock_zone_dead(dict._zone))
        checked:release()
        assert.is_true(report:await(20))
        assert.equal(0, proc.wait(pid, 20).code)
        assert.equal("nil|" .. REMOVED, checkout.read_file(dir .. "/c.out"))
    end)

    it("does not look at the file more than once per SHMLOCK_WATCH_MS",
       function()
        local dict = fx:zone("gated", { size = "64k" })
        assert(dict:set("x", 1))
        until_check_due(dict)
        -- (the clock read before the call: any time the box takes after it
        -- only makes the check's own reading later)
        local before = lib.shmlock_test_coarse_ms()
        assert(dict:get("x"))           -- checks: the next one is due later
        local at = lib.shmlock_test_watch_at(dict._zone)
        assert.is_true(at >= before + lib.SHMLOCK_WATCH_MS)
        assert(os.remove(path("gated")))
        -- not due yet (unless the clock passed it meanwhile): still served
        if lib.shmlock_test_coarse_ms() < at then
            local v, err = dict:get("x")
            if lib.shmlock_test_coarse_ms() < at then
                assert.same({ 1, nil }, { v, err })
            end
        end
        until_check_due(dict)
        assert.same({ nil, REMOVED }, { dict:get("x") })
    end)

    -- inside nginx the calls are gated by nginx's cached time (a lock's
    -- acquire and a get with a ttl by a fine reading): a check due by that
    -- reading runs, even while the coarse clock is short of it
    it("looks at the file once the caller's reading says it is due",
       function()
        local ffi = require "ffi"
        local dict = fx:zone("byreading", { size = "64k" })
        local out = ffi.new("shmlock_value_t")
        local buf = ffi.new("char[16]")
        assert(dict:set("x", 1))
        until_check_due(dict)
        assert(dict:get("x"))           -- checks: the next one is due at `at`
        local at = lib.shmlock_test_watch_at(dict._zone)
        assert(os.remove(path("byreading")))
        local rc = lib.shmlock_dict_get_at(dict._zone, "x", 1, 0, out, buf,
                                           16, at)
        assert.equal(lib.SHMLOCK_REMOVED, tonumber(rc))
        assert.same({ nil, REMOVED }, { dict:get("x") })
    end)

    it("a zone destroyed and made again is not taken for removed", function()
        local dict = fx:zone("again", { size = "64k" })
        assert(shdict.destroy("again", { dir = dir }))
        until_check_due(dict)
        assert.same({ nil, "zone destroyed" }, { dict:get("x") })
        assert.equal(1, lib.shmlock_zone_dead(dict._zone))
        local fresh = fx:zone("again", { size = "64k" })
        until_check_due(fresh)
        assert(fresh:set("x", 2))
        assert.equal(2, fresh:get("x"))
    end)

    -- new() remembers a name resolved to a zone and reads only the zone's
    -- dead word: the look at the file is the calls' (lock() refuses), and
    -- the next new() reaches the zone the name reaches now
    it("a name resolved before: lock() refuses, then new() reaches the new "
       .. "zone", function()
        local dict = fx:zone("memo", { size = "64k" })
        env.setenv("SHMLOCK_DIR", dir)
        finally(function() env.setenv("SHMLOCK_DIR", nil) end)
        local first = assert(resty_lock:new("memo"))
        assert.equal(dict, first.dict)
        assert.equal(0, first:lock("k"))
        assert.equal(1, first:unlock())
        assert(os.remove(path("memo")))
        until_check_due(dict)
        -- nobody looked at the file yet: the name still reaches the zone
        local again = assert(resty_lock:new("memo"))
        assert.equal(dict, again.dict)
        assert.same({ nil, REMOVED }, { again:lock("k") })
        -- another process makes the zone anew and holds the key there
        assert.equal("locked", fresh_locker("memo", "k"))
        local new = assert(resty_lock:new("memo"))
        assert.not_equal(dict, new.dict)
        assert.equal(0, lib.shmlock_zone_dead(new.dict._zone))
        -- the key, held there by the fresh process (dead now): taken over
        assert.equal(0, new:trylock("k"))
        assert.equal(1, new:unlock())
    end)

    -- the process that made the zone anew marked the removed one dead
    -- before it published the new file: nobody had to look at the file
    it("a name resolved before, the zone made anew at once: new() reaches "
       .. "the new zone", function()
        local dict = fx:zone("memo2", { size = "64k" })
        env.setenv("SHMLOCK_DIR", dir)
        finally(function() env.setenv("SHMLOCK_DIR", nil) end)
        local first = assert(resty_lock:new("memo2"))
        assert.equal(dict, first.dict)
        assert.equal(0, first:lock("k"))
        assert.equal(1, first:unlock())
        assert(os.remove(path("memo2")))
        assert.equal("locked", fresh_locker("memo2", "k"))
        -- the word itself, read without a look at the file
        assert.equal(2, lib.shmlock_zone_dead_word(dict._zone)[0])
        assert.same({ nil, REMOVED }, { first:lock("k") })
        local new = assert(resty_lock:new("memo2"))
        assert.not_equal(dict, new.dict)
        assert.equal(0, new:trylock("k"))
        assert.equal(1, new:unlock())
    end)

    it("a name resolved before: a zone destroyed is not reached again",
       function()
        fx:zone("memod", { size = "64k" })
        env.setenv("SHMLOCK_DIR", dir)
        finally(function() env.setenv("SHMLOCK_DIR", nil) end)
        assert(resty_lock:new("memod"))
        assert(shdict.destroy("memod", { dir = dir }))
        local lock, err = resty_lock:new("memod")
        assert.is_nil(lock)
        assert.matches("^dictionary not found", err)
    end)

    it("a process whose fd was closed finds its file again by name",
       function()
        local dict = fx:zone("fdless", { size = "64k" })
        assert(dict:set("x", 1))
        local done = proc.pipe()
        local pid = proc.spawn(function()
            done:close_read()
            -- closes every fd as a daemon may (the harness's pipes but ours)
            local process = require "resty.shmlock.cli.process"
            for fd = 3, 1023 do
                if fd ~= done.w then
                    process.close(fd)
                end
            end
            until_check_due(dict)
            local v1 = dict:get("x")            -- finds its file by name
            os.remove(path("fdless"))
            until_check_due(dict)
            local v2, err = dict:get("x")
            checkout.write_file(dir .. "/f.out", tostring(v1) .. "|"
                                .. tostring(v2) .. "|" .. tostring(err))
            done:notify()
        end)
        done:close_write()
        assert.is_true(done:await(20))
        assert.equal(0, proc.wait(pid, 20).code)
        assert.equal("1|nil|" .. REMOVED, checkout.read_file(dir .. "/f.out"))
    end)
end)

-- Issue 30, item 3: the file removed and the name opened afresh at once,
-- within the watch's SHMLOCK_WATCH_MS.  A process that creates a zone
-- file first marks dead every removed generation of that name a live
-- process still maps (found in /proc), before it publishes the new one;
-- and every call that takes, releases or writes looks at the dead word
-- after its step.  So a holder in the removed zone never answers success
-- while a fresh process holds the key in the new one, however soon it
-- asks.  Real processes, sequenced by pipes; nothing waits for a clock.
describe("a zone file removed and made again at once", function()
    local fx = fixture.new { dir = "test", children = "assert" }
    local semaphore = require "resty.shmlock.semaphore"
    local ffi = require "ffi"
    local TRIES = 10
    local dir

    before_each(function()
        dir = fx.dir
    end)

    -- Process H opens zone `name` (making it) and runs take(dict), which
    -- takes what it holds; the file is removed; a fresh process P (forked
    -- from this one, which never mapped the old file) opens the name,
    -- making the zone anew, and runs ptake(dict), which takes the key
    -- there; while P holds, H runs after(held, dict), whose answers
    -- (strings) come back here.  P lets go afterwards.
    -- opts.dir: the zone's directory (fx.dir by default; false: none
    -- given, SHMLOCK_DIR's or /dev/shm); opts.env: SHMLOCK_DIR in both
    -- processes; opts.setup(): run by both first; opts.scan: P's scan
    -- figures come back too (shmlock_test_removed_scan).
    local function split(name, take, ptake, after, opts)
        opts = opts or {}
        local zdir = opts.dir == nil and dir or opts.dir or nil
        local file = (zdir or opts.env or "/dev/shm") .. "/shmlock." .. name
        local h_ready, h_go, h_done = proc.pipe(), proc.pipe(), proc.pipe()
        local p_ready, p_go = proc.pipe(), proc.pipe()
        local out = dir .. "/" .. name .. ".out"
        local function setup()
            env.setenv("SHMLOCK_DIR", opts.env)
            if opts.setup then
                opts.setup()
            end
        end
        local h = proc.spawn(function()
            h_ready:close_read()
            h_done:close_read()
            p_ready:close()
            p_go:close()
            setup()
            local d = assert(shdict.open(name, { dir = zdir, size = "64k" }))
            local held = take(d)
            h_ready:notify()
            assert(h_go:wait_release(30), "no go")
            checkout.write_file(out, table.concat(after(held, d), "\n"))
            h_done:notify()
        end)
        h_ready:close_write()
        h_done:close_write()
        assert.is_true(h_ready:await(30))
        fx:defer(function()
            shdict.destroy(name, { dir = zdir or opts.env })
        end)
        assert(os.remove(file))
        local p = proc.spawn(function()
            p_ready:close_read()
            h_ready:close()
            h_done:close()
            h_go:close()
            setup()
            local d = assert(shdict.open(name, { dir = zdir, size = "64k" }))
            local held = ptake(d)
            local scan = ffi.new("uint32_t[6]")
            lib.shmlock_test_removed_scan(scan)
            checkout.write_file(out .. ".scan", ("%d %d %d %d"):format(
                scan[0], scan[1], scan[2], scan[3]))
            p_ready:notify()
            assert(p_go:wait_release(30), "no go")
            return held ~= nil
        end)
        p_ready:close_write()
        assert.is_true(p_ready:await(30), "P did not take the key")
        h_go:release()
        assert.is_true(h_done:await(30), "H did not answer")
        p_go:release()
        local rh, rp = proc.wait(h, 30), proc.wait(p, 30)
        assert.same({ "exit", 0, "exit", 0 },
                    { rh.how, rh.code, rp.how, rp.code }, rh.msg or rp.msg)
        h_ready:close_read()
        h_done:close_read()
        p_ready:close_read()
        local procs, lines, marked, unreachable =
            checkout.read_file(out .. ".scan"):match("(%d+) (%d+) (%d+) (%d+)")
        return checkout.read_file(out), {
            procs = tonumber(procs), lines = tonumber(lines),
            marked = tonumber(marked), unreachable = tonumber(unreachable) }
    end

    -- a call's first two answers, "a|b"
    local function answer(a, b)
        return tostring(a) .. "|" .. tostring(b)
    end

    local function lock_of(d)
        return assert(resty_lock:new(d, { exptime = 60 }))
    end

    -- P's take: K's exclusive lock and a permit of K's one-permit
    -- semaphore, both held in the new zone
    local function p_holds_k(d)
        local lock = lock_of(d)
        assert.equal(0, lock:trylock("K"))
        local sem = assert(semaphore:new(d, { permits = 1, exptime = 60 }))
        assert.equal(0, sem:acquire("K", 0))
        return { lock, sem }
    end

    -- every answer of H's: a refusal naming the removal, never a success
    local function assert_refused(text, what)
        for line in text:gmatch("[^\n]+") do
            local call, rest = line:match("^(%w+)=(.*)$")
            assert.is_true(rest == "nil|" .. REMOVED
                           or rest == "false|" .. REMOVED,
                           what .. ": " .. call .. " answered " .. rest)
        end
    end

    it("the exclusive lock: unlock and expire never answer success",
       function()
        for i = 1, TRIES do
            local text = split("x" .. i, function(d)
                local lock = lock_of(d)
                assert.equal(0, lock:lock("K"))
                return lock
            end, p_holds_k, function(lock, d)
                return {
                    "expire=" .. answer(lock:expire(30)),
                    "unlock=" .. answer(lock:unlock()),
                    "set=" .. answer(d:set("x", 1)),
                }
            end)
            assert_refused(text, "try " .. i)
        end
    end)

    it("lock_shared: unlock and expire never answer success", function()
        for i = 1, TRIES do
            local text = split("s" .. i, function(d)
                local lock = lock_of(d)
                assert.equal(0, lock:lock_shared("K"))
                return lock
            end, p_holds_k, function(lock)
                return {
                    "expire=" .. answer(lock:expire(30)),
                    "unlock=" .. answer(lock:unlock()),
                }
            end)
            assert_refused(text, "try " .. i)
        end
    end)

    it("a semaphore's permit: release and expire never answer success",
       function()
        for i = 1, TRIES do
            local text = split("p" .. i, function(d)
                local sem = assert(semaphore:new(d, { permits = 1,
                                                      exptime = 60 }))
                assert.equal(0, sem:acquire("K", 0))
                return sem
            end, p_holds_k, function(sem)
                return {
                    "expire=" .. answer(sem:expire(30)),
                    "release=" .. answer(sem:release()),
                }
            end)
            assert_refused(text, "try " .. i)
        end
    end)

    it("a process of the removed zone takes nothing P holds", function()
        for i = 1, TRIES do
            local text = split("a" .. i, function(d)
                assert(d:set("seen", 1))   -- its file looked at just now
                return { lock_of(d), lock_of(d),
                         assert(semaphore:new(d, { permits = 1 })) }
            end, p_holds_k, function(o, d)
                return {
                    "trylock=" .. answer(o[1]:trylock("K")),
                    "shared=" .. answer(o[2]:lock_shared("K", 0)),
                    "permit=" .. answer(o[3]:acquire("K", 0)),
                    "set=" .. answer(d:set("x", 1)),
                    "incr=" .. answer(d:incr("n", 1, 0)),
                }
            end)
            assert_refused(text, "try " .. i)
        end
    end)

    -- H holds K; its unlock once P holds K anew: refused, and P's scan
    -- marked the one removed file it found
    local function exclusive(name, opts)
        local text, scan = split(name, function(d)
            local lock = lock_of(d)
            assert.equal(0, lock:lock("K"))
            return lock
        end, p_holds_k, function(lock, d)
            return {
                "dead=" .. answer(lib.shmlock_zone_dead_word(d._zone)[0]),
                "unlock=" .. answer(lock:unlock()),
            }
        end, opts)
        assert.equal("dead=2|nil\nunlock=nil|" .. REMOVED, text)
        assert.same({ 1, 0 }, { scan.marked, scan.unreachable })
        return scan
    end

    it("found in /dev/shm itself (no directory given)", function()
        exclusive("rmspec" .. proc.getpid(), { dir = false })
    end)

    it("found in SHMLOCK_DIR, a directory reached through a symbolic link",
       function()
        -- on the file system of TMPDIR (or /tmp), not /dev/shm's if they
        -- differ; maps names files by their real path
        local real = (os.getenv("TMPDIR") or "/tmp") .. "/shmlock-spec-rm"
                     .. proc.getpid()
        assert(os.execute("mkdir -m 0700 '" .. real .. "'"))
        fx:defer(function() proc.rmtree(real) end)
        local link = dir .. "/link"
        assert(os.execute("ln -s '" .. real .. "' '" .. link .. "'"))
        exclusive("envdir", { dir = false, env = link })
    end)

    -- without map_files (root only: CAP_SYS_ADMIN), the file is reached
    -- through the fd the holder keeps on it: both processes drop every
    -- capability (a plain user's lot; as root, they would open map_files)
    it("reached through the holder's fd where map_files is denied",
       function()
        ffi.cdef [[
            typedef struct { uint32_t version; int pid; } rm_cap_hdr_t;
            typedef struct { uint32_t eff, perm, inh; } rm_cap_data_t;
            int capset(rm_cap_hdr_t *hdr, const rm_cap_data_t *data);
        ]]
        local function drop_caps()
            local hdr = ffi.new("rm_cap_hdr_t", { 0x20080522, 0 })
            local data = ffi.new("rm_cap_data_t[2]")
            assert(ffi.C.capset(hdr, data) == 0, "capset")
        end
        exclusive("nocaps", { setup = drop_caps })
    end)

    -- the process that took the mapping's flock is gone (its child
    -- inherited the mapping): /proc/locks names a process with no such
    -- maps line, and every process's maps is read instead
    it("a flock whose process is gone: the full scan finds the mapping",
       function()
        local process = require "resty.shmlock.cli.process"
        pcall(ffi.cdef, "ssize_t readlink(const char *path, char *buf, "
                        .. "size_t size);")
        local name = "orphan"
        local ready, go, done = proc.pipe(), proc.pipe(), proc.pipe()
        local out = dir .. "/orphan.out"
        -- the parent maps the zone (its flock), forks the holder, exits
        local parent = proc.spawn(function()
            local d = assert(shdict.open(name, { dir = dir, size = "64k" }))
            proc.spawn(function()
                ready:close_read()
                done:close_read()
                go:close_write()
                -- every other pipe closed, its parent's error pipe among
                -- them: the parent's end is seen at its exit
                local keep = { [ready.w] = true, [done.w] = true,
                               [go.r] = true }
                local buf = ffi.new("char[64]")
                for fd = 3, 1023 do
                    local n = ffi.C.readlink("/proc/self/fd/" .. fd, buf, 64)
                    if not keep[fd] and n > 5
                       and ffi.string(buf, 5) == "pipe:"
                    then
                        process.close(fd)
                    end
                end
                local lock = lock_of(d)
                assert.equal(0, lock:lock("K"))
                ready:notify()
                assert(go:wait_release(30), "no go")
                checkout.write_file(out, answer(lock:unlock()))
                done:notify()
            end)
        end)
        ready:close_write()
        done:close_write()
        assert.is_true(ready:await(30), "the holder did not lock")
        assert.equal(0, proc.wait(parent, 30).code)
        fx:defer(function() shdict.destroy(name, { dir = dir }) end)
        assert(os.remove(dir .. "/shmlock." .. name))
        local d = assert(shdict.open(name, { dir = dir, size = "64k" }))
        local scan = ffi.new("uint32_t[6]")
        lib.shmlock_test_removed_scan(scan)
        assert.same({ 1, 0, 1 }, { scan[2], scan[3], scan[5] })
        local lock = lock_of(d)
        assert.equal(0, lock:trylock("K"))
        go:release()
        assert.is_true(done:await(30), "the holder did not answer")
        assert.equal("nil|" .. REMOVED, checkout.read_file(out))
        assert.equal(1, lock:unlock())
    end)

    -- another program holds an exclusive flock on a zone file (L): a
    -- process attaching meanwhile (H) cannot take its shared flock, so
    -- /proc/locks does not list it.  Returns L's and H's pids, with H
    -- holding K and running h_after(lock, d) when `go` is released.
    pcall(ffi.cdef, "int flock(int fd, int op);")
    pcall(ffi.cdef, "int open(const char *path, int flags, ...);")
    local LOCK_EX, LOCK_UN = 2, 8

    local function flocks_of(pid)
        local n = 0
        for line in io.lines("/proc/locks") do
            if line:match("^%d+: FLOCK +ADVISORY +READ +" .. pid .. " ") then
                n = n + 1
            end
        end
        return n
    end

    local function unlisted(name, unlock, go, done, h_after)
        local file = dir .. "/shmlock." .. name
        local maker = proc.spawn(function()
            assert(shdict.open(name, { dir = dir, size = "64k" }))
        end)
        assert.equal(0, proc.wait(maker, 30).code)
        local locked, held = proc.pipe(), proc.pipe()
        local l = proc.spawn(function()
            locked:close_read()
            go:close()
            done:close()
            held:close()
            local fd = ffi.C.open(file, 0)
            assert(fd >= 0 and ffi.C.flock(fd, LOCK_EX) == 0)
            locked:notify()
            assert(unlock:wait_release(30), "no unlock")
            ffi.C.flock(fd, LOCK_UN)
        end)
        locked:close_write()
        assert.is_true(locked:await(30), "L did not lock")
        local h = proc.spawn(function()
            held:close_read()
            done:close_read()
            unlock:close()
            locked:close()
            local d = assert(shdict.open(name, { dir = dir, size = "64k" }))
            local lock = lock_of(d)
            assert.equal(0, lock:lock("K"))
            held:notify()
            assert(go:wait_release(30), "no go")
            checkout.write_file(dir .. "/" .. name .. ".out",
                                h_after(lock, d))
            done:notify()
        end)
        held:close_write()
        done:close_write()
        assert.is_true(held:await(30), "H did not lock")
        assert.equal(0, flocks_of(h))
        locked:close_read()
        held:close_read()
        return l, h
    end

    it("another program's exclusive flock: the full scan finds the "
       .. "mapping it kept out of /proc/locks", function()
        local unlock, go, done = proc.pipe(), proc.pipe(), proc.pipe()
        local l, h = unlisted("exflock", unlock, go, done, function(lock)
            return answer(lock:unlock())
        end)
        fx:defer(function() shdict.destroy("exflock", { dir = dir }) end)
        assert(os.remove(dir .. "/shmlock.exflock"))
        local d = assert(shdict.open("exflock", { dir = dir, size = "64k" }))
        local scan = ffi.new("uint32_t[6]")
        lib.shmlock_test_removed_scan(scan)
        assert.same({ 1, 0, 1 }, { scan[2], scan[3], scan[5] })
        assert.equal(0, lock_of(d):trylock("K"))
        go:release()
        assert.is_true(done:await(30), "H did not answer")
        unlock:release()
        assert.same({ 0, 0 }, { proc.wait(h, 30).code, proc.wait(l, 30).code })
        assert.equal("nil|" .. REMOVED,
                     checkout.read_file(dir .. "/exflock.out"))
    end)

    it("another program's exclusive flock gone: the next look at the file "
       .. "takes the flock", function()
        local unlock, go, done = proc.pipe(), proc.pipe(), proc.pipe()
        local l, h = unlisted("exgone", unlock, go, done, function(_, d)
            -- each call looks at the file once per SHMLOCK_WATCH_MS: the
            -- flock is taken at one of them (10 s at most)
            local listed = env.wait_for(function()
                assert(d:get("x") == nil)
                return flocks_of(proc.getpid()) == 1
            end, 10)
            return tostring(listed)
        end)
        fx:defer(function() shdict.destroy("exgone", { dir = dir }) end)
        unlock:release()
        assert.equal(0, proc.wait(l, 30).code)
        go:release()
        assert.is_true(done:await(30), "H did not answer")
        assert.equal(0, proc.wait(h, 30).code)
        assert.equal("true", checkout.read_file(dir .. "/exgone.out"))
    end)

    -- O opens the old file just before its removal and maps it after P's
    -- scan, which saw no mapping of it: O's attach looks at the file once
    -- mapped, finds it removed, and reaches the zone the name reaches now
    it("an opener between the removal and the scan reaches the new zone",
       function()
        local name = "opener"
        -- the old zone, made by a process that is gone: nobody maps it
        local maker = proc.spawn(function()
            assert(shdict.open(name, { dir = dir, size = "64k" }))
        end)
        assert.equal(0, proc.wait(maker, 30).code)
        local opened, go, done = proc.pipe(), proc.pipe(), proc.pipe()
        local p_ready, p_go = proc.pipe(), proc.pipe()
        local out = dir .. "/o.out"
        local o = proc.spawn(function()
            opened:close_read()
            go:close_write()
            done:close_read()
            p_ready:close()
            p_go:close()
            lib.shmlock_test_attach_pause(opened.w, go.r)
            local d = assert(shdict.open(name, { dir = dir, size = "64k" }))
            local lock = lock_of(d)
            checkout.write_file(out, table.concat({
                "get=" .. answer(d:get("p")),
                "trylock=" .. answer(lock:trylock("K")),
            }, "\n"))
            done:notify()
        end)
        opened:close_write()
        done:close_write()
        go:close_read()
        assert.is_true(opened:await(30), "O did not open")
        assert(os.remove(dir .. "/shmlock." .. name))
        local p = proc.spawn(function()
            p_ready:close_read()
            opened:close()
            done:close()
            go:close()
            local d = assert(shdict.open(name, { dir = dir, size = "64k" }))
            assert(d:set("p", 1))
            p_holds_k(d)
            local scan = ffi.new("uint32_t[6]")
            lib.shmlock_test_removed_scan(scan)
            checkout.write_file(out .. ".scan", tostring(scan[1]))
            p_ready:notify()
            assert(p_go:wait_release(30), "no go")
        end)
        p_ready:close_write()
        assert.is_true(p_ready:await(30), "P did not take the key")
        go:release()
        assert.is_true(done:await(30), "O did not answer")
        p_go:release()
        local ro, rp = proc.wait(o, 30), proc.wait(p, 30)
        assert.same({ "exit", 0, "exit", 0 },
                    { ro.how, ro.code, rp.how, rp.code }, ro.msg or rp.msg)
        opened:close_read()
        done:close_read()
        p_ready:close_read()
        -- the scan saw no mapping of the old file: O had none yet
        assert.equal("0", checkout.read_file(out .. ".scan"))
        assert.equal("get=1|nil\ntrylock=nil|timeout",
                     checkout.read_file(out))
    end)
end)

-- The instant the scan cannot close: a call that read the dead word
-- before the creator's mark and makes its step after it.  Each call reads
-- the word again after its step (shm_watch_after): a mark it finds there
-- turns its answer into a refusal, and an acquisition gives its key back.
-- The test build marks the zone when the call takes a shard's mutex
-- (shmlock_test_dead_at_lock); the lock's lock-free paths do not read the
-- word before their CAS at all, so a mark made before them stands in.
describe("a zone marked dead in the middle of a call", function()
    local fx = fixture.new { dir = "test", children = "assert" }
    local semaphore = require "resty.shmlock.semaphore"
    local ffi = require "ffi"
    local d, word

    before_each(function()
        d = fx:zone("mid", { size = "64k" })
        word = ffi.cast("uint32_t *", lib.shmlock_zone_dead_word(d._zone))
    end)

    -- fn() with the mark made once it holds a shard's mutex; then the
    -- zone alive again, to see what the call left behind.  Returns fn's
    -- two answers and the mark (2 when the call took the mutex).
    local function mid(fn)
        lib.shmlock_test_dead_at_lock(d._zone)
        local a, b = fn()
        lib.shmlock_test_dead_at_lock(nil)
        local marked = word[0]
        word[0] = 0
        return { a, b, marked }
    end

    -- fn() with the mark made before it
    local function before(fn)
        word[0] = 2
        local a, b = fn()
        word[0] = 0
        return { a, b }
    end

    local function sem_of()
        return assert(semaphore:new(d, { permits = 1 }))
    end

    local function lock_of()
        return assert(resty_lock:new(d, { exptime = 60 }))
    end

    it("a permit taken is given back", function()
        assert.same({ nil, REMOVED, 2 },
                    mid(function() return sem_of():acquire("K", 0) end))
        assert.equal(0, sem_of():count("K"))
    end)

    it("a shared hold taken is given back", function()
        local reader = lock_of()
        assert.same({ nil, REMOVED, 2 },
                    mid(function() return reader:lock_shared("K", 0) end))
        local writer = lock_of()
        assert.equal(0, writer:trylock("K"))
        assert.equal(1, writer:unlock())
    end)

    it("a permit's release and lease answer the removal", function()
        local sem = sem_of()
        assert.equal(0, sem:acquire("K", 0))
        assert.same({ nil, REMOVED, 2 },
                    mid(function() return sem:expire(30) end))
        assert.same({ nil, REMOVED, 2 },
                    mid(function() return sem:release() end))
        assert.equal(0, sem_of():count("K"))
    end)

    it("a shared hold's release answers the removal", function()
        local reader = lock_of()
        assert.equal(0, reader:lock_shared("K"))
        assert.same({ nil, REMOVED, 2 },
                    mid(function() return reader:unlock() end))
    end)

    it("a key's first lock, taken under the mutex, is given back", function()
        assert.same({ nil, REMOVED, 2 },
                    mid(function() return lock_of():trylock("first") end))
        local other = lock_of()
        assert.equal(0, other:trylock("first"))
        assert.equal(1, other:unlock())
    end)

    it("the dictionary's writes answer the removal", function()
        assert(d:set("n", 1))
        assert.same({ false, REMOVED, 2 },
                    mid(function() return d:set("x", 1) end))
        assert.same({ false, REMOVED, 2 },
                    mid(function() return d:add("y", 1) end))
        assert.same({ nil, REMOVED, 2 },
                    mid(function() return d:incr("n", 1) end))
        assert.same({ false, REMOVED, 2 },
                    mid(function() return d:delete("n") end))
    end)

    it("the lock's lock-free acquire and release read the word after their "
       .. "CAS", function()
        local lock, other = lock_of(), lock_of()
        assert.equal(0, lock:trylock("K"))       -- K's slot made
        assert.equal(1, lock:unlock())
        -- taken, then given back
        assert.same({ nil, REMOVED },
                    before(function() return lock:trylock("K") end))
        assert.equal(0, other:trylock("K"))
        assert.equal(1, other:unlock())
        -- not answered 1 (released or not: the release reads the word
        -- after its CAS, or refuses before it when its look at the file
        -- is due)
        assert.equal(0, lock:trylock("K"))
        assert.same({ nil, REMOVED },
                    before(function() return lock:expire(30) end))
        assert.same({ nil, REMOVED },
                    before(function() return lock:unlock() end))
    end)
end)
