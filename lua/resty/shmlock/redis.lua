-- resty.shmlock.redis: the resty.shmlock lock API on a Redis server, for
-- locks that must hold across hosts.
--
-- One Redis key per lock, "<prefix>{<key>}", holds the holder's token and
-- expires by itself (SET NX PX).  Release and extend are compare-and-act
-- Lua scripts, so they never touch a lock that expired and was re-taken by
-- someone else.  Scripts run by EVALSHA; a server that does not know them
-- yet answers NOSCRIPT and gets them once by EVAL.
--
-- The client is the caller's: a connected lua-redis (redis-lua 2.x,
-- `require "redis"`) client in plain LuaJIT, a lua-resty-redis object
-- inside OpenResty.  A tiny adapter below turns both conventions (raise
-- vs. return nil/false, err; nil vs. ngx.null) into one.  The caller owns
-- the connection: its socket timeout bounds every call we make, and after
-- a connection error the caller should drop the client and connect a new
-- one (the reply stream of that connection can no longer be trusted).

local ffi = require "ffi"
local bit = require "bit"
local options = require "resty.shmlock.options"

local C = ffi.C
local ffi_new = ffi.new
local ffi_str = ffi.string
local ffi_errno = ffi.errno
local bxor, lshift, rshift, tobit = bit.bxor, bit.lshift, bit.rshift, bit.tobit
local type = type
local tostring = tostring
local tonumber = tonumber
local ipairs = ipairs
local pcall = pcall
local error = error
local rawget = rawget
local setmetatable = setmetatable
local floor = math.floor
local min = math.min
local max = math.max
local MIN_SLEEP = options.MIN_SLEEP
local byte = string.byte
local find = string.find
local match = string.match
local format = string.format
local rep = string.rep
local io_open = io.open

-- inside nginx: wait with ngx.sleep (never block the worker), and know
-- lua-resty-redis's null reply
local ngx = ngx
local ngx_sleep = ngx and ngx.sleep
local null = ngx and ngx.null

-- each declaration alone: another module may have declared some of them
for _, decl in ipairs {
    "struct timespec { long tv_sec; long tv_nsec; };",
    "int clock_gettime(int clk, struct timespec *tp);",
    "int nanosleep(const struct timespec *req, struct timespec *rem);",
    "int getpid(void);",
    "int gethostname(char *name, size_t len);",
} do
    pcall(ffi.cdef, decl)
end

local CLOCK_MONOTONIC = 1
local EINTR = 4

local _M = { _VERSION = "0.1.0" }
local mt = { __index = _M }

local ts = ffi_new("struct timespec")
local req = ffi_new("struct timespec")
local rem = ffi_new("struct timespec")


-- The scripts.  Every call passes KEYS = { lock key, fence key } and
-- ARGV = { token, milliseconds } ("0" where unused, and for exptime 0:
-- never expires, as a shdict entry with exptime 0).  The SHA1s are of the
-- exact source text; a spec checks that EVALSHA finds them.

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
-- A held key that is not a string is reported (WRONGTYPE, Redis's own
-- error from GET) instead of waited on.  A fence key of the wrong type
-- undoes the SET before returning the error, so no lock is left behind.
local ACQUIRE_SRC = [[
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
end
return fence
]]
local ACQUIRE_SHA = "b32dce0895060e9b1be69a6c81cb11ce7bc7870b"

-- Release: delete the key only if it still holds our token.  1 = released,
-- 0 = our lock is gone (expired, and maybe re-taken by someone else).
local RELEASE_SRC = [[
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
]]
local RELEASE_SHA = "8cc47080657296d1e2753077bb909ace33c3eca6"

-- Extend: reset the expiry only if the key still holds our token.
local EXTEND_SRC = [[
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if ARGV[2] == '0' then
  redis.call('PERSIST', KEYS[1])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
]]
local EXTEND_SHA = "6cf0ab0842be42edf059783db0101e6d85dfc681"

-- Owned: does the key still hold our token?
local OWNED_SRC = [[
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  return 1
end
return 0
]]
local OWNED_SHA = "3e26f6fa5687118d450b61bad45d8a91d7cab38a"


-- Clock and sleep.

local function now()
    C.clock_gettime(CLOCK_MONOTONIC, ts)
    return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

local function os_sleep(seconds)
    local sec = floor(seconds)
    req.tv_sec = sec
    req.tv_nsec = floor((seconds - sec) * 1e9)
    while C.nanosleep(req, rem) ~= 0 do
        if ffi_errno() ~= EINTR then
            return
        end
        req.tv_sec = rem.tv_sec    -- interrupted by a signal: sleep the rest
        req.tv_nsec = rem.tv_nsec
    end
