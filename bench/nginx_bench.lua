-- The client side of the nginx sections, against an nginx that bench/run.sh
-- started from bench/nginx/nginx.conf.in.
--
-- (5) GET /run?bench=...&n=...: each worker times n iterations of a loop
--     (all workers at once); one repetition's figure is the mean ns per op
--     over the workers.  The lock loops' repetitions take turns (ours on
--     a zone, resty.lock's algorithm, ours on its lua_shared_dict, and
--     for the reused pair the last two's C calls alone: the floors).
-- (6) wrk, 100 connections, on /stampede/ours, /stampede/stale (the
--     cache with stale_ttl, when resty.shmlock.cache has it) and
--     /stampede/peer.
-- (7) 2 workers only: wrk -t2 -c100 on /load/ours and /load/peer, one lock
--     key, a ~1 ms critical section (timeout 30 s).
--
-- (11) GET /run?bench=sem_ours and sem_incr: a semaphore's acquire+release
--     and limit.conn's incr(1)+incr(-1), one key for every worker.
--
-- usage: luajit nginx_bench.lua port workers wrk_script
-- BENCH_SECTIONS (set by run.sh): which of 5, 6, 7, 11 run (default: 5 6 7).

local bench = require "bench"

local port = assert(tonumber(arg[1]), "port")
local workers = assert(tonumber(arg[2]), "workers")
local wrk_script = assert(arg[3], "wrk script")
local base = "http://127.0.0.1:" .. port
local sections = " " .. (os.getenv("BENCH_SECTIONS") or "5 6 7") .. " "
local function wants(n)
    return sections:find(" " .. n .. " ", 1, true) ~= nil
end

local http = require "socket.http"
http.TIMEOUT = 300

local function http_get(path)
    local body, code = http.request(base .. path)
    if code ~= 200 then
        error("GET " .. path .. ": " .. tostring(code) .. " " .. tostring(body))
    end
    return body
end

-- one job: { metric = mean ns per op over the workers }
local function job(name, n)
    local body = http_get("/run?bench=" .. name .. "&n=" .. n)
    local sum, count = {}, {}
    for _, metric, ns in body:gmatch("(%d+) (%S+) (%S+)") do
        sum[metric] = (sum[metric] or 0) + tonumber(ns)
        count[metric] = (count[metric] or 0) + 1
    end
    local res = {}
    for m, s in pairs(sum) do
        if count[m] ~= workers then
            error(name .. ": " .. count[m] .. " workers answered, not "
                  .. workers)
        end
        res[m] = s / count[m]
    end
    return res
end

-- names: loops measured together, their repetitions taking turns (one of
-- each, then again), so that a noisy moment of the machine hits them all:
-- their ratios compare figures of the same moments
local function loop_bench(section, names)
    if type(names) == "string" then
        names = { names }
    end
    -- warm-up (the JIT compiles the loop), then calibration
    local worst = 0
    for _, name in ipairs(names) do
        job(name, 2000)
        for _, ns in pairs(job(name, 20000)) do
            if ns > worst then worst = ns end
        end
    end
    local n = math.max(1000, math.floor(bench.rep_seconds * 1e9 / worst))

    local samples = {}
    for _ = 1, bench.reps do
        for _, name in ipairs(names) do
            for m, ns in pairs(job(name, n)) do
                samples[m] = samples[m] or {}
                table.insert(samples[m], ns)
            end
        end
    end
    local metrics = {}
    for m in pairs(samples) do metrics[#metrics + 1] = m end
    table.sort(metrics)
    for _, m in ipairs(metrics) do
        local med, lo, hi = bench.summary(samples[m])
        bench.result(section, m, "ns", med, lo, hi, #samples[m],
                     workers .. " worker(s) at once, " .. n
                     .. " iterations per repetition")
    end
end

local section = "nginx_w" .. workers
if wants(5) then
    bench.log("(5) inside nginx, %d worker(s): ns per op", workers)
    -- ours on a zone, the peer, ours on the peer's lua_shared_dict
    loop_bench(section, { "lock_new_ours", "lock_new_peer", "lock_new_drop" })
    -- with the floors of the last two: their C calls alone (bench_inside)
    loop_bench(section, { "lock_reused_ours", "lock_reused_peer",
                          "lock_reused_drop", "lock_reused_floor2",
                          "lock_reused_floor3" })
    for _, name in ipairs{
        "get_ours", "get_ngx", "set_ours", "set_ngx",
        "add_delete_ours", "add_delete_ngx", "queue_ours", "queue_ngx",
    } do
        loop_bench(section, name)
    end
    -- 1e6 keys: how each store's cost grows with its size (one worker only:
    -- every worker would fill its own million keys)
    if workers == 1 then
        loop_bench(section, "get_big_ours")
        loop_bench(section, "get_big_ngx")
    end
