# lock:lock_shared inside nginx, 2 workers: both workers hold a key
# shared at once, an exclusive lock is kept out meanwhile; a reader
# queued in a timer gets a key when another worker's exclusive holder
# releases it; an exclusive waiter (a timer) marks the key, new readers
# are then kept out, and when one reading worker is SIGKILLed and the
# other releases, the waiter gets the key well before exptime; an
# ngx.shared dict answers that shared holds need a zone.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use ShmTest qw(give_up);

my $t = ShmTest->new(
    workers => 2,
    zone => 'rw',
    http_config => "    lua_shared_dict rw_fallback 64k;\n",
    init_by_lua => <<'EOF',
        T.held = {}
        -- `only` names another worker: answer this one's pid, do nothing
        function T.other(only)
            if only and tonumber(only) ~= ngx.worker.pid() then
                ngx.say(ngx.worker.pid())
                return true
            end
        end
EOF
    config => <<'EOF',
        # this worker holds `key` (shared, or exclusive with excl=1,
        # exptime 30) past the request; answers its pid
        location = /hold {
            content_by_lua_block {
                if T.other(ngx.var.arg_only) then return end
                local key = ngx.var.arg_key
                if not T.held[key] then
                    local lock = assert(resty_lock:new("rw", { exptime = 30 }))
                    if ngx.var.arg_excl then
                        assert(lock:lock(key) == 0)
                    else
                        assert(lock:lock_shared(key) == 0)
                    end
                    T.held[key] = lock
                end
                ngx.say(ngx.worker.pid())
            }
        }
        # this worker's pid, and what its unlock of `key` answered
        location = /release {
            content_by_lua_block {
                if T.other(ngx.var.arg_only) then return end
                local key = ngx.var.arg_key
                local lock = T.held[key]
                T.held[key] = nil
                ngx.say(ngx.worker.pid(), " ",
                        lock and T.fmt(lock:unlock()) or "none")
            }
        }
        # the holders of `key` and whether a waiter marked it
        location = /inspect {
            content_by_lua_block {
                local info, err = resty_lock.inspect("rw", ngx.var.arg_key)
                if not info then
                    ngx.say(err)
                    return
                end
                ngx.say(info.kind, " ", info.holders and #info.holders or 1,
                        " ", info.marked and "marked" or "unmarked")
            }
        }
        # a timer on this worker waits for `key` (shared=1: a shared
        # hold); answers this worker's pid
        location = /wait_timer {
            content_by_lua_block {
                if T.other(ngx.var.arg_only) then return end
                local shared = ngx.var.arg_shared ~= nil
                local function run(premature, key)
                    local lock = assert(resty_lock:new("rw", { timeout = 20 }))
                    local elapsed, err
                    if shared then
                        elapsed, err = lock:lock_shared(key)
                    else
                        elapsed, err = lock:lock(key)
                    end
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
        # one attempt, no waiting (shared=1: a shared hold)
        location = /try {
            content_by_lua_block {
                local lock = assert(resty_lock:new("rw", { timeout = 0 }))
                local elapsed, err
                if ngx.var.arg_shared then
                    elapsed, err = lock:lock_shared(ngx.var.arg_key)
                else
                    elapsed, err = lock:lock(ngx.var.arg_key)
                end
                ngx.say(T.fmt(elapsed, err))
                if elapsed then lock:unlock() end
            }
        }
        location = /fallback {
            content_by_lua_block {
                local lock = assert(resty_lock:new("rw_fallback"))
                ngx.say(lock.store, " ", T.fmt(lock:lock_shared("k")))
            }
        }
EOF
);
$t->start;

# the pid of the worker that answered, until both have (fn: the request)
sub both_workers {
    my ($path) = @_;
    my %pids;
    for (1 .. 400) {
        my $r = $t->get($path);
        $pids{$1}++ if $r->{body} =~ /^(\d+)\n\z/;
        last if keys %pids >= 2;
    }
    return sort { $a <=> $b } keys %pids;
}

# polls `path` until its body is `want` (10 s at most); the last body
sub poll_for {
    my ($path, $want) = @_;
    my $got = '';
    my $deadline = time + 30;
    while (time < $deadline) {
        $got = $t->get($path)->{body};
        last if $got eq $want;
        sleep 0.02;
    }
    return $got;
}

# a request done by worker `pid` (the others only answer their pid): its
# body
sub on_worker {
    my ($path, $pid) = @_;
    for (1 .. 400) {
        my $body = $t->get("$path&only=$pid")->{body};
        return $body if $body =~ /^$pid\b/;
    }
    return '';
}

$t->block("an ngx.shared dict answers that shared holds need a zone",
    request => "GET /fallback",
    body    => qq{ngx.shared nil shared holds need a zone: "rw_fallback" is a }
             . qq{lua_shared_dict, and inside nginx a lua_shared_dict name }
             . qq{is that dict: give the zone another name, or pass the }
             . qq{zone object (shdict.open("rw_fallback"))\n});

# -- both workers hold s shared --
my ($victim, $survivor) = both_workers("/hold?key=s");
ok($victim && $survivor, "both workers hold s shared ($victim, $survivor)")
    or give_up("could not reach both workers");

$t->block("two shared holders, nobody waiting",
    request => "GET /inspect?key=s",
    body    => "shared 2 unmarked\n");

$t->block("an exclusive lock is kept out, another reader is not",
    request => [ "GET /try?key=s", "GET /try?key=s&shared=1" ],
    body    => [ "nil timeout\n", "0 nil\n" ]);

# -- a reader waits for an exclusive holder in another worker --
my ($w1, $w2) = ($victim, $survivor);
my $holder = on_worker("/hold?key=x&excl=1", $w1);
ok($holder, "worker $w1 holds x exclusive")
    or give_up("could not reach worker $w1");
# a reader timer on the other worker (its earlier one may have got x first)
is(on_worker("/wait_timer?key=x&shared=1", $w2), "$w2\n",
   "a timer on worker $w2 waits for a shared hold of x");
is($t->get("/result?key=x")->{body}, "pending\n", "it waits");
like(on_worker("/release?key=x", $w1), qr/^$w1 1\n\z/, "worker $w1 releases x");
is(poll_for("/result?key=x", "true nil\n"), "true nil\n",
   "the reader got x");

# -- an exclusive waiter marks s and keeps new readers out --
is(on_worker("/wait_timer?key=s", $survivor), "$survivor\n",
   "a timer on worker $survivor waits for s exclusive");
is(poll_for("/inspect?key=s", "shared 2 marked\n"), "shared 2 marked\n",
   "the waiter marks s");

$t->block("a new reader waits behind the marked writer",
    request => "GET /try?key=s&shared=1",
    body    => "nil timeout\n");

my $killed_at = time;
ok(kill('KILL', $victim), "SIGKILL worker $victim, a reader of s");

subtest "the master restarts the worker" => sub {
    my @now;
    my $deadline = time + 30;
    while (time < $deadline) {
        @now = $t->worker_pids;
        last if @now == 2 && !grep { $_ == $victim } @now;
        sleep 0.02;
    }
    is(scalar @now, 2, "two workers again");
    $t->check_log("restart", nested => 1,
                  error_log => [qr/worker process $victim exited on signal 9/]);
};

like(on_worker("/release?key=s", $survivor), qr/^$survivor 1\n\z/,
     "worker $survivor releases its shared hold");

subtest "the writer gets s well before exptime" => sub {
    my $got = poll_for("/result?key=s", "true nil\n");
    my $took = time - $killed_at;
    is($got, "true nil\n", "the waiter locked s");
    cmp_ok($took, '<', 5, sprintf("%.2fs after the kill (exptime 30)", $took));
};

$t->block("s is free again, for readers and writers",
    request => [ "GET /try?key=s", "GET /try?key=s&shared=1",
                 "GET /inspect?key=s" ],
    body    => [ "0 nil\n", "0 nil\n", "not locked\n" ]);

$t->stop;
done_testing;
