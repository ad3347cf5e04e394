-- resty.shmlock.redis.semaphore: the resty.shmlock.semaphore API on a
-- Redis server: at most `permits` holders of a key across every host.
--
--     local rsem = require "resty.shmlock.redis.semaphore"
--     local sem = assert(rsem.new(connect, { permits = 3 }))
--     local elapsed, err = sem:acquire("partner-api")
--     ...
--     sem:release()
--
-- A key's permits are a sorted set in Redis (resty.shmlock.redis.permits):
-- a holder's token scored by the end of its lease on Redis's clock, so a
-- holder that dies gives its permit back when its lease ends, whatever
-- the hosts' clocks say.  `permits` is the caller's limit, checked when
-- it acquires (every holder counts against every caller's limit).
--
-- Redis is given as the Redis lock's is (a connected client, or a connect
-- function: resty.shmlock.redis.link), and waiting is the lock's: the
-- processes of a host take turns in a zone (resty.shmlock.redis.host),
-- the turn's holder waits on Redis for a permit, woken by a release
-- through the key's wake stream with a connect function (resty.shmlock.
-- redis.wake), polling every max_step as a backstop (resty.shmlock.lock.
-- wait), and gives the turn back as soon as it has one (or gives up), so
-- the host's next process tries for another.
-- Nothing is released when an object is collected (no network I/O from a
-- finalizer): its permit goes back at the end of its lease.

local version = require "resty.shmlock.version"
local clock = require "resty.shmlock.internal.clock"
local options = require "resty.shmlock.internal.options"
local token = require "resty.shmlock.internal.token"
local key_text = require("resty.shmlock.internal.key").text
local core = require "resty.shmlock.internal.core"
local link = require "resty.shmlock.redis.link"
local permits = require "resty.shmlock.redis.permits"
local host = require "resty.shmlock.redis.host"
local wait = require "resty.shmlock.lock.wait"
local wake = require "resty.shmlock.redis.wake"

local type = type
local tostring = tostring
local error = error
local setmetatable = setmetatable
local getmetatable = getmetatable
local floor = math.floor
local format = string.format
local now = clock.now
local new_token = token.network
local ours = token.ours
local self_pid = core.self_pid
local script = link.script
local ACQUIRE = permits.acquire
local RELEASE = permits.release
local EXTEND = permits.extend
local COUNT = permits.count
local OWNED = permits.owned

local _M = { _VERSION = version }
local mt = { __index = _M }

-- Misuse: a method called on anything but a Redis semaphore object raises
-- at the method's caller, before anything of it is read.
local function check_self(self)
    if getmetatable(self) ~= mt then
        error("bad semaphore object (use sem:method(), not sem.method())",
              3)
    end
end

-- the largest opts.permits (a Redis integer reply is 64 bits; a bound
-- that reads well)
local PERMITS_MAX = 2147483647
_M.PERMITS_MAX = PERMITS_MAX

local REDIS_TIMEOUT = 1

local function ms_string(seconds)
    return format("%.0f", options.ms(seconds))
end

local function check_permits(v)
    if v == nil then
        return 1
    end
    if type(v) ~= "number" or v ~= floor(v) or v < 1 or v > PERMITS_MAX then
        error("opts.permits must be an integer from 1 to " .. PERMITS_MAX, 3)
    end
    return v
end

-- syntax: sem, err = rsem.new(client_or_connect, opts?)
--         (rsem:new(...) works too); nil, err when the zone of host
--         single flight cannot be opened
function _M.new(a, b, c)
    local redis, opts = a, b
    if a == _M then
        redis, opts = b, c
    end
    local exptime, timeout, step, ratio, max_step =
        options.lock(opts, "opts", 2)
    local n = check_permits(opts and opts.permits)
    local prefix = opts and opts.prefix
    if prefix ~= nil and type(prefix) ~= "string" then
        error("opts.prefix must be a string", 2)
    end
    local redis_timeout = opts and opts.redis_timeout
    if redis_timeout == nil then
        redis_timeout = REDIS_TIMEOUT
    else
        options.seconds(redis_timeout, "opts.redis_timeout", 2, true)
    end
    local l = link.new(redis, redis_timeout)
    if not l then
        error('bad "client" argument: a connected lua-redis client, '
              .. 'lua-resty-redis object or a connect function expected', 2)
    end
    local h, err = host.new(opts and opts.dict, exptime, "opts.dict")
    if h == nil then
        return nil, err
    end
    return setmetatable({
        client = redis,
        link = l,
        host = h,
        prefix = prefix or "sem:",
        permits = n,
        permits_arg = format("%d", n),
        exptime = exptime,
        timeout = timeout,
        step = step,
        ratio = ratio,
        max_step = max_step,
        ms = ms_string(exptime),
        key = nil,          -- the Redis key while we hold a permit
        wake_key = nil,     -- its wake stream (resty.shmlock.redis.wake)
        token = nil,
        pid = nil,          -- the process that took it (token.ours)
    }, mt)
end

-- the Redis key of a user key, or nil, err
local function key_of(self, key)
    local err
    key, err = key_text(key)
    if not key then
        return nil, err
    end
    return self.prefix .. "{" .. key .. "}"
end

