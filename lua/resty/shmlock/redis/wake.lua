-- resty.shmlock.redis.wake (internal): a key's wake stream, by which a
-- release wakes the hosts whose Redis waiter (resty.shmlock.lock.wait)
-- waits for the key, for the Redis lock and the Redis semaphore alike.
--
-- The stream, "<key>:wake" (the lock's or the permit set's Redis key and
-- a suffix no such key ends with), holds one entry at most (MAXLEN 1): the
-- last event of the key, one of
--
--     w   a waiter found the key held since the last release: a release
--         must wake it
--     r   a release woke the waiters
--
-- A waiter's failed try (the acquire scripts, with their "watch" argument,
-- and the lock's yield script: resty.shmlock.redis.scripts) leaves a "w"
-- unless the stream ends with one already, and answers the id of that
-- "w".  The waiter then
-- waits with XREAD BLOCK for an entry after that id: the next "r".  A
-- release (the release scripts) adds an "r" only when the stream ends with
-- a "w": with nobody waiting it costs one XREVRANGE, and its answer says
-- whether it woke someone (the lock's unlock yields to other hosts then).
--
-- Why a stream and not PUBLISH: XREAD BLOCK <ms> is ended by Redis, with a
-- nil reply, when nothing came in time, so a wait's backstop is Redis's
-- answer and not a socket that times out (inside nginx every cosocket read
-- that times out is logged at [error] unless lua_socket_log_errors is
-- off); the socket's own timeout (the block time plus redis_timeout) is
-- only the net for a Redis that stopped answering.  Its connection is an
-- ordinary one: the link's own outside nginx, one from the keepalive pool
-- inside.  And it works alike inside and outside nginx.
--
-- A "w" added never wakes anyone: every waiter then waits after an older
-- id, below the "r" that ended the previous round, which woke it already.
-- A "w" may outlive its waiter (it gave up, or took the key when a lease
-- ran out): the next release then adds an "r" nobody needed and says it
-- woke someone.  The stream expires STREAM_MS after its last entry; a
-- release that finds it gone wakes nobody, and a waiter left waiting then
-- tries at its backstop (as for a lease that ran out: nothing wakes
-- it).  A Redis without streams (before 5.0) answers the scripts'
-- XREVRANGE with an error: no "w" is left, the try answers no id, and the
-- waiter polls.

local conn = require "resty.shmlock.cache.fleet_conn"

local type = type
local max = math.max
local floor = math.floor
local format = string.format

local _M = {}

-- the suffix of a wake stream's name
_M.SUFFIX = ":wake"

-- how long a stream lives after its last entry (ms)
local STREAM_MS = 300000
_M.STREAM_MS = STREAM_MS

-- The Redis side, pasted into the scripts that take part (their SHA1s are
-- of the whole source, checked by spec/27 and spec/28).  Each defines one
-- local function of the stream's key.
--
-- watch(w): the id of the stream's "w" (added when it ends otherwise), or
-- false: no streams here (the waiter polls)
_M.WATCH = [[
local function watch(w)
  local last = redis.pcall('XREVRANGE', w, '+', '-', 'COUNT', 1)
  if type(last) ~= 'table' or last.err then
    return false
  end
  if last[1] and last[1][2][1] == 'w' then
    return last[1][1]
  end
  local id = redis.call('XADD', w, 'MAXLEN', 1, '*', 'w', '1')
  redis.call('PEXPIRE', w, ]] .. STREAM_MS .. [[)
  return id
end
]]

-- wake(w): 1 when the stream ended with a "w" (an "r" is added: the
-- waiters wake), else 0
_M.WAKE = [[
local function wake(w)
  local last = redis.pcall('XREVRANGE', w, '+', '-', 'COUNT', 1)
  if type(last) ~= 'table' or last.err or not last[1]
     or last[1][2][1] ~= 'w' then
    return 0
  end
  redis.call('XADD', w, 'MAXLEN', 1, '*', 'r', '1')
  redis.call('PEXPIRE', w, ]] .. STREAM_MS .. [[)
  return 1
end
]]

-- the id of the newest entry of an XREAD reply for one stream, or nil
local function newest(res)
    local s = type(res) == "table" and res[1]
    local entries = type(s) == "table" and s[2]
    if type(entries) ~= "table" then
        return nil
    end
    local e = entries[#entries]
    return type(e) == "table" and type(e[1]) == "string" and e[1] or nil
end

-- syntax: woken, id = wake.wait(l, w, since, seconds)
-- Waits up to `seconds` (at least 1 ms) for an entry of stream w after id
-- since.  true, its id: one came (a release); false, since: none in time
-- (Redis said so); nil, err: no answer (the connection broke or timed
-- out: Redis stopped) or an error reply.
function _M.wait(l, w, since, seconds)
    local a, err = conn.get(l)
    if not a then
        return nil, err
    end
    local ms = max(1, floor(seconds * 1000))
    conn.timeout(a, ms / 1000 + l.timeout)
    local ok, res, reply = conn.call(a, "xread", "BLOCK", format("%d", ms),
                                     "STREAMS", w, since)
    if not ok then
        conn.put(l, a, not reply)
        return nil, res
    end
    conn.timeout(a, l.timeout)
    conn.put(l, a)
    local id = newest(res)
    if id then
        return true, id
    end
    return false, since
end

return _M
