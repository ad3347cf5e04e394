-- resty.shmlock: a drop-in for OpenResty's resty.lock, over shmlock zones.
--
--     local resty_lock = require "resty.shmlock"
--     local lock, err = resty_lock:new("my_locks", { timeout = 1 })
--     local elapsed, err = lock:lock(key)
--     ...
--     local ok, err = lock:unlock()
--
-- Same constructor, options (and clamping), methods, returns and error
-- strings as resty.lock.  Beyond it: owner tokens (a late unlock or expire
-- never touches somebody else's lock: nil, "expired"), waiters woken by the
-- release (outside nginx), locks of dead processes taken at once, bounded
-- waits under contention (starvation mode, see resty.shmlock.zone_lock),
-- trylock() and owned().
--
-- Inside nginx, waiting is resty.lock's: ngx.sleep steps, elapsed = the sum
-- of the steps.  Where the phase cannot yield (init, init_worker, set,
-- header_filter, body_filter, log, balancer, ...), a free key is taken and
-- a held one answers nil, "cannot wait in <phase> phase".

local ffi = require "ffi"
local shdict = require "resty.shmlock.shdict"
local token = require "resty.shmlock.token"
local handle = require "resty.shmlock.handle"
local zone_lock = require "resty.shmlock.zone_lock"
local shared_lock = require "resty.shmlock.shared_lock"
local options = require "resty.shmlock.options"

local check_key = shdict.check_key

local ffi_str = ffi.string
local type = type
local tostring = tostring
local error = error
local setmetatable = setmetatable
local getmetatable = getmetatable
local min = math.min
local max = math.max
local next_token = token.next
local hold = handle.hold
local drop = handle.drop
local retoken = handle.retoken
local ms = options.ms
local seconds_ok = options.seconds_ok
local MIN_SLEEP = options.MIN_SLEEP
local ACQUIRED = zone_lock.ACQUIRED
local FAILED = zone_lock.FAILED


local ngx = ngx
local in_nginx = type(ngx) == "table" and type(ngx.get_phase) == "function"
local get_phase = in_nginx and ngx.get_phase
local ngx_sleep = in_nginx and ngx.sleep

-- phases where ngx.sleep may yield
local YIELDABLE = {
    rewrite = true, server_rewrite = true, access = true, content = true,
    timer = true, ssl_cert = true, ssl_session_fetch = true,
    ssl_client_hello = true, preread = true,
}

local _M = { _VERSION = "0.1.0" }
local mt = { __index = _M }

-- names resolved to ngx.shared dicts: they stay so (mixing the two stores
-- for one name would break mutual exclusion)
local shared_names = {}


-- new() attaches to existing zones, never creates one
local ATTACH = { create = false }


-- Zone errors new() reports as they are: a zone file is there under that
-- name but cannot be used.  The others ("not found", "bad zone name" for
-- names no zone can have) are resty.lock's "dictionary not found".
local REPORTED = { ["incompatible zone"] = true }

-- the dict object (a zone) or the ngx.shared dict behind dict_name; else
-- nil, nil, and why our zone of that name could not be opened
local function find(name)
    if type(name) == "table" then
        if name._zone then
            return name
        end
        return nil
    end
    if type(name) ~= "string" then
        return nil
    end

    local shared = shared_names[name]
    if shared then
        return nil, shared
    end
    local dict, err = shdict.opened(name)
    if not dict then
        dict, err = shdict.open(name, ATTACH)
    end
    if dict then
        return dict
    end
    if in_nginx then
        shared = ngx.shared[name]
        if shared then
            shared_names[name] = shared
            return nil, shared
        end
    end
    return nil, nil, err
end


-- true inside nginx, in a phase where ngx.sleep may yield
function _M.can_sleep()
    return in_nginx and YIELDABLE[get_phase()] == true
end


-- syntax: lock, err = resty_lock:new(dict_name, opts?)
--         (resty_lock.new(dict_name, opts?) works too)
function _M.new(a, b, c)
    local dict_name, opts = b, c
    if a ~= _M and getmetatable(a) ~= mt then
        dict_name, opts = a, b
    end

    local dict, shared, why = find(dict_name)
    if not dict and not shared then
        if why and (REPORTED[why] or why:find("^failed to open zone")) then
            return nil, why
        end
        return nil, "dictionary not found"
    end

    local exptime, timeout, step, ratio, max_step = options.lock(opts)

    local store, ops, zone, number = shared, shared_lock, nil, 0
    if dict then
        store, ops, zone = dict._zone, zone_lock, dict._zone
    else
        number = handle.shared_number(shared)
    end

    return setmetatable({
        dict = dict or shared,
        store = store,      -- the zone cdata, or the ngx.shared dict
        ops = ops,          -- zone_lock or shared_lock
        zone = zone,        -- for the handle: the zone, or nil and
        number = number,    -- the number of the ngx.shared dict
        cd = false,         -- the handle while holding (resty.shmlock.handle)
        key = false,        -- the key held
        exptime = exptime,
        exptime_ms = ms(exptime),
        timeout = timeout,
        step = step,
        ratio = ratio,
        max_step = max_step,
    }, mt)
end


-- resty.lock's wait inside nginx: ngx.sleep steps; elapsed is their sum.
-- Unlike resty.lock, no step is below MIN_SLEEP (ngx.sleep would only
-- yield: a spin) except a last one cut to the timeout left; for steps of
-- 1 ms and more the steps are resty.lock's.
local function sleep(self, ops, key, klen, tok)
    local store, exp_ms = self.store, self.exptime_ms
    local step, ratio, max_step = self.step, self.ratio, self.max_step
    local timeout = self.timeout
    local elapsed = 0
    if step < MIN_SLEEP then
        step = min(MIN_SLEEP, timeout)
    end

    while timeout > 0 do
        ngx_sleep(step)
        elapsed = elapsed + step
        timeout = timeout - step

        local ok, err = ops.add(self, key, klen, tok, #tok)
        if ok then
            return elapsed
        end
        if ok == nil then
            return nil, err
        end
        local got
        got, err = ops.look(store, key, klen, tok, exp_ms, true)
        if got == ACQUIRED then
            return elapsed
        end
        if got == FAILED then
            return nil, err
        end

        if timeout <= 0 then
            break
        end
        step = min(max(MIN_SLEEP, min(step * ratio, max_step)), timeout)
    end
    return nil, "timeout"
end


-- after the first add found the key held
local function wait(self, ops, key, klen, tok, may_wait)
    local refusal = "timeout"
    if may_wait and self.timeout > 0 then
        if not in_nginx then
            return zone_lock.block(self, key, klen, tok)
        end
        local phase = get_phase()
        if YIELDABLE[phase] then
            return sleep(self, ops, key, klen, tok)
        end
        refusal = "cannot wait in " .. tostring(phase) .. " phase"
    end

    -- no waiting; a dead holder's lock is still ours at once
    local got, err = ops.look(self.store, key, klen, tok, self.exptime_ms,
                              true)
    if got == ACQUIRED then
        return 0
    end
    if got == FAILED then
        return nil, err
    end
    return nil, refusal
end


local function acquire(self, key, may_wait)
    if not key then
        return nil, "nil key"
    end
    if self.cd then
        return nil, "locked"
    end
    local err
    key, err = check_key(key)
    if not key then
        return nil, err
    end
    local klen = #key

    local tok, tlen = next_token()
    local ops = self.ops
    local ok
    ok, err = ops.add(self, key, klen, tok, tlen)
    if ok then
        hold(self, key, klen, tok, tlen)
        return 0
    end
    if ok == nil then
        return nil, err
    end

    -- the token buffer is reused by the next lock(): keep our own copy
    tok = ffi_str(tok, tlen)
    local elapsed
    elapsed, err = wait(self, ops, key, klen, tok, may_wait)
    if elapsed then
        hold(self, key, klen, tok, tlen)
        return elapsed
    end
    return nil, err
end


-- syntax: elapsed, err = lock:lock(key)
-- elapsed: seconds waited (0: at once).  err: "timeout", "locked" (this
-- object holds a lock already), "nil key", "empty key", "key too long",
-- "cannot wait in <phase> phase", or the zone's ("no memory").
function _M.lock(self, key)
    return acquire(self, key, true)
end


-- syntax: elapsed, err = lock:trylock(key)
-- lock() without waiting: 0, or nil, "timeout" (as lock() with timeout 0),
-- and the same other errors.
function _M.trylock(self, key)
    return acquire(self, key, false)
end


-- syntax: ok, err = lock:unlock()
-- 1; nil, "unlocked" if this object holds no lock; nil, "expired" if our
-- lock expired (someone else may hold the key now: left untouched); nil
-- and the store's error ("no memory", ...) if the release failed while
-- the key is still ours: the object keeps holding it (unlock again, or
-- the lock goes when the object is collected or at its exptime).
function _M.unlock(self)
    local cd = self.cd
    if not cd then
        return nil, "unlocked"
    end
    local ok, err = self.ops.release(self.store, self.key, cd.key_len, cd.tok,
                                     cd.tok_len)
    if ok then
        drop(self)
        return ok
    end
    if err == "expired" then
        drop(self)
    end
    return nil, err
end


-- syntax: ok, err = lock:expire(timeout?)
-- Resets the lock's expiry to timeout seconds (nil: the object's exptime;
-- 0: never expires; NaN, infinite or above 1e12 raises, as a negative
-- timeout).  true; nil, "unlocked"; nil, "expired" (our lock expired
-- meanwhile: the object no longer holds it); nil and the store's error
-- (the object still holds the lock, with its old expiry).
function _M.expire(self, time)
    if not self.cd then
        return nil, "unlocked"
    end
    if time == nil then
        time = self.exptime
    elseif not seconds_ok(time) then
        error('bad "exptime" argument', 2)
    end

    local cd = self.cd
    local tok = ffi_str(cd.tok, cd.tok_len)
    local new_tok = ffi_str(next_token())
    local ok, err = self.ops.renew(self.store, self.key, cd.key_len, tok,
                                   new_tok, time)
    if ok then
        retoken(self, new_tok, #new_tok)
        return true
    end
    if err == "expired" then
        drop(self)
    end
    return nil, err
end


-- syntax: held = lock:owned()
-- true while this object's lock is held by it in the store.
function _M.owned(self)
    local cd = self.cd
    if not cd then
        return false
    end
    return self.ops.holds(self.store, self.key, cd.key_len,
                          ffi_str(cd.tok, cd.tok_len))
end


return _M
