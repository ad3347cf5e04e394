-- resty.shmlock.internal.core (internal): the one way into the C core.
--
-- Two implementations answer one interface (docs/every-lua.md):
--
--   * LuaJIT: the FFI (resty.shmlock.internal.core.ffi over
--     resty.shmlock.lib): core.ffi is true and core.C is the library's FFI
--     namespace, for the hot paths (dict get/set, the lock) that call it
--     directly, with nothing in between;
--   * PUC Lua 5.1 to 5.4: the C module resty.shmlock.core
--     (resty.shmlock.internal.core.capi): core.ffi is false, core.C nil.
--
-- Both give the functions of the interface (zones, messages, the clock,
-- processes, users and groups, `bit`), listed in core/ffi.lua.  Modules
-- that need more than these and the hot paths define their code per
-- implementation (resty.shmlock.shdict and resty.shmlock.shdict.capi).

local has_ffi = pcall(require, "ffi")

if has_ffi then
    return require "resty.shmlock.internal.core.ffi"
end
return require "resty.shmlock.internal.core.capi"
