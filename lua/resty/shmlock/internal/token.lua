-- resty.shmlock.internal.token (internal): the owners of locks.  A
-- zone's lock is held by this process's pid with an owner id (next_id);
-- the locks of ngx.shared dicts and Redis are held by owner tokens, in
-- two formats.  A token names one acquisition; a lock's value is its
-- holder's token, so a late unlock or expire compares before it acts.
--
-- Host tokens (locks in ngx.shared dicts):
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
-- Owner ids come from the same counter (shmlock_owner_ids: a block's
-- serials, low 32 bits).
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
-- blocks, as it takes token serials.  A child (of fork, or anything else)
-- takes a block of its own before its first id: the block it inherited is
-- its parent's, and a process that reuses a pid must not hand out the ids
-- the pid's earlier owner had (a child of the same parent would).
local id_at, id_end, id_pid = 0, 0, -1
local IDS = ffi and C.SHMLOCK_OWNER_IDS or 4096
local owner_ids = ffi and C.shmlock_owner_ids or core.owner_ids

function _M.next_id()
    local p = _M.self()
    if id_at == id_end or id_pid ~= p then
        id_pid = p
        id_at = owner_ids()
        id_end = id_at - id_at % IDS + IDS
    end
    local id = id_at
    id_at = id_at + 1
    return id
end


-- syntax: start = token.start32()
-- The low 32 bits of this process's start time, as a slot's process hint
-- holds them (shmlock_proc_start).
local start_pid, start32 = -1, 0

function _M.start32()
    local p = _M.self()
    if p ~= start_pid then
        start_pid = p
        start32 = core.proc_start(p) % 4294967296
    end
    return start32
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
