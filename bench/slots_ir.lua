-- Instructions per operation, for callgrind (bench/README.md, "Lock slots:
-- instructions per operation"): n operations of one kind through the
-- public Lua API, or through the slot ABI over the FFI, after 2000 that
-- let the traces settle.  From the checkout root:
--
--     SHMLOCK_DIR=$(mktemp -d) valgrind --tool=callgrind \
--         --callgrind-out-file=/dev/null luajit bench/slots_ir.lua WHAT N
--
-- and (Ir(N) - Ir(0)) / N is the figure.  WHAT: lock_pair (lock+unlock of
-- one reused object), new_lock_pair (new+lock+unlock), trylock_held (a
-- failed trylock on a held key), get, set, slot_pair
-- (shmlock_slot_acquire+release), slot_busy (an acquire refused: held).

package.path = "lua/?.lua;" .. package.path

local ffi = require "ffi"
local C = require "resty.shmlock.lib"
local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"

local what, n = arg[1], tonumber(arg[2])
local d = assert(shdict.open("slots_ir", { size = "1m" }))
local zone = d._zone
local ops = {}

function ops.slot_pair(k)
    local t = ffi.new("shmlock_ticket_t")
    for _ = 1, k do
        C.shmlock_slot_acquire(zone, "lock:key", 8, 42, 5000, 0, t)
        C.shmlock_slot_release(zone, t)
    end
end

function ops.slot_busy(k)
    local t, u = ffi.new("shmlock_ticket_t"), ffi.new("shmlock_ticket_t")
    C.shmlock_slot_acquire(zone, "busy:key", 8, 41, 0, 0, u)
    for _ = 1, k do
        C.shmlock_slot_acquire(zone, "busy:key", 8, 42, 5000, 0, t)
    end
    C.shmlock_slot_release(zone, u)
end

local lock = resty_lock:new(d)
function ops.lock_pair(k)
    for _ = 1, k do
        lock:lock("lock:key")
        lock:unlock()
    end
end

function ops.new_lock_pair(k)
    for _ = 1, k do
        local l = resty_lock:new(d)
        l:lock("lock:key")
        l:unlock()
    end
end

function ops.trylock_held(k)
    local h = resty_lock:new(d)
    h:lock("held:key")
    local l = resty_lock:new(d, { timeout = 0 })
    for _ = 1, k do
        l:lock("held:key")
    end
    h:unlock()
end

function ops.get(k)
    d:set("g", "value")
    for _ = 1, k do
        d:get("g")
    end
end

function ops.set(k)
    for _ = 1, k do
        d:set("s", "value")
    end
end

assert(ops[what], "unknown operation: " .. tostring(what))
ops[what](2000)
ops[what](n)
assert(shdict.destroy("slots_ir"))
