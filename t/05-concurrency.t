# Many concurrent requests on 2 workers (and LuaJIT processes at the same
# time) lock one key around a non-atomic read / sleep / write of a counter
# in a sharded zone: the final count is exact.  The same workload without the
# lock loses updates, which shows the test can see a broken lock.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use ShmTest;

my $CLIENTS  = 8;     # client processes
my $REQUESTS = 50;    # requests per client
my $LUAJITS  = 2;     # LuaJIT processes contending at the same time
my $LOOPS    = 300;   # increments per LuaJIT process

my $t = ShmTest->new(
    workers => 2,
    # a zone of 16 shards: the lock key and the counter may live in
    # different shards, each with its own mutex
    zone => 'counters',
    zone_opts => '{ size = "2m", shards = 16 }',
    init_by_lua => <<'EOF',
        assert(T.zone:shards() == 16)
EOF
    config => <<'EOF',
        # lock, read, yield, write read+1, unlock; answers "pid waited"
        location = /incr {
            content_by_lua_block {
                local z = T.zone
                local key = ngx.var.arg_key
                local lock = assert(resty_lock:new("counters",
                                                   { timeout = 30 }))
                local elapsed, err = lock:lock("lock-" .. key)
                if not elapsed then
                    ngx.status = 500
                    return ngx.say("lock: ", err)
                end
                local n = z:get(key) or 0
                ngx.sleep(0.001)
                assert(z:set(key, n + 1))
                local ok, uerr = lock:unlock()
                if ok ~= 1 then
                    ngx.status = 500
                    return ngx.say("unlock: ", uerr)
                end
                ngx.say(ngx.worker.pid(), " ", elapsed > 0)
            }
        }
        # the same without the lock
        location = /incr_unlocked {
            content_by_lua_block {
                local z = T.zone
                local key = ngx.var.arg_key
                local n = z:get(key) or 0
                ngx.sleep(0.001)
                assert(z:set(key, n + 1))
                ngx.say(ngx.worker.pid(), " false")
            }
        }
        location = /get {
            content_by_lua_block {
                ngx.say(tostring(T.zone:get(ngx.var.arg_key)))
            }
        }
EOF
);
$t->start;

# $CLIENTS processes x $REQUESTS requests (ShmTest::hammer)
sub hammer { ShmTest::hammer($t, $CLIENTS, $REQUESTS, $_[0]) }

my $luajit_code = <<"EOF";
local shdict = require "resty.shmlock.shdict"
local z = assert(shdict.open("counters"))
local resty_lock = require "resty.shmlock"
local lock = assert(resty_lock:new("counters", { timeout = 30 }))
for i = 1, $LOOPS do
    assert(lock:lock("lock-c"))
    local n = z:get("c") or 0
    assert(z:set("c", n + 1))
    assert(lock:unlock() == 1)
end
print("done")
EOF

subtest "locked counter: exact under $CLIENTS x $REQUESTS requests + "
      . "$LUAJITS x $LOOPS LuaJIT increments" => sub {
    my @lj = map { $t->luajit_bg($luajit_code) } 1 .. $LUAJITS;
    my ($ok, $pids, $waited, $bad) = hammer("/incr?key=c");
    is($ok, $CLIENTS * $REQUESTS, "every request succeeded")
        or diag(join '', @$bad[0 .. ($#$bad < 5 ? $#$bad : 4)]);
    is(scalar keys %$pids, 2, "both workers served requests")
        or diag(explain $pids);
    cmp_ok($waited, '>', 0, "some requests had to wait ($waited)");
    for my $p (@lj) {
        my ($rc, $out) = $p->finish(60);
        is($out, "done\n", "LuaJIT process finished");
    }
    is($t->get("/get?key=c")->{body},
       ($CLIENTS * $REQUESTS + $LUAJITS * $LOOPS) . "\n", "exact count");
    $t->check_log("locked counter", nested => 1);
};

subtest "control: the same workload without the lock loses updates" => sub {
    my ($ok, $pids) = hammer("/incr_unlocked?key=u");
    is($ok, $CLIENTS * $REQUESTS, "every request succeeded");
    my $got = $t->get("/get?key=u")->{body};
    chomp $got;
    cmp_ok($got, '<', $CLIENTS * $REQUESTS,
           "lost updates without the lock ($got)");
    $t->check_log("unlocked counter", nested => 1);
};

$t->stop;
done_testing;
