-- The fleet case, measured: 3 hosts x N processes ask for one cold key at
-- the same moment (hosts are zone directories on this machine; one
-- redis-server on a free 127.0.0.1 port, started and stopped here), four
-- times:
--
--   host tier:      resty.shmlock.cache without Redis: one loader call
--                   per host;
--   lock recipe:    docs/redis.md's lock factory of Redis locks: one
--                   loader call per host too, the hosts one after the
--                   other, each host's waiters polling Redis;
--   fleet tier:     opts.redis: one loader call in the fleet, the other
--                   hosts take the value from Redis;
--   Redis stopped:  opts.redis and stale_ttl, the key stale on every host
--                   and Redis stopped (SIGSTOP) while they ask: the stale
--                   value is served without Redis, one refresh per host.
--
-- The loader stands for a --ms backend query.  Prints the loader calls,
-- the Redis commands (INFO commandstats) and the callers' latencies from
-- the start barrier to their value, writes the latencies to --out and
-- plots their distribution there with gnuplot (demo/fleet.gp).
--
--     luajit demo/fleet.lua [-n 8] [--ms 100] [--out DIR] [--png FILE]
--                           [--no-plot]
--
-- Nothing is written into the checkout: --out defaults to a directory
-- under $TMPDIR (or /tmp), the plot goes there too.

local script_dir = arg[0]:match("^(.*)/[^/]*$") or "."
local root = script_dir .. "/.."
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;"
               .. root .. "/scripts/lua/?.lua;" .. package.path
               .. ";/usr/share/lua/5.1/?.lua"

local proc = require "harness.proc"
local fleet = require "harness.fleet"

local format = string.format
local HOSTS = 3

local USAGE = [[
usage: luajit demo/fleet.lua [options]
  -n N          processes per host (default 8; 3 hosts)
  --ms MS       the loader's backend query time in ms (default 100)
  --out DIR     where the latency data and the plot go
                (default $TMPDIR/shmlock-demo-fleet)
  --png FILE    the plot (default DIR/fleet.png)
  --no-plot     print the table only]]

local function parse_args(argv)
    local o = { n = 8, ms = 100, plot = true,
                out = (os.getenv("TMPDIR") or "/tmp")
                      .. "/shmlock-demo-fleet" }
    local i = 1
    while i <= #argv do
        local a, v = argv[i], argv[i + 1]
        if (a == "-n" or a == "--ms") and tonumber(v)
           and tonumber(v) >= 1 and tonumber(v) % 1 == 0 then
            o[a == "-n" and "n" or "ms"] = tonumber(v)
            i = i + 2
        elseif (a == "--out" or a == "--png") and v then
            o[a:sub(3)] = v
            i = i + 2
        elseif a == "--no-plot" then
            o.plot = false
            i = i + 1
        else
            io.stderr:write(USAGE, "\n")
            os.exit(a == "-h" or a == "--help" and 0 or 2)
        end
    end
    o.png = o.png or (o.out .. "/fleet.png")
    return o
end

local function shell_quote(s)
    return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local function sh(cmd)
    local ok = os.execute(cmd)
    return ok == true or ok == 0
end

local function pct(sorted, p)
    local k = math.max(1, math.ceil(#sorted * p / 100))
    return sorted[k]
end

local function write_cdf(path, sorted)
    local f = assert(io.open(path, "w"))
    f:write("# latency_ms fraction_of_callers_served\n0 0\n")
    for i, v in ipairs(sorted) do
        f:write(format("%.3f %.6f\n", v, i / #sorted))
    end
    f:close()
end

local RUNS = {
    { "host", "host tier (no Redis)" },
    { "recipe", "lock recipe (opts.lock)" },
    { "fleet", "fleet tier (opts.redis)" },
    { "stale_down", "Redis stopped, key stale" },
}

local o = parse_args(arg)
assert(sh("mkdir -p " .. shell_quote(o.out)), "cannot make " .. o.out)
local work = proc.tmpdir()
local redis = fleet.redis_start(work)
local results = {}
local ok, err = pcall(function()
    print(format("the fleet case: %d hosts x %d processes ask for one cold "
                 .. "key at once; the loader takes %d ms", HOSTS, o.n, o.ms))
    print()
    print(format("  %-26s %12s %15s %9s %9s", "", "loader calls",
                 "Redis commands", "p50", "max"))
    for _, run in ipairs(RUNS) do
        local r = fleet.stampede{ redis = redis, dir = work, hosts = HOSTS,
                                  per_host = o.n, mode = run[1], ms = o.ms }
        results[#results + 1] = r
        write_cdf(o.out .. "/" .. run[1] .. ".dat", r.latencies)
        print(format("  %-26s %12d %15d %7.0f ms %6.0f ms", run[2], r.calls,
                     r.commands, pct(r.latencies, 50), r.slowest))
    end
end)
fleet.redis_stop(redis)
proc.rmtree(work)
if not ok then
    io.stderr:write("demo failed: ", tostring(err), "\n")
    os.exit(1)
end
print()
print("latencies: " .. o.out .. "/*.dat")

if o.plot then
    if not sh("command -v gnuplot >/dev/null 2>&1") then
        io.stderr:write("no plot: gnuplot not found (Debian package "
                        .. "gnuplot-nox; scripts/deps.sh installs it)\n")
        os.exit(1)
    end
    local words = {}
    for i, r in ipairs(results) do
        words[i] = r.calls .. " " .. r.commands
    end
    local args = { script_dir .. "/fleet.gp", o.out, o.png, HOSTS, o.n, o.ms,
                   table.concat(words, " ") }
    for i, a in ipairs(args) do
        args[i] = shell_quote(a)
    end
    if not sh("gnuplot -c " .. table.concat(args, " ")) then
        io.stderr:write("gnuplot failed\n")
        os.exit(1)
    end
    print("plot: " .. o.png)
end
