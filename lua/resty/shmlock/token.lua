-- resty.shmlock.token: owner tokens of resty.shmlock locks.
--
-- A token names one acquisition by one process on this host:
--
--     "<pid>:<start>:<serial, 16 hex digits>"
--
-- pid and start (the process start time in clock ticks since boot, from
-- /proc/<pid>/stat) identify the process even after its pid is reused.
-- The C library makes them (shmlock_token_next): its serial counter is one
-- per process, shared by every Lua VM in it (nginx with lua_code_cache off
-- runs a VM per request; http and stream Lua share a worker; a host may
-- embed several states), so two VMs never hand out the same token and
-- neither takes the other's lock for its own.  Tokens are compared as
-- whole strings, and parsed only to ask whether their process still lives.
-- Every process sharing a zone is in one pid namespace (zones refuse
-- others), so a pid in a token means the same process to all of them.

local ffi = require "ffi"
local C = require "resty.shmlock.lib"

local ffi_new = ffi.new
local tonumber = tonumber
local str_match = string.match
local str_find = string.find

local _M = { MAX_LEN = 64 }     -- SHMLOCK_TOKEN_MAX

local buf = ffi_new("char[?]", _M.MAX_LEN)
local pid = -1                  -- the process `start` was read for
local start = 0


-- syntax: ptr, len = token.next()
-- A fresh token of this process, in a buffer that the next call
-- overwrites: copy it (ffi.string, ffi.copy) to keep it.
function _M.next()
    return buf, tonumber(C.shmlock_token_next(buf, _M.MAX_LEN))
end


-- the pid of this process
function _M.pid()
    return C.shmlock_self_pid()
end


-- syntax: ok = token.valid(v)
-- Whether v has the shape of our tokens.
function _M.valid(v)
    return str_find(v, "^%d+:%d+:%x+$") ~= nil
end


-- syntax: alive = token.alive(tok)
-- false only when tok is one of our tokens and its process is gone (or its
-- pid now belongs to a younger process).  Anything we cannot parse belongs
-- to someone we do not know: assumed alive, it is left to its exptime.
function _M.alive(tok)
    local p, s = str_match(tok, "^(%d+):(%d+):%x+$")
    if not p then
        return true
    end
    local me = C.shmlock_self_pid()
    if me ~= pid then
        pid = me
        start = tonumber(C.shmlock_proc_start(me))
    end
    p, s = tonumber(p), tonumber(s)
    if p == pid and s == start then
        return true     -- held by this very process (another lock object)
    end
    return C.shmlock_proc_alive(p, s) == 1
end


return _M
