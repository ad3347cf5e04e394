-- resty.shmlock.semaphore: a counting semaphore shared by every process
-- and nginx worker of the host that opens the zone (docs/semaphore.md).
--
--     local semaphore = require "resty.shmlock.semaphore"
--     local sem = assert(semaphore:new("my_zone", { permits = 4 }))
--     local elapsed, err = sem:acquire("backend")
--     ...
--     sem:release()
--
-- The permits of a key are records in the zone's lock slots, counted by
-- the C core under the key's shard mutex (src/group.h): never more
-- holders than the acquirer's `permits`, a dead process's permit back at
-- the next acquire that finds the key full, a lease (`exptime`) per
-- permit.  While the object holds a permit, a handle (a cdata with a
-- finalizer) keeps what the release needs, so that a collected object
-- gives its permit back; a copy of the object in a forked child holds
-- nothing (the handle keeps the pid that acquired, token.ours).
--
-- Waiting: outside nginx, on the zone's wait word of the key (a release
-- wakes a sleeper at once), in steps that look for dead holders between
-- them; inside nginx, ngx.sleep steps (resty.lock's step, ratio,
-- max_step) on a monotonic deadline; where the phase cannot yield, nil,
-- "cannot wait in <phase> phase", unless blocking_timeout lets the worker
-- block that long.

-- Without the FFI (PUC Lua) the semaphore is not bound yet: the module
-- loads, and new() answers nil and why, as the lock's does.
if not require("resty.shmlock.internal.core").ffi then
    local why = "resty.shmlock.semaphore: not available under " .. _VERSION
                .. " yet (LuaJIT only for now: docs/every-lua.md)"
    return {
        _VERSION = require "resty.shmlock.version",
        new = function() return nil, why end,
    }
end

local ffi = require "ffi"
local C = require "resty.shmlock.lib"
local shdict = require "resty.shmlock.shdict"
local version = require "resty.shmlock.version"
local errors = require "resty.shmlock.errors"
local nginx = require "resty.shmlock.internal.nginx"
local key_check = require("resty.shmlock.internal.key").check
local token = require "resty.shmlock.internal.token"
local options = require "resty.shmlock.internal.options"
local clock = require "resty.shmlock.internal.clock"
local backoff = require "resty.shmlock.internal.backoff"

local ffi_new = ffi.new
local ffi_gc = ffi.gc
local ffi_copy = ffi.copy
local type = type
local tostring = tostring
local error = error
local setmetatable = setmetatable
local getmetatable = getmetatable
local floor = math.floor
local min = math.min
local max = math.max
local tonumber = tonumber
local now_ms = clock.now_ms
local next_step = backoff.next
local MIN_SLEEP = backoff.MIN_SLEEP
local ours = token.ours
local ms = options.ms

local OK = C.SHMLOCK_OK
local EXISTS = C.SHMLOCK_EXISTS
local NOT_FOUND = C.SHMLOCK_NOT_FOUND
local TIMEOUT = C.SHMLOCK_TIMEOUT
local SEMAPHORE = C.SHMLOCK_SEMAPHORE
local PERMITS_MAX = C.SHMLOCK_GROUP_MAX

local ngx = nginx.api()
local in_nginx = ngx ~= nil
local get_phase = in_nginx and ngx.get_phase
local YIELDABLE = nginx.YIELDABLE

local _M = { _VERSION = version }
local mt = { __index = _M }

ffi.cdef([[
typedef struct {
    shmlock_zone_t    *zone;    /* NULL: holds nothing */
    int32_t            pid;     /* the process that acquired */
    int32_t            kind;
    uint32_t           key_len;
    uint32_t           pad;
    shmlock_ticket_t   ticket;
    char               key[?];
} shmlock_lua_permit_t;
]])

local permit_t = ffi.typeof("shmlock_lua_permit_t")
local ticket_t = ffi.typeof("shmlock_ticket_t[1]")
local count_t = ffi.typeof("uint32_t[1]")
local tk = ticket_t()           -- acquire's out-parameter
local count_out = count_t()

