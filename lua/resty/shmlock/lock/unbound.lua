-- resty.shmlock.lock.unbound (internal): resty.shmlock where the lock has
-- no binding yet: PUC Lua 5.1 to 5.4 (the C module binds the dictionary;
-- the lock's calls follow, docs/every-lua.md).  The module loads, so that
-- code requiring it (resty.shmlock.cache, a user's spec) loads too; new()
-- answers nil and why, as for any lock that cannot be made.

local version = require "resty.shmlock.version"

local _M = { _VERSION = version }

local WHY = "resty.shmlock: the lock is not available under " .. _VERSION
            .. " yet (LuaJIT only for now; the dictionary, lists and "
            .. "stats work here: docs/every-lua.md)"

_M.UNBOUND = WHY

-- syntax: lock, err = resty_lock:new(dict_name, opts?)
function _M.new()
    return nil, WHY
end

return _M
