-- resty.shmlock.cli.json (internal): the JSON the shmlock command writes
-- with --json.  Encoding only, of what the command builds: tables with
-- string keys (objects, keys sorted so that the output is stable), arrays
-- (tables with [1] or marked with json.array), strings, numbers, booleans
-- and json.null.
--
-- Strings: '"', '\' and the control characters are escaped; valid UTF-8
-- passes as it is; a byte that is not part of a valid UTF-8 sequence (zone
-- keys and values are bytes) is written as \u00XX, its Latin-1 code point,
-- so that the output is always valid JSON.  Numbers: integers as such,
-- others with the fewest significant digits (15 to 17) that read back
-- as the same number; NaN and the infinities, which JSON lacks, as the
-- strings "nan", "inf" and "-inf" (what the plain output prints).

local type = type
local pairs = pairs
local tostring = tostring
local tonumber = tonumber
local concat = table.concat
local sort = table.sort
local byte = string.byte
local format = string.format
local str_find = string.find
local floor = math.floor
local huge = math.huge

local _M = {}

_M.null = setmetatable({}, { __tostring = function() return "null" end })

local ARRAY = {}

-- syntax: t = json.array(t): t encodes as an array, also when empty
function _M.array(t)
    return setmetatable(t, ARRAY)
end

-- bytes that may need escaping (%c includes DEL, which passes as it is)
local SPECIAL = '[%c"\\\128-\255]'

local ESCAPES = {
    [0x22] = '\\"', [0x5c] = "\\\\", [0x08] = "\\b", [0x0c] = "\\f",
    [0x0a] = "\\n", [0x0d] = "\\r", [0x09] = "\\t",
}

-- the length of the valid UTF-8 sequence at s[i] (lead byte c), or nil
local function utf8_len(s, i, c)
    local n, min
    if c >= 0xc2 and c <= 0xdf then
        n, min = 2, 0x80
    elseif c >= 0xe0 and c <= 0xef then
        n, min = 3, 0x800
    elseif c >= 0xf0 and c <= 0xf4 then
        n, min = 4, 0x10000
    else
        return nil
    end
    local cp = c % (2 ^ (7 - n))
    for j = 1, n - 1 do
        local b = byte(s, i + j)
        if not b or b < 0x80 or b > 0xbf then
            return nil
        end
        cp = cp * 64 + b % 64
    end
    if cp < min or cp > 0x10ffff or (cp >= 0xd800 and cp <= 0xdfff) then
        return nil
    end
    return n
end

local function encode_string(s)
    -- the common case: nothing to escape
    if not str_find(s, SPECIAL) then
        return '"' .. s .. '"'
    end
    local out, i, len = {}, 1, #s
    while i <= len do
        local c = byte(s, i)
        if c < 0x20 or c == 0x22 or c == 0x5c then
            out[#out + 1] = ESCAPES[c] or format("\\u%04x", c)
            i = i + 1
        elseif c < 0x80 then
            local j = str_find(s, SPECIAL, i + 1) or len + 1
            out[#out + 1] = s:sub(i, j - 1)
            i = j
        else
            local n = utf8_len(s, i, c)
            if n then
                out[#out + 1] = s:sub(i, i + n - 1)
                i = i + n
            else
                out[#out + 1] = format("\\u%04x", c)
                i = i + 1
            end
        end
    end
    return '"' .. concat(out) .. '"'
end

local function encode_number(n)
    -- JSON has no NaN nor infinity: the strings the plain output prints
    if n ~= n then
        return '"nan"'
    elseif n == huge then
        return '"inf"'
    elseif n == -huge then
        return '"-inf"'
    end
    if n == floor(n) and n >= -2 ^ 53 and n <= 2 ^ 53 then
        return format("%d", n)
    end
    -- the shortest of 15 to 17 digits that reads back as n
    for digits = 15, 16 do
        local s = format("%." .. digits .. "g", n)
        if tonumber(s) == n then
            return s
        end
    end
    return format("%.17g", n)
end

local encode

local function is_array(t)
    return getmetatable(t) == ARRAY or (t[1] ~= nil)
end

local function encode_table(t, depth)
    if depth > 32 then
        error("json: nested too deep", 0)
    end
    local out = {}
    if is_array(t) then
        for i = 1, #t do
            out[i] = encode(t[i], depth + 1)
        end
        return "[" .. concat(out, ",") .. "]"
    end
    local names = {}
    for k in pairs(t) do
        if type(k) ~= "string" then
            error("json: object key of type " .. type(k), 0)
        end
        names[#names + 1] = k
    end
    sort(names)
    for i, k in ipairs(names) do
        out[i] = encode_string(k) .. ":" .. encode(t[k], depth + 1)
    end
    return "{" .. concat(out, ",") .. "}"
end

function encode(v, depth)
    local typ = type(v)
    if typ == "string" then
        return encode_string(v)
    elseif typ == "number" then
        return encode_number(v)
    elseif typ == "boolean" then
        return tostring(v)
    elseif v == nil or v == _M.null then
        return "null"
    elseif typ == "table" then
        return encode_table(v, depth)
    end
    error("json: cannot encode a " .. typ, 0)
end

-- syntax: text = json.encode(value)
function _M.encode(v)
    return encode(v, 0)
end

return _M
