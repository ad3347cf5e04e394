-- resty.shmlock.internal.finalized (internal): a table whose collection
-- runs a function, under every PUC Lua: the handles of the C module
-- binding (a lock's, a shared hold's, a semaphore's permit) release what
-- a collected object held through it.
--
--     local finalized = require "resty.shmlock.internal.finalized"
--     local t = finalized({ ... }, function(t) ... end)
--
-- Lua 5.2 and later finalize tables: the function is the table's __gc
-- (one metatable per function, made once).  Lua 5.1 finalizes userdata
-- only: the table keeps a userdata proxy (field `gc`) whose __gc calls the
-- function with the table.  The function runs once, when the table (or,
-- under 5.1, its proxy, which only the table references) is collected.

local setmetatable = setmetatable
local getmetatable = getmetatable
local newproxy = rawget(_G, "newproxy")     -- Lua 5.1 only
local FINALIZES_TABLES = _VERSION ~= "Lua 5.1"

local metatables = setmetatable({}, { __mode = "k" })    -- fn -> { __gc }

-- syntax: t = finalized(t, fn)
return function(t, fn)
    if FINALIZES_TABLES then
        local mt = metatables[fn]
        if not mt then
            mt = { __gc = fn }
            metatables[fn] = mt
        end
        return setmetatable(t, mt)
    end
    local proxy = newproxy(true)
    getmetatable(proxy).__gc = function()
        fn(t)
    end
    t.gc = proxy
    return t
end
