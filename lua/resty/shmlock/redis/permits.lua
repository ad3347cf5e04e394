-- resty.shmlock.redis.permits (internal): the Lua scripts the Redis
-- semaphore (resty.shmlock.redis.semaphore) runs on the server, each as
-- { src = <source>, sha = <its SHA1>, keys = <how many KEYS> }.
--
-- A key's permits are one sorted set, "<prefix>{<key>}": a member per
-- holder (its token), scored by the end of its lease in ms of Redis's own
-- clock (TIME: never a host's; "+inf" for a lease that never ends).  A
-- permit whose lease ended is nobody's: each acquire first drops them, so
-- a dead holder's permit is back when its lease ends.  The set itself
-- expires with its longest lease (PEXPIREAT of its highest score), so a
-- key nobody uses any more costs nothing.  An acquire that finds every
-- permit taken and will wait marks itself in the set's wake stream, and a
-- release wakes the marked waiters (resty.shmlock.redis.wake), the
-- waiting hosts (resty.shmlock.lock.wait).
--
-- Every call passes KEYS = { the set } (acquire and release: and its wake
-- stream) and ARGV = { token, ... }.  The
-- SHA1s are of the exact source text; a spec checks that EVALSHA finds
-- them.  The scripts that write after TIME ask for effects replication
-- first (redis.replicate_commands: Redis 3.2 to 4 need it; later ones
-- always replicate effects).

local wake = require "resty.shmlock.redis.wake"

local _M = {}

-- Acquire: ARGV = token, permits (the caller's limit), lease ms ("0":
-- never ends), watch ("1": the caller waits if every permit is taken).
-- 1: the permit is ours (also when the set holds our token already: the
-- same acquire sent again after a lost reply); 0: `permits` holders or
-- more; with watch, the id to wait after in the wake stream (KEYS[2])
-- instead of 0 (0 still where Redis has no streams).
_M.acquire = {
    keys = 2,
    src = "redis.replicate_commands()\n" .. wake.WATCH .. [[
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 1
end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  if ARGV[4] == '1' then
    return watch(KEYS[2]) or 0
  end
  return 0
end
if ARGV[3] == '0' then
  redis.call('ZADD', KEYS[1], '+inf', ARGV[1])
else
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
end
local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if top[2] == 'inf' then
  redis.call('PERSIST', KEYS[1])
else
  redis.call('PEXPIREAT', KEYS[1], top[2])
end
return 1
]],
    sha = "7cf89571a1caf696a64b9d7cf9bee7bd41d02db7",
}

-- Release: ARGV = token; the waiters marked in the wake stream (KEYS[2])
-- are woken.  1: released; 2: released, but its lease had ended (nobody
-- had taken it over yet); 0: the permit was gone (its lease ended, and an
-- acquire dropped it).
_M.release = {
    keys = 2,
    src = "redis.replicate_commands()\n" .. wake.WAKE .. [[
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
wake(KEYS[2])
if s == 'inf' then
  return 1
end
local t = redis.call('TIME')
if tonumber(s) <= t[1] * 1000 + math.floor(t[2] / 1000) then
  return 2
end
return 1
]],
    sha = "8ab4797d266aa0717d7e8ecd70fe98765656f994",
}

-- Extend: ARGV = token, lease ms ("0": never ends).  1: the lease is
-- moved to end that long from now; 0: the permit is gone or its lease
-- ended (then it is dropped).
_M.extend = {
    keys = 1,
    src = [[
redis.replicate_commands()
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s then
  return 0
end
if s ~= 'inf' and tonumber(s) <= now then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 0
end
if ARGV[2] == '0' then
  redis.call('ZADD', KEYS[1], 'XX', '+inf', ARGV[1])
else
  redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
end
local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if top[2] == 'inf' then
  redis.call('PERSIST', KEYS[1])
else
  redis.call('PEXPIREAT', KEYS[1], top[2])
end
return 1
]],
    sha = "114e9c282a83cd92179a334856efff0976b6cd1b",
}

-- Count: the permits whose lease has not ended (nothing changes).
_M.count = {
    keys = 1,
    src = [[
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
]],
    sha = "a47bfaea5156bb71d11f5a7a37ccabcf0351f560",
}

-- Owned: ARGV = token.  1 while its lease has not ended, else 0.
_M.owned = {
    keys = 1,
    src = [[
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s then
  return 0
end
if s == 'inf' then
  return 1
end
local t = redis.call('TIME')
if tonumber(s) > t[1] * 1000 + math.floor(t[2] / 1000) then
  return 1
end
return 0
]],
    sha = "b5f51f6215f59ac3006b9209c2cfbb1a55c23c33",
}

return _M
