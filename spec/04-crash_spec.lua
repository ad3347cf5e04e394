-- Processes that die holding the zone mutex, and processes that die at
-- every structural write of every kind of update: the others must go on
-- within a fraction of a second, and the dictionary must hold, for every
-- key, exactly its old or its new value.

local proc = require "harness.proc"
local fixture = require "helpers.fixture"
local shdict = require "resty.shmlock.shdict"
local lib = require "helpers.test_hooks"
local children = require "helpers.children"

local fmt = string.format
local concat = table.concat
local sort = table.sort

-- seconds the others may be held up by a death: a ceiling only a takeover
-- that does not happen reaches (the others would wait on the mutex for
-- ever, or on a zombie until it is reaped, after the check), not a margin
-- (forking three children of an ASan-built LuaJIT on a loaded machine has
-- no bound of its own)
local TAKEOVER_LIMIT = 5


local function show_values(t, n)
    local out = {}
    for i = 1, n do
        local v = t[i]
        out[i] = type(v) == "string" and fmt("%q", v) or tostring(v)
    end
    return "(" .. concat(out, ", ") .. ")"
end

local function ttl_class(ttl)
    if ttl == nil then
        return "expired"
    elseif ttl == 0 then
        return "forever"
    end
    return "~" .. math.ceil(ttl / 100) .. "00s"
end

