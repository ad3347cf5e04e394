-- resty.shmlock.shdict.capi (internal): the dictionary's methods over the
-- C module (PUC Lua 5.1 to 5.4), answering as resty.shmlock.shdict's over
-- the FFI: the same checks (resty.shmlock.shdict.args), returns and
-- messages.  require "resty.shmlock.shdict" gives this module where there
-- is no FFI; opening zones is resty.shmlock.shdict.zones's, as there.
--
-- Numbers are kept as doubles, as ngx.shared.DICT does.  Under Lua 5.3 and
-- 5.4, get, incr and the rest answer an integer for a whole number of at
-- most 2^53 in size (set(k, 1) and set(k, 1.0) both give 1), a float for
-- any other (docs/every-lua.md, "Numbers").

local core = require "resty.shmlock.internal.core"
local errors = require "resty.shmlock.errors"
local codes = require "resty.shmlock.internal.codes"
local args = require "resty.shmlock.shdict.args"
local check_key = require("resty.shmlock.internal.key").check
local log = require "resty.shmlock.internal.log"

local mod = core.mod
local dict_store = mod.dict_store
local dict_get = mod.dict_get
local type = type
local recoveries = log.recoveries
local ipairs = ipairs
local zone_of = args.zone_of
local keyed = args.keyed
local check_exptime = args.exptime
local check_flags = args.flags
local STATS = args.STATS
local KEYS_STEP = args.KEYS_STEP

local OK = codes.OK
local CORRUPT = codes.CORRUPT
local T_NIL, T_LIST = codes.TNIL, codes.TLIST
local LEFT, RIGHT = codes.LEFT, codes.RIGHT
local OP_SET, OP_ADD, OP_REPLACE, OP_SAFE = codes.OP_SET, codes.OP_ADD,
                                            codes.OP_REPLACE, codes.OP_SAFE

-- what the core can store
local STORABLE = { string = true, number = true, boolean = true,
                   ["nil"] = true }

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

-- (internal: resty.shmlock.cache's loads) see resty.shmlock.shdict
function methods._set_guarded(self, key, value, exptime, flags, word, mask,
                              expect)
    return store(self, OP_SET, key, value, exptime, flags,
                 { word, mask, expect })
end

local function push(self, side, key, value)
    local zone, err
    zone, key, err = keyed(self, key)
    if not zone then
        return nil, err
    end
    local typ = type(value)
    if typ ~= "string" and typ ~= "number" then
        return nil, "bad value type"
    end
    local rc, len = mod.dict_push(zone, side, key, value)
    recoveries(self.name)
    if rc ~= OK then
        return nil, errors[rc]
    end
    return len
end

local function pop(self, side, key)
    local zone, err
    zone, key, err = keyed(self, key)
    if not zone then
        return nil, err
    end
    local rc, value = mod.dict_pop(zone, side, key)
    recoveries(self.name)
    if rc ~= OK then
        return nil, errors[rc]
    end
    return value
end

function methods.lpush(self, key, value)
    return push(self, LEFT, key, value)
end

function methods.rpush(self, key, value)
    return push(self, RIGHT, key, value)
end

function methods.lpop(self, key)
    return pop(self, LEFT, key)
end

function methods.rpop(self, key)
    return pop(self, RIGHT, key)
end

function methods.llen(self, key)
    local zone, err
    zone, key, err = keyed(self, key)
    if not zone then
        return nil, err
    end
    local rc, len = mod.dict_llen(zone, key)
    recoveries(self.name)
    if rc ~= OK then
        return nil, errors[rc]
    end
    return len
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

function methods.ttl(self, key)
    local zone, err
    zone, key, err = keyed(self, key)
    if not zone then
        return nil, err
    end
    local rc, ttl = mod.dict_ttl(zone, key)
    if rc ~= OK then
        return nil, errors[rc]
    end
    return ttl / 1000
end

function methods.expire(self, key, exptime)
    local zone = zone_of(self)
    exptime = args.expire(exptime)
    local err
    key, err = check_key(key)
    if not key then
        return nil, err
    end
    local rc = mod.dict_expire(zone, key, exptime)
    if rc ~= OK then
        return nil, errors[rc]
    end
    return true
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

function methods.flush_all(self)
    local rc = mod.dict_flush_all(zone_of(self))
    if rc ~= OK then
        return nil, errors[rc]
    end
end

function methods.flush_expired(self, max_count)
    local zone = zone_of(self)
    args.flush_count(max_count)
    local rc, freed = mod.dict_flush_expired(zone, max_count or 0)
    if rc ~= OK then
        return nil, errors[rc]
    end
    return freed
end

-- one step of a walk, its keys appended after keys[n] up to keys[max]
-- (0: all): the next cursor and the new n, or nil, err
local function scan_step(zone, cursor, count, keys, n, max)
    local rc, next_cursor, step = mod.dict_scan(zone, cursor, count)
    if rc ~= OK then
        return nil, errors[rc]
    end
    for i = 1, #step do
        if max > 0 and n >= max then
            break
        end
        n = n + 1
        keys[n] = step[i]
    end
    return next_cursor, n
end

function methods.get_keys(self, max_count)
    local zone = zone_of(self)
    max_count = args.max_count(max_count)
    local keys, n, cursor = {}, 0, 0
    repeat
        cursor, n = scan_step(zone, cursor, KEYS_STEP, keys, n, max_count)
        if not cursor then
            return nil, n
        end
    until cursor == 0 or (max_count > 0 and n >= max_count)
    return keys
end

function methods.scan(self, cursor, count)
    local zone = zone_of(self)
    count = args.scan(cursor, count)
    local keys = {}
    local next_cursor, err = scan_step(zone, cursor, count, keys, 0, 0)
    if not next_cursor then
        return nil, err
    end
    return next_cursor, keys
end

function methods.capacity(self)
    return mod.dict_capacity(zone_of(self))
end

function methods.free_space(self)
    return mod.dict_free_space(zone_of(self))
end

function methods.shards(self)
    return mod.zone_shards(zone_of(self))
end

function methods.stats(self)
    local zone = zone_of(self)
    local n = mod.zone_shards(zone)
    local total = {}
    for _, f in ipairs(STATS) do
        total[f] = 0
    end
    local shard = {}
    for i = 1, n do
        local rc, one = mod.dict_stats(zone, i - 1)
        if rc ~= OK then
            return nil, errors[rc]
        end
        for _, f in ipairs(STATS) do
            total[f] = total[f] + one[f]
        end
        shard[i] = one
    end
    total.capacity = mod.dict_capacity(zone)
    total.shards = n
    total.shard = shard
    return total
end

function methods.verify(self)
    local rc, msg = mod.dict_verify(zone_of(self))
    if rc == OK then
        return true
    end
    if rc == CORRUPT then
        return nil, msg
    end
    return nil, errors[rc]
end

return require("resty.shmlock.shdict.zones").module(methods)
