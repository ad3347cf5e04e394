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
--
-- Room.  A full dict must take our lock wherever it takes resty.lock's
-- (lua-resty-mlcache keeps its locks in the cache's own dict).  nginx's
-- slab allocator serves an entry from a size class: the node (NODE_HEADER
-- bytes, the key, the value) rounded up to a power of two, or to whole
-- pages above half a page.  A full dict may have a free chunk of one class
-- (made by add's eviction of least recently used entries) and none of the
-- next: resty.lock's value, true, is 1 byte; a token string of ~28 bytes
-- can need the next class (keys of 33 to 59 bytes in a dict filled by
-- small values: "no memory" where resty.lock's add succeeds).  So the
-- value is our token when it fits in resty.lock's class for that key, and
-- else a compact token of the same class: the holder's pid (3 bytes, fewer
-- when the class has less room; pids are below 2^22) as the value and the
-- low 31 bits of the token's serial as the entry's user flags.  A live
-- process's pid is its own, and its serials repeat only after 2^31 locks;
-- across processes (a reused pid, or a pid cut to 1 or 2 bytes) the
-- serials start at random.  Each token is compared with both the value
-- and the flags.  t/19-mlcache.t.

local ffi = require "ffi"
local bit = require "bit"
local options = require "resty.shmlock.internal.options"
local BUSY = require("resty.shmlock.lock.zone").BUSY

local ffi_str = ffi.string
local type = type
local tonumber = tonumber
local ceil = math.ceil
local char = string.char
local str_sub = string.sub
local str_match = string.match
local band = bit.band
local rshift = bit.rshift
local at_least_ms = options.at_least_ms

local _M = {}

-- a node's bytes before its key: ngx_rbtree_node_t up to its color (32)
-- and ngx_http_lua_shdict_node_t up to its data (36), on 64-bit hosts
local NODE_HEADER = 68
local PAGE = 4096
local SERIAL_MASK = 0x7fffffff  -- user flags are an int: 31 bits

-- per key length: the bytes a value may take and stay in the size class
-- of resty.lock's node (value true: 1 byte)
local rooms = {}


local function room(klen)
    local r = rooms[klen]
    if r then
        return r
    end
    local n = NODE_HEADER + klen + 1
    local class
    if n > PAGE / 2 then
        class = ceil(n / PAGE) * PAGE
    else
        class = 8
        while class < n do
            class = class * 2
        end
    end
    r = class - NODE_HEADER - klen
    rooms[klen] = r
    return r
end


-- syntax: value, flags = ngx_shared.stored(tok, klen)
-- What the dict holds for the token tok on a key of klen bytes: tok and
-- 0, or the compact token (see "Room" above).
local function stored(tok, klen)
    local r = room(klen)
    if #tok <= r then
        return tok, 0
    end
    local pid, serial = str_match(tok, "^(%d+):%d+:%x*(%x%x%x%x%x%x%x%x)$")
    pid = tonumber(pid) or 0
    local v = char(band(pid, 255), band(rshift(pid, 8), 255),
                   band(rshift(pid, 16), 255))
    return str_sub(v, 1, r), band(tonumber(serial or "0", 16), SERIAL_MASK)
end
_M.stored = stored


-- syntax: pid = ngx_shared.compact_pid(value)
-- The holder's pid in a compact token's value (nil if cut short).
function _M.compact_pid(v)
    if type(v) ~= "string" or #v ~= 3 then
        return nil
    end
    local a, b, c = v:byte(1, 3)
    return a + b * 256 + c * 65536
end


-- whether key holds the lock of token tok
local function holds(dict, key, tok)
    local want, want_flags = stored(tok, #key)
    local v, flags = dict:get(key)
    return v == want and (flags or 0) == want_flags
end


-- syntax: expiry = ngx_shared.expiry(seconds)
-- The exptime as add takes it: seconds, at least 1 ms but for 0.
_M.expiry = at_least_ms


-- syntax: ok, err = ngx_shared.add(dict, key, klen, tok, tlen, expiry)
-- tok: a string or a pointer to tlen bytes.  add, not safe_add, as
-- resty.lock: on a full dict it evicts least recently used entries (any:
-- values, other locks) rather than refuse the lock ("no memory"); it
-- tries without evicting first, so safe_add before it would add nothing.
-- t/12-shared-full.t.
function _M.add(dict, key, klen, tok, tlen, expiry)
    if type(tok) ~= "string" then
        tok = ffi_str(tok, tlen)
    end
    local v, flags = stored(tok, klen)
    local ok, err = dict:add(key, v, expiry, flags)
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
    if not holds(dict, key, tok) then
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
function _M.renew(dict, key, klen, tok, new_tok, seconds)
    if not holds(dict, key, tok) then
        return nil, "expired"
    end
    -- (the same length as the value replaced: rewritten in place)
    local v, flags = stored(new_tok, klen)
    local ok, err = dict:replace(key, v, at_least_ms(seconds), flags)
    if not ok then
        return nil, err == "not found" and "expired" or err
    end
    return true
end


-- syntax: held = ngx_shared.holds(dict, key, klen, tok)
function _M.holds(dict, key, _klen, tok)
    return holds(dict, key, tok)
end


-- syntax: holder = ngx_shared.holder(dict, key, klen)
-- The token holding key (a string value), or nil.
function _M.holder(dict, key)
    local v = dict:get(key)
    if type(v) ~= "string" then
        return nil
    end
    return v
end


-- syntax: outcome = ngx_shared.look(...)
-- Always BUSY: a holder's liveness is not known here.
function _M.look()
    return BUSY
end


return _M
