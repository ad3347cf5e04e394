-- bench/puc_pair.lua: the uncontended pair under PUC Lua, for section 1
-- (bench/uncontended.lua runs it with lua5.4 and lua5.1, in the same run
-- as its flock(2) row).  usage: lua5.x puc_pair.lua ZONE_NAME REPS
-- Prints one line: ns per lock+unlock of a reused object, each of REPS
-- repetitions (about 0.25 s each), the key in a variable.

local resty_lock = require "resty.shmlock"
local core = require "resty.shmlock.internal.core"

local name, reps = arg[1], tonumber(arg[2]) or 7
local lock = assert(resty_lock:new(name))
local keys = { "bench-uncontended-puc" }

local function run(n)
    for _ = 1, n do
        local key = keys[1]
        lock:lock(key)
        lock:unlock()
    end
end

-- calibration: about 0.25 s a repetition
local n = 1000
while true do
    local t0 = core.now_us()
    run(n)
    local t = core.now_us() - t0
    if t >= 25000 or n >= 1e8 then
        n = math.max(1, math.floor(n * 250000 / t))
        break
    end
    n = n * 4
end
local out = {}
for i = 1, reps do
    local t0 = core.now_us()
    run(n)
    out[i] = string.format("%.2f", (core.now_us() - t0) * 1000 / n)
end
io.write(table.concat(out, " "), "\n")
