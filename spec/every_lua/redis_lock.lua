-- spec/every_lua/redis_lock.lua PORT KEY: the Redis lock and semaphore
-- under another interpreter (PUC Lua 5.1 to 5.3, where lua-redis loads),
-- in the host of $SHMLOCK_DIR, for spec/27.  The spec holds KEY's lock
-- from another host and lets it go once this process waits (on the key's
-- wake stream: backstop 60 s); this process takes it, woken by the
-- release, takes and gives back a permit of KEY, and prints "lock <fence>
-- <woken> | sem 1 0 | ok", or raises.
local port, key = tonumber(arg[1]), arg[2]
local redis = require "redis"
local redis_lock = require "resty.shmlock.redis"
local rsem = require "resty.shmlock.redis.semaphore"
local clock = require "resty.shmlock.internal.clock"

local function connect(timeout)
    return redis.connect("127.0.0.1", port, timeout or 2)
end

local lock = assert(redis_lock.new(connect, { max_step = 60, timeout = 120 }))
local t0 = clock.now()
local elapsed, err, fence = lock:lock(key)
assert(elapsed, err)
-- woken by the release: a wake-up missed costs the 60 s backstop (30 s is
-- a ceiling only that reaches, not a margin)
local woken = clock.now() - t0 < 30
assert(lock:unlock() == 1)

local sem = assert(rsem.new(connect, { permits = 2 }))
assert(sem:acquire(key) == 0)
local held = sem:count(key)
assert(sem:release() == 1)
print(("lock %d %s | sem %d %d | ok"):format(fence, tostring(woken), held,
                                               sem:count(key)))
