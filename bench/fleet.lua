-- (12) The fleet tier: loader calls and Redis commands per miss of one
-- cold key, 8 processes on each of 1 and 3 hosts (zone directories on this
-- machine), asking at the same moment, with a loader of 100 ms:
--
--   fleet    resty.shmlock.cache with opts.redis
--   recipe   docs/redis.md's lock factory (opts.lock) of resty.shmlock.redis
--            locks: the hosts' loads one after the other, each host's
--            waiters polling Redis
--
-- Redis commands are INFO commandstats's (those the scripts ran included);
-- "sent" are the commands the processes sent (EVALSHA, EVAL, XREAD; the
-- recipe sends EVALSHA alone).  Each figure is the median of the
-- repetitions, the modes taking turns.  harness.fleet starts its own
-- redis-server on a free 127.0.0.1 port and stops it.

local bench = require "bench"
local fleet = require "harness.fleet"

local SECTION = "fleet"
local PER_HOST = 8
local REPS = bench.quick and 1 or 3

local work = assert(os.getenv("BENCH_DATA") or os.getenv("TMPDIR") or "/tmp")
work = work .. "/fleet"
os.execute("mkdir -p '" .. work .. "'")
local redis = fleet.redis_start(work)

bench.log("(12) the fleet tier: a cold key, %d processes per host, per miss",
          PER_HOST)
local ok, err = pcall(function()
    for _, hosts in ipairs{ 1, 3 } do
        local got = {}
        for _ = 1, REPS do
            for _, mode in ipairs{ "fleet", "recipe" } do
                local r = fleet.stampede{ redis = redis, dir = work,
                                          hosts = hosts, per_host = PER_HOST,
                                          mode = mode, ms = 100 }
                got[mode] = got[mode] or { calls = {}, commands = {},
                                           sent = {}, slowest = {} }
                local g = got[mode]
                g.calls[#g.calls + 1] = r.calls
                g.commands[#g.commands + 1] = r.commands
                g.sent[#g.sent + 1] = r.sent
                g.slowest[#g.slowest + 1] = r.slowest
            end
        end
        for _, mode in ipairs{ "fleet", "recipe" } do
            local g = got[mode]
            for _, what in ipairs{ "calls", "commands", "sent", "slowest" } do
                local med, lo, hi = bench.summary(g[what])
                bench.result(SECTION, ("%s_h%d_%s"):format(mode, hosts, what),
                             what == "slowest" and "ms" or "n", med, lo, hi,
                             #g[what], ("%d host(s) x %d processes"):format(
                                 hosts, PER_HOST))
            end
        end
    end
end)
fleet.redis_stop(redis)
if not ok then
    error(err, 0)
end
