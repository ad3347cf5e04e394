-- spec/every_lua/keys.lua: number keys under whichever interpreter runs
-- this (spec/60; make test-every-lua, under valgrind and ASan): the
-- string each becomes (resty.shmlock.internal.key), the same under every
-- interpreter, and the dictionary, the lock, shared holds and the
-- semaphore taking them so, across processes of different interpreters.
--
--     lua keys.lua DIR               the table of cases, each key's string
--                                    checked, and every key-taking method
--                                    of the dictionary on number keys;
--                                    prints "ok"
--     lua keys.lua DIR sweep         the key's string of each of a few
--                                    thousand numbers made the same way
--                                    under every interpreter, one a line
--                                    (spec/60 compares them)
--     lua keys.lua DIR hold LUA      holds every number key of held_keys()
--                                    (a lock, a shared hold, a semaphore's
--                                    only permit) and sets each as a dict
--                                    key; prints "held <pid>", keeps them
--                                    until its stdin ends, prints "ok"
--     lua keys.lua DIR try LUA PID   while LUA's process PID holds (above):
--                                    none of those keys can be taken here,
--                                    each is seen held by PID, each dict
--                                    value is LUA's; prints "ok"
-- Misses raise.  No FFI, no busted: plain Lua 5.1 to 5.4 and LuaJIT alike.
local dir, mode = assert(arg[1], "usage: keys.lua DIR [sweep|hold|try]"),
                  arg[2] or "check"

local key = require "resty.shmlock.internal.key"

local math_type = math.type -- luacheck: ignore 143 (5.3+)

local function eq(want, got, what)
    if want ~= got then
        error(what .. ": expected " .. tostring(want) .. ", got "
              .. tostring(got), 2)
    end
end

-- runtime negation: a literal -0.0 is folded to 0 by Lua 5.1's compiler
local function neg(x)
    return -x
end

