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
-- The value.  A lock's value names its holder: the number
--
--     pid * 2^31 + the token's last 4 characters
--
-- with the 4 characters before them as the entry's user flags: the last 8
-- hex digits of the token's serial, each group of 4 read as it lies in
-- memory, a 32-bit little-endian number (ASCII bytes: below 2^31, and the
-- sum below 2^53 since pids are below 2^22).  Read, not decoded: two
-- loads, where decoding hex digits cost more than the compare it serves.
-- A live process's pid is its own, and 8 hex digits of its serials repeat
-- only after 2^32 locks.  A number, not the token's text, because get
-- returns a number without making a string, and 8 bytes fit in the size
-- class of resty.lock's entry for most keys (below).  Each token is
-- compared with both the value and the flags.  A token is read where it
-- is: the token buffer, a handle's copy, a Lua string.
--
-- Room.  A full dict must take our lock wherever it takes resty.lock's
-- (lua-resty-mlcache keeps its locks in the cache's own dict).  nginx's
-- slab allocator serves an entry from a size class: the node (NODE_HEADER
-- bytes, the key, the value) rounded up to a power of two, or to whole
-- pages above half a page.  A full dict may have a free chunk of one class
-- (made by add's eviction of least recently used entries) and none of the
-- next: resty.lock's value, true, is 1 byte; our number is 8, and for keys
-- whose class leaves less room (keys of 53 to 59 bytes, 181 to 187, ...)
-- the value is a compact token of resty.lock's class: the holder's pid (3
-- bytes, fewer when the class has less room; pids are below 2^22) as a
-- string and the low 31 bits of the token's serial as the flags.  A pid
-- cut to 1 or 2 bytes is no longer unique: across processes the serials
-- start at random.  t/19-mlcache.t.
--
-- The calls.  Inside nginx's http subsystem with lua-resty-core of
-- lua-nginx-module 0.10.15 or later (the functions' current signatures),
-- the lock calls the functions behind ngx.shared.DICT directly (those
-- resty.core's methods call, with the types resty.core declares): the
-- same calls, the same locking of the dict, without the methods' checks
-- of arguments that are checked here already.  Elsewhere (a stand-in dict,
-- the stream subsystem, other versions) it calls the dict's methods.

local ffi = require "ffi"
local bit = require "bit"
local options = require "resty.shmlock.internal.options"
local nginx = require "resty.shmlock.internal.nginx"
local C_lib = require "resty.shmlock.lib"
local BUSY = require("resty.shmlock.lock.zone").BUSY

local ffi_str = ffi.string
local ffi_cast = ffi.cast
local type = type
local tonumber = tonumber
local tostring = tostring
local pairs = pairs
local pcall = pcall
local setmetatable = setmetatable
local ceil = math.ceil
local floor = math.floor
local char = string.char
local str_sub = string.sub
local band = bit.band
local rshift = bit.rshift
local at_least_ms = options.at_least_ms
local log_event = require("resty.shmlock.internal.log").event

local _M = {}

-- syntax: s = ngx_shared.string(p, len): a token in a handle, as a string
_M.string = ffi.string

-- a node's bytes before its key: ngx_rbtree_node_t up to its color (32)
-- and ngx_http_lua_shdict_node_t up to its data (36), on 64-bit hosts
local NODE_HEADER = 68
local PAGE = 4096
local SERIAL_MASK = 0x7fffffff  -- user flags are an int: 31 bits
local PID_SCALE = 2 ^ 31
local NUMBER_LEN = 8            -- a number's bytes in the dict
local U8P = ffi.typeof("const uint8_t *")
local U32P = ffi.typeof("const uint32_t *")

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


-- the value of a hex digit's byte (other bytes: 0; a token is checked
-- where it is made)
local HEX = {}
for b = 0, 255 do
    HEX[b] = 0
end
for d = 0, 15 do
    HEX[("0123456789abcdef"):byte(d + 1)] = d
end


-- the number of the hex digits p[i] .. p[i + 7] (32 bits).  Written out,
-- as is pid_of() below: a loop here would be a trace of its own, and the
-- lock's path would run as side traces around it.
local function hex8(p, i)
    return ((((((HEX[p[i]] * 16 + HEX[p[i + 1]]) * 16 + HEX[p[i + 2]]) * 16
              + HEX[p[i + 3]]) * 16 + HEX[p[i + 4]]) * 16
             + HEX[p[i + 5]]) * 16 + HEX[p[i + 6]]) * 16 + HEX[p[i + 7]]
end


-- the decimal pid before the first ':' (pids have at most 7 digits)
local function pid_of(p)
    local n = p[0] - 48
    local b = p[1]
    if b == 58 then return n end
    n = n * 10 + b - 48
    b = p[2]
    if b == 58 then return n end
    n = n * 10 + b - 48
    b = p[3]
    if b == 58 then return n end
    n = n * 10 + b - 48
    b = p[4]
    if b == 58 then return n end
    n = n * 10 + b - 48
    b = p[5]
    if b == 58 then return n end
    n = n * 10 + b - 48
    b = p[6]
    if b == 58 then return n end
    return n * 10 + b - 48
end


-- syntax: value, flags = encode(tok, tlen, klen)
-- What the dict holds for the token tok (a string or a pointer to tlen
-- bytes: "<pid>:<start>:<16 hex digits>") on a key of klen bytes: the
-- number and the flags, or the compact token (see "The value", "Room").
local function encode(tok, tlen, klen)
    local p = tok
    if type(tok) == "string" then
        p = ffi_cast(U8P, tok)
    end
    local pid = pid_of(p)
    local r = room(klen)
    if r >= NUMBER_LEN then
        return pid * PID_SCALE + ffi_cast(U32P, p + (tlen - 4))[0],
               ffi_cast(U32P, p + (tlen - 8))[0]
    end
    local lo = band(hex8(p, tlen - 8), SERIAL_MASK)     -- decoded: 31 bits
    local v = char(band(pid, 255), band(rshift(pid, 8), 255),
                   band(rshift(pid, 16), 255))
    return str_sub(v, 1, r), lo
end


-- syntax: value, flags = ngx_shared.stored(tok, klen)
-- What the dict holds for the token tok (a string) on a key of klen bytes.
function _M.stored(tok, klen)
    return encode(tok, #tok, klen)
end


-- syntax: pid = ngx_shared.compact_pid(value)
-- The holder's pid in a compact token's value (nil if cut short).
local function compact_pid(v)
    if type(v) ~= "string" or #v ~= 3 then
        return nil
    end
    local a, b, c = v:byte(1, 3)
    return a + b * 256 + c * 65536
end
_M.compact_pid = compact_pid


-- syntax: pid = ngx_shared.holder_pid(value)
-- The pid of the holder of a lock whose value is value (a number or a
-- compact token), or nil.
local function holder_pid(v)
    if type(v) == "number" then
        if v >= 0 and v < 2 ^ 53 and v == floor(v) then
            return floor(v / PID_SCALE)
        end
        return nil
    end
    return compact_pid(v)
end
_M.holder_pid = holder_pid


-- ---------------------------------------------------------------------
-- The direct calls (see "The calls").

local C = ffi.C
local direct = false            -- whether the direct calls are used
local zones = setmetatable({}, { __mode = "k" })    -- dict -> zone
-- dict -> whether its release is one compare-and-delete (true), is not
-- (false), or is not known yet (nil; retry_at: when to probe again)
local deletes = setmetatable({}, { __mode = "k" })
local retry_at = setmetatable({}, { __mode = "k" })
local failed = setmetatable({}, { __mode = "k" })  -- dict -> probes failed
local delete_if_off = os.getenv("SHMLOCK_NGX_DELETE_IF") == "off"

local OP_SET, OP_ADD, OP_REPLACE, OP_SAFE = 0, 1, 2, 4
local T_NIL, T_NUMBER, T_STRING = 0, 3, 4
local BUF_LEN = 64

local value_type, user_flags, num_value, is_stale, forcible, errmsg, why
local ngx_api                   -- ngx, with the direct calls
local str_buf, str_ptr, str_len

do
    local ngx = nginx.api()
    local config = ngx and ngx.config
    if config and config.subsystem == "http" and ffi.os ~= "OSX"
       and (tonumber(config.ngx_lua_version) or 0) >= 10015
       and pcall(require, "resty.core.shdict") then
        direct = pcall(function()
            return C.ngx_http_lua_ffi_shdict_get,
                   C.ngx_http_lua_ffi_shdict_store,
                   C.ngx_http_lua_ffi_shdict_udata_to_zone
        end)
        if not pcall(function() return C.free end) then
            pcall(ffi.cdef, "void free(void *ptr);")
        end
    end
    if direct then
        ngx_api = ngx
        why = ffi.new("const char *[1]")
        value_type = ffi.new("int[1]")
        user_flags = ffi.new("int[1]")
        num_value = ffi.new("double[1]")
        is_stale = ffi.new("int[1]")
        forcible = ffi.new("int[1]")
        errmsg = ffi.new("char *[1]")
        str_buf = ffi.new("unsigned char[?]", BUF_LEN)
        str_ptr = ffi.new("unsigned char *[1]")
        str_len = ffi.new("size_t[1]")
    end
end


-- the zone behind an ngx.shared dict, or nil (a stand-in dict, or no
-- direct calls)
local function zone_of(dict)
    if not direct then
        return nil
    end
    local z = zones[dict]
    if z == nil then
        z = false
        local udata = type(dict) == "table" and dict[1]
        if type(udata) == "userdata" then
            local p = C.ngx_http_lua_ffi_shdict_udata_to_zone(udata)
            if p ~= nil then
                z = p
            end
        end
        zones[dict] = z
    end
    return z
end


-- add, set (v nil: delete) or replace; true, or false and the error
local function store(z, op, key, klen, v, flags, exptime)
    local typ, num, str, slen = T_NIL, 0, nil, 0
    if type(v) == "number" then
        typ, num = T_NUMBER, v
    elseif type(v) == "string" then
        typ, str, slen = T_STRING, v, #v
    end
    local rc = C.ngx_http_lua_ffi_shdict_store(z, op, key, klen, typ, str,
                                               slen, num, exptime * 1000,
                                               flags, errmsg, forcible)
    if rc == 0 then
        return true
    end
    return false, ffi_str(errmsg[0])
end


-- whether key holds value v with flags f; nil and the error if the read
-- failed
local function direct_holds(z, key, klen, v, f)
    str_ptr[0] = str_buf
    str_len[0] = BUF_LEN
    local rc = C.ngx_http_lua_ffi_shdict_get(z, key, klen, value_type,
                                             str_ptr, str_len, num_value,
                                             user_flags, 0, is_stale, errmsg)
    if rc ~= 0 then
        return nil, errmsg[0] ~= nil and ffi_str(errmsg[0])
                    or "failed to get the key"
    end
    local typ = value_type[0]
    local same
    if typ == T_NUMBER then
        same = num_value[0] == v
    elseif typ == T_STRING then
        local p = str_ptr[0]
        same = type(v) == "string" and str_len[0] == #v
               and ffi_str(p, str_len[0]) == v
        if p ~= str_buf then
            C.free(p)           -- nginx's copy of a longer value
        end
    else
        return false            -- nil (a free key), true (resty.lock's)
    end
    return same and user_flags[0] == f
end


-- ---------------------------------------------------------------------
-- The compare-and-delete (shmlock_ngx_dict_delete_if, src/shmlock_ngx_dict.c).
-- Inside nginx, with the direct calls, a lock whose value is a number is
-- released by one call of ours under the dict's mutex: the compare and the
-- delete at once, exact between workers, where get then delete are two
-- rounds of the mutex with a window between them.  It reads
-- lua-nginx-module's private structures, so each worker checks them first,
-- once per dict, on an entry of its own: added through lua-nginx-module
-- (safe_add: it never evicts), found by our probe where and as expected,
-- deleted by our call, then looked up through lua-nginx-module again (it
-- must be gone).  Until a probe passes, the dict is released by get and
-- delete; a probe that fails, or finds the dict too full for its entry,
-- is tried again a second later, and after three failures the verdict
-- stands (a notice in error.log says why).  SHMLOCK_NGX_DELETE_IF=off (nginx.conf:
-- env SHMLOCK_NGX_DELETE_IF;) turns it off.

local PROBE_TTL_MS = 3600000
local PROBE_FLAGS = 0x2b3c4d5e
local PROBE_TRIES = 3           -- probes that fail before the verdict
-- why a dict that passed its probe falls back (delete_if or replace_if
-- answered -1)
local CHANGED = "the dict no longer reads as its probe did"
local probes = 0

-- the dict's name in nginx.conf (looked for: only for a notice)
local function dict_label(dict)
    for name, d in pairs(ngx_api.shared) do
        if d == dict then
            return 'lua_shared_dict "' .. tostring(name) .. '"'
        end
    end
    return "a lua_shared_dict"
end

-- dict's unlock and expire compare with get, then delete or replace, for
-- good in this VM; error.log's notice says why
local function fall_back(dict, cause)
    deletes[dict] = false
    log_event("notice", dict_label(dict) .. ": unlock compares with get, "
              .. "then deletes (" .. cause .. ")")
end

-- true if z's release may be delete_if; false and why if never; nil if
-- not now (the dict could not take the probe entry)
local function probe(z)
    probes = probes + 1
    local pid = C_lib.shmlock_self_pid()
    local key = "\0shmlock probe " .. pid .. " " .. probes
    local klen = #key
    -- (any number: the key is the probe's own; a fraction, as no lock's)
    local value = probes + 0.25
    local rc = C.ngx_http_lua_ffi_shdict_store(z, OP_ADD + OP_SAFE, key,
                                               klen, T_NUMBER, nil, 0, value,
                                               PROBE_TTL_MS, PROBE_FLAGS,
                                               errmsg, forcible)
    if rc ~= 0 then
        return nil
    end
    local ok, err = true, nil
    if C_lib.shmlock_ngx_dict_probe(z, key, klen, value, PROBE_FLAGS,
                                    PROBE_TTL_MS, why) ~= 0 then
        ok, err = false, ffi_str(why[0])
    elseif C_lib.shmlock_ngx_dict_delete_if(z, key, klen, value,
                                            PROBE_FLAGS) ~= 1 then
        ok, err = false, "the probe entry was not deleted"
    else
        str_ptr[0] = str_buf
        str_len[0] = BUF_LEN
        rc = C.ngx_http_lua_ffi_shdict_get(z, key, klen, value_type, str_ptr,
                                           str_len, num_value, user_flags, 0,
                                           is_stale, errmsg)
        if rc ~= 0 or value_type[0] ~= T_NIL then
            ok, err = false, "the probe entry outlived its delete"
        end
    end
    if not ok then
        -- (through lua-nginx-module: gone already, or gone now)
        C.ngx_http_lua_ffi_shdict_store(z, OP_SET, key, klen, T_NIL, nil, 0,
                                        0, 0, 0, errmsg, forcible)
    end
    return ok, err
end

-- whether dict's (zone z) release may be delete_if
local function deletes_at_once(dict, z)
    local on = deletes[dict]
    if on ~= nil then
        return on
    end
    if delete_if_off then
        deletes[dict] = false
        return false
    end
    local now = ngx_api.now()
    if (retry_at[dict] or 0) > now then
        return false
    end
    local err
    on, err = probe(z)
    if on == nil then
        retry_at[dict] = now + 1
        return false
    end
    if not on then
        -- (a probe entry deleted or flushed by someone else in between
        -- fails too: the verdict is the third failure's)
        local n = (failed[dict] or 0) + 1
        failed[dict] = n
        if n < PROBE_TRIES then
            retry_at[dict] = now + 1
            return false
        end
        fall_back(dict, err)
        return false
    end
    deletes[dict] = true
    return true
end


-- ---------------------------------------------------------------------
-- The backend.

-- whether key holds the lock of value v and flags f (the dict's methods)
local function method_holds(dict, key, v, f)
    local got, flags = dict:get(key)
    return got == v and (flags or 0) == f
end


local function holds(dict, key, klen, tok, tlen)
    local v, f = encode(tok, tlen, klen)
    local z = zone_of(dict)
    if z then
        return direct_holds(z, key, klen, v, f)
    end
    if type(key) ~= "string" then
        key = ffi_str(key, klen)
    end
    return method_holds(dict, key, v, f)
end


-- syntax: expiry = ngx_shared.expiry(seconds)
-- The exptime as add takes it: seconds, at least 1 ms but for 0.
_M.expiry = at_least_ms


-- syntax: ok, err = ngx_shared.add(dict, key, klen, tok, tlen, expiry)
-- tok: a string or a pointer to tlen bytes (tlen nil: #tok).  add, not safe_add, as
-- resty.lock: on a full dict it evicts least recently used entries (any:
-- values, other locks) rather than refuse the lock ("no memory"); it
-- tries without evicting first, so safe_add before it would add nothing.
-- t/12-shared-full.t.
function _M.add(dict, key, klen, tok, tlen, expiry)
    local v, f = encode(tok, tlen or #tok, klen)
    local z = zone_of(dict)
    local ok, err
    if z then
        ok, err = store(z, OP_ADD, key, klen, v, f, expiry)
    else
        if type(key) ~= "string" then
            key = ffi_str(key, klen)
        end
        ok, err = dict:add(key, v, expiry, f)
    end
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
    local v, f = encode(tok, tlen, klen)
    local z = zone_of(dict)
    if z and type(v) == "number" and deletes_at_once(dict, z) then
        local r = C_lib.shmlock_ngx_dict_delete_if(z, key, klen, v, f)
        if r == 1 then
            return 1
        elseif r == 0 then
            return 1, "expired"     -- as below
        end
        -- (nothing changed: the key is read below, as without it)
        fall_back(dict, CHANGED)
    end
    local mine, ok, err
    if z then
        mine, err = direct_holds(z, key, klen, v, f)
        if mine then
            ok, err = store(z, OP_SET, key, klen, nil, 0, 0)
        end
    else
        if type(key) ~= "string" then
            key = ffi_str(key, klen)
        end
        mine = method_holds(dict, key, v, f)
        if mine then
            ok, err = dict:delete(key)
        end
    end
    if mine == nil then
        return nil, err         -- the read failed: maybe ours still
    end
    if not mine then
        -- our lock expired: the key is free, or someone else's (left
        -- untouched); 1, "expired" as the zone locks answer
        return 1, "expired"
    end
    if not ok then
        return nil, err
    end
    return 1
end


-- syntax: ok, err = ngx_shared.renew(dict, key, klen, tok, new_tok, seconds)
-- tok and new_tok: strings
function _M.renew(dict, key, klen, tok, new_tok, seconds)
    local z = zone_of(dict)
    if z then
        local v, f = encode(tok, #tok, klen)
        if type(v) == "number" and deletes_at_once(dict, z) then
            local v2, f2 = encode(new_tok, #new_tok, klen)
            local r = C_lib.shmlock_ngx_dict_replace_if(z, key, klen, v, f,
                          v2, f2, at_least_ms(seconds) * 1000)
            if r == 1 then
                return true
            elseif r == 0 then
                return nil, "expired"
            end
            -- (nothing changed: compared, then replaced, below)
            fall_back(dict, CHANGED)
        end
    end
    local mine, err = holds(dict, key, klen, tok, #tok)
    if mine == nil then
        return nil, err
    end
    if not mine then
        return nil, "expired"
    end
    -- (the same length as the value replaced: rewritten in place)
    local v, f = encode(new_tok, #new_tok, klen)
    local ok
    if z then
        ok, err = store(z, OP_REPLACE, key, klen, v, f, at_least_ms(seconds))
    else
        ok, err = dict:replace(key, v, at_least_ms(seconds), f)
    end
    if not ok then
        return nil, err == "not found" and "expired" or err
    end
    return true
end


-- syntax: held = ngx_shared.holds(dict, key, klen, tok)
-- tok: a string
function _M.holds(dict, key, klen, tok)
    return holds(dict, key, klen, tok, #tok) == true
end


-- syntax: here = ngx_shared.here(dict, key)
-- Whether key is held by this very process (by its pid: the start time
-- is not kept here).
function _M.here(dict, key)
    local pid = holder_pid(dict:get(key))
    return pid ~= nil and pid == C_lib.shmlock_self_pid()
end


-- syntax: ident = ngx_shared.ident(tok)
-- lock.wait's name of a waiter: its token.
function _M.ident(tok)
    return tok
end


-- syntax: outcome = ngx_shared.look(...)
-- Always BUSY: a holder's liveness is not known here.
function _M.look()
    return BUSY
end


-- syntax: on = ngx_shared.direct()
-- Whether the lock calls nginx's functions directly (see "The calls").
function _M.direct()
    return direct
end


-- syntax: on = ngx_shared.deletes_at_once(dict)
-- Whether unlock on dict (an ngx.shared dict) is one compare-and-delete
-- (see "The compare-and-delete"); probes the dict if not known yet.
function _M.deletes_at_once(dict)
    local z = zone_of(dict)
    return z ~= nil and deletes_at_once(dict, z)
end


return _M
