-- resty.shmlock.internal.codes (internal): the C core's numbers that the
-- Lua modules use, named as in src/shmlock.h without the SHMLOCK_ prefix
-- and read from the core through the binding (lib.lua's cdef, which
-- spec/00-abi_spec.lua pins against the header, or the C module's table),
-- so no number is written twice.  Modules copy them into locals when they load, so the hot paths
-- compare against constants.  Messages for the status codes come from the
-- core itself (resty.shmlock.errors).

local core = require "resty.shmlock.internal.core"

local NAMES = {
    -- status codes
    "OK", "NOT_FOUND", "EXISTS", "CHANGED", "SYSTEM", "CORRUPT", "AGAIN",
    "TIMEOUT", "INCOMPATIBLE", "NOT_OWNER", "UNSAFE_MODE", "FOREIGN_NS",
    "FOREIGN_TIME", "BUSY", "NO_MEMORY", "ASK",
    -- value types (Lua's type tags, as ngx.shared.DICT's)
    "TNIL", "TBOOLEAN", "TNUMBER", "TSTRING", "TLIST",
    -- store operations (a bit set)
    "OP_SET", "OP_ADD", "OP_REPLACE", "OP_SAFE",
    -- the ends of a list
    "LEFT", "RIGHT",
    -- limits: cas keeps the entry's expiry; bytes of a key
    "KEEP_TTL", "KEY_MAX", "MIN_SIZE", "GEN_WORDS", "LAYOUT",
    -- holder groups: their kinds, the holders of a key at most
    "SEMAPHORE", "SHARED", "GROUP_MAX",
    -- the kinds of a listed lock slot (shmlock_slot_scan)
    "SLOT_LOCK", "SLOT_SHARED", "SLOT_PERMIT", "SLOT_SEMAPHORE",
    -- a lock's look (shmlock_lock_look, shmlock_lock_wait)
    "LOOK_CHECK", "LOOK_ASK", "LOOK_HERE", "LOOK_SHARED",
}

-- Run once, when the module loads: not worth a trace.  Under the FFI a
-- trace of this loop would abort at each constant's first lookup in the
-- library's namespace, and whether the loop gets hot at all depends on
-- which loops share its hot counter (the process's memory layout: it did
-- under AddressSanitizer): no compiling here, so nothing to abort.
if jit then
    jit.off(true, true)
end

local codes = {}
for _, name in ipairs(NAMES) do
    codes[name] = core.constant(name)
end

return codes
