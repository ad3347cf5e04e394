-- flock_lock: the simplest lock a Unix program reaches for: flock(2) on a
-- file, through the LuaJIT FFI.  One open file description per object (a
-- forked child must make its own: flock locks belong to the description).

local ffi = require "ffi"

for _, decl in ipairs{
    "int open(const char *path, int flags, int mode);",
    "int close(int fd);",
    "int flock(int fd, int op);",
} do
    pcall(ffi.cdef, decl)
end

local C = ffi.C

local O_RDWR, O_CREAT, O_CLOEXEC = 2, 64, 524288
local LOCK_EX, LOCK_UN = 2, 8

local _M = {}
local mt = { __index = _M }

function _M.new(path)
    local fd = C.open(path, O_RDWR + O_CREAT + O_CLOEXEC, 384)  -- 0600
    if fd < 0 then
        error("open " .. path .. " failed: " .. ffi.errno())
    end
    return setmetatable({ fd = fd }, mt)
end

function _M.lock(self)
    return C.flock(self.fd, LOCK_EX) == 0
end

function _M.unlock(self)
    return C.flock(self.fd, LOCK_UN) == 0
end

function _M.close(self)
    C.close(self.fd)
end

return _M