end

local sleep = ngx_sleep or os_sleep


-- Tokens: host / per-load random / pid / counter.  The pid is read per
-- acquisition, since nginx forks its workers after loading modules; the
-- random part tells apart processes with the same host name and pid
-- (containers).  The jitter generator is reseeded in each new process for
-- the same reason, so forked waiters do not back off in lockstep.

local function random_bytes(n)
    local f = io_open("/dev/urandom", "rb")
    local s = f and f:read(n)
    if f then
        f:close()
    end
    if not s or #s < n then
        -- no /dev/urandom (a chroot): time and a heap address still vary
        s = tostring(os.time()) .. tostring(os.clock()) .. tostring({})
        s = s .. rep("\0", n)
    end
    return s
end

local function hostname()
    local buf = ffi_new("char[256]")
    if C.gethostname(buf, 255) ~= 0 then
        return "localhost"
    end
    return ffi_str(buf)
end

local seed_bytes = random_bytes(10)
local token_base = hostname() .. "/" .. format("%02x%02x%02x%02x%02x%02x",
                                               byte(seed_bytes, 1, 6))
local seed = tobit(((byte(seed_bytes, 7) * 256 + byte(seed_bytes, 8)) * 256
                    + byte(seed_bytes, 9)) * 256 + byte(seed_bytes, 10))
local counter = 0
local rng = 1
local rng_pid = -1

-- xorshift32: [0, 1)
local function random()
    local x = rng
    x = bxor(x, lshift(x, 13))
    x = bxor(x, rshift(x, 17))
    x = bxor(x, lshift(x, 5))
    rng = x
    return (x % 4294967296) / 4294967296
end

local function new_token()
    local pid = C.getpid()
    if pid ~= rng_pid then
        rng_pid = pid
        rng = bxor(seed, tobit(pid * 2654435761 % 4294967296))
        if rng == 0 then
            rng = 1
        end
    end
    counter = counter + 1
    return token_base .. "/" .. pid .. "/" .. counter
end


-- The client adapter.  Two conventions, one result:
--   ok = true:  reply (nil for a null reply)
--   ok = false: the error message, and whether it was an error reply from
--               Redis (the command ran, or was refused, atomically) rather
--               than a connection failure (we cannot know what happened).
-- Messages come out as "redis error: <Redis's message>" and
-- "redis connection error: <the client's message>".

local RAISES = 1    -- lua-redis: raises on every error, nil = null reply
local RETURNS = 2   -- lua-resty-redis: res, err; false, err = error reply;
                    -- nil, err = connection error; ngx.null = null reply

local function client_kind(client)
    if type(client) ~= "table" then
        return nil
    end
    local net = rawget(client, "network")
    if type(net) == "table" and net.socket ~= nil then
        return RAISES
    end
    if client.evalsha ~= nil and client.eval ~= nil then
        return RETURNS
    end
    return nil
end

local function raised(msg)
    msg = tostring(msg)
    -- drop the "path/redis.lua:NNN: " position error() prepends
    local _, e = find(msg, "^[^%s]-:%d+: ")
    if e then
        msg = msg:sub(e + 1)
    end
    local m = match(msg, "^redis error: (.*)$")
    if m then
        return false, "redis error: " .. m, true
    end
    return false, "redis connection error: "
                  .. (match(msg, "^connection error: (.*)$") or msg), false
end

local function call(client, kind, method, a1, a2, a3, a4, a5, a6)
    local ok, res, err = pcall(client[method], client, a1, a2, a3, a4, a5, a6)
    if not ok then
        return raised(res)
    end
    if kind == RAISES then
        return true, res
    end
    if res == nil then
        return false, "redis connection error: "
                      .. (err or "no reply (is a pipeline open?)"), false
    end
    if res == false then
        return false, "redis error: " .. tostring(err), true
    end
    if res == null then
        return true, nil
    end
    return true, res
end

local function script(self, sha, src, k1, k2, a1, a2)
    local client, kind = self.client, self.kind
    local ok, res, reply = call(client, kind, "evalsha", sha, 2, k1, k2, a1, a2)
    if not ok and reply and find(res, "^redis error: NOSCRIPT") then
        ok, res, reply = call(client, kind, "eval", src, 2, k1, k2, a1, a2)
    end
    return ok, res, reply
end


-- Options, as resty.lock (same defaults and clamping), checked by name.

local function ms_string(seconds)
    return format("%.0f", options.ms(seconds))
