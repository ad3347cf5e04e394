-- bench_inside: the nginx side of `make bench`, sections (5), (6), (7)
-- and (11)'s loops (a semaphore's acquire+release against incr/incr(-1)).
--
-- (5) Tight loops, timed inside nginx.  The lock loops run three locks:
-- ours on a zone (*_ours), resty.lock's algorithm on a lua_shared_dict
-- (*_peer) and ours on that same lua_shared_dict (*_drop, the drop-in).  So that with 2 workers both
-- workers run the same loop at the same time, loops do not run in the
-- request handler: GET /run posts a job in the bench_ctl dict; a timer in
-- every worker picks it up, meets the others at a barrier, runs the loop
-- and posts its ns per op; /run answers when every worker has.  Each
-- worker uses its own keys (the workers share the zones, not the keys).
-- Lock loops take the next of LOCK_KEYS keys of the worker each time, as
-- handlers locking per request key would: which keys two workers happen
-- to use then does not decide whether they meet in one shard of a zone.
--
-- (6) GET /stampede/ours and /stampede/peer: one hot key, a 50 ms loader,
-- the cache-lock pattern (get; on a miss lock, get again, load, set,
-- unlock).  GET /stampede/stale: the same key of a resty.shmlock.cache
-- with stale_ttl (an expired value is served while a timer refreshes it).
-- bench_ctl counts loader calls and requests slower than 5 ms.
--
-- (7) GET /load/ours and /load/peer: every request locks one key (timeout
-- 30 s), reads a counter, sleeps 1 ms, writes it + 1 and unlocks: a ~1 ms
-- critical section under wrk.  bench_ctl counts the requests done, lock
-- errors and the requests still running (a waiter outlives wrk's run).

local ffi = require "ffi"
local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local polling_lock = require "polling_lock"

local ngx = ngx
local shared = ngx.shared
local tonumber = tonumber
local concat = table.concat

pcall(ffi.cdef, [[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec_t;
]])
pcall(ffi.cdef, "int clock_gettime(int clk, bench_timespec_t *ts);")
local ts = ffi.new("bench_timespec_t")
local function now()
    ffi.C.clock_gettime(1, ts)
    return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

local _M = {}

local NKEYS = 1000                     -- keys per worker for dict ops
local LOCK_KEYS = 64                   -- keys per worker for lock loops
local NBIG = 1000000                   -- keys of the get_big benches
local VALUE = "0123456789abcdef"       -- 16 bytes
local STAMPEDE_KEY = "hot"
local STAMPEDE_TTL = 0.5
local LOADER_DELAY = 0.05
local STALL = 0.005
local STALE_TTL = 60

-- our zones (opened in the master); ours_locks only keeps bench_locks
-- mapped for the locks that name it
local ours, ours_locks, ours_cache -- luacheck: ignore 231
local ours_big
local ngx_dict, ngx_cache, ngx_big     -- ngx.shared dicts
local ctl
local keys                             -- this worker's keys, shuffled
local lock_keys = {}                   -- this worker's lock keys
local wid                              -- this worker's id
local cache_mod, cache_obj             -- resty.shmlock.cache, if present
local stale_obj                        -- the same with stale_ttl
local warm_obj                         -- the key never expires in a run


function _M.init()
    ours = assert(shdict.open("bench_dict", { size = "16m" }))
    -- a zone of locks, opened as the README's nginx.conf opens one (16 shards)
    ours_locks = assert(shdict.open("bench_locks", { size = "4m",
                                                     shards = 16 }))
    ours_cache = assert(shdict.open("bench_cache", { size = "4m" }))
    ours_big = assert(shdict.open("bench_big",
                                  { size = NBIG * 256 + 4 * 1024 * 1024 }))
    local ok, mod = pcall(require, "resty.shmlock.cache")
    if ok then
        cache_mod = mod
    end
end


-- ---- (5) loops ----

local B = {}

-- Each lock loop is its own function on purpose: a loop shared through a
-- function argument would be one JIT trace for every lock, specialised on
-- whichever ran first, and would measure the others through side exits.
-- So the one source below is compiled once per lock and variant (a chunk
-- of its own: its own bytecode, its own traces).  The variants: a new
-- object per iteration, or one object reused.
local LOCK_LOOP = [[
local now, lock_mod, dict, store, lock_keys, nkeys, metric = ...
return function(n)
    $OUTSIDE
    local j = 0
    local t0 = now()
    for _ = 1, n do
        j = j < nkeys and j + 1 or 1
        $INSIDE
        lock:lock(lock_keys[j])
        lock:unlock()
    end
    return { [metric] = now() - t0 }
end
]]

local NEW_LOCK = "local lock = lock_mod:new(dict)"
local REUSED_LOCK = "local lock = assert(lock_mod:new(dict))\n"
    .. "    if store then assert(lock.store == store) end"

-- B[metric]: the loop of lock_mod over dict, a new lock each iteration
-- (reused false) or one reused; store: the store the lock must be on
local function lock_loop(metric, lock_mod, dict, reused, store)
    local src = LOCK_LOOP:gsub("%$(%u+)", {
        OUTSIDE = reused and REUSED_LOCK or "",
        INSIDE = reused and "" or NEW_LOCK,
    })
    local chunk = assert(loadstring(src, "=" .. metric))
    B[metric] = chunk(now, lock_mod, dict, store, lock_keys, LOCK_KEYS,
                      metric)
end

-- ours on a zone, the peer on a lua_shared_dict, and the drop-in: ours
-- with the peer's name, a lua_shared_dict (what a user who only swaps
-- require "resty.lock" for ours runs on)
lock_loop("lock_new_ours", resty_lock, "bench_locks", false)
lock_loop("lock_reused_ours", resty_lock, "bench_locks", true)
lock_loop("lock_new_peer", polling_lock, "bench_ngx_locks", false)
lock_loop("lock_reused_peer", polling_lock, "bench_ngx_locks", true)
lock_loop("lock_new_drop", resty_lock, "bench_ngx_locks", false)
lock_loop("lock_reused_drop", resty_lock, "bench_ngx_locks", true,
          "ngx.shared")

