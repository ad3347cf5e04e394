-- resty.shmlock.lock.slots (internal): the lock slots' primitives of this
-- interpreter's binding (resty.shmlock.internal.core): the FFI's
-- (resty.shmlock.lock.slots.ffi, whose interface this is) or the C
-- module's (resty.shmlock.lock.slots.capi).  Both get is_head here.

local slots
if require("resty.shmlock.internal.core").ffi then
    slots = require "resty.shmlock.lock.slots.ffi"
else
    slots = require "resty.shmlock.lock.slots.capi"
end

-- A holder group's head (src/group.h) has the top 16 bits of its owner
-- set: its pid field is at least this, which no process's is (Linux pids
-- are below 2^22).
local HEAD_PID = 0xffff0000

-- syntax: head = slots.is_head(pid)
-- Whether a ticket's pid (slots.owner, slots.state) is a head's.
function slots.is_head(pid)
    return pid >= HEAD_PID
end

return slots
