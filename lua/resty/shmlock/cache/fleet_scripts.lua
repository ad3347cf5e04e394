-- resty.shmlock.cache.fleet_scripts (internal): the Lua scripts the fleet
-- tier runs on the Redis server, each as { src = <source>, sha = <its
-- SHA1>, keys = <how many KEYS> } (a spec checks that SCRIPT LOAD gives
-- the same SHA1).
--
-- The keys of one cache (format 1; resty.shmlock.cache.fleet names them):
--
--     shmlock:1:{<name>}:log       the change log, a sorted set
--     shmlock:1:{<name>}:v:<key>   a value: "<generation>:<entry>"
--     shmlock:1:{<name>}:l:<key>   the load lock of a key (a token, PX)
--     shmlock:1:{<name>}:w:<key>   the wake stream of a key (XADD on every
--                                  store, change or release; MAXLEN 1)
--
-- Every key of a cache has its name as hash tag, so each script touches
-- one Redis Cluster slot, and declares every key it touches.
--
-- The change log: one member per key that changed, "k<key>", scored by
-- the change's sequence number (1, 2, ...), and four members with scores
-- <= 0 that the ranges of changes ("(cursor" .. "+inf", cursor >= 0) never
-- reach:
--
--     "\1e"  -epoch: a random id given when the log is made (by whichever
--            script finds it missing: after FLUSHALL, an eviction, a
--            restart without persistence, the epoch is new)
--     "\1n"  -the last sequence number given
--     "\1p"  -the sequence number of the last purge (the purge
--            generation: a value written before it is dead)
--     "\1t"  -the highest sequence number trimmed away (the log keeps
--            the newest ARGV max changes)
--
-- One key, so that an eviction takes the whole log or nothing: a log
-- without its epoch is a new log.
--
-- A value's generation is "<epoch>.<purge seq>" (e.g. "81985529216486.0"):
-- a value is alive only under the log and the purge it was written under.
-- The epoch is part of it because a log made again counts its purges from
-- 0 again: a value written before a purge of the old log, and never read
-- since (purges are lazy in Redis), would otherwise match the new log's
-- generation and come back.  Numbers cross as integer replies (exact
-- below 2^53); an epoch is below 2^46, so that Redis's Lua (numbers as
-- "%.14g") writes it exactly too.

local _M = {}

