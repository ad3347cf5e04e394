-- helpers.soak_procs: the soak driver's processes.  Unlike harness.proc
-- (children of one spec, each waited for by pid), the driver reaps
-- whatever ends, in any order, with waitpid(-1): its children, and the
-- children of its children that an early death left behind (the driver
-- is their subreaper, PR_SET_CHILD_SUBREAPER).  Every child dies with the
-- driver (PR_SET_PDEATHSIG) and by an alarm() at the latest, so an
-- interrupted soak leaves nothing running.

local ffi = require "ffi"
local bit = require "bit"
local board = require "helpers.soak_board"
require "harness.proc"          -- declares fork, waitpid, kill, alarm, ...

local C = ffi.C
local band, rshift = bit.band, bit.rshift

for _, decl in ipairs {
    "int prctl(int option, ...);",
    "int getppid(void);",
    "typedef struct { unsigned long val[16]; } soak_sigset_t;",
    "int sigemptyset(soak_sigset_t *set);",
    "int sigaddset(soak_sigset_t *set, int sig);",
    "int sigismember(const soak_sigset_t *set, int sig);",
    "int sigprocmask(int how, const soak_sigset_t *set, soak_sigset_t *old);",
    "int sigpending(soak_sigset_t *set);",
} do
    pcall(ffi.cdef, decl)
end

local PR_SET_PDEATHSIG = 1
local PR_SET_CHILD_SUBREAPER = 36
local WNOHANG = 1
local ECHILD = 10
local SIGKILL, SIGSTOP, SIGCONT = 9, 19, 18

local SIG_BLOCK, SIG_SETMASK = 0, 2
local STOPS = { 1, 2, 15 }          -- SIGHUP, SIGINT, SIGTERM

local _M = { SIGKILL = SIGKILL, SIGSTOP = SIGSTOP, SIGCONT = SIGCONT }

local ul = ffi.typeof("unsigned long")
local status = ffi.new("int[1]")
local driver_pid


local stops = ffi.new("soak_sigset_t")
local pending = ffi.new("soak_sigset_t")
local empty = ffi.new("soak_sigset_t")
C.sigemptyset(stops)
C.sigemptyset(empty)
for _, sig in ipairs(STOPS) do
    C.sigaddset(stops, sig)
end

-- The calling process becomes the driver: the reaper of its descendants.
-- SIGHUP, SIGINT and SIGTERM are held for interrupted() to see, so that
-- the driver cleans up (its children take them as usual).
function _M.become_driver()
    driver_pid = C.getpid()
    C.prctl(PR_SET_CHILD_SUBREAPER, ul(1), ul(0), ul(0), ul(0))
    C.sigprocmask(SIG_BLOCK, stops, nil)
end

-- the signal that asked the driver to stop, or nil
function _M.interrupted()
    C.sigpending(pending)
    for _, sig in ipairs(STOPS) do
        if C.sigismember(pending, sig) == 1 then
            return sig
        end
    end
end

-- syntax: pid = soak_procs.fork(fn, arg, opts)
-- A child that runs fn(arg) and _exit()s: 0 when fn returns, 99 after an
-- error, which it reports ("V <opts.who>: error: ...") through the pipe
-- opts.fd first.  opts.alarm: seconds it may live.  opts.close: fds the
-- child closes at once.
function _M.fork(fn, arg, opts)
    local pid = C.fork()
    if pid < 0 then
        error("fork: " .. ffi.string(C.strerror(ffi.errno())))
    end
    if pid > 0 then
        return pid
    end
    C.sigprocmask(SIG_SETMASK, empty, nil)
    C.prctl(PR_SET_PDEATHSIG, ul(SIGKILL), ul(0), ul(0), ul(0))
    if C.getppid() ~= driver_pid then
        C._exit(98)         -- the driver died before the line above
    end
    C.alarm(opts.alarm)
    for _, fd in ipairs(opts.close or {}) do
        C.close(fd)
    end
    local ok, err = xpcall(fn, debug.traceback, arg)
    if not ok then
        board.report(opts.fd, "V " .. opts.who .. ": error: "
                              .. tostring(err))
        C._exit(99)
    end
    C._exit(0)
end

-- { how = "exit", code = n } or { how = "signal", sig = n }
local function decode(st)
    local low = band(st, 0x7f)
    if low == 0 then
        return { how = "exit", code = band(rshift(st, 8), 0xff) }
    end
    return { how = "signal", sig = low }
