-- resty.shmlock.shdict.capi (internal): the dictionary's methods over the
-- C module (PUC Lua 5.1 to 5.4), answering as resty.shmlock.shdict's over
-- the FFI: the same checks (resty.shmlock.shdict.args), returns and
-- messages.  require "resty.shmlock.shdict" gives this module where there
-- is no FFI; opening zones is resty.shmlock.shdict.zones's, as there.
-- The hot paths (get, the stores, incr, cas, cad) are here; the rest is
-- resty.shmlock.shdict.methods's, over the C module's functions.
--
-- Numbers are kept as doubles, as ngx.shared.DICT does.  Under Lua 5.3 and
-- 5.4, get, incr and the rest answer an integer for a whole number of at
-- most 2^53 in size (set(k, 1) and set(k, 1.0) both give 1), a float for
-- any other (docs/every-lua.md, "Numbers").

local core = require "resty.shmlock.internal.core"
local errors = require "resty.shmlock.errors"
local codes = require "resty.shmlock.internal.codes"
local args = require "resty.shmlock.shdict.args"
local shared = require "resty.shmlock.shdict.methods"
local check_key = require("resty.shmlock.internal.key").check
local log = require "resty.shmlock.internal.log"

local mod = core.mod
local type = type
local dict_store = mod.dict_store
local dict_get = mod.dict_get
local recoveries = log.recoveries
local zone_of = args.zone_of
local keyed = args.keyed
local check_exptime = args.exptime
local check_flags = args.flags
local STORABLE = args.STORABLE

local OK = codes.OK
local T_NIL, T_LIST = codes.TNIL, codes.TLIST
local OP_SET, OP_SAFE = codes.OP_SET, codes.OP_SAFE

local methods = {}

-- the public store methods tail-call this, so level 2 here is their caller
-- guard: { word, mask, expect } for _set_guarded, else nil
local function store(self, op, key, value, exptime, flags, guard)
    local zone = zone_of(self)
    exptime = check_exptime(exptime, 2)
    check_flags(flags)

    local err
    key, err = check_key(key)
    if not key then
        return nil, err
    end
    if not STORABLE[type(value)] then
        return nil, "bad value type"
    end
    if value == nil and op ~= OP_SET and op ~= OP_SET + OP_SAFE then
        return false, "attempt to add or replace nil values", false
    end

    local rc, forcible
    if guard then
        rc, forcible = dict_store(zone, op, key, value, flags, exptime,
                                  guard[1], guard[2], guard[3])
    else
        rc, forcible = dict_store(zone, op, key, value, flags, exptime)
    end
    recoveries(self.name)
    if rc == OK then
        return true, nil, forcible
    end
    return false, errors[rc], forcible
end

local function get(self, key, stale)
    local zone, err
    zone, key, err = keyed(self, key)
    if not zone then
        return nil, err
    end
    local rc, typ, value, flags, is_stale = dict_get(zone, key, stale)
    if rc ~= OK then
        return nil, errors[rc]
    end
    if typ == T_NIL then
        return nil
    elseif typ == T_LIST then
        return nil, "value is a list"
    end
    if stale then
        return value, flags ~= 0 and flags or nil, is_stale
    end
    if flags ~= 0 then
        return value, flags
    end
    return value
end

function methods.get(self, key)
    return get(self, key, false)
end

function methods.get_stale(self, key)
    return get(self, key, true)
end

shared.stores(methods, store)

-- (internal: resty.shmlock.cache's loads) see resty.shmlock.shdict
local function set_guarded(self, key, value, exptime, flags, word, mask,
                           expect)
    return store(self, OP_SET, key, value, exptime, flags,
                 { word, mask, expect })
end

function methods.incr(self, key, value, init, init_ttl)
    local zone, err
    zone, key, err = keyed(self, key)
    if not zone then
        return nil, err
    end
    local ttl_ms
    value, init, ttl_ms = args.incr(value, init, init_ttl)
    local rc, newval, forcible = mod.dict_incr(zone, key, value,
                                               init and true or false,
                                               init or 0, ttl_ms)
    if rc ~= OK then
        return nil, errors[rc]
    end
    if not init then
        return newval
    end
    return newval, nil, forcible
end

function methods.cas(self, key, old_value, new_value, exptime, flags)
    local zone = zone_of(self)
    exptime = check_exptime(exptime, 2)
    check_flags(flags)
    local err
    key, err = check_key(key)
    if not key then
        return nil, err
    end
    if not STORABLE[type(old_value)] or not STORABLE[type(new_value)] then
        return nil, "bad value type"
    end
    local rc, forcible = mod.dict_cas(zone, key, old_value, new_value,
                                      flags, exptime)
    if rc ~= OK then
        return nil, errors[rc], forcible
    end
    return true, nil, forcible
end

function methods.cad(self, key, old_value)
    local zone, err
    zone, key, err = keyed(self, key)
    if not zone then
        return nil, err
    end
    if old_value == nil or not STORABLE[type(old_value)] then
        return nil, "bad value type"
    end
    local rc = mod.dict_cad(zone, key, old_value)
    if rc ~= OK then
        return nil, errors[rc]
    end
    return true
end

shared.add(methods, mod)

-- the hot methods (get, get_stale, the stores) in C (src/lua/dict_methods.c):
-- one call each, the same checks, returns and messages as above
mod.dict_class(methods, check_key, recoveries)

local module = require("resty.shmlock.shdict.zones").module(methods)
module._set_guarded = set_guarded
return module
