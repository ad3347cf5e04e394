-- Dictionary methods, with ngx.shared.DICT's arguments, returns and error
-- strings (lua-resty-core's resty/core/shdict.lua and lua-nginx-module's
-- ngx_http_lua_shdict.c are the reference), plus cas, cad and verify.
--
-- Every call's results are packed with their count, so a missing or extra
-- return value fails as surely as a wrong one.

local ffi = require "ffi"

pcall(ffi.cdef, "int usleep(unsigned int usec);")

local checkout = require "helpers.checkout"
local fixture = require "helpers.fixture"

local pack, sh = checkout.pack, checkout.sh

local function sleep(s)
    ffi.C.usleep(s * 1e6)
end

-- seconds on the clock zones expire by
local clock_s = require("resty.shmlock.internal.clock").now

-- fn()'s results from a run that took less than `secs`: a check that a
-- key with a short exptime is still there is only sound when made before
-- that exptime, which a loaded machine does not promise every time.  fn
-- starts afresh on each try (10 at most: late every time is a failure).
local function timely(secs, fn)
    for _ = 1, 10 do
        local t0 = clock_s()
        local r = pack(fn())
        if clock_s() - t0 < secs then
            return unpack(r, 1, r.n)
        end
    end
    error("10 tries, each took " .. secs .. " s or more", 2)
end

local function sorted(t)
    table.sort(t)
    return t
end

local THIS = debug.getinfo(1, "S").short_src

-- fn() must raise `msg`, reported at the caller's line in this file
local function raises(msg, fn)
    local ok, err = pcall(fn)
    assert.is_false(ok)
    local where, text = tostring(err):match("^(.-):%d+: (.*)$")
    assert.same({ THIS, msg }, { where, text })
end

local LUA_PATH = checkout.LUA_PATH

local write_file = checkout.write_file

local function read_file(path)
    return assert(checkout.read_file(path))
end

-- every byte value, repeated: binary data with NULs spanning many chunks
local function binary(len)
    local t = {}
    for i = 1, len do
        t[i] = string.char((i - 1) % 256)
    end
    return table.concat(t)
end


