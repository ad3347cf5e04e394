-- (13) The Redis lock under contention: Redis commands per acquisition
-- and the last holder's wait after the release, 8 processes on each of 1
-- and 3 hosts (zone directories on this machine) waiting for one key that
-- a holder lets go once they all wait, each holding it for an instant
-- (scripts/lua/harness/redis_lock.lua's episode, which spec/27 pins):
--
--   wake     resty.shmlock.redis with a connect function: host single
--            flight, transfers within a host, wake-ups on release
--   today    resty.shmlock.redis given connected clients and dict = false:
--            every process polls Redis (resty.lock's backoff), as the lock
--            did before host single flight
--   plain    the plain SET NX PX polling loop (resty.lock's backoff, a
--            compare-and-delete to release)
--
-- Redis commands are INFO commandstats's (those the scripts ran included),
-- for the whole episode.  Each figure is the median of the repetitions,
-- the modes taking turns; harness.fleet starts a redis-server of its own
-- on a free 127.0.0.1 port and stops it.

local bench = require "bench"
local fleet = require "harness.fleet"
local rl = require "harness.redis_lock"

local SECTION = "redis_lock"
local PER_HOST = 8
local REPS = bench.quick and 1 or 3
local MODES = { "wake", "today", "plain" }

local work = assert(os.getenv("BENCH_DATA") or os.getenv("TMPDIR") or "/tmp")
work = work .. "/redis_lock"
os.execute("mkdir -p '" .. work .. "'")
local redis = fleet.redis_start(work)

bench.log("(13) the Redis lock: one key, %d processes per host", PER_HOST)
local ok, err = pcall(function()
    for _, hosts in ipairs{ 1, 3 } do
        local got = {}
        for _ = 1, REPS do
            for _, mode in ipairs(MODES) do
                local r = rl.episode{ port = redis.port, dir = work,
                                      hosts = hosts, per_host = PER_HOST,
                                      mode = mode }
                assert(#r.failures == 0 and r.overlaps == 0,
                       table.concat(r.failures, "; "))
                got[mode] = got[mode] or { per = {}, last = {} }
                local g = got[mode]
                g.per[#g.per + 1] = r.commands / r.acquired
                g.last[#g.last + 1] = r.last * 1000
            end
        end
        for _, mode in ipairs(MODES) do
            local g = got[mode]
            for _, what in ipairs{ "per", "last" } do
                local med, lo, hi = bench.summary(g[what])
                bench.result(SECTION, ("%s_h%d_%s"):format(mode, hosts, what),
                             what == "last" and "ms" or "n", med, lo, hi,
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