-- Fetch a key, or take its load lock, in one step (making the log if it
-- is missing: a value's generation needs its epoch).
-- KEYS: log, value, lock, wake; ARGV: member, token, lock ms, a new epoch.
-- { 1, entry, pttl }: the value (a value of another generation is deleted
-- and counts as absent); { 2, seq, generation }: the lock is ours
-- (seq: the key's last change, "0" for none; both go back to store; a
-- lock that holds our token already is ours: the same fetch sent again
-- after a lost reply); { 3,
-- wake stream id, lock pttl }: another host is loading the key.
_M.fetch = {
    keys = 4,
    src = [[
local e = redis.call('ZSCORE', KEYS[1], '\1e')
if not e then
  redis.call('ZADD', KEYS[1], -tonumber(ARGV[4]), '\1e', 0, '\1n')
  e = '-' .. ARGV[4]
end
local p = redis.call('ZSCORE', KEYS[1], '\1p')
local gen = string.format('%d.%d', -tonumber(e), p and -tonumber(p) or 0)
local v = redis.call('GET', KEYS[2])
if v then
  local g, at = string.match(v, '^([%d.]+):()')
  if g == gen then
    return {1, string.sub(v, at), redis.call('PTTL', KEYS[2])}
  end
  redis.call('DEL', KEYS[2])
end
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if redis.call('SET', KEYS[3], ARGV[2], 'NX', 'PX', ARGV[3])
   or redis.call('GET', KEYS[3]) == ARGV[2] then
  return {2, s or '0', gen}
end
local last = redis.call('XREVRANGE', KEYS[4], '+', '-', 'COUNT', 1)
local id = '0-0'
if last[1] then
  id = last[1][1]
end
return {3, id, redis.call('PTTL', KEYS[3])}
]],
    sha = "99446b319aab31de4f023a5a579d1fc58754ae0f",
}

-- Store a loaded value, unless the key changed (or the cache was purged,
-- or the log made again) since fetch took the lock; release the lock if it is still ours; wake
-- the waiters.  KEYS: log, value, lock, wake; ARGV: member, token, seq,
-- generation, entry, ms ("0": never expires).  1 stored, 0 not.
_M.store = {
    keys = 4,
    src = [[
local e = redis.call('ZSCORE', KEYS[1], '\1e')
local p = redis.call('ZSCORE', KEYS[1], '\1p')
local gen = e and string.format('%d.%d', -tonumber(e),
                                p and -tonumber(p) or 0)
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
local stored = 0
if gen == ARGV[4] and tonumber(s or '0') == tonumber(ARGV[3]) then
  if ARGV[6] == '0' then
    redis.call('SET', KEYS[2], ARGV[4] .. ':' .. ARGV[5])
  else
    redis.call('SET', KEYS[2], ARGV[4] .. ':' .. ARGV[5], 'PX', ARGV[6])
  end
  stored = 1
end
if redis.call('GET', KEYS[3]) == ARGV[2] then
  redis.call('DEL', KEYS[3])
end
redis.call('XADD', KEYS[4], 'MAXLEN', 1, '*', 'v', stored)
redis.call('PEXPIRE', KEYS[4], 60000)
return stored
]],
    sha = "efa2b5202584577e8b3480ec8fae59c7aa337c76",
}

-- Release a load lock (the loader failed) and wake the waiters.
-- KEYS: lock, wake; ARGV: token.
_M.release = {
    keys = 2,
    src = [[
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
end
redis.call('XADD', KEYS[2], 'MAXLEN', 1, '*', 'v', 0)
redis.call('PEXPIRE', KEYS[2], 60000)
return 1
]],
    sha = "1a5747bf7ea7dfdf4530902ebfe65a3f34f00b9d",
}

-- A set or a delete: the value, the log, the waiters.  KEYS: log, value,
-- wake; ARGV: member, entry, ms ("0": never expires; "-1": delete), a new
-- epoch (if the log must be made), the log's length.  The change's
-- sequence number.
_M.change = {
    keys = 3,
    src = [[
local e = redis.call('ZSCORE', KEYS[1], '\1e')
if not e then
  redis.call('ZADD', KEYS[1], -tonumber(ARGV[4]), '\1e', 0, '\1n')
  e = '-' .. ARGV[4]
end
local n = -tonumber(redis.call('ZSCORE', KEYS[1], '\1n') or '0') + 1
redis.call('ZADD', KEYS[1], -n, '\1n', n, ARGV[1])
local p = redis.call('ZSCORE', KEYS[1], '\1p')
local gen = string.format('%d.%d', -tonumber(e), p and -tonumber(p) or 0)
if ARGV[3] == '-1' then
  redis.call('DEL', KEYS[2])
elseif ARGV[3] == '0' then
  redis.call('SET', KEYS[2], gen .. ':' .. ARGV[2])
else
  redis.call('SET', KEYS[2], gen .. ':' .. ARGV[2], 'PX', ARGV[3])
end
redis.call('XADD', KEYS[3], 'MAXLEN', 1, '*', 'v', 1)
redis.call('PEXPIRE', KEYS[3], 60000)
local count = redis.call('ZCOUNT', KEYS[1], '(0', '+inf')
local max = tonumber(ARGV[5])
if count > max then
  local cut = redis.call('ZRANGEBYSCORE', KEYS[1], '(0', '+inf',
                         'WITHSCORES', 'LIMIT', count - max - 1, 1)
  local floor = tonumber(cut[2])
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '(0', floor)
  redis.call('ZADD', KEYS[1], -floor, '\1t')
end
return n
]],
    sha = "83d15fe14f8776c9f33fae638efa986f5b487b9d",
}

-- A purge: a new purge generation (every value written before it is
-- dead: fetch deletes it, store refuses it), the key changes before it
-- dropped from the log (a host whose cursor is below the purge purges
-- everything anyway).  KEYS: log; ARGV: a new epoch.  The sequence number.
_M.purge = {
    keys = 1,
    src = [[
if not redis.call('ZSCORE', KEYS[1], '\1e') then
  redis.call('ZADD', KEYS[1], -tonumber(ARGV[1]), '\1e', 0, '\1n')
end
local n = -tonumber(redis.call('ZSCORE', KEYS[1], '\1n') or '0') + 1
redis.call('ZADD', KEYS[1], -n, '\1n', -n, '\1p')
redis.call('ZREMRANGEBYSCORE', KEYS[1], '(0', '+inf')
return n
]],
    sha = "ee88082d08b96a33dc26723910c811d37dc59960",
}

-- Read the log (making it if missing).  KEYS: log; ARGV: the reader's
-- epoch ("0": none), its cursor, the most changes to return, a new epoch.
-- { epoch, last seq, purge seq, trimmed seq, member, score, ... }: the
-- changes after the cursor, oldest first, only when the reader's epoch is
-- the log's and its cursor is neither past the log's end nor below what
-- the log still holds (else the reader cannot know what it missed).
_M.read = {
    keys = 1,
    src = [[
local e = redis.call('ZSCORE', KEYS[1], '\1e')
if not e then
  redis.call('ZADD', KEYS[1], -tonumber(ARGV[4]), '\1e', 0, '\1n')
  e = '-' .. ARGV[4]
end
local function special(m)
  local s = redis.call('ZSCORE', KEYS[1], m)
  return s and -tonumber(s) or 0
end
local epoch = -tonumber(e)
local n, p, t = special('\1n'), special('\1p'), special('\1t')
local out = {epoch, n, p, t}
local cursor = tonumber(ARGV[2])
if epoch == tonumber(ARGV[1]) and cursor >= t and cursor >= p
   and cursor <= n then
  local m = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[2], '+inf',
                       'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[3]))
  for i = 1, #m do
    out[4 + i] = m[i]
  end
end
return out
]],
    sha = "b44ecbd3c12fe426d6bfd746a2109dd0f0b75de0",
}

return _M
