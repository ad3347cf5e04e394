-- resty.shmlock.cache.codec (internal): the cache's L2 entries.
--
-- An entry is one string: a type tag (1 byte), the logical expiry (8
-- bytes: a double in host order, milliseconds of the zone's monotonic
-- clock, 0 = never), a version stamp (8 bytes: a double, unique per write)
-- and the payload: a string's bytes, a number's 8 bytes (host order), a
-- table in LuaJIT's string.buffer serialisation format, nothing for nil
-- and the booleans.
--
-- Under LuaJIT the tables go through string.buffer and the doubles through
-- the FFI; under PUC Lua, through resty.shmlock.cache.serial (the same
-- format in plain Lua) and the C module's pack_double: processes of every
-- interpreter read each other's entries.

local core = require "resty.shmlock.internal.core"

local type = type
local tostring = tostring
local pcall = pcall
local floor = math.floor
local str_byte = string.byte
local str_gsub = string.gsub
local str_sub = string.sub

local _M = {}

local T_NIL = "_"
local T_FALSE = "<"
local T_TRUE = ">"
local T_NUMBER = "#"
local T_STRING = "$"
local T_TABLE = "@"
local B_NIL, B_FALSE, B_TRUE = str_byte(T_NIL), str_byte(T_FALSE),
                               str_byte(T_TRUE)
local B_NUMBER, B_STRING, B_TABLE = str_byte(T_NUMBER), str_byte(T_STRING),
                                    str_byte(T_TABLE)
local HEADER = 17

-- the serialiser's message, without the position in a file it may carry
-- ("codec.lua:99: too deep to serialize")
local function table_error(err)
    return "cannot serialise the table: "
           .. str_gsub(tostring(err), "^[^\n]-:%d+: ", "", 1)
end

local encode, header, decode

if core.ffi then
    local ffi = require "ffi"
    local buffer = require "string.buffer"
    local ffi_new = ffi.new
    local ffi_copy = ffi.copy
    local ffi_cast = ffi.cast

    -- scratch space, allocated once; no call below yields while using it
    local buf = buffer.new()
    local dbl = ffi_new("double[1]")
    local u8p = ffi.typeof("const uint8_t *")

    -- string.buffer raises on what it cannot serialise (functions,
    -- userdata, most cdata, inside a table): caught here
    local function encode_table(value)
        buf:encode(value)
    end

    encode = function(value, expiry, stamp)
        buf:reset()
        local typ = type(value)
        if typ == "string" then
            buf:put(T_STRING)
        elseif typ == "number" then
            buf:put(T_NUMBER)
        elseif typ == "boolean" then
            buf:put(value and T_TRUE or T_FALSE)
        elseif value == nil then
            buf:put(T_NIL)
        elseif typ == "table" then
            buf:put(T_TABLE)
        else
            return nil, "cannot cache a " .. typ
        end

        dbl[0] = expiry
        buf:putcdata(dbl, 8)
        dbl[0] = stamp
        buf:putcdata(dbl, 8)

        if typ == "string" then
            buf:put(value)
        elseif typ == "number" then
            dbl[0] = value
            buf:putcdata(dbl, 8)
        elseif typ == "table" then
            local ok, err = pcall(encode_table, value)
            if not ok then
                buf:reset()
                return nil, table_error(err)
            end
        end
        return buf:get()
    end

    local function decode_table()
        return buf:decode()
    end

    header = function(s)
        if type(s) ~= "string" or #s < HEADER then
            return nil
        end
        local p = ffi_cast(u8p, s)
        ffi_copy(dbl, p + 1, 8)
        local expiry = dbl[0]
        ffi_copy(dbl, p + 9, 8)
        return expiry, dbl[0]
    end

    decode = function(s)
        local expiry = header(s)
        if not expiry then
            return nil, "not a cache entry"
        end
        local p = ffi_cast(u8p, s)
        local tag = p[0]

        if tag == B_STRING then
            return true, s:sub(HEADER + 1), expiry
        elseif tag == B_NUMBER and #s == HEADER + 8 then
            ffi_copy(dbl, p + HEADER, 8)
            return true, dbl[0], expiry
        elseif tag == B_TRUE then
            return true, true, expiry
        elseif tag == B_FALSE then
            return true, false, expiry
        elseif tag == B_NIL then
            return true, nil, expiry
        elseif tag == B_TABLE then
            buf:set(s)
            buf:skip(HEADER)
            local ok, value = pcall(decode_table)
            buf:reset()
            if ok and type(value) == "table" then
                return true, value, expiry
            end
        end
        return nil, "not a cache entry"
    end
