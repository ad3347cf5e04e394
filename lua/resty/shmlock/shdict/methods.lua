-- resty.shmlock.shdict.methods (internal): the dictionary's methods off the
-- hot path, written once for both bindings over a few primitives, and the
-- store methods' thin wrappers.
--
-- methods.add(m, prim) adds to m (the binding's methods) lpush, rpush,
-- lpop, rpop, llen, ttl, expire, flush_all, flush_expired,
-- get_keys, scan, capacity, free_space, shards, stats and verify.  prim
-- answers as the C module's functions of the same names (src/lua/dict.c)
-- do, each one call of the core with its checked arguments:
--
--   dict_push(zone, side, key, value)          -> rc, length
--   dict_pop(zone, side, key)                  -> rc, value
--   dict_llen(zone, key)                       -> rc, length
--   dict_ttl(zone, key)                        -> rc, ttl_ms
--   dict_expire(zone, key, exptime_ms)         -> rc
--   dict_flush_all(zone)                       -> rc
--   dict_flush_expired(zone, max_count)        -> rc, freed
--   dict_scan(zone, cursor, count)             -> rc, next_cursor, keys
--   dict_stats(zone, shard)                    -> rc, { field = number }
--   dict_verify(zone)                          -> rc, message
--   dict_capacity(zone), dict_free_space(zone), zone_shards(zone) -> number
--
-- Under PUC Lua prim is the C module itself; under LuaJIT, a table of FFI
-- calls in resty.shmlock.shdict.  The hot paths (get, the stores, incr,
-- cas, cad: those that fill the FFI's value structs) stay each binding's
-- own, calling its core with nothing in between.

local errors = require "resty.shmlock.errors"
local codes = require "resty.shmlock.internal.codes"
local args = require "resty.shmlock.shdict.args"
local check_key = require("resty.shmlock.internal.key").check
local log = require "resty.shmlock.internal.log"

local type = type
local pairs = pairs
local ipairs = ipairs
local recoveries = log.recoveries
local zone_of = args.zone_of
local keyed = args.keyed
local STATS = args.STATS
local KEYS_STEP = args.KEYS_STEP

local OK = codes.OK
local CORRUPT = codes.CORRUPT
local LEFT, RIGHT = codes.LEFT, codes.RIGHT
local OP_SET, OP_ADD, OP_REPLACE, OP_SAFE = codes.OP_SET, codes.OP_ADD,
                                            codes.OP_REPLACE, codes.OP_SAFE

local _M = {}

-- the store methods and the op each passes to the binding's store
-- syntax: ok, err, forcible = dict:set(key, value, exptime?, flags?)
-- (and safe_set, add, safe_add, replace alike)
local STORES = {
    set = OP_SET, safe_set = OP_SET + OP_SAFE, add = OP_ADD,
    safe_add = OP_ADD + OP_SAFE, replace = OP_REPLACE,
}

-- syntax: methods.stores(m, store): m.set, safe_set, add, safe_add,
-- replace and delete, each a tail call of the binding's
-- store(self, op, key, value, exptime, flags) (so that store's level 2 is
-- the method's caller).  For the C module's side: under LuaJIT, five
-- methods sharing one prototype would send a loop's trace of one into
-- side traces of the others (spec/02, "under the JIT"); resty.shmlock.shdict
-- writes each out.
function _M.stores(m, store)
    for name, op in pairs(STORES) do
        m[name] = function(self, key, value, exptime, flags)
            return store(self, op, key, value, exptime, flags)
        end
    end
    -- syntax: ok, err, forcible = dict:delete(key)
    function m.delete(self, key)
        return store(self, OP_SET, key, nil)
    end
end

-- the binding's primitives (see above), set by methods.add
local prim

-- the methods methods.add adds
local shared = {}

-- a primitive's answer as a method's: value, or nil and the message
local function answer(rc, value)
    if rc ~= OK then
        return nil, errors[rc]
    end
    return value
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
    local rc, len = prim.dict_push(zone, side, key, value)
    recoveries(self.name)
    return answer(rc, len)
end

local function pop(self, side, key)
    local zone, err
    zone, key, err = keyed(self, key)
    if not zone then
        return nil, err
    end
    local rc, value = prim.dict_pop(zone, side, key)
    recoveries(self.name)
    return answer(rc, value)
end

-- syntax: length, err = dict:lpush(key, value)
function shared.lpush(self, key, value)
    return push(self, LEFT, key, value)
end

-- syntax: length, err = dict:rpush(key, value)
function shared.rpush(self, key, value)
    return push(self, RIGHT, key, value)
end

-- syntax: value, err = dict:lpop(key)
function shared.lpop(self, key)
    return pop(self, LEFT, key)
end

-- syntax: value, err = dict:rpop(key)
function shared.rpop(self, key)
    return pop(self, RIGHT, key)
end

-- syntax: length, err = dict:llen(key)
function shared.llen(self, key)
    local zone, err
    zone, key, err = keyed(self, key)
    if not zone then
        return nil, err
    end
    local rc, len = prim.dict_llen(zone, key)
    recoveries(self.name)
    return answer(rc, len)
end

-- syntax: ttl, err = dict:ttl(key)
function shared.ttl(self, key)
    local zone, err
    zone, key, err = keyed(self, key)
    if not zone then
        return nil, err
    end
    local rc, ttl_ms = prim.dict_ttl(zone, key)
    return answer(rc, ttl_ms / 1000)
end

-- syntax: ok, err = dict:expire(key, exptime)
function shared.expire(self, key, exptime)
    local zone = zone_of(self)
    exptime = args.expire(exptime)
    local err
    key, err = check_key(key)
    if not key then
        return nil, err
    end
    return answer(prim.dict_expire(zone, key, exptime), true)
end

-- syntax: dict:flush_all()   (nil, err only on a destroyed zone)
function shared.flush_all(self)
    local rc = prim.dict_flush_all(zone_of(self))
    if rc ~= OK then
        return nil, errors[rc]
    end
end

-- syntax: freed = dict:flush_expired(max_count?)
function shared.flush_expired(self, max_count)
    local zone = zone_of(self)
    args.flush_count(max_count)
    local rc, freed = prim.dict_flush_expired(zone, max_count or 0)
    return answer(rc, freed)
end

-- One step of a walk (dict_scan): its keys appended to keys after
-- keys[n], up to keys[max] (max 0: all); the next cursor and the new
-- n, or nil, err.
local function scan_step(zone, cursor, count, keys, n, max)
    local rc, next_cursor, step = prim.dict_scan(zone, cursor, count)
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

-- syntax: keys, err = dict:get_keys(max_count?)  (default 1024, 0 = all)
-- A walk (see scan) in steps of KEYS_STEP buckets: it ends however much
-- other processes write meanwhile, and never holds a shard's mutex for
-- a whole shard.
function shared.get_keys(self, max_count)
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

-- syntax: next_cursor, keys = dict:scan(cursor, count?)  (beyond
-- ngx.shared.DICT): one step of a walk over the live keys; cursor 0
-- starts, next_cursor 0 means done.  nil, err on a zone error.
function shared.scan(self, cursor, count)
    local zone = zone_of(self)
    count = args.scan(cursor, count)
    local keys = {}
    local next_cursor, err = scan_step(zone, cursor, count, keys, 0, 0)
    if not next_cursor then
        return nil, err
    end
    return next_cursor, keys
end

function shared.capacity(self)
    return prim.dict_capacity(zone_of(self))
end

function shared.free_space(self)
    return prim.dict_free_space(zone_of(self))
end

-- syntax: n = dict:shards()  (beyond ngx.shared.DICT)
function shared.shards(self)
    return prim.zone_shards(zone_of(self))
end

-- syntax: stats, err = dict:stats()   (beyond ngx.shared.DICT)
-- The zone's figures and counters, and stats.shard[i] those of shard
-- i - 1; the zone's are the sums of its shards' (but capacity, the
-- whole file's), each shard read under its mutex in turn.
function shared.stats(self)
    local zone = zone_of(self)
    local n = prim.zone_shards(zone)
    local total = {}
    for _, f in ipairs(STATS) do
        total[f] = 0
    end
    local shard = {}
    for i = 1, n do
        local rc, one = prim.dict_stats(zone, i - 1)
        if rc ~= OK then
            return nil, errors[rc]
        end
        for _, f in ipairs(STATS) do
            total[f] = total[f] + one[f]
        end
        shard[i] = one
    end
    total.capacity = prim.dict_capacity(zone)
    total.shards = n
    total.shard = shard
    return total
end

-- syntax: ok, err = dict:verify()
function shared.verify(self)
    local rc, msg = prim.dict_verify(zone_of(self))
    if rc == OK then
        return true
    end
    if rc == CORRUPT then
        return nil, msg
    end
    return nil, errors[rc]
end

-- syntax: methods.add(m, p): m (the binding's methods) with the methods
-- above over p, the binding's primitives (see above; one binding per
-- process)
function _M.add(m, p)
    prim = p
    for name, f in pairs(shared) do
        m[name] = f
    end
    return m
end
-- (run once, at load: more methods than a loop's hot count, so LuaJIT
-- would record a trace of it, which pairs() ends in a stitch)
if rawget(_G, "jit") then
    jit.off(_M.add)
end

return _M