-- The floors of the two lock rows on a lua_shared_dict: nginx's C functions
-- behind ngx.shared.DICT called directly, with nothing around them, on the
-- keys the lock loops use.  floor2 is resty.lock's pair (add true, delete);
-- floor3 is the drop-in's (add a number with flags, get it back to check
-- the owner, delete).  Their ratio is what no lock with an owner check on
-- ngx.shared.DICT can beat (see bench/README, "The drop-in").
local C = ffi.C
local has_direct = pcall(require, "resty.core.shdict") and pcall(function()
    return C.ngx_http_lua_ffi_shdict_get, C.ngx_http_lua_ffi_shdict_store,
           C.ngx_http_lua_ffi_shdict_udata_to_zone
end)
local f_type = ffi.new("int[1]")
local f_flags = ffi.new("int[1]")
local f_num = ffi.new("double[1]")
local f_stale = ffi.new("int[1]")
local f_forcible = ffi.new("int[1]")
local f_err = ffi.new("char *[1]")
local f_buf = ffi.new("unsigned char[64]")
local f_ptr = ffi.new("unsigned char *[1]")
local f_len = ffi.new("size_t[1]")
local T_NIL, T_BOOLEAN, T_NUMBER = 0, 1, 3
local OP_SET, OP_ADD = 0, 1
local EXPTIME_MS = 30000               -- resty.lock's default exptime

