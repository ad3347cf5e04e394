-- resty.shmlock.cli.output (internal): how the shmlock command shows
-- things to people: aligned tables, sizes with binary units, seconds,
-- and bytes made printable.

local type = type
local tostring = tostring
local concat = table.concat
local format = string.format
local gsub = string.gsub
local byte = string.byte
local char = string.char
local match = string.match
local sub = string.sub
local tonumber = tonumber
local huge = math.huge
local rep = string.rep
local floor = math.floor
local max = math.max

local _M = {}

local json = require "resty.shmlock.cli.json"

-- json.null, shown as "-" too
local NULL = json.null
local encode_json = json.encode

-- syntax: s = output.printable(s)
-- Control bytes as \xHH, a backslash doubled: one line, unambiguous.
function _M.printable(s)
    return (gsub(s, "[%c\\]", function(c)
        if c == "\\" then
            return "\\\\"
        end
        return format("\\x%02x", byte(c))
    end))
end

-- syntax: s, err = output.unprintable(text)
-- printable's inverse: \xHH is the byte HH, \\ a backslash, every other
-- byte itself; nil and a message for any other backslash.
function _M.unprintable(text)
    local out, i, n = {}, 1, #text
    while i <= n do
        local c = sub(text, i, i)
        if c ~= "\\" then
            out[#out + 1] = c
            i = i + 1
        elseif sub(text, i + 1, i + 1) == "\\" then
            out[#out + 1] = "\\"
            i = i + 2
        else
            local hex = match(text, "^x(%x%x)", i + 1)
            if not hex then
                return nil, format("bad escape at byte %d (\\xHH for a "
                                   .. "byte, \\\\ for a backslash)", i)
            end
            out[#out + 1] = char(tonumber(hex, 16))
            i = i + 4
        end
    end
    return concat(out)
end

-- syntax: s = output.number(n): the shortest text that reads back as n;
-- "nan", "inf" and "-inf" for those
function _M.number(n)
    if n ~= n then
        return "nan"
    elseif n == huge then
        return "inf"
    elseif n == -huge then
        return "-inf"
    end
    return encode_json(n)
end

local UNITS = { "K", "M", "G", "T" }

-- syntax: s = output.size(bytes): "512", "64K", "1.5M" (powers of 1024)
function _M.size(n)
    if type(n) ~= "number" then
        return "-"
    end
    if n < 1024 then
        return format("%d", n)
    end
    local unit = 0
    while n >= 1024 and unit < #UNITS do
        n = n / 1024
        unit = unit + 1
    end
    local s = n == floor(n) and format("%d", n) or format("%.1f", n)
    return (gsub(s, "%.0$", "")) .. UNITS[unit]
end

-- syntax: s = output.seconds(s): "12.5s", "0.003s"; "never" for 0
function _M.seconds(s)
    if type(s) ~= "number" then
        return "-"
    end
    if s == 0 then
        return "never"
    end
    local text = gsub(format("%.3f", s), "0+$", "")
    return (gsub(text, "%.$", "")) .. "s"
end

-- syntax: text = output.table(columns, rows)
-- columns: { { "HEADER", "field", right = true? }, ... }; rows: tables of
-- strings or numbers (nil shows as "-").  Columns are separated by two
-- spaces, the last one is not padded.  Ends with a newline.
function _M.table(columns, rows)
    local cells, width = {}, {}
    for c, col in ipairs(columns) do
        width[c] = #col[1]
    end
    for r, row in ipairs(rows) do
        cells[r] = {}
        for c, col in ipairs(columns) do
            local v = row[col[2]]
            v = (v == nil or v == NULL) and "-" or tostring(v)
            cells[r][c] = v
            width[c] = max(width[c], #v)
        end
    end

    local lines = {}
    local function line(values)
        local parts = {}
        for c, v in ipairs(values) do
            local pad = rep(" ", width[c] - #v)
            if c == #values then
                parts[c] = columns[c].right and pad .. v or v
            else
                parts[c] = columns[c].right and pad .. v or v .. pad
            end
        end
        lines[#lines + 1] = concat(parts, "  ")
    end

    local headers = {}
    for c, col in ipairs(columns) do
        headers[c] = col[1]
    end
    line(headers)
    for _, row in ipairs(cells) do
        line(row)
    end
    return concat(lines, "\n") .. "\n"
end

-- syntax: text = output.fields(pairs)
-- pairs: { { "name", value }, ... } as aligned "name  value" lines.
function _M.fields(list)
    local width = 0
    for _, f in ipairs(list) do
        width = max(width, #f[1])
    end
    local lines = {}
    for i, f in ipairs(list) do
        local v = f[2]
        lines[i] = f[1] .. rep(" ", width - #f[1] + 2)
                   .. (v == nil and "-" or tostring(v))
    end
    return concat(lines, "\n") .. "\n"
end

return _M
