-- resty.shmlock.redis.scripts (internal): the Lua scripts the Redis lock
-- runs on the server, each as { src = <source>, sha = <its SHA1> }.
--
-- Every call passes KEYS = { lock key, fence key } and ARGV = { token,
-- milliseconds, fence milliseconds } ("0" where unused; milliseconds "0"
-- for exptime 0: never expires, as a shdict entry with exptime 0; fence
-- milliseconds: the fence counter's new lifetime, "0" = none, it stays).  The SHA1s are of the exact source text; a
-- spec checks that EVALSHA finds them.

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
-- A held key that is not a string is reported (WRONGTYPE, Redis's own
-- error from GET) instead of waited on.  A fence key of the wrong type
-- undoes the SET before returning the error, so no lock is left behind.
_M.acquire = {
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
    sha = "7bd071136b05393808a3b1bc1fc896c2dbd5e007",
}

-- Release: delete the key only if it still holds our token.  1 = released,
-- 0 = our lock is gone (expired, and maybe re-taken by someone else).
_M.release = {
    src = [[
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
]],
    sha = "8cc47080657296d1e2753077bb909ace33c3eca6",
}

-- Extend: reset the expiry only if the key still holds our token, and the
-- fence counter's to ARGV[3] (as acquire does).
_M.extend = {
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
else
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return 1
]],
    sha = "769607c018866d12741c1f888c4ba837e6cdb2ac",
}

-- Owned: does the key still hold our token?
_M.owned = {
    src = [[
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  return 1
end
return 0
]],
    sha = "3e26f6fa5687118d450b61bad45d8a91d7cab38a",
}

return _M