else
    local serial = require "resty.shmlock.cache.serial"
    local pack_double = core.pack_double
    local unpack_double = core.unpack_double
    -- luacheck: push ignore 143 (math.tointeger: Lua 5.3+)
    local tointeger = math.tointeger or function(x) return x end
    -- luacheck: pop
    local MAX_INT = 2 ^ 53
    local serial_encode, serial_decode = serial.encode, serial.decode

    encode = function(value, expiry, stamp)
        local typ = type(value)
        local tag, payload
        payload = ""
        if typ == "string" then
            tag, payload = T_STRING, value
        elseif typ == "number" then
            tag, payload = T_NUMBER, pack_double(value)
        elseif typ == "boolean" then
            tag = value and T_TRUE or T_FALSE
        elseif value == nil then
            tag = T_NIL
        elseif typ == "table" then
            local ok, s = pcall(serial_encode, value)
            if not ok then
                return nil, table_error(s)
            end
            tag, payload = T_TABLE, s
        else
            return nil, "cannot cache a " .. typ
        end
        return tag .. pack_double(expiry) .. pack_double(stamp) .. payload
    end

    header = function(s)
        if type(s) ~= "string" or #s < HEADER then
            return nil
        end
        return unpack_double(s, 2), unpack_double(s, 10)
    end

    -- a number as the dictionary answers it under Lua 5.3+: an integer
    -- when whole and at most 2^53 in size
    local function number(d)
        if d == floor(d) and d >= -MAX_INT and d <= MAX_INT then
            return tointeger(d)
        end
        return d
    end

    decode = function(s)
        local expiry = header(s)
        if not expiry then
            return nil, "not a cache entry"
        end
        local tag = str_byte(s, 1)
        if tag == B_STRING then
            return true, str_sub(s, HEADER + 1), expiry
        elseif tag == B_NUMBER and #s == HEADER + 8 then
            return true, number(unpack_double(s, HEADER + 1)), expiry
        elseif tag == B_TRUE then
            return true, true, expiry
        elseif tag == B_FALSE then
            return true, false, expiry
        elseif tag == B_NIL then
            return true, nil, expiry
        elseif tag == B_TABLE then
            local ok, value = pcall(serial_decode, s, HEADER + 1)
            if ok and type(value) == "table" then
                return true, value, expiry
            end
        end
        return nil, "not a cache entry"
    end
end

-- syntax: s, err = codec.encode(value, expiry, stamp)
-- The L2 string, or nil and why the value cannot be stored ("cannot cache
-- a function", "cannot serialise the table: too deep to serialize").
_M.encode = encode

-- syntax: expiry, stamp = codec.header(s)
-- An entry's expiry (ms; 0 = never) and stamp; nil if s is not one.
_M.header = header

-- syntax: ok, value, expiry = codec.decode(s)
-- nil, err for a string that is not an entry.
_M.decode = decode

-- syntax: entry = codec.entry(s)
-- What an L2 string holds, { value = v, expiry = ms (zone clock; 0:
-- never), stamp = n, writer_pid = pid }, or nil if s is not an entry.
function _M.entry(s)
    local ok, value, expiry = decode(s)
    if not ok then
        return nil
    end
    local _, stamp = header(s)
    return { value = value, expiry = expiry, stamp = stamp,
             writer_pid = floor(stamp / 2147483648) }
end

return _M
