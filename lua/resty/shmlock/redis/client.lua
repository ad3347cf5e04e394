-- resty.shmlock.redis.client (internal): the caller's Redis client behind
-- one convention.
--
-- Two kinds of client are understood: a connected lua-redis client
-- (redis-lua 2.x, `require "redis"`: raises on every error, nil for a
-- null reply) and a lua-resty-redis object (res, err; false, err for an
-- error reply, nil, err for a connection error, the null value -- ngx.null
-- -- for a null reply).  Every call answers:
--
--     ok = true:  reply (nil for a null reply)
--     ok = false: the error message, and whether it was an error reply
--                 from Redis (the command ran, or was refused, atomically)
--                 rather than a connection failure (we cannot know what
--                 happened)
--
-- Messages come out as "redis error: <Redis's message>" and
-- "redis connection error: <the client's message>".

local type = type
local tostring = tostring
local pcall = pcall
local rawget = rawget
local find = string.find
local match = string.match

local RAISES = 1    -- lua-redis
local RETURNS = 2   -- lua-resty-redis

local _M = {}


local function kind_of(client)
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

-- syntax: c = client.wrap(redis, null)
-- The adapter of a client of either kind; null: the null reply of a
-- lua-resty-redis client (ngx.null inside nginx).  nil for anything else.
function _M.wrap(redis, null)
    local kind = kind_of(redis)
    if not kind then
        return nil
    end
    return { redis = redis, kind = kind, null = null }
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

local function call(c, method, ...)
    local redis = c.redis
    local ok, res, err = pcall(redis[method], redis, ...)
    if not ok then
        return raised(res)
    end
    if c.kind == RAISES then
        return true, res
    end
    if res == nil then
        return false, "redis connection error: "
                      .. (err or "no reply (is a pipeline open?)"), false
    end
    if res == false then
        return false, "redis error: " .. tostring(err), true
    end
    if res == c.null then
        return true, nil
    end
    return true, res
end

-- syntax: ok, res, reply = client.eval(c, script, ...)
-- EVAL of a script (resty.shmlock.redis.scripts: its keys, then its
-- arguments, strings).
function _M.eval(c, script, ...)
    return call(c, "eval", script.src, script.keys, ...)
end

-- syntax: ok, res, reply = client.script(c, script, ...)
-- The same by EVALSHA; a server that does not know the script yet
-- (NOSCRIPT) gets it once by EVAL.
function _M.script(c, script, ...)
    local ok, res, reply = call(c, "evalsha", script.sha, script.keys, ...)
    if not ok and reply and find(res, "^redis error: NOSCRIPT") then
        ok, res, reply = call(c, "eval", script.src, script.keys, ...)
    end
    return ok, res, reply
end


return _M