-- a list's elements, popped (the snapshot is the zone's last use but for
-- check_usable, which empties it anyway)
local function list_state(dict, key)
    local ttl = dict:ttl(key)
    if ttl == nil then
        return "list stale=true"
    end
    local elems = {}
    for _ = 1, 10000 do
        local e = dict:lpop(key)
        if e == nil then
            break
        end
        elems[#elems + 1] = type(e) == "string" and fmt("%q", e)
                            or tostring(e)
    end
    return fmt("list [%s] ttl=%s", concat(elems, ", "), ttl_class(ttl))
end

-- what a snapshot records of one key: type, value, flags, stale, ttl class
local function key_state(dict, key)
    local v, flags, stale = dict:get_stale(key)
    if v == nil then
        if flags == "value is a list" then
            return list_state(dict, key)
        end
        return "absent"
    end
    local class = ttl_class(dict:ttl(key))
    return fmt("%s %s flags=%s stale=%s ttl=%s", type(v),
               type(v) == "string" and fmt("%q", v) or tostring(v),
               tostring(flags), tostring(stale), class)
end

-- every key's state, the live key list and the free space, as a table
-- and as one comparable text (the free space and the keys first: reading
-- a list pops it)
local function snapshot(dict, keys)
    local snap = { keys = {} }
    local lines = {}
    local live = dict:get_keys(0)
    sort(live)
    snap.live = concat(live, " ")
    snap.free = dict:free_space()
    for i, key in ipairs(keys) do
        local s = key_state(dict, key)
        snap.keys[key] = s
        lines[i] = key .. ": " .. s
    end
    lines[#lines + 1] = "live: " .. snap.live
    lines[#lines + 1] = "free: " .. snap.free
    snap.text = concat(lines, "\n")
    return snap
end

-- the lines of `now` that are in neither `before` nor `after`, each with
-- its old and new form
local function differences(before, after, now)
    local b, a = {}, {}
    for line in before.text:gmatch("[^\n]+") do
        b[#b + 1] = line
    end
    for line in after.text:gmatch("[^\n]+") do
        a[#a + 1] = line
    end
    local out = {}
    local i = 0
    for line in now.text:gmatch("[^\n]+") do
        i = i + 1
        if line ~= b[i] and line ~= a[i] then
            out[#out + 1] = "  got:    " .. line .. "\n  old:    " .. b[i]
                            .. "\n  new:    " .. a[i]
        end
    end
    if #out == 0 then
        out[1] = "  each line is old or new, but not all from the same side"
    end
    return concat(out, "\n")
end


describe("resty.shmlock.shdict when a process dies", function()
    local fx = fixture.new { children = "assert" }
    local dir

    before_each(function()
        dir = fx.dir
    end)

    local function open(name, size)
        local dict, err = shdict.open(name, { dir = dir, size = size or "64k" })
        assert.is_nil(err)
        assert.is_table(dict)
        return dict
    end

    local function exit_of(r)
        return { how = r.how, code = r.code, sig = r.sig, msg = r.msg }
    end

    local CLEAN = { how = "exit", code = 0, msg = "" }
    local KILLED = { how = "signal", sig = proc.SIGKILL, msg = "" }

    -- a child that takes the zone mutex, says so, then sleeps holding it
    -- until a byte comes through the pipe `go` (or until killed)
    local spawn_holder = children.mutex_holder

    -- children that each write and read back their own keys
    local function spawn_workers(dict, n)
        local pids = {}
        for i = 1, n do
            pids[i] = proc.spawn(function()
                local ok, err = dict:set("w" .. i, "worker " .. i, 0, i)
                if not ok then
                    error("set: " .. tostring(err))
                end
                local v, flags = dict:get("w" .. i)
                if v ~= "worker " .. i or flags ~= i then
                    error("get: " .. tostring(v) .. " " .. tostring(flags))
                end
                local hits
                hits, err = dict:incr("hits", 1, 0)
                if not hits then
                    error("incr: " .. tostring(err))
                end
            end)
        end
        return pids
    end

    local function check_workers(dict, pids, started)
        local res = proc.wait_all(pids, 10)
        local elapsed = proc.now() - started
        for i, r in ipairs(res) do
            assert.same(CLEAN, exit_of(r), "worker " .. i)
        end
        assert.is_true(elapsed < TAKEOVER_LIMIT,
                       fmt("the workers took %.3f s", elapsed))
        for i = 1, #pids do
            assert.same({ "worker " .. i, i }, { dict:get("w" .. i) })
        end
        assert.equal(#pids, dict:get("hits"))
        assert.same({ true }, { dict:verify() })
    end

    -- a 4m zone has 4 shards, each with its own mutex: the holder takes
    -- them all
    for _, size in ipairs({ "64k", "4m" }) do
        describe("holding the zone mutex (" .. size .. " zone)", function()
            it("does not wedge the others once killed and reaped", function()
                local dict = open("reaped", size)
                assert.is_true((dict:set("before", "kept", 0, 5)))

                local holder = spawn_holder(dict)
                proc.kill(holder)
                assert.same(KILLED, exit_of(proc.wait(holder, 5)))

                local started = proc.now()
                check_workers(dict, spawn_workers(dict, 3), started)
                assert.same({ "kept", 5 }, { dict:get("before") })
            end)

            it("makes the process that recovers the shard report it, "
               .. "at warn", function()
                local dict = open("reported", size)
                local got = {}
                shdict.set_logger(function(level, msg)
                    got[#got + 1] = level .. ": " .. msg
                end)
                local holder = spawn_holder(dict)
                proc.kill(holder)
                assert.same(KILLED, exit_of(proc.wait(holder, 5)))
                assert.is_true((dict:set("k", 1)))
                assert.is_true((dict:set("k", 2)))
                shdict.set_logger(nil)
                assert.equal(1, #got, concat(got, "\n"))
                assert.matches('^warn: shmlock: zone "reported": %d+ '
                               .. "shard%(s%) recovered after their mutex "
                               .. "holder died", got[1])
            end)

            it("does not wedge the others while it is an unreaped zombie",
               function()
                local dict = open("zombie", size)
                assert.is_true((dict:set("before", "kept", 0, 5)))

                local holder = spawn_holder(dict)
                proc.kill(holder)
                local deadline = proc.now() + 5
                while proc.state(holder) ~= "Z" and proc.now() < deadline do
                    proc.sleep(0.001)
                end
                assert.equal("Z", proc.state(holder))

                local started = proc.now()
                check_workers(dict, spawn_workers(dict, 3), started)

                -- the workers went on while the holder was still a zombie
                assert.equal("Z", proc.state(holder))
                assert.same(KILLED, exit_of(proc.wait(holder, 5)))
                assert.same({ "kept", 5 }, { dict:get("before") })
            end)

            it("lets waiters asleep on the mutex take over when it dies",
               function()
                local dict = open("asleep", size)
                local holder = spawn_holder(dict)

                local pids = spawn_workers(dict, 3)
                for i, pid in ipairs(pids) do
                    assert.is_true(proc.await_futex_sleep(pid, 5),
                                   "worker " .. i
                                   .. " never slept on the mutex")
                end
                for i, pid in ipairs(pids) do
                    assert.is_nil(proc.try_wait(pid),
                                  "worker " .. i .. " got past a live holder")
                end

                local started = proc.now()
                proc.kill(holder)
                check_workers(dict, pids, started)
                assert.same(KILLED, exit_of(proc.wait(holder, 5)))
            end)

            it("is never taken over while it is alive", function()
                local dict = open("alive", size)
                local go = proc.pipe()
                local holder = spawn_holder(dict, go)

                local pids = spawn_workers(dict, 2)
                for i, pid in ipairs(pids) do
                    assert.is_true(proc.await_futex_sleep(pid, 5),
                                   "worker " .. i
                                   .. " never slept on the mutex")
                end
                -- forty of the waiters' 5 ms liveness checks
                proc.sleep(0.2)
                for i, pid in ipairs(pids) do
                    assert.is_nil(proc.try_wait(pid),
                                  "worker " .. i
                                  .. " took a live holder's mutex")
                end

                local started = proc.now()
                assert.is_true(go:notify())
                assert.same(CLEAN, exit_of(proc.wait(holder, 5)))
                check_workers(dict, pids, started)
            end)
        end)
    end

    describe("at random moments of a storm of updates", function()
        -- self-describing values: a torn or misplaced one does not parse
        local function value_for(key, seq)
            local head = key .. "|" .. seq .. "|"
            return head .. string.char(97 + seq % 26):rep(seq % 150)
        end

        local function check_value(key, v)
            if v == nil then
                return
            end
            local k, seq, rest = tostring(v):match("^([^|]+)|(%d+)|(.*)$")
            seq = tonumber(seq)
            if k ~= key or #rest ~= seq % 150
               or rest:find("[^" .. string.char(97 + seq % 26) .. "]")
            then
                error(key .. ": bad value " .. tostring(v):sub(1, 60))
            end
        end

        for _, size in ipairs({ "64k", "4m" }) do
            it("keeps the survivors' updates exact while others are killed "
               .. "at random (" .. size .. " zone)", function()
                local SURVIVORS, SHARED = 3, 40
                local dict = open("storm", size)
                local empty = dict:free_space()

                local start = proc.pipe()
                local survivors = {}
                for s = 1, SURVIVORS do
                    survivors[s] = proc.spawn(function()
                        if not start:wait_release(10) then
                            error("never released")
                        end
                        local own, counter = "own" .. s, "c" .. s
                        local deadline = proc.now() + 120
                        local count, seq = 0, 0
                        math.randomseed(proc.getpid())
                        while not dict:get("stop") do
                            if proc.now() > deadline then
                                error("never told to stop")
                            end
                            seq = seq + 1
                            local v, err = dict:incr(counter, 1, 0)
                            if v ~= count + 1 then
                                error(counter .. ": " .. tostring(v)
                                      .. " after " .. count .. " "
                                      .. tostring(err))
                            end
                            count = v

                            local mine = value_for(own, seq)
                            local ok
                            ok, err = dict:set(own, mine)
                            if not ok then
                                error("set " .. own .. ": " .. tostring(err))
                            end
                            if dict:get(own) ~= mine then
                                error(own .. " lost its value at " .. seq)
                            end
                            local k = "v" .. math.random(SHARED)
                            check_value(k, dict:get(k))
                        end
                        local f = assert(io.open(dir .. "/count." .. s, "w"))
                        f:write(count, "\n")
                        f:close()
                    end)
                end
                start:release()
                start:close()

                -- victims: write shared keys flat out until they die at a
                -- random structural write (mid-update, holding the mutex) or
                -- are killed wherever they are; for 1.5 s and at least 50
                -- kills (a count: a loaded machine kills fewer in 1.5 s)
                local kills, until_t = 0, proc.now() + 1.5
                math.randomseed(42)
                while kills < 50 or proc.now() < until_t do
                    local victim = proc.spawn(function()
                        math.randomseed(proc.getpid())
                        lib.shmlock_test_crash_at(math.random(1, 300))
                        local seq = 0
                        local stop = proc.now() + 5
                        while proc.now() < stop do
                            seq = seq + 1
                            local k = "v" .. (seq % SHARED + 1)
                            local r = seq % 5
                            if r == 0 then
                                dict:delete(k)
                            elseif r == 1 then
                                dict:incr("hits", 1, 0)
                            else
                                dict:set(k, value_for(k, seq))
                            end
                        end
                    end)
                    proc.sleep(math.random(0, 4) / 1000)
                    proc.kill(victim)
                    local r = proc.wait(victim, 5)
                    assert.same(KILLED, exit_of(r))
                    kills = kills + 1
                end
                assert.is_true((dict:set("stop", true)))

                local res = proc.wait_all(survivors, 10)
                for s, r in ipairs(res) do
                    assert.same(CLEAN, exit_of(r), "survivor " .. s)
                end

                assert.same({ true }, { dict:verify() })
                for s = 1, SURVIVORS do
                    local f = assert(io.open(dir .. "/count." .. s))
                    local count = tonumber(f:read("*a"))
                    f:close()
                    assert.is_true(count > 0)
                    assert.equal(count, dict:get("c" .. s))
                end
                for k = 1, SHARED do
                    check_value("v" .. k, dict:get("v" .. k))
                end
                dict:flush_all()
                dict:flush_expired()
                assert.equal(empty, dict:free_space())
                assert.same({ true }, { dict:verify() })
            end)
        end
    end)


    describe("at every structural write of an update", function()
        local T = "target"

        -- keys that share the target's hash chain (low 12 bits of the
        -- hash: the bucket index of any zone of up to 4096 buckets)
        local mates = {}
        do
            local want = bit.band(lib.shmlock_hash(T, #T), 0xfff)
            local i = 0
            while #mates < 3 do
                i = i + 1
                local k = "mate" .. i
                if bit.band(lib.shmlock_hash(k, #k), 0xfff) == want then
                    mates[#mates + 1] = k
                end
            end
        end

        local LONG_KEY = ("K"):rep(100)
        local KEY22 = ("k"):rep(22)

        -- the keys every 64k scenario starts with, around the target
        local function populate(dict, with_target)
            local function ok(...)
                assert.is_true((...))
            end
            ok(dict:set("s0", ""))
            ok(dict:set(mates[1], "mate one", 0, 11))
            ok(dict:set("s5", "hello", 0, 1))
            ok(dict:set("s16", ("x"):rep(16)))
            ok(dict:add("a1", "lock-a1", 1000))
            ok(dict:set(mates[2], 2.5))
            ok(dict:set("s77", ("y"):rep(77), 0, 77))
            ok(dict:set("n1", 3.25))
            ok(dict:set("n2", -7, 0, 12))
            if with_target then
                with_target(dict)
            end
            ok(dict:set(mates[3], true, 2000))
            ok(dict:set("s300", ("z"):rep(300), 1000))
            ok(dict:set("b1", true))
            ok(dict:add("a2", 99))
            ok(dict:set("b2", false, 2000, 3))
            ok(dict:set(LONG_KEY, "long key's value"))
        end

        local COMMON_KEYS = { "s0", "s5", "s16", "s77", "s300", "n1", "n2",
                              "b1", "b2", "a1", "a2", LONG_KEY, mates[1],
                              mates[2], mates[3], T }

        local function target(fn)
            return function(dict)
                populate(dict, fn)
            end
        end

        local function set_target(...)
            local args = { ... }
            return target(function(dict)
                assert.is_true((dict:set(T, unpack(args))))
            end)
        end

        local function add_target(...)
            local args = { ... }
            return target(function(dict)
                assert.is_true((dict:add(T, unpack(args))))
            end)
        end

        -- entries set earlier, now expired in place (expire() keeps their
        -- position in the LRU list; sets of new entries would not)
        local function expire_now(dict, keys)
            for _, k in ipairs(keys) do
                assert.is_true((dict:expire(k, 0.001)))
            end
            proc.sleep(0.003)
        end

        local function keys_of(prefix, n)
            local t = {}
            for i = 1, n do
                t[i] = prefix .. i
            end
            return t
        end

        local function concat_lists(...)
            local out = {}
            for _, l in ipairs { ... } do
                for _, v in ipairs(l) do
                    out[#out + 1] = v
                end
            end
            return out
        end

        -- pinned entries until the zone takes no more (safe_add: nothing
        -- is evicted for them): nothing is free, only set() entries could
        -- still be evicted
        local function fill_pinned(dict)
            local i = 0
            while true do
                i = i + 1
                local ok, err = dict:safe_add("f" .. i, ("f"):rep(50))
                if not ok then
                    assert.equal("no memory", err)
                    break
                end
            end
            while dict:safe_add("g" .. i, "") do
                i = i + 1
            end
            assert.equal(0, dict:free_space())
        end

        local big = ("B"):rep(2000)

        -- a list at the target: strings of several lengths and numbers
        local function list_target(n, exptime)
            return target(function(dict)
                for i = 1, n do
                    local len = assert(dict:rpush(T, i % 3 == 0 and i * 1.5
                                                  or ("l" .. i):rep(i * 9)))
                    assert.equal(i, len)
                end
                if exptime then
                    assert.is_true((dict:expire(T, exptime)))
                end
            end)
        end

        -- op returns what the child must see; atomic scenarios must leave
        -- the whole zone exactly as before or as after, the others
        -- (several independent steps) each key as before or as after
        local scenarios = {
            {
                name = "lpush of a new key",
                setup = target(),
                op = function(d) return d:lpush(T, ("n"):rep(100)) end,
                expect = { 1 },
            },
            {
                name = "rpush onto a list",
                setup = list_target(3),
                op = function(d) return d:rpush(T, ("r"):rep(150)) end,
                expect = { 4 },
            },
            {
                name = "lpush onto a list",
                setup = list_target(3, 1000),
                op = function(d) return d:lpush(T, 7.25) end,
                expect = { 4 },
            },
            {
                name = "lpop of a list",
                setup = list_target(4),
                op = function(d) return d:lpop(T) end,
                expect = { ("l1"):rep(9) },
            },
            {
                name = "rpop of a list",
                setup = list_target(4, 1000),
                op = function(d) return d:rpop(T) end,
                expect = { ("l4"):rep(36) },
            },
            {
                name = "rpop of a list's last element (the key goes)",
                setup = list_target(1),
                op = function(d) return d:rpop(T) end,
                expect = { ("l1"):rep(9) },
            },
            {
                name = "lpush onto an expired list (a new list in its place)",
                setup = function(dict)
                    list_target(3)(dict)
                    expire_now(dict, { T })
                end,
                op = function(d) return d:lpush(T, "fresh") end,
                expect = { 1 },
            },
            {
                name = "set over a list",
                setup = list_target(5),
                op = function(d) return d:set(T, "plain", 0, 4) end,
                expect = { true, nil, false },
            },
            {
                name = "delete of a list",
                setup = list_target(5),
                op = function(d) return d:delete(T) end,
                expect = { true, nil, false },
            },
            {
                name = "incr with init over an expired list",
                setup = function(dict)
                    list_target(2)(dict)
                    expire_now(dict, { T })
                end,
                op = function(d) return d:incr(T, 2, 40) end,
                expect = { 42, nil, false },
            },
            {
                name = "set of a new key",
                setup = target(),
                op = function(d) return d:set(T, ("n"):rep(100), 0, 3) end,
                expect = { true, nil, false },
            },
            {
                name = "set of an existing key, to a longer value",
                setup = set_target("small", 0, 1),
                op = function(d) return d:set(T, ("g"):rep(200), 0, 2) end,
                expect = { true, nil, false },
            },
            {
                name = "set of an existing key, to a shorter value",
                setup = set_target(("o"):rep(200), 1000, 5),
                op = function(d) return d:set(T, "tiny") end,
                expect = { true, nil, false },
            },
            {
                name = "set of an existing string rewritten in place "
                       .. "(same chunk count)",
                setup = set_target(("p"):rep(150), 1000, 5),
                op = function(d) return d:set(T, ("q"):rep(140), 0, 6) end,
                expect = { true, nil, false },
            },
            {
                name = "set of an add()ed key rewritten in place (it leaves "
                       .. "the pinned class)",
                setup = add_target(("r"):rep(30), 0, 2),
                op = function(d) return d:set(T, ("t"):rep(31), 500) end,
                expect = { true, nil, false },
            },
            {
                name = "set of a number over a number, same flags and no "
                       .. "expiry (one store in place)",
                setup = set_target(41, 0, 2),
                op = function(d) return d:set(T, 42.5, 0, 2) end,
                expect = { true, nil, false },
                writes = 1,
            },
            {
                name = "set of a boolean over a boolean in place",
                setup = set_target(true, 0, 4),
                op = function(d) return d:set(T, false, nil, 4) end,
                expect = { true, nil, false },
                writes = 1,
            },
            {
                name = "replace of an add()ed number by a number in place "
                       .. "(it stays pinned)",
                setup = add_target(7),
                op = function(d) return d:replace(T, 8) end,
                expect = { true, nil, false },
                writes = 1,
            },
            {
                name = "set of a number over a number, with an expiry",
                setup = set_target(41, 0, 2),
                op = function(d) return d:set(T, 43, 1000, 2) end,
                expect = { true, nil, false },
            },
            {
                name = "set of a number over a number with an expiry, "
                       .. "without one",
                setup = set_target(41, 1000, 2),
                op = function(d) return d:set(T, 44, 0, 2) end,
                expect = { true, nil, false },
            },
            {
                name = "set of a number over a number, other flags",
                setup = set_target(41, 0, 2),
                op = function(d) return d:set(T, 45, 0, 3) end,
                expect = { true, nil, false },
            },
            {
                name = "set of a number over an add()ed number (it leaves "
                       .. "the pinned class)",
                setup = add_target(7),
                op = function(d) return d:set(T, 9) end,
                expect = { true, nil, false },
            },
            {
                name = "set of an existing number, to a boolean",
                setup = set_target(12.5),
                op = function(d) return d:set(T, false, 2000, 8) end,
                expect = { true, nil, false },
            },
            -- (layout 11: a string's head holds 32 bytes of its stream,
            -- another type's 24, and user flags are in the stream only
            -- when not 0: src/entry.h)
            {
                name = "set of a string over a number with flags, in place "
                       .. "(the head's room grows, the flags go)",
                setup = set_target(12.5, 0, 7),
                op = function(d) return d:set(T, ("h"):rep(20)) end,
                expect = { true, nil, false },
            },
            {
                name = "set of a number with flags over a two-chunk string, "
                       .. "in place (the room shrinks, the chain is cut)",
                setup = set_target(("s"):rep(28), 1000),
                op = function(d) return d:set(T, 5.5, 0, 9) end,
                expect = { true, nil, false },
            },
            {
                name = "set of a number with flags over a string of a "
                       .. "22-byte key, in place (the flags cross into the "
                       .. "string's second chunk)",
                keys = concat_lists(COMMON_KEYS, { KEY22 }),
                setup = target(function(dict)
                    assert.is_true((dict:set(KEY22, ("s"):rep(40), 0, 0)))
                end),
                op = function(d) return d:set(KEY22, 5.5, 0, 9) end,
                expect = { true, nil, false },
            },
            {
                name = "set of a string with flags over one without, in "
                       .. "place (the flags come into the stream)",
                setup = set_target(("a"):rep(80)),
                op = function(d) return d:set(T, ("b"):rep(70), 0, 3) end,
                expect = { true, nil, false },
            },
            {
                name = "set of a number over a string of a key longer than "
                       .. "a number's head holds (a new entry)",
                setup = target(),
                op = function(d) return d:set(LONG_KEY, 3.5, 0, 1) end,
                expect = { true, nil, false },
            },
            {
                name = "add of a new key",
                setup = target(),
                op = function(d) return d:add(T, "added", 1000, 6) end,
                expect = { true, nil, false },
            },
            {
                name = "add over an expired key",
                setup = function(dict)
                    populate(dict)
                    -- last: at the LRU head, out of reach of the
                    -- tail reclaim that stores start with
                    assert.is_true((dict:set(T, "stale old", 1000, 1)))
                    expire_now(dict, { T })
                end,
                op = function(d) return d:add(T, "fresh new", 0, 2) end,
                expect = { true, nil, false },
            },
            {
                name = "safe_set of a new key",
                setup = target(),
                op = function(d) return d:safe_set(T, ("f"):rep(40), 0, 1) end,
                expect = { true, nil, false },
            },
            {
                name = "cas to a shorter value in a full zone (shrinks in "
                       .. "place, frees the chunks cut off)",
                size = "32k",
                keys = concat_lists({ T }, keys_of("f", 40)),
                setup = function(dict)
                    assert.is_true((dict:add(T, ("o"):rep(300), 0, 5)))
                    fill_pinned(dict)
                end,
                op = function(d)
                    return d:cas(T, ("o"):rep(300), "short", 1000, 6)
                end,
                expect = { true, nil, false },
            },
            {
                name = "replace by a shorter value in a full zone",
                size = "32k",
                keys = concat_lists({ T }, keys_of("f", 40)),
                setup = function(dict)
                    assert.is_true((dict:set(T, ("w"):rep(130), 0, 1)))
                    fill_pinned(dict)
                end,
                op = function(d) return d:replace(T, ("s"):rep(40), 0, 2) end,
                expect = { true, nil, false },
            },
            {
                name = "replace",
                setup = set_target(1.5, 0, 1),
                op = function(d)
                    return d:replace(T, ("r"):rep(50), 1000, 4)
                end,
                expect = { true, nil, false },
            },
            {
                name = "replace of an add()ed key",
                setup = add_target("lock value", 1000),
                op = function(d)
                    return d:replace(T, ("l"):rep(70), 1000, 2)
                end,
                expect = { true, nil, false },
            },
            {
                name = "delete",
                setup = set_target(("d"):rep(150), 0, 3),
                op = function(d) return d:delete(T) end,
                expect = { true },
            },
            {
                name = "delete of an add()ed key",
                setup = add_target("L", 30),
                op = function(d) return d:delete(T) end,
                expect = { true },
            },
            {
                name = "incr of an existing number",
                setup = set_target(41, 0, 2),
                op = function(d) return d:incr(T, 1) end,
                expect = { 42 },
            },
            {
                name = "incr with init of a missing key",
                setup = target(),
                op = function(d) return d:incr(T, 5, 10, 1000) end,
                expect = { 15, nil, false },
            },
            {
                name = "incr with init of an expired key",
                setup = function(dict)
                    populate(dict)
                    assert.is_true((dict:set(T, 100, 1000)))
                    expire_now(dict, { T })
                end,
                op = function(d) return d:incr(T, 1, 0) end,
                expect = { 1, nil, false },
            },
            {
                name = "cas to a new value",
                setup = set_target("v1"),
                op = function(d)
                    return d:cas(T, "v1", ("c"):rep(80), 0, 9)
                end,
                expect = { true, nil, false },
            },
            {
                name = "cas to the same value with a new expiry and flags",
                setup = add_target("token-1"),
                op = function(d)
                    return d:cas(T, "token-1", "token-1", 1000, 4)
                end,
                expect = { true, nil, false },
            },
            {
                name = "cas to the same value and flags with a new expiry",
                setup = add_target("token-2", 0, 4),
                op = function(d)
                    return d:cas(T, "token-2", "token-2", 1000, 4)
                end,
                expect = { true, nil, false },
            },
            {
                name = "cas of an absent key",
                setup = target(),
                op = function(d) return d:cas(T, nil, "created", 0, 5) end,
                expect = { true, nil, false },
            },
            {
                name = "cad",
                setup = set_target(("v"):rep(30)),
                op = function(d) return d:cad(T, ("v"):rep(30)) end,
                expect = { true },
            },
            {
                name = "expire",
                setup = set_target("x", 0, 7),
                op = function(d) return d:expire(T, 1000) end,
                expect = { true },
            },
            {
                name = "flush_all",
                steps = true,
                setup = set_target("flushed", 0, 1),
                op = function(d) return d:flush_all() end,
                expect = {},
            },
            {
                name = "flush_expired",
                steps = true,
                keys = concat_lists(COMMON_KEYS, keys_of("x", 6)),
                setup = function(dict)
                    populate(dict, function()
                        for i = 1, 3 do
                            assert.is_true((dict:set("x" .. i,
                                                     ("e"):rep(i * 30))))
                        end
                        assert.is_true((dict:add("x4", "pinned", 1000)))
                        assert.is_true((dict:add("x5", 5)))
                        assert.is_true((dict:set(T, "live")))
                    end)
                    assert.is_true((dict:set("x6", 6)))
                    expire_now(dict, keys_of("x", 6))
                end,
                op = function(d) return d:flush_expired() end,
                expect = { 6 },
            },
            {
                name = "set that first reclaims expired entries at the "
                       .. "LRU tail",
                steps = true,
                keys = concat_lists(COMMON_KEYS, { "x1", "x2" }),
                setup = function(dict)
                    assert.is_true((dict:set("x1", ("t"):rep(90), 1000)))
                    assert.is_true((dict:set("x2", 2, 1000)))
                    populate(dict)
                    expire_now(dict, { "x1", "x2" })
                end,
                op = function(d) return d:set(T, "after reclaim", 0, 1) end,
                expect = { true, nil, false },
            },
            {
                name = "set that evicts in a nearly full zone",
                steps = true,
                size = "32k",
                keys = concat_lists({ T, "x1" }, keys_of("e", 120),
                                    keys_of("p", 6)),
                setup = function(dict)
                    for i = 1, 6 do
                        assert.is_true((dict:add("p" .. i, ("p"):rep(100))))
                    end
                    for i = 1, 3 do
                        assert.is_true((dict:set("e" .. i, ("v"):rep(150),
                                                 0, i)))
                    end
                    assert.is_true((dict:set("x1", ("x"):rep(150), 1000)))
                    local n = 3
                    -- fill until less than half the target's 35 chunks
                    -- are free
                    while dict:free_space() >= 16 * 64 do
                        n = n + 1
                        assert.is_true(n <= 120, "the zone never filled")
                        local ok, err, forcible = dict:set("e" .. n,
                                                           ("v"):rep(150),
                                                           0, n)
                        assert.same({ true, nil, false }, { ok, err, forcible })
                    end
                    -- read: a second chance before eviction
                    assert.equal(("v"):rep(150), dict:get("e1"))
                    assert.equal(("v"):rep(150), dict:get("e3"))
                    expire_now(dict, { "x1" })
                end,
                op = function(d) return d:set(T, big, 0, 1) end,
                expect = { true, nil, true },
            },
            {
                name = "safe_set that frees expired entries and still finds "
                       .. "no memory",
                steps = true,
                size = "32k",
                keys = concat_lists({ T }, keys_of("e", 120)),
                setup = function(dict)
                    local n = 0
                    while dict:free_space() >= 4 * 64 do
                        n = n + 1
                        assert.is_true(n <= 120, "the zone never filled")
                        assert.is_true((dict:set("e" .. n, ("s"):rep(150),
                                                 1000, n)))
                    end
                    assert.is_true((dict:set(T, "old", 0, 1)))
                    expire_now(dict, { "e3", "e4", "e8" })
                end,
                op = function(d) return d:safe_set(T, big, 0, 2) end,
                expect = { false, "no memory", false },
            },
            {
                name = "add that sweeps expired add()ed entries in a full zone",
                steps = true,
                size = "32k",
                keys = concat_lists({ T }, keys_of("p", 120)),
                setup = function(dict)
                    local n = 0
                    while dict:free_space() >= 4 * 64 do
                        n = n + 1
                        assert.is_true(n <= 120, "the zone never filled")
                        assert.is_true((dict:add("p" .. n, ("p"):rep(150),
                                                 1000, n)))
                    end
                    expire_now(dict, { "p2", "p5", "p6", "p7", "p9", "p11" })
                end,
                op = function(d) return d:add(T, ("a"):rep(600), 0, 1) end,
                expect = { true, nil, false },
            },
        }

        local empty_free = {}
        local zone_seq = 0

        -- a fresh zone set up for sc (reads would set eviction hints:
        -- the zones the update runs on are not read before it)
        local function prepare(sc)
            local size = sc.size or "64k"
            if not empty_free[size] then
                local dict = open("empty" .. size, size)
                empty_free[size] = dict:free_space()
                assert.is_true((shdict.destroy("empty" .. size, { dir = dir })))
            end
            zone_seq = zone_seq + 1
            local name = "crash" .. zone_seq
            local dict = open(name, size)
            sc.setup(dict)
            return dict, name
        end

        local function spawn_op(sc, dict, n)
            return proc.spawn(function()
                lib.shmlock_test_crash_at(n)
                local r = { sc.op(dict) }
                lib.shmlock_test_crash_at(0)
                local want = sc.expect
                if show_values(r, #want) ~= show_values(want, #want) then
                    error("returned " .. show_values(r, #want)
                          .. ", expected " .. show_values(want, #want))
                end
            end)
        end

        -- the zone still works, and gives every chunk back when emptied
        local function check_usable(dict, size)
            dict:flush_all()
            dict:flush_expired()
            assert.same({}, dict:get_keys(0))
            assert.equal(empty_free[size], dict:free_space())
            assert.same({ true, nil, false },
                        { dict:set("post crash", "works", 0, 3) })
            assert.same({ "works", 3 }, { dict:get("post crash") })
            assert.same({ true, nil, false }, { dict:delete("post crash") })
            assert.equal(empty_free[size], dict:free_space())
            assert.same({ true }, { dict:verify() })
        end

        -- three processes released at once after a death: one of them
        -- takes the mutex over and repairs, all see a sound zone (they
        -- only read: a write could evict and blur the old/new check)
        local function repair_by_children(d, where)
            local start = proc.pipe()
            local pids = {}
            for i = 1, 3 do
                pids[i] = proc.spawn(function()
                    if not start:wait_release(10) then
                        error("never released")
                    end
                    -- a lock-free read first: it must not trust, nor
                    -- wait forever on, what the dead writer left
                    local v = d:get(T)
                    if v ~= nil and type(v) ~= "string" then
                        error("target: " .. tostring(v))
                    end
                    local ok, err = d:verify()
                    if not ok then
                        error("verify: " .. tostring(err))
                    end
                end)
            end
            local started = proc.now()
            start:release()
            start:close()
            local res = proc.wait_all(pids, 10)
            local took = proc.now() - started
            for i, r in ipairs(res) do
                assert.same(CLEAN, exit_of(r), where .. ", repairer " .. i)
            end
            assert.is_true(took < TAKEOVER_LIMIT,
                           fmt("%s: repairers took %.3f s", where, took))
        end

        local function run(sc, repair)
            local keys = sc.keys or COMMON_KEYS
            local size = sc.size or "64k"

            -- the state before, from a zone of its own
            local dict, name = prepare(sc)
            local before = snapshot(dict, keys)
            check_usable(dict, size)
            assert.is_true((shdict.destroy(name, { dir = dir })))

            -- the update done whole gives the "after" state
            dict, name = prepare(sc)
            local free = dict:free_space()
            local r = proc.wait(spawn_op(sc, dict, 0), 10)
            assert.same(CLEAN, exit_of(r), "the update itself")
            local after = snapshot(dict, keys)
            assert.are_not.equal(before.text, after.text,
                                 "the update changed nothing")
            check_usable(dict, size)
            assert.is_true((shdict.destroy(name, { dir = dir })))

            local crashes = 0
            for n = 1, 400 do
                local d, zname = prepare(sc)
                assert.equal(free, d:free_space(), "setup is not repeatable")

                r = exit_of(proc.wait(spawn_op(sc, d, n), 10))
                local where = sc.name .. ", killed at write " .. n

                if r.how == "exit" then
                    -- n is past the last write: the update completed
                    assert.same(CLEAN, r, where)
                    assert.equal(after.text, snapshot(d, keys).text, where)
                    check_usable(d, size)
                    assert.is_true((shdict.destroy(zname, { dir = dir })))
                    break
                end
                assert.same(KILLED, r, where)
                crashes = crashes + 1

                if repair then
                    repair(d, where)
                end

                -- the first one in takes the dead holder's mutex over
                local started = proc.now()
                assert.same({ true }, { d:verify() }, where)
                local took = proc.now() - started
                assert.is_true(took < TAKEOVER_LIMIT,
                               fmt("%s: takeover took %.3f s", where, took))

                local now = snapshot(d, keys)
                if not sc.steps then
                    if now.text ~= before.text and now.text ~= after.text then
                        assert.is_true(false, where .. ": neither the old "
                                       .. "nor the new state:\n"
                                       .. differences(before, after, now))
                    end
                else
                    local live = {}
                    for _, k in ipairs(keys) do
                        local s = now.keys[k]
                        if s ~= before.keys[k] then
                            assert.equal(after.keys[k], s,
                                         where .. ": key " .. k .. " is "
                                         .. "neither old nor new")
                        end
                        if s ~= "absent" and not s:find("stale=true", 1, true)
                        then
                            live[#live + 1] = k
                        end
                    end
                    sort(live)
                    assert.equal(concat(live, " "), now.live,
                                 where .. ": get_keys disagrees with get")
                end
                check_usable(d, size)
                assert.is_true((shdict.destroy(zname, { dir = dir })))
                if n % 50 == 0 then
                    collectgarbage()
                end
            end
            assert.is_true(crashes > 0, sc.name .. ": no write to crash at")
            assert.is_true(crashes < 400, sc.name .. ": never completed")
            if sc.writes then
                -- the update takes the path it is named after
                assert.equal(sc.writes, crashes, sc.name .. ": writes")
            end
            return crashes
        end

        for _, sc in ipairs(scenarios) do
            it("leaves old or new values: " .. sc.name, function()
                run(sc)
            end)
        end

        it("is repaired by whichever of several processes comes next",
           function()
            for _, sc in ipairs(scenarios) do
                if sc.name == "set of an existing key, to a longer value"
                   or sc.name == "set that evicts in a nearly full zone"
                then
                    run(sc, repair_by_children)
                end
            end
        end)
    end)
end)


-- A semaphore's permits (resty.shmlock.semaphore; src/group.h) when the
-- process that changes them dies at each of its writes in turn (the lock
-- slots' CASes and the records' fields tick the test build's countdown):
-- an acquire, a release, an expire, the reclaim of a dead holder's permit
-- and of an expired lease.  After each death the zone verifies, the dead
-- process holds nothing (its permit, if it got one, is back at once), the
-- permits held by the survivors are still held, and the key admits
-- exactly `permits` holders again.
describe("resty.shmlock.semaphore when a process dies at every write",
         function()
    local semaphore = require "resty.shmlock.semaphore"
    local fx = fixture.new { children = "assert" }
    local PERMITS = 3
    local seq = 0

    local function exit_of(r)
        return { how = r.how, code = r.code, sig = r.sig, msg = r.msg }
    end
    local CLEAN = { how = "exit", code = 0, msg = "" }
    local KILLED = { how = "signal", sig = proc.SIGKILL, msg = "" }

    local function sem(dict, opts)
        opts = opts or {}
        opts.permits = opts.permits or PERMITS
        return assert(semaphore:new(dict, opts))
    end

    -- a process that takes a permit of key and dies without releasing
    local function dead_holder(dict, key)
        local r = proc.wait(proc.spawn(function()
            assert(sem(dict):acquire(key, 0) == 0)
            proc.kill(proc.getpid(), proc.SIGKILL)
        end), 10)
        assert.same(KILLED, exit_of(r))
    end

    -- each scenario: setup(dict) -> the survivors' objects holding
    -- permits of "k"; op(dict) in the child, whose writes are counted
    -- from arm() on (what it does before is not crashed)
    local scenarios = {
        { name = "acquire of a free permit",
          setup = function(dict)
              local a = sem(dict)
              assert(a:acquire("k") == 0)
              return { a }
          end,
          op = function(dict, arm)
              local s = sem(dict)
              arm()
              assert(s:acquire("k", 0) == 0)
          end },
        { name = "release",
          setup = function(dict)
              local a = sem(dict)
              assert(a:acquire("k") == 0)
              return { a }
          end,
          op = function(dict, arm)
              local s = sem(dict)
              assert(s:acquire("k", 0) == 0)
              arm()
              assert(s:release() == 1)
          end },
        { name = "expire",
          setup = function()
              return {}
          end,
          op = function(dict, arm)
              local s = sem(dict)
              assert(s:acquire("k", 0) == 0)
              arm()
              assert(s:expire(100) == true)
          end },
        { name = "acquire that reclaims a dead holder's permit",
          setup = function(dict)
              local a, b = sem(dict), sem(dict)
              assert(a:acquire("k") == 0)
              assert(b:acquire("k") == 0)
              dead_holder(dict, "k")
              return { a, b }
          end,
          op = function(dict, arm)
              local s = sem(dict)
              arm()
              assert(s:acquire("k", 0) == 0)
          end },
        { name = "acquire that sweeps an expired lease",
          setup = function(dict)
              local a, b = sem(dict), sem(dict)
              assert(a:acquire("k") == 0)
              assert(b:acquire("k") == 0)
              local short = sem(dict, { exptime = 0.001 })
              assert(short:acquire("k") == 0)
              proc.sleep(0.01)
              return { a, b, short }
          end,
          op = function(dict, arm)
              local s = sem(dict)
              arm()
              assert(s:acquire("k", 0) == 0)
          end },
    }

    -- the survivors' permits still held (but an expired lease), the key
    -- admitting exactly the rest, nothing left after
    local function check(dict, held, where)
        assert.same({ true }, { dict:verify() }, where)
        local live = 0
        for _, s in ipairs(held) do
            if s:owned() and s:expire() == true then
                live = live + 1
            end
        end
        local probe = sem(dict)
        assert.equal(live, probe:count("k"), where .. ": count")
        local extra = {}
        for i = 1, PERMITS + 1 do
            local s = sem(dict)
            local elapsed, err = s:acquire("k", 0)
            if not elapsed then
                assert.equal("timeout", err, where)
                break
            end
            extra[i] = s
        end
        assert.equal(PERMITS - live, #extra, where .. ": admitted")
        for _, s in ipairs(extra) do
            assert.same({ 1 }, { s:release() }, where)
        end
        for _, s in ipairs(held) do
            s:release()
        end
        assert.equal(0, probe:count("k"), where .. ": left")
        assert.same({ true }, { dict:verify() }, where)
    end

    for _, sc in ipairs(scenarios) do
        it("leaves the permits exact: " .. sc.name, function()
            local crashes = 0
            for n = 1, 200 do
                seq = seq + 1
                local name = "semcrash" .. seq
                local dict = assert(shdict.open(name, { dir = fx.dir,
                                                        size = "64k" }))
                local held = sc.setup(dict)
                local r = exit_of(proc.wait(proc.spawn(function()
                    sc.op(dict, function() lib.shmlock_test_crash_at(n) end)
                    lib.shmlock_test_crash_at(0)
                end), 10))
                local where = sc.name .. ", killed at write " .. n
                local done = r.how == "exit"
                if done then
                    assert.same(CLEAN, r, where)
                else
                    assert.same(KILLED, r, where)
                    crashes = crashes + 1
                end
                check(dict, held, where)
                assert.is_true((shdict.destroy(name, { dir = fx.dir })))
                if done then
                    break
                end
            end
            assert.is_true(crashes > 0, sc.name .. ": no write to crash at")
            assert.is_true(crashes < 200, sc.name .. ": never completed")
        end)
    end
    -- A queued waiter's turn (inside nginx: lock.wait's mark on the key's
    -- head, src/group.h) across a crash of the holder's release at each
    -- of its writes: the turn stays, the waiter comes in, nobody else.
    it("keeps a waiter's turn when the releasing holder dies at any write",
       function()
        local ffi = require "ffi"
        local SEM = lib.SHMLOCK_SEMAPHORE
        local OK, EXISTS = lib.SHMLOCK_OK, lib.SHMLOCK_EXISTS
        local me = proc.getpid()
        local WAITER_ID = 4242
        local crashes = 0
        for n = 1, 100 do
            seq = seq + 1
            local name = "semturn" .. seq
            local dict = assert(shdict.open(name, { dir = fx.dir,
                                                    size = "64k" }))
            local zone = dict._zone
            local r = exit_of(proc.wait(proc.spawn(function()
                local s = sem(dict, { permits = 1 })
                assert(s:acquire("k", 0) == 0)
                -- the parent's waiter marks the full key (its turn)
                local seen = ffi.new("shmlock_ticket_t")
                assert(lib.shmlock_group_acquire(zone, SEM, "k", 1, 1, 1,
                                                 30000, seen) == EXISTS)
                local m = ffi.new("shmlock_mark_t")
                m.owner = ffi.cast("uint64_t", me) * 2 ^ 32 + WAITER_ID
                m.process = me
                m.since_ms = lib.shmlock_now_ms()
                m.until_ms = m.since_ms + 600000
                assert(lib.shmlock_slot_mark(zone, seen, m,
                                             ffi.new("shmlock_ticket_t"))
                       == OK)
                lib.shmlock_test_crash_at(n)
                assert(s:release() == 1)
                lib.shmlock_test_crash_at(0)
            end), 10))
            local where = "a release under a turn, killed at write " .. n
            local done = r.how == "exit"
            if done then
                assert.same(CLEAN, r, where)
            else
                assert.same(KILLED, r, where)
                crashes = crashes + 1
            end
            assert.same({ true }, { dict:verify() }, where)
            -- the dead holder dropped; still nobody but the waiter
            local other = sem(dict, { permits = 1 })
            assert.same({ nil, "timeout" }, { other:acquire("k", 0) }, where)
            local tk = ffi.new("shmlock_ticket_t")
            assert.equal(OK, lib.shmlock_group_acquire(zone, SEM, "k", 1,
                                                       WAITER_ID, 1, 30000,
                                                       tk), where)
            assert.equal(OK, lib.shmlock_group_release(zone, SEM, "k", 1, tk),
                         where)
            assert.same({ 0 }, { other:acquire("k", 0) }, where)
            assert.same({ 1 }, { other:release() }, where)
            assert.same({ true }, { dict:verify() }, where)
            assert.is_true((shdict.destroy(name, { dir = fx.dir })))
            if done then
                break
            end
        end
        assert.is_true(crashes > 0, "no write to crash at")
        assert.is_true(crashes < 100, "never completed")
    end)
end)


-- A release that hands a marked lock to its starving waiter (a swap of
-- the slot's state to the waiter, then the waiter's process written into
-- the slot's hint: lock/zone.lua's release, src/slot.c's slot_swap), the
-- releasing holder SIGKILLed before each of its writes in turn: the
-- waiter gets the lock, knows it for its own, and the key is free once
-- it lets go.  (Killed between the swap's CAS and the hint's write, the
-- slot named the waiter as owner beside the releaser's process: the
-- waiter did not take the lock for its own, waited to its timeout, and
-- the key stayed held until the handoff's exptime.)  The waiter's timeout
-- (20 s) is far below the exptimes (60 s): only a waiter that never
-- learns the lock is its own reaches it.
describe("resty.shmlock's lock when the releasing holder dies at every "
         .. "write of a handoff", function()
    local resty_lock = require "resty.shmlock"
    local lock_slot = require "helpers.lock_slot"
    local zone_lock = require "resty.shmlock.lock.zone"
    local slots = require "resty.shmlock.lock.slots"
    local token = require "resty.shmlock.internal.token"
    local codes = require "resty.shmlock.internal.codes"
    local fx = fixture.new { children = "assert" }
    local seq = 0

    local function exit_of(r)
        return { how = r.how, code = r.code, sig = r.sig, msg = r.msg }
    end
    local CLEAN = { how = "exit", code = 0, msg = "" }
    local KILLED = { how = "signal", sig = proc.SIGKILL, msg = "" }

    it("reaches the marked waiter, which gets the lock at once", function()
        local crashes = 0
        for n = 1, 60 do
            seq = seq + 1
            local name = "handoff" .. seq
            local dict = assert(shdict.open(name, { dir = fx.dir,
                                                    size = "64k" }))
            local where = "the holder killed at write " .. n
            local held, go = proc.pipe(), proc.pipe()
            local holder = proc.spawn(function()
                held:close_read()
                local l = assert(resty_lock:new(dict, { exptime = 60 }))
                assert(l:lock("k") == 0)
                held:notify()
                assert(go:wait_release(30))
                lib.shmlock_test_crash_at(n)
                local ok, err = l:unlock()
                lib.shmlock_test_crash_at(0)
                assert(ok == 1 and err == nil, err)
            end)
            held:close_write()
            assert.is_true(held:await(20), where)
            held:close_read()
            local waiter = proc.spawn(function()
                go:close()      -- the holder waits for the parent's EOF
                local l = assert(resty_lock:new(dict, { exptime = 60,
                                                        timeout = 20 }))
                local elapsed, err = l:lock("k")
                assert(elapsed, err)
                -- ours, and the slot knows our process again: the others
                -- judge us by our start time, not by our pid alone
                assert(l:owned())
                local rc, seen = zone_lock.look_at(dict._zone, "k", 1)
                assert(rc == codes.OK)
                assert(slots.start32(seen) == token.start32(),
                       "the slot's hint is not this process")
                assert(l:unlock() == 1)
            end)
            go:close_read()
            -- the waiter has marked the lock (it starves after 2 ms)
            local deadline = proc.now() + 20
            while lock_slot.marked(dict, "k") ~= waiter do
                assert.is_true(proc.now() < deadline, where .. ": no mark")
                proc.sleep(0.001)
            end
            go:release()
            local r = exit_of(proc.wait(holder, 20))
            assert.same(CLEAN, exit_of(proc.wait(waiter, 40)),
                        where .. ": the waiter")
            local done = r.how == "exit"
            if done then
                assert.same(CLEAN, r, where)
            else
                assert.same(KILLED, r, where)
                crashes = crashes + 1
            end
            -- the key is free
            assert.same({ nil, "not locked" },
                        { resty_lock.inspect(dict, "k") }, where)
            local l = assert(resty_lock:new(dict))
            assert.same({ 0 }, { l:lock("k", 0) }, where)
            assert.same({ 1 }, { l:unlock() }, where)
            assert.same({ true }, { dict:verify() }, where)
            assert.is_true((shdict.destroy(name, { dir = fx.dir })))
            if done then
                break
            end
        end
        assert.is_true(crashes > 0, "no write to crash at")
        assert.is_true(crashes < 60, "never completed")
    end)
end)
