-- helpers.redis_resty_mock: a lua-resty-redis stand-in outside nginx.
--
-- lua-resty-redis cannot run outside nginx (cosockets), so the specs drive
-- the lock's lua-resty-redis convention through this wrapper around a
-- lua-redis client.  It answers the way lua-resty-redis's _read_reply does:
-- a reply, or `false, msg` for an error reply (msg without "redis error: "),
-- `nil, msg` for a connection error ("closed", "timeout"), and `null` (the
-- spec's stand-in for ngx.null) for a null reply.  Like a lua-resty-redis
-- object it has a `_sock` field and any command as a method.

local _M = {}

local mt = {}

mt.__index = function(_, cmd)
    return function(self, ...)
        local inner = rawget(self, "_sock")
        local ok, res = pcall(inner[cmd], inner, ...)
        if not ok then
            res = tostring(res):gsub("^[^%s]-:%d+: ", "", 1)
            local reply_err = res:match("^redis error: (.*)$")
            if reply_err then
                return false, reply_err
            end
            return nil, res:match("^connection error: (.*)$") or res
        end
        if res == nil then
            return rawget(self, "_null")
        end
        return res
    end
end

function _M.new(lua_redis_client, null)
    return setmetatable({ _sock = lua_redis_client, _null = null }, mt)
end

return _M