local ATTACH = { create = false }
local ids = 0                   -- owner ids of this VM's acquisitions


-- ---- the handle: a permit held, released when collected ----

local function give_back(cd)
    local zone = cd.zone
    if zone == nil then
        return nil
    end
    cd.zone = nil
    local rc
    -- a forked child's copy releases nothing: the permit is the parent's
    if ours(cd.pid) then
        rc = C.shmlock_group_release(zone, cd.kind, cd.key, cd.key_len,
                                     cd.ticket)
    end
    C.shmlock_zone_close(zone)
    return rc
end

local function handle(zone, kind, key, klen)
    local cd = ffi_gc(ffi_new(permit_t, klen), give_back)
    C.shmlock_zone_retain(zone)
    cd.zone = zone
    cd.pid = C.shmlock_self_pid()
    cd.kind = kind
    cd.key_len = klen
    ffi_copy(cd.key, key, klen)
    cd.ticket = tk[0]
    return cd
end

-- the handle of self's permit, if this process holds one
local function held(self)
    local cd = self.permit
    if cd == nil or cd.zone == nil or not ours(cd.pid) then
        return nil
    end
    return cd
end


-- ---- new ----

local function find(name)
    if type(name) == "table" then
        return name._zone and name or nil
    end
    if type(name) ~= "string" then
        return nil
    end
    return shdict.opened(name) or shdict.open(name, ATTACH)
end

local function check_permits(v)
    if v == nil then
        return 1
    end
    if type(v) ~= "number" or v ~= floor(v) or v < 1 or v > PERMITS_MAX then
        error("opts.permits must be an integer from 1 to " .. PERMITS_MAX, 3)
    end
    return v
end

-- syntax: sem, err = semaphore:new(dict_name_or_dict, opts?)
--         (semaphore.new(dict_name_or_dict, opts?) works too)
function _M.new(a, b, c)
    local dict_name, opts = b, c
    if a ~= _M and getmetatable(a) ~= mt then
        dict_name, opts = a, b
    end
    local exptime, timeout, step, ratio, max_step, blocking =
        options.lock(opts, "opts", 2)
    local permits = check_permits(opts and opts.permits)
    local dict = find(dict_name)
    if not dict then
        return nil, "dictionary not found"
    end
    return setmetatable({
        dict = dict, zone = dict._zone, permits = permits,
        exptime = exptime, timeout = timeout, step = step, ratio = ratio,
        max_step = max_step, blocking_timeout = blocking, permit = nil,
    }, mt)
end


-- ---- acquire ----

local function try(self, key, klen)
    ids = ids >= 0xffffffff and 1 or ids + 1
    return C.shmlock_group_acquire(self.zone, SEMAPHORE, key, klen, ids,
                                   self.permits, ms(self.exptime), tk)
end

-- dead holders and expired leases dropped; the permits held now
local function reclaim(zone, key, klen)
    local rc = C.shmlock_group_reclaim(zone, SEMAPHORE, key, klen, count_out)
    if rc ~= OK then
        return nil, errors[rc]
    end
    return tonumber(count_out[0])
end

-- outside nginx (or blocking where the phase cannot yield): sleeps on the
-- key's wait word, woken by a release, at most a step at a time
local function block(self, key, klen, timeout)
    local zone = self.zone
    local start = now_ms()
    local deadline = start + timeout * 1000
    local step = self.step
    local hash = C.shmlock_hash(key, klen)
    while true do
        local seq = C.shmlock_wait_begin(zone, hash)
        local rc = try(self, key, klen)
        if rc ~= EXISTS then
            C.shmlock_wait_end(zone, hash, seq, 0)
            return rc, (now_ms() - start) / 1000
        end
        local left = deadline - now_ms()
        if left <= 0 then
            C.shmlock_wait_end(zone, hash, seq, 0)
            return TIMEOUT
        end
        local woke = C.shmlock_wait_end(zone, hash, seq,
                                        min(step * 1000, left) * 1000)
        if woke == TIMEOUT then
            -- nobody released: a holder may have died
            reclaim(zone, key, klen)
            step = next_step(step, self.ratio, self.max_step)
        end
    end
