-- resty.shmlock.lock.slots (internal): the lock slots' primitives of this
-- interpreter's binding (resty.shmlock.internal.core's part "slots"): the
-- FFI's (resty.shmlock.lock.slots.ffi, whose interface this is) or the C
-- module's (resty.shmlock.lock.slots.capi).

return require("resty.shmlock.internal.core").part("slots")
