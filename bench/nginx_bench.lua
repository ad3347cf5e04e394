-- The client side of the nginx sections, against an nginx that bench/run.sh
-- started from bench/nginx/nginx.conf.in.
--
-- (5) GET /run?bench=...&n=...: each worker times n iterations of a loop
--     (all workers at once); one repetition's figure is the mean ns per op
--     over the workers.
-- (6) wrk, 100 connections, on /stampede/ours and /stampede/peer.
--
-- usage: luajit nginx_bench.lua port workers wrk_script

local bench = require "bench"

local port = assert(tonumber(arg[1]), "port")
local workers = assert(tonumber(arg[2]), "workers")
local wrk_script = assert(arg[3], "wrk script")
local base = "http://127.0.0.1:" .. port

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

local function loop_bench(section, name)
    -- warm-up (the JIT compiles the loop), then calibration
    job(name, 2000)
    local n = 20000
    local res = job(name, n)
    local worst = 0
    for _, ns in pairs(res) do
        if ns > worst then worst = ns end
    end
    n = math.max(1000, math.floor(bench.rep_seconds * 1e9 / worst))

    local samples = {}
    for _ = 1, bench.reps do
        for m, ns in pairs(job(name, n)) do
            samples[m] = samples[m] or {}
            table.insert(samples[m], ns)
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
bench.log("(5) inside nginx, %d worker(s): ns per op", workers)
for _, name in ipairs{
    "lock_new_ours", "lock_new_peer", "lock_reused_ours", "lock_reused_peer",
    "get_ours", "get_ngx", "set_ours", "set_ngx",
    "add_delete_ours", "add_delete_ngx",
} do
    loop_bench(section, name)
end
-- 1e6 keys: how each store's cost grows with its size (one worker only:
-- every worker would fill its own million keys)
if workers == 1 then
    loop_bench(section, "get_big_ours")
    loop_bench(section, "get_big_ngx")
end


-- (6) stampede
local DURATION = bench.quick and 2 or 5
local REPS = bench.quick and 1 or 3
section = "stampede_w" .. workers
bench.log("(6) stampede, %d worker(s): wrk -c100 -d%ds, one hot key (ttl"
          .. " 0.5 s), 50 ms loader", workers, DURATION)

local function wrk(path)
    local cmd = string.format("wrk -t2 -c100 -d%ds --timeout 10s -s %s %s%s",
                              DURATION, wrk_script, base, path)
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

local mode
for _, v in ipairs{ "ours", "peer" } do
    local s = {}
    local function add(k, x)
        s[k] = s[k] or {}
        table.insert(s[k], x)
    end
    for _ = 1, REPS do
        mode = http_get("/stampede/reset")
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
                 .. (v == "ours" and mode:match("cache")
                     and "resty.shmlock.cache" or
                     (v == "ours" and "resty.shmlock + zone, cache-lock pattern"
                      or "resty.lock algorithm + ngx.shared.DICT"))
    for _, k in ipairs{ "loads", "stalls", "stall_mean", "stall_max", "p50",
                        "p90", "p99", "p999", "max", "rps" } do
        local unit = (k == "loads" or k == "stalls") and "count"
                     or (k == "rps" and "req/s" or "ms")
        local med, lo, hi = bench.summary(s[k])
        bench.result(section, v .. "_" .. k, unit, med, lo, hi, REPS, note)
    end
end
