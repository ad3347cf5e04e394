-- resty.shmlock.redis.scripts (internal): the Lua scripts the Redis lock
-- runs on the server, each as { src = <source>, sha = <its SHA1>, keys =
-- 2 }.
--
-- Every call passes KEYS = { lock key, fence key } and ARGV = { token,
-- milliseconds, fence milliseconds, ... } ("0" where unused; milliseconds
-- "0" for exptime 0: never expires, as a shdict entry with exptime 0;
-- fence milliseconds: the fence counter's new lifetime, "0" = none, it
-- stays).  The SHA1s are of the exact source text; a spec checks that
-- EVALSHA finds them.
--
-- Wake-ups: a release PUBLISHes on a channel named as the lock key, so
-- the hosts waiting for the key (resty.shmlock.lock.wait: one subscriber
-- per host) try again at once instead of at their next poll.  A lock that
-- expires publishes nothing: the waiters' polls (the backstop) find it.

local _M = {}

-- Acquire: the lock and its fencing token in one atomic step.
--
-- Why a fencing token: a holder can be paused past its expiry (a GC pause,
-- swapping, a slow network) and wake up still believing it holds the lock
-- while another holder has taken it.  No lock with expiry can prevent
-- that; what makes it safe is that every acquisition gets a number larger
-- than all before it (INCR of "<lock key>:fence", in the same script as the
-- SET, so no two holders ever see the same or a reordered number), the
-- holder passes it along with its writes, and the protected resource
-- rejects a write carrying a fence older than the newest it has seen.
--
-- The counter lives ARGV[3] ms from each acquisition (PEXPIRE; PERSIST for
-- "0"): the lock's lifetime plus the fence_ttl of resty.shmlock.redis, so
-- it outlives every lock it numbered (docs/redis.md, "Fence lifetime").
--
-- A key that holds our token already is ours: the same acquire sent again
-- after its reply was lost (the fence is the counter's value: nobody else
-- counts while we hold the key).  A held key that is not a string is
-- reported (WRONGTYPE, Redis's own error from GET) instead of waited on.
-- A fence key of the wrong type undoes the SET before returning the
-- error, so no lock is left behind.
_M.acquire = {
    keys = 2,
    src = [[
local ok
if ARGV[2] == '0' then
  ok = redis.call('SET', KEYS[1], ARGV[1], 'NX')
else
  ok = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
end
if not ok then
  local v = redis.pcall('GET', KEYS[1])
  if type(v) == 'table' and v.err then
    return v
  end
  if v == ARGV[1] then
    return tonumber(redis.call('GET', KEYS[2]))
  end
  return false
end
local fence = redis.pcall('INCR', KEYS[2])
if type(fence) == 'table' and fence.err then
  redis.call('DEL', KEYS[1])
  return fence
end
if ARGV[3] == '0' then
  redis.call('PERSIST', KEYS[2])
else
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return fence
]],
    sha = "f347553aa7470a073c7f67acb07cc3ca040a1d45",
}

-- Release: delete the key only if it still holds our token, and wake the
-- waiting hosts.  1 + the number of subscribers the wake-up reached =
-- released, 0 = our lock is gone (expired, and maybe re-taken by someone
-- else).
_M.release = {
    keys = 2,
    src = [[
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1 + redis.call('PUBLISH', KEYS[1], 'r')
end
return 0
]],
    sha = "8c8c849382ac801a818144220bc4b8a0b5a7f3dc",
}

-- Transfer: hand our lock to a process of our own host (ARGV[4], its
-- token) without letting it go: the key holds the new token for ARGV[2]
-- ms (the handoff's lease: the new holder moves it to its exptime, with
-- extend below, when it takes the lock; a handoff nobody takes lapses
-- then), with a new fence; the counter then lives ARGV[3] ms ("" leaves
-- its lifetime: the holder knows it covers the new lock).  The fence, or
-- 0 when our lock is gone; a key that holds the new token already was
-- handed over by this very transfer, sent again after its reply was lost
-- (the fence is then the counter's value).  The counter is counted first:
-- a fence key of the wrong type leaves the lock ours and untouched.
_M.transfer = {
    keys = 2,
    src = [[
local v = redis.pcall('GET', KEYS[1])
if v == ARGV[4] then
  return tonumber(redis.call('GET', KEYS[2]))
end
if v ~= ARGV[1] then
  return 0
end
local fence = redis.pcall('INCR', KEYS[2])
if type(fence) == 'table' and fence.err then
  return fence
end
redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[2])
if ARGV[3] == '0' then
  redis.call('PERSIST', KEYS[2])
elseif ARGV[3] ~= '' then
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return fence
]],
    sha = "34fa0ac0bbb89b771aa54a17646dbfea439639b1",
}

-- Extend: reset the expiry only if the key still holds our token, and the
-- fence counter's to ARGV[3] (as acquire does; "" leaves it: a holder
-- taking a transfer, whose counter's lifetime the transfer set).
_M.extend = {
    keys = 2,
    src = [[
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if ARGV[2] == '0' then
  redis.call('PERSIST', KEYS[1])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if ARGV[3] == '0' then
  redis.call('PERSIST', KEYS[2])
elseif ARGV[3] ~= '' then
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return 1
]],
    sha = "a08f6caac547012ecada2b758a1a494e979b91ad",
}

-- Owned: does the key still hold our token?
_M.owned = {
    keys = 2,
    src = [[
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  return 1
end
return 0
]],
    sha = "3e26f6fa5687118d450b61bad45d8a91d7cab38a",
}

return _M
