-- resty.shmlock.token: owner tokens of resty.shmlock locks.
--
-- A token names one acquisition by one process on this host:
--
--     "<pid>:<start>:<pidns>:<serial, 15 decimal digits>"
--
-- pid and start (the process start time in clock ticks since boot, from
-- /proc/<pid>/stat) identify the process even after its pid is reused;
-- pidns (the inode of /proc/self/ns/pid) tells whether the pid means the
-- same process to us: a token from another pid namespace (a container
-- sharing the zone directory) is never judged dead.  serial counts the
-- tokens this process has handed out.  Tokens are compared as whole
-- strings, and parsed only to ask whether their process still lives.
--
-- The current token lives in a buffer: the prefix is written once per
-- process (again after a fork: the C core refreshes its cached pid in the
-- child) and the serial is updated in place, so taking a token allocates
-- nothing.

local ffi = require "ffi"
local C = require "resty.shmlock.lib"

local ffi_new = ffi.new
local ffi_copy = ffi.copy
local tonumber = tonumber
local str_match = string.match
local str_find = string.find
local str_format = string.format
local floor = math.floor

local ZERO = 48

ffi.cdef[[
long shmlock_lua_readlink(const char *path, char *buf, size_t size)
    __asm__("readlink");
]]

local _M = { MAX_LEN = 64 }

-- the serial is written as 12 "high" digits, rewritten every 1000 tokens,
-- and 3 "low" digits, rewritten every time: no loop on the hot path
local buf = ffi_new("char[?]", _M.MAX_LEN)
local len = 0           -- bytes of a token
local pid = -1          -- the pid the prefix was written for
local start = 0
local pidns = 0
local high, low = 0, 0


-- the inode of our pid namespace (0 if /proc cannot tell)
local function namespace()
    local n = tonumber(ffi.C.shmlock_lua_readlink("/proc/self/ns/pid", buf,
                                                  _M.MAX_LEN))
    if n <= 0 then
        return 0
    end
    return tonumber(ffi.string(buf, n):match("^pid:%[(%d+)%]$")) or 0
end


local function refresh(p)
    pid = p
    start = tonumber(C.shmlock_proc_start(p))
    pidns = namespace()
    local prefix = p .. ":" .. start .. ":" .. pidns .. ":"
    ffi_copy(buf, prefix)
    len = #prefix + 15
    high, low = -1, 999
end


-- syntax: ptr, len = token.next()
-- A fresh token of this process, in a buffer that the next call
-- overwrites: copy it (ffi.string, ffi.copy) to keep it.
function _M.next()
    local p = C.shmlock_self_pid()
    if p ~= pid then
        refresh(p)
    end
    if low == 999 then
        high = high + 1
        low = 0
        ffi_copy(buf + len - 15, str_format("%012d", high), 12)
    else
        low = low + 1
    end
    buf[len - 3] = ZERO + floor(low / 100)
    buf[len - 2] = ZERO + floor(low / 10) % 10
    buf[len - 1] = ZERO + low % 10
    return buf, len
end


-- the pid tokens are being made for (-1 before the first token)
function _M.pid()
    return pid
end


-- syntax: ok = token.valid(v)
-- Whether v has the shape of our tokens.
function _M.valid(v)
    return str_find(v, "^%d+:%d+:%d+:%d+$") ~= nil
end


-- syntax: alive = token.alive(tok)
-- false only when tok is one of our tokens and its process is gone (or its
-- pid now belongs to a younger process).  Anything we cannot parse belongs
-- to someone we do not know: assumed alive, it is left to its exptime.
function _M.alive(tok)
    local p, s, ns = str_match(tok, "^(%d+):(%d+):(%d+):%d+$")
    if not p then
        return true
    end
    local me = C.shmlock_self_pid()
    if me ~= pid then
        refresh(me)
    end
    p, s = tonumber(p), tonumber(s)
    if tonumber(ns) ~= pidns then
        return true     -- another pid namespace: its pids are not ours
    end
    if p == pid and s == start then
        return true     -- held by this very process (another lock object)
    end
    return C.shmlock_proc_alive(p, s) == 1
end


return _M
