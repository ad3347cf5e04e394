# resty.lock's observable waiting inside nginx, pinned as its own test
# suite pins it: a waiter behind a holder sleeps resty.lock's steps with
# ngx.sleep (0.001, 0.002, ..., with custom step, ratio and max_step the
# matching ones) and reports elapsed = the sum of the steps it slept
# (0.127 after 7 steps with the defaults), and "timeout" once the steps
# add up to the timeout -- or once the wait's deadline on the monotonic
# clock passes, if the timers ran late (the last step is then shorter).
#
# The holder lets go as the waiter starts its n-th sleep (a hook around
# ngx.sleep, set before the modules load), not after a timer of its own:
# two nginx timers of a loaded machine do not fire in step, so a holder
# sleeping 0.1 s let a waiter in after 3 of its steps (0.07) as well as
# after 4.  Which steps were slept and their sum are then exact.  One case
# keeps a holder released by its own timer, and asks only what lateness
# cannot change: the waiter got the lock, at one of the schedule's sums.
# The queue a long waiter joins (lua/resty/shmlock/lock/wait.lua)
# starts only after 0.2 s of steps, so none of these numbers moves: 8
# steps still sum to 0.255.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use ShmTest;

my $t = ShmTest->new(
    workers => 1,
    preamble => 0,
    http_config => <<'EOF',
    lua_shared_dict fallback 1m;
    init_by_lua_block {
        -- the waiter's sleeps: T.on_sleep(seconds) runs as each begins
        T = {}
        local sleep = ngx.sleep
        ngx.sleep = function(s)
            if T.on_sleep and coroutine.running() == T.waiter then
                T.on_sleep(s)
            end
            return sleep(s)
        end
        resty_lock = require "resty.shmlock"
        assert(require("resty.shmlock.shdict").open("elapsed"))
    }
EOF
    config => <<'EOF',
        # the request holds a key; its lock, made with the options of the
        # query string, waits for it; the holder lets go as the waiter
        # starts its ?release= sleep, or after ?hold= seconds (a light
        # thread); answers elapsed (or nil and the error), then the steps
        location = /wait {
            content_by_lua_block {
                local args = ngx.req.get_uri_args()
                local store = args.store or "elapsed"
                local key = "k" .. ngx.now() .. math.random()
                local opts = {}
                for _, o in ipairs({ "timeout", "step", "ratio",
                                     "max_step" }) do
                    opts[o] = tonumber(args[o])
                end
                local holder = assert(resty_lock:new(store))
                assert(holder:lock(key) == 0)
                local th
                if args.hold then
                    th = ngx.thread.spawn(function()
                        ngx.sleep(tonumber(args.hold))
                        return holder:unlock()
                    end)
                end
                local release = tonumber(args.release)
                local steps = {}
                T.waiter = coroutine.running()
                T.on_sleep = function(s)
                    steps[#steps + 1] = string.format("%.3f", s)
                    if #steps == release then
                        assert(holder:unlock() == 1)
                    end
                end
                local lock = assert(resty_lock:new(store, opts))
                local elapsed, err = lock:lock(key)
                T.on_sleep, T.waiter = nil, nil
                if th then
                    assert(ngx.thread.wait(th))
                elseif not elapsed then
                    holder:unlock()
                end
                if elapsed then
                    lock:unlock()
                    ngx.say(string.format("%.3f", elapsed))
                else
                    ngx.say("nil ", err)
                end
                ngx.say(table.concat(steps, " "))
            }
        }
EOF
);
$t->start;

# [query, elapsed, the steps slept]
my @cases = (
    [ "release=7", "0.127",
      "0.001 0.002 0.004 0.008 0.016 0.032 0.064" ],
    [ "release=4&step=0.01", "0.150", "0.010 0.020 0.040 0.080" ],
    [ "release=5&ratio=3", "0.121", "0.001 0.003 0.009 0.027 0.081" ],
    [ "release=7&max_step=0.05", "0.113",
      "0.001 0.002 0.004 0.008 0.016 0.032 0.050" ],
    [ "release=3&step=0.02&ratio=1", "0.060", "0.020 0.020 0.020" ],
    # 0.127 s of steps before the 8th: no queue yet
    [ "release=8", "0.255",
      "0.001 0.002 0.004 0.008 0.016 0.032 0.064 0.128" ],
);

# the sums of the default schedule's first steps, up to the queue's start
my %sums;
my ($sum, $step) = (0, 0.001);
while ($sum < 0.2) {
    $sum += $step;
    $step *= 2;
    $sums{ sprintf "%.3f", $sum } = 1;
}

for my $store ("elapsed", "fallback") {
    for my $c (@cases) {
        my ($q, $elapsed, $steps) = @$c;
        $t->block("$store: $q",
            request => "GET /wait?store=$store&$q",
            body    => "$elapsed\n$steps\n");
    }
    # never released: resty.lock's steps, the last one what the timeout
    # leaves (0.003) -- or less: the wait also ends at its deadline on the
    # monotonic clock (lock/wait.lua, "The deadline rule"), and late
    # timers leave less than the steps' sum
    subtest "$store: timeout=0.01" => sub {
        my $r = $t->get("/wait?store=$store&timeout=0.01");
        is($r->{status}, 200, "status");
        my ($err, $line) = $r->{body} =~ /^(.*)\n(.*)\n\z/;
        is($err, "nil timeout", "timeout") or diag("got: $r->{body}");
        my @got = split / /, $line // "";
        my @want = qw(0.001 0.002 0.004 0.003);
        ok(@got >= 1 && @got <= @want, "at most resty.lock's 4 steps")
            or diag("got: $line");
        for my $i (0 .. $#got) {
            if ($i < $#got) {
                is($got[$i], $want[$i], "step " . ($i + 1));
            } else {
                ok($got[$i] >= 0.001 && $got[$i] <= $want[$i],
                   "last step within resty.lock's, cut to the deadline")
                    or diag("got: $line");
            }
        }
        $t->check_log("timeout", nested => 1);
    };
    subtest "$store: a holder released by its own timer" => sub {
        my $r = $t->get("/wait?store=$store&hold=0.05");
        is($r->{status}, 200, "status");
        my ($e) = $r->{body} =~ /^(\d\.\d{3})\n/;
        ok(defined $e && $sums{$e}, "elapsed is a sum of the steps slept")
            or diag("got: $r->{body}");
        $t->check_log("timer holder", nested => 1);
    };
}

$t->stop;
done_testing;
