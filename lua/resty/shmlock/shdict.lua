-- resty.shmlock.shdict: a named shared-memory dictionary any process of
-- the same user on the host can open, with ngx.shared.DICT's methods.
--
-- Argument checks and error strings follow lua-resty-core's shdict.lua:
-- runtime conditions return nil/false plus a message, programmer misuse
-- (a bad exptime, a call on something that is not a dict) raises.
-- Beyond it: an exptime or init_ttl that is NaN, infinite or above 1e12
-- seconds raises too (resty.shmlock.internal.options), and one below
-- 1 ms is 1 ms, not 0 ("never expires").

local ffi = require "ffi"
local C = require "resty.shmlock.lib"
local errors = require "resty.shmlock.errors"
local version = require "resty.shmlock.version"
local codes = require "resty.shmlock.internal.codes"
local options = require "resty.shmlock.internal.options"
local check_key = require("resty.shmlock.internal.key").check
local log = require "resty.shmlock.internal.log"
local nginx_user = require "resty.shmlock.internal.nginx_user"
local cached_ms = require("resty.shmlock.internal.clock").cached_ms
local bit = require "bit"

local ffi_new = ffi.new
local ffi_str = ffi.string
local ffi_gc = ffi.gc
local type = type
local tostring = tostring
local tonumber = tonumber
local error = error
local setmetatable = setmetatable
local seconds_ok = options.seconds_ok
local ms = options.ms
local log_event = log.event
local recoveries = log.recoveries
local band = bit.band
local ceil = math.ceil
local str_format = string.format
local getenv = os.getenv
local pcall = pcall
local ipairs = ipairs

local OK = codes.OK
local NOT_FOUND = codes.NOT_FOUND
local SYSTEM = codes.SYSTEM
local CORRUPT = codes.CORRUPT
local AGAIN = codes.AGAIN
local INCOMPATIBLE = C.SHMLOCK_INCOMPATIBLE
local LAYOUT = tonumber(C.SHMLOCK_LAYOUT)
local NOT_OWNER = C.SHMLOCK_NOT_OWNER
local UNSAFE_MODE = C.SHMLOCK_UNSAFE_MODE

-- errno values of Linux, for messages
local EPERM, EACCES = 1, 13

-- open() errors that refuse a file found under the zone's name, or where
-- the system said no: logged (error) as well as returned
local REFUSED = {
    [INCOMPATIBLE] = true, [NOT_OWNER] = true,
    [UNSAFE_MODE] = true, [C.SHMLOCK_FOREIGN_NS] = true, [SYSTEM] = true,
    [C.SHMLOCK_FOREIGN_TIME] = true,
}

local T_NIL, T_BOOLEAN, T_NUMBER, T_STRING = codes.TNIL, codes.TBOOLEAN,
                                             codes.TNUMBER, codes.TSTRING
local T_LIST = codes.TLIST
local LEFT, RIGHT = codes.LEFT, codes.RIGHT
local OP_SET, OP_ADD, OP_REPLACE, OP_SAFE = codes.OP_SET, codes.OP_ADD,
                                            codes.OP_REPLACE, codes.OP_SAFE

local DEFAULT_SIZE = 1024 * 1024
local MAX_SIZE = 2 ^ 40             -- as the C side

local _M = { _VERSION = version }
local methods = {}
local mt = { __index = methods }

-- per-call scratch space, allocated once
local val = ffi_new("shmlock_value_t")
local old = ffi_new("shmlock_value_t")
local forcible = ffi_new("int[1]")
local num_buf = ffi_new("double[1]")
local ttl_buf = ffi_new("int64_t[1]")
local count_buf = ffi_new("int[1]")
local len_buf = ffi_new("uint32_t[1]")
local used_buf = ffi_new("size_t[1]")
local zone_out = ffi_new("shmlock_zone_t *[1]")
local open_opts = ffi_new("shmlock_open_t")
local msg_buf = ffi_new("char[256]")
local stats_buf = ffi_new("shmlock_stats_t")
local next_buf = ffi_new("uint64_t[1]")
local guard = ffi_new("shmlock_gen_guard_t")
local str_size = 4096
local str_buf = ffi_new("char[?]", str_size)

