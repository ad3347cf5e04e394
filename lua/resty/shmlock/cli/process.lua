-- resty.shmlock.cli.process (internal): what `shmlock run` needs from
-- the system to run a command: fork, exec, wait, pipes, process groups
-- and the terminal, and signals taken synchronously through a signalfd
-- (Linux, through the FFI; the names are prefixed to keep clear of other
-- modules' declarations of libc).

local ffi = require "ffi"
local bit = require "bit"
local core = require "resty.shmlock.internal.core"
local fs = require "resty.shmlock.cli.fs"

local C = ffi.C
local ffi_new = ffi.new
local ffi_str = ffi.string
local band, rshift = bit.band, bit.rshift
local tonumber = tonumber
local find = string.find
local io_open = io.open

pcall(ffi.cdef, [[
typedef struct { unsigned long val[16]; } shmlock_cli_sigset_t;
struct shmlock_cli_pollfd { int fd; short events; short revents; };
struct shmlock_cli_siginfo { uint32_t signo; uint8_t rest[124]; };
int shmlock_cli_fork(void) __asm__("fork");
int shmlock_cli_execvp(const char *file, char *const argv[])
    __asm__("execvp");
int shmlock_cli_waitpid(int pid, int *status, int options)
    __asm__("waitpid");
int shmlock_cli_kill(int pid, int sig) __asm__("kill");
void shmlock_cli_exit(int status) __asm__("_exit");
int shmlock_cli_pipe2(int fds[2], int flags) __asm__("pipe2");
long shmlock_cli_read(int fd, void *buf, size_t count) __asm__("read");
long shmlock_cli_write(int fd, const void *buf, size_t count)
    __asm__("write");
int shmlock_cli_close(int fd) __asm__("close");
int shmlock_cli_open(const char *path, int flags, int mode) __asm__("open");
int shmlock_cli_dup2(int fd, int to) __asm__("dup2");
int shmlock_cli_poll(struct shmlock_cli_pollfd *fds, unsigned long nfds,
                     int timeout) __asm__("poll");
int shmlock_cli_sigemptyset(shmlock_cli_sigset_t *set)
    __asm__("sigemptyset");
int shmlock_cli_sigaddset(shmlock_cli_sigset_t *set, int sig)
    __asm__("sigaddset");
int shmlock_cli_sigprocmask(int how, const shmlock_cli_sigset_t *set,
                            shmlock_cli_sigset_t *old) __asm__("sigprocmask");
int shmlock_cli_signalfd(int fd, const shmlock_cli_sigset_t *mask,
                         int flags) __asm__("signalfd");
void *shmlock_cli_signal(int sig, void *handler) __asm__("signal");
int shmlock_cli_getpid(void) __asm__("getpid");
int shmlock_cli_getppid(void) __asm__("getppid");
int shmlock_cli_getpgrp(void) __asm__("getpgrp");
int shmlock_cli_setpgid(int pid, int pgid) __asm__("setpgid");
int shmlock_cli_setsid(void) __asm__("setsid");
int shmlock_cli_getsid(int pid) __asm__("getsid");
int shmlock_cli_isatty(int fd) __asm__("isatty");
int shmlock_cli_tcgetpgrp(int fd) __asm__("tcgetpgrp");
int shmlock_cli_tcsetpgrp(int fd, int pgrp) __asm__("tcsetpgrp");
int shmlock_cli_tcgetsid(int fd) __asm__("tcgetsid");
int shmlock_cli_prctl(int option, unsigned long a2, unsigned long a3,
                      unsigned long a4, unsigned long a5) __asm__("prctl");
]])

local SIG_BLOCK, SIG_SETMASK = 0, 2
local O_RDWR = 2
local O_CLOEXEC = 0x80000
local SFD_CLOEXEC = O_CLOEXEC
local WNOHANG, WUNTRACED = 1, 2
local POLLIN = 1
local EINTR = 4
local ECHILD = 10
local EPERM = 1
local PR_SET_PDEATHSIG, PR_SET_NAME = 1, 15

local _M = {
    SIGHUP = 1, SIGINT = 2, SIGQUIT = 3, SIGKILL = 9, SIGPIPE = 13,
    SIGTERM = 15, SIGCHLD = 17, SIGCONT = 18, SIGSTOP = 19, SIGTSTP = 20,
    SIGTTIN = 21, SIGTTOU = 22,
}

local status_buf = ffi_new("int[1]")
local fds_buf = ffi_new("int[2]")
local byte_buf = ffi_new("char[256]")
local info = ffi_new("struct shmlock_cli_siginfo")

local function ul(n)
    return ffi.cast("unsigned long", n)
end

-- syntax: msg = process.error(): the system's message for errno
function _M.error()
    return core.sys_strerror(ffi.errno())
end

local function sigset(signals)
    local set = ffi_new("shmlock_cli_sigset_t")
    C.shmlock_cli_sigemptyset(set)
    for _, sig in ipairs(signals) do
        C.shmlock_cli_sigaddset(set, sig)
    end
    return set
end

-- syntax: old_mask = process.block(signals)
-- Blocks the signals (a list of numbers); the mask before, to restore.
function _M.block(signals)
    local old = ffi_new("shmlock_cli_sigset_t")
    C.shmlock_cli_sigprocmask(SIG_BLOCK, sigset(signals), old)
    return old
end

-- syntax: sigfd, old_mask = process.take_signals(signals, also_blocked?)
-- Blocks the signals (a list of numbers) and returns a signalfd that
-- reports them, and the mask to restore in a child; also_blocked: more
-- signals blocked but not reported (their default action would stop or
-- end this process: SIGTTOU, SIGPIPE).  nil, err.
function _M.take_signals(signals, also_blocked)
    local set = sigset(signals)
    local all = sigset(signals)
    for _, sig in ipairs(also_blocked or {}) do
        C.shmlock_cli_sigaddset(all, sig)
    end
    local old = ffi_new("shmlock_cli_sigset_t")
    if C.shmlock_cli_sigprocmask(SIG_BLOCK, all, old) ~= 0 then
        return nil, _M.error()
    end
    local fd = C.shmlock_cli_signalfd(-1, set, SFD_CLOEXEC)
    if fd < 0 then
        return nil, _M.error()
    end
    return fd, old
end

-- syntax: process.restore_signals(old_mask)
function _M.restore_signals(old)
    C.shmlock_cli_sigprocmask(SIG_SETMASK, old, nil)
end

-- syntax: process.default_signal(sig)
-- The signal's default action back.  For SIGCHLD this matters: ignored
-- (SIG_IGN, inherited across exec from a caller such as perl's or
-- python's $SIG{CHLD} = "IGNORE"), children are reaped by the kernel and
-- waitpid() can never give their status.
function _M.default_signal(sig)
    C.shmlock_cli_signal(sig, nil)
end

-- syntax: rfd, wfd = process.pipe(): close-on-exec; nil, err
function _M.pipe()
    if C.shmlock_cli_pipe2(fds_buf, O_CLOEXEC) ~= 0 then
        return nil, _M.error()
    end
    return fds_buf[0], fds_buf[1]
end

-- syntax: pid = process.fork(): 0 in the child; nil, err
function _M.fork()
    local pid = C.shmlock_cli_fork()
    if pid < 0 then
        return nil, _M.error()
    end
    return pid
end

-- syntax: err = process.exec(argv): execvp; returns only on failure, with
-- the system's message and errno
function _M.exec(argv)
    local n = #argv
    local cargv = ffi_new("char *[?]", n + 1)
    local keep = {}
    for i = 1, n do
        keep[i] = ffi_new("char[?]", #argv[i] + 1, argv[i])
        cargv[i - 1] = keep[i]
    end
    cargv[n] = nil
    C.shmlock_cli_execvp(keep[1], cargv)
    local errno = ffi.errno()
    return _M.error(), errno
end

-- syntax: process.exit(status): _exit, no stdio flushing nor finalizers
function _M.exit(status)
    C.shmlock_cli_exit(status)
end

function _M.close(fd)
    C.shmlock_cli_close(fd)
end

-- syntax: ok = process.null(fd): /dev/null opened in place of fd
function _M.null(fd)
    local null = C.shmlock_cli_open("/dev/null", O_RDWR, 0)
    if null < 0 then
        return false
    end
    local ok = C.shmlock_cli_dup2(null, fd) == fd
    if null ~= fd then
        C.shmlock_cli_close(null)
    end
    return ok
end

-- syntax: ok = process.write(fd, s)
function _M.write(fd, s)
    local off = 0
    while off < #s do
        local n = C.shmlock_cli_write(fd, ffi.cast("const char *", s) + off,
                                      #s - off)
        if n < 0 then
            if ffi.errno() ~= EINTR then
                return false
            end
        else
            off = off + tonumber(n)
        end
    end
    return true
end

-- syntax: s, errno = process.read(fd): what one read() gives ("" at end
-- of file; nil and errno on an error, EINTR when a signal cut it short)
function _M.read(fd)
    local n = C.shmlock_cli_read(fd, byte_buf, 256)
    if n < 0 then
        return nil, ffi.errno()
    end
    return ffi_str(byte_buf, n)
end
_M.EINTR = EINTR

-- syntax: sig = process.signal(sigfd): the next signal taken (a number)
function _M.signal(fd)
    local n = C.shmlock_cli_read(fd, info, ffi.sizeof(info))
    if n ~= ffi.sizeof(info) then
        return nil
    end
    return tonumber(info.signo)
end

-- syntax: ready = process.poll(fds, ms)
-- fds: a list of file descriptors (none: a sleep); ms: the longest wait
-- (ms, -1: none).  Returns a table fd -> true for those readable (or at
-- end of file).
local pfds = ffi_new("struct shmlock_cli_pollfd[4]")
function _M.poll(fds, ms)
    for i, fd in ipairs(fds) do
        pfds[i - 1].fd, pfds[i - 1].events, pfds[i - 1].revents = fd, POLLIN,
                                                                  0
    end
    local ready = {}
    if C.shmlock_cli_poll(pfds, #fds, ms) > 0 then
        for i, fd in ipairs(fds) do
            if pfds[i - 1].revents ~= 0 then
                ready[fd] = true
            end
        end
    end
    return ready
end

-- syntax: status, stopped = process.reap(pid, untraced?)
-- Without waiting: nil while the child runs; else its status as a shell
-- gives it (the exit code, or 128 + the signal that killed it).  With
-- untraced, a child that stopped: nil, and the signal that stopped it.
-- false, err, errno when it cannot be waited for (ECHILD: not a child of
-- ours, or reaped by the kernel already).
function _M.reap(pid, untraced)
    local r = C.shmlock_cli_waitpid(pid, status_buf,
                                    untraced and WNOHANG + WUNTRACED
                                    or WNOHANG)
    if r == 0 then
        return nil
    end
    if r ~= pid then
        local errno = ffi.errno()
        if errno == EINTR then
            return nil
        end
        return false, _M.error(), errno
    end
    local st = status_buf[0]
    local sig = band(st, 0x7f)
    if sig == 0x7f then
        return nil, band(rshift(st, 8), 0xff)        -- stopped
    end
    if sig == 0 then
        return band(rshift(st, 8), 0xff)
    end
    return 128 + sig
end
_M.ECHILD = ECHILD

function _M.kill(pid, sig)
    return C.shmlock_cli_kill(pid, sig) == 0
end

-- whether /proc/<pid>/stat shows a process of group pgid that is not a
-- zombie
local function live_in(pid, pgid)
    local f = io_open("/proc/" .. pid .. "/stat", "rb")
    if not f then
        return false
    end
    local stat = f:read("*a") or ""
    f:close()
    -- "pid (comm) state ppid pgrp ...": comm may hold any byte
    local state, pgrp = stat:match("^.*%) (%a) %-?%d+ (%-?%d+) ")
    return tonumber(pgrp) == pgid and state ~= "Z" and state ~= "X"
end

-- whether /proc shows a process of group pgid that is not a zombie (its
-- leader first: most often COMMAND itself); nil when /proc cannot be read
local function live_member(pgid)
    if live_in(pgid, pgid) then
        return true
    end
    local names = fs.names("/proc")
    if not names then
        return nil
    end
    for _, name in ipairs(names) do
        if not find(name, "[^%d]") and live_in(name, pgid) then
            return true
        end
    end
    return false
end

-- syntax: alive = process.group_alive(pgid, thorough?)
-- Whether process group pgid has a process: kill(-pgid, 0) (EPERM says
-- there is one, of another user).  A zombie counts there until its
-- parent reaps it, which an orphan's reaper (init, a container's first
-- process) may do late or never; thorough: a group kill finds alive is
-- looked for in /proc, where a group of zombies only is gone.
function _M.group_alive(pgid, thorough)
    if C.shmlock_cli_kill(-pgid, 0) ~= 0 then
        -- EPERM: only processes of other users (a setuid program), which
        -- /proc may hide (hidepid): alive
        return ffi.errno() == EPERM
    end
    if thorough then
        return live_member(pgid) ~= false
    end
    return true
end

function _M.getpid()
    return C.shmlock_cli_getpid()
end

function _M.getppid()
    return C.shmlock_cli_getppid()
end

function _M.getpgrp()
    return C.shmlock_cli_getpgrp()
end

-- syntax: ok = process.setpgid(pid, pgid)
function _M.setpgid(pid, pgid)
    return C.shmlock_cli_setpgid(pid, pgid) == 0
end

-- syntax: ok = process.setsid(): a session (and process group) of its own,
-- without a controlling terminal
function _M.setsid()
    return C.shmlock_cli_setsid() >= 0
end

-- syntax: fd = process.terminal()
-- Which of fds 0, 1, 2 is this process's controlling terminal (a
-- terminal of its session), or nil.
function _M.terminal()
    local sid = C.shmlock_cli_getsid(0)
    for fd = 0, 2 do
        if C.shmlock_cli_isatty(fd) == 1
           and C.shmlock_cli_tcgetsid(fd) == sid then
            return fd
        end
    end
    return nil
end

-- syntax: pgrp = process.foreground(fd): the terminal's foreground process
-- group (-1 when it cannot tell)
function _M.foreground(fd)
    return C.shmlock_cli_tcgetpgrp(fd)
end

-- syntax: ok = process.set_foreground(fd, pgrp)
-- The terminal's foreground becomes pgrp, even from a background process
-- group (SIGTTOU blocked around the call, as a shell does).
function _M.set_foreground(fd, pgrp)
    local old = _M.block { _M.SIGTTOU }
    local ok = C.shmlock_cli_tcsetpgrp(fd, pgrp) == 0
    _M.restore_signals(old)
    return ok
end

-- syntax: process.die_with_parent(on)
-- on: SIGKILL when the parent dies (prctl PR_SET_PDEATHSIG); false: no
-- more.
function _M.die_with_parent(on)
    C.shmlock_cli_prctl(PR_SET_PDEATHSIG, ul(on and _M.SIGKILL or 0), ul(0),
                        ul(0), ul(0))
end

-- syntax: process.set_name(name): the name ps and top show (15 bytes)
function _M.set_name(name)
    C.shmlock_cli_prctl(PR_SET_NAME, ffi.cast("unsigned long",
                                              ffi.cast("const char *", name)),
                        ul(0), ul(0), ul(0))
end

return _M
