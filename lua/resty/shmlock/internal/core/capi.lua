-- resty.shmlock.internal.core.capi (internal): the binding's interface
-- (see core/ffi.lua, function for function) over the C module
-- resty.shmlock.core (src/lua/), for PUC Lua 5.1 to 5.4.
--
-- The module is looked for (resty.shmlock.internal.locate), in order:
-- $SHMLOCK_CORE (a path to core.so); the checkout this file belongs to,
-- build/lua5.X/resty/shmlock/core.so for this Lua (after `make`); then
-- package.cpath as `resty.shmlock.core` (after `luarocks make`).  A failure names what is missing and how to get
-- it.  The module's own functions (dict_*, the zone's) are those of
-- src/lua/*.c; resty.shmlock.shdict.capi calls them.

local locate = require "resty.shmlock.internal.locate"

local VERSION = _VERSION:match("%d+%.%d+") or "5.1"
local SYMBOL = "luaopen_resty_shmlock_core"

-- the C module at path, opened, or nil and why
local function open(path)
    local open_mod, err = package.loadlib(path, SYMBOL)
    if open_mod then
        return open_mod()
    end
    return nil, err
end

local function load()
    local mod, tried = locate.load(
        "SHMLOCK_CORE", "build/lua" .. VERSION .. "/resty/shmlock/core.so",
        "resty.shmlock.core", open)
    if mod then
        return mod
    end
    error("resty.shmlock: no binding for " .. _VERSION .. ": the FFI binding "
          .. "needs LuaJIT, and the C module resty.shmlock.core for Lua "
          .. VERSION .. " was not found.  In a checkout: `make` (it needs "
          .. "Lua " .. VERSION .. "'s headers: apt-get install liblua"
          .. VERSION .. (VERSION == "5.1" and "-0" or "") .. "-dev), with "
          .. "LUA_PATH='<checkout>/lua/?.lua;;'; or install the rock for "
          .. "this Lua: `luarocks --lua-version=" .. VERSION .. " make` (in "
          .. "the checkout) or `luarocks --lua-version=" .. VERSION
          .. " install lua-resty-shmlock`, with this Lua's paths: `eval "
          .. "\"$(luarocks --lua-version=" .. VERSION .. " path)\"` (a "
          .. "bare `luarocks path` gives those of LuaRocks' default Lua); "
          .. "tried: " .. tried, 0)
end

local mod = load()
local K = mod.K

local _M = {
    ffi = false,
    name = "capi",
    lua_version = mod.lua_version,
    mod = mod,               -- the C module itself: dict_* and the rest
    bit = {
        tobit = mod.bit_tobit, bnot = mod.bit_bnot, band = mod.bit_band,
        bor = mod.bit_bor, bxor = mod.bit_bxor, lshift = mod.bit_lshift,
        rshift = mod.bit_rshift, arshift = mod.bit_arshift,
    },
}

function _M.constant(name)
    return K[name]
end

-- the interface of core/ffi.lua, one to one
for _, name in ipairs {
    "strerror", "errno", "sys_strerror", "recoveries", "now_ms", "now_us",
    "hash", "self_pid", "proc_start", "proc_alive", "zone_open",
    "zone_destroy", "zone_name_ok", "zone_dead", "zone_shards",
    "zone_gen_add", "wait_count", "getgrnam", "getgrgid", "getpwuid",
    "sleep", "setenv", "pack_double", "unpack_double", "token_block",
    "owner_ids",
} do
    _M[name] = mod[name]
end

-- core.env.serial: as core/ffi.lua's, the changes made through setenv
_M.env = { serial = 0 }
local c_setenv = mod.setenv
function _M.setenv(name, value)
    local ok, errno = c_setenv(name, value)
    if ok then
        _M.env.serial = _M.env.serial + 1
    end
    return ok, errno
end


-- What differs between the bindings, as core/ffi.lua's.
local PARTS = {
    slots = "resty.shmlock.lock.slots.capi",
    dict = "resty.shmlock.shdict.capi",         -- the dictionary's module
    permit = "resty.shmlock.semaphore.permit.capi",
    -- (a lock object is the C module's own, mod.lock_object: no handles,
    -- no shared holds' module; ngx.shared dicts exist only in nginx)
}

function _M.part(what)
    local name = PARTS[what]
    return name and require(name) or nil
end

-- the C module's lock objects (src/lua/lock_object.c)
_M.lock_object = mod.lock_object
_M.lock_class = mod.lock_class

-- a zone's dead word: under PUC Lua a call of the C module reads it
function _M.dead_word(zone)
    return zone
end
_M.word_dead = mod.zone_dead


function _M.methods_zone(zone)
    return zone
end

return _M
