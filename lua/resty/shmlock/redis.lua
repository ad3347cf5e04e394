-- resty.shmlock.redis: the resty.shmlock lock API on a Redis server, for
-- locks that must hold across hosts.
--
-- One Redis key per lock, "<prefix>{<key>}", holds the holder's network
-- token (resty.shmlock.internal.token) and expires by itself (SET NX PX).
-- Release, transfer and extend are compare-and-act Lua scripts
-- (resty.shmlock.redis.scripts), so they never touch a lock that expired
-- and was re-taken by someone else.  Scripts run by EVALSHA; a server that
-- does not know them yet answers NOSCRIPT and gets them once by EVAL.
--
-- Redis is given as a connected client (the caller's, as before: a
-- lua-redis client in plain Lua, a lua-resty-redis object inside nginx)
-- or as a connect function, from which the library opens the connections
-- it needs (resty.shmlock.redis.link): a waiter's, so that a release
-- wakes the waiting hosts through the key's wake stream (resty.shmlock.
-- redis.wake; the wait: resty.shmlock.lock.wait), and inside nginx the
-- renewal's (resty.shmlock.redis.renew, opts.renew).
--
-- In front of Redis, a host's single flight (resty.shmlock.redis.host):
-- the processes of a host that want a key take turns in a zone, and only
-- the turn's holder talks to Redis, waiting there for other hosts; it
-- keeps the turn while it holds the key, and its unlock hands the key to
-- the host's next process (a transfer: one script, no release and no
-- round of tries) while the host's turn lasts.  So while a key is held,
-- Redis sees O(hosts) commands, not O(waiters x polls).

local version = require "resty.shmlock.version"
local clock = require "resty.shmlock.internal.clock"
local options = require "resty.shmlock.internal.options"
local token = require "resty.shmlock.internal.token"
local key_text = require("resty.shmlock.internal.key").text
local core = require "resty.shmlock.internal.core"
local link = require "resty.shmlock.redis.link"
local scripts = require "resty.shmlock.redis.scripts"
local host = require "resty.shmlock.redis.host"
local wait = require "resty.shmlock.lock.wait"
local wake = require "resty.shmlock.redis.wake"
local renew = require "resty.shmlock.redis.renew"

local type = type
local tostring = tostring
local error = error
local setmetatable = setmetatable
local getmetatable = getmetatable
local min = math.min
local huge = math.huge
local tonumber = tonumber
local format = string.format
local byte = string.byte
local now = clock.now
local now_ms = clock.now_ms
local new_token = token.network
local ours = token.ours
local self_pid = core.self_pid
local script = link.script
local ACQUIRE = scripts.acquire
local RELEASE = scripts.release
local TRANSFER = scripts.transfer
local EXTEND = scripts.extend
local OWNED = scripts.owned
local YIELD = scripts.yield

local _M = { _VERSION = version }
local mt = { __index = _M }

-- Misuse: a method called on anything but a Redis lock object
-- (lock.lock(key), a host lock, a dict) raises at the method's caller,
-- before anything of it is read.
local function check_self(self)
    if getmetatable(self) ~= mt then
        error("bad lock object (use lock:method(), not lock.method())", 3)
    end
end


-- Options, as resty.lock (same defaults and clamping), checked by name.

-- How long a fence counter outlives the last lock it numbered, in seconds
-- (opts.fence_ttl; 0: for ever): 7 days.
local FENCE_TTL = 7 * 24 * 3600
_M.FENCE_TTL = FENCE_TTL

