-- resty.shmlock.internal.log (internal): the rare events an operator must
-- see, reported one way by every module.
--
-- Inside nginx they go to error.log at the event's level ("error", "warn",
-- "notice", "info", as nginx names them), through lua-resty-core's
-- ngx.errlog.raw_log where it loads: the line then reads "shmlock: ..." as
-- the library's own, not "[lua] log.lua:NN: event(): shmlock: ...", the
-- place in this file that ngx.log would name.  ngx.log otherwise.  Outside nginx
-- nothing is printed unless the application set a function with
-- shdict.set_logger(fn): fn(level, message), level one of those strings.
-- Whether this VM runs inside nginx is asked at each event (they are rare),
-- so that a module loaded before a stand-in ngx still reports through it.

local nginx = require "resty.shmlock.internal.nginx"
local core = require "resty.shmlock.internal.core"

local type = type
local tostring = tostring
local pcall = pcall
local error = error
local require = require

local _M = {}

local LEVELS = { error = "ERR", warn = "WARN", notice = "NOTICE",
                 info = "INFO" }

local logger = nil

-- raw_log of lua-resty-core's ngx.errlog, once looked for (false: absent,
-- e.g. an nginx without lua-resty-core, or a stand-in ngx in the specs)
local raw_log = nil

local function find_raw_log(ngx)
    raw_log = false
    local config = ngx.config
    if type(config) == "table" and config.ngx_lua_version then
        local ok, errlog = pcall(require, "ngx.errlog")
        if ok and type(errlog) == "table"
           and type(errlog.raw_log) == "function" then
            raw_log = errlog.raw_log
        end
    end
    return raw_log
end

-- syntax: log.set_logger(fn)   (fn nil: nothing is printed outside nginx)
function _M.set_logger(fn)
    if fn ~= nil and type(fn) ~= "function" then
        error('bad "logger" argument', 3)
    end
    logger = fn
end

-- syntax: log.event(level, message)
-- level: "error", "warn", "notice" or "info".  Never raises: a failing
-- application logger is ignored (the event is not worth a failed call).
function _M.event(level, msg)
    local ngx = nginx.api()
    if ngx then
        local lvl = ngx[LEVELS[level]]
        if not lvl then
            return
        end
        local raw = raw_log
        if raw == nil then
            raw = find_raw_log(ngx)
        end
        if raw and pcall(raw, lvl, "shmlock: " .. msg) then
            return
        end
        local log = ngx.log
        if type(log) == "function" then
            log(lvl, "shmlock: ", msg)
        end
        return
    end
    if logger then
        pcall(logger, level, "shmlock: " .. msg)
    end
end

-- shard recoveries this process ran, as far as reported
-- (under the FFI, the core's counter word itself: one load, no call; read
-- as an int32 and compared with an int32 cell, so that a trace compares
-- two integers, no conversion to a number)
local counter = core.ffi and core.C.shmlock_recoveries()
local read = core.recoveries
local reported = read()

-- syntax: log.recoveries(zone_name)
-- After a call in that zone: if this process recovered shards since the
-- last report (it took over the mutex of a holder that died in the middle
-- of an update, and rolled the update back), a warning.  One load of the
-- core's counter word (no call): cheap enough for every store and lock.
local function report(name, n)
    -- (the counter is 32 bits: a count across its wrap stays right)
    local count = (n - reported) % 4294967296
    reported = n
    _M.event("warn", 'zone "' .. tostring(name) .. '": ' .. count
             .. " shard(s) recovered after their mutex holder died in"
             .. " the middle of an update (rolled back)")
end

if counter then
    local ffi = require "ffi"
    counter = ffi.cast("const volatile int32_t *", counter)
    local last = ffi.new("int32_t[1]", counter[0])
    reported = counter[0]
    function _M.recoveries(name)
        local n = counter[0]
        if n ~= last[0] then
            last[0] = n
            report(name, n)
        end
    end
    -- syntax: yes = log.recovered(): whether log.recoveries has a report
    -- to make (one load and a compare: a hot path calls it, and
    -- recoveries only then)
    function _M.recovered()
        return counter[0] ~= last[0]
    end
else
    function _M.recovered()
        return read() ~= reported
    end
    function _M.recoveries(name)
        local n = read()
        if n ~= reported then
            report(name, n)
        end
    end
end

return _M
