-- helpers.redis_server: a private redis-server for the Redis lock specs.
--
-- Started on a free 127.0.0.1 port with no persistence (--save "",
-- --appendonly no) in a temporary directory, in the foreground
-- (--daemonize no) as a background job of the shell.  It runs under
-- timeout(1), so a server whose spec run died without its teardown still
-- goes away on its own.  stop() is safe to call twice and on a paused
-- server; restart() brings a new server up on the same port.
--
-- Neither the server nor its timeout(1) is our child: the moment one
-- exits, its pid is free, and a signal sent to that pid reaches whatever
-- process took it next (with 32768 pids and the soak and spec/13 making
-- the kernel hand out recent pids again, within seconds).  So each is
-- signalled through a pidfd (pidfd_open, Linux 5.3), which names that one
-- process; by pid only where the kernel has none.

local ffi = require "ffi"
local socket = require "socket"
local checkout = require "helpers.checkout"

local ok_redis, redis = pcall(require, "redis")

pcall(ffi.cdef, "int kill(int pid, int sig);")
pcall(ffi.cdef, "long syscall(long number, ...);")
pcall(ffi.cdef, "int close(int fd);")
local C = ffi.C
local long = ffi.typeof("long")
local SYS_PIDFD_OPEN, SYS_PIDFD_SEND_SIGNAL = 434, 424    -- every arch

local SIGKILL, SIGTERM, SIGCONT, SIGSTOP = 9, 15, 18, 19
local MAX_LIFETIME = 300     -- seconds, the safety net of timeout(1)
local REDIS_SERVER = os.getenv("REDIS_SERVER") or "redis-server"

local _M = {}
local mt = { __index = _M }

local function shell_line(cmd)
    local p = assert(io.popen(cmd))
    local line = p:read("*l")
    p:close()
    return line
end

-- a process to signal: { pid = n, fd = its pidfd or nil }
local function process(pid)
    if not pid then
        return nil
    end
    local fd = tonumber(C.syscall(SYS_PIDFD_OPEN, long(pid), long(0)))
    return { pid = pid, fd = fd >= 0 and fd or nil }
end

-- true when the signal was delivered (sig 0: the process still exists)
local function signal(p, sig)
    if not p then
        return false
    end
    if p.fd then
        return tonumber(C.syscall(SYS_PIDFD_SEND_SIGNAL, long(p.fd),
                                  long(sig), long(0), long(0))) == 0
    end
    return C.kill(p.pid, sig) == 0
end

local function forget(p)
    if p and p.fd then
        C.close(p.fd)
        p.fd = nil
    end
end

local function alive(p)
    return signal(p, 0)
end

local read_file = checkout.read_file

-- raises with the reason when this machine cannot run the specs
function _M.check()
    if not ok_redis then
        error("the Redis lock specs need lua-redis (`require \"redis\"`, "
              .. "Debian package lua-redis; scripts/deps.sh installs it): "
              .. tostring(redis), 2)
    end
    local path = shell_line("command -v " .. REDIS_SERVER .. " 2>/dev/null")
    if not path or path == "" then
        error("the Redis lock specs need redis-server on the PATH (Debian "
              .. "package redis-server; scripts/deps.sh installs it)", 2)
    end
    return path
end

local function free_port()
    local s = assert(socket.bind("127.0.0.1", 0))
    local _, port = s:getsockname()
    s:close()
    return tonumber(port)
end

function _M.connect(port, timeout)
    return redis.connect("127.0.0.1", port, timeout or 2)
end

local function answers(port)
    local ok, c = pcall(_M.connect, port, 0.2)
    if not ok then
        return false
    end
    local pong_ok, pong = pcall(c.ping, c)
    pcall(c.quit, c)
    return pong_ok and pong == true
end

function _M.spawn(self)
    local dir = self.dir
    -- LD_PRELOAD is dropped: `make test-asan` preloads libasan for luajit,
    -- which redis-server (jemalloc) does not want
    local cmd = string.format(
        "env -u LD_PRELOAD timeout -s TERM %d %s --port %d --bind 127.0.0.1"
        .. " --save '' --appendonly no --dir %s --daemonize no"
        .. " --pidfile %s/redis.pid --logfile %s/redis.log %s"
        .. " </dev/null >/dev/null 2>&1 & echo $!",
        MAX_LIFETIME, REDIS_SERVER, self.port, dir, dir, dir,
        self.args or "")
    os.remove(dir .. "/redis.pid")
    self.wrapper = process(tonumber(shell_line(cmd)))

    local deadline = socket.gettime() + 5
    while socket.gettime() < deadline do
        if answers(self.port) then
            local pid = tonumber(read_file(dir .. "/redis.pid") or "")
            if pid then
                self.pid = pid
                self.process = process(pid)
                return true
            end
        end
        if not alive(self.wrapper) then
            break
        end
        socket.sleep(0.02)
    end
    return false
end

-- start(port?, args?): a running server answering PING; raises with its
-- log if it does not come up.  args: more of redis-server's options, as
-- shell words (e.g. "--enable-debug-command local"), kept for restart().
function _M.start(port, args)
    _M.check()
    local dir = shell_line("mktemp -d /tmp/shmlock-redis.XXXXXX")
    assert(dir and dir ~= "", "mktemp -d failed")
    local self = setmetatable({ dir = dir, args = args }, mt)
    for _ = 1, port and 1 or 5 do
        self.port = port or free_port()
        if self:spawn() then
            return self
        end
        self:stop()     -- e.g. the port was taken in between: another one
    end
    local log = read_file(dir .. "/redis.log") or "(no log)"
    os.execute("rm -rf '" .. dir .. "'")
    error("redis-server did not answer PING on 127.0.0.1:"
          .. tostring(self.port) .. "; its log:\n" .. log, 2)
end

function _M.stop(self)
    local server, wrapper = self.process, self.wrapper
    signal(server, SIGCONT)           -- a paused server cannot handle TERM
    signal(server, SIGTERM)
    signal(wrapper, SIGTERM)
    local deadline = socket.gettime() + 5
    while (alive(server) or answers(self.port))
          and socket.gettime() < deadline
    do
        socket.sleep(0.01)
    end
    signal(server, SIGKILL)
    forget(server)
    forget(wrapper)
    self.pid, self.process, self.wrapper = nil, nil, nil
end

-- a new server on the same port (its data gone: no persistence)
function _M.restart(self)
    self:stop()
    if not self:spawn() then
        error("redis-server did not come back on 127.0.0.1:" .. self.port
              .. "; its log:\n" .. (read_file(self.dir .. "/redis.log") or ""))
    end
end

function _M.pause(self)
    signal(self.process, SIGSTOP)
end

function _M.resume(self)
    signal(self.process, SIGCONT)
end

function _M.destroy(self)
    self:stop()
    if self.dir then
        os.execute("rm -rf '" .. self.dir .. "'")
        self.dir = nil
    end
end

function _M.client(self, timeout)
    return _M.connect(self.port, timeout)
end

-- syntax: ids = redis_server.waiters(c)
-- The clients blocked in XREAD now, by CLIENT LIST (c: a lua-redis
-- client): the hosts whose Redis waiter waits on a key's wake stream
-- (resty.shmlock.redis.wake), or the fleet cache's waits.  Their ids, for
-- CLIENT KILL ID.
function _M.waiters(c)
    local ids = {}
    for line in c:raw_cmd("CLIENT LIST"):gmatch("[^\n]+") do
        if line:find(" cmd=xread ", 1, true)
           and line:find(" flags=[%a]*b") then
            ids[#ids + 1] = line:match("^id=(%d+) ")
        end
    end
    return ids
end

return _M
