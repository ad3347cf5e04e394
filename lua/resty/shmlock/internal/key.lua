-- resty.shmlock.internal.key (internal): the one way a key given to a
-- dictionary, a lock, a semaphore or the Redis lock becomes the bytes
-- they keep.  A key is a string, never empty; a key of a zone is at most
-- KEY_MAX bytes.  These are runtime conditions: nil and the message,
-- never an error.
--
-- A number key is made a string by number() below, the same under every
-- interpreter, so that processes of LuaJIT, Lua 5.1, 5.2, 5.3 and 5.4
-- name one key alike; not by tostring, which differs between them (2^10
-- is "1024" under LuaJIT and 5.1, "1024.0" under 5.3 and 5.4;
-- 123456789012345 is "1.2345678901235e+14" under LuaJIT and
-- "123456789012345" under 5.3):
--
--   * a whole number from -2^53 to 2^53, integer or float: its decimal
--     digits ("1024"; -0 is "0");
--   * an integer of Lua 5.3 and 5.4 beyond that: its digits too
--     (math.maxinteger is "9223372036854775807");
--   * NaN: "nan" (C's printf writes "-nan" for some NaNs); infinities:
--     "inf" and "-inf";
--   * any other number: C's printf "%.14g" ("0.1", "1e+300").  C's, under
--     LuaJIT too: LuaJIT's own "%.14g" rounds an exact tie away from zero
--     (123456789012345 as "1.2345678901235e+14") where C's printf rounds
--     it to even ("1.2345678901234e+14").  PUC Lua's string.format is C's
--     printf; under LuaJIT the FFI calls it.
--
-- Any other value is tostring(key), as ngx.shared.DICT does: a boolean is
-- "true" or "false" everywhere; a table, function or userdata is its
-- __tostring, else its address, which names a key no other process
-- shares.
--
-- A string key costs one type check, as before.

local KEY_MAX = require("resty.shmlock.internal.codes").KEY_MAX

local type = type
local tostring = tostring
local format = string.format
local math_type = math.type     -- luacheck: ignore 143 (Lua 5.3 and 5.4)
local HUGE = math.huge

local WHOLE_MAX = 2 ^ 53

local _M = {}

-- C's printf "%.14g" of a number: PUC Lua's string.format is C's; under
-- LuaJIT, snprintf through the FFI, declared at the first use (a process
-- that never needs it declares and allocates nothing)
local has_ffi, ffi = pcall(require, "ffi")
local G_BUF_SIZE = 32   -- "-1.2345678901234e-308" and its NUL: 22 bytes
local g_buf

local function printf_g(n)
    if not has_ffi then
        return format("%.14g", n)
    end
    if not g_buf then
        -- (another module may have declared it already)
        pcall(ffi.cdef, "int snprintf(char *s, size_t n, const char *f, ...);")
        g_buf = ffi.new("char[?]", G_BUF_SIZE)
    end
    return ffi.string(g_buf, ffi.C.snprintf(g_buf, G_BUF_SIZE, "%.14g", n))
end

-- syntax: s = key.number(n)
-- The string of a number key (above).
local function number(n)
    -- (false for NaN)
    if n >= -WHOLE_MAX and n <= WHOLE_MAX and n % 1 == 0 then
        return format("%d", n)
    end
    if math_type and math_type(n) == "integer" then
        return format("%d", n)
    end
    if n ~= n then
        return "nan"
    end
    if n == HUGE then
        return "inf"
    end
    if n == -HUGE then
        return "-inf"
    end
    return printf_g(n)
end
_M.number = number

-- syntax: key, err = key.text(key)
-- key as a string; nil, "nil key" / "empty key"
local function text(key)
    if key == nil then
        return nil, "nil key"
    end
    if type(key) ~= "string" then
        if type(key) == "number" then
            key = number(key)
        else
            key = tostring(key)
        end
    end
    if #key == 0 then
        return nil, "empty key"
    end
    return key
end
_M.text = text

-- syntax: key, err = key.check(key)
-- A key of a zone: text(key), or nil, "key too long".
function _M.check(key)
    local err
    key, err = text(key)
    if key and #key > KEY_MAX then
        return nil, "key too long"
    end
    return key, err
end

return _M
