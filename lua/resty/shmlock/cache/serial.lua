-- resty.shmlock.cache.serial (internal): a table's encoding in LuaJIT's
-- string.buffer serialisation format, in plain Lua, for the cache under
-- PUC Lua (under LuaJIT the cache uses string.buffer itself).  A table one
-- interpreter's cache stores, the other's reads back (spec/35).
--
-- The format (LuaJIT's doc/ext_buffer.html, "Serialization Format
-- Specification"): every object starts with a tag written as a "124"
-- varint (one byte below 0xe0; two bytes 0xe0 + the 13 high bits, then
-- the low byte, for values below 0x1fe0; else 0xff and 4 bytes
-- little-endian).  Tags: 0 nil, 1 false, 2 true, 6 a 32-bit integer (read
-- only: LuaJIT writes one in its dual-number builds), 7 a double (8 bytes
-- little-endian), 8 to 15 a table, 0x20 + n a string of n bytes.  A table's
-- tag is 8, + 1 when it has a hash part (its size follows as a varint), +
-- 2 (its array part starts at index 0) or + 4 (at index 1) when it has an
-- array part (the varint before the hash size: the array's length counting
-- index 0), then the array's values, then the hash part's key, value
-- pairs.  The order of the pairs is the table's (LuaJIT's differs from
-- PUC Lua's): the bytes may differ, the table read back does not.
--
-- The same limits as string.buffer, with its messages: a table nests at
-- most 100 deep ("too deep to serialize", a cycle included); functions,
-- userdata and threads raise "cannot serialize '<type>'".

local core = require "resty.shmlock.internal.core"

local type = type
local error = error
local next = next
local floor = math.floor
local concat = table.concat
local char = string.char
local byte = string.byte
local sub = string.sub
local pack_double = core.pack_double
local unpack_double = core.unpack_double
-- whole numbers as Lua 5.3's integers, as the dictionary answers them
-- luacheck: push ignore 143 (math.tointeger: Lua 5.3+)
local tointeger = math.tointeger or function(x) return x end
-- luacheck: pop

local _M = {}

local DEPTH = 100
local TAG_NIL, TAG_FALSE, TAG_TRUE = 0, 1, 2
local TAG_INT, TAG_NUM, TAG_TAB, TAG_STR = 6, 7, 8, 0x20
local MAX_INT = 2 ^ 53

-- the doubles of the format are little-endian; pack_double's, the host's
local LITTLE = byte(pack_double(1), 8) == 0x3f

local function le_double(d)
    local s = pack_double(d)
    if LITTLE then
        return s
    end
    return s:reverse()
end

local function varint(v)
    if v < 0xe0 then
        return char(v)
    elseif v < 0x1fe0 then
        v = v - 0xe0
        return char(0xe0 + floor(v / 256), v % 256)
    end
    return char(0xff, v % 256, floor(v / 256) % 256,
                floor(v / 65536) % 256, floor(v / 16777216) % 256)
end

local put

local function put_table(out, n, t, depth)
    if depth <= 0 then
        error("too deep to serialize", 0)
    end
    -- the array part: 1 .. narray, every value there
    local narray = 0
    while t[narray + 1] ~= nil do
        narray = narray + 1
    end
    local nhash = 0
    for k in next, t do
        if not (type(k) == "number" and k >= 1 and k <= narray
                and k % 1 == 0) then
            nhash = nhash + 1
        end
    end
    local tag = TAG_TAB
    if nhash > 0 then
        tag = tag + 1
    end
    if narray > 0 then
        tag = tag + 4
    end
    n = n + 1
    out[n] = varint(tag)
    if narray > 0 then
        n = n + 1
        out[n] = varint(narray + 1)    -- the length counts index 0
    end
    if nhash > 0 then
        n = n + 1
        out[n] = varint(nhash)
    end
    for i = 1, narray do
        n = put(out, n, t[i], depth - 1)
    end
    if nhash > 0 then
        for k, v in next, t do
            if not (type(k) == "number" and k >= 1 and k <= narray
                    and k % 1 == 0) then
                n = put(out, n, k, depth - 1)
                n = put(out, n, v, depth - 1)
            end
        end
    end
    return n
end

-- appends value's encoding to out (n parts so far): the new count
put = function(out, n, value, depth)
    local typ = type(value)
    n = n + 1
    if typ == "string" then
        out[n] = varint(TAG_STR + #value)
        n = n + 1
        out[n] = value
    elseif typ == "number" then
        out[n] = char(TAG_NUM) .. le_double(value)
    elseif typ == "boolean" then
        out[n] = char(value and TAG_TRUE or TAG_FALSE)
    elseif value == nil then
        out[n] = char(TAG_NIL)
    elseif typ == "table" then
        return put_table(out, n - 1, value, depth)
    else
        error("cannot serialize '" .. typ .. "'", 0)
    end
    return n
end

-- syntax: s = serial.encode(value): raises as string.buffer.encode does
function _M.encode(value)
    local out = {}
    put(out, 0, value, DEPTH)
    return concat(out)
end


-- decoding: every reader returns the value and the next position; a
-- malformed string raises (the caller catches it)

local function bad()
    error("malformed serialization", 0)
end

local function get_varint(s, pos)
    local v = byte(s, pos)
    if not v then
        bad()
    end
    if v < 0xe0 then
        return v, pos + 1
    elseif v ~= 0xff then
        local lo = byte(s, pos + 1) or bad()
        return (v - 0xe0) * 256 + lo + 0xe0, pos + 2
    end
    local a, b, c, d = byte(s, pos + 1, pos + 4)
    if not d then
        bad()
    end
    return a + b * 256 + c * 65536 + d * 16777216, pos + 5
end

local function number(d)
    if d == floor(d) and d >= -MAX_INT and d <= MAX_INT then
        return tointeger(d)
    end
    return d
end

local get

local function get_table(s, pos, tag, depth)
    if depth <= 0 then
        error("too deep to serialize", 0)
    end
    local narray, nhash = 0, 0
    if tag >= TAG_TAB + 2 then
        narray, pos = get_varint(s, pos)
    end
    if tag % 2 == 1 then
        nhash, pos = get_varint(s, pos)
    end
    local t = {}
    local first = tag >= TAG_TAB + 4 and 1 or 0
    local v
    for i = first, narray - 1 do
        v, pos = get(s, pos, depth - 1)
        t[i] = v
    end
    for _ = 1, nhash do
        local k
        k, pos = get(s, pos, depth - 1)
        if k == nil or k ~= k then
            bad()
        end
        if t[k] ~= nil then
            error("duplicate table key", 0)
        end
        v, pos = get(s, pos, depth - 1)
        t[k] = v
    end
    return t, pos
end

get = function(s, pos, depth)
    local tag
    tag, pos = get_varint(s, pos)
    if tag >= TAG_STR then
        local len = tag - TAG_STR
        local last = pos + len - 1
        if last > #s then
            bad()
        end
        return sub(s, pos, last), last + 1
    elseif tag == TAG_NUM then
        if pos + 7 > #s then
            bad()
        end
        local raw = sub(s, pos, pos + 7)
        if not LITTLE then
            raw = raw:reverse()
        end
        return number(unpack_double(raw, 1)), pos + 8
    elseif tag == TAG_INT then
        local a, b, c, d = byte(s, pos, pos + 3)
        if not d then
            bad()
        end
        local x = a + b * 256 + c * 65536 + d * 16777216
        if x >= 2147483648 then
            x = x - 4294967296
        end
        return number(x), pos + 4
    elseif tag == TAG_NIL then
        return nil, pos
    elseif tag == TAG_FALSE then
        return false, pos
    elseif tag == TAG_TRUE then
        return true, pos
    elseif tag >= TAG_TAB and tag <= TAG_TAB + 5 then
        return get_table(s, pos, tag, depth)
    end
    bad()
end

-- syntax: value = serial.decode(s, pos?): the value encoded at pos (1)
-- of s, which must end there; raises on anything else
function _M.decode(s, pos)
    local value, after = get(s, pos or 1, DEPTH)
    if after ~= #s + 1 then
        bad()
    end
    return value
end

return _M
