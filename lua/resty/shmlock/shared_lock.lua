-- resty.shmlock.shared_lock: a lock kept in an ngx.shared dict, for names
-- that are not zones of ours (inside nginx only).
--
-- resty.lock's algorithm (add, then delete or replace), with our owner
-- token as the value.  ngx.shared.DICT has no compare-and-delete, so
-- unlock and expire compare, then delete or replace: exact between the
-- light threads of one worker (nothing yields in between), best effort
-- between workers.  No waking, no dead-holder takeover, no starvation
-- mode: those need the zone's compare-and-swap.  Expiries below 1 ms are
-- given as 1 ms (ngx.shared.DICT would truncate them to 0: never).

local ffi = require "ffi"
local at_least_ms = require("resty.shmlock.options").at_least_ms

local ffi_str = ffi.string
local type = type

local BUSY = 0

local _M = {}


-- syntax: ok, err = shared_lock.add(self, key, klen, tok, tlen)
-- tok: a string or a pointer to tlen bytes
function _M.add(self, key, klen, tok, tlen)
    if type(tok) ~= "string" then
        tok = ffi_str(tok, tlen)
    end
    local ok, err = self.store:add(key, tok, at_least_ms(self.exptime))
    if ok then
        return true
    end
    if err == "exists" then
        return false
    end
    return nil, err
end


function _M.release(dict, key, klen, tok, tlen)
    if type(tok) ~= "string" then
        tok = ffi_str(tok, tlen)
    end
    local v = dict:get(key)
    if v == nil then
        -- our lock expired and nobody took the key: it is free either way
        -- (1, as resty.lock and as the zone locks answer)
        return 1
    end
    if v ~= tok then
        return nil, "expired"
    end
    local ok, err = dict:delete(key)
    if not ok then
        return nil, err
    end
    return 1
end


function _M.renew(dict, key, klen, tok, new_tok, seconds)
    if dict:get(key) ~= tok then
        return nil, "expired"
    end
    local ok, err = dict:replace(key, new_tok, at_least_ms(seconds))
    if not ok then
        return nil, err == "not found" and "expired" or err
    end
    return true
end


function _M.holds(dict, key, klen, tok)
    return dict:get(key) == tok
end


function _M.look()
    return BUSY
end


return _M
