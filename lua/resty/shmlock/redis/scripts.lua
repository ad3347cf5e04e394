-- resty.shmlock.redis.scripts (internal): the Lua scripts the Redis lock
-- runs on the server, each as { src = <source>, sha = <its SHA1>, keys =
-- <how many KEYS> }.
--
-- Every call passes KEYS = { lock key, fence key } (acquire and release:
-- and the key's wake stream) and ARGV = { token, milliseconds, fence
-- milliseconds, ... } ("0" where unused; milliseconds "0" for exptime 0:
-- never expires, as a shdict entry with exptime 0; fence milliseconds:
-- the fence counter's new lifetime, "0" = none, it stays).  The SHA1s are
-- of the exact source text; a spec checks that EVALSHA finds them.
--
-- Wake-ups (resty.shmlock.redis.wake): an acquire that finds the key held
-- and will wait leaves its mark in the key's wake stream and answers the
-- id to wait after; a release wakes the marked waiters, so the hosts
-- waiting for the key (resty.shmlock.lock.wait: one waiter per host) try
-- again at once instead of at their next poll.  A lock that expires wakes
-- nobody: the waiters' polls (the backstop) find it.

local wake = require "resty.shmlock.redis.wake"

local _M = {}

-- (effects replication for the scripts that may XADD: an id is of the
-- master's clock; Redis 3.2 to 4 need the call, later ones always do so)
local EFFECTS = "if redis.replicate_commands then "
                .. "redis.replicate_commands() end\n"

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
--
-- KEYS[3]: the wake stream; ARGV[4]: "1" when the caller waits if the key
-- is held: it is then marked as waiting (resty.shmlock.redis.wake), and
-- the answer is the id to wait after (a string) instead of nil.
_M.acquire = {
    keys = 3,
    src = EFFECTS .. wake.WATCH .. [[
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
  if ARGV[4] == '1' then
    return watch(KEYS[3])
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
    sha = "03db53c4d4fbca567b10ce73d5ca000a5801a8a6",
}

-- Release: delete the key only if it still holds our token, and wake the
-- waiting hosts (KEYS[3]: the wake stream).  1 = released, 2 = released
-- and hosts that waited for it woken, 0 = our lock is gone (expired, and
-- maybe re-taken by someone else).
_M.release = {
    keys = 3,
    src = EFFECTS .. wake.WAKE .. [[
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1 + wake(KEYS[3])
end
return 0
]],
    sha = "7470534517219e1e510d2792f4a1bdb75cddd7c9",
}

-- Yield: the look of a process that lets other hosts go first: its
-- host's last holder released the key with fence ARGV[1], and the release
-- woke other hosts (resty.shmlock.redis.host.yield).  While the key is
-- free and the fence counter still ARGV[1] (nobody took it since), the
-- woken hosts have yet to take it: the process is marked in the wake
-- stream (KEYS[3]) and the answer is the id to wait after (nil: no
-- streams).  Otherwise 0, and it tries at once: the key is held (the try
-- marks it), or it was taken and let go before this look, a release it
-- could no longer hear (waiting for it would cost a backstop).
_M.yield = {
    keys = 3,
    src = EFFECTS .. wake.WATCH .. [[
if not redis.pcall('GET', KEYS[1])
   and redis.pcall('GET', KEYS[2]) == ARGV[1] then
  return watch(KEYS[3])
end
return 0
]],
    sha = "4045a7a2a8703d4fe2582ccc10f34df44b91e132",
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
