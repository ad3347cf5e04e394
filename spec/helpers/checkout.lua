-- helpers.checkout: what the specs need to know about the checkout they
-- run from, and small shell and file helpers shared by them.

local _M = {}

function _M.pack(...)
    return { n = select("#", ...), ... }
end

function _M.sh(cmd)
    local p = assert(io.popen(cmd))
    local out = p:read("*a")
    p:close()
    return out
end

function _M.trim(s)
    return (s:gsub("^%s+", ""):gsub("%s+$", ""))
end

function _M.read_file(path)
    local f = io.open(path, "rb")
    if not f then
        return nil
    end
    local s = f:read("*a")
    f:close()
    return s
end

function _M.write_file(path, data)
    local f = assert(io.open(path, "wb"))
    f:write(data)
    f:close()
end

-- the root of the checkout, as an absolute path (this file is in
-- <root>/spec/helpers/)
do
    local src = debug.getinfo(1, "S").source:sub(2)
    local dir = src:match("^(.-)/?spec/helpers/[^/]+$") or ""
    if dir:sub(1, 1) ~= "/" then
        local cwd = _M.trim(_M.sh("pwd"))
        dir = dir == "" and cwd or cwd .. "/" .. dir
    end
    _M.ROOT = dir
end

-- a package.path for child processes that finds this checkout's modules
_M.LUA_PATH = _M.ROOT .. "/lua/?.lua;" .. _M.ROOT .. "/lua/?/init.lua;;"

return _M
