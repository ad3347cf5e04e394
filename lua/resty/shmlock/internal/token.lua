-- resty.shmlock.internal.token (internal): the owner tokens of locks, in
-- their two formats.  A token names one acquisition; a lock's value is its
-- holder's token, so a late unlock or expire compares before it acts.
--
-- Host tokens (locks in zones and ngx.shared dicts):
--
--     "<pid>:<start>:<serial, 16 hex digits>"
--
-- pid and start (the process start time in clock ticks since boot, from
-- /proc/<pid>/stat) identify the process even after its pid is reused.
-- The serial comes from the C library: one counter per process, shared by
-- every Lua VM in it (nginx with lua_code_cache off runs a VM per request;
-- http and stream Lua share a worker; a host may embed several states), so
-- two VMs never hand out the same token and neither takes the other's lock
-- for its own.  A VM takes serials in blocks of 4096 (shmlock_token_block
-- writes a block's 13 high hex digits) and counts the 3 low digits itself.
-- Tokens are compared as whole strings, and parsed only to ask whether
-- their process still lives.  Every process sharing a zone is in one pid
-- namespace (zones refuse others), so a pid in a token means the same
-- process to all of them.
--
-- The current host token lives in a buffer: the prefix is written once per
-- process (again in a child), the block's digits once per block, and the
-- low digits in place, so taking a token allocates nothing and calls C
-- but once per block.  A child must not hand out its parent's tokens: the
-- library keeps this process's pid in a word that every child finds
-- zeroed, however it was made (fork, a raw fork or clone system call,
-- _Fork: shmlock_self_pid_word), so one load per token tells.  The same
-- word tells whether a value captured with token.pid() was captured in
-- this process (token.ours).
--
-- Network tokens (Redis locks, seen by many hosts):
--
--     "<host name>/<12 hex digits drawn once per load>/<pid>/<counter>"
--
-- e.g. "web3/9f1c02ab44de/2817/15": GET on a lock key tells who holds it.
-- The pid is read per token (nginx forks its workers after loading
-- modules); the random part tells apart processes with the same host name
-- and pid (containers).

local core = require "resty.shmlock.internal.core"
local random = require "resty.shmlock.internal.random"

local bit = core.bit
local tonumber = tonumber
local str_match = string.match
local str_find = string.find
local byte = string.byte
local format = string.format
local band = bit.band
local rshift = bit.rshift

local SERIAL_LEN = 16       -- hex digits: 13 of the block, 3 counted here
local LOW_MAX = 4095

local _M = { MAX_LEN = 64 }

local HEX = {}
for d = 0, 15 do
    HEX[d] = ("0123456789abcdef"):byte(d + 1)
end

local ffi = core.ffi and require "ffi"
local C = core.C
local buf = ffi and ffi.new("char[?]", _M.MAX_LEN)
local len = 0                   -- bytes of a token
local pid = -1                  -- the pid the prefix was written for
local start = 0
local low = LOW_MAX             -- the last serial of the block: take a block
local prefix = ""               -- without the FFI: "<pid>:<start>:"
local block = ""                -- and the block's 13 digits

-- this process's pid, or 0 in a child that has not asked for it yet
local pid_word = ffi and C.shmlock_self_pid_word()


local function refresh(p)
    pid = p
    start = core.proc_start(p)
    prefix = p .. ":" .. start .. ":"
    if ffi then
        ffi.copy(buf, prefix)
    end
    len = #prefix + SERIAL_LEN
    low = LOW_MAX
end


-- syntax: ptr, len = token.next()
-- A fresh host token of this process, in a buffer that the next call
-- overwrites: copy it (ffi.string, ffi.copy) to keep it.  Without the FFI
-- (PUC Lua): the token as a string, and its length.
local function next_ffi()
    if pid_word[0] ~= pid then
        local p = C.shmlock_self_pid()
        if p ~= pid then
            refresh(p)
        end
    end
    if low == LOW_MAX then
        C.shmlock_token_block(buf + len - SERIAL_LEN)
        low = -1
    end
    low = low + 1
    buf[len - 3] = HEX[rshift(low, 8)]
    buf[len - 2] = HEX[band(rshift(low, 4), 15)]
    buf[len - 1] = HEX[band(low, 15)]
    return buf, len
end

local function next_string()
    local p = core.self_pid()
    if p ~= pid then
        refresh(p)
    end
    if low == LOW_MAX then
        block = core.token_block()
        low = -1
    end
    low = low + 1
    local tok = prefix .. block .. format("%03x", low)
    return tok, len
end

_M.next = ffi and next_ffi or next_string


-- the pid host tokens are being made for (-1 before the first token)
function _M.pid()
    return pid
end


-- syntax: pid = token.self()
-- This process's pid, as token.ours compares it (one load but in a child
-- that has not asked for it yet).
function _M.self()
    if pid_word then
        local p = pid_word[0]
        if p ~= 0 then
            return p
        end
    end
    return core.self_pid()
