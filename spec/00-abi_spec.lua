-- The C ABI is pinned: src/shmlock.h and the Lua side's declarations of it
-- (the cdef in resty/shmlock/lib.lua, the test hooks' in
-- spec/helpers/test_hooks.lua) declare the same functions with the same
-- prototypes, the same types and the same enum constants with the same
-- values; the libraries export exactly those functions (the production
-- one without the test hooks); errors.lua has a message for every status;
-- shmlock_errno() is never stale.

local ffi = require "ffi"
local lib = require "helpers.test_hooks"
local errors = require "resty.shmlock.errors"
local checkout = require "helpers.checkout"

local function slurp(path)
    return assert(checkout.read_file(path), "cannot read " .. path)
end

local function squeeze(s)
    s = s:gsub("%s+", " ")
    s = s:gsub(" ?([%*%(%),;{}=]) ?", "%1")
    return (s:gsub("^ ", ""):gsub(" $", ""))
end

-- "a + b"-style constant expressions of an enum: digits and operators only
local function eval(expr)
    assert(expr:match("^[%d%s%+%-%*/%(%)]+$"), "enum value: " .. expr)
    return assert(loadstring("return " .. expr))()
end

-- the top-level declarations of C text, each without its ';'
local function declarations(text)
    local out, depth, start = {}, 0, 1
    for i = 1, #text do
        local c = text:sub(i, i)
        if c == "{" then
            depth = depth + 1
        elseif c == "}" then
            depth = depth - 1
        elseif c == ";" and depth == 0 then
            out[#out + 1] = squeeze(text:sub(start, i - 1))
            start = i + 1
        end
    end
    assert(squeeze(text:sub(start)) == "", "text after the last ';'")
    return out
end

-- C declarations (no comments, no preprocessor lines) parsed into
-- { funcs = { name = prototype }, enums = { name = value },
--   enums_in = { { names of one enum }, ... },
--   types = { squeezed typedef = true } }
local function parse(text)
    local d = { funcs = {}, enums = {}, enums_in = {}, types = {} }
    text = text:gsub("/%*.-%*/", " "):gsub("//[^\n]*", " ")
    text = text:gsub("\n%s*#[^\n]*", "\n"):gsub("^%s*#[^\n]*", "")
    text = text:gsub("SHMLOCK_API", " ")
    for _, decl in ipairs(declarations(text)) do
        local body = decl:match("^enum{(.*)}$")
        if body then
            local value, names = -1, {}
            for item in (body .. ","):gmatch("([^,]+),") do
                local name, expr = item:match("^([%w_]+)=(.+)$")
                name = name or item:match("^([%w_]+)$")
                value = expr and eval(expr) or value + 1
                assert(d.enums[name] == nil, "enum constant twice: " .. name)
                d.enums[name] = value
                names[#names + 1] = name
            end
            d.enums_in[#d.enums_in + 1] = names
        elseif decl:match("^typedef ") then
            d.types[decl] = true
        elseif decl ~= "" then
            local name = decl:match("([%w_]+)%(")
            assert(name, "not a declaration: " .. decl)
            assert(d.funcs[name] == nil, "declared twice: " .. name)
            d.funcs[name] = decl
        end
    end
    return d
end

-- the public header, and the test hooks' (src/shmlock_testing.h: what
-- follows its #include "shmlock.h"); the public one names no hook
local function header()
    local h = slurp("src/shmlock.h")
    assert(not h:find("shmlock_test_", 1, true),
           "src/shmlock.h declares a test hook (src/shmlock_testing.h's)")
    local t = slurp("src/shmlock_testing.h")
    local hooks = t:match('#include "shmlock%.h"\n(.*)#endif')
    assert(hooks, "src/shmlock_testing.h: no hooks after its #include")
    return parse(h), parse(hooks)
end

-- the cdef blocks of a Lua file, concatenated; declarations that are not
-- the library's (strerror, ...) left out
local function lua_cdef(path)
    local src, parts = slurp(path), {}
    for block in src:gmatch("ffi%.cdef%s*%[%[(.-)%]%]") do
        parts[#parts + 1] = block
    end
    for decl in src:gmatch('"([^"\n]-shmlock_[^"\n]-;)"') do
        parts[#parts + 1] = decl        -- one declaration per string
    end
    local d = parse(table.concat(parts, "\n"))
    for name in pairs(d.funcs) do
        if not name:match("^shmlock_") then
            d.funcs[name] = nil
        end
    end
    return d
end

local function keys(t)
    local out = {}
    for k in pairs(t) do
        out[#out + 1] = k
    end
    table.sort(out)
    return out
end

-- exported function names of a shared library (nm -D), or nil
local function exports(path)
    local f = io.open(path, "rb")
    if not f then
        return nil
    end
    f:close()
    local p = assert(io.popen("nm -D --defined-only '" .. path .. "'"))
    local out = {}
    for line in p:lines() do
        local kind, name = line:match("^%x+ (%a) (shmlock_[%w_]+)$")
        if kind == "T" then
            out[name] = true
        end
    end
    p:close()
    return out
end

describe("the C ABI", function()
    local prod, hooks = header()
    local cdef = lua_cdef("lua/resty/shmlock/lib.lua")
    local hook_cdef = lua_cdef("spec/helpers/test_hooks.lua")

    it("lib.lua's cdef declares every function of shmlock.h with its prototype",
       function()
        assert.same(keys(prod.funcs), keys(cdef.funcs))
        for name, proto in pairs(prod.funcs) do
            assert.equal(proto, cdef.funcs[name])
        end
    end)

    it("lib.lua's cdef has shmlock.h's types", function()
        assert.same(keys(prod.types), keys(cdef.types))
    end)

    it("lib.lua's cdef has every enum constant of shmlock.h, same value",
       function()
        assert.same(prod.enums_in, cdef.enums_in)
        for name, value in pairs(prod.enums) do
            assert.equal(value, cdef.enums[name])
            assert.equal(value, lib[name])
        end
    end)

    it("the test hooks are declared alike, and only in the test helper",
       function()
        assert.is_true(#keys(hooks.funcs) > 0)
        assert.same(keys(hooks.funcs), keys(hook_cdef.funcs))
        for name, proto in pairs(hooks.funcs) do
            assert.equal(proto, hook_cdef.funcs[name])
            assert.is_nil(cdef.funcs[name])
        end
    end)

    it("errors has shmlock_strerror's message for every status but OK",
       function()
        local statuses = prod.enums_in[1]        -- the first enum
        assert.equal("SHMLOCK_OK", statuses[1])
        local n = prod.enums[statuses[#statuses]]
        assert.equal(#statuses - 1, n)
        for rc = 1, n do
            assert.equal(ffi.string(lib.shmlock_strerror(rc)), errors[rc])
        end
        assert.is_nil(errors[0])
        assert.is_nil(errors[n + 1])
        assert.equal("unknown error", ffi.string(lib.shmlock_strerror(n + 1)))
    end)

    it("libshmlock.so exports shmlock.h's functions and no test hook",
       function()
        local got = exports("libshmlock.so")
        if not got then
            pending("libshmlock.so is not built")
            return
        end
        assert.same(keys(prod.funcs), keys(got))
    end)

    it("libshmlock-test.so exports them and the test hooks", function()
        local got = exports("libshmlock-test.so")
        if not got then
            pending("libshmlock-test.so is not built")
            return
        end
        local want = {}
        for name in pairs(prod.funcs) do
            want[name] = true
        end
        for name in pairs(hooks.funcs) do
            want[name] = true
        end
        assert.same(keys(want), keys(got))
    end)
end)

describe("shmlock_errno", function()
    local dir = "/nonexistent-shmlock-dir"
    local out = ffi.new("shmlock_zone_t *[1]")

    it("is the errno of a failed zone call, 0 after one that did not fail",
       function()
        local base = os.getenv("SHMLOCK_DIR") or "/dev/shm"
        local ENOENT = 2
        assert.equal(lib.SHMLOCK_SYSTEM,
                     lib.shmlock_zone_open(dir, "e", 1, 65536, 0, out))
        assert.equal(ENOENT, lib.shmlock_errno())
        assert.equal(lib.SHMLOCK_OK,
                     lib.shmlock_zone_open(base, "abi_errno", 9, 65536, 0,
                                           out))
        assert.equal(0, lib.shmlock_errno())
        local zone = out[0]
        assert.equal(lib.SHMLOCK_SYSTEM,
                     lib.shmlock_zone_destroy(dir, "e", 1))
        assert.equal(ENOENT, lib.shmlock_errno())
        assert.equal(lib.SHMLOCK_OK,
                     lib.shmlock_zone_destroy(base, "abi_errno", 9))
        assert.equal(0, lib.shmlock_errno())
        assert.equal(lib.SHMLOCK_NOT_FOUND,
                     lib.shmlock_zone_destroy(base, "abi_errno", 9))
        assert.equal(0, lib.shmlock_errno())
        lib.shmlock_zone_close(zone)
    end)
end)
