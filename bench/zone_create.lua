-- The cost of making a zone file (issue 30): before it publishes a new
-- file, the creator reads every process's /proc/PID/maps for removed files
-- of the name that someone still maps (src/shm_removed.h).  Not part of
-- run.sh: run it alone, after `make`, on the library to measure:
--
--   SHMLOCK_LIB=$PWD/libshmlock.so LUA_PATH='lua/?.lua;scripts/lua/?.lua;;' \
--       luajit bench/zone_create.lua [procs] [creates]
--
-- It starts `procs` (300) processes, forked from this one (LuaJIT with the
-- library loaded, each opening one shared zone itself, which this process
-- does not map), then times `creates` (200) openings of a name never used
-- (each creates a zone file of 64 KiB, closes and destroys it) and prints
-- the median and the slowest in µs.  Then the shared zone's file is
-- removed and the name opened again: that creation finds the removed file
-- mapped by every one of them and marks it dead (one such creation).

local ffi = require "ffi"
local proc = require "harness.proc"
local lib = require "resty.shmlock.lib"

local PROCS = tonumber(arg[1]) or 300
local CREATES = tonumber(arg[2]) or 200

local dir = proc.tmpdir()
local zp = ffi.new("shmlock_zone_t *[1]")

local function open(name, size)
    local rc = lib.shmlock_zone_open(dir, name, #name, size, 0, zp)
    assert(rc == lib.SHMLOCK_OK, "open " .. name .. ": " .. tonumber(rc))
    return zp[0]
end

-- the last scan's figures, where the library has the test hooks
local scan = ffi.new("uint32_t[6]")
local function figures()
    if not pcall(ffi.cdef, "void shmlock_test_removed_scan(uint32_t out[6]);")
       and not pcall(function() return lib.shmlock_test_removed_scan end)
    then
        return ""
    end
    if not pcall(function() lib.shmlock_test_removed_scan(scan) end) then
        return ""
    end
    return (" (maps read %d, flocks %d, every process's maps: %s)"):format(
        scan[0], scan[4], scan[5] == 1 and "yes" or "no")
end

local go, ready = proc.pipe(), proc.pipe()
local pids = {}
for i = 1, PROCS do
    pids[i] = proc.spawn_with({ alarm = 600, die_with_parent = true },
                              function()
        ready:close_read()
        open("shared", 65536)
        ready:notify()
        assert(go:wait_release(600))
    end)
end
ready:close_write()
for _ = 1, PROCS do
    assert(ready:await(60), "a process did not open the zone")
end

-- the median and the largest of times in µs
local function summary(times)
    table.sort(times)
    return times[math.floor(#times / 2) + 1], times[#times]
end

local times = {}
for i = 1, CREATES do
    local name = "fresh" .. i
    local t0 = proc.now()
    local z = open(name, 65536)
    times[#times + 1] = (proc.now() - t0) * 1e6
    lib.shmlock_zone_close(z)
    assert(lib.shmlock_zone_destroy(dir, name, #name) == lib.SHMLOCK_OK)
end
local median, worst = summary(times)
print(("%d processes, %d creations of a new name: median %.0f µs, "
       .. "slowest %.0f µs%s"):format(#pids + 1, CREATES, median, worst,
                                      figures()))

-- the shared zone removed behind our back, then made again
assert(os.remove(dir .. "/shmlock.shared"))
local t0 = proc.now()
local again = open("shared", 65536)
print(("the name made again while %d processes map its removed file: "
       .. "%.0f µs%s"):format(#pids, (proc.now() - t0) * 1e6, figures()))

go:release()
proc.wait_all(pids, 60)
lib.shmlock_zone_close(again)
lib.shmlock_zone_destroy(dir, "shared", 6)
proc.rmtree(dir)
