# A Redis lock or permit held for many backstop intervals while requests
# of two nginx instances (two hosts) wait for it: normal waiting writes
# nothing to error.log, not even at [warn], with nginx's default
# `lua_socket_log_errors on` (ngx_lua logs every cosocket read that times
# out at [error]: a wait must be ended by Redis, never by its socket's
# timeout).  Debian's lua-resty-redis (lua-nginx-redis, `require
# "nginx.redis"`, 0.27) and one redis-server on a free loopback port
# (t/lib/ShmRedis.pm).
#
# The key is held by the test itself (a token it wrote into Redis, as a
# host of no instance's), with a backstop (max_step) of 0.1 s; the test
# lets it go once the waiting hosts have tried again at least 6 times
# between them (scripts counted by INFO commandstats: each try is an
# EVALSHA, so the wait has gone through several backstops whatever the
# machine's load), by deleting it (no wake-up: the waiters' backstop finds
# it free).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use ShmTest qw(spawn);
use ShmRedis;

my $redis = ShmRedis->start;
my $rport = $redis->port;

my $http_config = <<"EOF";
    init_worker_by_lua_block {
        local redis = require "nginx.redis"
        redis_lock = require "resty.shmlock.redis"
        rsem = require "resty.shmlock.redis.semaphore"
        function T.connect(timeout)
            local red = redis:new()
            red:set_timeout((timeout or 1) * 1000)
            local ok, err = red:connect("127.0.0.1", $rport)
            if not ok then
                return nil, err
            end
            return red
        end
    }
EOF

my $config = <<'EOF';
        # waits for key "q" (held by the test); answers "ok <waited>"
        location = /lock {
            content_by_lua_block {
                local lock = assert(redis_lock.new(T.connect,
                                                   { timeout = 60,
                                                     max_step = 0.1 }))
                local elapsed, err = lock:lock("q")
                if not elapsed then
                    return ngx.say("lock: ", err)
                end
                local ok, uerr = lock:unlock()
                ngx.say(ok == 1 and "ok" or ("unlock: " .. tostring(uerr)))
            }
        }
        # waits for the one permit of "q" (held by the test)
        location = /sem {
            content_by_lua_block {
                local sem = assert(rsem.new(T.connect, { permits = 1,
                                                         timeout = 60,
                                                         max_step = 0.1 }))
                local elapsed, err = sem:acquire("q")
                if not elapsed then
                    return ngx.say("acquire: ", err)
                end
                local ok, rerr = sem:release()
                ngx.say(ok == 1 and "ok" or ("release: " .. tostring(rerr)))
            }
        }
EOF

my @t;
for my $i (1 .. 2) {
    my $t = ShmTest->new(workers => 2, reuseport => 1,
                         http_config => $http_config, config => $config);
    $t->start;
    push @t, $t;
}

sub evalsha_calls {
    my $info = $redis->cli("INFO", "commandstats");
    return $info =~ /cmdstat_evalsha:calls=(\d+)/ ? $1 : 0;
}

# 2 requests (one per instance) wait at $uri for the key the test holds
# (hold: the Redis commands that hold it; free: those that let it go)
sub episode {
    my ($uri, $hold, $free) = @_;
    $redis->cli("FLUSHALL");
    $redis->cli(@$_) for @$hold;
    $redis->cli("CONFIG", "RESETSTAT");
    my @procs = map { my $t = $_; spawn(sub { $t->get($uri)->{body} }) } @t;
    # each request tries once, then again at each backstop (0.1 s): 6 tries
    # after the first two are 3 backstops or more each, on a loaded machine
    # too (a hang is caught by the requests' 60 s timeout)
    my $deadline = time + 60;
    sleep 0.02 while evalsha_calls() < 2 + 6 && time < $deadline;
    my $tries = evalsha_calls();
    $redis->cli(@$_) for @$free;
    my @bodies = map { $_->join(90) } @procs;
    diag("$uri: the waiters tried $tries times before the key was let go");
    return \@bodies;
}

my $WARN_RE = qr/\[(?:warn|error|alert|crit|emerg)\]/;

subtest "lock: waiting through backstops logs nothing" => sub {
    my $bodies = episode("/lock", [[ "SET", "lock:{q}", "the-test" ]],
                         [[ "DEL", "lock:{q}" ]]);
    is_deeply($bodies, [("ok\n") x 2], "every waiter got the lock");
    $_->check_log("lock", no_error_log => [$WARN_RE], nested => 1) for @t;
};

subtest "semaphore: waiting through backstops logs nothing" => sub {
    my $bodies = episode("/sem", [[ "ZADD", "sem:{q}", "+inf", "the-test" ]],
                         [[ "ZREM", "sem:{q}", "the-test" ]]);
    is_deeply($bodies, [("ok\n") x 2], "every waiter got the permit");
    $_->check_log("semaphore", no_error_log => [$WARN_RE], nested => 1)
        for @t;
};

$_->stop for @t;
done_testing;