end

-- (2) what a 10 MiB store holds, ours and ngx.shared.DICT's (counts, the
-- same in every run: measured once, with 1 worker)
if wants(2) and workers == 1 then
    bench.log("(2) entries a 10 MiB store holds, ours and ngx.shared.DICT")
    local body = http_get("/density")
    for kind, ours_n, ngx_n in body:gmatch("(%S+) (%d+) (%d+)") do
        for who, n in pairs{ ours = tonumber(ours_n), ngx = tonumber(ngx_n) } do
            bench.result("density", kind .. "_" .. who, "entries", n, n, n, 1,
                         "14-byte keys, 10 MiB, set() until the first "
                         .. "eviction")
        end
    end
end


-- (11) a semaphore's acquire+release against limit.conn's incr/incr(-1),
-- their repetitions taking turns
if wants(11) then
    bench.log("(11) inside nginx, %d worker(s): a semaphore's acquire+release"
              .. " vs incr(1)+incr(-1) on ngx.shared.DICT, one key, ns per"
              .. " pair", workers)
    loop_bench("semaphore_w" .. workers, { "sem_ours", "sem_incr" })
end


-- (6) stampede
local DURATION = bench.quick and 2 or 5
local REPS = bench.quick and 1 or 3
local function wrk(path, duration, timeout)
    local cmd = string.format("wrk -t2 -c100 -d%ds --timeout %ds -s %s %s%s",
                              duration or DURATION, timeout or 10,
                              wrk_script, base, path)
    local p = assert(io.popen(cmd))
    local out = p:read("*a")
    p:close()
    local f = {}
    local line = out:match("WRK\t([^\n]+)")
    if not line then error("wrk: no result line:\n" .. out) end
    for v in line:gmatch("[^\t]+") do f[#f + 1] = tonumber(v) end
    return {
        requests = f[1], errors = f[2], p50 = f[3], p90 = f[4], p99 = f[5],
        p999 = f[6], max = f[7], mean = f[8], rps = f[9],
    }
end

section = "stampede_w" .. workers
if wants(6) then
    bench.log("(6) stampede, %d worker(s): wrk -c100 -d%ds, one hot key (ttl"
              .. " 0.5 s), 50 ms loader", workers, DURATION)

    local mode = http_get("/stampede/reset")
    local variants = { "ours", "peer" }
    if mode:match("cache") then
        table.insert(variants, 2, "stale")
        table.insert(variants, 3, "warm")
    end
    for _, v in ipairs(variants) do
        local s = {}
        local function add(k, x)
            s[k] = s[k] or {}
            table.insert(s[k], x)
        end
        for _ = 1, REPS do
            http_get("/stampede/reset?v=" .. v)
            local r = wrk("/stampede/" .. v)
            if r.errors > 0 then
                error("wrk " .. v .. ": " .. r.errors .. " errors or non-2xx")
            end
            local st = http_get("/stampede/stats?v=" .. v)
            local loads, stalls, stall_mean, stall_max =
                st:match("^(%S+) (%S+) (%S+) (%S+)")
            add("loads", tonumber(loads))
            add("stalls", tonumber(stalls))
            add("stall_mean", tonumber(stall_mean) / 1e3)
            add("stall_max", tonumber(stall_max) / 1e3)
            add("p50", r.p50 / 1e3)
            add("p90", r.p90 / 1e3)
            add("p99", r.p99 / 1e3)
            add("p999", r.p999 / 1e3)
            add("max", r.max / 1e3)
            add("rps", r.rps)
        end
        local note = DURATION .. " s runs; "
                     .. (v == "stale" and "resty.shmlock.cache, stale_ttl "
                         .. "(the key loaded before each run)" or
                         v == "warm" and "resty.shmlock.cache, no expiry "
                         .. "in the run (the key loaded before each run)" or
                         (v == "ours" and mode:match("cache")
                         and "resty.shmlock.cache" or
                         (v == "ours" and "resty.shmlock + zone, cache-lock pattern"
                          or "resty.lock algorithm + ngx.shared.DICT")))
        for _, k in ipairs{ "loads", "stalls", "stall_mean", "stall_max", "p50",
                            "p90", "p99", "p999", "max", "rps" } do
            local unit = (k == "loads" or k == "stalls") and "count"
                         or (k == "rps" and "req/s" or "ms")
            local med, lo, hi = bench.summary(s[k])
            bench.result(section, v .. "_" .. k, unit, med, lo, hi, REPS, note)
        end
    end
end


-- (7) one lock key under load
if workers == 2 and wants(7) then
    local LOAD_DURATION = bench.quick and 5 or 10
    local LOAD_REPS = bench.quick and 1 or 3
    section = "load_w2"
    bench.log("(7) one lock key under load: wrk -t2 -c100 -d%ds, ~1 ms "
              .. "critical section, timeout 30 s, %d repetition(s)",
              LOAD_DURATION, LOAD_REPS)
    local s = { ours = {}, peer = {} }
    for _ = 1, LOAD_REPS do
        -- ours and the peer take turns, so that a noisy minute hits both
        for _, v in ipairs{ "ours", "peer" } do
            http_get("/load/reset?v=" .. v)
            local r = wrk("/load/" .. v, LOAD_DURATION, 35)
            local st = http_get("/load/stats?v=" .. v)
            local done, count, lock_errors, drain, server_max =
                st:match("^(%S+) (%S+) (%S+) (%S+) (%S+)")
            done, count = tonumber(done), tonumber(count)
            if tonumber(drain) < 0 then
                error("load " .. v .. ": requests still running 40 s after"
                      .. " wrk stopped")
            end
            if count ~= done then
                error(string.format("load %s: the counter is %d after %d "
                                    .. "locked increments", v, count, done))
            end
            bench.log("  %s: %d requests, p50 %.1f ms, p99 %.1f ms, max "
                      .. "%.1f ms (in nginx, after wrk too: %.1f ms), %.0f "
                      .. "req/s, %d errors, %d lock errors, drained in %.2f s",
                      v, r.requests, r.p50 / 1e3, r.p99 / 1e3, r.max / 1e3,
                      tonumber(server_max) / 1e3, r.rps, r.errors,
                      tonumber(lock_errors), tonumber(drain))
            local t = s[v]
            for k, x in pairs{ p50 = r.p50 / 1e3, p99 = r.p99 / 1e3,
                               max = r.max / 1e3, rps = r.rps,
                               errors = r.errors,
                               lock_errors = tonumber(lock_errors),
                               server_max = tonumber(server_max) / 1e3,
                               drain = tonumber(drain) * 1e3 } do
                t[k] = t[k] or {}
                table.insert(t[k], x)
            end
        end
    end
    for _, v in ipairs{ "ours", "peer" } do
        local note = LOAD_DURATION .. " s runs; " .. (v == "ours"
            and "resty.shmlock + zone" or "resty.lock algorithm + ngx.shared.DICT")
        for _, k in ipairs{ "p50", "p99", "max", "server_max", "rps",
                            "errors", "lock_errors", "drain" } do
            local unit = (k == "errors" or k == "lock_errors") and "count"
                         or (k == "rps" and "req/s" or "ms")
            local med, lo, hi = bench.summary(s[v][k])
            bench.result(section, v .. "_" .. k, unit, med, lo, hi, LOAD_REPS,
                         note)
        end
    end
end
