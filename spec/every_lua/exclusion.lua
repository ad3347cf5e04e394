-- spec/every_lua/exclusion.lua DIR N: N read-modify-write rounds of the
-- key "counter" under the lock "counter_lock" (resty.shmlock), each a get and a
-- set that only the lock keeps whole; prints "ok" or why not.
local dir, n = arg[1], tonumber(arg[2])
local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local d = assert(shdict.open("el_excl", { dir = dir, size = "1m" }))
local lock, err = resty_lock:new(d, { timeout = 60, exptime = 60 })
if not lock then
    print("no lock: " .. tostring(err))
    return
end
for _ = 1, n do
    assert(lock:lock("counter_lock"))
    local v = d:get("counter") or 0
    assert(d:set("counter", v + 1))
    assert(lock:unlock())
end
print("ok")