-- { name, value, its key }: the table of cases (5.3+ integers appended
-- where there are any)
local MAXINT = "9223372036854775807"
local CASES = {
    { "0", 0, "0" }, { "-0.0", neg(0.0), "0" }, { "1", 1, "1" },
    { "-1", -1, "-1" }, { "2^10", 2 ^ 10, "1024" },
    { "2^53", 2 ^ 53, "9007199254740992" },
    { "-2^53", -2 ^ 53, "-9007199254740992" },
    { "2^53+2", 2 ^ 53 + 2, "9.007199254741e+15" },
    { "-2^53-2", -2 ^ 53 - 2, "-9.007199254741e+15" },
    { "2^63", 2 ^ 63, "9.2233720368548e+18" },
    { "1e300", 1e300, "1e+300" }, { "0.1", 0.1, "0.1" },
    { "1/3", 1 / 3, "0.33333333333333" },
    { "inf", 1 / 0, "inf" }, { "-inf", -1 / 0, "-inf" },
    { "nan", 0 / 0, "nan" }, { "-nan", neg(0 / 0), "nan" },
    { "123456789012345", 123456789012345, "123456789012345" },
    { "1e15", 1e15, "1000000000000000" },
    -- exact ties at the 15th digit: C's %.14g rounds them to even
    { "12345678901234.5", 12345678901234.5, "12345678901234" },
    { "12345678901234500.0", 12345678901234500.0, "1.2345678901234e+16" },
    { "5e-324", 5e-324, "4.9406564584125e-324" },
    { "true", true, "true" }, { "false", false, "false" },
    { "a string", "2^10", "2^10" },
}
if math_type then
    CASES[#CASES + 1] = { "maxinteger", math.maxinteger, MAXINT } -- luacheck: ignore 143
    CASES[#CASES + 1] = { "mininteger", math.mininteger, -- luacheck: ignore 143
                          "-9223372036854775808" }
end

-- the number keys the processes hold (hold, try): { name, key }; the
-- 5.3+ integer only where there is one (elsewhere try takes its digits)
local function held_keys()
    local keys = {
        { "2^10", 2 ^ 10 }, { "2^53", 2 ^ 53 }, { "-0.0", neg(0.0) },
        { "1e15", 1e15 }, { "0.1", 0.1 },
    }
    keys[#keys + 1] = { "maxinteger",
                        math_type and math.maxinteger -- luacheck: ignore 143
                        or MAXINT }
    return keys
end

if mode == "sweep" then
    -- Park-Miller: every product below 2^47, exact in any interpreter's
    -- numbers; every number below made a float (5.3+ keeps integers
    -- apart: a whole float beyond 2^53 has %.14g, an integer digits)
    local seed = 20240601
    local function rand(n)
        seed = seed * 48271 % 2147483647
        return seed % n
    end
    local out = {}
    local function put(x)
        out[#out + 1] = assert(key.text(x))
    end
    for _ = 1, 1500 do
        -- any double: a 53-bit mantissa at a random exponent
        local m = (rand(2 ^ 31) * 2 ^ 22 + rand(2 ^ 22)) + 0.0
        local x = m * 2.0 ^ (rand(2097) - 1126)
        put(rand(2) == 0 and x or -x)
    end
    for _ = 1, 500 do
        -- ties: a 14-digit whole number and a half; 17 digits ending 500
        -- (even, below 2^54: a float exactly)
        local k = 1e13 + rand(2 ^ 31) * 4000 + rand(4000) + 0.0
        put(k + 0.5)
        put((1e13 + rand(7629394) * 2 ^ 20 + rand(2 ^ 20)) * 1000
            + 500.0)
    end
    for i = -20, 20 do
        -- whole floats around +-2^53 and +-1e15
        put(2.0 ^ 53 + i)
        put(-2.0 ^ 53 + i)
        put(1e15 + i + 0.0)
        put(-1e14 + i + 0.0)
    end
    for _ = 1, 500 do
        -- decimal fractions and whole numbers of up to 16 digits
        put((rand(2 ^ 31) + 0.0) / 10 ^ rand(20))
        put(rand(2 ^ 31) * 2 ^ 22 + rand(2 ^ 22) + 0.0)
    end
    io.write(table.concat(out, "\n"), "\n")
    return
end

local shdict = require "resty.shmlock.shdict"

if mode == "check" then
    for _, c in ipairs(CASES) do
        eq(c[3], key.text(c[2]), "the key of " .. c[1])
    end
    -- each method given the number, each answer read under its string
    local d = assert(shdict.open("el_keys_dict", { dir = dir, size = "1m" }))
    eq(true, (d:set(2 ^ 10, "a")), "set")
    eq("a", d:get("1024"), "set(2^10): key 1024")
    eq("a", d:get(2 ^ 10), "get(2^10)")
    eq("a", d:get_stale(2 ^ 10), "get_stale(2^10)")
    eq(true, (d:safe_set(2 ^ 53, "b")), "safe_set")
    eq("b", d:get("9007199254740992"), "safe_set(2^53)")
    eq(true, (d:add(1e15, "c")), "add")
    eq("c", d:get("1000000000000000"), "add(1e15)")
    eq(true, (d:safe_add(neg(0.0), "d")), "safe_add")
    eq("d", d:get("0"), "safe_add(-0.0): key 0")
    eq("d", d:get(0), "get(0)")
    eq(true, (d:replace(2 ^ 10, "e")), "replace")
    eq("e", d:get("1024"), "replace(2^10)")
    eq(5, d:incr(2 ^ 11, 5, 0), "incr with init")
    eq(7, d:incr(2 ^ 11, 2), "incr")
    eq(7, d:get("2048"), "incr(2^11): key 2048")
    eq(1, d:lpush(0.1, "x"), "lpush")
    eq(2, d:rpush(0.1, "y"), "rpush")
    eq(2, d:llen("0.1"), "llen of 0.1")
    eq("x", d:lpop(0.1), "lpop")
    eq("y", d:rpop(0.1), "rpop")
    eq(true, (d:set(2 ^ 63, "f")), "set(2^63)")
    eq("f", d:get("9.2233720368548e+18"), "set(2^63): %.14g")
    -- (read in that order: the second ttl no longer than the first)
    eq(true, (d:expire(2 ^ 10, 1000)), "expire")
    local ttl = d:ttl("1024")
    eq(true, ttl > 0 and ttl <= 1000, "ttl after expire(2^10)")
    local ttl2 = d:ttl(2 ^ 10)
    eq(true, ttl2 > 0 and ttl2 <= ttl, "ttl(2^10)")
    eq(true, (d:cas(2 ^ 10, "e", "g")), "cas")
    eq("g", d:get("1024"), "cas(2^10)")
    eq(true, (d:cad(2 ^ 10, "g")), "cad")
    eq(nil, d:get("1024"), "cad(2^10)")
    eq(true, (d:delete(1e15)), "delete")
    eq(nil, d:get("1000000000000000"), "delete(1e15)")
    eq(true, (d:set(0 / 0, "n")), "set(nan)")
    eq("n", d:get("nan"), "set(nan): key nan")
    eq(true, (d:set(true, "t")), "set(true)")
    eq("t", d:get("true"), "set(true): key true")
    if math_type then
        eq(true, (d:set(math.maxinteger, "i")), "set(maxinteger)") -- luacheck: ignore 143
        eq("i", d:get(MAXINT), "set(maxinteger): its digits")
    end
    -- (0.1's list went with its last element)
    local want = { "0", "2048", "9.2233720368548e+18", "9007199254740992",
                   "nan", "true", math_type and MAXINT or nil }
    -- the C module takes a key as a string only: no number reaches it
    -- to be made "1024.0" by lua_tolstring
    local core = require "resty.shmlock.internal.core"
    if not core.ffi then
        local ok, err = pcall(core.mod.dict_get,
                              shdict._zone_handle(d), 2 ^ 10)
        eq(false, ok, "the C module's dict_get(zone, 2^10)")
        eq(true, err:find("string expected, got number", 1, true) ~= nil,
           "its error: " .. tostring(err))
    end
    local names = d:get_keys(0)
    table.sort(want)
    table.sort(names)
    eq(table.concat(want, " "), table.concat(names, " "), "get_keys")
    print("ok")
    return
end

local resty_lock = require "resty.shmlock"
local semaphore = require "resty.shmlock.semaphore"

-- a zone per kind: a lock, a shared hold and a semaphore's permit of one
-- key never meet
local dx = assert(shdict.open("el_keys_x", { dir = dir, size = "1m" }))
local ds = assert(shdict.open("el_keys_s", { dir = dir, size = "1m" }))
local dm = assert(shdict.open("el_keys_m", { dir = dir, size = "1m" }))
local dv = assert(shdict.open("el_keys_v", { dir = dir, size = "1m" }))
local lua = assert(arg[3], "usage: keys.lua DIR " .. mode .. " LUA ...")

if mode == "hold" then
    local held = {}
    for i, k in ipairs(held_keys()) do
        local x = assert(resty_lock:new(dx, { exptime = 0 }))
        eq(0, x:lock(k[2]), "lock " .. k[1])
        local s = assert(resty_lock:new(ds, { exptime = 0 }))
        eq(0, s:lock_shared(k[2]), "lock_shared " .. k[1])
        local m = assert(semaphore:new(dm, { permits = 1, exptime = 0 }))
        eq(0, m:acquire(k[2]), "acquire " .. k[1])
        eq(true, (dv:set(k[2], lua .. " " .. i)), "set " .. k[1])
        held[#held + 1] = { x, s, m }
    end
    io.write("held ", require("resty.shmlock.internal.core").self_pid(),
             "\n")
    io.flush()
    io.read("*a")
    for _, h in ipairs(held) do
        eq(1, h[1]:unlock(), "unlock")
        eq(1, h[2]:unlock(), "unlock a shared hold")
        eq(1, h[3]:release(), "release")
    end
    print("ok")
    return
end

if mode == "try" then
    local pid = assert(tonumber(arg[4]), "usage: keys.lua DIR try LUA PID")
    for i, k in ipairs(held_keys()) do
        local name = k[1] .. " (" .. lua .. "'s)"
        local x = assert(resty_lock:new(dx, { timeout = 0 }))
        eq("timeout", select(2, x:lock(k[2])), "lock " .. name)
        eq(pid, assert(resty_lock.inspect(dx, k[2])).pid, "holder of " .. name)
        local xs = assert(resty_lock:new(ds, { timeout = 0 }))
        eq("timeout", select(2, xs:lock(k[2])), "lock on a shared " .. name)
        local info = assert(resty_lock.inspect(ds, k[2]))
        eq("shared", info.kind, "kind of the shared " .. name)
        eq(pid, info.holders[1].pid, "holder of the shared " .. name)
        local m = assert(semaphore:new(dm, { permits = 1 }))
        eq("timeout", select(2, m:acquire(k[2], 0)), "acquire " .. name)
        eq(1, m:count(k[2]), "count " .. name)
        eq(pid, assert(semaphore.inspect(dm, k[2])).holders[1].pid,
           "permit holder of " .. name)
        eq(lua .. " " .. i, dv:get(k[2]), "the dict value of " .. name)
    end
    print("ok")
    return
end

error("unknown mode " .. mode)
