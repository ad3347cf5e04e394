# The Redis lock and semaphore inside nginx across hosts, with Debian's
# lua-resty-redis (lua-nginx-redis: `require "nginx.redis"`, 0.27,
# set_timeout only): 3 nginx instances (2 workers each, a zone directory
# each: 3 hosts) and one redis-server on a free loopback port
# (t/lib/ShmRedis.pm).
#
# 24 requests (8 per instance) wait for one key that the test holds in
# Redis, then take it one after the other, each for an instant: with a
# connect function (host single flight, transfers, wake-ups) at most 250
# Redis commands, and the last one's delay after the release reported
# (with a 30 s backstop: only a lost wake-up reaches the 15 s ceiling),
# measured beside the lock given connected clients without host single
# flight (each request polling Redis with ngx.sleep steps).  No two
# requests hold the key at once (a count on a board, a zone every instance
# opens by path).  Then 18 requests take a semaphore of 2 permits: never
# more than 2 inside, and 2 reached.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use File::Temp qw(tempdir);
use Time::HiRes qw(time sleep);
use ShmTest qw(spawn);
use ShmRedis;

my $PER = 8;
my $N = 3 * $PER;

my $redis = ShmRedis->start;
my $rport = $redis->port;

my $shm = (-d '/dev/shm' && -w '/dev/shm') ? '/dev/shm' : undef;
my $board = tempdir('shmlock-board-XXXXXX', ($shm ? (DIR => $shm) : (TMPDIR => 1)),
                    CLEANUP => 1);
chmod 01777, $board;

