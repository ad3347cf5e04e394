-- resty.shmlock.redis.link (internal): how the Redis lock and the Redis
-- semaphore send their scripts, whichever way they were given Redis.
--
--   a connected client   the caller's (lua-redis, or lua-resty-redis and
--                        look-alikes: resty.shmlock.redis.client); its
--                        socket timeout is the caller's; every script goes
--                        on it.
--   a connect function   the library's own connections, as the cache's
--                        fleet tier makes them (resty.shmlock.cache.
--                        fleet_conn): outside nginx one kept per link and
--                        process, inside nginx one per call from the
--                        keepalive pool; each call's socket timeout set to
--                        redis_timeout; a kept connection that breaks
--                        without a reply (not by a timeout) is tried once
--                        more on a new one (every script here may run
--                        twice: each finds its own work done).  The
--                        connect function also gives the waits on a wake
--                        stream (resty.shmlock.redis.wake) and the renewal
--                        (resty.shmlock.redis.renew) their connections.
--
-- Answers follow resty.shmlock.redis.client's convention: ok, reply; or
-- false, "redis error: ..." (an error reply: reply = true) / "redis
-- connection error: ..." (reply = false).

local nginx = require "resty.shmlock.internal.nginx"
local client = require "resty.shmlock.redis.client"
local conn = require "resty.shmlock.cache.fleet_conn"

local type = type

local _M = {}

local ngx = nginx.api()
local null = ngx and ngx.null

-- syntax: l = link.new(client_or_connect, timeout)
-- nil for anything that is neither (the caller raises).
function _M.new(redis, timeout)
    if type(redis) == "function" then
        return { connect = redis, timeout = timeout, client = nil,
                 client_pid = nil }
    end
    local adapter = client.wrap(redis, null)
    if not adapter then
        return nil
    end
    return { adapter = adapter }
end

-- syntax: yes = link.connects(l): made with a connect function
function _M.connects(l)
    return l.connect ~= nil
end

-- syntax: ok, res, reply = link.script(l, script, ...)
function _M.script(l, script, ...)
    local a = l.adapter
    if a then
        return client.script(a, script, ...)
    end
    local err
    a, err = conn.get(l)
    if not a then
        return false, err, false
    end
    local ok, res, reply
    ok, res, reply, a = conn.script(l, a, script, ...)
    conn.put(l, a, not ok and not reply)
    return ok, res, reply
end

-- syntax: ok, res, reply = link.cleanup(l, script, ...)
-- A script sent after a call whose reply was lost, to undo what that call
-- may have done: on the caller's client, by EVAL on the same connection
-- (Redis runs one connection's commands in order, so it runs after the
-- lost one if that ran at all; no second round trip on a connection whose
-- replies are no longer trusted); with a connect function, on a new one.
-- Best effort: its own outcome is the caller's to ignore.
function _M.cleanup(l, script, ...)
    local a = l.adapter
    if a then
        return client.eval(a, script, ...)
    end
    return _M.script(l, script, ...)
end

return _M
