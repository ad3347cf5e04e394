-- resty.shmlock.internal.nginx (internal): whether this Lua VM runs inside
-- nginx, asked one way by every module, and what nginx lets a light
-- thread do there.
--
-- Each module asks when it loads (a module loaded inside nginx stays an
-- nginx module), so that a test can load one with a stand-in ngx.

local type = type
local rawget = rawget

local _M = {}

-- phases where ngx.sleep may yield
_M.YIELDABLE = {
    rewrite = true, server_rewrite = true, access = true, content = true,
    timer = true, ssl_cert = true, ssl_session_fetch = true,
    ssl_client_hello = true, preread = true,
}

-- syntax: ngx = nginx.api()
-- The global ngx when this VM runs inside nginx (the http or stream Lua
-- module: ngx.get_phase is there), else nil.
function _M.api()
    local ngx = rawget(_G, "ngx")
    if type(ngx) == "table" and type(ngx.get_phase) == "function" then
        return ngx
    end
    return nil
end

return _M
