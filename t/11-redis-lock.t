# The Redis lock (resty.shmlock.redis) inside nginx under concurrency: wrk
# -c50 requests on 2 workers contend one key with short timeouts, so that
# many waits end at their deadline.  No ngx.sleep below 1 ms: nginx logs
# "ngx.sleep(0) called without delayed events patch" for those.  Mutual
# exclusion holds (a flag in a lua_shared_dict, set while holding); the
# fence counter has a TTL.  A private redis-server is started on a free
# loopback port and stopped at the end.  The client is t/lib/resp.lua, a
# lua-resty-redis stand-in over cosockets (t/33 and t/34 run Debian's
# lua-resty-redis, lua-nginx-redis).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use IO::Socket::INET;
use POSIX qw(WNOHANG);
use ShmTest;

my $REDIS = $ENV{REDIS_SERVER} || 'redis-server';
system("command -v $REDIS >/dev/null 2>&1") == 0
    or ShmTest::give_up("redis-server is not on the PATH (scripts/deps.sh installs it)");
system("command -v wrk >/dev/null 2>&1") == 0
    or ShmTest::give_up("wrk is not on the PATH (scripts/deps.sh installs it)");

my $rport = ShmTest::free_port();
my $redis_pid = fork // die "fork: $!";
if ($redis_pid == 0) {
    open STDOUT, '>', '/dev/null';
    exec($REDIS, '--port', $rport, '--bind', '127.0.0.1', '--save', '',
         '--appendonly', 'no', '--daemonize', 'no')
        or POSIX::_exit(127);
}
END {
    local $?;       # waitpid must not change the test's exit status
    if ($redis_pid) {
        kill 'TERM', $redis_pid;
        my $deadline = time + 30;
        sleep 0.05 while waitpid($redis_pid, WNOHANG) == 0 && time < $deadline;
        kill 'KILL', $redis_pid if waitpid($redis_pid, WNOHANG) == 0;
    }
}
{
    my $deadline = time + 30;
    my $up;
    until ($up = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$rport")) {
        ShmTest::give_up("redis-server did not come up on port $rport")
            if time > $deadline || waitpid($redis_pid, WNOHANG) != 0;
        sleep 0.05;
    }
    close $up;
}

my $t = ShmTest->new(
    workers => 2,
    init_by_lua => <<"EOF",
        redis_lock = require "resty.shmlock.redis"
        package.path = "$FindBin::Bin/lib/?.lua;" .. package.path
        resp = require "resp"
        RPORT = $rport
EOF
    http_config => <<"EOF",
    lua_shared_dict stats 1m;
EOF
    config => <<'EOF',
        # lock "hot" with a timeout of 3 to 20 ms, hold it 2 ms, unlock
        location = /rl {
            content_by_lua_block {
                local stats = ngx.shared.stats
                local red = assert(resp.connect("127.0.0.1", RPORT, 2000))
                local lock = redis_lock.new(red, { exptime = 5 })
                local timeout = 0.003 + math.random() * 0.017
                local elapsed, err, fence = lock:lock("hot", timeout)
                if not elapsed then
                    stats:incr("lock " .. err, 1, 0)
                    red:set_keepalive()
                    return ngx.say(err)
                end
                if not stats:add("busy", true) then
                    stats:incr("overlap", 1, 0)
                end
                ngx.sleep(0.002)
                stats:delete("busy")
                local ok, uerr = lock:unlock()
                stats:incr(ok == 1 and "ok" or ("unlock " .. tostring(uerr)),
                           1, 0)
                red:set_keepalive()
                ngx.say("ok ", fence)
            }
        }
        location = /stats {
            content_by_lua_block {
                local stats = ngx.shared.stats
                local keys = stats:get_keys(0)
                table.sort(keys)
                for _, k in ipairs(keys) do
                    ngx.say(k, "=", stats:get(k))
                end
                local red = assert(resp.connect("127.0.0.1", RPORT, 2000))
                local pttl = red:pttl("lock:{hot}:fence")
                ngx.say("fence ttl ok=", pttl > 7 * 24 * 3600 * 1000)
            }
        }
EOF
);
$t->start;

$t->block("a first lock through the resp client works",
    request => "GET /rl",
    body    => "ok 1\n");

my $url = "http://127.0.0.1:" . $t->port . "/rl";
my $out = `timeout -s KILL 60 wrk -t2 -c50 -d3s $url 2>&1`;
is($? >> 8, 0, "wrk ran") or diag($out);
my ($requests) = $out =~ /(\d+) requests in/;
ok($requests && $requests > 100, "wrk made requests: " . ($requests // 'none'))
    or diag($out);

sleep 0.5;      # requests wrk left in flight finish
my $res = $t->block("under wrk -c50: mutual exclusion, waits ended at their"
                    . " deadline, no ngx.sleep below 1 ms",
    request      => "GET /stats",
    body         => qr/\Alock timeout=\d+\nok=\d+\nfence ttl ok=true\n\z/,
    no_error_log => ["ngx.sleep(0)", "[warn]"]);
my %stats = $res->{body} =~ /^([^=\n]+)=(\S+)$/mg;
cmp_ok($stats{ok} // 0, '>', 10, "many requests got the lock");
cmp_ok($stats{'lock timeout'} // 0, '>', 10,
       "many waits ended at their deadline");

$t->stop;
done_testing;
