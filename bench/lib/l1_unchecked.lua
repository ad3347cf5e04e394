-- l1_unchecked: the reference of the cache's L1 target (sections 8 and
-- 10): an L1 hit without coherence, as the cache's get() was before the
-- generation words (0.1.0): a method of an object, the same argument
-- checks and an lrucache get of the same module the cache loaded (outside
-- nginx it needs the cache's ngx.now shim), and no look at the key's
-- generation word.  Called as the cache's get is, old:get(...): a loop
-- that calls a plain function instead lets LuaJIT hoist the object's
-- lookups out of the loop, which a loop of c:get() (an object held in a
-- table upvalue) does not, and each request's one call never does.
--
--   local old = l1_unchecked.new(c, n)        -- c: a resty.shmlock.cache
--   old.lru:set(key, value, ttl)
--   old:get(key, nil, loader)                 -- value, nil, 1

local _M = {}

local NIL = {}

-- syntax: old = l1_unchecked.new(c, n)
-- An unchecked L1 of n items over c's lrucache module.
function _M.new(c, n)
    local lrucache = getmetatable(c.lru).__index
    local methods = {}
    local old_mt = { __index = methods }

    -- (a vararg function, as the cache's get: the loader's arguments)
    function methods.get(self, key, opts, loader_fn, ...) -- luacheck: ignore 212
        if getmetatable(self) ~= old_mt then
            error("bad cache object (use c:method(), not c.method())", 2)
        end
        if type(key) ~= "string" then
            error("key must be a string", 2)
        end
        if type(loader_fn) ~= "function" then
            error("loader must be a function", 2)
        end
        local l1 = self.lru
        if l1 then
            local value = l1:get(key)
            if value ~= nil then
                if value == NIL then
                    return nil, nil, 1
                end
                return value, nil, 1
            end
        end
        error("not an L1 hit")
    end

    return setmetatable({ lru = lrucache.new(n) }, old_mt)
end

return _M
