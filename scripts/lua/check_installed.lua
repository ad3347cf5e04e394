-- Checks an installed tree from outside the checkout (scripts/test-install.sh
-- and scripts/test-luarocks.sh run it after `luarocks path`):
--
--     TREE=<tree> ROOT=<checkout> luajit scripts/lua/check_installed.lua
--
-- every module the checkout has resolves inside TREE and loads, so does
-- libshmlock.so, and a zone, a lock and a cache work through them.  Prints
-- "<n> modules and libshmlock.so from <tree>"; raises on any failure.

local tree, root = os.getenv("TREE"), os.getenv("ROOT")
assert(tree and root, "TREE and ROOT must be set")

local function inside(path, dir)
    return path and path:sub(1, #dir + 1) == dir .. "/"
end

local modules = {}
local find = io.popen("cd '" .. root .. "/lua' && find resty -name '*.lua'")
for f in find:lines() do
    modules[#modules + 1] = f:gsub("%.lua$", ""):gsub("/", ".")
end
find:close()
assert(#modules >= 4, "no modules found in the checkout")

for _, name in ipairs(modules) do
    local path = package.searchpath(name, package.path)
    assert(inside(path, tree), name .. " is not in the tree: " .. tostring(path))
end
local lib = package.searchpath("libshmlock", package.cpath)
assert(inside(lib, tree), "libshmlock.so is not in the tree: " .. tostring(lib))
-- the C module's side loads only under PUC Lua (docs/every-lua.md)
local PUC_ONLY = { ["resty.shmlock.internal.core.capi"] = true,
                   ["resty.shmlock.shdict.capi"] = true }
for _, name in ipairs(modules) do
    if not PUC_ONLY[name] then
        require(name)
    end
end

local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local cache = require "resty.shmlock.cache"
local dict = assert(shdict.open("install_check", { size = "64k" }))
assert(dict:set("k", "v") and dict:get("k") == "v")
local lock = assert(resty_lock:new("install_check"))
assert(lock:lock("job") == 0 and lock:unlock() == 1)
local c = assert(cache.new("users", { dict = dict }))
assert(c:get("42", nil, function(id) return "user " .. id end, "42")
       == "user 42")
assert(dict:verify())
assert(shdict.destroy("install_check"))
print(#modules .. " modules and libshmlock.so from " .. tree)
