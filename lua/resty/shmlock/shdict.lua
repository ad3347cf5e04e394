-- resty.shmlock.shdict: a named shared-memory dictionary any process of
-- the same user on the host can open, with ngx.shared.DICT's methods.
--
-- Argument checks and error strings follow lua-resty-core's shdict.lua:
-- runtime conditions return nil/false plus a message, programmer misuse
-- (a bad exptime, a call on something that is not a dict) raises.
-- Beyond it: an exptime or init_ttl that is NaN, infinite or above 1e12
-- seconds raises too (resty.shmlock.internal.options), and one below
-- 1 ms is 1 ms, not 0 ("never expires").

-- The methods over LuaJIT's FFI: the hot paths (get, the stores, incr,
-- cas, cad) call the core with nothing in between; the rest are
-- resty.shmlock.shdict.methods's, over the primitives below.  Under PUC
-- Lua, resty.shmlock.shdict.capi's over the C module.  Opening and
-- destroying zones: resty.shmlock.shdict.zones, under both.

local core = require "resty.shmlock.internal.core"
-- (the binding's own dictionary module, where it has one)
local own = core.part("dict")
if own then
    return own
end

local ffi = require "ffi"
local C = core.C
local errors = require "resty.shmlock.errors"
local codes = require "resty.shmlock.internal.codes"
local args = require "resty.shmlock.shdict.args"
local shared = require "resty.shmlock.shdict.methods"
local check_key = require("resty.shmlock.internal.key").check
local log = require "resty.shmlock.internal.log"
local cached_ms = require("resty.shmlock.internal.clock").cached_ms

local ffi_new = ffi.new
local ffi_str = ffi.string
local type = type
local tonumber = tonumber
local recoveries = log.recoveries
local ipairs = ipairs
local zone_of = args.zone_of
local keyed = args.keyed
local check_exptime = args.exptime
local check_flags = args.flags
local STATS = args.STATS

local OK = codes.OK
local CORRUPT = codes.CORRUPT
local AGAIN = codes.AGAIN

local T_NIL, T_BOOLEAN, T_NUMBER, T_STRING = codes.TNIL, codes.TBOOLEAN,
                                             codes.TNUMBER, codes.TSTRING
local T_LIST = codes.TLIST
local OP_SET, OP_ADD, OP_REPLACE, OP_SAFE = codes.OP_SET, codes.OP_ADD,
                                            codes.OP_REPLACE, codes.OP_SAFE

local methods = {}

-- per-call scratch space, allocated once
local val = ffi_new("shmlock_value_t")
local old = ffi_new("shmlock_value_t")
local forcible = ffi_new("int[1]")
local num_buf = ffi_new("double[1]")
local ttl_buf = ffi_new("int64_t[1]")
local count_buf = ffi_new("int[1]")
local len_buf = ffi_new("uint32_t[1]")
local used_buf = ffi_new("size_t[1]")
local msg_buf = ffi_new("char[256]")
local stats_buf = ffi_new("shmlock_stats_t")
local next_buf = ffi_new("uint64_t[1]")
local guard = ffi_new("shmlock_gen_guard_t")
local str_size = 4096
local str_buf = ffi_new("char[?]", str_size)

-- fills a shmlock_value_t; false for a type we cannot store
local function fill(v, value, flags)
    local typ = type(value)
    v.flags = flags or 0
    if typ == "string" then
        v.type = T_STRING
        v.str = value
        v.len = #value
    elseif typ == "number" then
        v.type = T_NUMBER
        v.num = value
    elseif value == nil then
        v.type = T_NIL
    elseif typ == "boolean" then
        v.type = T_BOOLEAN
        v.num = value and 1 or 0
    else
        return false
    end
    return true
end

-- the public store methods tail-call this, so level 2 here is their caller
-- guarded: the set_guarded's condition (see there), else nil
local function store(self, op, key, value, exptime, flags, guarded)
    local zone = zone_of(self)
    exptime = check_exptime(exptime, 2)
    check_flags(flags)

    local err
    key, err = check_key(key)
    if not key then
        return nil, err
    end
    if not fill(val, value, flags) then
        return nil, "bad value type"
    end
    if value == nil and op ~= OP_SET and op ~= OP_SET + OP_SAFE then
        return false, "attempt to add or replace nil values", false
    end

    -- (forcible: both calls write it first)
    local rc
    if guarded then
        rc = C.shmlock_dict_store_guarded(zone, op, key, #key, val, exptime,
                                          guard, forcible)
    else
        -- inside nginx its cached clock (0 elsewhere: the core reads it)
        rc = C.shmlock_dict_store_at(zone, op, key, #key, val, exptime,
                                     cached_ms(), forcible)
    end
    recoveries(self.name)
    if rc == OK then
        return true, nil, forcible[0] == 1
    end
    return false, errors[rc], forcible[0] == 1
end

local function grow(len)
    str_size = tonumber(len)
    str_buf = ffi_new("char[?]", str_size)
end

-- the value a call of the core put in v (and str_buf): a string, a
-- number, a boolean; nil for none
local function value_of(v)
    local typ = v.type
    if typ == T_STRING then
        return ffi_str(str_buf, v.len)
    elseif typ == T_NUMBER then
        return tonumber(v.num)
    elseif typ == T_BOOLEAN then
        return v.num ~= 0
    end
    return nil
end

local function get(self, key, stale)
    local zone, err
    zone, key, err = keyed(self, key)
    if not zone then
        return nil, err
    end

    -- inside nginx, expiries are compared with its cached clock, as
    -- ngx.shared.DICT does (0 elsewhere: the core reads the clock)
    local now = cached_ms()
    local rc = C.shmlock_dict_get_at(zone, key, #key, stale, val, str_buf,
                                     str_size, now)
    -- AGAIN: the buffer is too small for the value; grow it and ask again,
    -- twice at most (the value may grow between the two calls)
    for _ = 1, 2 do
        if rc ~= AGAIN then
            break
        end
        grow(val.len)
        rc = C.shmlock_dict_get_at(zone, key, #key, stale, val, str_buf,
                                   str_size, now)
    end
    if rc ~= OK then
        return nil, errors[rc]
    end

    local typ = val.type
    if typ == T_NIL then
        return nil
    elseif typ == T_LIST then
        return nil, "value is a list"
    end
    local value = value_of(val)

    local flags = tonumber(val.flags)
    if stale == 1 then
        return value, flags ~= 0 and flags or nil, val.stale == 1
    end
    if flags ~= 0 then
        return value, flags
    end
    return value
end


-- syntax: value, flags = dict:get(key)
function methods.get(self, key)
    return get(self, key, 0)
end

-- syntax: value, flags, stale = dict:get_stale(key)
function methods.get_stale(self, key)
    return get(self, key, 1)
end

-- Each store method is its own function, not one closure made per op
-- (resty.shmlock.shdict.methods.stores, which the C module's side uses):
-- a loop's trace must not run into a prototype that five methods share.

-- syntax: ok, err, forcible = dict:set(key, value, exptime?, flags?)
function methods.set(self, key, value, exptime, flags)
    return store(self, OP_SET, key, value, exptime, flags)
end

function methods.safe_set(self, key, value, exptime, flags)
    return store(self, OP_SET + OP_SAFE, key, value, exptime, flags)
end

function methods.add(self, key, value, exptime, flags)
    return store(self, OP_ADD, key, value, exptime, flags)
end

function methods.safe_add(self, key, value, exptime, flags)
    return store(self, OP_ADD + OP_SAFE, key, value, exptime, flags)
end

function methods.replace(self, key, value, exptime, flags)
    return store(self, OP_REPLACE, key, value, exptime, flags)
end

function methods.delete(self, key)
    return store(self, OP_SET, key, nil)
end

-- syntax: ok, err, forcible = shdict._set_guarded(dict, key, value, exptime,
--                                       flags, word, mask, expect)
-- (internal: resty.shmlock.cache's loads) set, only if the bits `mask` of
-- the zone's generation word `word` are those of `expect`, checked in the
-- store's critical section (shmlock_dict_store_guarded); else false,
-- "changed" and nothing written.
local function set_guarded(self, key, value, exptime, flags, word, mask,
                           expect)
    guard.word = word
    guard.mask = mask
    guard.value = expect
    return store(self, OP_SET, key, value, exptime, flags, true)
end

-- syntax: newval, err, forcible = dict:incr(key, value, init?, init_ttl?)
function methods.incr(self, key, value, init, init_ttl)
    local zone, err
    zone, key, err = keyed(self, key)
    if not zone then
        return nil, err
    end

    value, init, init_ttl = args.incr(value, init, init_ttl)

    num_buf[0] = value
    forcible[0] = 0
    local rc = C.shmlock_dict_incr(zone, key, #key, num_buf,
                                   init and 1 or 0, init or 0,
                                   init_ttl, forcible)
    if rc ~= OK then
        return nil, errors[rc]
    end
    if not init then
        return tonumber(num_buf[0])
    end
    return tonumber(num_buf[0]), nil, forcible[0] == 1
end

-- syntax: ok, err, forcible = dict:cas(key, old_value, new_value, exptime?,
--                                      flags?)
function methods.cas(self, key, old_value, new_value, exptime, flags)
    local zone = zone_of(self)
    exptime = check_exptime(exptime, 2)
    check_flags(flags)
    local err
    key, err = check_key(key)
    if not key then
        return nil, err
    end
    if not fill(old, old_value, 0) or not fill(val, new_value, flags) then
        return nil, "bad value type"
    end
    forcible[0] = 0
    local rc = C.shmlock_dict_cas(zone, key, #key, old, val, exptime,
                                  forcible)
    if rc ~= OK then
        return nil, errors[rc], forcible[0] == 1
    end
    return true, nil, forcible[0] == 1
end

-- syntax: ok, err = dict:cad(key, old_value)
function methods.cad(self, key, old_value)
    local zone, err
    zone, key, err = keyed(self, key)
    if not zone then
        return nil, err
    end
    if old_value == nil or not fill(old, old_value, 0) then
        return nil, "bad value type"
    end
    local rc = C.shmlock_dict_cad(zone, key, #key, old)
    if rc ~= OK then
        return nil, errors[rc]
    end
    return true
end

-- The primitives of resty.shmlock.shdict.methods (lists, ttl, cas, the
-- walk, stats ...: the methods off the hot path), over the FFI: each one
-- call of the core, answering as the C module's function of its name.
local prim = {}

function prim.dict_push(zone, side, key, value)
    fill(val, value)
    local rc = C.shmlock_dict_push(zone, side, key, #key, val, len_buf)
    return rc, tonumber(len_buf[0])
end

function prim.dict_pop(zone, side, key)
    local rc = C.shmlock_dict_pop(zone, side, key, #key, val, str_buf,
                                  str_size)
    -- as get: nothing was popped, grow the buffer and ask again
    for _ = 1, 2 do
        if rc ~= AGAIN then
            break
        end
        grow(val.len)
        rc = C.shmlock_dict_pop(zone, side, key, #key, val, str_buf,
                                str_size)
    end
    if rc ~= OK then
        return rc
    end
    return rc, value_of(val)
end

function prim.dict_llen(zone, key)
    local rc = C.shmlock_dict_llen(zone, key, #key, len_buf)
    return rc, tonumber(len_buf[0])
end

function prim.dict_ttl(zone, key)
    local rc = C.shmlock_dict_ttl(zone, key, #key, ttl_buf)
    return rc, tonumber(ttl_buf[0])
end

function prim.dict_expire(zone, key, exptime_ms)
    return C.shmlock_dict_expire(zone, key, #key, exptime_ms)
end

function prim.dict_flush_all(zone)
    return C.shmlock_dict_flush_all(zone)
end

function prim.dict_flush_expired(zone, max_count)
    local rc = C.shmlock_dict_flush_expired(zone, max_count, count_buf)
    return rc, tonumber(count_buf[0])
end

-- A bucket whose keys exceed the buffer doubles it at least: a bucket
-- holds fewer bytes of keys than its shard, so that ends, however the
-- bucket grows meanwhile.
function prim.dict_scan(zone, cursor, count)
    local rc = C.shmlock_dict_scan(zone, cursor, count, str_buf, str_size,
                                   next_buf, count_buf, used_buf)
    while rc == AGAIN do
        grow(math.max(tonumber(used_buf[0]), 2 * str_size))
        rc = C.shmlock_dict_scan(zone, cursor, count, str_buf, str_size,
                                 next_buf, count_buf, used_buf)
    end
    if rc ~= OK then
        return rc
    end
    local keys, pos = {}, 0
    for i = 1, count_buf[0] do
        local len = ffi.cast("uint32_t *", str_buf + pos)[0]
        keys[i] = ffi_str(str_buf + pos + 4, len)
        pos = pos + 4 + len
    end
    return rc, tonumber(next_buf[0]), keys
end

function prim.dict_capacity(zone)
    return tonumber(C.shmlock_dict_capacity(zone))
end

function prim.dict_free_space(zone)
    return tonumber(C.shmlock_dict_free_space(zone))
end

function prim.zone_shards(zone)
    return tonumber(C.shmlock_zone_shards(zone))
end

function prim.dict_stats(zone, shard)
    local rc = C.shmlock_dict_stats(zone, shard, stats_buf)
    if rc ~= OK then
        return rc
    end
    local one = {}
    for _, f in ipairs(STATS) do
        one[f] = tonumber(stats_buf[f])
    end
    return rc, one
end

function prim.dict_verify(zone)
    local rc = C.shmlock_dict_verify(zone, msg_buf, 256)
    if rc ~= CORRUPT then
        return rc
    end
    return rc, ffi_str(msg_buf)
end

shared.add(methods, prim)

local module = require("resty.shmlock.shdict.zones").module(methods)
module._set_guarded = set_guarded
return module
