# resty.lock's observable waiting inside nginx, pinned as its own test
# suite pins it: a waiter behind a holder reports elapsed = the sum of the
# ngx.sleep steps it slept (0.001 + 0.002 + ... + 0.064 = 0.127 behind a
# 0.1 s holder with the defaults), with custom step, ratio and max_step
# the matching sums, and "timeout" once the steps add up to the timeout.
# The queue a long waiter joins (lua/resty/shmlock/lock/nginx_wait.lua)
# starts only after 0.2 s of steps, so none of these numbers moves: a hold
# of 0.2 s still reports 0.255, the next sum.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use ShmTest;

my $t = ShmTest->new(
    workers => 1,
    init_by_lua => <<'EOF',
        local shdict = require "resty.shmlock.shdict"
        assert(shdict.open("elapsed"))
EOF
    http_config => <<'EOF',
    lua_shared_dict fallback 1m;
EOF
    config => <<'EOF',
        # a light thread holds the key for ?hold= seconds; the request's
        # lock, made with the options of the query string, waits for it
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
                local th = ngx.thread.spawn(function()
                    ngx.sleep(tonumber(args.hold))
                    return holder:unlock()
                end)
                local lock = assert(resty_lock:new(store, opts))
                local elapsed, err = lock:lock(key)
                if elapsed then
                    lock:unlock()
                end
                assert(ngx.thread.wait(th))
                if not elapsed then
                    return ngx.say("nil ", err)
                end
                ngx.say(string.format("%.3f", elapsed))
            }
        }
EOF
);
$t->start;

# [query, the lowest and highest elapsed accepted] (resty.lock's suite
# accepts 0.126-0.129 for the default case: float sums printed)
my @cases = (
    [ "hold=0.1",                     0.126, 0.129 ],  # 0.127
    [ "hold=0.1&step=0.01",           0.149, 0.151 ],  # .01+.02+.04+.08
    [ "hold=0.1&ratio=3",             0.120, 0.122 ],  # 1+3+9+27+81 ms
    [ "hold=0.1&max_step=0.05",       0.112, 0.114 ],  # 63 ms + 0.05
    [ "hold=0.05&step=0.02&ratio=1",  0.059, 0.061 ],  # 3 x 0.02
    [ "hold=0.2",                     0.254, 0.256 ],  # 0.255: no queue yet
);

for my $store ("elapsed", "fallback") {
    for my $c (@cases) {
        my ($q, $lo, $hi) = @$c;
        subtest "$store: $q" => sub {
            my $r = $t->get("/wait?store=$store&$q");
            is($r->{status}, 200, "status");
            my ($e) = $r->{body} =~ /^([\d.]+)\n\z/;
            ok(defined $e && $e >= $lo && $e <= $hi,
               "elapsed in [$lo, $hi]") or diag("got: $r->{body}");
        };
    }
    $t->block("$store: a held key answers timeout after the steps' sum",
        request => "GET /wait?store=$store&hold=0.1&timeout=0.01",
        body    => "nil timeout\n");
}

$t->stop;
done_testing;
