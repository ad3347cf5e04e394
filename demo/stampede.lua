-- The cache stampede, measured.
--
-- N processes ask for the same key at the same moment (a start barrier),
-- three times:
--
--   with the lock:    the key is cold; resty.shmlock.cache's get(): one
--                     process calls the loader, the others wait on the
--                     key's lock and are woken when the value is stored;
--   without the lock: the key is cold; plain cache-aside (get, on a miss
--                     call the loader, set): every process that misses
--                     calls the loader;
--   with stale_ttl:   the key holds a value past its ttl, within the
--                     cache's stale_ttl: one process refreshes it (it
--                     waits for the loader), the others get the stale
--                     value at once.
--
-- The loader stands for a slow backend query: it takes --ms milliseconds
-- of a backend that runs --slots queries at a time, first come first
-- served (a database behind a small connection pool).  A caller's latency
-- runs from the moment the barrier releases them all to the moment it has
-- the value.  Prints a table, writes the latencies to --out and plots
-- their distribution with gnuplot.  Everything it writes goes to --out
-- (demo/out/, which git ignores): a run leaves the checkout as it was, and
-- the committed demo/stampede.png (the plot docs/cache.md shows) changes
-- only when someone copies a new one over it.
--
--     luajit demo/stampede.lua [-n 50] [--ms 200] [--slots 4]
--                              [--out demo/out] [--png OUT/stampede.png]
--
-- Processes are forked from this one (scripts/lua/harness/proc.lua, the
-- process harness the specs and benchmarks use too: fork, start barrier,
-- wait); zones live in a private directory under /dev/shm that is removed
-- at the end.

local script_dir = arg[0]:match("^(.*)/[^/]*$") or "."
local root = script_dir .. "/.."
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;"
               .. root .. "/scripts/lua/?.lua;" .. package.path
               .. ";/usr/share/lua/5.1/?.lua"

local proc = require "harness.proc"
local shdict = require "resty.shmlock.shdict"
local cache = require "resty.shmlock.cache"

local ceil, max = math.ceil, math.max
local format = string.format

local USAGE = [[
usage: luajit demo/stampede.lua [options]
  -n N          processes asking for the key at once (default 50)
  --ms MS       the loader's backend query time in ms (default 200)
  --slots K     queries the backend runs at a time, 0 = unlimited (default 4)
  --out DIR     where the latency data goes (default demo/out)
  --png FILE    the plot (default OUT/stampede.png: demo/out/stampede.png)
  --no-plot     print the table only]]


local function parse_args(argv)
    local o = {
        n = 50, ms = 200, slots = 4,
        out = script_dir .. "/out", png = nil, plot = true,
    }
    local numeric = { ["-n"] = "n", ["--ms"] = "ms", ["--slots"] = "slots" }
    local paths = { ["--out"] = "out", ["--png"] = "png" }
    local i = 1
    while i <= #argv do
        local a = argv[i]
        if numeric[a] then
            local v = tonumber(argv[i + 1])
            if not v or v < 0 or v % 1 ~= 0 then
                io.stderr:write(a, " needs a whole number\n", USAGE, "\n")
                os.exit(2)
            end
            o[numeric[a]] = v
            i = i + 2
        elseif paths[a] and argv[i + 1] then
            o[paths[a]] = argv[i + 1]
            i = i + 2
        elseif a == "--no-plot" then
            o.plot = false
            i = i + 1
        else
            if a == "-h" or a == "--help" then
                print(USAGE)
                os.exit(0)
            end
            io.stderr:write("unknown option ", a, "\n", USAGE, "\n")
            os.exit(2)
        end
    end
    o.png = o.png or o.out .. "/stampede.png"
    if o.n < 1 or o.n > 1000 then
        io.stderr:write("-n must be between 1 and 1000\n")
        os.exit(2)
    end
    return o
end


-- The backend: one query takes `ms`, at most `slots` run at once, served
-- in arrival order (a ticket each; ticket t may start once t - slots
-- queries have finished).  Counts the queries of each run.
local function backend_query(zone, run, ms, slots)
    zone:incr("queries:" .. run, 1, 0)
    local ticket = zone:incr("backend:tickets", 1, 0)
    if slots > 0 then
        while ticket - zone:get("backend:done") > slots do
            proc.sleep(0.001)
        end
    end
    proc.sleep(ms / 1000)
    zone:incr("backend:done", 1)
    return "the value"
end

-- one caller of the protected run: resty.shmlock.cache
local function with_lock(zone, o)
    local c = assert(cache.new("stampede", {
        dict = zone,
        lock_opts = { timeout = 60 },
    }))
    local value, err = c:get("key", nil, backend_query, zone, "with", o.ms,
                             o.slots)
    assert(value, err)
end

-- one caller of the stale run: resty.shmlock.cache with stale_ttl
local STALE = { name = "stampede-stale", stale_ttl = 60 }

local function stale_cache(zone)
    return assert(cache.new(STALE.name, {
        dict = zone,
        stale_ttl = STALE.stale_ttl,
        lock_opts = { timeout = 60 },
    }))
end

local function with_stale(zone, o)
    local value, err = stale_cache(zone):get("key", nil, backend_query, zone,
                                             "stale", o.ms, o.slots)
    assert(value, err)
