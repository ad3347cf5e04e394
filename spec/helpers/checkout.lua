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
    assert(f:write(data))
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

-- The require roots, absolute, for what busted does not start: the
-- library's modules (lua/), and the spec helpers (spec/: "helpers.x")
-- with the process harness (scripts/lua/: "harness.proc"), as .busted's
-- lpath sets them for the specs.
local LIB = _M.ROOT .. "/lua/?.lua;" .. _M.ROOT .. "/lua/?/init.lua"
_M.PATH = LIB .. ";" .. _M.ROOT .. "/spec/?.lua;" .. _M.ROOT
          .. "/scripts/lua/?.lua"

-- LUA_PATH for a luajit process a spec starts: this checkout's modules
-- only, as a user's program finds them, then the default path (";;")
_M.LUA_PATH = LIB .. ";;"

-- syntax: checkout.use_path()
-- Puts the roots of PATH before package.path: for a program that runs
-- outside busted (spec/soak.lua) or a fresh Lua VM (helpers.vm).
function _M.use_path()
    package.path = _M.PATH .. ";" .. package.path
end

return _M
