# One lock key under load inside nginx: wrk, 50 connections for 3 s on 2
# workers, every request locks the same key around a ~1 ms critical
# section (read a counter, ngx.sleep(0.001), write it + 1; timeout 30 s).
# The counter is exact, no lock call fails, and no request waits long:
# a waiter that has slept 0.2 s of resty.lock's steps queues, and fresh
# arrivals cannot barge past the queue (lua/resty/shmlock/lock/
# wait.lua).  With resty.lock's steps alone, waiters sleeping 0.5 s
# steps lose the key to fresh arrivals again and again: seconds of wait,
# and after the load stops the leftovers drain one per step.
#
# The bound here is generous (3 s, for a noisy machine); `make bench`
# measures the real figures (bench/RESULTS.md, section 7).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use ShmTest qw(give_up);

my $CONNECTIONS = 50;
my $SECONDS = 3;
my $MAX_WAIT = 3;       # seconds, the longest request accepted

system("command -v wrk >/dev/null 2>&1") == 0
    or give_up("wrk is not installed (scripts/deps.sh installs it)");

my $t = ShmTest->new(
    workers => 2,
    init_by_lua => <<'EOF',
        local shdict = require "resty.shmlock.shdict"
        T = { zone = assert(shdict.open("load", { size = "1m" })) }
EOF
    http_config => <<'EOF',
    lua_shared_dict load_ctl 1m;
EOF
    config => <<'EOF',
        location = /incr {
            content_by_lua_block {
                local ctl = ngx.shared.load_ctl
                ngx.update_time()
                local t0 = ngx.now()
                ctl:incr("inflight", 1, 0)
                local lock = assert(resty_lock:new("load", { timeout = 30 }))
                local elapsed, err = lock:lock("counter")
                if elapsed then
                    local n = T.zone:get("count") or 0
                    ngx.sleep(0.001)
                    assert(T.zone:set("count", n + 1))
                    local ok, uerr = lock:unlock()
                    if ok == 1 then
                        ctl:incr("done", 1, 0)
                    else
                        err = "unlock: " .. tostring(uerr)
                    end
                end
                if err then
                    ctl:incr("errors", 1, 0)
                    ngx.log(ngx.WARN, "lock: ", err)
                end
                ngx.update_time()
                local ms = (ngx.now() - t0) * 1000
                local k = "max_ms:" .. ngx.worker.id()
                if ms > (ctl:get(k) or 0) then
                    ctl:set(k, ms)
                end
                ctl:incr("inflight", -1, 0)
                if err then
                    ngx.status = 500
                end
                ngx.say(err or "ok")
            }
        }
        # "done count errors max_ms", or "running N" while requests run
        location = /stats {
            content_by_lua_block {
                local ctl = ngx.shared.load_ctl
                local running = ctl:get("inflight") or 0
                if running > 0 then
                    return ngx.say("running ", running)
                end
                ngx.say(ctl:get("done") or 0, " ", T.zone:get("count") or 0,
                        " ", ctl:get("errors") or 0, " ",
                        math.max(ctl:get("max_ms:0") or 0,
                                 ctl:get("max_ms:1") or 0))
            }
        }
EOF
);
$t->start;

# wrk's own figures: requests, errors (socket and non-2xx), max latency
my $script = $t->prefix . "/report.lua";
open my $fh, '>', $script or die "$script: $!";
print $fh <<'EOF';
done = function(summary, latency, requests)
    local e = summary.errors
    io.write(string.format("WRK %d %d %.3f\n", summary.requests,
        e.connect + e.read + e.write + e.status + e.timeout,
        latency.max / 1e6))
end
EOF
close $fh;

subtest "$CONNECTIONS connections for ${SECONDS} s on one key" => sub {
    my $url = "http://127.0.0.1:" . $t->port . "/incr";
    my $out = `wrk -t2 -c$CONNECTIONS -d${SECONDS}s --timeout 35s -s $script $url 2>&1`;
    my ($requests, $errors, $max) = $out =~ /^WRK (\d+) (\d+) (\S+)$/m
        or return fail("wrk printed no result:\n$out");
    cmp_ok($requests, '>', 100, "wrk made requests ($requests)");
    is($errors, 0, "no socket errors, no non-2xx answers");
    cmp_ok($max, '<=', $MAX_WAIT, "wrk's slowest request: $max s");

    # the requests still waiting when wrk stopped run to their end (40 s
    # at most: the lock's timeout is 30 s)
    my ($stats, $deadline) = ("", time + 40);
    while (time < $deadline) {
        $stats = $t->get("/stats")->{body};
        last unless $stats =~ /^running/;
        sleep 0.1;
    }
    my ($done, $count, $lock_errors, $max_ms) =
        $stats =~ /^(\d+) (\d+) (\d+) (\S+)\n\z/
        or return fail("stats: $stats");
    is($lock_errors, 0, "no lock or unlock failed");
    is($count, $done, "the counter is exact ($count)");
    cmp_ok($done, '>=', $requests, "every request wrk counted was done");
    cmp_ok($max_ms / 1000, '<=', $MAX_WAIT,
           "slowest request timed in nginx, also after wrk stopped: "
           . sprintf("%.3f s", $max_ms / 1000));
    $t->check_log("under load", nested => 1);
};

$t->stop;
done_testing;