end

-- new(client, opts) or :new(client, opts)
function _M.new(a, b, c)
    local client, opts = a, b
    if a == _M then
        client, opts = b, c
    end

    local kind = client_kind(client)
    if not kind then
        error('bad "client" argument: a connected lua-redis client or '
              .. 'lua-resty-redis object expected', 2)
    end

    local exptime, timeout, step, ratio, max_step = options.lock(opts)
    local prefix = opts and opts.prefix
    if prefix ~= nil and type(prefix) ~= "string" then
        error("opts.prefix must be a string", 2)
    end

    return setmetatable({
        client = client,
        kind = kind,
        prefix = prefix or "lock:",
        exptime = exptime,
        timeout = timeout,
        step = step,
        ratio = ratio,
        max_step = max_step,
        ms = ms_string(exptime),
        key = nil,         -- the Redis key while we hold it
        fence_key = nil,
        token = nil,
        fence = nil,       -- the fencing token of the current acquisition
    }, mt)
end


-- One attempt: fence (number) when acquired; nil when held by someone
-- else; nil, err on failure.
local function acquire(self, lkey, fkey, token)
    local ok, res, reply = script(self, ACQUIRE_SHA, ACQUIRE_SRC, lkey, fkey,
                                  token, self.ms)
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
        call(self.client, self.kind, "eval", RELEASE_SRC, 2, lkey, fkey,
             token, "0")
    end
    return nil, res
end

local function hold(self, lkey, fkey, token, fence)
    self.key = lkey
    self.fence_key = fkey
    self.token = token
    self.fence = fence
end

local function release_state(self)
    self.key = nil
    self.fence_key = nil
    self.token = nil
    self.fence = nil
end

-- the Redis keys for a user key, or nil, err; "{...}" makes both keys hash
-- to one Redis Cluster slot and keeps the two key families apart (a lock
-- key ends in "}", a fence key in ":fence")
local function keys_of(self, key)
    if key == nil then
        return nil, "nil key"
    end
    if type(key) ~= "string" then
        key = tostring(key)
    end
    if #key == 0 then
        return nil, "empty key"
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
    if self.key then
        return nil, "locked"
    end

    local token = new_token()
    local fence, err = acquire(self, lkey, fkey, token)
    if fence then
        hold(self, lkey, fkey, token, fence)
        return 0, nil, fence
    end
    if err then
        return nil, err
    end
    return false, lkey, fkey, token
end

-- elapsed, err, fence = lock:lock(key)
function _M.lock(self, key)
    local start = now()
    local got, lkey, fkey, token = first_attempt(self, key)
    if got ~= false then
        return got, lkey, fkey      -- 0, nil, fence or nil, err
    end

    -- held by someone else: back off exponentially, each sleep drawn from
    -- [step/2, step] so that waiters spread out, never below MIN_SLEEP (a
    -- spin of Redis round trips) and never past the deadline
    local timeout = self.timeout
    if timeout <= 0 then
        return nil, "timeout"
    end
    local deadline = start + timeout
    local step = self.step
    local ratio = self.ratio
    local max_step = self.max_step
    while true do
        local left = deadline - now()
        if left <= 0 then
            return nil, "timeout"
        end
        local s = max(MIN_SLEEP, step * (0.5 + 0.5 * random()))
        if s > left then
            s = left
        end
        sleep(s)

        local fence, err = acquire(self, lkey, fkey, token)
        if fence then
            hold(self, lkey, fkey, token, fence)
            return now() - start, nil, fence
        end
        if err then
            return nil, err
        end
        step = min(max(MIN_SLEEP, step * ratio), max_step)
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
    local key = self.key
    if not key then
        return nil, "unlocked"
    end
    local ok, res = script(self, RELEASE_SHA, RELEASE_SRC, key,
                           self.fence_key, self.token, "0")
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
    local ms
    if timeout == nil then
        ms = self.ms
    elseif not options.seconds_ok(timeout) then
        error('bad "timeout" argument', 2)
    else
        ms = ms_string(timeout)
    end

    local key = self.key
    if not key then
        return nil, "unlocked"
    end
    local ok, res = script(self, EXTEND_SHA, EXTEND_SRC, key, self.fence_key,
                           self.token, ms)
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
    local key = self.key
    if not key then
        return false, "unlocked"
    end
    local ok, res = script(self, OWNED_SHA, OWNED_SRC, key, self.fence_key,
                           self.token, "0")
    if not ok then
        return nil, res
    end
    if res == 1 then
        return true
    end
    return false, "expired"
end


return _M
