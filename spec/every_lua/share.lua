-- spec/every_lua/share.lua DIR NAME N: one process of spec/60's
-- mixed-interpreter run: N incr of "count", N rpush of NAME on "list", and
-- the key NAME set to _VERSION, in zone el_share; prints "ok".
local dir, name, n = arg[1], arg[2], tonumber(arg[3])
local shdict = require "resty.shmlock.shdict"
local d = assert(shdict.open("el_share", { dir = dir, size = "1m" }))
for _ = 1, n do
    assert(d:incr("count", 1, 0))
    assert(d:rpush("list", name))
end
assert(d:set(name, _VERSION))
print("ok")
