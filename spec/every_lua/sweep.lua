-- spec/every_lua/sweep.lua DIR: the bad-argument sweep, under whichever
-- interpreter runs this (spec/62 for LuaJIT, also against the library
-- built with ASan; make test-every-lua for each PUC Lua under valgrind and
-- with the C module built with ASan and UBSan).  Every public function
-- and method (the modules the README and docs/ require, walked: each
-- module's table and each object's metatable; a module they require that
-- is not below fails the run) and, under PUC Lua, every function of the C
-- module
-- resty.shmlock.core is called with a wrong self (nil, a string, a
-- number, {}, another module's object, an object of a destroyed zone)
-- and, one position at a time, with each bad value (nil, NaN, +-inf,
-- +-2^63, huge strings, NUL bytes, negative numbers, tables, functions,
-- booleans ...), each documented option too.  Each call must return (any
-- values) or raise a Lua error: a crash kills this process, which its
-- parent sees as a signal (and the sanitizers as a report).  A function
-- that the walk finds and the table below does not cover fails the run,
-- and so does an entry of the table that names no function: a new
-- function cannot be forgotten.
--
-- Before each call its name goes to DIR/progress (unbuffered): after a
-- crash, the file's last line names the call.  Prints "ok <calls>
-- calls" or raises.
--
--     lua sweep.lua DIR          the sweep (zones in DIR)
--     SWEEP_SAMPLE=N             one in N calls (below)
--     SWEEP_VERIFY=1             the zone verified after every call
--     SWEEP_TIMES=1              each function's time, on stderr
local dir = assert(arg[1], "usage: sweep.lua DIR")

local core = require "resty.shmlock.internal.core"
core.setenv("SHMLOCK_DIR", dir)         -- every zone by name goes there

local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local semaphore = require "resty.shmlock.semaphore"
local cache = require "resty.shmlock.cache"
local redis = require "resty.shmlock.redis"
local rsem = require "resty.shmlock.redis.semaphore"
local testing = require "resty.shmlock.testing"

-- the public modules (docs/README.md), by the name a user requires
local MODULES = {
    ["resty.shmlock"] = resty_lock,
    ["resty.shmlock.shdict"] = shdict,
    ["resty.shmlock.semaphore"] = semaphore,
    ["resty.shmlock.cache"] = cache,
    ["resty.shmlock.redis"] = redis,
    ["resty.shmlock.redis.semaphore"] = rsem,
    ["resty.shmlock.testing"] = testing,
    ["resty.shmlock.errors"] = require "resty.shmlock.errors",
    ["resty.shmlock.version"] = require "resty.shmlock.version",
}
local C = not core.ffi and core.mod      -- the C module (PUC Lua)

-- every module the README and the pages of docs/ require is above: a new
-- public module cannot be forgotten (the checkout: where this file is)
do
    local root = (arg[0]:match("^(.-)spec/every_lua/sweep%.lua$") or "./")
    local ls = assert(io.popen("ls '" .. root .. "README.md' '" .. root
                               .. "docs/'*.md"))
    local pages = 0
    for path in ls:lines() do
        local f = assert(io.open(path))
        local text = f:read("*a")
        f:close()
        pages = pages + 1
        for name in text:gmatch('require[ (]*"(resty%.shmlock[%w_.]*)"') do
            if not MODULES[name] then
                error(path .. " requires " .. name .. ", which the sweep "
                      .. "does not know: add it to MODULES and its "
                      .. "functions to the table")
            end
        end
    end
    ls:close()
    assert(pages > 5, "the README and docs/ not found from " .. root)
end

local unpack = table.unpack or unpack   -- luacheck: ignore 143 (5.1)
local progress = assert(io.open(dir .. "/progress", "w"))
progress:setvbuf("no")


-- ---------------------------------------------------------------------
-- The objects

local d = assert(shdict.open("sw", { size = "2m" }))
local dead_dict = assert(shdict.open("sw_dead", { size = "64k" }))
local dead_lock = assert(resty_lock:new(dead_dict))
local dead_sem = assert(semaphore:new(dead_dict))
local dead_cache = assert(cache.new("sw_cdead", { dict = dead_dict,
                                                  lock_dict = dead_dict }))
assert(shdict.destroy("sw_dead"))

-- a Redis client that answers every command with a connection error
local function no_redis()
    return nil, "closed"
end
local fake_redis = { eval = no_redis, evalsha = no_redis }

local c = assert(cache.new("sw_c", { dict = d, lock_dict = d }))
local lock_idle = assert(resty_lock:new(d, { timeout = 0, exptime = 5 }))
local sem_idle = assert(semaphore:new(d, { timeout = 0, exptime = 5 }))
local rlock = assert(redis.new(fake_redis, { timeout = 0 }))
local rsem_idle = assert(rsem.new(fake_redis, { timeout = 0 }))

-- keys of the calls that lock: a fresh one per call, so that no hold a
-- call leaves behind (a wrong self's) makes another call wait
local serial = 0
local function fresh_key()
    serial = serial + 1
    return "k" .. serial
end

local OBJECTS = {
    { "a dict", d }, { "a lock", lock_idle }, { "a semaphore", sem_idle },
    { "a cache", c }, { "a Redis lock", rlock },
    { "a Redis semaphore", rsem_idle },
    { "a destroyed zone's dict", dead_dict },
    { "a destroyed zone's lock", dead_lock },
    { "a destroyed zone's semaphore", dead_sem },
    { "a destroyed zone's cache", dead_cache },
}

-- the wrong selves every method is called on
local SELVES = {
    { "nil", nil }, { "a string", "sw" }, { "a number", 5 }, { "{}", {} },
    { "the zone's handle", d._zone },
}
for _, o in ipairs(OBJECTS) do
    SELVES[#SELVES + 1] = o
end

-- the bad values every argument gets, one position at a time
local HUGE = string.rep("x", 70000)         -- past a key's 65535 bytes
local BAD = {
    { "nil", nil }, { "NaN", 0 / 0 }, { "+inf", 1 / 0 }, { "-inf", -1 / 0 },
    { "2^63", 2 ^ 63 }, { "-2^63", -2 ^ 63 }, { "2^64", 2 ^ 64 },
    { "2^32", 2 ^ 32 }, { "2^53+2", 2 ^ 53 + 2 }, { "-1", -1 },
    { "-2^31-1", -2 ^ 31 - 1 }, { "0", 0 }, { "0.5", 0.5 },
    { '""', "" }, { '"a\\0b"', "a\0b" }, { '"\\0"', "\0" },
    { '"-1"', "-1" }, { "70000 bytes", HUGE },
    { "{}", {} }, { "a function", function() end }, { "true", true },
    { "false", false }, { "a userdata", io.stdout },
    { "a thread", coroutine.create(function() end) },
    { "a dict", d },
}
local maxinteger = math.maxinteger     -- luacheck: ignore 143 (5.3+)
if maxinteger then
    BAD[#BAD + 1] = { "maxinteger", maxinteger }
    BAD[#BAD + 1] = { "mininteger", -maxinteger - 1 }
end
if C then
    BAD[#BAD + 1] = { "a ticket", C.ticket() }
    BAD[#BAD + 1] = { "a mark", C.mark() }
    BAD[#BAD + 1] = { "a zone", d._zone }
end


-- ---------------------------------------------------------------------
-- The table: every function covered, by "<module>.<name>" for the
-- modules' functions, "dict:<name>" for a dict's methods, "core.<name>"
-- for the C module's.
--
--   args      the good arguments (a function: fresh ones per call), the
--             self first for a method
--   n         how many (default #args), nils included
--   method    true: args[1] is the self, swept over SELVES
--   opts      the position of an options table among args, and its
--             fields: each field gets each bad value too
--   after     run after each call, whatever it did (frees what it took)
--   skip      skip(position, value, field?): a reason not to make that
--             call (field: of the options table at position)
--   why       instead of args: why the function is not swept
--   test_build  the C module's test build has it, the production one not

local T = {}

local function holding_lock()
    local l = assert(resty_lock:new(d, { timeout = 0, exptime = 5 }))
    assert(l:lock(fresh_key()))
    return l
end
local function holding_shared()
    local l = assert(resty_lock:new(d, { timeout = 0, exptime = 5 }))
    assert(l:lock_shared(fresh_key()))
    return l
end
local function holding_sem()
    local s = assert(semaphore:new(d, { timeout = 0, exptime = 5 }))
    assert(s:acquire(fresh_key()))
    return s
end
local function idle_lock()
    return assert(resty_lock:new(d, { timeout = 0, exptime = 5 }))
end
local function idle_sem()
    return assert(semaphore:new(d, { timeout = 0, exptime = 5 }))
end
local function release(args)
    local o = args[1]
    if type(o) == "table" then
        pcall(o.unlock or o.release, o)
    end
end

-- shdict
local SHDICT_OPTS = { "size", "dir", "shards", "create", "mode", "group" }
T["resty.shmlock.shdict.open"] = { args = { "sw_open", { size = "64k" } },
                                   opts = { 2, SHDICT_OPTS } }
T["resty.shmlock.shdict.destroy"] = { args = { "sw_gone", {} },
                                      opts = { 2, { "dir" } } }
T["resty.shmlock.shdict.opened"] = { args = { "sw" }, n = 2 }
T["resty.shmlock.shdict.set_logger"] = {
    args = { nil }, n = 1,
    after = function() shdict.set_logger(nil) end }
T["resty.shmlock.shdict.check_name"] = { args = { "sw" } }
T["resty.shmlock.shdict.check_key"] = { args = { "k" } }
T["resty.shmlock.shdict.directory"] = { args = {}, n = 1 }
T["resty.shmlock.shdict._zone_handle"] = { args = { d } }

local function dict_method(...)
    return { args = { d, ... }, method = true }
end
T["dict:get"] = dict_method("k")
T["dict:get_stale"] = dict_method("k")
T["dict:set"] = dict_method("k", "v", 0, 0)
T["dict:safe_set"] = dict_method("k", "v", 0, 0)
T["dict:add"] = dict_method("a", "v", 0, 0)
T["dict:safe_add"] = dict_method("a", "v", 0, 0)
T["dict:replace"] = dict_method("k", "v", 0, 0)
T["dict:delete"] = dict_method("d")
T["dict:incr"] = dict_method("n", 1, 0, 0)
T["dict:lpush"] = dict_method("l", "v")
T["dict:rpush"] = dict_method("l", "v")
T["dict:lpop"] = dict_method("l")
T["dict:rpop"] = dict_method("l")
T["dict:llen"] = dict_method("l")
T["dict:ttl"] = dict_method("k")
T["dict:expire"] = dict_method("k", 100)
T["dict:flush_all"] = dict_method()
T["dict:flush_expired"] = dict_method(0)
T["dict:get_keys"] = dict_method(10)
T["dict:scan"] = dict_method(0, 10)
T["dict:capacity"] = dict_method()
T["dict:free_space"] = dict_method()
T["dict:shards"] = dict_method()
T["dict:stats"] = dict_method()
T["dict:verify"] = dict_method()
T["dict:cas"] = dict_method("k", "v", "w", 0, 0)
T["dict:cad"] = dict_method("k", "w")
T["resty.shmlock.shdict._set_guarded"] = { args = { d, "k", "v", 0, 0, 0, 0,
                                                  0 } }

-- resty.shmlock (the module is the lock objects' metatable's __index)
local LOCK_OPTS = { "exptime", "timeout", "step", "ratio", "max_step",
                    "blocking_timeout" }
T["resty.shmlock.new"] = { args = { d, { timeout = 0 } },
                           opts = { 2, LOCK_OPTS } }
T["resty.shmlock.lock"] = { args = function() return { idle_lock(),
                            fresh_key(), 0 } end, method = true,
                            after = release }
T["resty.shmlock.lock_shared"] = T["resty.shmlock.lock"]
T["resty.shmlock.trylock"] = { args = function() return { idle_lock(),
                               fresh_key() } end, method = true,
                               after = release }
T["resty.shmlock._lock_unless"] = {
    args = function() return { idle_lock(), fresh_key(),
                               function() return false end } end,
    method = true, after = release }
T["resty.shmlock.unlock"] = { args = function() return { holding_lock() }
                              end, method = true, after = release }
T["resty.shmlock.expire"] = { args = function() return { holding_lock(), 1 }
                              end, method = true, after = release }
T["resty.shmlock.owned"] = { args = function() return { holding_shared() }
                             end, method = true, after = release }
T["resty.shmlock.inspect"] = { args = { d, "k" } }
T["resty.shmlock.can_sleep"] = { args = {}, n = 1 }
T["resty.shmlock._is_lock"] = { args = function() return { idle_lock() } end,
                                n = 1 }

-- resty.shmlock.semaphore
T["resty.shmlock.semaphore.new"] = {
    args = { d, { timeout = 0 } },
    opts = { 2, { "permits", "exptime", "timeout", "step", "ratio",
                  "max_step", "blocking_timeout" } } }
T["resty.shmlock.semaphore.acquire"] = {
    args = function() return { idle_sem(), fresh_key(), 0 } end,
    method = true, after = release }
T["resty.shmlock.semaphore.release"] = {
    args = function() return { holding_sem() } end, method = true,
    after = release }
T["resty.shmlock.semaphore.expire"] = {
    args = function() return { holding_sem(), 1 } end, method = true,
    after = release }
T["resty.shmlock.semaphore.owned"] = T["resty.shmlock.semaphore.release"]
T["resty.shmlock.semaphore.count"] = {
    args = function() return { idle_sem(), fresh_key() } end,
    method = true }
T["resty.shmlock.semaphore.inspect"] = { args = { d, "k" } }

-- resty.shmlock.cache
local function loader(v)
    return v
end
T["resty.shmlock.cache.new"] = {
    args = { "sw_c", { dict = d, lock_dict = d } },
    opts = { 2, { "dict", "lock_dict", "lock_opts", "lock", "ttl",
                  "neg_ttl", "resurrect_ttl", "stale_ttl", "l1_size",
                  "redis", "fleet_lag", "redis_timeout" } } }
T["resty.shmlock.cache.get"] = {
    args = function() return { c, fresh_key(), {}, loader, "v" } end,
    method = true,
    opts = { 3, { "ttl", "neg_ttl", "resurrect_ttl", "stale_ttl" } } }
T["resty.shmlock.cache.peek"] = { args = { c, "k", true }, method = true }
T["resty.shmlock.cache.set"] = { args = { c, "k", "v", 10 }, method = true }
T["resty.shmlock.cache.delete"] = { args = { c, "k" }, method = true }
T["resty.shmlock.cache.purge"] = { args = { c }, method = true }
T["resty.shmlock.cache.stats"] = { args = { c }, method = true }
T["resty.shmlock.cache.decode_entry"] = { args = { "v" } }

-- resty.shmlock.redis (a client that cannot reach Redis)
T["resty.shmlock.redis.new"] = {
    args = { fake_redis, { timeout = 0 } },
    opts = { 2, { "exptime", "timeout", "step", "ratio", "max_step",
                  "prefix", "fence_ttl", "dict", "renew",
                  "redis_timeout" } } }
T["resty.shmlock.redis.lock"] = { args = { rlock, "k", 0 }, method = true }
T["resty.shmlock.redis.trylock"] = { args = { rlock, "k" }, method = true }
T["resty.shmlock.redis.unlock"] = { args = { rlock }, method = true }
T["resty.shmlock.redis.expire"] = { args = { rlock, 1 }, method = true }
T["resty.shmlock.redis.owned"] = { args = { rlock }, method = true }

-- resty.shmlock.redis.semaphore (the same client)
T["resty.shmlock.redis.semaphore.new"] = {
    args = { fake_redis, { timeout = 0 } },
    opts = { 2, { "permits", "exptime", "timeout", "step", "ratio",
                  "max_step", "prefix", "dict", "redis_timeout" } } }
T["resty.shmlock.redis.semaphore.acquire"] = {
    args = { rsem_idle, "k", 0 }, method = true }
T["resty.shmlock.redis.semaphore.release"] = { args = { rsem_idle },
                                               method = true }
T["resty.shmlock.redis.semaphore.expire"] = { args = { rsem_idle, 1 },
                                              method = true }
T["resty.shmlock.redis.semaphore.count"] = { args = { rsem_idle, "k" },
                                             method = true }
T["resty.shmlock.redis.semaphore.owned"] = { args = { rsem_idle },
                                             method = true }

-- resty.shmlock.testing: the zone directory is this run's again after
-- each call
local function own_dir()
    testing.remove_zone_dir()
    core.setenv("SHMLOCK_DIR", dir)
end
-- after each call; they start processes (a shell, mktemp, interpreters):
-- the calls that would only start more of the same are skipped
local function spawns(last)
    return function(pos, v, field)
        if pos > last then
            return "an argument it never reads"
        end
        if pos == 2 and type(v) == "string" and v ~= "" then
            return "any source is written to a file as it is"
        end
        if field == "together" and v ~= false and v ~= nil then
            return "only false means something"
        end
    end
end
T["resty.shmlock.testing.zone_dir"] = { args = { dir }, after = own_dir,
                                        skip = spawns(1) }
T["resty.shmlock.testing.remove_zone_dir"] = { args = {}, n = 1,
                                               after = own_dir }
T["resty.shmlock.testing.processes"] = {
    args = { 1, "", { timeout = 20 } },
    opts = { 3, { "timeout", "together" } }, after = own_dir,
    skip = spawns(3) }


-- the C module's functions (PUC Lua)
if C then
    local K = C.K
    local z = d._zone
    local id = 77
    local function tk() return C.ticket() end
    -- a ticket of a lock held on key "h" (fresh per call), and its release
    local function held_ticket()
        local t = C.ticket()
        C.slot_acquire(z, "h", 1, id, 5000, 0, t)
        return t
    end
    local function free_held(args)
        for i = 1, #args do
            if type(args[i]) == "userdata" and args[i] ~= z then
                pcall(C.slot_release, z, args[i])
            end
        end
    end
    local function sem_ticket()
        local t = C.ticket()
        C.group_acquire(z, K.SEMAPHORE, "g", 1, id, 2, 5000, t)
        return t
    end
    local function free_sem(args)
        for i = 1, #args do
            if type(args[i]) == "userdata" and args[i] ~= z then
                pcall(C.group_release, z, K.SEMAPHORE, "g", 1, args[i])
            end
        end
    end
    local function slot(f, free)
        return { args = f, after = free }
    end
    local ZONE_FIELDS = { "dir", "name", "size", "shards", "mode", "group",
                          "owner_uid", "owner_gid" }
    T["core.zone_open"] = { args = { { dir = dir, name = "sw_core",
                                       size = 65536 } },
                            opts = { 1, ZONE_FIELDS } }
    T["core.zone_destroy"] = { args = { dir, "sw_gone" } }
    T["core.zone_name_ok"] = { args = { "sw" } }
    T["core.zone_dead"] = { args = { z } }
    T["core.zone_shards"] = { args = { z } }
    T["core.zone_gen_add"] = { args = { z, 3, 0 } }
    T["core.wait_begin"] = { args = { z, 5 },
        after = function() C.wait_end(z, 5, 0, 0) end }
    -- a sequence this word does not hold: the call returns at once
    T["core.wait_end"] = { args = function()
        return { z, 5, (C.wait_begin(z, 5) + 1) % 2 ^ 32, 0 } end }
    T["core.wake_waiters"] = { args = { z, 5, false } }
    T["core.wait_count"] = { args = { z, 5 } }
    T["core.dict_store"] = { args = { z, K.OP_SET, "k", "v", 0, 0, 0, 0, 0 } }
    T["core.dict_get"] = { args = { z, "k", false } }
    T["core.dict_incr"] = { args = { z, "n", 1, true, 0, 0 } }
    T["core.dict_ttl"] = { args = { z, "k" } }
    T["core.dict_expire"] = { args = { z, "k", 100000 } }
    T["core.dict_cas"] = { args = { z, "k", "v", "w", 0, 0 } }
    T["core.dict_cad"] = { args = { z, "k", "w" } }
    T["core.dict_flush_all"] = { args = { z } }
    T["core.dict_flush_expired"] = { args = { z, 0 } }
    T["core.dict_scan"] = { args = { z, 0, 10 } }
    T["core.dict_capacity"] = { args = { z } }
    T["core.dict_free_space"] = { args = { z } }
    T["core.dict_push"] = { args = { z, K.LEFT, "l", "v" } }
    T["core.dict_pop"] = { args = { z, K.LEFT, "l" } }
    T["core.dict_llen"] = { args = { z, "l" } }
    T["core.dict_verify"] = { args = { z } }
    T["core.dict_stats"] = { args = { z, -1 } }
    T["core.strerror"] = { args = { 1 } }
    T["core.sys_strerror"] = { args = { 1 } }
    T["core.errno"] = { args = {}, n = 1 }
    T["core.recoveries"] = { args = {}, n = 1 }
    T["core.now_ms"] = { args = {}, n = 1 }
    T["core.now_us"] = { args = {}, n = 1 }
    T["core.hash"] = { args = { "k" } }
    T["core.self_pid"] = { args = {}, n = 1 }
    T["core.proc_start"] = { args = { 1 } }
    T["core.proc_alive"] = { args = { 1, 0 } }
    T["core.token_block"] = { args = {}, n = 1 }
    -- (it sleeps as long as it is asked: a second at most here)
    T["core.sleep"] = { args = { 0 }, skip = function(_, v)
        return type(v) == "number" and v > 1e-3 and v <= 1e12
               and "a sleep that long" end }
    T["core.setenv"] = { args = { "SHMLOCK_SWEEP", "1" } }
    T["core.getgrnam"] = { args = { "root" } }
    T["core.getgrgid"] = { args = { 0 } }
    T["core.getpwuid"] = { args = { 0 } }
    for _, op in ipairs { "tobit", "bnot", "band", "bor", "bxor", "lshift",
                          "rshift", "arshift" } do
        T["core.bit_" .. op] = { args = { 5, 1 } }
    end
    T["core.pack_double"] = { args = { 1.5 } }
    T["core.unpack_double"] = { args = { "12345678", 1 } }
    T["core.ticket"] = { args = {}, n = 1 }
    T["core.mark"] = { args = {}, n = 1 }
    T["core.ticket_copy"] = { args = function()
        return { tk(), held_ticket(), true } end, after = free_held }
    T["core.ticket_state"] = { args = { C.ticket() } }
    T["core.mark_state"] = { args = { C.mark() } }
    T["core.slot_acquire"] = slot(function()
        return { z, "h", 1, id, 5000, 0, tk() } end, free_held)
    T["core.slot_acquire_hint"] = T["core.slot_acquire"]
    T["core.slot_release"] = slot(function()
        return { z, held_ticket() } end, free_held)
    T["core.slot_extend"] = slot(function()
        return { z, held_ticket(), 5000, 0 } end, free_held)
    T["core.slot_look"] = { args = function()
        return { z, "h", 1, tk() } end }
    T["core.slot_swap"] = slot(function()
        return { z, held_ticket(), id + 1, false, 5000, 0, tk() } end,
        free_held)
    T["core.slot_mark"] = slot(function()
        return { z, held_ticket(), id + 1, 5000, 0, 1000, tk() } end,
        free_held)
    T["core.slot_read_mark"] = slot(function()
        return { z, held_ticket(), C.mark() } end, free_held)
    T["core.slot_alive"] = { args = { C.ticket() } }
    T["core.slot_hash"] = { args = { "abc", 3 } }
    T["core.slot_scan"] = { args = { z, 0, 16 } }
    T["core.owner_ids"] = { args = {}, n = 1 }
    T["core.group_acquire"] = slot(function()
        return { z, K.SEMAPHORE, "g", 1, id, 2, 5000, tk() } end, free_sem)
    T["core.group_release"] = slot(function()
        return { z, K.SEMAPHORE, "g", 1, sem_ticket() } end, free_sem)
    T["core.group_extend"] = slot(function()
        return { z, K.SEMAPHORE, "g", 1, sem_ticket(), 5000 } end, free_sem)
    T["core.group_reclaim"] = { args = { z, K.SEMAPHORE, "g", 1 } }
    T["core.group_holders"] = { args = { z, K.SEMAPHORE, "g", 1, 4 } }
    T["core.group_head"] = { args = function()
        return { z, K.SEMAPHORE, "g", 1, tk() } end }
    -- the lock's calls, on a record of its own (holding "lk" where the
    -- call needs a lock), given back after each
    local function lk()
        return C.lock_new(z)
    end
    local function held_lk()
        local l = C.lock_new(z)
        C.lock_acquire(l, "lk", 2, 5000, 0)
        return l
    end
    local function free_lk(args)
        for i = 1, #args do
            if type(args[i]) == "userdata" and args[i] ~= z then
                pcall(C.lock_release, args[i], 0)
            end
        end
    end
    local function free_sem_lk(args)
        -- (the sweep's bad arguments put other values first)
        local ok, t = pcall(C.lock_ticket, args[1])
        if ok then
            pcall(C.group_release, z, K.SEMAPHORE, "sk", 2, t)
        end
    end
    T["core.lock_new"] = { args = { z } }
    T["core.lock_zone"] = { args = function() return { lk(), z } end }
    T["core.lock_acquire"] = slot(function()
        return { lk(), "lk", 2, 5000, 0 } end, free_lk)
    T["core.lock_retry"] = T["core.lock_acquire"]
    T["core.lock_look"] = slot(function()
        return { lk(), "lk", 2, 5000, 1, 0, 0, 0 } end, free_lk)
    T["core.lock_release"] = slot(function()
        return { held_lk(), 0 } end, free_lk)
    T["core.lock_extend"] = slot(function()
        return { held_lk(), 5000 } end, free_lk)
    T["core.lock_withdraw"] = slot(function()
        return { held_lk(), "lk", 2 } end, free_lk)
    T["core.lock_holds"] = slot(function()
        return { held_lk(), "lk", 2 } end, free_lk)
    T["core.lock_here"] = { args = { z, "lk", 2, false } }
    -- (a wait of 0 s: at once)
    T["core.lock_wait"] = slot(function()
        return { lk(), "lk", 2, 5000, 0, 0, 0.001, 2, 0.5, 0 } end,
        free_lk)
    T["core.lock_verdict"] = { args = function() return { lk(), true } end }
    T["core.lock_dead"] = { args = function() return { lk() } end }
    T["core.lock_ticket"] = { args = function() return { lk() } end }
    -- the semaphore's (a permit of "sk" of 2, on a record of its own)
    T["core.sem_acquire"] = slot(function()
        return { lk(), "sk", 2, 2, 5000 } end, free_sem_lk)
    T["core.sem_retry"] = T["core.sem_acquire"]
    T["core.sem_wait"] = slot(function()
        return { lk(), "sk", 2, 2, 5000, 0, 0, 0.001, 2, 0.5, 0 } end,
        free_sem_lk)
    T["core.sem_here"] = { args = { z, "sk", 2, 2 } }
    -- the lock objects' (resty.shmlock's under PUC Lua: made once, a
    -- later call answers the same metatable)
    T["core.lock_class"] = { args = { resty_lock, function() end,
                                      function() end, function() end } }
    T["core.lock_object"] = { args = { z, "sw", 30, 5, 0.001, 2, 0.5 } }
    T["core.lock_object_ticket"] = { args = function()
        return { assert(resty_lock:new(d)) } end }
    -- the dict's hot methods (put into its methods table again: the same)
    T["core.dict_class"] = { args = function()
        return { getmetatable(d).__index,
                 require("resty.shmlock.internal.key").check,
                 require("resty.shmlock.internal.log").recoveries } end }
    -- the test build's (make test-every-lua's ASan module)
    T["core.test_fork"] = { why = "forks, by design", test_build = true }
    T["core.test_exit"] = { why = "exits, by design", test_build = true }
    T["core.test_wait"] = { args = { 1 }, test_build = true }
end


-- ---------------------------------------------------------------------
-- The walk: every function of the public modules, of the objects'
-- metatables and of the C module, each covered by T; every entry of T
-- names a function the walk found.

local found = {}

local function walk(prefix, t, sep)
    local names = {}
    for k, v in pairs(t) do
        if type(v) == "function" then
            names[#names + 1] = prefix .. sep .. tostring(k)
            found[prefix .. sep .. tostring(k)] = v
        end
    end
    return names
end

local function methods_of(obj)
    local mt = getmetatable(obj)
    local index = type(mt) == "table" and mt.__index
    return type(index) == "table" and index or {}
end

for name, mod in pairs(MODULES) do
    if type(mod) == "table" then
        walk(name, mod, ".")
    end
end
walk("dict", methods_of(d), ":")
for _, o in ipairs { { "resty.shmlock", lock_idle },
                     { "resty.shmlock.semaphore", sem_idle },
                     { "resty.shmlock.cache", c },
                     { "resty.shmlock.redis", rlock },
                     { "resty.shmlock.redis.semaphore", rsem_idle } } do
    -- an object's methods are its module's functions
    for k, v in pairs(methods_of(o[2])) do
        if type(v) == "function" and found[o[1] .. "." .. k] ~= v then
            found[o[1] .. ":" .. k] = v
        end
    end
end
if C then
    walk("core", C, ".")
end

local missing, stale = {}, {}
for name in pairs(found) do
    if not T[name] then
        missing[#missing + 1] = name
    end
end
for name, e in pairs(T) do
    if not found[name] and not e.test_build then
        stale[#stale + 1] = name
    end
end
table.sort(missing)
table.sort(stale)
if #missing > 0 then
    error("not covered by the sweep: " .. table.concat(missing, ", "))
end
if #stale > 0 then
    error("the sweep names what no module has: " .. table.concat(stale, ", "))
end


-- ---------------------------------------------------------------------
-- The calls

local calls = 0
-- SWEEP_VERIFY=1: the zone verified after every call (slow; to find the
-- call that broke it)
local VERIFY = os.getenv("SWEEP_VERIFY") == "1"
-- SWEEP_SAMPLE=N: one in N of each function's (argument, bad value)
-- calls, a different one for each function, every wrong self still
-- (make test-every-lua's valgrind pass, 50 times slower than the others,
-- which make every call)
local SAMPLE = tonumber(os.getenv("SWEEP_SAMPLE") or "") or 1
local sampled = 0
local function sample()
    sampled = sampled + 1
    return sampled % SAMPLE == 0
end

-- one call of f with args[1 .. n]; what: where the bad value is
local function call(name, e, f, args, n, what)
    calls = calls + 1
    progress:write(calls, " ", name, " ", what, "\n")
    pcall(f, unpack(args, 1, n))
    if e.after then
        e.after(args)
    end
    if VERIFY then
        local ok, err = d:verify()
        if not ok then
            error("after " .. name .. " " .. what .. ": " .. tostring(err))
        end
    end
end

local function good_args(e)
    local args = e.args
    if type(args) == "function" then
        args = args()
    else
        local copy = {}
        for i = 1, e.n or #args do
            copy[i] = args[i]
        end
        args = copy
    end
    return args, math.max(e.n or 0, #args)
end

local function sweep(name, e)
    local f = found[name]
    local _, n = good_args(e)
    if e.method then
        for _, s in ipairs(SELVES) do
            local args = good_args(e)
            args[1] = s[2]
            call(name, e, f, args, n, "self=" .. s[1])
        end
    end
    -- each position, and one past the last
    for pos = e.method and 2 or 1, n + 1 do
        for _, b in ipairs(BAD) do
            local skip = e.skip and e.skip(pos, b[2])
            if not skip and sample() then
                local args = good_args(e)
                args[pos] = b[2]
                call(name, e, f, args, math.max(n, pos),
                     "#" .. pos .. "=" .. b[1])
            end
        end
    end
    if e.opts then
        local pos, fields = e.opts[1], e.opts[2]
        for _, field in ipairs(fields) do
            for _, b in ipairs(BAD) do
                if not (e.skip and e.skip(pos, b[2], field)) and sample()
                then
                    local args = good_args(e)
                    local o = {}
                    for k, v in pairs(args[pos] or {}) do
                        o[k] = v
                    end
                    o[field] = b[2]
                    args[pos] = o
                    call(name, e, f, args, n, "#" .. pos .. "." .. field
                         .. "=" .. b[1])
                end
            end
        end
    end
end

local names = {}
for name in pairs(T) do
    names[#names + 1] = name
end
table.sort(names)
local now = require("resty.shmlock.internal.clock").now
local TIMES = os.getenv("SWEEP_TIMES") == "1"
for _, name in ipairs(names) do
    local e = T[name]
    if not e.why and found[name] then
        local t0 = now()
        sweep(name, e)
        if TIMES then
            io.stderr:write(string.format("%8.3f %s\n", now() - t0, name))
        end
    end
end

-- the process is still here, and so are its zones
progress:close()
testing.remove_zone_dir()
assert(d:set("after", "sweep"))
assert(d:get("after") == "sweep", "the zone answers after the sweep")
assert(d:verify())
print("ok " .. calls .. " calls")
