-- resty.shmlock.redis: the resty.shmlock lock API on a Redis server, for
-- locks that must hold across hosts.
--
-- One Redis key per lock, "<prefix>{<key>}", holds the holder's network
-- token (resty.shmlock.internal.token) and expires by itself (SET NX PX).
-- Release and extend are compare-and-act Lua scripts
-- (resty.shmlock.redis.scripts), so they never touch a lock that expired
-- and was re-taken by someone else.  Scripts run by EVALSHA; a server that
-- does not know them yet answers NOSCRIPT and gets them once by EVAL.
--
-- The client is the caller's: a connected lua-redis (redis-lua 2.x,
-- `require "redis"`) client in plain LuaJIT, a lua-resty-redis object
-- inside OpenResty, seen through one adapter (resty.shmlock.redis.client).
-- The caller owns the connection: its socket timeout bounds every call we
-- make, and after a connection error the caller should drop the client and
-- connect a new one (the reply stream of that connection can no longer be
-- trusted).

local version = require "resty.shmlock.version"
local nginx = require "resty.shmlock.internal.nginx"
local clock = require "resty.shmlock.internal.clock"
local options = require "resty.shmlock.internal.options"
local backoff = require "resty.shmlock.internal.backoff"
local random = require "resty.shmlock.internal.random"
local token = require "resty.shmlock.internal.token"
local key_text = require("resty.shmlock.internal.key").text
local core = require "resty.shmlock.internal.core"
local client = require "resty.shmlock.redis.client"
local scripts = require "resty.shmlock.redis.scripts"

local type = type
local tostring = tostring
local error = error
local setmetatable = setmetatable
local max = math.max
local format = string.format
local now = clock.now
local next_step = backoff.next
local random_number = random.number
local new_token = token.network
local ours = token.ours
local self_pid = core.self_pid
local script = client.script
local MIN_SLEEP = backoff.MIN_SLEEP
local ACQUIRE = scripts.acquire
local RELEASE = scripts.release
local EXTEND = scripts.extend
local OWNED = scripts.owned

-- inside nginx: wait with ngx.sleep (never block the worker), and know
-- lua-resty-redis's null reply
local ngx = nginx.api()
local sleep = ngx and ngx.sleep or clock.sleep
local null = ngx and ngx.null

local _M = { _VERSION = version }
local mt = { __index = _M }


-- Options, as resty.lock (same defaults and clamping), checked by name.

-- How long a fence counter outlives the last lock it numbered, in seconds
-- (opts.fence_ttl; 0: for ever): 7 days.
local FENCE_TTL = 7 * 24 * 3600
_M.FENCE_TTL = FENCE_TTL

local function ms_string(seconds)
    return format("%.0f", options.ms(seconds))
end

-- The fence counter's lifetime (ms, as the scripts take it) for a lock of
-- `seconds`: the lock's lifetime plus fence_ttl, so that the counter
-- always outlives the lock; "0" (no expiry) for a lock that never expires
-- or fence_ttl 0.
local function fence_ms(seconds, fence_ttl)
    if seconds == 0 or fence_ttl == 0 then
        return "0"
    end
    return ms_string(seconds + fence_ttl)
end

-- new(client, opts) or :new(client, opts)
function _M.new(a, b, c)
    local redis, opts = a, b
    if a == _M then
        redis, opts = b, c
    end

    local adapter = client.wrap(redis, null)
    if not adapter then
        error('bad "client" argument: a connected lua-redis client or '
              .. 'lua-resty-redis object expected', 2)
    end

    local exptime, timeout, step, ratio, max_step =
        options.lock(opts, "opts", 2)
    local prefix = opts and opts.prefix
    if prefix ~= nil and type(prefix) ~= "string" then
        error("opts.prefix must be a string", 2)
    end
    local fence_ttl = opts and opts.fence_ttl
    if fence_ttl == nil then
        fence_ttl = FENCE_TTL
    else
        fence_ttl = options.seconds(fence_ttl, "opts.fence_ttl", 2)
    end

    return setmetatable({
        client = redis,
        adapter = adapter, -- resty.shmlock.redis.client's
        prefix = prefix or "lock:",
        exptime = exptime,
        timeout = timeout,
        step = step,
        ratio = ratio,
        max_step = max_step,
        ms = ms_string(exptime),
        fence_ttl = fence_ttl,
        fence_ms = fence_ms(exptime, fence_ttl),
        key = nil,         -- the Redis key while we hold it
        fence_key = nil,
        token = nil,
        fence = nil,       -- the fencing token of the current acquisition
        pid = nil,         -- the process that took it (token.ours)
    }, mt)
end


-- One attempt: fence (number) when acquired; nil when held by someone
-- else; nil, err on failure.
local function acquire(self, lkey, fkey, tok)
    local ok, res, reply = script(self.adapter, ACQUIRE, lkey, fkey, tok,
                                  self.ms, self.fence_ms)
    if ok and (res == nil or type(res) == "number") then
        return res
    end
    if ok then
        res = "redis connection error: unexpected reply " .. tostring(res)
    end
    if not reply then
        -- The request may have reached Redis and the SET happened, with
        -- only the reply lost (a read timeout).  Redis runs one
        -- connection's commands in order, so a compare-and-delete sent now
        -- runs after that acquire if it ran at all: best effort, its own
        -- outcome is ignored (EVAL, not EVALSHA: no second round trip on a
        -- connection whose replies we no longer trust).  This costs at
        -- most one more socket timeout.
        client.eval(self.adapter, RELEASE, lkey, fkey, tok, "0", "0")
    end
    return nil, res
