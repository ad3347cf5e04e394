-- helpers.redis_child: one contender of the Redis lock's multi-process
-- spec, run as `luajit spec/helpers/redis_child.lua PORT KEY N`.
--
-- Connects its own client, waits for the spec to set "go:KEY" (so all
-- contenders start together), then N times: lock, a non-atomic counter
-- update (GET, then SET + 1), a check that the fence beats the newest one
-- the "resource" has seen, unlock.  Prints "STALE ..." for a fence that
-- does not, "FENCES f1 f2 ..." and "DONE" at the end, "ERR ..." and exits
-- 1 on any failure.

local redis = require "redis"
local redis_lock = require "resty.shmlock.redis"
local socket = require "socket"

local port, key, n = tonumber(arg[1]), arg[2], tonumber(arg[3])

local function fail(msg)
    io.write("ERR ", tostring(msg), "\n")
    io.flush()
    os.exit(1)
end

local ok, c = pcall(redis.connect, "127.0.0.1", port, 5)
if not ok then
    fail(c)
end

local deadline = socket.gettime() + 10
while not c:get("go:" .. key) do
    if socket.gettime() > deadline then
        fail("no go")
    end
    socket.sleep(0.001)
end

local lock = redis_lock.new(c, { timeout = 10, max_step = 0.005 })
local counter_key = "counter:" .. key
local seen_key = "lastfence:" .. key
local fences = {}

for i = 1, n do
    local elapsed, err, fence = lock:lock(key)
    if not elapsed then
        fail("lock: " .. tostring(err))
    end

    local value = tonumber(c:get(counter_key) or "0")
    -- the protected resource: rejects a fence older than the newest seen
    local seen = tonumber(c:get(seen_key) or "0")
    if fence <= seen then
        io.write("STALE ", fence, " ", seen, "\n")
    end
    c:set(seen_key, fence)
    c:set(counter_key, value + 1)

    local unlocked, uerr = lock:unlock()
    if unlocked ~= 1 then
        fail("unlock: " .. tostring(uerr))
    end
    fences[i] = fence
end

io.write("FENCES ", table.concat(fences, " "), "\n", "DONE\n")
io.flush()
os.exit(0)
