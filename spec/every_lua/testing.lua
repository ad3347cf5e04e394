-- spec/every_lua/testing.lua: resty.shmlock.testing under whichever
-- interpreter runs this (spec/61): zone_dir() is the default directory of
-- this process's zones and its children's, processes() starts them
-- together, remove_zone_dir() removes it and restores SHMLOCK_DIR.
-- Prints "ok" or raises.
local testing = require "resty.shmlock.testing"
local shdict = require "resty.shmlock.shdict"

local before = os.getenv("SHMLOCK_DIR")
local dir = testing.zone_dir()
assert(os.getenv("SHMLOCK_DIR") == dir, "SHMLOCK_DIR set")
local d = assert(shdict.open("t_counts"))
assert(io.open(dir .. "/shmlock.t_counts"), "the zone is in the directory")
local results = testing.processes(3, [[
    local i, n = ...
    -- the start barrier: every process arrived before any runs this
    local z = assert(require("resty.shmlock.shdict").open("barrier",
                     { dir = arg[3], create = false }))
    assert(z:get("ready") == n, "started before the others")
    local d = assert(require("resty.shmlock.shdict").open("t_counts"))
    for _ = 1, 100 do
        assert(d:incr("n", 1, 0))
    end
    io.write("child ", i, " of ", n, " in ", os.getenv("SHMLOCK_DIR"))
    if i == 3 then
        error("the third fails")
    end
]])
assert(#results == 3, "three results")
for i = 1, 2 do
    assert(results[i].ok and results[i].status == 0, results[i].output)
    assert(results[i].output == "child " .. i .. " of 3 in " .. dir,
           results[i].output)
end
assert(results[3].ok == false and results[3].status == 1, "the error exits 1")
assert(results[3].output:find("the third fails", 1, true), results[3].output)
assert(d:get("n") == 300, "every child counted: " .. tostring(d:get("n")))
testing.remove_zone_dir()
assert(os.getenv("SHMLOCK_DIR") == before, "SHMLOCK_DIR restored")
assert(io.open(dir) == nil, "the directory is gone")
print("ok")
