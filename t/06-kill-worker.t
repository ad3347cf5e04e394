# A worker SIGKILLed while holding locks (exptime 30): the master restarts
# it, and the keys it held are taken well before exptime -- by a waiter
# that was already waiting and by a new request -- while a key held by a
# live worker stays held.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use ShmTest qw(give_up);

my $t = ShmTest->new(
    workers => 2,
    zone => 'kill',
    init_by_lua => <<'EOF',
        T.held = {}
EOF
    config => <<'EOF',
        # this worker takes <prefix>-<pid>-a and -b (exptime 30) and keeps
        # them past the request; answers its pid
        location = /hold {
            content_by_lua_block {
                local pid = ngx.worker.pid()
                for _, s in ipairs({ "a", "b" }) do
                    local key = ngx.var.arg_prefix .. "-" .. pid .. "-" .. s
                    if not T.held[key] then
                        local lock = assert(resty_lock:new("kill",
                                                           { exptime = 30 }))
                        assert(lock:lock(key) == 0)
                        T.held[key] = lock
                    end
                end
                ngx.say(pid)
            }
        }
        # a timer on this worker waits for `key`; answers this worker's pid
        location = /wait_timer {
            content_by_lua_block {
                local function run(premature, key)
                    local lock = assert(resty_lock:new("kill",
                                                       { timeout = 20 }))
                    local elapsed, err = lock:lock(key)
                    T.zone:set("result-" .. key, T.fmt(elapsed ~= nil, err))
                    if elapsed then lock:unlock() end
                end
                T.zone:delete("result-" .. ngx.var.arg_key)
                assert(ngx.timer.at(0, run, ngx.var.arg_key))
                ngx.say(ngx.worker.pid())
            }
        }
        location = /result {
            content_by_lua_block {
                ngx.say(T.zone:get("result-" .. ngx.var.arg_key) or "pending")
            }
        }
        location = /lock {
            content_by_lua_block {
                local lock = assert(resty_lock:new("kill", { timeout = 20 }))
                local elapsed, err = lock:lock(ngx.var.arg_key)
                ngx.say(T.fmt(elapsed ~= nil, err))
                if elapsed then lock:unlock() end
            }
        }
        location = /try {
            content_by_lua_block {
                local lock = assert(resty_lock:new("kill", { timeout = 0 }))
                local elapsed, err = lock:lock(ngx.var.arg_key)
                ngx.say(T.fmt(elapsed, err))
                if elapsed then lock:unlock() end
            }
        }
EOF
);
$t->start;

# Both workers hold their keys.
my %holders;
for (1 .. 400) {
    my $r = $t->get("/hold?prefix=k");
    $holders{$1}++ if $r->{body} =~ /^(\d+)\n\z/;
    last if keys %holders >= 2;
}
my ($victim, $survivor) = sort { $a <=> $b } keys %holders;
ok($victim && $survivor, "both workers hold keys ($victim, $survivor)")
    or give_up("could not reach both workers");

# A timer on the survivor waits for a key the victim holds.
my $waiting;
for (1 .. 400) {
    my $r = $t->get("/wait_timer?key=k-$victim-a");
    if ($r->{body} eq "$survivor\n") { $waiting = 1; last }
}
ok($waiting, "a timer on worker $survivor waits for k-$victim-a");
is($t->get("/try?key=k-$victim-b")->{body}, "nil timeout\n",
   "k-$victim-b is held before the kill");

my $killed_at = time;
ok(kill('KILL', $victim), "SIGKILL worker $victim");

subtest "the master restarts the worker" => sub {
    my @now;
    my $deadline = time + 30;
    while (time < $deadline) {
        @now = $t->worker_pids;
        last if @now == 2 && !grep { $_ == $victim } @now;
        sleep 0.02;
    }
    is(scalar @now, 2, "two workers again");
    ok(!grep({ $_ == $victim } @now), "worker $victim is gone");
    $t->check_log("restart", nested => 1,
                  error_log => [qr/worker process $victim exited on signal 9/]);
};

subtest "the waiting timer gets the dead worker's key well before exptime" => sub {
    my $got = '';
    my $deadline = time + 30;
    while (time < $deadline) {
        $got = $t->get("/result?key=k-$victim-a")->{body};
        last if $got ne "pending\n";
        sleep 0.02;
    }
    my $took = time - $killed_at;
    is($got, "true nil\n", "the waiter locked k-$victim-a");
    cmp_ok($took, "<", 20, sprintf("%.2fs after the kill (exptime 30)", $took));
};

$t->block("a new request gets the dead worker's other key at once",
    request  => "GET /lock?key=k-$victim-b",
    body     => "true nil\n",
    max_time => 5);

$t->block("the live worker's keys are still held",
    request => [ "GET /try?key=k-$survivor-a", "GET /try?key=k-$survivor-b" ],
    body    => "nil timeout\n");

$t->stop;
done_testing;
