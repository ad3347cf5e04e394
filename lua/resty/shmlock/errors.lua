-- resty.shmlock.errors: the core's status codes (src/shmlock.h) mapped to
-- the messages the Lua modules return, read once from shmlock_strerror.

local ffi = require "ffi"
local C = require "resty.shmlock.lib"

local UNKNOWN = "unknown error"

local errors = {}
local rc = 1
while true do
    local msg = ffi.string(C.shmlock_strerror(rc))
    if msg == UNKNOWN then
        break
    end
    errors[rc] = msg
    rc = rc + 1
end

return errors