my $http_config = <<"EOF";
    init_worker_by_lua_block {
        local shdict = require "resty.shmlock.shdict"
        local redis = require "nginx.redis"
        redis_lock = require "resty.shmlock.redis"
        rsem = require "resty.shmlock.redis.semaphore"
        T.board = assert(shdict.open("board", { dir = "$board" }))
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
        # takes key "k" once, for an instant; answers "ok"
        location = /lock {
            content_by_lua_block {
                local board = T.board
                local red, lock
                if ngx.var.arg_mode == "wake" then
                    lock = assert(redis_lock.new(T.connect,
                                                 { timeout = 120,
                                                   max_step = 30 }))
                else
                    red = assert(T.connect())
                    lock = assert(redis_lock.new(red, { timeout = 120,
                                                        dict = false }))
                end
                board:incr("arrived", 1, 0)
                local elapsed, err = lock:lock("k")
                if not elapsed then
                    return ngx.say("lock: ", err)
                end
                if board:incr("inside", 1, 0) ~= 1 then
                    board:incr("overlaps", 1, 0)
                end
                ngx.update_time()
                board:set("at:" .. ngx.var.arg_i, ngx.now())
                board:incr("inside", -1)
                local ok, uerr = lock:unlock()
                if red then
                    red:set_keepalive()
                end
                ngx.say(ok == 1 and "ok" or ("unlock: " .. tostring(uerr)))
            }
        }
        # a permit of "s" (2 of them) for 50 ms; answers "ok"
        location = /sem {
            content_by_lua_block {
                local board = T.board
                local sem = assert(rsem.new(T.connect, { permits = 2,
                                                         timeout = 30 }))
                local elapsed, err = sem:acquire("s")
                if not elapsed then
                    return ngx.say("acquire: ", err)
                end
                local n = board:incr("sem_inside", 1, 0)
                if n > (board:get("sem_most") or 0) then
                    board:set("sem_most", n)
                end
                ngx.sleep(0.05)
                board:incr("sem_inside", -1)
                ngx.say(sem:release() == 1 and "ok" or "release failed")
            }
        }
        location = /board {
            content_by_lua_block {
                ngx.say(tostring(T.board:get(ngx.var.arg_key)))
            }
        }
        # this host's requests waiting for the host's turn at "k"
        location = /turn {
            content_by_lua_block {
                local shdict = require "resty.shmlock.shdict"
                local zone = shdict.open("shmlock_redis", { create = false })
                ngx.say(tostring(zone and zone:get("lock:{k}#n")))
            }
        }
        location = /reset {
            content_by_lua_block {
                for _, k in ipairs(T.board:get_keys(0)) do
                    T.board:delete(k)
                end
                ngx.say("ok")
            }
        }
EOF

my @t;
for my $i (1 .. 3) {
    my $t = ShmTest->new(workers => 2, reuseport => 1,
                         http_config => $http_config, config => $config);
    $t->start;
    push @t, $t;
}

sub board { my $b = $t[0]->get("/board?key=$_[0]")->{body}; chomp $b; $b }

# the clients blocked in XREAD: the hosts whose waiter waits on Redis
sub waiting {
    my @lines = split /\n/, $redis->cli("CLIENT", "LIST");
    return scalar grep { / cmd=xread / && / flags=[a-zA-Z]*b/ } @lines;
}

# every request waits: with wake-ups, on each host 7 for the host's turn
# and 1 on Redis (polling, where nothing tells: each has arrived)
sub all_wait {
    my ($mode) = @_;
    return board("arrived") eq $N if $mode ne 'wake';
    for my $t (@t) {
        my $n = $t->get("/turn")->{body};
        chomp $n;
        return 0 unless $n eq $PER - 1;
    }
    return waiting() == 3;
}

sub commands {
    my $info = $redis->cli("INFO", "commandstats");
    my $total = 0;
    while ($info =~ /cmdstat_([\w|]+):calls=(\d+)/g) {
        $total += $2 unless $1 eq 'info' || $1 =~ /^config/;
    }
    return $total;
}

# $N requests wait for "k", held here; released once all wait
sub episode {
    my ($mode) = @_;
    $t[0]->get("/reset");
    $redis->cli("FLUSHALL");
    $redis->cli("SET", "lock:{k}", "held-by-the-test");
    $redis->cli("CONFIG", "RESETSTAT");
    my @procs = map {
        my $i = $_;
        spawn(sub { $t[$i % 3]->get("/lock?mode=$mode&i=$i")->{body} })
    } 0 .. $N - 1;
    # (a ceiling only requests that never wait reach)
    my $deadline = time + 60;
    sleep 0.02 while !all_wait($mode) && time < $deadline;
    # (no barrier, nothing asserted rests on it: the waiters of a host's
    # turn inside nginx begin with resty.lock's steps, 1 to 128 ms, and
    # queue after 0.255 s (resty.shmlock.lock.nginx_wait); this pause lets
    # them, so that the delay reported is the wake-ups' and the handoffs',
    # not the first steps')
    sleep 0.3;
    my $released = time;
    # the release script's work: the key deleted, and the waiters, marked
    # in the key's wake stream (resty.shmlock.redis.wake), woken
    $redis->cli("DEL", "lock:{k}");
    $redis->cli("XADD", "lock:{k}:wake", "MAXLEN", "1", "*", "r", "1");
    my @bodies = map { $_->join(150) } @procs;
    my $last = 0;
    for my $i (0 .. $N - 1) {
        my $at = board("at:$i");
        $last = $at - $released if $at ne 'nil' && $at - $released > $last;
    }
    return { bodies => \@bodies, commands => commands(), last => $last,
             overlaps => board("overlaps") };
}

my $today = episode("today");
my $wake = episode("wake");
diag(sprintf("3 nginx x 2 workers, $N requests for one held key: wake-ups "
             . "%d Redis commands (%.1f per acquisition), the last %.3f s "
             . "after the release; the polling lock %d (%.1f), %.3f s",
             $wake->{commands}, $wake->{commands} / $N, $wake->{last},
             $today->{commands}, $today->{commands} / $N, $today->{last}));

subtest "the polling lock: every request gets the key" => sub {
    is_deeply($today->{bodies}, [("ok\n") x $N], "bodies");
    is($today->{overlaps}, "nil", "no two at once");
};

subtest "host single flight and wake-ups: at most 250 Redis commands, "
      . "each host woken by a release (the last holder's delay reported)"
      => sub {
    is_deeply($wake->{bodies}, [("ok\n") x $N], "bodies");
    is($wake->{overlaps}, "nil", "no two at once");
    cmp_ok($wake->{commands}, '<=', 250, "Redis commands");
    cmp_ok($wake->{commands}, '<', $today->{commands},
           "fewer than the polling lock's");
    # a host that missed its wake-up waits out the 30 s backstop
    cmp_ok($wake->{last}, '<', 15, "the last holder, after the release (s)");
};

subtest "a semaphore of 2 permits across 3 instances: 2 inside at most, "
      . "and reached" => sub {
    $t[0]->get("/reset");
    my @procs = map {
        my $i = $_;
        spawn(sub { $t[$i % 3]->get("/sem")->{body} })
    } 0 .. 17;
    my @bodies = map { $_->join(150) } @procs;
    is_deeply(\@bodies, [("ok\n") x 18], "bodies");
    is(board("sem_most"), "2", "the most inside at once");
};

$_->stop for @t;
done_testing;
