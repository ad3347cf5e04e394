-- helpers.json_decode: a small strict JSON decoder for the specs that read
-- `shmlock --json` (spec/50-cli_spec.lua).  null decodes to json_decode.null;
-- \uXXXX escapes (surrogate pairs included) to UTF-8.  Raises on anything
-- that is not one JSON value with nothing after it.

local _M = {}

_M.null = setmetatable({}, { __tostring = function() return "null" end })

local function utf8(cp)
    if cp < 0x80 then
        return string.char(cp)
    elseif cp < 0x800 then
        return string.char(0xc0 + math.floor(cp / 64), 0x80 + cp % 64)
    elseif cp < 0x10000 then
        return string.char(0xe0 + math.floor(cp / 4096),
                           0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
    end
    return string.char(0xf0 + math.floor(cp / 262144),
                       0x80 + math.floor(cp / 4096) % 64,
                       0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
end

local ESC = { ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f",
              n = "\n", r = "\r", t = "\t" }

local value

local function fail(s, i, what)
    error(("json: %s at %d: %q"):format(what, i, s:sub(i, i + 10)), 0)
end

local function skip(s, i)
    return s:find("[^ \t\r\n]", i) or #s + 1
end

local function str(s, i)
    local out = {}
    i = i + 1
    while true do
        local c = s:sub(i, i)
        if c == "" then
            fail(s, i, "unterminated string")
        elseif c == '"' then
            return table.concat(out), i + 1
        elseif c == "\\" then
            local e = s:sub(i + 1, i + 1)
            if e == "u" then
                local cp = tonumber(s:sub(i + 2, i + 5), 16)
                if not cp or not s:sub(i + 2, i + 5):match("^%x%x%x%x$") then
                    fail(s, i, "bad \\u escape")
                end
                i = i + 6
                if cp >= 0xd800 and cp <= 0xdbff
                   and s:sub(i, i + 1) == "\\u" then
                    local lo = tonumber(s:sub(i + 2, i + 5), 16)
                    cp = 0x10000 + (cp - 0xd800) * 1024 + (lo - 0xdc00)
                    i = i + 6
                end
                out[#out + 1] = utf8(cp)
            elseif ESC[e] then
                out[#out + 1] = ESC[e]
                i = i + 2
            else
                fail(s, i, "bad escape")
            end
        elseif c:byte() < 0x20 then
            fail(s, i, "control character in a string")
        else
            local j = s:find('["\\%c]', i) or #s + 1
            out[#out + 1] = s:sub(i, j - 1)
            i = j
        end
    end
end

local function list(s, i, close, item)
    i = skip(s, i + 1)
    if s:sub(i, i) == close then
        return i + 1
    end
    while true do
        i = skip(s, item(s, i))
        local c = s:sub(i, i)
        if c == close then
            return i + 1
        elseif c ~= "," then
            fail(s, i, "expected , or " .. close)
        end
        i = skip(s, i + 1)
    end
end

function value(s, i)
    i = skip(s, i)
    local c = s:sub(i, i)
    if c == "{" then
        local t = {}
        i = list(s, i, "}", function(_, j)
            if s:sub(j, j) ~= '"' then
                fail(s, j, "expected a key")
            end
            local k
            k, j = str(s, j)
            j = skip(s, j)
            if s:sub(j, j) ~= ":" then
                fail(s, j, "expected :")
            end
            t[k], j = value(s, j + 1)
            return j
        end)
        return t, i
    elseif c == "[" then
        local t = {}
        i = list(s, i, "]", function(_, j)
            t[#t + 1], j = value(s, j)
            return j
        end)
        return t, i
    elseif c == '"' then
        return str(s, i)
    end
    for word, v in pairs { ["true"] = true, ["false"] = false,
                           null = _M.null } do
        if s:sub(i, i + #word - 1) == word then
            return v, i + #word
        end
    end
    local num = s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", i)
    if num and num ~= "" and tonumber(num) then
        return tonumber(num), i + #num
    end
    fail(s, i, "unexpected")
end

-- syntax: v = json_decode.decode(text)
function _M.decode(s)
    local v, i = value(s, 1)
    i = skip(s, i)
    if i <= #s then
        fail(s, i, "text after the value")
    end
    return v
end

return _M