end

-- before the stale run: the key's value went stale 10 ms ago
local function make_stale(zone)
    assert(stale_cache(zone):set("key", "the old value", 0.001))
    proc.sleep(0.011)
end

-- one caller of the unprotected run: cache-aside, as written without a lock
local function without_lock(zone, o)
    local value = zone:get("plain:key")
    if value == nil then
        value = backend_query(zone, "without", o.ms, o.slots)
        zone:set("plain:key", value, 30)
    end
    assert(value)
end

-- Forks o.n callers held at a start barrier, releases them together;
-- returns their latencies in ms (sorted) and the loader calls.
local function run(name, caller, zone, o, prepare)
    if prepare then
        prepare(zone)
    end
    zone:set("backend:tickets", 0)
    zone:set("backend:done", 0)
    zone:set("queries:" .. name, 0)

    local start = proc.pipe()
    local pids = {}
    for i = 1, o.n do
        pids[i] = proc.spawn(function()
            if not start:wait_release(30) then
                error("never released")
            end
            caller(zone, o)
            local ms = (proc.now() - zone:get("start")) * 1000
            assert(zone:set(name .. ":" .. i, ms))
        end)
    end
    -- CLOCK_MONOTONIC: the same clock in every process
    zone:set("start", proc.now())
    start:release()
    start:close()

    local lat = {}
    for i, r in ipairs(proc.wait_all(pids, 120)) do
        if r.how ~= "exit" or r.code ~= 0 then
            error(format("%s run, caller %d: %s %s %s", name, i, r.how,
                         tostring(r.code or r.sig), r.msg))
        end
        lat[i] = assert(zone:get(name .. ":" .. i))
    end
    table.sort(lat)
    return lat, zone:get("queries:" .. name)
end

-- nearest-rank percentile of sorted values
local function pct(sorted, p)
    return sorted[max(1, ceil(p / 100 * #sorted))]
end

local function write_cdf(path, sorted)
    local f = assert(io.open(path, "w"))
    f:write("# latency_ms fraction_of_callers_served\n")
    f:write("0 0\n")
    for i, v in ipairs(sorted) do
        f:write(format("%.3f %.6f\n", v, i / #sorted))
    end
    f:close()
end

local function shell_quote(s)
    return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local function sh(cmd)
    local rc = os.execute(cmd)
    return rc == 0 or rc == true
end

-- demo/stampede.gp reads its inputs as ARG1..ARG8 (gnuplot -c takes 9 at
-- most: the loader calls of the three runs go as one word list)
local function plot(o, files, calls)
    if not sh("command -v gnuplot >/dev/null 2>&1") then
        return nil, "gnuplot not found (Debian package gnuplot-nox; "
                    .. "scripts/deps.sh installs it)"
    end
    local args = { script_dir .. "/stampede.gp", files[1], files[2],
                   files[3], o.png, o.n, o.ms, o.slots,
                   table.concat(calls, " ") }
    for i, a in ipairs(args) do
        args[i] = shell_quote(a)
    end
    local cmd = "gnuplot -c " .. table.concat(args, " ")
    if not sh(cmd) then
        return nil, "gnuplot failed: " .. cmd
    end
    return true
end


local o = parse_args(arg)
local dir = proc.tmpdir()
local ok, err = pcall(function()
    local zone = assert(shdict.open("stampede-demo",
                                    { dir = dir, size = "4m" }))

    print(format("cache stampede: %d processes ask for the same key at once "
                 .. "(cold twice, then stale)", o.n))
    print(format("loader: a %d ms backend query; backend runs %s", o.ms,
                 o.slots > 0 and (o.slots .. " queries at a time, in "
                                  .. "arrival order")
                              or "any number of queries at once"))
    print()

    local with, calls_with = run("with", with_lock, zone, o)
    local without, calls_without = run("without", without_lock, zone, o)
    local stale, calls_stale = run("stale", with_stale, zone, o, make_stale)

    local rows = {
        { "with resty.shmlock.cache", calls_with, with },
        { "without a lock", calls_without, without },
        { "with stale_ttl (stale key)", calls_stale, stale },
    }
    print(format("%-26s %12s %10s %10s %10s", "", "loader calls",
                 "p50 (ms)", "p99 (ms)", "max (ms)"))
    for _, r in ipairs(rows) do
        local lat = r[3]
        print(format("%-26s %12d %10.1f %10.1f %10.1f", r[1], r[2],
                     pct(lat, 50), pct(lat, 99), lat[#lat]))
    end
    print()

    assert(sh("mkdir -p " .. shell_quote(o.out)), "cannot create " .. o.out)
    local files = { o.out .. "/with.dat", o.out .. "/without.dat",
                    o.out .. "/stale.dat" }
    write_cdf(files[1], with)
    write_cdf(files[2], without)
    write_cdf(files[3], stale)
    print("latencies: " .. table.concat(files, ", "))

    if o.plot then
        assert(plot(o, files, { calls_with, calls_without, calls_stale }))
        print("plot:      " .. o.png)
    end
end)
proc.reap_all()
proc.rmtree(dir)
if not ok then
    io.stderr:write("stampede: ", tostring(err), "\n")
    os.exit(1)
end
