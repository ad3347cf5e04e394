-- resty.shmlock.cli.glob (internal): shell-style patterns for
-- `shmlock keys --match`, matched against whole keys, byte by byte (keys
-- may hold any byte):
--
--     *        any bytes, none included
--     ?        one byte
--     [abc]    one of the bytes listed; [a-z] a range; [!a-z] or [^a-z]
--              any byte but those
--     \x       the byte x itself (\*, \?, \[, \\)
--
-- Everything else matches itself.  Made into an anchored Lua pattern.

local sub = string.sub
local concat = table.concat
local str_find = string.find

local _M = {}

-- a byte as a pattern item that matches only itself
local function esc(c)
    if c:match("%w") then
        return c
    end
    if c == "\0" then
        return "%z"
    end
    return "%" .. c
end

-- the set at pattern[i] (just after "["); the Lua set and the index after
-- "]", or nil when the set does not close
local function set(p, i)
    local out = { "[" }
    if sub(p, i, i) == "!" or sub(p, i, i) == "^" then
        out[2] = "^"
        i = i + 1
    end
    local first = true
    while i <= #p do
        local c = sub(p, i, i)
        if c == "]" and not first then
            out[#out + 1] = "]"
            return concat(out), i + 1
        end
        if c == "\\" and i < #p then
            i = i + 1
            c = sub(p, i, i)
        end
        if sub(p, i + 1, i + 1) == "-" and i + 2 <= #p
           and sub(p, i + 2, i + 2) ~= "]"
        then
            local hi = sub(p, i + 2, i + 2)
            out[#out + 1] = esc(c) .. "-" .. esc(hi)
            i = i + 3
        else
            out[#out + 1] = esc(c)
            i = i + 1
        end
        first = false
    end
    return nil
end

-- syntax: pattern, err = glob.compile(glob)
-- The anchored Lua pattern, or nil and "unclosed [" / "trailing \".
function _M.compile(g)
    local out, i = { "^" }, 1
    while i <= #g do
        local c = sub(g, i, i)
        if c == "*" then
            out[#out + 1] = ".-"
            i = i + 1
        elseif c == "?" then
            out[#out + 1] = "."
            i = i + 1
        elseif c == "[" then
            local s, j = set(g, i + 1)
            if not s then
                return nil, "unclosed ["
            end
            out[#out + 1] = s
            i = j
        elseif c == "\\" then
            if i == #g then
                return nil, "trailing \\"
            end
            out[#out + 1] = esc(sub(g, i + 1, i + 1))
            i = i + 2
        else
            out[#out + 1] = esc(c)
            i = i + 1
        end
    end
    out[#out + 1] = "$"
    return concat(out)
end

-- syntax: yes = glob.match(pattern, key): pattern from compile()
function _M.match(pattern, key)
    return str_find(key, pattern) ~= nil
end

return _M
