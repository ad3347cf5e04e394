-- resty.shmlock.internal.locate (internal): finding and loading a file of
-- the C core, for both bindings (resty.shmlock.lib: libshmlock.so for the
-- FFI; resty.shmlock.internal.core.capi: the C module).  The places, in
-- order: the path in an environment variable; the file in the checkout
-- this module belongs to (after `make`); package.cpath (after
-- `luarocks make`).

local getenv = os.getenv
local io_open = io.open
local concat = table.concat
local tostring = tostring

local _M = {}

local function exists(path)
    local f = io_open(path, "rb")
    if f then
        f:close()
        return true
    end
    return false
end

-- package.searchpath, which Lua 5.1 lacks
local function searchpath(name, path)
    local file = name:gsub("%.", "/")
    local tried = {}
    for template in path:gmatch("[^;]+") do
        local candidate = template:gsub("%?", file)
        if exists(candidate) then
            return candidate
        end
        tried[#tried + 1] = "\n\tno file '" .. candidate .. "'"
    end
    return nil, concat(tried)
end

-- the checkout's root ("./" for a relative path), or nil when this file
-- is not in one (installed)
local function checkout_root()
    local src = debug.getinfo(1, "S").source
    if src:sub(1, 1) ~= "@" then
        return nil
    end
    local root = src:sub(2):match(
        "^(.-)lua/resty/shmlock/internal/locate%.lua$")
    if root == "" then
        root = "./"
    end
    return root
end

-- syntax: loaded, tried = locate.load(env, file, name, open)
-- open(path) for each place in turn, until one answers: $env, the
-- checkout's file (a path from its root), then the module name `name` on
-- package.cpath.  open answers what it loaded, or nil and why.  The first
-- thing loaded; or nil and every place tried, with why ("; " between).
function _M.load(env, file, name, open)
    local tried = {}

    local function try(path)
        local loaded, err = open(path)
        if loaded then
            return loaded
        end
        tried[#tried + 1] = path .. " (" .. tostring(err) .. ")"
    end

    local root = checkout_root()
    local candidates = { getenv(env), root and root .. file }
    for i = 1, 2 do
        local path = candidates[i]
        if path and path ~= "" then
            if exists(path) then
                local loaded = try(path)
                if loaded then
                    return loaded
                end
            else
                tried[#tried + 1] = path .. " (absent)"
            end
        end
    end

    local path, err = searchpath(name, package.cpath)
    if path then
        local loaded = try(path)
        if loaded then
            return loaded
        end
    else
        tried[#tried + 1] = "package.cpath:" .. err
    end
    return nil, concat(tried, "; ")
end

return _M