end

-- inside nginx: ngx.sleep steps to a monotonic deadline
local function sleep_steps(self, key, klen, timeout)
    local zone = self.zone
    local start = now_ms()
    local deadline = start + timeout * 1000
    local step = self.step
    while true do
        local left = (deadline - now_ms()) / 1000
        if left < MIN_SLEEP then
            return TIMEOUT
        end
        ngx.sleep(max(MIN_SLEEP, min(step, left)))
        local rc = try(self, key, klen)
        if rc ~= EXISTS then
            return rc, (now_ms() - start) / 1000
        end
        reclaim(zone, key, klen)
        rc = try(self, key, klen)
        if rc ~= EXISTS then
            return rc, (now_ms() - start) / 1000
        end
        step = next_step(step, self.ratio, self.max_step)
    end
end

local function wait(self, key, klen, timeout)
    if not in_nginx then
        return block(self, key, klen, timeout)
    end
    local phase = get_phase()
    if YIELDABLE[phase] then
        return sleep_steps(self, key, klen, timeout)
    end
    if self.blocking_timeout > 0 then
        return block(self, key, klen, min(timeout, self.blocking_timeout))
    end
    return nil, "cannot wait in " .. tostring(phase) .. " phase"
end

-- syntax: elapsed, err = sem:acquire(key, timeout?)
function _M.acquire(self, key, timeout)
    if held(self) then
        return nil, "locked"
    end
    local err
    key, err = key_check(key)
    if not key then
        return nil, err
    end
    if timeout == nil then
        timeout = self.timeout
    else
        timeout = options.timeout(timeout, self.exptime, 2)
    end
    local klen = #key
    local rc = try(self, key, klen)
    local elapsed = 0
    if rc == EXISTS then
        -- a dead holder's permit is back at once
        reclaim(self.zone, key, klen)
        rc = try(self, key, klen)
    end
    if rc == EXISTS then
        if timeout == 0 then
            return nil, "timeout"
        end
        rc, elapsed = wait(self, key, klen, timeout)
        if rc == nil then
            return nil, elapsed
        end
    end
    if rc == OK then
        self.permit = handle(self.zone, SEMAPHORE, key, klen)
        return elapsed
    end
    if rc == TIMEOUT then
        return nil, "timeout"
    end
    return nil, errors[rc]
end


-- ---- release, expire, count ----

-- syntax: ok, err = sem:release()
function _M.release(self)
    local cd = held(self)
    self.permit = nil
    if not cd then
        return nil, "unlocked"
    end
    local rc = give_back(cd)
    ffi_gc(cd, nil)
    if rc == OK then
        return 1
    end
    if rc == NOT_FOUND then
        return 1, "expired"
    end
    return nil, errors[rc]
end

-- syntax: ok, err = sem:expire(seconds?)
function _M.expire(self, seconds)
    if seconds == nil then
        seconds = self.exptime
    else
        seconds = options.seconds(seconds, "seconds", 2)
    end
    local cd = held(self)
    if not cd then
        return nil, "unlocked"
    end
    local rc = C.shmlock_group_extend(cd.zone, cd.kind, cd.key, cd.key_len,
                                      cd.ticket, ms(seconds))
    if rc == OK then
        return true
    end
    if rc == NOT_FOUND then
        return nil, "expired"
    end
    return nil, errors[rc]
end

-- syntax: n, err = sem:count(key)
-- The permits of key held now (dead holders and expired leases dropped
-- first).
function _M.count(self, key)
    local err
    key, err = key_check(key)
    if not key then
        return nil, err
    end
    return reclaim(self.zone, key, #key)
end

-- syntax: holding = sem:owned()
-- Whether this object holds a permit (false in a forked child).
function _M.owned(self)
    return held(self) ~= nil
end

return _M
