-- spec/every_lua/dict.lua DIR: the dictionary's methods under whichever
-- interpreter runs this (spec/60), each answer checked; prints "ok" or
-- raises.  No FFI, no busted: plain Lua 5.1 to 5.4 and LuaJIT alike.
local dir = assert(arg[1], "usage: dict.lua DIR")
local shdict = require "resty.shmlock.shdict"

local function eq(want, got, what)
    if want ~= got then
        error(what .. ": expected " .. tostring(want) .. ", got "
              .. tostring(got), 2)
    end
end

local d = assert(shdict.open("el_dict", { dir = dir, size = "64k" }))
eq(true, (d:set("s", "a\0b", 0, 7)), "set")
local v, flags = d:get("s")
eq("a\0b", v, "get keeps embedded zeros")
eq(3, #v, "length")
eq(7, flags, "flags")
eq(true, (d:set("t", true)), "set true")
eq(true, d:get("t"), "boolean")
eq(false, (d:add("s", "x")), "add on a key")
eq("exists", select(2, d:add("s", "x")), "add's message")
eq(1, d:incr("n", 1, 0), "incr with init")
eq(3.5, d:incr("n", 2.5), "incr by a float")
eq(nil, (d:incr("absent", 1)), "incr without init")
eq("not found", select(2, d:incr("absent", 1)), "incr's message")
eq(1, d:lpush("l", "x"), "lpush")
eq(2, d:rpush("l", 5), "rpush")
eq(2, d:llen("l"), "llen")
eq("value is a list", select(2, d:get("l")), "get on a list")
eq("x", d:lpop("l"), "lpop")
eq(5, d:rpop("l"), "rpop")
eq(true, (d:cas("s", "a\0b", "c")), "cas")
eq("c", d:get("s"), "cas wrote")
eq(true, (d:cad("s", "c")), "cad")
eq(nil, d:get("s"), "cad removed")
local big = string.rep("z", 10000)
eq(true, (d:set("big", big)), "a value beyond the first buffer")
eq(big, d:get("big"), "read back whole")
eq(true, (d:delete("big")), "delete")
eq(1, d:rpush("bigl", big), "a list element beyond the first buffer")
eq(big, d:lpop("bigl"), "popped whole")
for i = 1, 20 do
    d:set("k" .. i, i)
end
local cursor, seen = 0, {}
repeat
    local keys
    cursor, keys = d:scan(cursor, 3)
    for _, k in ipairs(keys) do
        seen[k] = true
    end
until cursor == 0
for i = 1, 20 do
    eq(true, seen["k" .. i], "scan saw k" .. i)
end
eq(22, #d:get_keys(0), "get_keys: t, n, k1..k20")
eq("bad \"exptime\" argument",
   select(2, pcall(d.set, d, "x", 1, -1)):match('bad "exptime" argument'),
   "a bad exptime raises")
eq("nil key", select(2, d:get(nil)), "nil key")
eq(true, (d:verify()), "verify")
local st = d:stats()
eq(22, st.entries, "stats.entries")
eq(st.capacity, d:capacity(), "capacity")
eq(true, d:free_space() > 0, "free_space")
eq(true, d:ttl("n") == 0, "ttl of a key without exptime")
eq(true, (d:expire("n", 100)), "expire")
eq(true, d:ttl("n") > 99, "ttl after expire")
-- numbers are doubles in the zone; 5.3+ sees whole ones as integers
d:set("one", 1.0)
eq(1, d:get("one"), "1.0 reads as 1")
local math_type = math.type -- luacheck: ignore 143 (5.3+)
if math_type then
    eq("integer", math_type(d:get("one")), "a whole number: an integer")
    d:set("half", 0.5)
    eq("float", math_type(d:get("half")), "a fraction: a float")
    d:set("huge", 2 ^ 60)
    eq("float", math_type(d:get("huge")), "beyond 2^53: a float")
    d:delete("half")
    d:delete("huge")
end
d:flush_all()
eq(nil, d:get("one"), "flush_all")
eq(true, (shdict.destroy("el_dict", { dir = dir })), "destroy")
print("ok")
