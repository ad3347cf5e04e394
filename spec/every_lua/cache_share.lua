-- spec/every_lua/cache_share.lua DIR write NAME | DIR read NAME...: one
-- process of spec/60's cache exchange.  `write` stores this file's values
-- under keys prefixed by NAME (the interpreter) in cache "share" of zone
-- el_cshare; `read` gets each NAME's values from L2 (the loader must not
-- run) and compares them with its own copy, tables included.  Prints "ok"
-- or raises.
local dir, mode = arg[1], arg[2]
local shdict = require "resty.shmlock.shdict"
local cache = require "resty.shmlock.cache"

local VALUES = {
    str = "a\0string", num = 12345, float = -1.25, huge = 2 ^ 60,
    yes = true, no = false,
    list = { 1, 2, 3, "four", 5.5 },
    map = { a = 1, b = { c = { d = "deep" } }, [10] = "ten", [0] = "zero",
            [true] = "yes", [2.5] = "key" },
    mixed = { "x", "y", z = { "nested", { } }, long = ("L"):rep(9000) },
    empty = {},
}

local function same(a, b, path)
    if type(a) ~= "table" or type(b) ~= "table" then
        if a ~= b then
            error(path .. ": expected " .. tostring(a) .. ", got "
                  .. tostring(b), 0)
        end
        return
    end
    for k, v in pairs(a) do
        same(v, b[k], path .. "." .. tostring(k))
    end
    for k in pairs(b) do
        if a[k] == nil then
            error(path .. ": unexpected key " .. tostring(k), 0)
        end
    end
end

local zone = assert(shdict.open("el_cshare", { dir = dir, size = "1m" }))
local c = assert(cache.new("share", { dict = zone, ttl = 0, l1_size = 0 }))
local function never() error("the loader must not run") end

if mode == "write" then
    local name = arg[3]
    for k, v in pairs(VALUES) do
        assert(c:set(name .. ":" .. k, v))
    end
    assert(c:set(name .. ":nil", nil))
else
    for i = 3, #arg do
        local name = arg[i]
        for k, v in pairs(VALUES) do
            local got, err, level = c:get(name .. ":" .. k, nil, never)
            assert(err == nil and level == 2, name .. ":" .. k .. ": "
                   .. tostring(err) .. " " .. tostring(level))
            same(v, got, name .. ":" .. k)
        end
        local got, err, level = c:get(name .. ":nil", nil, never)
        assert(got == nil and err == nil and level == 2, name .. ":nil")
    end
end
print("ok")
