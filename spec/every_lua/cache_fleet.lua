-- spec/every_lua/cache_fleet.lua PORT NAME: one host of spec/36's fleet
-- tier under another interpreter (PUC Lua 5.1 to 5.3, where lua-redis
-- loads), in the host of $SHMLOCK_DIR.  Gets "t" (a table another host
-- loaded: it must come from Redis, hit_level 5), then loads key NAME with
-- value NAME for the next interpreter.  Prints "t <n> <s> <level> | NAME
-- <level> | ok", or raises.
local port, name = tonumber(arg[1]), arg[2]
local redis = require "redis"
local cache = require "resty.shmlock.cache"

local c = assert(cache.new("fleet", {
    redis = function(timeout)
        return redis.connect("127.0.0.1", port, timeout)
    end,
}))

local t, err, level = c:get("t", nil, error)
assert(type(t) == "table", "t: " .. tostring(t) .. " " .. tostring(err))
local out = { ("t %d %s %d"):format(t.n, t.s, level) }

local v
v, err, level = c:get(name, nil, function() return name end)
assert(v == name, tostring(err))
out[#out + 1] = ("%s %d"):format(v, level)
assert(c:stats().redis_errors == 0, "redis errors")
out[#out + 1] = "ok"
print(table.concat(out, " | "))
