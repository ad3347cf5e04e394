-- resty.shmlock.shdict.args (internal): the argument checks of the
-- dictionary's methods, shared by both bindings' methods
-- (resty.shmlock.shdict over the FFI, resty.shmlock.shdict.capi over the C
-- module), so that they raise and answer alike.  Errors name the method's
-- caller (levels as noted).

local options = require "resty.shmlock.internal.options"
local check_key = require("resty.shmlock.internal.key").check

local type = type
local tonumber = tonumber
local error = error
local seconds_ok = options.seconds_ok
local ms = options.ms

local _M = {}

-- scan's default count and its largest
local SCAN_COUNT = 100
local SCAN_COUNT_MAX = 2 ^ 31 - 1

-- syntax: zone = args.zone_of(self, level?)
function _M.zone_of(self, level)
    local zone = type(self) == "table" and self._zone
    if not zone then
        error('bad "zone" argument', level or 3)
    end
    return zone
end
local zone_of = _M.zone_of

-- syntax: zone, key = args.keyed(self, key)
-- the zone and the checked key of a method on one key, called by the
-- method (or by what the method tail-calls): zone, key; or nil, nil and
-- the key's error.  A call on something that is not a dict raises at the
-- method's caller.
function _M.keyed(self, key)
    local zone = zone_of(self, 4)
    local err
    key, err = check_key(key)
    if not key then
        return nil, nil, err
    end
    return zone, key
end

-- syntax: ms = args.exptime(exptime, level)
-- exptime (seconds, nil or false: 0) as milliseconds for the C core
function _M.exptime(exptime, level)
    if not exptime then
        return 0
    end
    if not seconds_ok(exptime) then
        error('bad "exptime" argument', level + 1)
    end
    return ms(exptime)
end

-- v as a number (a numeric string converts), else raises at the caller
-- of the method: "bad <name> arg: number expected, got <type>"
local function number_arg(v, name)
    if type(v) == "number" then
        return v
    end
    local n = tonumber(v)
    if not n then
        error("bad " .. name .. " arg: number expected, got " .. type(v), 4)
    end
    return n
end

-- syntax: value, init, init_ttl_ms = args.incr(value, init, init_ttl)
-- incr's arguments, checked (raises at the method's caller); init false
-- or nil: no init
function _M.incr(value, init, init_ttl)
    value = number_arg(value, "value")
    -- as ngx.shared.DICT, a false init means no init
    if init then
        init = number_arg(init, "init")
    end
    if init_ttl ~= nil then
        init_ttl = number_arg(init_ttl, "init_ttl")
        if not seconds_ok(init_ttl) then
            error('bad "init_ttl" argument', 3)
        end
        if not init then
            error('must provide "init" when providing "init_ttl"', 3)
        end
    else
        init_ttl = 0
    end
    return value, init, ms(init_ttl)
end

-- syntax: count = args.scan(cursor, count): scan's count, checked with
-- its cursor (raises at the method's caller)
function _M.scan(cursor, count)
    if type(cursor) ~= "number" or not (cursor >= 0) -- luacheck: ignore 581
       or cursor % 1 ~= 0 or cursor >= 2 ^ 53
    then
        error('bad "cursor" argument', 3)
    end
    if count == nil then
        count = SCAN_COUNT
    elseif type(count) ~= "number" or not (count >= 1) -- luacheck: ignore 581
           or count % 1 ~= 0 or count > SCAN_COUNT_MAX
    then
        error('bad "count" argument', 3)
    end
    return count
end

-- syntax: max = args.max_count(max_count): get_keys's (default 1024, 0:
-- all; raises at the method's caller)
function _M.max_count(max_count)
    if max_count == nil then
        return 1024
    elseif type(max_count) ~= "number" or max_count < 0 then
        error('bad "max_count" argument', 3)
    end
    return max_count
end

-- syntax: ms = args.expire(exptime): expire's exptime (required), as
-- milliseconds (raises at the method's caller)
function _M.expire(exptime)
    if not seconds_ok(exptime) then
        error('bad "exptime" argument', 3)
    end
    return ms(exptime)
end

-- syntax: args.flush_count(max_count): flush_expired's, checked
function _M.flush_count(max_count)
    if max_count ~= nil and type(max_count) ~= "number" then
        error('bad "max_count" argument', 3)
    end
end

-- syntax: args.flags(flags): raises at the method's caller on flags
-- that are neither nil nor a number
function _M.flags(flags)
    if flags ~= nil and type(flags) ~= "number" then
        error('bad "flags" argument', 3)
    end
end

-- the types the core can store: STORABLE[type(value)]
_M.STORABLE = { string = true, number = true, boolean = true,
                ["nil"] = true }

-- the fields of shmlock_stats_t, each a number in dict:stats()
_M.STATS = { "capacity", "free_space", "entries", "evictions", "expired",
             "spins", "sleeps", "takeovers", "recoveries", "slots",
             "slots_used" }

-- get_keys's step (buckets)
_M.KEYS_STEP = 4096

return _M
