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
-- processes, users and groups, `bit`), listed in core/ffi.lua.  The binding
-- is chosen here, once: what differs between the two is asked of them by
-- what it does (core.part(what): the binding's own module for the lock
-- slots, the dictionary, the semaphore's permit, the Lua lock object's
-- handles and shared holds, ngx.shared locks, nil where it has none;
-- core.lock_object, core.dead_word, core.methods_zone).  No
-- module outside internal/ names a module of one binding; only the cache's
-- LuaJIT-only pieces (lua-resty-lrucache, string.buffer, a struct for the
-- L1 hit's counters) are still picked by core.ffi, in cache/l1.lua,
-- cache/codec.lua and cache/stats.lua.

local has_ffi = pcall(require, "ffi")

if has_ffi then
    return require "resty.shmlock.internal.core.ffi"
end
return require "resty.shmlock.internal.core.capi"