end


-- syntax: id = token.next_id()
-- A fresh owner id for a lock slot's acquisition (shmlock_slot_acquire):
-- a 32-bit number, never 0, from the process's one counter (the token
-- serials'), shared by every Lua VM of the process; a VM takes them in
-- blocks, as it takes token serials.
local id_at, id_end = 0, 0
local IDS = ffi and C.SHMLOCK_OWNER_IDS or 4096
local owner_ids = ffi and C.shmlock_owner_ids or core.owner_ids

function _M.next_id()
    if id_at == id_end then
        id_at = owner_ids()
        id_end = id_at - id_at % IDS + IDS
    end
    local id = id_at
    id_at = id_at + 1
    return id
end


-- syntax: ok = token.ours(p)
-- Whether p, a value of token.pid() kept since, names this process: false
-- in a child (of fork or of anything else) for its parent's pid.  One
-- load: cheap enough for every call of a lock method.
function _M.ours(p)
    if pid_word then
        return p == pid_word[0]
    end
    return p == core.self_pid()
end


-- syntax: ok = token.valid(v)
-- Whether v has the shape of a host token.
function _M.valid(v)
    return str_find(v, "^%d+:%d+:%x+$") ~= nil
end


-- syntax: pid, start = token.parse(tok)
-- The process of a host token (numbers), or nil for anything else.
function _M.parse(tok)
    local p, s = str_match(tok, "^(%d+):(%d+):%x+$")
    if not p then
        return nil
    end
    return tonumber(p), tonumber(s)
end


-- syntax: holder, starver, s_exp, since, till = token.split(v)
-- A zone lock's value: the holder's token, alone or followed by a
-- starving waiter's mark (resty.shmlock.lock.zone, "Starvation mode"):
--
--     "<holder>|<starver>|<starver exptime ms>|<since ms>|<until ms>"
--
-- (<until>, the starver's deadline, missing in a mark written by an older
-- version).  A value of another shape comes back whole, as the holder.
function _M.split(v)
    if not str_find(v, "|", 1, true) then
        return v
    end
    local h, s, e, since, till =
        str_match(v, "^([^|]*)|([^|]*)|(%d+)|(%d+)|(%d+)$")
    if not h then
        h, s, e, since = str_match(v, "^([^|]*)|([^|]*)|(%d+)|(%d+)$")
        if not h then
            return v
        end
    end
    return h, s, tonumber(e), tonumber(since), tonumber(till)
end


-- syntax: alive = token.alive(tok)
-- false only when tok is a host token and its process is gone (or its
-- pid now belongs to a younger process).  Anything we cannot parse belongs
-- to someone we do not know: assumed alive, it is left to its exptime.
function _M.alive(tok)
    local p, s = str_match(tok, "^(%d+):(%d+):%x+$")
    if not p then
        return true
    end
    local me = core.self_pid()
    if me ~= pid then
        refresh(me)
    end
    p, s = tonumber(p), tonumber(s)
    if p == pid and s == start then
        return true     -- held by this very process (another lock object)
    end
    return core.proc_alive(p, s)
end


-- the host's name (the kernel's, as gethostname), or "localhost"
local function hostname()
    local f = io.open("/proc/sys/kernel/hostname", "rb")
    local name = f and f:read("*l")
    if f then
        f:close()
    end
    if not name or name == "" then
        return "localhost"
    end
    return name
end

local network_base              -- "<host>/<random>", made at first use
local counter = 0

-- syntax: tok = token.network()
-- A fresh network token (a string).
function _M.network()
    if not network_base then
        network_base = hostname() .. "/"
                       .. format("%02x%02x%02x%02x%02x%02x",
                                 byte(random.bytes(6), 1, 6))
    end
    counter = counter + 1
    return network_base .. "/" .. core.self_pid() .. "/" .. counter
end


return _M
