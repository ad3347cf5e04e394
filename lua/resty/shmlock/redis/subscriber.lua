-- resty.shmlock.redis.subscriber (internal): a connection subscribed to
-- one key's release channel while a host's Redis waiter waits
-- (resty.shmlock.lock.wait), so that a release (the PUBLISH of the
-- release scripts) wakes it at once.
--
-- It needs a connect function (resty.shmlock.redis.link): a subscribed
-- connection can carry nothing else, so it is never the caller's client.
-- Outside nginx one connection per link and process is kept between
-- waits (unsubscribed in between); inside nginx one per wait, from the
-- keepalive pool and back to it (cosockets belong to one request or
-- timer).  Each read's socket timeout is set: the time left to listen.
--
-- What it trusts: a reply that is not a message of the channel, or a
-- subscription confirmation, means the stream is not what we think (a
-- read that timed out in the middle of a reply loses its start): the
-- connection is closed, the wait subscribes again on a new one.  A
-- message lost that way costs the waiter one backstop poll at most.

local clock = require "resty.shmlock.internal.clock"
local conn = require "resty.shmlock.cache.fleet_conn"

local type = type
local pcall = pcall
local tostring = tostring
local now = clock.now

local _M = {}

local TIMEOUT = "redis connection error: timeout"

-- lua-redis reads a reply only as the answer to a command it sends: a
-- command that sends nothing reads the next reply (a message)
local reader

local function read(a)
    if a.kind ~= "raises" then
        return conn.call(a, "read_reply")
    end
    if not reader then
        local ok, mod = pcall(require, "redis")
        if not (ok and type(mod) == "table" and mod.command) then
            return false, "redis connection error: lua-redis has no "
                          .. "command maker", false
        end
        reader = mod.command("READ", { request = function() end })
    end
    local ok, res = pcall(reader, a.redis)
    if ok then
        return true, res
    end
    res = tostring(res)
    if res:find("timeout$") then
        return false, TIMEOUT, false
    end
    return false, "redis connection error: " .. res, false
end

-- the state conn.get and conn.put keep the subscriber's connection in
local function state(l)
    local s = l.sub
    if not s then
        s = { connect = l.connect, timeout = l.timeout, client = nil,
              client_pid = nil }
        l.sub = s
    end
    return s
end

local function broken(s, err)
    conn.put(s.state, s.a, true)
    return nil, err
end

-- syntax: s, err = subscriber.subscribe(l, channel)
-- A connection subscribed to channel (confirmed by Redis: a release from
-- now on reaches it), or nil and why.
function _M.subscribe(l, channel)
    local st = state(l)
    local a, err = conn.get(st)
    if not a then
        return nil, err
    end
    local s = { state = st, a = a, channel = channel }
    local ok, res = conn.call(a, "subscribe", channel)
    if not ok then
        return broken(s, res)
    end
    if type(res) ~= "table" or res[1] ~= "subscribe" or res[2] ~= channel
    then
        return broken(s, "redis connection error: unexpected reply to "
                         .. "SUBSCRIBE")
    end
    return s
end

-- syntax: woken, err = subscriber.listen(s, seconds)
-- true: the channel had a message (a release); false: none within
-- seconds; nil, err: the connection broke (closed; subscribe anew).
function _M.listen(s, seconds)
    local a = s.a
    local deadline = now() + seconds
    while true do
        local left = deadline - now()
        if left <= 0 then
            return false
        end
        conn.timeout(a, left)
        local ok, res = read(a)
        if not ok then
            if res == TIMEOUT then
                return false
            end
            return broken(s, res)
        end
        if type(res) ~= "table" then
            return broken(s, "redis connection error: unexpected reply "
                             .. "while subscribed")
        end
        local kind = res[1]
        if kind == "message" and res[2] == s.channel then
            return true
        end
        if kind ~= "subscribe" and kind ~= "unsubscribe" then
            return broken(s, "redis connection error: unexpected reply "
                             .. "while subscribed")
        end
    end
end

-- syntax: subscriber.close(s)
-- Unsubscribes (the replies still on the way are read and dropped, at most
-- the link's timeout), and keeps the connection for the next wait (back
-- to the pool inside nginx), or closes it when that fails.
function _M.close(s)
    local a = s.a
    conn.timeout(a, s.state.timeout)
    local ok, res = conn.call(a, "unsubscribe", s.channel)
    local deadline = now() + s.state.timeout
    while ok do
        if type(res) == "table" and res[1] == "unsubscribe" then
            if res[3] == 0 then
                conn.put(s.state, a)
                return
            end
        elseif type(res) ~= "table" or res[1] ~= "message" then
            break
        end
        if now() >= deadline then
            break
        end
        ok, res = read(a)
    end
    conn.put(s.state, a, true)
end

return _M
