-- resty.shmlock.errors: the core's status codes (src/shmlock.h) mapped to
-- the messages the Lua modules return, read once from shmlock_strerror:
-- errors[C.SHMLOCK_NOT_FOUND] == "not found".  The codes themselves are
-- read by name from the library: C.SHMLOCK_OK, C.SHMLOCK_NOT_FOUND, ...
-- (resty.shmlock.internal.codes, core.constant).

local core = require "resty.shmlock.internal.core"

-- every status but SHMLOCK_OK, as src/shmlock.h lists them
-- (spec/00-abi_spec.lua checks that none is missing)
local STATUSES = {
    "NOT_FOUND", "EXISTS", "NO_MEMORY", "NOT_A_NUMBER", "CHANGED",
    "BAD_NAME", "BAD_SIZE", "INCOMPATIBLE", "SYSTEM", "CORRUPT", "BUSY",
    "AGAIN", "TIMEOUT", "VALUE_TOO_LARGE", "BAD_KEY", "BAD_VALUE",
    "BAD_SHARDS", "DESTROYED", "NOT_OWNER", "UNSAFE_MODE", "FOREIGN_NS",
    "DIR_BUSY", "BAD_MODE", "NOT_A_LIST", "FOREIGN_TIME", "REMOVED", "ASK",
}

-- (run once, not compiled: see resty.shmlock.internal.codes)
if jit then
    jit.off(true, true)
end

local errors = {}
for _, name in ipairs(STATUSES) do
    local rc = core.constant(name)
    errors[rc] = core.strerror(rc)
end

return errors