end

-- syntax: pid, res = soak_procs.reap(pid?)
-- One ended child (of `pid` only, if given), without waiting: its pid and
-- how it ended; nil when none has ended; false when there are no children
-- left at all.
function _M.reap(pid)
    while true do
        local r = C.waitpid(pid or -1, status, WNOHANG)
        if r > 0 then
            return r, decode(status[0])
        end
        if r == 0 then
            return nil
        end
        local e = ffi.errno()
        if e == ECHILD then
            return false
        end
        if e ~= 4 then      -- EINTR
            error("waitpid: " .. ffi.string(C.strerror(e)))
        end
    end
end

function _M.kill(pid, sig)
    return C.kill(pid, sig or SIGKILL) == 0
end

-- the first line of a /proc file of pid, or "?"
local function proc_line(pid, what)
    local f = io.open("/proc/" .. pid .. "/" .. what, "rb")
    if not f then
        return "?"
    end
    local s = f:read("*l") or ""
    f:close()
    return s
end

-- "state S, wchan futex_wait_queue, syscall 202 ..." of a process
function _M.describe(pid)
    local stat = proc_line(pid, "stat")
    return ("state %s, wchan %s, syscall %s"):format(
        stat:match("%) (%a)") or "?", proc_line(pid, "wchan"),
        proc_line(pid, "syscall"):match("^%S+") or "?")
end

local NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"

-- Sets the pid the kernel handed out last (so the next fork gets pid + 1
-- if it is free): true, or nil and why (it takes root).
function _M.set_last_pid(pid)
    local f, err = io.open(NS_LAST_PID, "w")
    if not f then
        return nil, err
    end
    f:setvbuf("no")
    local ok
    ok, err = f:write(tostring(pid))
    f:close()
    if not ok then
        return nil, NS_LAST_PID .. ": " .. tostring(err)
    end
    return true
end

-- true when set_last_pid() works here (tried with the current value)
function _M.can_set_last_pid()
    local f = io.open(NS_LAST_PID, "r")
    local last = f and tonumber(f:read("*l"))
    if f then
        f:close()
    end
    return last ~= nil and _M.set_last_pid(last) == true
end

-- syntax: pid, forks = soak_procs.fork_as(want, fn, arg, opts, tries)
-- A child with pid `want` (the pid a dead process had), through
-- set_last_pid().  Children that get another pid are killed and reaped
-- before they run fn: fn must first wait for the caller's go-ahead.  nil,
-- forks, why when the pid could not be had.
function _M.fork_as(want, fn, arg, opts, tries)
    for n = 1, tries do
        local ok, err = _M.set_last_pid(want - 1)
        if not ok then
            return nil, n - 1, err
        end
        local pid = _M.fork(fn, arg, opts)
        if pid == want then
            return pid, n
        end
        C.kill(pid, SIGKILL)
        C.waitpid(pid, status, 0)
    end
    return nil, tries, "pid " .. want .. " taken by others " .. tries
                       .. " times"
end

-- pids of the processes whose parent is pid (/proc/PID/task/PID/children,
-- else ps)
function _M.children_of(pid)
    local out = {}
    local path = ("/proc/%d/task/%d/children"):format(pid, pid)
    local f = io.open(path, "rb")
    local s
    if f then
        s = f:read("*a")
        f:close()
    else
        local p = io.popen("ps -o pid= --ppid " .. pid .. " 2>/dev/null")
        s = p:read("*a")
        p:close()
    end
    for n in s:gmatch("%d+") do
        out[#out + 1] = tonumber(n)
    end
    return out
end

-- Kills and reaps every descendant left (they are ours to reap, as
-- subreaper), within `secs`; returns how many were killed.
function _M.sweep(secs)
    local killed = 0
    if not driver_pid then
        return 0
    end
    local deadline = board.now_us() + secs * 1e6
    repeat
        local left = _M.children_of(driver_pid)
        for _, pid in ipairs(left) do
            if C.kill(pid, SIGKILL) == 0 then
                killed = killed + 1
            end
        end
        while _M.reap() do end
        if #left == 0 and _M.reap() == false then
            return killed
        end
        C.poll(nil, 0, 10)
    until board.now_us() > deadline
    return killed
end

return _M