-- opts.redis_timeout's default, seconds: each Redis call's socket timeout
-- with a connect function (as the cache's fleet tier)
local REDIS_TIMEOUT = 1

local function ms_string(seconds)
    return format("%.0f", options.ms(seconds))
end

-- The fence counter's lifetime (ms, as the scripts take it) for a lock of
-- `seconds`: the lock's lifetime plus fence_ttl, so that the counter
-- always outlives the lock, plus `span` (a host's turn: below); "0" (no
-- expiry) for a lock that never expires or fence_ttl 0.
local function fence_ms(seconds, fence_ttl, span)
    if seconds == 0 or fence_ttl == 0 then
        return "0"
    end
    return ms_string(seconds + fence_ttl + (span or 0))
end

-- Until when (ms of our clock) a counter given the lifetime fms by a
-- script sent at sent_ms lives at least (Redis ran it after we sent it)
local function fence_end(fms, sent_ms)
    if fms == "0" then
        return huge
    end
    return sent_ms + tonumber(fms)
end

local function boolean(v, name)
    if v ~= nil and type(v) ~= "boolean" then
        error(name .. " must be a boolean", 3)
    end
    return v == true
end

-- new(client_or_connect, opts) or :new(client_or_connect, opts); nil, err
-- when the zone of host single flight cannot be opened
function _M.new(a, b, c)
    local redis, opts = a, b
    if a == _M then
        redis, opts = b, c
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
    local renews = boolean(opts and opts.renew, "opts.renew")
    if renews then
        renew.check(l, 2)
    end
    local h, err = host.new(opts and opts.dict, exptime, "opts.dict")
    if h == nil then
        return nil, err
    end

    local handoff = host.HANDOFF
    if exptime > 0 then
        handoff = min(handoff, exptime)
    end
    -- A host's turn hands the lock on without touching the fence counter
    -- while the counter's lifetime covers the new holder's lock: a
    -- counter set for a lock plus TURN_SPAN covers every transfer of the
    -- turn (made within TURN_SECONDS, each taken within HANDOFF)
    local span = h and host.TURN_SPAN or 0
    return setmetatable({
        client = redis,
        link = l,          -- resty.shmlock.redis.link's
        host = h,          -- resty.shmlock.redis.host's, false: none
        prefix = prefix or "lock:",
        exptime = exptime,
        timeout = timeout,
        step = step,
        ratio = ratio,
        max_step = max_step,
        renew = renews,
        ms = ms_string(exptime),
        handoff = handoff,
        handoff_ms = ms_string(handoff),
        fence_ttl = fence_ttl,
        span = span,
        fence_ms = fence_ms(exptime, fence_ttl, span),
        key = nil,         -- the Redis key while we hold it
        fence_key = nil,
        wake_key = nil,    -- its wake stream (resty.shmlock.redis.wake)
        token = nil,
        fence = nil,       -- the fencing token of the current acquisition
        pid = nil,         -- the process that took it (token.ours)
        epoch = 0,         -- one more at each acquisition and release
        lost = false,      -- the renewal found the lock gone
        turn_start = 0,    -- (ms) when the host's turn at the key began
        handoffs = 0,      -- transfers within the host's turn so far
        fence_until = 0,   -- (ms) the fence counter lives at least so long
        sent_ms = 0,       -- (ms) when the last acquire was sent
    }, mt)
end


-- One attempt: fence (number) when acquired; false when held by someone
-- else (watch: the caller will wait: with a connect function, then false,
-- the id to wait after in the wake stream wkey, when Redis has streams);
-- nil, err on failure.
local function acquire(self, lkey, tok, wkey, watch)
    local fkey = lkey .. ":fence"
    self.sent_ms = now_ms()
    local l = self.link
    local ok, res, reply = script(l, ACQUIRE, lkey, fkey, wkey, tok, self.ms,
                                  self.fence_ms,
                                  watch and l.connect and "1" or "0")
    if ok and type(res) == "number" then
        return res
    end
    if ok and res == nil then
        return false
    end
    if ok and type(res) == "string" then
        return false, res
    end
    if ok then
        res = "redis connection error: unexpected reply " .. tostring(res)
    end
    if not reply then
        -- The request may have reached Redis and the SET happened, with
        -- only the reply lost (a read timeout): undo it, best effort
        -- (resty.shmlock.redis.link.cleanup).  This costs at most one more
        -- socket timeout.
        link.cleanup(self.link, RELEASE, lkey, fkey, wkey, tok)
    end
    return nil, res
end

-- The renewal's answers (resty.shmlock.redis.renew): the renewal of the
-- lock held in `epoch`, sent at sent_ms, went through; or found the lock
-- gone (owned() false from now on, the host's turn given back at once)
local function renewed(self, epoch, sent_ms)
    if self.epoch == epoch and self.key then
        self.fence_until = fence_end(self.fence_ms, sent_ms)
        if self.host then
            host.extend(self.host, self.exptime)
        end
    end
end

local function lost(self, epoch)
    if self.epoch == epoch and self.key then
        self.lost = true
        if self.host then
            host.leave(self.host)
        end
    end
end

-- The lock is ours: acquired (a new turn of the host), or taken from a
-- transfer (the turn goes on: turn_start, handoffs, fence_until from it)
local function hold(self, lkey, tok, fence, turn_start, handoffs,
                    fence_until)
    self.key = lkey
    self.fence_key = lkey .. ":fence"
    self.wake_key = lkey .. wake.SUFFIX
    self.token = tok
    self.fence = fence
    self.pid = self_pid()
    self.epoch = self.epoch + 1
    self.lost = false
    self.turn_start = turn_start or now_ms()
    self.handoffs = handoffs or 0
    self.fence_until = fence_until or fence_end(self.fence_ms, self.sent_ms)
    if self.host then
        -- the host's turn lasts as long as the key's lease
        host.extend(self.host, self.exptime)
    end
    if self.renew then
        renew.start(self, renewed, lost)
    end
end

local function release_state(self)
    self.key = nil
    self.fence_key = nil
    self.wake_key = nil
    self.token = nil
    self.fence = nil
    self.pid = nil
    self.epoch = self.epoch + 1
end

-- The Redis key of the lock this object holds, or nil.  An object copied
-- into a forked child holds nothing there: the lock is the parent's, and
-- the child may neither release it, extend it nor take it as its own.
-- The copy forgets it (Redis is not asked, the host's turn stays the
-- parent's), and may lock anew.  One load and a compare (token.ours).
local function held(self)
    local key = self.key
    if key and not ours(self.pid) then
        release_state(self)
        return nil
    end
    return key
end

-- the Redis key for a user key, or nil, err; "{...}" makes the lock key
-- and its fence key hash to one Redis Cluster slot and keeps the two key
-- families apart (a lock key ends in "}", a fence key in ":fence").  A
-- key that starts with "}" would leave the hash tag empty (Redis then
-- hashes each whole name: the two keys in two slots): it gets a "\" in
-- front, and so does a key that starts with "\" (no two keys one name).
local function key_of(self, key)
    local err
    key, err = key_text(key)
    if not key then
        return nil, err
    end
    local b = byte(key, 1)
    if b == 125 or b == 92 then       -- "}", "\"
        key = "\\" .. key
    end
    return self.prefix .. "{" .. key .. "}"
end

-- A transfer the host's last holder left for the turn we just took: the
-- fence when the key is ours now (its lease moved to our exptime), else
-- nil (it lapsed: try as anyone would).
local function take_transfer(self, h, lkey)
    local tok, fence, turn_start, handoffs, fence_until = host.take(h, lkey)
    if not tok then
        return nil
    end
    local fkey = lkey .. ":fence"
    local ok, res, reply = script(self.link, EXTEND, lkey, fkey, tok,
                                  self.ms, "")
    if ok and res == 1 then
        hold(self, lkey, tok, fence, turn_start, handoffs, fence_until)
        return fence
    end
    if not ok and not reply then
        -- the extend may have run with its reply lost (a timeout): the key
        -- would then be tok's for exptime, and nobody's; given back, best
        -- effort, as a failed acquire's (link.cleanup)
        link.cleanup(self.link, RELEASE, lkey, fkey, lkey .. wake.SUFFIX,
                     tok)
    end
    return nil
end

-- The wait of lock(): the host's turn taken, the key held on another host
-- (since: the id our try answered, resty.shmlock.redis.wake; nil: we poll)
local function wait_redis(self, lkey, tok, deadline, since)
    return wait.redis({ link = self.link, wake = lkey .. wake.SUFFIX,
                        since = since, step = self.step, ratio = self.ratio,
                        max_step = self.max_step },
                      deadline, acquire, self, lkey, tok)
end

-- The turn's new holder lets the other hosts go first (its host's last
-- holder released the key with `fence` and woke them: host.yield), before
-- its own try: while none of them has taken the key yet, it waits for
-- their release (scripts.yield), HANDOFF at most, as long as a yield
-- lasts: a woken host takes the key within a round trip, and a mark that
-- outlived its waiter brings nobody.  A release that came before it
-- looked is not waited for (that would cost a backstop).
local function let_others_go(self, lkey, fence, deadline)
    local l = self.link
    local wkey = lkey .. wake.SUFFIX
    local ok, id = script(l, YIELD, lkey, lkey .. ":fence", wkey,
                          format("%.0f", fence))
    if ok and type(id) == "string" then
        wake.wait(l, wkey, id, min(host.HANDOFF, deadline - now()))
    end
end

-- elapsed, err, fence = lock:lock(key, timeout?): timeout, this call's
-- longest wait instead of the object's, is checked and clamped as
-- opts.timeout (a bad one raises at the caller's line); 0: one attempt
function _M.lock(self, key, timeout)
    check_self(self)
    if timeout == nil then
        timeout = self.timeout
    else
        timeout = options.timeout(timeout, self.exptime, 2)
    end
    local start = now()
    local lkey, err = key_of(self, key)
    if not lkey then
        return nil, err
    end
    if held(self) then
        return nil, "locked"
    end

    -- the host's turn first: only its holder talks to Redis
    local h = self.host
    local waited, yield = false, false
    if h then
        local elapsed
        elapsed, err = host.enter(h, lkey, timeout)
        if not elapsed then
            return nil, err
        end
        waited = elapsed > 0
        local fence = take_transfer(self, h, lkey)
        if fence then
            return waited and now() - start or 0, nil, fence
        end
        yield = host.yielded(h, lkey)
    end

    local tok = new_token()
    local fence, since
    if yield and timeout > 0 and self.link.connect then
        let_others_go(self, lkey, yield, start + timeout)
        yield = false
    end
    -- (yield left: a connected client, no connection of the library's to
    -- wait on: it polls before its first try)
    if not yield then
        fence, err = acquire(self, lkey, tok, lkey .. wake.SUFFIX,
                             timeout > 0)
        if fence then
            hold(self, lkey, tok, fence)
            return waited and now() - start or 0, nil, fence
        end
        if fence == false then
            since, err = err, nil
        end
    end
    if fence == false and timeout <= 0 then
        err = "timeout"
    elseif not err then
        fence, err = wait_redis(self, lkey, tok, start + timeout, since)
        if fence then
            hold(self, lkey, tok, fence)
            return now() - start, nil, fence
        end
    end
    if h then
        host.leave(h)
    end
    return nil, err
end

-- elapsed (0), err, fence = lock:trylock(key): one attempt, no waiting
-- (a key whose host turn another process of this host has is held, or
-- waited for, here: "timeout")
function _M.trylock(self, key)
    check_self(self)
    return _M.lock(self, key, 0)
end

-- the object holds no lock any more, nor the host's turn
local function let_go(self)
    release_state(self)
    if self.host then
        host.leave(self.host)
    end
end

-- Whether unlock() hands the key to the host's next process: one waits for
-- the turn, and the host's turn is young
local function hands_over(self, h, key)
    return host.waiting(h, key) > 0
           and self.handoffs < host.TURN_HANDOFFS
           and now_ms() - self.turn_start < host.TURN_SECONDS * 1000
end

-- The host's next process gets the key: a transfer (resty.shmlock.redis.
-- scripts).  true when done; else what the release should answer: ok,
-- res (0: our lock is gone) or false, err; nil: release it instead (the
-- transfer was refused, e.g. by a fence key that is no counter).
local function transfer(self, h, key)
    local tok = new_token()
    -- the counter must outlive the new holder's lock: taken within the
    -- handoff's lease, then lasting exptime (0: for ever); 100 ms for the
    -- trip
    local fms, fence_until = "", self.fence_until
    local exptime = self.exptime
    local need = exptime == 0 and huge or now_ms() + 100
                 + (self.handoff + exptime + self.fence_ttl) * 1000
    if fence_until < need then
        fms = self.fence_ms
        fence_until = fence_end(fms, now_ms())
    end
    local ok, res, reply = script(self.link, TRANSFER, key, self.fence_key,
                                  self.token, self.handoff_ms, fms, tok)
    if ok and type(res) == "number" and res > 0 then
        host.hand(h, key, tok, res, self.turn_start, self.handoffs + 1,
                  fence_until)
        return true
    end
    if not ok and reply then
        return nil
    end
    return ok, res
end

-- ok, err = lock:unlock(): 1 | 1, "expired" | nil, "unlocked" | nil, err
function _M.unlock(self)
    check_self(self)
    local key = held(self)
    if not key then
        return nil, "unlocked"
    end
    if self.lost then
        -- (the renewal found it gone, and gave the host's turn back)
        release_state(self)
        return 1, "expired"
    end
    local h = self.host
    local ok, res
    if h and hands_over(self, h, key) then
        ok, res = transfer(self, h, key)
        if ok == true and res == nil then
            let_go(self)
            return 1
        end
    end
    if ok == nil then
        ok, res = script(self.link, RELEASE, key, self.fence_key,
                         self.wake_key, self.token)
    end
    if not ok then
        -- we do not know: keep believing we hold it (it still expires)
        return nil, res
    end
    if type(res) ~= "number" then
        return nil, "redis connection error: unexpected reply "
                    .. tostring(res)
    end
    if h and res > 1 and host.waiting(h, key) > 0 then
        -- our turn was long, and other hosts wait (the release woke
        -- them): they go first
        host.yield(h, key, self.fence)
    end
    let_go(self)
    if res == 0 then
        return 1, "expired"
    end
    return 1
end

-- ok, err = lock:expire(timeout?): true | nil, "unlocked" | nil, "expired"
-- | nil, err; timeout in seconds (default: the exptime of new), 0 = never
function _M.expire(self, timeout)
    check_self(self)
    local ms, fms
    if timeout == nil then
        timeout = self.exptime
        ms, fms = self.ms, self.fence_ms
    elseif not options.seconds_ok(timeout) then
        error('bad "timeout" argument', 2)
    else
        ms = ms_string(timeout)
        fms = fence_ms(timeout, self.fence_ttl, self.span)
    end

    local key = held(self)
    if not key then
        return nil, "unlocked"
    end
    if self.lost then
        let_go(self)
        return nil, "expired"
    end
    local sent = now_ms()
    local ok, res = script(self.link, EXTEND, key, self.fence_key,
                           self.token, ms, fms)
    if not ok then
        return nil, res
    end
    if res == 1 then
        self.fence_until = fence_end(fms, sent)
        if self.host then
            host.extend(self.host, timeout)
        end
        return true
    end
    let_go(self)
    return nil, "expired"
end

-- owned, err = lock:owned(): true | false, "unlocked" | false, "expired"
-- | nil, err.  Asks Redis (unless the renewal found the lock gone); does
-- not change what this object holds.
function _M.owned(self)
    check_self(self)
    local key = held(self)
    if not key then
        return false, "unlocked"
    end
    if self.lost then
        return false, "expired"
    end
    local ok, res = script(self.link, OWNED, key, self.fence_key,
                           self.token)
    if not ok then
        return nil, res
    end
    if res == 1 then
        return true
    end
    return false, "expired"
end

return _M