local function floor_loop(n, three)
    assert(has_direct, "nginx's shdict functions are not callable here")
    local z = C.ngx_http_lua_ffi_shdict_udata_to_zone(shared.bench_ngx_locks[1])
    local owner = wid * 2 ^ 31 + 12345   -- a number, as the drop-in stores
    local j = 0
    local t0 = now()
    for _ = 1, n do
        j = j < LOCK_KEYS and j + 1 or 1
        local key = lock_keys[j]
        local klen = #key
        local rc
        if three then
            rc = C.ngx_http_lua_ffi_shdict_store(z, OP_ADD, key, klen,
                     T_NUMBER, nil, 0, owner, EXPTIME_MS, 6789, f_err,
                     f_forcible)
            if rc ~= 0 then error("add: " .. ffi.string(f_err[0])) end
            f_ptr[0] = f_buf
            f_len[0] = 64
            rc = C.ngx_http_lua_ffi_shdict_get(z, key, klen, f_type, f_ptr,
                     f_len, f_num, f_flags, 0, f_stale, f_err)
            if rc ~= 0 or f_type[0] ~= T_NUMBER or f_num[0] ~= owner
               or f_flags[0] ~= 6789 then
                error("get: not the owner")
            end
        else
            rc = C.ngx_http_lua_ffi_shdict_store(z, OP_ADD, key, klen,
                     T_BOOLEAN, nil, 0, 1, EXPTIME_MS, 0, f_err, f_forcible)
            if rc ~= 0 then error("add: " .. ffi.string(f_err[0])) end
        end
        rc = C.ngx_http_lua_ffi_shdict_store(z, OP_SET, key, klen, T_NIL,
                 nil, 0, 0, 0, 0, f_err, f_forcible)
        if rc ~= 0 then error("delete: " .. ffi.string(f_err[0])) end
    end
    return now() - t0
end

B.lock_reused_floor2 = function(n)
    return { lock_reused_floor2 = floor_loop(n, false) }
end
B.lock_reused_floor3 = function(n)
    return { lock_reused_floor3 = floor_loop(n, true) }
end

local function fill(dict)
    for i = 1, NKEYS do
        local ok, err = dict:set(keys[i], VALUE)
        if not ok then error("set: " .. tostring(err)) end
    end
end

local function get_loop(dict, n)
    fill(dict)
    local j = 0
    local t0 = now()
    for _ = 1, n do
        j = j + 1
        if j > NKEYS then j = 1 end
        if not dict:get(keys[j]) then error("miss") end
    end
    return now() - t0
end

local function set_loop(dict, n)
    fill(dict)
    local j = 0
    local t0 = now()
    for _ = 1, n do
        j = j + 1
        if j > NKEYS then j = 1 end
        dict:set(keys[j], VALUE)
    end
    return now() - t0
end

-- whole passes: delete every key, then add every key, each timed
local function add_delete_loop(dict, n)
    fill(dict)
    local passes = math.max(1, math.ceil(n / NKEYS))
    local td, ta = 0, 0
    for _ = 1, passes do
        local t0 = now()
        for i = 1, NKEYS do
            dict:delete(keys[i])
        end
        local t1 = now()
        for i = 1, NKEYS do
            if not dict:add(keys[i], VALUE) then error("add failed") end
        end
        local t2 = now()
        td = td + (t1 - t0)
        ta = ta + (t2 - t1)
    end
    -- scaled to n operations, as the other loops report
    local k = n / (passes * NKEYS)
    return ta * k, td * k
end

