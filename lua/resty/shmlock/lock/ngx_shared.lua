-- resty.shmlock.lock.ngx_shared (internal): the lock backend of
-- resty.shmlock for ngx.shared dicts, the names that are not zones of
-- ours (inside nginx only; the interface: see resty.shmlock; the store is
-- the ngx.shared dict).
--
-- resty.lock's algorithm (add, then delete or replace), with our owner
-- token as the value.  ngx.shared.DICT has no compare-and-delete, so
-- unlock and expire compare, then delete or replace: exact between the
-- light threads of one worker (nothing yields in between), best effort
-- between workers.  No waking, no dead-holder takeover, no starvation
-- mode: those need the zone's compare-and-swap.  Expiries below 1 ms are
-- given as 1 ms (ngx.shared.DICT would truncate them to 0: never).

local ffi = require "ffi"
local options = require "resty.shmlock.internal.options"
local BUSY = require("resty.shmlock.lock.zone").BUSY

local ffi_str = ffi.string
local type = type
local at_least_ms = options.at_least_ms

local _M = {}


-- syntax: expiry = ngx_shared.expiry(seconds)
-- The exptime as add takes it: seconds, at least 1 ms but for 0.
_M.expiry = at_least_ms


-- syntax: ok, err = ngx_shared.add(dict, key, klen, tok, tlen, expiry)
-- tok: a string or a pointer to tlen bytes.  add, not safe_add, as
-- resty.lock: on a full dict it evicts least recently used entries (any:
-- values, other locks) rather than refuse the lock ("no memory"); it
-- tries without evicting first, so safe_add before it would add nothing.
-- t/12-shared-full.t.
function _M.add(dict, key, _klen, tok, tlen, expiry)
    if type(tok) ~= "string" then
        tok = ffi_str(tok, tlen)
    end
    local ok, err = dict:add(key, tok, expiry)
    if ok then
        return true
    end
    if err == "exists" then
        return false
    end
    return nil, err
end


-- syntax: ok, err = ngx_shared.release(dict, key, klen, tok, tlen)
-- key and tok: strings or pointers (the handle's copies)
function _M.release(dict, key, klen, tok, tlen)
    if type(key) ~= "string" then
        key = ffi_str(key, klen)
    end
    if type(tok) ~= "string" then
        tok = ffi_str(tok, tlen)
    end
    local v = dict:get(key)
    if v ~= tok then
        -- our lock expired: the key is free, or someone else's (left
        -- untouched); 1, "expired" as the zone locks answer
        return 1, "expired"
    end
    local ok, err = dict:delete(key)
    if not ok then
        return nil, err
    end
    return 1
end


-- syntax: ok, err = ngx_shared.renew(dict, key, klen, tok, new_tok, seconds)
function _M.renew(dict, key, _klen, tok, new_tok, seconds)
    if dict:get(key) ~= tok then
        return nil, "expired"
    end
    local ok, err = dict:replace(key, new_tok, at_least_ms(seconds))
    if not ok then
        return nil, err == "not found" and "expired" or err
    end
    return true
end


-- syntax: held = ngx_shared.holds(dict, key, klen, tok)
function _M.holds(dict, key, _klen, tok)
    return dict:get(key) == tok
end


-- syntax: outcome = ngx_shared.look(...)
-- Always BUSY: a holder's liveness is not known here.
function _M.look()
    return BUSY
end


return _M
