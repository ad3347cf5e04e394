-- The cache's table codec in plain Lua (resty.shmlock.cache.serial, used
-- under PUC Lua) against LuaJIT's string.buffer, whose format it writes:
-- each reads what the other wrote, for random nested tables; the same
-- refusals with the same messages.  (spec/60 exchanges whole cache
-- entries between interpreters.)

local buffer = require "string.buffer"
local serial = require "resty.shmlock.cache.serial"

local function same(a, b)
    if type(a) ~= "table" or type(b) ~= "table" then
        return a == b
    end
    for k, v in pairs(a) do
        if not same(v, b[k]) then
            return false
        end
    end
    for k in pairs(b) do
        if a[k] == nil then
            return false
        end
    end
    return true
end

-- a random value: scalars of every kind (strings of every varint length)
-- and tables with array parts, holes, index 0 and keys of every type
local SCALARS = { "", "x", ("y"):rep(0xdf), ("y"):rep(0xe0),
                  ("z"):rep(0x1fe0), 1.5, -7, 2 ^ 60, 0, -0.0, true, false,
                  1e300, -2 ^ 31 }
local function random_value(rnd, depth)
    local r = rnd(10)
    if depth > 3 or r <= 3 then
        return SCALARS[rnd(#SCALARS)]
    end
    local t = {}
    for i = 1, rnd(0, 8) do
        t[i] = random_value(rnd, depth + 1)
    end
    for _ = 1, rnd(0, 6) do
        t[random_value(rnd, 4)] = random_value(rnd, depth + 1)
    end
    if r == 4 then
        t[0] = "zero"
    elseif r == 5 then
        t[#t + 2] = "after a hole"
    end
    return t
end

describe("the cache's plain-Lua table codec", function()
    it("reads string.buffer's encoding, and string.buffer reads its own",
       function()
        local seed = 20240601
        math.randomseed(seed)
        for i = 1, 1000 do
            local v = random_value(math.random, 0)
            assert.is_true(same(v, serial.decode(buffer.encode(v))),
                           "serial.decode, value " .. i)
            assert.is_true(same(v, buffer.decode(serial.encode(v))),
                           "buffer.decode, value " .. i)
        end
    end)

    -- (t[0] goes to the hash part here, to LuaJIT's array part there:
    -- other bytes, the same table)
    it("writes what string.buffer writes for tables with one order",
       function()
        for _, v in ipairs { {}, { 1, 2, 3 }, { a = "b" },
                             { ("s"):rep(300) }, { { { {} } } } } do
            assert.equal(buffer.encode(v), serial.encode(v))
        end
    end)

    it("refuses what string.buffer refuses, with its messages", function()
        local loop = {}
        loop.loop = loop
        local deep = {}
        for _ = 1, 101 do
            deep = { deep }
        end
        for _, v in ipairs { { print }, { co = coroutine.create(print) },
                             loop, deep } do
            local ok1, e1 = pcall(buffer.encode, v)
            local ok2, e2 = pcall(serial.encode, v)
            assert.is_false(ok1)
            assert.is_false(ok2)
            assert.equal(tostring(e1), e2)
        end
    end)

    it("raises on a truncated or malformed string", function()
        local s = buffer.encode({ 1, "two", { three = 3 } })
        for n = 0, #s - 1 do
            assert.is_false((pcall(serial.decode, s:sub(1, n))), n)
        end
        assert.is_false((pcall(serial.decode, s .. "x")))
        assert.is_false((pcall(serial.decode, "\14")))
    end)
end)
