-- helpers.vm: a second Lua VM in this very process, created through the
-- FFI (the luajit binary exports the Lua C API), to check what several VMs
-- of one process share: nginx with lua_code_cache off, http and stream Lua
-- in one worker, a host program embedding LuaJIT states.
--
--     local vm = require("helpers.vm").new()
--     local ok, result = vm:run("return 1 + 1")   --> true, "2"
--     vm:close()
--
-- Code runs in the other VM to completion; it returns one value, turned
-- into a string (run() answers false and the message after an error).

local ffi = require "ffi"
local checkout = require "helpers.checkout"

local C = ffi.C

for _, decl in ipairs {
    "typedef struct lua_State lua_State;",
    "lua_State *luaL_newstate(void);",
    "void luaL_openlibs(lua_State *L);",
    "int luaL_loadstring(lua_State *L, const char *s);",
    "int lua_pcall(lua_State *L, int nargs, int nresults, int errfunc);",
    "const char *lua_tolstring(lua_State *L, int idx, size_t *len);",
    "void lua_settop(lua_State *L, int idx);",
    "void lua_close(lua_State *L);",
} do
    pcall(ffi.cdef, decl)
end

local vm_mt = {}
vm_mt.__index = vm_mt

local _M = {}

-- A fresh VM with the standard libraries and this checkout's require
-- roots (helpers.checkout).
function _M.new()
    local L = C.luaL_newstate()
    assert(L ~= nil, "luaL_newstate failed")
    C.luaL_openlibs(L)
    local self = setmetatable({ L = L }, vm_mt)
    assert(self:run(("package.path = %q .. ';' .. package.path")
                    :format(checkout.PATH)))
    return self
end

function vm_mt:run(code)
    local L = self.L
    if C.luaL_loadstring(L, code) ~= 0
       or C.lua_pcall(L, 0, 1, 0) ~= 0
    then
        local msg = ffi.string(C.lua_tolstring(L, -1, nil))
        C.lua_settop(L, 0)
        return false, msg
    end
    local p = C.lua_tolstring(L, -1, nil)
    local result = p ~= nil and ffi.string(p) or nil
    C.lua_settop(L, 0)
    return true, result
end

function vm_mt:close()
    if self.L ~= nil then
        C.lua_close(self.L)
        self.L = nil
    end
end

return _M