end

local function hold(self, lkey, fkey, tok, fence)
    self.key = lkey
    self.fence_key = fkey
    self.token = tok
    self.fence = fence
    self.pid = self_pid()
end

local function release_state(self)
    self.key = nil
    self.fence_key = nil
    self.token = nil
    self.fence = nil
    self.pid = nil
end

-- The Redis key of the lock this object holds, or nil.  An object copied
-- into a forked child holds nothing there: the lock is the parent's, and
-- the child may neither release it, extend it nor take it as its own.
-- The copy forgets it (Redis is not asked), and may lock anew.  One load
-- and a compare (token.ours).
local function held(self)
    local key = self.key
    if key and not ours(self.pid) then
        release_state(self)
        return nil
    end
    return key
end

-- the Redis keys for a user key, or nil, err; "{...}" makes both keys hash
-- to one Redis Cluster slot and keeps the two key families apart (a lock
-- key ends in "}", a fence key in ":fence")
local function keys_of(self, key)
    local err
    key, err = key_text(key)
    if not key then
        return nil, err
    end
    local lkey = self.prefix .. "{" .. key .. "}"
    return lkey, lkey .. ":fence"
end

-- The first attempt of lock() and trylock(): 0, nil, fence when acquired;
-- false, lkey, fkey, token when someone else holds the key; nil, err.
local function first_attempt(self, key)
    local lkey, fkey = keys_of(self, key)
    if not lkey then
        return nil, fkey
    end
    if held(self) then
        return nil, "locked"
    end

    local tok = new_token()
    local fence, err = acquire(self, lkey, fkey, tok)
    if fence then
        hold(self, lkey, fkey, tok, fence)
        return 0, nil, fence
    end
    if err then
        return nil, err
    end
    return false, lkey, fkey, tok
end

-- elapsed, err, fence = lock:lock(key, timeout?): timeout, this call's
-- longest wait instead of the object's, is checked and clamped as
-- opts.timeout (a bad one raises at the caller's line)
function _M.lock(self, key, timeout)
    if timeout == nil then
        timeout = self.timeout
    else
        timeout = options.timeout(timeout, self.exptime, 2)
    end
    local start = now()
    local got, lkey, fkey, tok = first_attempt(self, key)
    if got ~= false then
        return got, lkey, fkey      -- 0, nil, fence or nil, err
    end

    -- held by someone else: back off exponentially, each sleep drawn from
    -- [step/2, step] so that waiters spread out, never below MIN_SLEEP (a
    -- spin of Redis round trips; inside nginx, ngx.sleep would truncate it
    -- to 0 and warn) and never past the deadline: when less than MIN_SLEEP
    -- is left, the wait ends ("timeout") instead of a shorter last sleep
    if timeout <= 0 then
        return nil, "timeout"
    end
    local deadline = start + timeout
    local step = self.step
    local ratio = self.ratio
    local max_step = self.max_step
    while true do
        local left = deadline - now()
        if left < MIN_SLEEP then
            return nil, "timeout"
        end
        local s = max(MIN_SLEEP, step * (0.5 + 0.5 * random_number()))
        if s > left then
            s = left
        end
        sleep(s)

        local fence, err = acquire(self, lkey, fkey, tok)
        if fence then
            hold(self, lkey, fkey, tok, fence)
            return now() - start, nil, fence
        end
        if err then
            return nil, err
        end
        step = next_step(step, ratio, max_step)
    end
end

-- elapsed (0), err, fence = lock:trylock(key): one attempt, no waiting
function _M.trylock(self, key)
    local got, err, fence = first_attempt(self, key)
    if got == false then
        return nil, "timeout"
    end
    return got, err, fence
end

-- ok, err = lock:unlock(): 1 | nil, "unlocked" | nil, "expired" | nil, err
function _M.unlock(self)
    local key = held(self)
    if not key then
        return nil, "unlocked"
    end
    local ok, res = script(self.adapter, RELEASE, key, self.fence_key,
                           self.token, "0", "0")
    if not ok then
        -- we do not know: keep believing we hold it (it still expires)
        return nil, res
    end
    release_state(self)
    if res == 1 then
        return 1
    end
    return nil, "expired"
end

-- ok, err = lock:expire(timeout?): true | nil, "unlocked" | nil, "expired"
-- | nil, err; timeout in seconds (default: the exptime of new), 0 = never
function _M.expire(self, timeout)
    local ms, fms
    if timeout == nil then
        ms, fms = self.ms, self.fence_ms
    elseif not options.seconds_ok(timeout) then
        error('bad "timeout" argument', 2)
    else
        ms, fms = ms_string(timeout), fence_ms(timeout, self.fence_ttl)
    end

    local key = held(self)
    if not key then
        return nil, "unlocked"
    end
    local ok, res = script(self.adapter, EXTEND, key, self.fence_key,
                           self.token, ms, fms)
    if not ok then
        return nil, res
    end
    if res == 1 then
        return true
    end
    release_state(self)
    return nil, "expired"
end

-- owned, err = lock:owned(): true | false, "unlocked" | false, "expired"
-- | nil, err.  Asks Redis; does not change what this object holds.
function _M.owned(self)
    local key = held(self)
    if not key then
        return false, "unlocked"
    end
    local ok, res = script(self.adapter, OWNED, key, self.fence_key,
                           self.token, "0", "0")
    if not ok then
        return nil, res
    end
    if res == 1 then
        return true
    end
    return false, "expired"
end


return _M
