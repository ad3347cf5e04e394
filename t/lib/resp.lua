-- A minimal Redis client over nginx cosockets for the t/ tests, answering
-- as lua-resty-redis does (which Debian does not package): a reply; false,
-- msg for an error reply; nil, msg for a connection error; ngx.null for a
-- null reply.  Only what resty.shmlock.redis calls: eval, evalsha, and a
-- few commands the tests use.
--
--     local resp = require "resp"
--     local red = assert(resp.connect("127.0.0.1", port, 1000))
--     red:evalsha(sha, 2, k1, k2, a1, a2, a3)
--     red:set_keepalive()

local tcp = ngx.socket.tcp
local concat = table.concat
local select = select
local tostring = tostring
local tonumber = tonumber
local null = ngx.null

local _M = {}
local mt = { __index = _M }

function _M.connect(host, port, timeout_ms)
    local sock = tcp()
    sock:settimeout(timeout_ms or 1000)
    local ok, err = sock:connect(host, port)
    if not ok then
        return nil, err
    end
    return setmetatable({ sock = sock }, mt)
end

local function read_reply(sock)
    local line, err = sock:receive("*l")
    if not line then
        return nil, err
    end
    local kind, rest = line:sub(1, 1), line:sub(2)
    if kind == "+" then
        return rest
    elseif kind == "-" then
        return false, rest
    elseif kind == ":" then
        return tonumber(rest)
    elseif kind == "$" then
        local n = tonumber(rest)
        if n < 0 then
            return null
        end
        local data
        data, err = sock:receive(n + 2)
        if not data then
            return nil, err
        end
        return data:sub(1, n)
    elseif kind == "*" then
        local n = tonumber(rest)
        if n < 0 then
            return null
        end
        local t = {}
        for i = 1, n do
            local v, e = read_reply(sock)
            if v == nil then
                return nil, e
            end
            t[i] = v
        end
        return t
    end
    return nil, "bad reply: " .. line
end

local function command(self, ...)
    local n = select("#", ...)
    local parts = { "*" .. n .. "\r\n" }
    for i = 1, n do
        local a = tostring((select(i, ...)))
        parts[#parts + 1] = "$" .. #a .. "\r\n" .. a .. "\r\n"
    end
    local ok, err = self.sock:send(concat(parts))
    if not ok then
        return nil, err
    end
    return read_reply(self.sock)
end

function _M.eval(self, ...)
    return command(self, "EVAL", ...)
end

function _M.evalsha(self, ...)
    return command(self, "EVALSHA", ...)
end

function _M.incr(self, key)
    return command(self, "INCR", key)
end

function _M.pttl(self, key)
    return command(self, "PTTL", key)
end

function _M.set_keepalive(self)
    return self.sock:setkeepalive(10000, 100)
end

return _M
