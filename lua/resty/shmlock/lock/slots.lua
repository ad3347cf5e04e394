-- resty.shmlock.lock.slots (internal): the lock slots' primitives of this
-- interpreter's binding (resty.shmlock.internal.core): the FFI's
-- (resty.shmlock.lock.slots.ffi, whose interface this is) or the C
-- module's (resty.shmlock.lock.slots.capi).

if require("resty.shmlock.internal.core").ffi then
    return require "resty.shmlock.lock.slots.ffi"
end
return require "resty.shmlock.lock.slots.capi"
