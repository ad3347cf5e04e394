-- harness.proc: real processes, for the specs (spec/), the benchmarks
-- (bench/) and the demo (demo/) alike: the one place that forks, waits,
-- makes pipes, kills and reaps.  It lives outside spec/ so that bench/
-- and demo/ do not reach into the test suite: each puts scripts/lua/ on
-- its path (.busted's lpath, bench/run.sh's LUA_PATH, the demo's first
-- lines).
--
-- Children are forked from the calling process (LuaJIT FFI fork), so they
-- share zones the parent opened and run Lua functions, not scripts.  A
-- child always ends through _exit(): it never returns into the parent's
-- code (busted's), never flushes the parent's stdio buffers, and an
-- alarm() kills it if it hangs.  The parent waits with a deadline and
-- SIGKILLs a child that overstays; reap_all() (the specs' fixtures call
-- it after each test) kills and reaps whatever is left.

local ffi = require "ffi"
local bit = require "bit"

local C = ffi.C
local band, rshift = bit.band, bit.rshift
local tostring = tostring
local type = type
local pcall = pcall
local error = error
local concat = table.concat

-- each declaration alone: another module may have declared some of them
for _, decl in ipairs {
    "struct pollfd { int fd; short events; short revents; };",
    "struct timespec { long tv_sec; long tv_nsec; };",
    "int fork(void);",
    "int waitpid(int pid, int *status, int options);",
    "int kill(int pid, int sig);",
    "void _exit(int status);",
    "int getpid(void);",
    "int pipe(int fds[2]);",
    "long read(int fd, void *buf, size_t count);",
    "long write(int fd, const void *buf, size_t count);",
    "int close(int fd);",
    "int poll(struct pollfd *fds, unsigned long nfds, int timeout);",
    "int clock_gettime(int clk, struct timespec *tp);",
    "unsigned int alarm(unsigned int seconds);",
    "int sched_yield(void);",
    "char *mkdtemp(char *template);",
    "char *strerror(int errnum);",
    "int prctl(int option, unsigned long a2, unsigned long a3,"
        .. " unsigned long a4, unsigned long a5);",
    "int getppid(void);",
    "long syscall(long number, ...);",
    "int _Fork(void);",
} do
    pcall(ffi.cdef, decl)
end

local WNOHANG = 1
local POLLIN = 1
local CLOCK_MONOTONIC = 1
local EINTR = 4

local SIGKILL = 9
local PR_SET_PDEATHSIG = 1

local _M = {
    SIGKILL = SIGKILL,
    SIGTERM = 15,
    SIGALRM = 14,
    CHILD_ALARM = 30,    -- seconds a child may live
}

local status_buf = ffi.new("int[1]")
local byte_buf = ffi.new("char[1]")
local ts = ffi.new("struct timespec")
local pfd = ffi.new("struct pollfd[1]")

local children = {}   -- pid -> { err_fd = read end of its message pipe }


-- monotonic time in seconds (microsecond resolution)
function _M.now()
    C.clock_gettime(CLOCK_MONOTONIC, ts)
    return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

function _M.sleep(seconds)
    C.poll(nil, 0, math.floor(seconds * 1000 + 0.5))
end

function _M.getpid()
    return C.getpid()
end

function _M.yield()
    C.sched_yield()
end

local function errno_str()
    return ffi.string(C.strerror(ffi.errno()))
end

local function write_all(fd, s)
    local off, len = 0, #s
    local p = ffi.cast("const char *", s)
    while off < len do
        local n = tonumber(C.write(fd, p + off, len - off))
        if n <= 0 then
            if n < 0 and ffi.errno() == EINTR then
                n = 0
            else
                return false
            end
        end
        off = off + n
    end
    return true
end

-- reads everything until EOF (the writer must have closed its end)
local function read_all(fd)
    local buf = ffi.new("char[4096]")
    local parts = {}
    while true do
        local n = tonumber(C.read(fd, buf, 4096))
        if n > 0 then
            parts[#parts + 1] = ffi.string(buf, n)
        elseif n == 0 or ffi.errno() ~= EINTR then
            break
        end
    end
    return concat(parts)
end

-- true when fd is readable (data or EOF) within timeout seconds
local function readable(fd, timeout)
    local deadline = _M.now() + timeout
    while true do
        local left = deadline - _M.now()
        if left < 0 then
            left = 0
        end
        pfd[0].fd = fd
        pfd[0].events = POLLIN
        pfd[0].revents = 0
        local n = C.poll(pfd, 1, math.ceil(left * 1000))
        if n > 0 then
            return true
        end
        if n == 0 or ffi.errno() ~= EINTR then
            return false
        end
    end
end


-- A pipe.  Between a parent and its children it serves as a signal (a
-- child writes a byte when it reached a point) or as a start barrier
-- (children wait for EOF; the parent releases them all by closing its
-- write end: every child must close its own copy first).
local pipe_mt = {}
pipe_mt.__index = pipe_mt

function _M.pipe()
    local fds = ffi.new("int[2]")
    if C.pipe(fds) ~= 0 then
        error("pipe: " .. errno_str())
    end
    return setmetatable({ r = fds[0], w = fds[1] }, pipe_mt)
end

function pipe_mt:close_read()
    if self.r >= 0 then
        C.close(self.r)
        self.r = -1
    end
end

function pipe_mt:close_write()
    if self.w >= 0 then
        C.close(self.w)
        self.w = -1
    end
end

function pipe_mt:close()
    self:close_read()
    self:close_write()
end

-- child side of a signal: one byte
function pipe_mt:notify()
    byte_buf[0] = 33
    return write_all(self.w, ffi.string(byte_buf, 1))
end

-- parent side of a signal: true once a byte arrived within timeout
-- seconds, false on timeout or EOF (the writer died first)
function pipe_mt:await(timeout)
    if not readable(self.r, timeout) then
        return false
    end
    return tonumber(C.read(self.r, byte_buf, 1)) == 1
end

-- barrier, child side: closes our write end, then waits for EOF
function pipe_mt:wait_release(timeout)
    self:close_write()
    if not readable(self.r, timeout) then
        return false
    end
    return tonumber(C.read(self.r, byte_buf, 1)) == 0
end

-- barrier, parent side
function pipe_mt:release()
    self:close_write()
end


local ul = ffi.typeof("unsigned long")
local long = ffi.typeof("long")

-- clone(2) as a raw system call: SIGCHLD at exit, no stack of its own
-- (the child runs on its copy of ours), nothing shared
local SYS_CLONE = ({ x64 = 56, arm64 = 220 })[ffi.arch]
local SIGCHLD = 17

local function raw_clone()
    return tonumber(C.syscall(SYS_CLONE, long(SIGCHLD), long(0), long(0),
                              long(0), long(0)))
end

-- syntax: kinds = proc.fork_kinds()
-- The ways of making a child this machine has, each { name = ..., fork =
-- fn } (fn() returns as fork() does), for spawn_with's opts.fork:
-- fork() (glibc's, which runs the pthread_atfork handlers), a raw clone
-- system call (x86_64 and arm64) and glibc's _Fork() (2.34 and later),
-- which run none: a library that learns of a fork from its handler alone
-- goes on in such a child with its parent's state.
function _M.fork_kinds()
    local kinds = { { name = "fork()", fork = C.fork } }
    if SYS_CLONE then
        kinds[#kinds + 1] = { name = "a raw clone system call",
                              fork = raw_clone }
    end
    if pcall(function() return C._Fork end) then
        kinds[#kinds + 1] = { name = "_Fork()", fork = C._Fork }
    end
    return kinds
end

-- syntax: pid = proc.spawn_with(opts, fn, ...)
-- Forks a child that runs fn(...).  The child exits 0 when fn returns
-- nothing (or true), with fn's number when it returns one, and with 99
-- after an error, whose message the parent gets from wait().
-- opts.alarm: seconds the child may live (default CHILD_ALARM);
-- opts.die_with_parent: the child is SIGKILLed when the parent dies
-- (PR_SET_PDEATHSIG; a benchmark stopped half way leaves nothing behind).
-- opts.fork: how to make the child (one of fork_kinds(); fork() by
-- default).
function _M.spawn_with(opts, fn, ...)
    local parent = opts.die_with_parent and C.getpid()
    local fds = ffi.new("int[2]")
    if C.pipe(fds) ~= 0 then
        error("pipe: " .. errno_str())
    end

    local pid = (opts.fork or C.fork)()
    if pid < 0 then
        C.close(fds[0])
        C.close(fds[1])
        error("fork: " .. errno_str())
    end

    if pid == 0 then
        -- the child: whatever happens, it ends in _exit below
        C.alarm(opts.alarm or _M.CHILD_ALARM)
        C.close(fds[0])
        if parent then
            C.prctl(PR_SET_PDEATHSIG, ul(SIGKILL), ul(0), ul(0), ul(0))
            if C.getppid() ~= parent then
                C._exit(98)     -- the parent died before the line above
            end
        end
        local ok, ret = pcall(fn, ...)
        local code = 0
        if not ok then
            write_all(fds[1], tostring(ret))
            code = 99
        elseif type(ret) == "number" then
            code = ret
        elseif ret == false then
            code = 1
        end
        C._exit(code)
    end

    C.close(fds[1])
    children[pid] = { err_fd = fds[0] }
    return pid
end

local no_opts = {}

-- syntax: pid = proc.spawn(fn, ...): spawn_with() with the defaults
function _M.spawn(fn, ...)
    return _M.spawn_with(no_opts, fn, ...)
end

local function decode(pid, status)
    local child = children[pid]
    children[pid] = nil
    local msg = ""
    if child then
        msg = read_all(child.err_fd)
        C.close(child.err_fd)
    end
    local low = band(status, 0x7f)
    if low == 0 then
        return { how = "exit", code = band(rshift(status, 8), 0xff),
                 msg = msg }
    end
    return { how = "signal", sig = low, msg = msg }
end

-- Reaps pid; waits at most timeout seconds (default 30), then SIGKILLs
-- and reaps it.  Returns { how = "exit", code = n, msg = s },
-- { how = "signal", sig = n, msg = s } or { how = "timeout", ... }.
function _M.wait(pid, timeout)
    local deadline = _M.now() + (timeout or 30)
    local pause = 0.0005
    while true do
        local r = C.waitpid(pid, status_buf, WNOHANG)
        if r == pid then
            return decode(pid, status_buf[0])
        end
        if r < 0 and ffi.errno() ~= EINTR then
            children[pid] = nil
            error("waitpid(" .. pid .. "): " .. errno_str())
        end
        if _M.now() > deadline then
            C.kill(pid, SIGKILL)
            C.waitpid(pid, status_buf, 0)
            local res = decode(pid, status_buf[0])
            res.how = "timeout"
            return res
        end
        _M.sleep(pause)
        if pause < 0.01 then
            pause = pause * 2
        end
    end
end

-- The child's result if it has ended (and reaps it), nil while it runs.
function _M.try_wait(pid)
    local r = C.waitpid(pid, status_buf, WNOHANG)
    if r == pid then
        return decode(pid, status_buf[0])
    end
    if r < 0 and ffi.errno() ~= EINTR then
        children[pid] = nil
        error("waitpid(" .. pid .. "): " .. errno_str())
    end
    return nil
end

-- Waits for all of pids within one shared deadline; returns the results
-- in the same order.
function _M.wait_all(pids, timeout)
    local deadline = _M.now() + (timeout or 30)
    local res = {}
    for i = 1, #pids do
        local left = deadline - _M.now()
        res[i] = _M.wait(pids[i], left > 0 and left or 0)
    end
    return res
end

function _M.kill(pid, sig)
    if C.kill(pid, sig or SIGKILL) ~= 0 then
        error("kill(" .. pid .. "): " .. errno_str())
    end
end

-- "R", "S", "Z", ... from /proc/<pid>/stat, nil if gone
function _M.state(pid)
    local f = io.open("/proc/" .. pid .. "/stat", "rb")
    if not f then
        return nil
    end
    local s = f:read("*a")
    f:close()
    return s:match("%) (%a)")
end

-- true once pid is seen asleep in a futex wait (within timeout seconds)
function _M.await_futex_sleep(pid, timeout)
    local deadline = _M.now() + timeout
    repeat
        local f = io.open("/proc/" .. pid .. "/wchan", "rb")
        local wchan = f and f:read("*a") or ""
        if f then
            f:close()
        end
        if wchan:find("futex", 1, true) then
            return true
        end
        if wchan == "" or wchan == "0" then
            -- wchan hidden: the syscall number (futex on x86_64 and arm64)
            f = io.open("/proc/" .. pid .. "/syscall", "rb")
            local sc = f and f:read("*l")
            if f then
                f:close()
            end
            local nr = sc and tonumber(sc:match("^(%d+)"))
            if (ffi.arch == "x64" and nr == 202)
               or (ffi.arch == "arm64" and nr == 98)
            then
                return true
            end
        end
        _M.sleep(0.001)
    until _M.now() > deadline
    return false
end

-- Kills (SIGKILL) and reaps every child still ours; returns their pids.
function _M.reap_all()
    local left = {}
    for pid in pairs(children) do
        left[#left + 1] = pid
    end
    for _, pid in ipairs(left) do
        C.kill(pid, SIGKILL)
        C.waitpid(pid, status_buf, 0)
        decode(pid, status_buf[0])
    end
    return left
end

-- A fresh private directory for zone files (tmpfs when available).
function _M.tmpdir()
    for _, base in ipairs { "/dev/shm", os.getenv("TMPDIR") or "/tmp" } do
        local template = ffi.new("char[?]", #base + 24)
        ffi.copy(template, base .. "/shmlock-spec-XXXXXX")
        if C.mkdtemp(template) ~= nil then
            return ffi.string(template)
        end
    end
    error("mkdtemp: " .. errno_str())
end

function _M.rmtree(dir)
    assert(type(dir) == "string" and dir:match("/shmlock%-spec%-%w+$"),
           "refusing to remove " .. tostring(dir))
    os.execute("rm -rf '" .. dir .. "'")
end

return _M