local function forget(self)
    self.key = nil
    self.wake_key = nil
    self.token = nil
    self.pid = nil
end

-- The Redis key of the permit this object holds, or nil.  A copy of the
-- object in a forked child holds nothing there (the permit is the
-- parent's): it forgets it, without asking Redis.
local function held(self)
    local key = self.key
    if key and not ours(self.pid) then
        forget(self)
        return nil
    end
    return key
end

-- One attempt: true when the permit is ours, false when `permits` hold
-- (watch: the caller will wait: with a connect function, then false, the
-- id to wait after in the wake stream wkey, when Redis has streams), nil,
-- err.
local function attempt(self, skey, tok, wkey, watch)
    local l = self.link
    local ok, res, reply = script(l, ACQUIRE, skey, wkey, tok,
                                  self.permits_arg, self.ms,
                                  watch and l.connect and "1" or "0")
    if ok and res == 1 then
        return true
    end
    if ok and res == 0 then
        return false
    end
    if ok and type(res) == "string" then
        return false, res
    end
    if ok then
        res = "redis connection error: unexpected reply " .. tostring(res)
    end
    if not reply then
        -- the permit may be ours with only the reply lost: give it back,
        -- best effort (resty.shmlock.redis.link.cleanup)
        link.cleanup(self.link, RELEASE, skey, wkey, tok)
    end
    return nil, res
end

-- syntax: elapsed, err = sem:acquire(key, timeout?)
-- elapsed: 0 at once, else the seconds waited.  err: "timeout", "locked"
-- (this object holds a permit already), "nil key", "empty key", "redis
-- error: ...", "redis connection error: ...", the host lock's ("cannot
-- wait in <phase> phase", ...).  timeout: as the lock's.
function _M.acquire(self, key, timeout)
    check_self(self)
    if timeout == nil then
        timeout = self.timeout
    else
        timeout = options.timeout(timeout, self.exptime, 2)
    end
    local start = now()
    local skey, err = key_of(self, key)
    if not skey then
        return nil, err
    end
    if held(self) then
        return nil, "locked"
    end
    local h = self.host
    local waited = false
    if h then
        local elapsed
        elapsed, err = host.enter(h, skey, timeout)
        if not elapsed then
            return nil, err
        end
        waited = elapsed > 0
    end
    local tok = new_token()
    local wkey = skey .. wake.SUFFIX
    local got, since
    got, since = attempt(self, skey, tok, wkey, timeout > 0)
    if got == nil then
        err = since
    elseif got == false then
        if timeout <= 0 then
            err = "timeout"
        else
            waited = true
            got, err = wait.redis({ link = self.link, wake = wkey,
                                    since = since, step = self.step,
                                    ratio = self.ratio,
                                    max_step = self.max_step },
                                  start + timeout, attempt, self, skey, tok)
        end
    end
    if h then
        host.leave(h)
    end
    if not got then
        return nil, err
    end
    self.key = skey
    self.wake_key = wkey
    self.token = tok
    self.pid = self_pid()
    return waited and now() - start or 0
end

-- syntax: ok, err = sem:release()
-- 1; 1, "expired" (the lease had ended: someone else may have had the
-- permit meanwhile); nil, "unlocked"; nil, err (the object still holds:
-- we cannot know whether Redis released it).
function _M.release(self)
    check_self(self)
    local skey = held(self)
    if not skey then
        return nil, "unlocked"
    end
    local ok, res = script(self.link, RELEASE, skey, self.wake_key,
                           self.token)
    if not ok then
        return nil, res
    end
    forget(self)
    if res == 1 then
        return 1
    end
    return 1, "expired"
end

-- syntax: ok, err = sem:expire(seconds?)
-- The lease ends `seconds` from now (default: exptime; 0: never).  true;
-- nil, "unlocked"; nil, "expired" (the object then holds nothing); nil,
-- err.  A bad seconds raises, held or not.
function _M.expire(self, seconds)
    check_self(self)
    local ms
    if seconds == nil then
        ms = self.ms
    else
        ms = ms_string(options.seconds(seconds, "seconds", 2))
    end
    local skey = held(self)
    if not skey then
        return nil, "unlocked"
    end
    local ok, res = script(self.link, EXTEND, skey, self.token, ms)
    if not ok then
        return nil, res
    end
    if res == 1 then
        return true
    end
    forget(self)
    return nil, "expired"
end

-- syntax: n, err = sem:count(key)
-- The permits of key whose lease has not ended, on Redis's clock.
function _M.count(self, key)
    check_self(self)
    local skey, err = key_of(self, key)
    if not skey then
        return nil, err
    end
    local ok, res = script(self.link, COUNT, skey, "")
    if not ok then
        return nil, res
    end
    return res
end

-- syntax: held, err = sem:owned()
-- true while this object's permit is held (Redis is asked); false,
-- "unlocked" (no Redis call); false, "expired"; nil, err.
function _M.owned(self)
    check_self(self)
    local skey = held(self)
    if not skey then
        return false, "unlocked"
    end
    local ok, res = script(self.link, OWNED, skey, self.token)
    if not ok then
        return nil, res
    end
    if res == 1 then
        return true
    end
    return false, "expired"
end

return _M
