-- spec/every_lua/cache.lua DIR: the cache under whichever interpreter runs
-- this (spec/60): set, peek, get's L1 and L2 hits (L1 coherent with
-- another cache object's set), delete, purge, stats, the L1's LRU and its
-- expiry, a miss loaded under the lock, a loader's error.  Prints "ok" or
-- raises.  No FFI, no busted: plain Lua 5.1 to 5.4 and LuaJIT alike.
-- luacheck: ignore 311 (each answer is read into the same locals)
local dir = assert(arg[1], "usage: cache.lua DIR")
local shdict = require "resty.shmlock.shdict"
local cache = require "resty.shmlock.cache"

local function eq(want, got, what)
    if want ~= got then
        error(what .. ": expected " .. tostring(want) .. ", got "
              .. tostring(got), 2)
    end
end

local zone = assert(shdict.open("el_cache", { dir = dir, size = "1m" }))
local c = assert(cache.new("el", { dict = zone, ttl = 0 }))
local other = assert(cache.new("el", { dict = zone, ttl = 0 }))
local function never() error("the loader must not run") end

-- set, then hits: L1 in the writer, L2 in another object, then its L1
eq(true, (c:set("s", "text")), "set")
local v, err, level = c:get("s", nil, never)
eq("text", v, "get") eq(nil, err, "get err") eq(1, level, "L1 hit")
v, err, level = other:get("s", nil, never)
eq("text", v, "other get") eq(2, level, "L2 hit")
eq(1, select(3, other:get("s", nil, never)), "other's L1 hit")

-- every kind of value, through L2 (another object's reads)
local t = { 1, "two", { nested = true, [0] = "zero" }, n = 1.5, big = 2 ^ 60 }
for k, value in pairs { num = 42, float = -0.25, yes = true, no = false,
                        tab = t } do
    eq(true, (c:set(k, value)), "set " .. k)
end
eq(true, (c:set("nothing", nil)), "set nil")
eq(42, (other:get("num", nil, never)), "number")
eq(-0.25, (other:get("float", nil, never)), "float")
eq(true, (other:get("yes", nil, never)), "true")
eq(false, (other:get("no", nil, never)), "false")
v, err, level = other:get("nothing", nil, never)
eq(nil, v, "nil") eq(nil, err, "nil's err") eq(2, level, "nil from L2")
v = other:get("tab", nil, never)
eq(1, v[1], "table [1]") eq("two", v[2], "table [2]")
eq(true, v[3].nested, "nested") eq("zero", v[3][0], "index 0")
eq(1.5, v.n, "table float") eq(2 ^ 60, v.big, "table big")
local math_type = math.type -- luacheck: ignore 143 (5.3+)
if math_type then
    eq("integer", math_type((other:get("num", nil, never))), "integer")
    eq("integer", math_type(v[1]), "integer in a table")
end

-- what cannot be cached, as under LuaJIT
local ok, msg = pcall(c.set, c, "f", print)
eq(false, ok, "a function raises")
eq(true, msg:find("bad value: cannot cache a function", 1, true) ~= nil, msg)
ok, msg = pcall(c.set, c, "f", { print })
eq(true, msg:find("cannot serialise the table: cannot serialize 'function'",
                  1, true) ~= nil, msg)
local loop = {} loop.self = loop
ok, msg = pcall(c.set, c, "f", loop)
eq(true, msg:find("too deep to serialize", 1, true) ~= nil, msg)

-- peek: L2 only, the ttl left
local left, perr, pv = c:peek("s")
eq(0, left, "peek ttl (never)") eq(nil, perr, "peek err") eq("text", pv, "peek")
eq(true, (c:set("short", "x", 100)), "set with a ttl")
left = c:peek("short")
eq(true, left > 99 and left <= 100, "peek's ttl left: " .. tostring(left))
eq(nil, (c:peek("absent")), "peek absent")

-- the other object's L1 copy follows a set and a delete made here
eq(true, (c:set("s", "changed")), "set again")
v, err, level = other:get("s", nil, never)
eq("changed", v, "coherent after set") eq(2, level, "from L2")
eq(true, (c:delete("s")), "delete")
eq(nil, (other:peek("s")), "deleted in L2")

-- purge: every key of this cache, in L2 and in every L1
eq(true, (c:purge()), "purge")
eq(nil, (other:peek("num")), "purged")
eq(true, (zone:set("not-ours", 1)), "a key of no cache")
eq(true, (c:purge()), "purge again")
eq(1, zone:get("not-ours"), "purge keeps other keys")

-- a miss loads under the lock, once: then L1 and L2 have it
local loads = 0
local function load() loads = loads + 1 return { "loaded" } end
v, err, level = c:get("miss", nil, load)
eq("loaded", v and v[1], "a miss loads") eq(nil, err, "the load's err")
eq(3, level, "from the loader")
eq("loaded", (c:get("miss", nil, load))[1], "then an L1 hit")
eq("loaded", (other:get("miss", nil, load))[1], "and an L2 hit")
eq(1, loads, "one load")
v, err = c:get("fails", nil, function() error("no such user") end)
eq(nil, v, "a loader's error")
eq(true, err:find("no such user", 1, true) ~= nil, err)

-- stats: each object's counts reach the zone at its stats()
assert(c:stats())
local st = assert(other:stats())
eq(true, st.hits_l1 >= 1, "hits_l1") eq(true, st.hits_l2 >= 1, "hits_l2")
eq(2, st.misses, "misses: \"miss\" and \"fails\"")

-- the L1: at most l1_size items, the least recently used one goes
local small = assert(cache.new("el_small", { dict = zone, l1_size = 2 }))
for _, k in ipairs { "a", "b", "c" } do
    assert(small:set(k, k))
end
eq(2, select(3, small:get("a", nil, never)), "a went first: from L2")
eq(1, select(3, small:get("c", nil, never)), "c stayed in L1")
print("ok")