-- scan's default count and its largest; get_keys's step (buckets)
local SCAN_COUNT = 100
local SCAN_COUNT_MAX = 2 ^ 31 - 1
local KEYS_STEP = 4096

-- dir .. "\0" .. name -> the dict this process opened there, while it is
-- in use: the table does not keep it alive, so a zone nobody references is
-- unmapped when its dict is collected (the C library maps each file once
-- per process, whoever opens it)
local zones = setmetatable({}, { __mode = "v" })

-- dir .. "\0" .. name -> the dict opened there in init_by_lua*: the nginx
-- master keeps it, so that every worker it forks (whatever user it runs
-- as) reaches the zone by name through the mapping it inherits, without
-- opening the file (docs/shdict.md, "Zones in nginx")
local pinned = {}

-- the user init_by_lua* hands zone files to (nginx_user.workers): false
-- until asked, then { uid, gid } (0, -1: nobody)
local hand_to = false

-- dir .. "\0" .. name -> the last refusal of that zone logged (see open)
local refused = {}

local function sys_error(what)
    return what .. ": " .. ffi_str(C.strerror(C.shmlock_errno()))
end

local function zone_of(self, level)
    local zone = type(self) == "table" and self._zone
    if not zone then
        error('bad "zone" argument', level or 3)
    end
    return zone
end

-- the zone and the checked key of a method on one key, called by the
-- method (or by what the method tail-calls): zone, key; or nil, nil and
-- the key's error.  A call on something that is not a dict raises at the
-- method's caller.
local function keyed(self, key)
    local zone = zone_of(self, 4)
    local err
    key, err = check_key(key)
    if not key then
        return nil, nil, err
    end
    return zone, key
end

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

-- exptime (seconds, nil or false: 0) as milliseconds for the C core
local function check_exptime(exptime, level)
    if not exptime then
        return 0
    end
    if not seconds_ok(exptime) then
        error('bad "exptime" argument', level + 1)
    end
    return ms(exptime)
end

-- the public store methods tail-call this, so level 2 here is their caller
-- guarded: the set_guarded's condition (see there), else nil
local function store(self, op, key, value, exptime, flags, guarded)
    local zone = zone_of(self)
    exptime = check_exptime(exptime, 2)
    if flags ~= nil and type(flags) ~= "number" then
        error('bad "flags" argument', 2)
    end

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

    forcible[0] = 0
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

