-- resty.shmlock.cli.process (internal): what `shmlock run` needs from
-- the system to run a command: fork, exec, wait, pipes, and signals taken
-- synchronously through a signalfd (Linux, through the FFI; the names are
-- prefixed to keep clear of other modules' declarations of libc).

local ffi = require "ffi"
local bit = require "bit"
local core = require "resty.shmlock.internal.core"

local C = ffi.C
local ffi_new = ffi.new
local ffi_str = ffi.string
local band, rshift = bit.band, bit.rshift
local tonumber = tonumber

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
]])

local SIG_BLOCK, SIG_SETMASK = 0, 2
local O_CLOEXEC = 0x80000
local SFD_CLOEXEC = O_CLOEXEC
local WNOHANG = 1
local POLLIN = 1
local EINTR = 4

local _M = {
    SIGHUP = 1, SIGINT = 2, SIGQUIT = 3, SIGKILL = 9, SIGTERM = 15,
    SIGCHLD = 17,
}

local status_buf = ffi_new("int[1]")
local fds_buf = ffi_new("int[2]")
local byte_buf = ffi_new("char[256]")
local info = ffi_new("struct shmlock_cli_siginfo")

-- syntax: msg = process.error(): the system's message for errno
function _M.error()
    return core.sys_strerror(ffi.errno())
end

-- syntax: sigfd, old_mask = process.take_signals(signals)
-- Blocks the signals (a list of numbers) and returns a signalfd that
-- reports them, and the mask to restore in a child; nil, err.
function _M.take_signals(signals)
    local set = ffi_new("shmlock_cli_sigset_t")
    local old = ffi_new("shmlock_cli_sigset_t")
    C.shmlock_cli_sigemptyset(set)
    for _, sig in ipairs(signals) do
        C.shmlock_cli_sigaddset(set, sig)
    end
    if C.shmlock_cli_sigprocmask(SIG_BLOCK, set, old) ~= 0 then
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

-- syntax: s = process.read(fd): what one read() gives ("" at end of file,
-- nil on an error)
function _M.read(fd)
    local n = C.shmlock_cli_read(fd, byte_buf, 256)
    if n < 0 then
        return nil
    end
    return ffi_str(byte_buf, n)
end

-- syntax: sig = process.signal(sigfd): the next signal taken (a number)
function _M.signal(fd)
    local n = C.shmlock_cli_read(fd, info, ffi.sizeof(info))
    if n ~= ffi.sizeof(info) then
        return nil
    end
    return tonumber(info.signo)
end

-- syntax: ready = process.poll(fds, ms)
-- fds: a list of file descriptors; ms: the longest wait (ms, -1: none).
-- Returns a table fd -> true for those readable (or at end of file).
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

-- syntax: status = process.reap(pid)
-- Without waiting: nil while the child runs; else its status as a shell
-- gives it (the exit code, or 128 + the signal that killed it).
function _M.reap(pid)
    local r = C.shmlock_cli_waitpid(pid, status_buf, WNOHANG)
    if r ~= pid then
        return nil
    end
    local st = status_buf[0]
    local sig = band(st, 0x7f)
    if sig == 0 then
        return band(rshift(st, 8), 0xff)
    end
    return 128 + sig
end

function _M.kill(pid, sig)
    return C.shmlock_cli_kill(pid, sig) == 0
end

return _M
