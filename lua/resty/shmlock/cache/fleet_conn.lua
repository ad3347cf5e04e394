-- resty.shmlock.cache.fleet_conn (internal): the fleet tier's Redis
-- connections, and the one way it sends a command.
--
-- The cache is given a `connect` function (opts.redis): it returns a
-- connected client, lua-redis (`require "redis"`) outside nginx or
-- lua-resty-redis inside (Debian's `nginx.redis`, OpenResty's
-- `resty.redis`), or nil and an error; it may raise.  It is called with
-- the cache's redis_timeout (seconds), for a connect timeout of its own.
--
--   outside nginx  one client per cache object and process, kept between
--                  calls; dropped (closed) after a connection error; a
--                  client inherited by a forked child is its parent's
--                  connection and is forgotten there, never used or closed.
--   inside nginx   a client per use (cosockets belong to one request or
--                  timer), put back with set_keepalive after it, closed
--                  after a connection error.
--
-- Every command's socket timeout is set before it is sent (redis_timeout;
-- plus the block time for XREAD BLOCK): nothing waits on a client's
-- default.  lua-resty-redis 0.27 (Debian's) has set_timeout only, newer
-- ones set_timeouts; lua-redis's socket is LuaSocket's.
--
-- Answers follow resty.shmlock.redis.client's convention: ok, reply; or
-- false, "redis error: ..." (an error reply: reply = true) / "redis
-- connection error: ..." (reply = false).

local core = require "resty.shmlock.internal.core"
local nginx = require "resty.shmlock.internal.nginx"
local client = require "resty.shmlock.redis.client"

local type = type
local tostring = tostring
local pcall = pcall
local rawget = rawget
local getmetatable = getmetatable
local find = string.find
local match = string.match
local upper = string.upper
local self_pid = core.self_pid

local _M = {}

local ngx = nginx.api()
local null = ngx and ngx.null

-- set_keepalive's idle time (ms) and pool size inside nginx
local KEEPALIVE_MS = 60000
local POOL_SIZE = 100

local RAISES = "raises"     -- lua-redis
local RETURNS = "returns"   -- lua-resty-redis and look-alikes


-- a raised message in our words (lua-redis raises every failure)
local function raised(msg)
    msg = tostring(msg)
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

-- the method `name` of a client: lua-redis knows only the commands of its
-- time (no XREAD): others are made with its own redis.command
local function method(a, name)
    local redis = a.redis
    if a.kind == RETURNS then
        return redis[name]
    end
    local m = redis[name]
    if m == nil then
        local ok, mod = pcall(require, "redis")
        if ok and type(mod) == "table" and mod.command then
            m = mod.command(upper(name))
            redis[name] = m
        end
    end
    return m
end

-- syntax: ok, res, reply = conn.call(a, name, ...)
function _M.call(a, name, ...)
    local m = method(a, name)
    if not m then
        return false, "redis connection error: the client has no "
                      .. name .. " command", false
    end
    local ok, res, err = pcall(m, a.redis, ...)
    if not ok then
        return raised(res)
    end
    if a.kind == RAISES then
        return true, res
    end
    if res == nil then
        return false, "redis connection error: " .. tostring(err), false
    end
    if res == false then
        return false, "redis error: " .. tostring(err), true
    end
    if res == null then
        return true, nil
    end
    return true, res
end
local call = _M.call

-- EVALSHA of a script; a server that does not know it (NOSCRIPT) gets
-- it by EVAL
local function script_once(a, script, ...)
    local ok, res, reply = call(a, "evalsha", script.sha, script.keys, ...)
    if not ok and reply and find(res, "^redis error: NOSCRIPT") then
        ok, res, reply = call(a, "eval", script.src, script.keys, ...)
    end
    if ok then
        a.reused = true
    end
    return ok, res, reply
end

-- syntax: conn.timeout(a, seconds)
-- The socket timeout of the next commands.
function _M.timeout(a, seconds)
    local redis = a.redis
    if a.kind == RAISES then
        -- LuaSocket keeps two timeouts, per blocking call ("b") and per
        -- method call ("t": what lua-redis's connect sets); both
        local sock = redis.network.socket
        pcall(sock.settimeout, sock, seconds, "b")
        pcall(sock.settimeout, sock, seconds, "t")
        return
    end
    local ms = seconds * 1000
    -- (lua-resty-redis makes a command method of any name it is asked
    -- for: the module table says which methods really exist)
    local mt = getmetatable(redis)
    local mod = mt and type(mt.__index) == "table" and mt.__index or redis
    if rawget(mod, "set_timeouts") then
        pcall(redis.set_timeouts, redis, ms, ms, ms)
    elseif rawget(mod, "set_timeout") or redis.set_timeout then
        pcall(redis.set_timeout, redis, ms)
    end
end

local function close(a)
    local redis = a.redis
    if a.kind == RAISES then
        pcall(redis.network.socket.close, redis.network.socket)
    else
        pcall(redis.close, redis)
    end
end

-- a new client from the connect function, as an adapter; nil, err
local function open(f)
    local ok, redis, err = pcall(f.connect, f.timeout)
    if not ok then
        local _, msg = raised(redis)
        return nil, msg
    end
    if redis == nil then
        return nil, "redis connection error: " .. tostring(err or
                                                           "no client")
    end
    local a = client.wrap(redis, null)
    if not a then
        return nil, "redis connection error: opts.redis returned no "
                    .. "lua-redis client or lua-resty-redis object"
    end
    a.kind = rawget(redis, "network") and RAISES or RETURNS
    if a.kind == RETURNS then
        -- (from the keepalive pool: it may have died there)
        local rok, n = pcall(redis.get_reused_times, redis)
        a.reused = rok and type(n) == "number" and n > 0
    end
    _M.timeout(a, f.timeout)
    return a
end

-- syntax: a, err = conn.get(f)
-- A client to use now (f: the cache's fleet state); give it back with
-- conn.put.
function _M.get(f)
    if ngx then
        return open(f)
    end
    local a = f.client
    if a and f.client_pid == self_pid() then
        _M.timeout(a, f.timeout)
        return a
    end
    -- none yet, or our parent's: a connection of our own
    f.client = nil
    local err
    a, err = open(f)
    if a then
        f.client, f.client_pid = a, self_pid()
    end
    return a, err
end

-- syntax: yes = conn.timed_out(err): err (a connection error) is a read
-- or write that timed out: Redis is slow or stopped, the connection is
-- not known to be dead
local function timed_out(err)
    return find(err, "timeout$") ~= nil
end
_M.timed_out = timed_out

-- syntax: ok, res, reply, a = conn.script(f, a, script, ...)
-- A script of resty.shmlock.cache.fleet_scripts (its keys, then its
-- arguments) on client a.  A connection kept since an earlier command
-- that fails without a reply (killed by CLIENT KILL, by a restart, by a
-- timeout of the pool) is not Redis down: the script is sent once more,
-- on a new connection (every script may run twice: a fetch finds its own
-- lock, a store or a change does the same again).  Not after a timeout:
-- a Redis that did not answer in redis_timeout on one connection is slow
-- or stopped, and a second try would double what the call costs.  a: the
-- client to use and give back from now on.
function _M.script(f, a, script, ...)
    local ok, res, reply = script_once(a, script, ...)
    if ok or reply or not a.reused or timed_out(res) then
        return ok, res, reply, a
    end
    _M.put(f, a, true)
    local b, err = _M.get(f)
    if not b then
        return false, err, false, a
    end
    ok, res, reply = script_once(b, script, ...)
    return ok, res, reply, b
end

-- syntax: conn.put(f, a, broken)
-- Gives a client back; broken (a connection error: its reply stream can
-- no longer be trusted): closed and forgotten.
function _M.put(f, a, broken)
    if broken then
        close(a)
        if f.client == a then
            f.client = nil
        end
        return
    end
    if ngx then
        local ok, res = pcall(a.redis.set_keepalive, a.redis, KEEPALIVE_MS,
                              POOL_SIZE)
        if not (ok and res) then
            close(a)
        end
    end
end

return _M