-- a queue of the worker's own: QUEUE elements waiting, then each iteration
-- an rpush and an lpop (ngx.shared.DICT's lists against ours)
local QUEUE = 100
local function queue_loop(dict, n)
    local q = "w" .. wid .. ":queue"
    dict:delete(q)
    for _ = 1, QUEUE do
        dict:rpush(q, VALUE)
    end
    local t0 = now()
    for _ = 1, n do
        dict:rpush(q, VALUE)
        if not dict:lpop(q) then error("empty queue") end
    end
    local t = now() - t0
    dict:delete(q)
    return t
end

B.queue_ours = function(n) return { queue_ours = queue_loop(ours, n) } end
B.queue_ngx = function(n) return { queue_ngx = queue_loop(ngx_dict, n) } end

-- get at NBIG keys (random order), against get at NKEYS: how each store's
-- cost grows with its size, inside nginx
local big_keys
local big_filled = {}
local function get_big_loop(dict, n)
    if not big_keys then
        local perm = {}
        for i = 1, NBIG do perm[i] = i end
        math.randomseed(7)
        for i = NBIG, 2, -1 do
            local j = math.random(i)
            perm[i], perm[j] = perm[j], perm[i]
        end
        big_keys = {}
        for i = 1, NBIG do big_keys[i] = "big:" .. perm[i] end
    end
    if not big_filled[dict] then
        for i = 1, NBIG do
            local ok, err, forcible = dict:set(big_keys[i], VALUE)
            if not ok or forcible then
                error("filling the big dict: " .. tostring(err)
                      .. (forcible and " (evicted)" or ""))
            end
        end
        big_filled[dict] = true
    end
    local j = 0
    local t0 = now()
    for _ = 1, n do
        j = j + 1
        if j > NBIG then j = 1 end
        if not dict:get(big_keys[j]) then error("miss") end
    end
    return now() - t0
end

B.get_big_ours = function(n) return { get_big_ours = get_big_loop(ours_big, n) } end
B.get_big_ngx = function(n) return { get_big_ngx = get_big_loop(ngx_big, n) } end

B.get_ours = function(n) return { get_ours = get_loop(ours, n) } end
B.get_ngx = function(n) return { get_ngx = get_loop(ngx_dict, n) } end
B.set_ours = function(n) return { set_ours = set_loop(ours, n) } end
B.set_ngx = function(n) return { set_ngx = set_loop(ngx_dict, n) } end
B.add_delete_ours = function(n)
    local a, d = add_delete_loop(ours, n)
    return { add_ours = a, delete_ours = d }
end
B.add_delete_ngx = function(n)
    local a, d = add_delete_loop(ngx_dict, n)
    return { add_ngx = a, delete_ngx = d }
end


-- (11) a semaphore's acquire+release against limit.conn's count: incr(1)
-- then incr(-1) on a lua_shared_dict.  Both on one key for every worker
-- (a per-client key is host-wide: that is the point), one object reused;
-- permits high enough that nobody waits (the cost of the count itself).
local semaphore = require "resty.shmlock.semaphore"
local SEM_KEY = "conn:127.0.0.1"

B.sem_ours = function(n)
    local sem = assert(semaphore:new("bench_locks", { permits = 1000 }))
    local t0 = now()
    for _ = 1, n do
        sem:acquire(SEM_KEY)
        sem:release()
    end
    return { sem_acquire_release = now() - t0 }
end

B.sem_incr = function(n)
    local dict = ngx_dict
    local t0 = now()
    for _ = 1, n do
        dict:incr(SEM_KEY, 1, 0)
        dict:incr(SEM_KEY, -1)
    end
    return { incr_pair_ngx = now() - t0 }
end


-- a worker's side of a job: barrier, loop, post the result
local function run_job(id, name, n, nworkers)
    ctl:incr("ready:" .. id, 1, 0)
    local deadline = now() + 10
    while (ctl:get("ready:" .. id) or 0) < nworkers do
        if now() > deadline then
            ctl:set("res:" .. id .. ":" .. wid, "error: barrier timeout")
            return
        end
        ngx.sleep(0.001)
    end
    local f = B[name]
    local t0 = now()
    local ok, res = pcall(f, n)
    local took = now() - t0
    if took > 5 then
        ngx.log(ngx.WARN, "bench job ", id, " (", name, ", n=", n,
                ") took ", took, " s in worker ", wid)
    end
    local out
    if not ok then
        out = "error: " .. tostring(res)
    else
        local parts = {}
        for metric, secs in pairs(res) do
            parts[#parts + 1] = metric .. "=" .. (secs * 1e9 / n)
        end
        out = concat(parts, " ")
    end
    ctl:set("res:" .. id .. ":" .. wid, out)
end

local function poller(premature)
    if premature then return end
    local seen = ctl:get("job") or 0
    while not ngx.worker.exiting() do
        local job = ctl:get("job") or 0
        if job > seen then
            local spec = ctl:get("job:" .. job)
            if spec then
                seen = job
                local name, n, nworkers = spec:match("^(%S+) (%d+) (%d+)$")
                run_job(job, name, tonumber(n), tonumber(nworkers))
            end
        end
        ngx.sleep(0.002)
    end
end

function _M.init_worker()
    ctl = shared.bench_ctl
    ngx_dict = shared.bench_ngx
    ngx_cache = shared.bench_ngx_cache
    ngx_big = shared.bench_ngx_big
    wid = ngx.worker.id()
    local perm = {}
    for i = 1, NKEYS do perm[i] = i end
    math.randomseed(wid + 1)
    for i = NKEYS, 2, -1 do
        local j = math.random(i)
        perm[i], perm[j] = perm[j], perm[i]
    end
    keys = {}
    for i = 1, NKEYS do
        keys[i] = "w" .. wid .. ":key:" .. perm[i]
    end
    for i = 1, LOCK_KEYS do
        lock_keys[i] = "lock:" .. wid .. ":" .. i
    end
    if cache_mod then
        cache_obj = assert(cache_mod.new("bench_stampede", {
            dict = "bench_cache", lock_dict = "bench_locks",
            ttl = STAMPEDE_TTL,
        }))
        if cache_obj.purge then
            stale_obj = assert(cache_mod.new("bench_stale", {
                dict = "bench_cache", lock_dict = "bench_locks",
                ttl = STAMPEDE_TTL, stale_ttl = STALE_TTL,
            }))
            warm_obj = assert(cache_mod.new("bench_warm", {
                dict = "bench_cache", lock_dict = "bench_locks",
                ttl = 3600,
            }))
        end
    end
    assert(ngx.timer.at(0, poller))
end

-- GET /run?bench=NAME&n=N: "<metric> <ns per op>" lines, one per worker
-- and metric: "<wid> <metric> <ns>"
function _M.run()
    local args = ngx.req.get_uri_args()
    local name, n = args.bench, tonumber(args.n)
    if not B[name] or not n then
        ngx.status = 400
        ngx.say("unknown bench or bad n")
        return
    end
    local nworkers = ngx.worker.count()
    -- the job is described before it is published: a poller that sees
    -- the new id finds its description
    local id = ctl:incr("job_ids", 1, 0)
    ctl:set("job:" .. id, name .. " " .. n .. " " .. nworkers)
    ctl:set("job", id)
    local deadline = now() + 120
    while true do
        local done = 0
        for w = 0, nworkers - 1 do
            local res = ctl:get("res:" .. id .. ":" .. w)
            if res then
                done = done + 1
                if res:find("^error") then done = nworkers end
            end
        end
        if done >= nworkers then break end
        if now() > deadline then
            ngx.status = 504
            ngx.say("workers did not answer")
            return
        end
        ngx.sleep(0.005)
    end
    -- one worker's error ends the wait: the others may not have answered
    -- yet, so every worker's state is told, the real errors first
    local results, errors, silent = {}, {}, {}
    for w = 0, nworkers - 1 do
        local res = ctl:get("res:" .. id .. ":" .. w)
        results[w] = res
        if not res then
            silent[#silent + 1] = "worker " .. w .. ": error: no answer"
        elseif res:find("^error") then
            errors[#errors + 1] = "worker " .. w .. ": " .. res
        end
    end
    if #errors > 0 or #silent > 0 then
        ngx.status = 500
        for _, line in ipairs(errors) do ngx.say(line) end
        for _, line in ipairs(silent) do ngx.say(line) end
        return
    end
    for w = 0, nworkers - 1 do
        for metric, ns in results[w]:gmatch("(%S+)=(%S+)") do
            ngx.say(w, " ", metric, " ", ns)
        end
    end
end


-- ---- (6) stampede ----

local function loader(variant)
    ctl:incr("loads:" .. variant, 1, 0)
    ngx.sleep(LOADER_DELAY)
    return "value loaded at " .. ngx.now()
end

local function account(variant, t0)
    local t = now() - t0
    if t >= STALL then
        ctl:incr("stalls:" .. variant, 1, 0)
        ctl:incr("stall_us:" .. variant, t * 1e6, 0)
        local k = "stall_max_us:" .. variant .. ":" .. wid
        if t * 1e6 > (ctl:get(k) or 0) then
            ctl:set(k, t * 1e6)
        end
    end
end

-- the cache pattern of resty.lock's documentation, over any dict and lock
local function cache_lock_get(cache, lock_mod, lock_dict, variant)
    local val = cache:get(STAMPEDE_KEY)
    if val then
        return val
    end
    local lock, err = lock_mod:new(lock_dict)
    if not lock then
        error("lock: " .. tostring(err))
    end
    local elapsed
    elapsed, err = lock:lock(STAMPEDE_KEY)
    if not elapsed then
        error("lock: " .. tostring(err))
    end
    val = cache:get(STAMPEDE_KEY)
    if val then
        lock:unlock()
        return val
    end
    val = loader(variant)
    local ok
    ok, err = cache:set(STAMPEDE_KEY, val, STAMPEDE_TTL)
    if not ok then
        lock:unlock()
        error("set: " .. tostring(err))
    end
    lock:unlock()
    return val
end

local function ours_loader()
    return loader("ours")
end

function _M.stampede_ours()
    local t0 = now()
    local val
    if cache_obj then
        local err
        val, err = cache_obj:get(STAMPEDE_KEY, nil, ours_loader)
        if val == nil then
            error("cache: " .. tostring(err))
        end
    else
        val = cache_lock_get(ours_cache, resty_lock, "bench_locks", "ours")
    end
    ngx.say(val)
    account("ours", t0)
end

local function stale_loader()
    return loader("stale")
end

-- the same key with stale_ttl: expiries are refreshed by a timer
function _M.stampede_stale()
    local t0 = now()
    local val, err = stale_obj:get(STAMPEDE_KEY, nil, stale_loader)
    if val == nil then
        error("cache: " .. tostring(err))
    end
    ngx.say(val)
    account("stale", t0)
end

local function warm_loader()
    return loader("warm")
end

-- the same key with no expiry during the run: what a request costs when
-- nothing expires (the p99 the stale_ttl variant is held to)
function _M.stampede_warm()
    local t0 = now()
    local val, err = warm_obj:get(STAMPEDE_KEY, nil, warm_loader)
    if val == nil then
        error("cache: " .. tostring(err))
    end
    ngx.say(val)
    account("warm", t0)
end

function _M.stampede_peer()
    local t0 = now()
    local val = cache_lock_get(ngx_cache, polling_lock, "bench_ngx_locks",
                               "peer")
    ngx.say(val)
    account("peer", t0)
end

-- ---- (7) one lock key under load ----

local LOAD_KEY = "load"
local LOAD_TIMEOUT = 30

-- the longest request of this worker, also after wrk stopped counting
local function load_took(variant, t0)
    local us = (now() - t0) * 1e6
    local k = "max_us:" .. variant .. ":" .. wid
    if us > (ctl:get(k) or 0) then
        ctl:set(k, us)
    end
end

local function load(lock_mod, lock_dict, counter, variant)
    local t0 = now()
    ctl:incr("inflight:" .. variant, 1, 0)
    local lock, err = lock_mod:new(lock_dict, { timeout = LOAD_TIMEOUT })
    local elapsed
    if lock then
        elapsed, err = lock:lock(LOAD_KEY)
    end
    if not elapsed then
        ctl:incr("lock_errors:" .. variant, 1, 0)
        ctl:incr("inflight:" .. variant, -1, 0)
        load_took(variant, t0)
        ngx.log(ngx.WARN, "load ", variant, ": lock: ", err)
        ngx.status = 500
        ngx.say("lock: ", err)
        return
    end
    local n = counter:get("count:" .. variant) or 0
    ngx.sleep(0.001)
    counter:set("count:" .. variant, n + 1)
    local ok
    ok, err = lock:unlock()
    if ok ~= 1 then
        ctl:incr("lock_errors:" .. variant, 1, 0)
        ngx.log(ngx.WARN, "load ", variant, ": unlock: ", err)
    end
    ctl:incr("done:" .. variant, 1, 0)
    ctl:incr("inflight:" .. variant, -1, 0)
    load_took(variant, t0)
    ngx.say("ok")
end

function _M.load_ours()
    load(resty_lock, "bench_locks", ours, "ours")
end

function _M.load_peer()
    load(polling_lock, "bench_ngx_locks", ngx_dict, "peer")
end

-- GET /load/reset?v=ours: zero the counters
function _M.load_reset()
    local v = ngx.var.arg_v
    ours:delete("count:" .. v)
    ngx_dict:delete("count:" .. v)
    for _, k in ipairs{ "inflight:", "lock_errors:", "done:" } do
        ctl:delete(k .. v)
    end
    for w = 0, 63 do ctl:delete("max_us:" .. v .. ":" .. w) end
    ngx.say("reset")
end

-- GET /load/stats?v=ours: once no request runs (at most 40 s),
-- "done counter lock_errors drain_seconds max_us" (max_us: the longest
-- request, timed in nginx, also those that ended after wrk's run)
function _M.load_stats()
    local v = ngx.var.arg_v
    local t0 = now()
    while (ctl:get("inflight:" .. v) or 0) > 0 and now() - t0 < 40 do
        ngx.sleep(0.01)
    end
    local counter = v == "ours" and ours or ngx_dict
    local mx = 0
    for w = 0, 63 do
        mx = math.max(mx, ctl:get("max_us:" .. v .. ":" .. w) or 0)
    end
    ngx.say(ctl:get("done:" .. v) or 0, " ",
            counter:get("count:" .. v) or 0, " ",
            ctl:get("lock_errors:" .. v) or 0, " ",
            (ctl:get("inflight:" .. v) or 0) > 0 and -1 or now() - t0, " ",
            mx)
end


-- GET /stampede/reset: cold caches, zero counters
-- GET /stampede/reset?v=...: an empty cache, zero counters; for the
-- stale_ttl variant, the key loaded (its runs start warm)
function _M.reset()
    ours_cache:flush_all()
    ngx_cache:flush_all()
    if cache_obj then
        -- every worker's L1 copy expires with the value's ttl
        ngx.sleep(STAMPEDE_TTL + 0.1)
    end
    if stale_obj and ngx.var.arg_v == "stale" then
        assert(stale_obj:purge())
        assert(stale_obj:get(STAMPEDE_KEY, nil, stale_loader))
    end
    if warm_obj and ngx.var.arg_v == "warm" then
        assert(warm_obj:purge())
        assert(warm_obj:get(STAMPEDE_KEY, nil, warm_loader))
    end
    for _, v in ipairs{ "ours", "peer", "stale", "warm" } do
        ctl:delete("loads:" .. v)
        ctl:delete("stalls:" .. v)
        ctl:delete("stall_us:" .. v)
        for w = 0, 63 do ctl:delete("stall_max_us:" .. v .. ":" .. w) end
    end
    ngx.say(cache_obj and "cache" or "pattern")
end

-- GET /stampede/stats?v=ours: "loads stalls stall_mean_us stall_max_us"
function _M.stats()
    local v = ngx.var.arg_v
    local stalls = ctl:get("stalls:" .. v) or 0
    local mx = 0
    for w = 0, 63 do
        local m = ctl:get("stall_max_us:" .. v .. ":" .. w) or 0
        if m > mx then mx = m end
    end
    ngx.say(ctl:get("loads:" .. v) or 0, " ", stalls, " ",
            stalls > 0 and (ctl:get("stall_us:" .. v) / stalls) or 0, " ",
            mx)
end


-- ---- (2) density ----

-- GET /density: "<kind> <ours> <ngx>" lines, the entries a 10 MiB store
-- holds by set() before the first one evicts another (or is refused):
-- a zone of ours, made for the count and destroyed after it, and a
-- lua_shared_dict 10m of its own per kind (bench_ngx_density_<kind>).
-- Keys "key:%010d" (14 bytes); kinds: small (strings of 8 to 16 bytes),
-- number, s64 (64-byte strings).
local DENSITY = {
    { "small", function(i) return ("v"):rep(8 + i % 9) end },
    { "number", function(i) return i end },
    { "s64", function() return ("v"):rep(64) end },
}

local function held(dict, value_of)
    local n = 0
    while true do
        local ok, err, forcible = dict:set(("key:%010d"):format(n),
                                           value_of(n))
        if not ok or forcible then
            if not ok and err ~= "no memory" then
                error("density: " .. tostring(err))
            end
            return n
        end
        n = n + 1
    end
end

function _M.density()
    for _, k in ipairs(DENSITY) do
        local name = "bench_density_" .. k[1]
        shdict.destroy(name)
        local zone = assert(shdict.open(name, { size = "10m" }))
        local ours_n = held(zone, k[2])
        assert(zone:verify())
        zone = nil -- luacheck: ignore 311
        shdict.destroy(name)
        local d = shared["bench_ngx_density_" .. k[1]]
        d:flush_all()
        d:flush_expired()
        ngx.say(k[1], " ", ours_n, " ", held(d, k[2]))
    end
end

return _M