-- syntax: ok, err, forcible = dict:_set_guarded(key, value, exptime, flags,
--                                               word, mask, expect)
-- (internal: resty.shmlock.cache's loads) set, only if the bits `mask` of
-- the zone's generation word `word` are those of `expect`, checked in the
-- store's critical section (shmlock_dict_store_guarded); else false,
-- "changed" and nothing written.
function methods._set_guarded(self, key, value, exptime, flags, word, mask,
                              expect)
    guard.word = word
    guard.mask = mask
    guard.value = expect
    return store(self, OP_SET, key, value, exptime, flags, true)
end

-- lists, as ngx.shared.DICT's: elements are numbers or strings; a push
-- takes free memory and expired entries' room, never a live entry's

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
    fill(val, value)
    local rc = C.shmlock_dict_push(zone, side, key, #key, val, len_buf)
    recoveries(self.name)
    if rc ~= OK then
        return nil, errors[rc]
    end
    return tonumber(len_buf[0])
end

local function pop(self, side, key)
    local zone, err
    zone, key, err = keyed(self, key)
    if not zone then
        return nil, err
    end
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
    recoveries(self.name)
    if rc ~= OK then
        return nil, errors[rc]
    end
    return value_of(val)
end

-- syntax: length, err = dict:lpush(key, value)
function methods.lpush(self, key, value)
    return push(self, LEFT, key, value)
end

-- syntax: length, err = dict:rpush(key, value)
function methods.rpush(self, key, value)
    return push(self, RIGHT, key, value)
end

-- syntax: value, err = dict:lpop(key)
function methods.lpop(self, key)
    return pop(self, LEFT, key)
end

-- syntax: value, err = dict:rpop(key)
function methods.rpop(self, key)
    return pop(self, RIGHT, key)
end

-- syntax: length, err = dict:llen(key)
function methods.llen(self, key)
    local zone, err
    zone, key, err = keyed(self, key)
    if not zone then
        return nil, err
    end
    local rc = C.shmlock_dict_llen(zone, key, #key, len_buf)
    recoveries(self.name)
    if rc ~= OK then
        return nil, errors[rc]
    end
    return tonumber(len_buf[0])
end

-- v as a number (a numeric string converts), else raises at the caller
-- of the method: "bad <name> arg: number expected, got <type>"
local function number_arg(v, name)
    if type(v) == "number" then
        return v
    end
    local n = tonumber(v)
    if not n then
        error("bad " .. name .. " arg: number expected, got " .. type(v), 3)
    end
    return n
end

-- syntax: newval, err, forcible = dict:incr(key, value, init?, init_ttl?)
function methods.incr(self, key, value, init, init_ttl)
    local zone, err
    zone, key, err = keyed(self, key)
    if not zone then
        return nil, err
    end

    value = number_arg(value, "value")
    -- as ngx.shared.DICT, a false init means no init
    if init then
        init = number_arg(init, "init")
    end

    if init_ttl ~= nil then
        init_ttl = number_arg(init_ttl, "init_ttl")
        if not seconds_ok(init_ttl) then
            error('bad "init_ttl" argument', 2)
        end
        if not init then
            error('must provide "init" when providing "init_ttl"', 2)
        end
    else
        init_ttl = 0
    end

    num_buf[0] = value
    forcible[0] = 0
    local rc = C.shmlock_dict_incr(zone, key, #key, num_buf,
                                   init and 1 or 0, init or 0,
                                   ms(init_ttl), forcible)
    if rc ~= OK then
        return nil, errors[rc]
    end
    if not init then
        return tonumber(num_buf[0])
    end
    return tonumber(num_buf[0]), nil, forcible[0] == 1
end

-- syntax: ttl, err = dict:ttl(key)
function methods.ttl(self, key)
    local zone, err
    zone, key, err = keyed(self, key)
    if not zone then
        return nil, err
    end
    local rc = C.shmlock_dict_ttl(zone, key, #key, ttl_buf)
    if rc ~= OK then
        return nil, errors[rc]
    end
    return tonumber(ttl_buf[0]) / 1000
end

-- syntax: ok, err = dict:expire(key, exptime)
function methods.expire(self, key, exptime)
    local zone = zone_of(self)
    if not seconds_ok(exptime) then
        error('bad "exptime" argument', 2)
    end
    local err
    key, err = check_key(key)
    if not key then
        return nil, err
    end
    local rc = C.shmlock_dict_expire(zone, key, #key, ms(exptime))
    if rc ~= OK then
        return nil, errors[rc]
    end
    return true
end

-- syntax: ok, err, forcible = dict:cas(key, old_value, new_value, exptime?,
--                                      flags?)
function methods.cas(self, key, old_value, new_value, exptime, flags)
    local zone = zone_of(self)
    exptime = check_exptime(exptime, 2)
    if flags ~= nil and type(flags) ~= "number" then
        error('bad "flags" argument', 2)
    end
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

-- syntax: dict:flush_all()   (nil, err only on a destroyed zone)
function methods.flush_all(self)
    local rc = C.shmlock_dict_flush_all(zone_of(self))
    if rc ~= OK then
        return nil, errors[rc]
    end
end

-- syntax: freed = dict:flush_expired(max_count?)
function methods.flush_expired(self, max_count)
    local zone = zone_of(self)
    if max_count ~= nil and type(max_count) ~= "number" then
        error('bad "max_count" argument', 2)
    end
    local rc = C.shmlock_dict_flush_expired(zone, max_count or 0, count_buf)
    if rc ~= OK then
        return nil, errors[rc]
    end
    return tonumber(count_buf[0])
end

-- One step of a walk (shmlock_dict_scan): its keys appended to keys
-- after keys[n], up to keys[max] (max 0: all); the next cursor and the
-- new n, or nil, err.  A bucket whose keys exceed the buffer doubles it
-- at least: a bucket holds fewer bytes of keys than its shard, so that
-- ends, however the bucket grows meanwhile.
local function scan_step(zone, cursor, count, keys, n, max)
    local rc = C.shmlock_dict_scan(zone, cursor, count, str_buf, str_size,
                                   next_buf, count_buf, used_buf)
    while rc == AGAIN do
        grow(math.max(tonumber(used_buf[0]), 2 * str_size))
        rc = C.shmlock_dict_scan(zone, cursor, count, str_buf, str_size,
                                 next_buf, count_buf, used_buf)
    end
    if rc ~= OK then
        return nil, errors[rc]
    end
    local pos = 0
    for _ = 1, count_buf[0] do
        if max > 0 and n >= max then
            break
        end
        local len = ffi.cast("uint32_t *", str_buf + pos)[0]
        n = n + 1
        keys[n] = ffi_str(str_buf + pos + 4, len)
        pos = pos + 4 + len
    end
    return tonumber(next_buf[0]), n
end

-- syntax: keys, err = dict:get_keys(max_count?)   (default 1024, 0 = all)
-- A walk (see scan) in steps of KEYS_STEP buckets: it ends however much
-- other processes write meanwhile, and never holds a shard's mutex for a
-- whole shard.
function methods.get_keys(self, max_count)
    local zone = zone_of(self)
    if max_count == nil then
        max_count = 1024
    elseif type(max_count) ~= "number" or max_count < 0 then
        error('bad "max_count" argument', 2)
    end

    local keys, n, cursor = {}, 0, 0
    repeat
        cursor, n = scan_step(zone, cursor, KEYS_STEP, keys, n, max_count)
        if not cursor then
            return nil, n
        end
    until cursor == 0 or (max_count > 0 and n >= max_count)
    return keys
end

-- syntax: next_cursor, keys = dict:scan(cursor, count?)  (beyond
-- ngx.shared.DICT): one step of a walk over the live keys; cursor 0
-- starts, next_cursor 0 means done.  nil, err on a zone error.
function methods.scan(self, cursor, count)
    local zone = zone_of(self)
    if type(cursor) ~= "number" or not (cursor >= 0) -- luacheck: ignore 581
       or cursor % 1 ~= 0 or cursor >= 2 ^ 53
    then
        error('bad "cursor" argument', 2)
    end
    if count == nil then
        count = SCAN_COUNT
    elseif type(count) ~= "number" or not (count >= 1) -- luacheck: ignore 581
           or count % 1 ~= 0 or count > SCAN_COUNT_MAX
    then
        error('bad "count" argument', 2)
    end
    local keys = {}
    local next_cursor, err = scan_step(zone, cursor, count, keys, 0, 0)
    if not next_cursor then
        return nil, err
    end
    return next_cursor, keys
end

function methods.capacity(self)
    return tonumber(C.shmlock_dict_capacity(zone_of(self)))
end

function methods.free_space(self)
    return tonumber(C.shmlock_dict_free_space(zone_of(self)))
end

-- syntax: n = dict:shards()  (beyond ngx.shared.DICT)
function methods.shards(self)
    return tonumber(C.shmlock_zone_shards(zone_of(self)))
end

-- the fields of shmlock_stats_t, each a number in dict:stats()
local STATS = { "capacity", "free_space", "entries", "evictions", "expired",
                "spins", "sleeps", "takeovers", "recoveries" }

-- syntax: stats, err = dict:stats()   (beyond ngx.shared.DICT)
-- The zone's figures and counters, and stats.shard[i] those of shard
-- i - 1; the zone's are the sums of its shards' (but capacity, the whole
-- file's), each shard read under its mutex in turn.
function methods.stats(self)
    local zone = zone_of(self)
    local n = tonumber(C.shmlock_zone_shards(zone))
    local total = {}
    for _, f in ipairs(STATS) do
        total[f] = 0
    end
    local shard = {}
    for i = 1, n do
        local rc = C.shmlock_dict_stats(zone, i - 1, stats_buf)
        if rc ~= OK then
            return nil, errors[rc]
        end
        local one = {}
        for _, f in ipairs(STATS) do
            local v = tonumber(stats_buf[f])
            one[f] = v
            total[f] = total[f] + v
        end
        shard[i] = one
    end
    total.capacity = tonumber(C.shmlock_dict_capacity(zone))
    total.shards = n
    total.shard = shard
    return total
end

-- syntax: ok, err = dict:verify()
function methods.verify(self)
    local rc = C.shmlock_dict_verify(zone_of(self), msg_buf, 256)
    if rc == OK then
        return true
    end
    if rc == CORRUPT then
        return nil, ffi_str(msg_buf)
    end
    return nil, errors[rc]
end


local units = { [""] = 1, k = 1024, m = 1024 * 1024, g = 1024 * 1024 * 1024 }

local MIN_SIZE = C.SHMLOCK_MIN_SIZE

-- what "bad size" tells the user to give
local SIZE_FORMS = '(give bytes as a whole number, or a string of digits '
                   .. 'with an optional unit k, m or g: 65536, "64k", "10m", '
                   .. '"1g"; from 32k to 1024g)'

-- "bad size: <what was given> <why>", then the accepted forms
local function bad_size(size, why)
    local shown = type(size) == "string" and str_format("%q", size)
                  or type(size) == "number" and tostring(size)
                  or "a " .. type(size)
    return "bad size: " .. shown .. why .. " " .. SIZE_FORMS
end

-- Sizes above MAX_SIZE never reach C: converting a double beyond 2^64 to
-- size_t wraps (2^64 + 4096 would arrive as 4096).  nil and the message
-- for a bad one.
local function parse_size(size)
    if size == nil then
        return DEFAULT_SIZE
    end
    local bytes
    if type(size) == "number" then
        if size ~= size or size % 1 ~= 0 then
            return nil, bad_size(size, " is not a whole number")
        end
        bytes = size
    elseif type(size) == "string" then
        local digits, unit = size:match("^%s*(%d+)%s*([kKmMgG]?)%s*$")
        if not digits then
            return nil, bad_size(size, " is not a size")
        end
        bytes = tonumber(digits) * units[unit:lower()]
    else
        return nil, bad_size(size, " is not a size")
    end
    if bytes < MIN_SIZE or bytes > MAX_SIZE then
        return nil, bad_size(size, " is out of range")
    end
    return bytes
end

-- dict, unless its zone was destroyed (by any process): then the name
-- must be resolved again
local function live(dict)
    if dict and C.shmlock_zone_dead(dict._zone) == 0 then
        return dict
    end
    return nil
end

-- the shard counts opts.shards may ask for (0: the default)
local SHARDS = { [0] = true, [1] = true, [2] = true, [4] = true, [8] = true,
                 [16] = true }

local function check_name(name)
    return type(name) == "string" and C.shmlock_zone_name_ok(name, #name) == 1
end

-- syntax: ok = shdict.check_name(name): whether name is a zone name
_M.check_name = check_name


-- groups by name and by gid, from the C library (getgrnam/getgrgid:
-- called only when a zone is opened with opts.group, or refused)
local grp_ok = pcall(ffi.cdef, [[
struct shmlock_group { char *gr_name; char *gr_passwd; unsigned int gr_gid;
                       char **gr_mem; };
struct shmlock_group *getgrnam(const char *name);
struct shmlock_group *getgrgid(unsigned int gid);
]])

-- the gid of group `g` (a name or a number), or nil
local function gid_of(g)
    if type(g) == "number" then
        return g
    end
    if not grp_ok then
        return nil
    end
    local gr = ffi.C.getgrnam(g)
    if gr == nil then
        return nil
    end
    return tonumber(gr.gr_gid)
end

-- "name" of group gid, or its number when it has no name
local function group_name(gid)
    if grp_ok then
        local gr = ffi.C.getgrgid(gid)
        if gr ~= nil then
            return ffi_str(gr.gr_name)
        end
    end
    return tostring(gid)
end

-- nil if a zone file's mode is one we create: 0 (the default, 0600), or
-- owner read-write, no bit beyond 0666, never writable by others (as the
-- C side: SHMLOCK_BAD_MODE); else why not
local function mode_problem(mode)
    if type(mode) ~= "number" or mode % 1 ~= 0 or mode < 0 or mode > 511 then
        return "not a number from 0 to 0777 or an octal string like \"0660\""
    end
    if mode == 0 then
        return nil
    end
    local shown = str_format("%04o", mode)
    if band(mode, 2) ~= 0 then
        return shown .. " lets other users write the zone (share it with a "
               .. "group instead: opts.group and mode 0660)"
    end
    if band(mode, 73) ~= 0 then                           -- 0111
        return shown .. " has an execute bit"
    end
    if band(mode, 384) ~= 384 then                        -- 0600
        return shown .. " does not let the owner read and write"
    end
    return nil
end

local function octal(mode)
    return str_format("%04o", mode)
end

-- the user names of uids (getpwuid), for the refusals' advice
local pw_ok = pcall(ffi.cdef, [[
struct shmlock_passwd { char *pw_name; };
struct shmlock_passwd *shmlock_getpwuid(unsigned int uid) __asm__("getpwuid");
]])

-- "name" of user uid, or "uid N" when it has no name
local function user_name(uid)
    if pw_ok then
        local pw = ffi.C.shmlock_getpwuid(uid)
        if pw ~= nil and pw.pw_name ~= nil then
            return ffi_str(pw.pw_name)
        end
    end
    return "uid " .. tostring(uid)
end

-- the overflow gid (nogroup, or nobody on some systems): the group of
-- files whose group means nothing here (unmapped, or nobody's), which no
-- one should trust with a zone
local NOGROUP = 65534

-- how to use a zone of another user on purpose: run as its owner, or
-- share it with a group
local function owner_hint(uid)
    return ": run as " .. user_name(uid) .. " (the zone's owner), or share "
           .. "the zone with a group on purpose: create it with opts.group "
           .. '= "G" and opts.mode = "0660", and attach with opts.group = "G"'
end

-- ': pass opts.group = "G" to trust group G', unless G is the overflow
-- group: then the owner's advice
local function trust_hint(gid, uid)
    if gid == NOGROUP then
        return " by " .. group_name(gid) .. ", a group no one should trust"
               .. owner_hint(uid)
    end
    local group = group_name(gid)
    return ': pass opts.group = "' .. group .. '" to trust group ' .. group
end

-- The owner uid and gid zone files opened now are handed to: inside
-- init_by_lua* of a root master, its workers' user (asked once per VM: a
-- reload loads a new one); else 0, -1.
local function hand_over_to(ngx)
    if not ngx then
        return 0, -1
    end
    if not hand_to then
        local uid, gid, why = nginx_user.workers(ngx)
        hand_to = { uid or 0, gid or -1 }
        if why then
            log_event("warn", "zone files opened in init_by_lua stay the "
                      .. "master's, not the workers' user's: " .. why)
        end
    end
    return hand_to[1], hand_to[2]
end

-- the message for a zone file open() refused, naming the cause
local function refusal(rc, o, name, path)
    if rc == INCOMPATIBLE then
        local layout = tonumber(o.file_layout)
        if layout == 0 then
            return "incompatible zone: " .. path .. " is not a zone file"
        elseif layout ~= LAYOUT then
            return str_format("incompatible zone: %s is a zone of layout %d, "
                              .. "made by another version of lua-resty-"
                              .. "shmlock (this one reads layout %d): "
                              .. "destroy it to make it anew", path, layout,
                              LAYOUT)
        end
        return "incompatible zone: " .. path .. " has a header that does "
               .. "not match the file (truncated, or changed by another "
               .. "program)"
    end
    if rc == NOT_OWNER then
        return "zone file owned by another user (uid "
               .. tostring(tonumber(o.file_uid)) .. ")"
               .. owner_hint(tonumber(o.file_uid))
    end
    if rc == UNSAFE_MODE then
        local mode = tonumber(o.file_mode)
        if band(mode, 2) ~= 0 then
            return "zone file mode " .. octal(mode) .. " is writable by others"
        end
        return "zone file mode " .. octal(mode) .. " is group-writable"
               .. trust_hint(tonumber(o.file_gid), tonumber(o.file_uid))
    end
    if rc == SYSTEM then
        local errno = C.shmlock_errno()
        local msg = "failed to open zone \"" .. name .. "\": "
        if errno == EACCES then
            msg = msg .. "permission denied opening zone file " .. path
            if o.file_mode ~= 0 then
                msg = msg .. " (owner uid " .. tostring(tonumber(o.file_uid))
                      .. ", group " .. group_name(tonumber(o.file_gid))
                      .. ", mode " .. octal(tonumber(o.file_mode)) .. ")"
            end
            return msg
        end
        msg = msg .. ffi_str(C.strerror(errno))
        if errno == EPERM and o.owner_uid > 0 then
            msg = msg .. ": cannot give the zone file to the workers' user "
                  .. "(uid " .. tostring(tonumber(o.owner_uid)) .. ")"
        elseif errno == EPERM and o.group >= 0 then
            msg = msg .. ": cannot give the zone file group "
                  .. group_name(tonumber(o.group))
        end
        return msg
    end
    return errors[rc]
end

-- syntax: dir = shdict.directory(dir?)
-- The directory of the zone files for opts.dir (nil: $SHMLOCK_DIR, else
-- /dev/shm), for messages.
local function directory(dir)
    if dir == nil or dir == "" then
        dir = getenv("SHMLOCK_DIR")
        if dir == nil or dir == "" then
            dir = "/dev/shm"
        end
    end
    return dir
end
_M.directory = directory

-- the zone file's path, for messages
local function path_of(dir, name)
    return directory(dir) .. "/shmlock." .. name
end

-- the third return of open: a note when the zone found is not of the size
-- asked (nil when no size was asked, or it matches)
local function size_note(dict, asked)
    if not asked then
        return nil
    end
    local want = ceil(asked / 4096) * 4096
    local has = dict:capacity()
    if has == want then
        return nil
    end
    return "size mismatch: the zone has " .. has .. " bytes, not " .. want
end

-- opts.dir, checked: nil or a string; a NUL byte would cut the path the
-- system sees, and open or destroy would act in another directory.  The
-- caller's caller is blamed.
local function dir_of(opts)
    local dir = opts and opts.dir
    if dir ~= nil and (type(dir) ~= "string" or dir:find("\0", 1, true))
    then
        error('bad "opts.dir" argument', 3)
    end
    return dir
end

-- syntax: dict, err, note = shdict.open(name, opts?)
--   opts.size:   bytes, or "64k" / "10m" / "1g" (default "1m")
--   opts.dir:    directory of the zone files (default $SHMLOCK_DIR or /dev/shm)
--   opts.shards: 1, 2, 4, 8 or 16 (default: by size, see shmlock.h)
--   opts.create: false: attach only (nil, "not found" when absent)
--   opts.mode:   permission bits of a new zone file (default 0600)
--   opts.group:  group (name or gid) of a new zone file, and the group
--                trusted when attaching (see shmlock_open_t in shmlock.h)
-- note: "size mismatch: ..." when opts.size was given and an existing
-- zone of another size was attached (it keeps its size).
function _M.open(name, opts)
    if not check_name(name) then
        return nil, "bad zone name"
    end
    if opts ~= nil and type(opts) ~= "table" then
        error('bad "opts" argument', 2)
    end
    local dir = dir_of(opts)
    local mode = opts and opts.mode or 0
    if type(mode) == "string" and mode:find("^0?[0-7][0-7][0-7]$") then
        mode = tonumber(mode, 8)        -- "0660"
    end
    local why = mode_problem(mode)
    if why then
        error('bad "opts.mode" argument: ' .. why, 2)
    end
    local group = opts and opts.group
    if group ~= nil and not (type(group) == "string" and group ~= "")
       and not (type(group) == "number" and group % 1 == 0 and group >= 0
                and group < 2 ^ 32)
    then
        error('bad "opts.group" argument', 2)
    end

    local asked = opts and opts.size
    local size, size_err = parse_size(asked)
    if not size then
        return nil, size_err
    end
    if asked ~= nil then
        asked = size
    end
    local shards = opts and opts.shards or 0
    if type(shards) ~= "number" or not SHARDS[shards] then
        return nil, "bad shards"
    end

    local id = (dir or "") .. "\0" .. name
    local dict = live(zones[id])
    if dict then
        return dict, nil, size_note(dict, asked)
    end
    if pinned[id] then
        pinned[id] = nil        -- destroyed: its mapping may go
    end

    local gid = -1
    if group ~= nil then
        gid = gid_of(group)
        if not gid then
            return nil, 'unknown group "' .. group .. '"'
        end
    end

    -- create = false: attach to an existing zone only (size 0 to the core)
    if opts and opts.create == false then
        size = 0
    end

    local init = nginx_user.init_phase()
    local o = open_opts
    o.dir, o.name, o.name_len = dir, name, #name
    o.size, o.shards, o.mode, o.group = size, shards, mode, gid
    o.owner_uid, o.owner_gid = hand_over_to(init)
    local rc = C.shmlock_zone_open2(o, zone_out)
    o.dir, o.name = nil, nil
    if rc ~= OK then
        local err = refusal(rc, o, name, path_of(dir, name))
        -- once per name and cause (a lock name refused at every request
        -- would fill error.log with the same line)
        if REFUSED[rc] and refused[id] ~= err then
            refused[id] = err
            log_event("error", 'zone "' .. name .. '" refused: ' .. err)
        end
        return nil, err
    end
    refused[id] = nil
    recoveries(name)

    dict = setmetatable({
        _zone = ffi_gc(zone_out[0], C.shmlock_zone_close),
        name = name,
        dir = dir,
    }, mt)
    zones[id] = dict
    if init then
        pinned[id] = dict
    end
    return dict, nil, size_note(dict, asked)
end

-- syntax: shdict.set_logger(fn)
-- Outside nginx, fn(level, message) receives the events an operator must
-- see (level "error", "warn", "notice" or "info"); nil: nothing is
-- printed (the default).  Inside nginx they go to error.log.
function _M.set_logger(fn)
    log.set_logger(fn)
end

-- the dict this process opened under `name` and still uses (nil if none,
-- or if the zone was destroyed since)
function _M.opened(name, dir)
    return live(zones[(dir or "") .. "\0" .. tostring(name)])
end

-- syntax: ok, err = shdict.destroy(name, opts?)
function _M.destroy(name, opts)
    if not check_name(name) then
        return nil, "bad zone name"
    end
    if opts ~= nil and type(opts) ~= "table" then
        error('bad "opts" argument', 2)
    end
    local dir = dir_of(opts)
    local rc = C.shmlock_zone_destroy(dir, name, #name)
    if rc == OK then
        -- only now: a zone still there (the directory stayed locked, say)
        -- keeps the record that lets a lock reach it by name (opened)
        zones[(dir or "") .. "\0" .. name] = nil
        return true
    end
    if rc == NOT_FOUND then
        return nil, "not found"
    end
    if rc == SYSTEM then
        return nil, sys_error("failed to destroy zone \"" .. name .. "\"")
    end
    return nil, errors[rc]
end

_M.methods = methods
-- syntax: key, err = shdict.check_key(key)
-- key as a string, or nil and "nil key" / "empty key" / "key too long"
-- (resty.shmlock.internal.key)
_M.check_key = check_key

return _M
