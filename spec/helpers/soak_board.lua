-- helpers.soak_board: what the soak's processes tell its driver
-- (spec/soak.lua), over two channels that do not depend on the library
-- under test:
--
-- * the board: an anonymous shared mapping the driver makes before its
--   first fork, so every process and every Lua VM in it sees the same
--   page (a VM reaches it by address).  A stop flag, one progress time per
--   counter key, and one lane per Lua VM at work: where it is in a round
--   (STATE), the time of its last progress, a flag set right before a
--   deliberate self-kill, and counters (FIELDS).  Each lane has one
--   writer; the driver only reads, so a killed process leaves its counts
--   exact up to its last operation.
-- * the report pipe: one line per violation, written in one write() of at
--   most PIPE_BUF bytes, so lines from processes killed mid-way are never
--   torn or mixed.

local ffi = require "ffi"
local C = ffi.C

local _M = {
    LANES = 512,
    KEYS = 64,              -- counter keys with a progress time
    MSG_MAX = 1000,
}

-- a lane's counters, by name (index in soak_lane_t.n)
_M.FIELDS = {
    "rounds",       -- lock rounds completed (counter incremented, unlocked)
    "ops",          -- dictionary calls
    "locks",        -- lock() and unlock() calls
    "timeouts",     -- lock() answered "timeout"
    "reconciled",   -- a dead holder's half-done round completed for it
    "sibling",      -- lock() refused while another VM of ours held the key
    "destroyed",    -- an answer "zone destroyed"
    "absent",       -- the zone name had no zone ("dictionary not found")
    "aborted",      -- rounds abandoned because the zone was destroyed
    "dead_waits",   -- lock() timed out in a zone destroyed meanwhile
    "cycles",       -- scenario cycles completed (conductors)
    "destroys",     -- zones destroyed (phoenix conductor)
    "handoffs",     -- full zone: a marked lock handed to its waiter
    "takeovers",    -- full zone: a dead holder's marked lock taken over
    "late_us",      -- full zone: worst lateness of a timed-out waiter
    "handoff_us",   -- full zone: worst unlock-to-waiter time
    "cpu_us",       -- full zone: most CPU a timed-out waiter used
    "fills",        -- full zone: entries pinned to fill it
    "children",     -- processes a conductor forked
    "forks",        -- forkers: children made by fork() while holding
    "forks_raw",    -- ... by a raw clone system call or _Fork()
    "timens",       -- processes in another time namespace refused
}
-- lane.state
_M.IDLE, _M.WAITING, _M.HOLDING = 0, 1, 2

local INDEX = {}
for i, name in ipairs(_M.FIELDS) do
    INDEX[name] = i - 1
end
_M.INDEX = INDEX
local NFIELDS = #_M.FIELDS

for _, decl in ipairs {
    "typedef struct { int32_t state; int32_t dying; int64_t beat_us; double n["
        .. NFIELDS .. "]; } soak_lane_t;",
    "typedef struct { int32_t stop; int32_t pad; int64_t key_beat["
        .. _M.KEYS .. "]; soak_lane_t lane[" .. _M.LANES
        .. "]; } soak_board_t;",
    "void *mmap(void *addr, size_t len, int prot, int flags, int fd, "
        .. "long off);",
    "long write(int fd, const void *buf, size_t count);",
    "int kill(int pid, int sig);",
    "int getpid(void);",
} do
    pcall(ffi.cdef, decl)
end

local PROT_RW = 3                       -- PROT_READ | PROT_WRITE
local MAP_SHARED_ANON = 0x01 + 0x20     -- MAP_SHARED | MAP_ANONYMOUS

local lib = require "resty.shmlock.lib"

-- monotonic microseconds (the library's clock: the same in every process)
function _M.now_us()
    return tonumber(lib.shmlock_now_us())
end

-- The board, zeroed; and its address for attach().
function _M.create()
    local size = ffi.sizeof("soak_board_t")
    local p = C.mmap(nil, size, PROT_RW, MAP_SHARED_ANON, -1, 0)
    if ffi.cast("intptr_t", p) == -1 then
        error("mmap of the soak board failed")
    end
    return ffi.cast("soak_board_t *", p),
           tonumber(ffi.cast("uintptr_t", p))
end

function _M.attach(addr)
    return ffi.cast("soak_board_t *", ffi.cast("uintptr_t", addr))
end

-- adds n to a lane's counter
function _M.add(lane, name, n)
    local i = INDEX[name]
    lane.n[i] = lane.n[i] + (n or 1)
end

-- keeps the larger of a lane's counter and v
function _M.max(lane, name, v)
    local i = INDEX[name]
    if v > lane.n[i] then
        lane.n[i] = v
    end
end

function _M.get(lane, name)
    return lane.n[INDEX[name]]
end

function _M.beat(lane)
    lane.beat_us = _M.now_us()
end

-- one line to the report pipe, in a single write (see above)
function _M.report(fd, line)
    line = line:gsub("[\r\n]", " ")
    if #line > _M.MSG_MAX then
        line = line:sub(1, _M.MSG_MAX) .. "..."
    end
    line = line .. "\n"
    C.write(fd, line, #line)
end

-- Kills this very process with SIGKILL, the lane marked first so that the
-- driver tells the death from the storm's.
function _M.die(lane)
    lane.dying = 1
    C.kill(C.getpid(), 9)
end

return _M