describe("shdict", function()
    local fx = fixture.new()
    local tmp, dir, d
    local opened = {}

    -- a new zone in this test's directory (destroyed after the test)
    local function zone(size)
        local name = "z" .. (#opened + 1)
        opened[#opened + 1] = name
        return fx:zone(name, { dir = dir, size = size })
    end

    -- the test's files in tmp, its zones in tmp/zones; after the test, d
    -- must verify (then the fixture destroys the zones)
    before_each(function()
        tmp = fx.dir
        dir = tmp .. "/zones"
        assert(os.execute("mkdir '" .. dir .. "'") == 0)
        for i = 1, #opened do
            opened[i] = nil
        end
        d = zone("1m")
        fx:defer(function()
            local dict = d
            d = nil
            assert.same({ n = 1, true }, pack(dict:verify()))
        end)
    end)

    describe("key checks", function()
        local calls = {
            get = function(k) return d:get(k) end,
            get_stale = function(k) return d:get_stale(k) end,
            set = function(k) return d:set(k, 1) end,
            safe_set = function(k) return d:safe_set(k, 1) end,
            add = function(k) return d:add(k, 1) end,
            safe_add = function(k) return d:safe_add(k, 1) end,
            replace = function(k) return d:replace(k, 1) end,
            delete = function(k) return d:delete(k) end,
            incr = function(k) return d:incr(k, 1, 0) end,
            ttl = function(k) return d:ttl(k) end,
            expire = function(k) return d:expire(k, 1) end,
            cas = function(k) return d:cas(k, 1, 2) end,
            cad = function(k) return d:cad(k, 1) end,
        }
        local names = {}
        for name in pairs(calls) do
            names[#names + 1] = name
        end
        table.sort(names)

        for _, name in ipairs(names) do
            describe(name .. "()", function()
                it("returns nil, 'nil key' for a nil key", function()
                    assert.same({ n = 2, nil, "nil key" },
                                pack(calls[name](nil)))
                end)

                it("returns nil, 'empty key' for an empty key", function()
                    assert.same({ n = 2, nil, "empty key" },
                                pack(calls[name]("")))
                end)

                it("returns nil, 'key too long' for a 65536-byte key",
                   function()
                    assert.same({ n = 2, nil, "key too long" },
                                pack(calls[name](("k"):rep(65536))))
                end)
            end)
        end

        it("accepts a 65535-byte key", function()
            local key = ("k"):rep(65534) .. "!"
            assert.same({ n = 3, true, nil, false }, pack(d:set(key, "v")))
            assert.same({ n = 1, "v" }, pack(d:get(key)))
            assert.same({ n = 1, nil }, pack(d:get(("k"):rep(65535))))
            assert.same({ key }, d:get_keys(0))
        end)

        it("turns a number key into its string", function()
            assert.same({ n = 3, true, nil, false }, pack(d:set(12, "twelve")))
            assert.same({ n = 1, "twelve" }, pack(d:get("12")))
            assert.same({ n = 1, "twelve" }, pack(d:get(12)))
        end)

        it("turns a number key into the string every Lua gives it: whole "
           .. "numbers as digits, -0 as 0, others as C's %.14g", function()
            -- LuaJIT's tostring: "-0", "1.2345678901235e+14", "1e+15";
            -- its own %.14g rounds the tie up: "12345678901235"
            d:set(-0.0, "a")
            d:set(123456789012345, "b")
            d:set(1e15, "c")
            d:set(12345678901234.5, "d")
            d:set(0.1, "e")
            assert.same({ "0", "0.1", "1000000000000000", "12345678901234",
                          "123456789012345" }, sorted(d:get_keys(0)))
            assert.same({ n = 1, "a" }, pack(d:get(0)))
            assert.same({ n = 1, "c" }, pack(d:get(1e15)))
        end)

        it("takes a boolean key as its tostring", function()
            assert.same({ n = 3, true, nil, false }, pack(d:set(true, "t")))
            assert.same({ n = 1, "t" }, pack(d:get("true")))
        end)

        it("keeps keys that differ only after a NUL byte apart", function()
            d:set("a\0b", 1)
            d:set("a\0c", 2)
            assert.same({ n = 1, 1 }, pack(d:get("a\0b")))
            assert.same({ n = 1, 2 }, pack(d:get("a\0c")))
            assert.same({ n = 1, nil }, pack(d:get("a")))
            assert.same({ "a\0b", "a\0c" }, sorted(d:get_keys(0)))
        end)

        it("keeps long keys that differ only in their last byte apart",
           function()
            local base = ("long key "):rep(100)
            for i = 0, 9 do
                d:set(base .. i, i)
            end
            for i = 0, 9 do
                assert.same({ n = 1, i }, pack(d:get(base .. i)))
            end
        end)
    end)

    describe("raised errors", function()
        it("raise 'bad \"zone\" argument' when called on something else",
           function()
            raises('bad "zone" argument', function() d.get({}, "k") end)
            raises('bad "zone" argument', function() d.set(nil, "k", 1) end)
            raises('bad "zone" argument', function() d.incr({}, "k", 1) end)
            raises('bad "zone" argument', function() d.capacity("x") end)
            for _, m in ipairs { "get", "get_stale", "ttl", "lpush", "rpush",
                                 "lpop", "rpop", "llen", "cad" } do
                raises('bad "zone" argument', function() d[m]({}, "k", 1) end)
                raises('bad "zone" argument', function() d[m]() end)
            end
        end)

        for _, m in ipairs({ "set", "safe_set", "add", "safe_add",
                             "replace" }) do
            it(m .. "() raises 'bad \"exptime\" argument' for a negative "
               .. "exptime", function()
                raises('bad "exptime" argument',
                       function() d[m](d, "k", 1, -1) end)
                assert.same({ n = 1, nil }, pack(d:get("k")))
            end)

            it(m .. "() raises 'bad \"exptime\" argument' for a string "
               .. "exptime", function()
                raises('bad "exptime" argument',
                       function() d[m](d, "k", 1, "10") end)
            end)

            it(m .. "() raises 'bad \"flags\" argument' for string flags",
               function()
                raises('bad "flags" argument',
                       function() d[m](d, "k", 1, 0, "x") end)
            end)
        end

        it("cas() raises on a bad exptime or flags", function()
            raises('bad "exptime" argument',
                   function() d:cas("k", 1, 2, -1) end)
            raises('bad "flags" argument',
                   function() d:cas("k", 1, 2, 0, {}) end)
        end)

        -- times that would reach the C core as garbage (a double beyond
        -- int64_t) or pass a "< 0" check (NaN): misuse, as a negative one;
        -- 1e12 s is the largest accepted
        it("raise 'bad \"exptime\" argument' for an exptime of NaN, "
           .. "+-infinity or above 1e12 s, in every method taking one",
           function()
            for _, t in ipairs({ 0 / 0, math.huge, -math.huge, 1e12 + 1e6 })
            do
                for _, m in ipairs({ "set", "safe_set", "add", "safe_add",
                                     "replace" }) do
                    raises('bad "exptime" argument',
                           function() d[m](d, "k", 1, t) end)
                end
                raises('bad "exptime" argument',
                       function() d:cas("k", 1, 2, t) end)
                assert.same({ n = 3, true, nil, false }, pack(d:set("k", 1)))
                raises('bad "exptime" argument',
                       function() d:expire("k", t) end)
                raises('bad "init_ttl" argument',
                       function() d:incr("n", 1, 0, t) end)
                assert.same({ n = 1, 1 }, pack(d:get("k")))
                assert.same({ n = 1, 0 }, pack(d:ttl("k")))
                assert.same({ n = 1, nil }, pack(d:get("n")))
            end

            assert.same({ n = 3, true, nil, false },
                        pack(d:set("k", 1, 1e12)))
            local ttl = d:ttl("k")
            assert.is_true(ttl > 1e12 - 10 and ttl <= 1e12, tostring(ttl))
            assert.same({ n = 1, true }, pack(d:expire("k", 1e12)))
            assert.same({ n = 3, 1, nil, false },
                        pack(d:incr("n", 1, 0, 1e12)))
            assert.is_true(d:ttl("n") > 1e12 - 10)
        end)
    end)

    describe("an exptime below the zone's 1 ms resolution", function()
        -- the key must expire, not live for ever (0.0001 s * 1000 = 0.1,
        -- which an int64_t of milliseconds truncates to 0: never)
        local function expires(key)
            local ttl = d:ttl(key)      -- nil if that 1 ms is over already
            assert.is_true(ttl == nil or ttl > 0 and ttl <= 0.001,
                           "ttl " .. tostring(ttl))
            sleep(0.01)
            assert.same({ n = 1, nil }, pack(d:get(key)))
        end

        for _, m in ipairs({ "set", "safe_set", "add", "safe_add" }) do
            it(m .. "() gives the key 1 ms", function()
                assert.is_true((d[m](d, "k", 1, 0.0001)))
                expires("k")
            end)
        end

        it("replace() gives the key 1 ms", function()
            d:set("k", 1)
            assert.is_true((d:replace("k", 2, 0.0001)))
            expires("k")
        end)

        it("cas() gives the key 1 ms", function()
            d:set("k", 1)
            assert.is_true((d:cas("k", 1, 2, 0.0001)))
            expires("k")
        end)

        it("expire() gives the key 1 ms", function()
            d:set("k", 1)
            assert.same({ n = 1, true }, pack(d:expire("k", 0.0001)))
            expires("k")
        end)

        it("incr()'s init_ttl gives the key 1 ms", function()
            assert.same({ n = 3, 1, nil, false },
                        pack(d:incr("n", 1, 0, 0.0001)))
            expires("n")
        end)
    end)

    describe("value types", function()
        local values = {
            { "a string", "hello" },
            { "an empty string", "" },
            { "a string with NUL bytes", "a\0b\0\0c" },
            { "a binary string spanning many chunks", binary(3000) },
            { "a 100 KB string", binary(100 * 1024) },
            { "an integer", 42 },
            { "zero", 0 },
            { "a negative integer", -7 },
            { "a float", 3.25 },
            { "a negative float", -0.001 },
            { "2^53", 2 ^ 53 },
            { "a huge number", 1.7976931348623157e308 },
            { "a tiny number", 4.9406564584124654e-324 },
            { "infinity", math.huge },
            { "-infinity", -math.huge },
            { "true", true },
            { "false", false },
        }
        for _, case in ipairs(values) do
            it("stores and returns " .. case[1], function()
                assert.same({ n = 3, true, nil, false },
                            pack(d:set("k", case[2])))
                assert.same({ n = 1, case[2] }, pack(d:get("k")))
                assert.same({ n = 3, case[2], nil, false },
                            pack(d:get_stale("k")))
            end)
        end

        it("stores and returns NaN", function()
            assert.same({ n = 3, true, nil, false }, pack(d:set("k", 0 / 0)))
            local r = pack(d:get("k"))
            assert.equal(1, r.n)
            assert.equal("number", type(r[1]))
            assert.is_true(r[1] ~= r[1])
        end)

        it("returns a value overwritten with a smaller one of another type",
           function()
            d:set("k", binary(10000))
            d:set("k", 5)
            assert.same({ n = 1, 5 }, pack(d:get("k")))
            d:set("k", "short")
            assert.same({ n = 1, "short" }, pack(d:get("k")))
            d:set("k", false)
            assert.same({ n = 1, false }, pack(d:get("k")))
        end)

        local bad = {
            { "a table", {} },
            { "a function", print },
            { "a coroutine", coroutine.create(print) },
            { "cdata", ffi.new("int[1]") },
        }
        for _, case in ipairs(bad) do
            it("set/safe_set/add/safe_add/replace return nil, "
               .. "'bad value type' for " .. case[1], function()
                d:set("k", "old")
                for _, m in ipairs({ "set", "safe_set", "add", "safe_add",
                                     "replace" }) do
                    assert.same({ n = 2, nil, "bad value type" },
                                pack(d[m](d, "k", case[2])))
                end
                assert.same({ n = 1, "old" }, pack(d:get("k")))
            end)
        end

        it("gives the space of a large value back when it is deleted",
           function()
            local free = d:free_space()
            assert.same({ n = 3, true, nil, false },
                        pack(d:set("big", binary(100 * 1024))))
            assert.is_true(free - d:free_space() >= 100 * 1024)
            assert.same({ n = 1, true }, pack(d:verify()))
            d:delete("big")
            assert.same({ n = 1, free }, pack(d:free_space()))
        end)
    end)

    -- What a zone holds (issue 34): ngx.shared.DICT's 10m holds 81,375
    -- entries of a 14-byte key and an 8 to 16-byte string (bench section
    -- 2 counts both in the same run).  Counts, not timings: the entries a
    -- 10 MiB zone takes by set() before the first one evicts another.
    describe("density", function()
        local function held(value_of)
            local z = zone("10m")
            local n = 0
            while true do
                local v, flags = value_of(n)
                local ok, err, forcible = z:set(("key:%010d"):format(n), v, 0,
                                                flags)
                if not ok or forcible then
                    assert.is_true(forcible or err == "no memory")
                    break
                end
                n = n + 1
            end
            assert.same({ n = 1, true }, pack(z:verify()))
            return n
        end

        it("a 10 MiB zone holds >= 122,000 entries of a 14-byte key and an "
           .. "8 to 16-byte string (1.5x ngx.shared.DICT's 81,375)",
           function()
            local n = held(function(i) return ("v"):rep(8 + i % 9) end)
            assert.is_true(n >= 122000, tostring(n))
        end)

        it("a 10 MiB zone holds >= 140,000 numbers of a 14-byte key",
           function()
            local n = held(function(i) return i end)
            assert.is_true(n >= 140000, tostring(n))
        end)

        it("a 10 MiB zone holds >= 69,000 64-byte strings of a 14-byte key",
           function()
            local n = held(function() return ("v"):rep(64) end)
            assert.is_true(n >= 69000, tostring(n))
        end)

        it("a 10 MiB zone holds >= 140,000 entries of a 14-byte key, an 8 "
           .. "to 14-byte string and user flags", function()
            local n = held(function(i) return ("v"):rep(8 + i % 7), 7 end)
            assert.is_true(n >= 140000, tostring(n))
        end)
    end)

    describe("get()", function()
        it("returns the value alone when the flags are 0", function()
            d:set("k", "v", 0, 0)
            assert.same({ n = 1, "v" }, pack(d:get("k")))
        end)

        it("returns the value and the flags when they are not 0", function()
            d:set("k", "v", 0, 7)
            assert.same({ n = 2, "v", 7 }, pack(d:get("k")))
            d:set("n", 1.5, 0, 4294967295)
            assert.same({ n = 2, 1.5, 4294967295 }, pack(d:get("n")))
        end)

        it("returns a single nil for a missing key", function()
            assert.same({ n = 1, nil }, pack(d:get("nope")))
        end)

        it("returns a single nil for an expired key", function()
            d:set("k", "v", 0.05, 3)
            sleep(0.1)
            assert.same({ n = 1, nil }, pack(d:get("k")))
        end)

        it("sees a value until its exptime, with millisecond resolution",
           function()
            assert.same({ n = 1, "v" }, timely(0.14, function()
                d:set("k", "v", 0.15)
                return pack(d:get("k"))
            end))
            sleep(0.3)
            assert.same({ n = 1, nil }, pack(d:get("k")))
        end)
    end)

    describe("get_stale()", function()
        it("returns value, nil, false for a live key", function()
            d:set("k", "v")
            assert.same({ n = 3, "v", nil, false }, pack(d:get_stale("k")))
        end)

        it("returns value, flags, false for a live key with flags",
           function()
            d:set("k", "v", 10, 5)
            assert.same({ n = 3, "v", 5, false }, pack(d:get_stale("k")))
        end)

        it("returns value, flags, true for an expired key", function()
            d:set("k", "v", 0.05, 5)
            d:set("n", 10, 0.05)
            sleep(0.1)
            assert.same({ n = 3, "v", 5, true }, pack(d:get_stale("k")))
            assert.same({ n = 3, 10, nil, true }, pack(d:get_stale("n")))
        end)

        it("returns a single nil for a missing or deleted key", function()
            assert.same({ n = 1, nil }, pack(d:get_stale("nope")))
            d:set("k", "v", 0.05)
            d:delete("k")
            assert.same({ n = 1, nil }, pack(d:get_stale("k")))
        end)
    end)

    describe("set()", function()
        it("returns true, nil, false and stores the value", function()
            assert.same({ n = 3, true, nil, false }, pack(d:set("k", "v")))
            assert.same({ n = 1, "v" }, pack(d:get("k")))
        end)

        it("overwrites a live value, its exptime and its flags", function()
            d:set("k", "old", 0.05, 3)
            assert.same({ n = 3, true, nil, false }, pack(d:set("k", "new")))
            assert.same({ n = 1, "new" }, pack(d:get("k")))
            assert.same({ n = 1, 0 }, pack(d:ttl("k")))
            sleep(0.1)
            assert.same({ n = 1, "new" }, pack(d:get("k")))
        end)

        it("deletes the key when the value is nil", function()
            d:set("k", "v")
            assert.same({ n = 3, true, nil, false }, pack(d:set("k", nil)))
            assert.same({ n = 1, nil }, pack(d:get("k")))
            assert.same({ n = 1, nil }, pack(d:get_stale("k")))
            assert.same({}, d:get_keys(0))
        end)

        it("treats exptime 0 and nil as never", function()
            d:set("a", 1, 0)
            d:set("b", 1, nil)
            d:set("c", 1, false)
            assert.same({ n = 1, 0 }, pack(d:ttl("a")))
            assert.same({ n = 1, 0 }, pack(d:ttl("b")))
            assert.same({ n = 1, 0 }, pack(d:ttl("c")))
        end)

        it("returns false, 'no memory', false for a value larger than the "
           .. "zone, evicting nothing", function()
            local small = zone("64k")
            small:set("keep", "me")
            assert.same({ n = 3, false, "no memory", false },
                        pack(small:set("huge", binary(100 * 1024))))
            assert.same({ n = 1, "me" }, pack(small:get("keep")))
            assert.same({ n = 1, true }, pack(small:verify()))
        end)
    end)

    -- a number (or boolean) over one of the same flags, neither expiring,
    -- is one store in place (spec/04 counts its writes): every other
    -- combination must still reset the exptime, replace the flags and
    -- keep ngx.shared.DICT's eviction classes
    describe("set() of a number over a number", function()
        local cases = {
            -- old value, exptime, flags; new value, exptime, flags
            { 1, 0, nil, 2, 0, nil },
            { 1, 0, 5, 2.5, 0, 5 },
            { 1, 0, 5, -3, 0, nil },
            { 1, 0, nil, 4, 0, 7 },
            { 1, 100, nil, 5, 0, nil },
            { 1, 0, nil, 6, 100, nil },
            { 1, 100, 3, 7, 100, 3 },
            { true, 0, 2, false, 0, 2 },
            { false, 0, nil, true, 0, nil },
            { 1, 0, nil, true, 0, nil },
            { true, 0, nil, 8, 0, nil },
            { 1, 0, nil, "s", 0, nil },
            { "s", 0, nil, 9, 0, nil },
        }
        for _, c in ipairs(cases) do
            it(("gives what a fresh set gives: %s %s %s -> %s %s %s")
               :format(tostring(c[1]), c[2], tostring(c[3]), tostring(c[4]),
                       c[5], tostring(c[6])), function()
                assert.same({ n = 3, true, nil, false },
                            pack(d:set("k", c[1], c[2], c[3])))
                assert.same({ n = 3, true, nil, false },
                            pack(d:set("k", c[4], c[5], c[6])))
                assert.same({ n = 3, true, nil, false },
                            pack(d:set("fresh", c[4], c[5], c[6])))
                assert.same(pack(d:get("fresh")), pack(d:get("k")))
                local ttl, fresh_ttl = d:ttl("k"), d:ttl("fresh")
                if c[5] == 0 then
                    assert.same({ 0, 0 }, { ttl, fresh_ttl })
                else
                    assert.is_true(ttl > 0 and ttl <= c[5])
                end
            end)
        end

        -- the in-place store leaves the entry where it was; an entry that
        -- changes class must not be left behind
        local function fill(z)
            for i = 1, 2000 do
                z:set("fill" .. i, ("x"):rep(100))
            end
        end

        it("over an add()ed number makes it evictable, as set does", function()
            local small = zone("64k")
            assert.is_true((small:add("k", 1)))
            assert.is_true((small:set("k", 2)))
            fill(small)
            assert.same({ n = 1, nil }, pack(small:get("k")))
            assert.same({ n = 1, true }, pack(small:verify()))
        end)

        it("by replace() keeps an add()ed number pinned", function()
            local small = zone("64k")
            assert.is_true((small:add("k", 1)))
            assert.is_true((small:replace("k", 2)))
            fill(small)
            assert.same({ n = 1, 2 }, pack(small:get("k")))
            assert.same({ n = 1, true }, pack(small:verify()))
        end)

        it("keeps an evictable number evictable", function()
            local small = zone("64k")
            assert.is_true((small:set("k", 1)))
            assert.is_true((small:set("k", 2)))
            fill(small)
            assert.same({ n = 1, nil }, pack(small:get("k")))
        end)
    end)

    -- the ABI's _at calls take the caller's reading of the zone clock
    -- (inside nginx, its cached time): expiries are compared with and
    -- computed from that reading, whatever the clock says
    describe("the caller's clock (shmlock_dict_get_at, _store_at)", function()
        local lib = require "resty.shmlock.lib"
        local out = ffi.new("shmlock_value_t")
        local buf = ffi.new("char[64]")
        local forcible = ffi.new("int[1]")
        local val = ffi.new("shmlock_value_t")

        local function get_at(key, stale, now)
            local rc = lib.shmlock_dict_get_at(d._zone, key, #key, stale, out,
                                               buf, 64, now)
            return { rc = tonumber(rc), type = tonumber(out.type),
                     num = tonumber(out.num), stale = tonumber(out.stale) }
        end

        local function set_at(op, key, num, exptime_ms, now)
            val.type = lib.SHMLOCK_TNUMBER
            val.num = num
            val.flags = 0
            return tonumber(lib.shmlock_dict_store_at(d._zone, op, key, #key,
                                                      val, exptime_ms, now,
                                                      forcible))
        end

        it("get_at: a value is expired once the reading passes its expiry",
           function()
            assert.is_true((d:set("k", 1, 100)))
            local now = tonumber(lib.shmlock_now_ms())
            assert.same({ rc = 0, type = lib.SHMLOCK_TNUMBER, num = 1,
                          stale = 0 }, get_at("k", 0, now))
            assert.same(lib.SHMLOCK_TNIL, get_at("k", 0, now + 200000).type)
            assert.same({ rc = 0, type = lib.SHMLOCK_TNUMBER, num = 1,
                          stale = 1 }, get_at("k", 1, now + 200000))
            -- 0: the core reads the clock
            assert.same(1, get_at("k", 0, 0).num)
            -- a key without expiry never expires, whatever the reading
            assert.is_true((d:set("forever", 2)))
            assert.same(2, get_at("forever", 0, now + 1e12).num)
        end)

        it("store_at: the expiry is the reading plus exptime", function()
            local now = tonumber(lib.shmlock_now_ms())
            assert.equal(0, set_at(lib.SHMLOCK_OP_SET, "k", 5, 10000,
                                   now - 5000))
            local ttl = d:ttl("k")
            assert.is_true(ttl > 0 and ttl <= 5, "ttl " .. ttl)
        end)

        it("store_at: add takes a key the reading says has expired",
           function()
            assert.is_true((d:set("k", 1, 100)))
            local now = tonumber(lib.shmlock_now_ms())
            assert.equal(lib.SHMLOCK_EXISTS,
                         set_at(lib.SHMLOCK_OP_ADD, "k", 2, 0, now))
            assert.equal(0, set_at(lib.SHMLOCK_OP_ADD, "k", 3, 0,
                                   now + 200000))
            assert.same({ n = 1, 3 }, pack(d:get("k")))
        end)
    end)

    describe("safe_set()", function()
        it("returns true, nil, false and stores the value", function()
            assert.same({ n = 3, true, nil, false },
                        pack(d:safe_set("k", "v", 0, 2)))
            assert.same({ n = 2, "v", 2 }, pack(d:get("k")))
        end)

        it("deletes the key when the value is nil", function()
            d:set("k", "v")
            assert.same({ n = 3, true, nil, false },
                        pack(d:safe_set("k", nil)))
            assert.same({ n = 1, nil }, pack(d:get("k")))
        end)
    end)

    describe("add()", function()
        it("returns true, nil, false and stores a new key", function()
            assert.same({ n = 3, true, nil, false },
                        pack(d:add("k", "v", 0, 1)))
            assert.same({ n = 2, "v", 1 }, pack(d:get("k")))
        end)

        it("returns false, 'exists', false when the key is live", function()
            d:set("k", "old")
            assert.same({ n = 3, false, "exists", false },
                        pack(d:add("k", "new")))
            assert.same({ n = 1, "old" }, pack(d:get("k")))
        end)

        it("replaces an expired key", function()
            d:set("k", "old", 0.05)
            sleep(0.1)
            assert.same({ n = 3, true, nil, false }, pack(d:add("k", "new")))
            assert.same({ n = 1, "new" }, pack(d:get("k")))
            assert.same({ n = 1, 0 }, pack(d:ttl("k")))
        end)

        it("returns false, 'attempt to add or replace nil values', false "
           .. "for a nil value", function()
            assert.same({ n = 3, false, "attempt to add or replace nil values",
                          false }, pack(d:add("k", nil)))
            d:set("k", "v")
            assert.same({ n = 3, false, "attempt to add or replace nil values",
                          false }, pack(d:add("k", nil)))
            assert.same({ n = 1, "v" }, pack(d:get("k")))
        end)
    end)

    describe("safe_add()", function()
        it("returns true, nil, false and stores a new key", function()
            assert.same({ n = 3, true, nil, false },
                        pack(d:safe_add("k", 1)))
            assert.same({ n = 1, 1 }, pack(d:get("k")))
        end)

        it("returns false, 'exists', false when the key is live", function()
            d:add("k", 1)
            assert.same({ n = 3, false, "exists", false },
                        pack(d:safe_add("k", 2)))
            assert.same({ n = 1, 1 }, pack(d:get("k")))
        end)

        it("returns false, 'attempt to add or replace nil values', false "
           .. "for a nil value", function()
            assert.same({ n = 3, false, "attempt to add or replace nil values",
                          false }, pack(d:safe_add("k", nil)))
        end)
    end)

    describe("replace()", function()
        it("returns false, 'not found', false for a missing key", function()
            assert.same({ n = 3, false, "not found", false },
                        pack(d:replace("k", "v")))
            assert.same({ n = 1, nil }, pack(d:get("k")))
        end)

        it("returns false, 'not found', false for an expired key", function()
            d:set("k", "old", 0.05)
            sleep(0.1)
            assert.same({ n = 3, false, "not found", false },
                        pack(d:replace("k", "new")))
            assert.same({ n = 1, nil }, pack(d:get("k")))
        end)

        it("returns true, nil, false and replaces value, exptime and flags",
           function()
            d:set("k", "old", 100, 1)
            assert.same({ n = 3, true, nil, false },
                        pack(d:replace("k", 2.5, 0, 9)))
            assert.same({ n = 2, 2.5, 9 }, pack(d:get("k")))
            assert.same({ n = 1, 0 }, pack(d:ttl("k")))
        end)

        it("returns false, 'attempt to add or replace nil values', false "
           .. "for a nil value and keeps the key", function()
            d:set("k", "v")
            assert.same({ n = 3, false, "attempt to add or replace nil values",
                          false }, pack(d:replace("k", nil)))
            assert.same({ n = 1, "v" }, pack(d:get("k")))
        end)
    end)

    describe("delete()", function()
        it("returns true, nil, false and removes a live key", function()
            d:set("k", "v")
            assert.same({ n = 3, true, nil, false }, pack(d:delete("k")))
            assert.same({ n = 1, nil }, pack(d:get("k")))
        end)

        it("returns true, nil, false for a missing key", function()
            assert.same({ n = 3, true, nil, false }, pack(d:delete("nope")))
        end)

        it("removes an expired key for good", function()
            d:set("k", "v", 0.05)
            sleep(0.1)
            assert.same({ n = 3, true, nil, false }, pack(d:delete("k")))
            assert.same({ n = 1, nil }, pack(d:get_stale("k")))
        end)
    end)

    describe("incr()", function()
        it("adds to a number and returns the new value alone", function()
            d:set("n", 10)
            assert.same({ n = 1, 15 }, pack(d:incr("n", 5)))
            assert.same({ n = 1, 13.5 }, pack(d:incr("n", -1.5)))
            assert.same({ n = 1, 13.5 }, pack(d:get("n")))
        end)

        it("accepts a numeric string as the increment", function()
            d:set("n", 1)
            assert.same({ n = 1, 11 }, pack(d:incr("n", "10")))
        end)

        it("raises on an increment that is not a number", function()
            d:set("n", 1)
            raises("bad value arg: number expected, got string",
                   function() d:incr("n", "ten") end)
            raises("bad value arg: number expected, got nil",
                   function() d:incr("n") end)
            assert.same({ n = 1, 1 }, pack(d:get("n")))
        end)

        it("returns nil, 'not found' for a missing key without init",
           function()
            assert.same({ n = 2, nil, "not found" }, pack(d:incr("n", 1)))
            assert.same({ n = 1, nil }, pack(d:get("n")))
        end)

        it("returns nil, 'not found' for an expired key without init",
           function()
            d:set("n", 1, 0.05)
            sleep(0.1)
            assert.same({ n = 2, nil, "not found" }, pack(d:incr("n", 1)))
        end)

        it("treats a false init as no init", function()
            assert.same({ n = 2, nil, "not found" },
                        pack(d:incr("n", 1, false)))
        end)

        it("returns nil, 'not a number' when the value is not a number",
           function()
            d:set("s", "12")
            d:set("b", true)
            assert.same({ n = 2, nil, "not a number" }, pack(d:incr("s", 1)))
            assert.same({ n = 2, nil, "not a number" },
                        pack(d:incr("b", 1, 0)))
            assert.same({ n = 1, "12" }, pack(d:get("s")))
        end)

        it("creates a missing key as init + value and returns value, nil, "
           .. "false", function()
            assert.same({ n = 3, 15, nil, false }, pack(d:incr("n", 5, 10)))
            assert.same({ n = 1, 15 }, pack(d:get("n")))
            assert.same({ n = 1, 0 }, pack(d:ttl("n")))
        end)

        it("accepts a numeric string as init", function()
            assert.same({ n = 3, 11, nil, false }, pack(d:incr("n", 1, "10")))
        end)

        it("ignores init for a live key but still returns three values",
           function()
            d:set("n", 1)
            assert.same({ n = 3, 2, nil, false }, pack(d:incr("n", 1, 100)))
        end)

        it("recreates an expired key from init", function()
            d:set("n", 1000, 0.05)
            sleep(0.1)
            assert.same({ n = 3, 1, nil, false }, pack(d:incr("n", 1, 0)))
            assert.same({ n = 1, 0 }, pack(d:ttl("n")))
        end)

        it("gives a key created from init the init_ttl", function()
            local r, ttl = timely(0.09, function()
                d:delete("n")
                return pack(d:incr("n", 1, 0, 0.15)), d:ttl("n")
            end)
            assert.same({ n = 3, 1, nil, false }, r)
            assert.is_true(ttl > 0.05 and ttl <= 0.15, tostring(ttl))
            sleep(0.3)
            assert.same({ n = 1, nil }, pack(d:get("n")))
        end)

        it("leaves the exptime of a live key alone, whatever init_ttl",
           function()
            d:set("n", 1)
            assert.same({ n = 3, 2, nil, false }, pack(d:incr("n", 1, 0, 5)))
            assert.same({ n = 1, 0 }, pack(d:ttl("n")))

            d:set("m", 1, 10)
            assert.same({ n = 1, 2 }, pack(d:incr("m", 1)))
            local ttl = d:ttl("m")
            assert.is_true(ttl > 9 and ttl <= 10, tostring(ttl))
        end)

        it("keeps the flags of the value", function()
            d:set("n", 1, 0, 6)
            d:incr("n", 1)
            assert.same({ n = 2, 2, 6 }, pack(d:get("n")))
        end)

        it("raises 'bad init arg' for an init that is not a number",
           function()
            raises("bad init arg: number expected, got table",
                   function() d:incr("n", 1, {}) end)
            raises("bad init arg: number expected, got string",
                   function() d:incr("n", 1, "zero") end)
            assert.same({ n = 1, nil }, pack(d:get("n")))
        end)

        it("raises 'bad init_ttl arg' for an init_ttl that is not a number",
           function()
            raises("bad init_ttl arg: number expected, got string",
                   function() d:incr("n", 1, 0, "soon") end)
        end)

        it("raises 'bad \"init_ttl\" argument' for a negative init_ttl",
           function()
            raises('bad "init_ttl" argument',
                   function() d:incr("n", 1, 0, -1) end)
        end)

        it("raises when init_ttl is given without init", function()
            raises('must provide "init" when providing "init_ttl"',
                   function() d:incr("n", 1, nil, 10) end)
        end)

        it("is atomic across processes", function()
            local procs, rounds = 4, 500
            local file = tmp .. "/incr.lua"
            write_file(file, ([[
local shdict = require "resty.shmlock.shdict"
local d = assert(shdict.open(%q, { dir = %q }))
for i = 1, %d do
    assert(d:incr("counter", 1, 0))
end
print("done")
]]):format(opened[1], dir, rounds))
            local cmd = { "(" }
            for _ = 1, procs do
                cmd[#cmd + 1] = ("LUA_PATH='%s' luajit %s &"):format(
                    LUA_PATH, file)
            end
            cmd[#cmd + 1] = "wait) 2>&1"
            assert.equal(("done\n"):rep(procs), sh(table.concat(cmd, " ")))
            assert.same({ n = 1, procs * rounds }, pack(d:get("counter")))
        end)
    end)

    describe("ttl()", function()
        it("returns 0 for a key without exptime", function()
            d:set("k", "v")
            assert.same({ n = 1, 0 }, pack(d:ttl("k")))
        end)

        it("returns the seconds left, with millisecond resolution",
           function()
            local r = timely(0.09, function()
                d:set("k", "v", 0.5)
                return pack(d:ttl("k"))
            end)
            assert.equal(1, r.n)
            assert.is_true(r[1] > 0.4 and r[1] <= 0.5, tostring(r[1]))
            local ms = r[1] * 1000
            assert.is_true(math.abs(ms - math.floor(ms + 0.5)) < 1e-6)

            d:set("long", "v", 100)
            local ttl = d:ttl("long")
            assert.is_true(ttl > 99 and ttl <= 100, tostring(ttl))
        end)

        it("returns nil, 'not found' for a missing key", function()
            assert.same({ n = 2, nil, "not found" }, pack(d:ttl("k")))
        end)

        it("returns nil, 'not found' for an expired key", function()
            d:set("k", "v", 0.05)
            sleep(0.1)
            assert.same({ n = 2, nil, "not found" }, pack(d:ttl("k")))
        end)
    end)

    describe("expire()", function()
        it("returns true and gives a key a new exptime", function()
            d:set("k", "v")
            assert.same({ n = 1, true }, pack(d:expire("k", 10)))
            local ttl = d:ttl("k")
            assert.is_true(ttl > 9 and ttl <= 10, tostring(ttl))
            assert.same({ n = 1, "v" }, pack(d:get("k")))
        end)

        it("makes a key expire at the new exptime", function()
            d:set("k", "v", 100, 4)
            assert.same({ n = 1, true }, pack(d:expire("k", 0.05)))
            sleep(0.1)
            assert.same({ n = 3, "v", 4, true }, pack(d:get_stale("k")))
            assert.same({ n = 1, nil }, pack(d:get("k")))
        end)

        it("removes the exptime when given 0", function()
            assert.same({ n = 1, true }, timely(0.19, function()
                d:set("k", "v", 0.2)
                return pack(d:expire("k", 0))
            end))
            assert.same({ n = 1, 0 }, pack(d:ttl("k")))
            sleep(0.3)
            assert.same({ n = 1, "v" }, pack(d:get("k")))
        end)

        it("returns nil, 'not found' for a missing key", function()
            assert.same({ n = 2, nil, "not found" }, pack(d:expire("k", 1)))
            assert.same({ n = 1, nil }, pack(d:get("k")))
        end)

        it("returns nil, 'not found' for an expired key", function()
            d:set("k", "v", 0.05)
            sleep(0.1)
            assert.same({ n = 2, nil, "not found" }, pack(d:expire("k", 10)))
            assert.same({ n = 1, nil }, pack(d:get("k")))
        end)

        it("raises 'bad \"exptime\" argument' without a usable exptime",
           function()
            d:set("k", "v")
            raises('bad "exptime" argument', function() d:expire("k") end)
            raises('bad "exptime" argument',
                   function() d:expire("k", -1) end)
            raises('bad "exptime" argument',
                   function() d:expire("k", "10") end)
            assert.same({ n = 1, 0 }, pack(d:ttl("k")))
        end)
    end)

    describe("flush_all()", function()
        it("returns nothing and makes every key expired", function()
            for i = 1, 20 do
                d:set("k" .. i, i, 0, 1)
            end
            d:add("lock", 1)
            assert.same({ n = 0 }, pack(d:flush_all()))
            for i = 1, 20 do
                assert.same({ n = 1, nil }, pack(d:get("k" .. i)))
            end
            assert.same({ n = 1, nil }, pack(d:get("lock")))
            assert.same({}, d:get_keys(0))
            assert.same({ n = 3, true, nil, false }, pack(d:add("k1", "new")))
            assert.same({ n = 1, "new" }, pack(d:get("k1")))
        end)

        it("frees nothing: the flushed values are still stale", function()
            d:set("k", "v", 0, 3)
            local free = d:free_space()
            d:flush_all()
            assert.same({ n = 1, free }, pack(d:free_space()))
            assert.same({ n = 3, "v", 3, true }, pack(d:get_stale("k")))
        end)
    end)

    describe("flush_expired()", function()
        it("frees every expired key and returns how many", function()
            local free = d:free_space()
            for i = 1, 10 do
                d:set("old" .. i, binary(200), 0.05)
            end
            d:set("live", "v")
            sleep(0.1)
            assert.same({ n = 1, 10 }, pack(d:flush_expired()))
            assert.same({ n = 1, nil }, pack(d:get_stale("old1")))
            assert.same({ n = 1, "v" }, pack(d:get("live")))
            d:delete("live")
            assert.same({ n = 1, free }, pack(d:free_space()))
        end)

        it("frees at most max_count keys", function()
            for i = 1, 10 do
                d:set("old" .. i, i, 0.05)
            end
            sleep(0.1)
            assert.same({ n = 1, 3 }, pack(d:flush_expired(3)))
            assert.same({ n = 1, 7 }, pack(d:flush_expired(0)))
            assert.same({ n = 1, 0 }, pack(d:flush_expired()))
        end)

        it("returns 0 when nothing has expired", function()
            d:set("k", "v", 100)
            assert.same({ n = 1, 0 }, pack(d:flush_expired()))
            assert.same({ n = 1, "v" }, pack(d:get("k")))
        end)

        it("frees everything after flush_all()", function()
            local free = d:free_space()
            for i = 1, 50 do
                d:set("k" .. i, binary(i * 10))
            end
            d:add("lock", true)
            d:flush_all()
            assert.same({ n = 1, 51 }, pack(d:flush_expired()))
            assert.same({ n = 1, free }, pack(d:free_space()))
        end)
    end)

    describe("get_keys()", function()
        it("returns an empty table for an empty zone", function()
            assert.same({ n = 1, {} }, pack(d:get_keys()))
        end)

        it("returns at most 1024 keys by default", function()
            for i = 1, 1100 do
                d:set("k" .. i, i)
            end
            local keys = d:get_keys()
            assert.equal(1024, #keys)
            local seen = {}
            for _, k in ipairs(keys) do
                assert.is_nil(seen[k])
                seen[k] = true
                assert.is_truthy(k:match("^k%d+$"))
                assert.is_true(tonumber(k:sub(2)) <= 1100)
            end
        end)

        it("returns every key for max_count 0", function()
            local want = {}
            for i = 1, 1100 do
                d:set("k" .. i, i)
                want[i] = "k" .. i
            end
            assert.same(sorted(want), sorted(d:get_keys(0)))
        end)

        it("returns at most max_count keys", function()
            for i = 1, 20 do
                d:set("k" .. i, i)
            end
            assert.equal(5, #d:get_keys(5))
            assert.equal(20, #d:get_keys(100))
        end)

        it("skips expired keys", function()
            d:set("live1", 1)
            d:set("dead1", 1, 0.05)
            d:add("live2", 1)
            d:add("dead2", 1, 0.05)
            d:set("live3", 1, 100)
            sleep(0.1)
            assert.same({ "live1", "live2", "live3" }, sorted(d:get_keys(0)))
            assert.same(2, #d:get_keys(2))
        end)

        it("returns long keys exactly", function()
            local want = {}
            for i = 1, 100 do
                want[i] = binary(1000) .. i
                d:set(want[i], i)
            end
            assert.same(sorted(want), sorted(d:get_keys(0)))
        end)

        it("raises 'bad \"max_count\" argument' for a non-number", function()
            raises('bad "max_count" argument', function() d:get_keys("x") end)
        end)
    end)

    describe("capacity()", function()
        it("returns the size of the zone in bytes", function()
            assert.same({ n = 1, 1024 * 1024 }, pack(d:capacity()))
            assert.same({ n = 1, 65536 }, pack(zone("64k"):capacity()))
        end)
    end)

    describe("free_space()", function()
        it("is positive and below the capacity in a fresh zone", function()
            local r = pack(d:free_space())
            assert.equal(1, r.n)
            assert.is_true(r[1] > 0.9 * 1024 * 1024 and r[1] < 1024 * 1024,
                           tostring(r[1]))
        end)

        it("decreases as entries are added and comes back when they are "
           .. "deleted", function()
            local free = d:free_space()
            local last = free
            for i = 1, 100 do
                d:set("k" .. i, binary(i * 7))
                local now = d:free_space()
                assert.is_true(now < last)
                last = now
            end
            d:add("lock", 1)
            d:incr("cnt", 1, 0)
            for i = 1, 100 do
                d:delete("k" .. i)
            end
            d:delete("lock")
            d:delete("cnt")
            assert.same({ n = 1, free }, pack(d:free_space()))
        end)
    end)

    describe("cas()", function()
        it("returns nil, 'not found', false for a missing key", function()
            assert.same({ n = 3, nil, "not found", false },
                        pack(d:cas("k", "a", "b")))
            assert.same({ n = 1, nil }, pack(d:get("k")))
        end)

        it("returns nil, 'not found', false for an expired key", function()
            d:set("k", "a", 0.05)
            sleep(0.1)
            assert.same({ n = 3, nil, "not found", false },
                        pack(d:cas("k", "a", "b")))
        end)

        it("returns nil, 'changed', false when the value differs",
           function()
            d:set("k", "a")
            assert.same({ n = 3, nil, "changed", false },
                        pack(d:cas("k", "x", "b")))
            assert.same({ n = 3, nil, "changed", false },
                        pack(d:cas("k", "a\0", "b")))
            d:set("n", 1)
            assert.same({ n = 3, nil, "changed", false },
                        pack(d:cas("n", "1", 2)))
            assert.same({ n = 3, nil, "changed", false },
                        pack(d:cas("n", true, 2)))
            assert.same({ n = 1, "a" }, pack(d:get("k")))
            assert.same({ n = 1, 1 }, pack(d:get("n")))
        end)

        it("returns true, nil, false and stores the new value, exptime and "
           .. "flags when the value matches", function()
            d:set("k", "a", 100, 1)
            assert.same({ n = 3, true, nil, false },
                        pack(d:cas("k", "a", "b", 0, 2)))
            assert.same({ n = 2, "b", 2 }, pack(d:get("k")))
            assert.same({ n = 1, 0 }, pack(d:ttl("k")))

            local r, got = timely(0.04, function()
                d:set("n", 1.5)
                return pack(d:cas("n", 1.5, false, 0.05)), pack(d:get("n"))
            end)
            assert.same({ n = 3, true, nil, false }, r)
            assert.same({ n = 1, false }, got)
            sleep(0.1)
            assert.same({ n = 1, nil }, pack(d:get("n")))
        end)

        it("compares long values exactly", function()
            local v = binary(5000)
            d:set("k", v)
            assert.same({ n = 3, nil, "changed", false },
                        pack(d:cas("k", v:sub(1, -2) .. "x", "b")))
            assert.same({ n = 3, true, nil, false },
                        pack(d:cas("k", v, "b")))
        end)

        it("with the same value only updates exptime and flags", function()
            assert.same({ n = 3, true, nil, false }, timely(0.19, function()
                d:set("k", "v", 0.2)
                return pack(d:cas("k", "v", "v", 100, 8))
            end))
            sleep(0.3)
            assert.same({ n = 2, "v", 8 }, pack(d:get("k")))
        end)

        it("deletes the key when the new value is nil", function()
            d:set("k", "v")
            assert.same({ n = 3, true, nil, false },
                        pack(d:cas("k", "v", nil)))
            assert.same({ n = 1, nil }, pack(d:get_stale("k")))
        end)

        it("with old_value nil stores the key when it is absent", function()
            assert.same({ n = 3, true, nil, false },
                        pack(d:cas("k", nil, "v", 0, 3)))
            assert.same({ n = 2, "v", 3 }, pack(d:get("k")))
        end)

        it("with old_value nil stores the key when it has expired",
           function()
            d:set("k", "old", 0.05)
            sleep(0.1)
            assert.same({ n = 3, true, nil, false },
                        pack(d:cas("k", nil, "new")))
            assert.same({ n = 1, "new" }, pack(d:get("k")))
        end)

        it("with old_value nil returns nil, 'changed', false when the key "
           .. "is live", function()
            d:set("k", "v")
            assert.same({ n = 3, nil, "changed", false },
                        pack(d:cas("k", nil, "w")))
            assert.same({ n = 1, "v" }, pack(d:get("k")))
        end)

        it("returns nil, 'bad value type' for a bad old or new value",
           function()
            d:set("k", "v")
            assert.same({ n = 2, nil, "bad value type" },
                        pack(d:cas("k", {}, "w")))
            assert.same({ n = 2, nil, "bad value type" },
                        pack(d:cas("k", "v", {})))
            assert.same({ n = 1, "v" }, pack(d:get("k")))
        end)
    end)

    describe("cad()", function()
        it("returns nil, 'not found' for a missing key", function()
            assert.same({ n = 2, nil, "not found" }, pack(d:cad("k", "v")))
        end)

        it("returns nil, 'not found' for an expired key holding another "
           .. "value", function()
            d:set("k", "v", 0.05)
            sleep(0.1)
            assert.same({ n = 2, nil, "not found" }, pack(d:cad("k", "w")))
        end)

        it("removes an expired entry that still holds the value (it was "
           .. "absent already)", function()
            d:set("k", "v", 0.05)
            sleep(0.1)
            local free = d:free_space()
            assert.same({ n = 1, true }, pack(d:cad("k", "v")))
            assert.same({ n = 1, nil }, pack(d:get_stale("k")))
            assert.is_true(d:free_space() > free)
        end)

        it("returns nil, 'changed' and keeps the key when the value differs",
           function()
            d:set("k", "v")
            assert.same({ n = 2, nil, "changed" }, pack(d:cad("k", "w")))
            d:set("n", 0)
            assert.same({ n = 2, nil, "changed" }, pack(d:cad("n", false)))
            assert.same({ n = 1, "v" }, pack(d:get("k")))
            assert.same({ n = 1, 0 }, pack(d:get("n")))
        end)

        it("returns true and deletes the key when the value matches",
           function()
            d:set("k", "v")
            d:set("b", false)
            assert.same({ n = 1, true }, pack(d:cad("k", "v")))
            assert.same({ n = 1, true }, pack(d:cad("b", false)))
            assert.same({ n = 1, nil }, pack(d:get_stale("k")))
            assert.same({ n = 1, nil }, pack(d:get_stale("b")))
        end)

        it("returns nil, 'bad value type' for a bad old value", function()
            d:set("k", "v")
            assert.same({ n = 2, nil, "bad value type" },
                        pack(d:cad("k", {})))
            assert.same({ n = 1, "v" }, pack(d:get("k")))
        end)
    end)

    describe("verify()", function()
        it("returns true for a fresh zone", function()
            assert.same({ n = 1, true }, pack(zone("32k"):verify()))
        end)

        -- stores `key` in a new zone of `size`, alters a byte of the key
        -- in the zone file, and answers what verify() says then
        local function verify_altered(size, key)
            local z = zone(size)
            local name = opened[#opened]
            z:set(key, "value")
            assert.same({ n = 1, true }, pack(z:verify()))

            local path = dir .. "/shmlock." .. name
            local data = read_file(path)
            local at = data:find(key:sub(1, 12), 1, true)
            assert.is_number(at)
            local f = assert(io.open(path, "r+b"))
            f:seek("set", at - 1)
            f:write("X")
            f:close()
            return pack(z:verify())
        end

        it("returns nil, 'corrupt: ...' when an entry's key was altered",
           function()
            local r = verify_altered("64k", "VERIFY-ME-0123456789")
            assert.equal(2, r.n)
            assert.is_nil(r[1])
            assert.matches("^corrupt: .+", r[2])
        end)

        it("names the broken shard of a sharded zone", function()
            local r = verify_altered("4m", "VERIFY-SHARD-0123456789")
            assert.is_nil(r[1])
            assert.matches("^corrupt: shard [0-3]: .+", r[2])
        end)
    end)

    describe("eviction", function()
        -- fills a zone with one-chunk entries stored by `method` until it
        -- reports `stop`; returns the number stored and that call's results
        local function fill(z, method, prefix, stop)
            for i = 1, 100000 do
                local r = pack(z[method](z, prefix .. i, i))
                if stop(r) then
                    return i - 1, r
                end
            end
            error("zone never filled")
        end

        local function forcible(r) return r[3] == true end
        local function failed(r) return r[1] ~= true end

        it("set() evicts older set() entries and says so", function()
            local z = zone("64k")
            local n, r = fill(z, "set", "k", forcible)
            assert.same({ n = 3, true, nil, true }, r)
            assert.is_true(n > 100)
            assert.same({ n = 1, nil }, pack(z:get("k1")))
            assert.same({ n = 1, n + 1 }, pack(z:get("k" .. (n + 1))))
            assert.is_true(#z:get_keys(0) <= n)
            assert.same({ n = 1, true }, pack(z:verify()))
        end)

        it("incr() with init evicts set() entries and says so", function()
            local z = zone("64k")
            fill(z, "set", "k", forcible)
            assert.same({ n = 3, 1, nil, true }, pack(z:incr("cnt", 1, 0)))
            assert.same({ n = 1, true }, pack(z:verify()))
        end)

        it("add() evicts set() entries and says so", function()
            local z = zone("64k")
            fill(z, "set", "k", forcible)
            assert.same({ n = 3, true, nil, true }, pack(z:add("lock", 1)))
            assert.same({ n = 1, 1 }, pack(z:get("lock")))
        end)

        it("never evicts live add() and safe_add() entries", function()
            local z = zone("64k")
            for i = 1, 50 do
                assert.same({ n = 3, true, nil, false },
                            pack(z:add("lock" .. i, "owner" .. i)))
                assert.same({ n = 3, true, nil, false },
                            pack(z:safe_add("safe" .. i, i)))
            end
            local evicted = 0
            for i = 1, 3000 do
                local ok, err, f = z:set("k" .. i, binary(100))
                assert.same({ true, nil }, { ok, err })
                if f then
                    evicted = evicted + 1
                end
            end
            assert.is_true(evicted > 1000)
            for i = 1, 50 do
                assert.same({ n = 1, "owner" .. i }, pack(z:get("lock" .. i)))
                assert.same({ n = 1, i }, pack(z:get("safe" .. i)))
            end
            assert.same({ n = 1, true }, pack(z:verify()))
        end)

        it("never evicts entries made by cas() with old_value nil, nor "
           .. "add() entries changed by replace()", function()
            local z = zone("64k")
            for i = 1, 20 do
                z:cas("cas" .. i, nil, i)
                z:add("rep" .. i, 0)
                z:replace("rep" .. i, i)
            end
            for i = 1, 3000 do
                z:set("k" .. i, binary(100))
            end
            for i = 1, 20 do
                assert.same({ n = 1, i }, pack(z:get("cas" .. i)))
                assert.same({ n = 1, i }, pack(z:get("rep" .. i)))
            end
        end)

        it("returns false, 'no memory', false when only live add() entries "
           .. "are left", function()
            local z = zone("64k")
            local n, r = fill(z, "add", "a", failed)
            assert.same({ n = 3, false, "no memory", false }, r)
            assert.same({ n = 1, 0 }, pack(z:free_space()))

            assert.same({ n = 3, false, "no memory", false },
                        pack(z:set("x", 1)))
            assert.same({ n = 3, false, "no memory", false },
                        pack(z:add("x", 1)))
            assert.same({ n = 3, false, "no memory", false },
                        pack(z:safe_set("x", 1)))
            assert.same({ n = 3, false, "no memory", false },
                        pack(z:safe_add("x", 1)))
            assert.same({ n = 2, nil, "no memory" },
                        pack(z:incr("x", 1, 0)))
            assert.same({ n = 3, nil, "no memory", false },
                        pack(z:cas("x", nil, 1)))
            assert.same({ n = 1, nil }, pack(z:get("x")))

            -- what changes in place still works
            assert.same({ n = 1, 11 }, pack(z:incr("a1", 10)))
            assert.same({ n = 3, true, nil, false },
                        pack(z:cas("a2", 2, 2, 100)))
            assert.same({ n = 1, true }, pack(z:cad("a3", 3)))
            assert.equal(n - 1, #z:get_keys(0))
            assert.same({ n = 1, true }, pack(z:verify()))
        end)

        it("reclaims expired add() entries without calling it forcible",
           function()
            local z = zone("64k")
            local n = fill(z, "add", "a", failed)
            assert.same({ n = 1, true }, pack(z:expire("a1", 0.01)))
            assert.same({ n = 1, true }, pack(z:expire("a2", 0.01)))
            sleep(0.05)
            assert.same({ n = 3, true, nil, false }, pack(z:safe_add("x", 1)))
            assert.same({ n = 3, true, nil, false }, pack(z:set("y", 1)))
            assert.same({ n = 1, nil }, pack(z:get_stale("a1")))
            assert.same({ n = 1, nil }, pack(z:get_stale("a2")))
            assert.equal(n, #z:get_keys(0))
            assert.same({ n = 1, true }, pack(z:verify()))
        end)

        it("safe_set() and safe_add() never evict live set() entries",
           function()
            local z = zone("64k")
            fill(z, "set", "k", forcible)
            local keys = sorted(z:get_keys(0))
            assert.same({ n = 3, false, "no memory", false },
                        pack(z:safe_set("x", 1)))
            assert.same({ n = 3, false, "no memory", false },
                        pack(z:safe_add("x", 1)))
            assert.same(keys, sorted(z:get_keys(0)))
            assert.same({ n = 1, true }, pack(z:verify()))
        end)

        it("safe_set() reclaims expired set() entries", function()
            local z, got = timely(0.29, function()
                local fresh = zone("64k")
                for i = 1, 10 do
                    fresh:set("old" .. i, i, 0.3)
                end
                fill(fresh, "set", "k", function()
                    return fresh:free_space() == 0
                end)
                local t = {}
                for i = 1, 10 do
                    t[i] = pack(fresh:get("old" .. i))
                end
                return fresh, t
            end)
            for i = 1, 10 do
                assert.same({ n = 1, i }, got[i])
            end
            sleep(0.4)
            assert.same({ n = 3, true, nil, false }, pack(z:safe_set("x", 1)))
            assert.same({ n = 3, true, nil, false },
                        pack(z:safe_add("y", 1)))
            assert.same({ n = 1, true }, pack(z:verify()))
        end)

        -- ngx.shared.DICT rewrites a same-size value in place: overwriting
        -- a live key never needs more room.  Ours rewrites in place when
        -- the new value needs as many chunks as the old (crash-safe through
        -- the zone's undo area), so a full zone still takes overwrites.
        it("set() of a live key in a full zone evicts nothing", function()
            local z = zone("64k")
            local n = fill(z, "set", "k", forcible)
            local keys = #z:get_keys(0)
            for i = n - 5, n do
                if z:get("k" .. i) ~= nil then
                    assert.same({ n = 3, true, nil, false },
                                pack(z:set("k" .. i, i + 1000000)))
                    assert.same({ n = 1, i + 1000000 }, pack(z:get("k" .. i)))
                end
            end
            assert.equal(keys, #z:get_keys(0))
            assert.same({ n = 1, true }, pack(z:verify()))
        end)

        it("set(), replace() and cas() of a live add() entry work in a zone "
           .. "full of add() entries", function()
            local z = zone("64k")
            fill(z, "add", "a", failed)
            assert.same({ n = 3, true, nil, false }, pack(z:set("a1", 2)))
            assert.same({ n = 1, 2 }, pack(z:get("a1")))
            assert.same({ n = 3, true, nil, false }, pack(z:replace("a2", 3)))
            assert.same({ n = 1, 3 }, pack(z:get("a2")))
            assert.same({ n = 3, true, nil, false }, pack(z:cas("a3", 3, 4)))
            assert.same({ n = 1, 4 }, pack(z:get("a3")))
            assert.same({ n = 1, true }, pack(z:verify()))
        end)

        it("comes back to the initial free space once everything is gone",
           function()
            local z = zone("64k")
            local free = z:free_space()
            fill(z, "set", "k", forcible)
            for i = 1, 20 do
                z:add("lock" .. i, i, 0.05)
            end
            z:flush_all()
            z:flush_expired()
            assert.same({ n = 1, free }, pack(z:free_space()))
            assert.same({ n = 1, true }, pack(z:verify()))
        end)
    end)

    describe("under the JIT", function()
        -- each loop runs alone in a fresh process, as lua-resty-core's
        -- tests do, so its traces are not mixed with other loops'
        local loops = {
            { "get a number", 'local v = d:get("num")' },
            { "get a string", 'local v = d:get("str")' },
            { "get a missing key", 'local v = d:get("missing")' },
            { "get_stale", 'local v, f, s = d:get_stale("str")' },
            { "set a number", 'd:set("num", i)' },
            { "set a string", 'd:set("str", "value")' },
            { "get then set", 'd:set("num", d:get("num") + 1)' },
            { "safe_set", 'd:safe_set("num", i, 100)' },
            { "add and delete", 'd:add("lock", 1, 10) d:delete("lock")' },
            { "safe_add on a live key", 'd:safe_add("num", 1)' },
            { "replace", 'd:replace("str", "other", 0, 3)' },
            { "incr", 'd:incr("cnt", 1)' },
            { "incr with init", 'd:incr("cnt2", 1, 0, 10)' },
            { "ttl and expire", 'd:expire("num", 10) local t = d:ttl("num")' },
            { "cas and cad", 'd:cas("lk", nil, 1, 10) d:cad("lk", 1)' },
        }

        for _, loop in ipairs(loops) do
            it("compiles a loop of " .. loop[1] .. " without NYI or aborts",
               function()
                local script = tmp .. "/jit.lua"
                local log = tmp .. "/jit.log"
                write_file(script, ([[
local shdict = require "resty.shmlock.shdict"
local d = assert(shdict.open(%q, { dir = %q }))
d:set("num", 1) d:set("str", "value") d:set("cnt", 0)
collectgarbage() collectgarbage()
for i = 1, 1000 do
    %s
end
print("done")
]]):format(opened[1], dir, loop[2]))
                local out = sh("LUA_PATH='" .. LUA_PATH .. "' luajit -jv="
                               .. log .. " " .. script .. " 2>&1")
                assert.equal("done\n", out)
                local v = read_file(log)
                assert.matches("%[TRACE%s+%d+ jit%.lua:5 loop%]", v)
                assert.is_nil(v:match("NYI"), v)
                assert.is_nil(v:match("stitch"), v)
                assert.is_nil(v:match("blacklist"), v)
                -- The aborts allowed are warm-up order: when a method gets
                -- hot before the loop (called twice per iteration, or its
                -- hot counter shares a slot with the loop's), the trace
                -- started in it runs into the loop, not compiled yet, and
                -- gives up.  Anything else fails.
                for line in v:gmatch("[^\n]+") do
                    if line:match("^%[TRACE %-%-%-") then
                        assert.is_truthy(
                            line:match(" %-%- loop unroll limit reached at ")
                            or line:match(" %-%- leaving loop in root trace "
                                          .. "at "), v)
                    end
                end
            end)
        end
    end)
end)
