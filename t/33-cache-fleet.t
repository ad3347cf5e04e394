# The cache's fleet tier (opts.redis) inside nginx, with lua-resty-redis
# as Debian packages it (lua-nginx-redis: `require "nginx.redis"`, 0.27,
# set_timeout only): 3 nginx instances (2 workers each, a zone directory
# each: 3 hosts) and one redis-server on a free loopback port, started and
# stopped here.  30 requests (10 per instance) for one cold key: one loader
# call in the fleet and at most 200 Redis commands, measured beside the
# lock-factory recipe of docs/redis.md (resty.shmlock.redis locks, one
# load per instance, waiters polling Redis); a set on one instance seen by
# the others after fleet_lag; a get in the log phase (no cosockets) falls
# back to the host tier and says so in stats().
#
# The loader does not return before every request has arrived (each counts
# itself on a board, a zone of its own that every instance opens by path),
# so all of them are in flight while it runs.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use File::Temp qw(tempdir);
use IO::Socket::INET;
use POSIX qw(WNOHANG);
use Time::HiRes qw(time sleep);
use ShmTest qw(parallel);

my $PER = 10;         # requests per instance
my $N = 3 * $PER;

my $REDIS = $ENV{REDIS_SERVER} || 'redis-server';
system("command -v $REDIS >/dev/null 2>&1") == 0
    or ShmTest::give_up("redis-server is not on the PATH (scripts/deps.sh installs it)");
-e '/usr/share/lua/5.1/nginx/redis.lua'
    or ShmTest::give_up("lua-nginx-redis is not installed (scripts/deps.sh installs it)");

my $rport = ShmTest::free_port();
my $redis_pid = fork // die "fork: $!";
if ($redis_pid == 0) {
    open STDOUT, '>', '/dev/null';
    exec($REDIS, '--port', $rport, '--bind', '127.0.0.1', '--save', '',
         '--appendonly', 'no', '--daemonize', 'no')
        or POSIX::_exit(127);
}
END {
    local $?;
    if ($redis_pid) {
        kill 'TERM', $redis_pid;
        my $deadline = time + 5;
        sleep 0.05 while waitpid($redis_pid, WNOHANG) == 0 && time < $deadline;
        kill 'KILL', $redis_pid if waitpid($redis_pid, WNOHANG) == 0;
    }
}
{
    my $deadline = time + 10;
    my $up;
    until ($up = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$rport")) {
        ShmTest::give_up("redis-server did not come up on port $rport")
            if time > $deadline || waitpid($redis_pid, WNOHANG) != 0;
        sleep 0.05;
    }
    close $up;
}

# the board: loader calls and arrivals, shared by the 3 instances
my $shm = (-d '/dev/shm' && -w '/dev/shm') ? '/dev/shm' : undef;
my $board = tempdir('shmlock-board-XXXXXX', ($shm ? (DIR => $shm) : (TMPDIR => 1)),
                    CLEANUP => 1);
chmod 01777, $board;

my $http_config = <<"EOF";
    init_worker_by_lua_block {
        local shdict = require "resty.shmlock.shdict"
        local cache = require "resty.shmlock.cache"
        local redis = require "nginx.redis"
        local redis_lock = require "resty.shmlock.redis"
        local RPORT = $rport
        T.board = assert(shdict.open("board", { dir = "$board" }))
        local function connect(timeout)
            local red = redis:new()
            red:set_timeout((timeout or 1) * 1000)
            local ok, err = red:connect("127.0.0.1", RPORT)
            if not ok then
                return nil, err
            end
            return red
        end
        T.connect = connect
        T.caches = {
            fleet = assert(cache.new("fleet-t", {
                redis = connect, lock_opts = { timeout = 30 },
            })),
            recipe = assert(cache.new("recipe-t", {
                lock = function()
                    local red, err = connect(1)
                    if not red then
                        return nil, err
                    end
                    return redis_lock.new(red, { exptime = 30, timeout = 30 })
                end,
            })),
        }
        -- counts its calls; returns once n requests have arrived
        function T.loader(key, n)
            T.board:incr("calls:" .. key, 1, 0)
            local deadline = ngx.now() + 20
            while (T.board:get("arrived:" .. key) or 0) < n
                  and ngx.now() < deadline
            do
                ngx.sleep(0.01)
            end
            return "v:" .. key
        end
    }
EOF

my $config = <<'EOF';
        # answers "value hit_level"
        location = /get {
            content_by_lua_block {
                local key, n = ngx.var.arg_key, tonumber(ngx.var.arg_n) or 0
                T.board:incr("arrived:" .. key, 1, 0)
                local c = T.caches[ngx.var.arg_mode or "fleet"]
                local value, err, level = c:get(key, nil, T.loader, key, n)
                if err then
                    ngx.status = 500
                    return ngx.say("error: ", err)
                end
                ngx.say(value, " ", level)
            }
        }
        location = /set {
            content_by_lua_block {
                ngx.say(tostring(T.caches.fleet:set(ngx.var.arg_key,
                                                    ngx.var.arg_value)))
            }
        }
        # a get in the log phase: no cosockets there
        location = /logphase {
            content_by_lua_block { ngx.say("ok") }
            log_by_lua_block {
                local v, err, level = T.caches.fleet:get("in-log", nil,
                    function() return "loaded in log" end)
                T.board:set("logphase", tostring(v) .. " " .. tostring(err)
                                        .. " " .. tostring(level))
            }
        }
        location = /stats {
            content_by_lua_block {
                local s = assert(T.caches.fleet:stats())
                local keys = {}
                for k in pairs(s) do keys[#keys + 1] = k end
                table.sort(keys)
                for _, k in ipairs(keys) do ngx.say(k, "=", s[k]) end
            }
        }
        location = /board {
            content_by_lua_block {
                ngx.say(tostring(T.board:get(ngx.var.arg_key)))
            }
        }
        # Redis's commands since the last /resetstat (INFO and CONFIG
        # aside): "total sent", sent being EVALSHA, EVAL, XREAD
        location = /resetstat {
            content_by_lua_block {
                local red = assert(T.connect(2))
                assert(red:config("resetstat"))
                ngx.say("ok")
            }
        }
        location = /commands {
            content_by_lua_block {
                local red = assert(T.connect(2))
                local info = assert(red:info("commandstats"))
                local total, sent = 0, 0
                for cmd, n in info:gmatch("cmdstat_([%w|_]+):calls=(%d+)") do
                    if cmd ~= "info" and not cmd:find("^config") then
                        total = total + n
                        if cmd == "evalsha" or cmd == "eval"
                           or cmd == "xread" then
                            sent = sent + n
                        end
                    end
                end
                ngx.say(total, " ", sent)
            }
        }
EOF

# three hosts: each instance its own zone directory (ShmTest->new sets
# $SHMLOCK_DIR, and start() hands it to that nginx)
my @t;
for my $i (1 .. 3) {
    my $t = ShmTest->new(workers => 2, reuseport => 1,
                         http_config => $http_config, config => $config);
    $t->start;
    push @t, $t;
}

# $N requests, $PER to each instance, at once; tallies "200 value level"
sub stampede {
    my ($key, $mode) = @_;
    my @answers = parallel($N, sub {
        my ($i) = @_;
        my $r = $t[$i % 3]->get("/get?key=$key&n=$N&mode=$mode");
        return "$r->{status} $r->{body}";
    });
    my (%levels, @bad);
    for my $a (@answers) {
        if (defined $a && $a =~ /^200 v:\Q$key\E ([1-5])\n\z/) {
            $levels{$1}++;
        } else {
            push @bad, $a // 'undef';
        }
    }
    return (\%levels, \@bad);
}

sub commands {
    my ($body) = $t[0]->get("/commands")->{body} =~ /^(\d+ \d+)\n/;
    return split / /, $body // '0 0';
}

$t[0]->get("/resetstat");
my ($rlevels, $rbad) = stampede("cold-r", "recipe");
my ($rtotal, $rsent) = commands();
my $rcalls = $t[0]->get("/board?key=calls:cold-r")->{body};

$t[0]->get("/resetstat");
my ($levels, $bad) = stampede("cold", "fleet");
my ($total, $sent) = commands();
my $calls = $t[0]->get("/board?key=calls:cold")->{body};

diag("3 nginx x 2 workers, $N requests for one cold key: fleet tier "
     . "${\ ($calls =~ s/\n//r)} loader call(s), $total Redis commands ($sent "
     . "sent); lock-factory recipe ${\ ($rcalls =~ s/\n//r)} loader calls, "
     . "$rtotal Redis commands ($rsent sent)");

subtest "the lock-factory recipe: one loader call per instance" => sub {
    is(scalar @$rbad, 0, "every request got the value") or diag(explain $rbad);
    is($rcalls, "3\n", "3 loader calls");
};

subtest "the fleet tier: one loader call, at most 200 Redis commands" => sub {
    is(scalar @$bad, 0, "every request got the value") or diag(explain $bad);
    is($calls, "1\n", "one loader call in the fleet");
    is($levels->{3}, 1, "one request ran the loader");
    is($levels->{5}, 2, "each other instance took it from Redis once")
        or diag(explain $levels);
    cmp_ok($total, '<=', 200, "Redis commands");
    cmp_ok($total, '<', $rtotal, "fewer than the recipe's");
};

subtest "a set on one instance is seen by the others after fleet_lag" => sub {
    is($t[0]->get("/set?key=cold&value=new")->{body}, "true\n", "set");
    my $set = time;
    # each other instance answers the old value until its host reads the
    # change log (its last read fleet_lag old, 1 s), then the set's, and
    # never the old one again; the ceiling only a host that never reads
    # the log again reaches
    for my $i (1, 2) {
        my ($new, @bad) = (0);
        my $deadline = time + 30;
        while ($new < 4 && time < $deadline) {  # 4 in a row: both workers
            my $body = $t[$i]->get("/get?key=cold")->{body};
            if ($body =~ /^new [125]\n\z/) {
                $new++;
            } elsif (!$new && $body =~ /^v:cold [12]\n\z/) {
                sleep 0.05;
            } else {
                push @bad, $body;
                last;
            }
        }
        is_deeply(\@bad, [], "instance $i: the old value, then the set's");
        is($new, 4, "instance $i: the set's value, 4 gets in a row");
        diag(sprintf("instance %d saw the set %.2f s after it (fleet_lag 1 s)",
                     $i, time - $set));
    }
};

subtest "a get in the log phase falls back to the host tier" => sub {
    # the host's view due again: its last read of the log fleet_lag old
    my $due_by = time + 30;
    my $age = -1;
    while (time < $due_by) {
        ($age) = $t[2]->get("/stats")->{body} =~ /^log_age=(-?[\d.]+)$/m;
        last if defined $age && $age >= 1;
        sleep 0.05;
    }
    cmp_ok($age, '>=', 1, "the host's view is due (log_age)");
    is($t[2]->get("/logphase")->{body}, "ok\n", "request");
    # (ceilings only a log handler or a timer that never runs reaches)
    my $deadline = time + 30;
    my $got;
    while (time < $deadline) {
        $got = $t[2]->get("/board?key=logphase")->{body};
        last if $got ne "nil\n";
        sleep 0.05;
    }
    is($got, "loaded in log nil 3\n", "the loader ran on this host");
    # (the worker's counts reach the zone within a second: its timer)
    $deadline = time + 30;
    my $stats;
    while (time < $deadline) {
        $stats = $t[2]->get("/stats")->{body};
        last if $stats =~ /^host_only=[1-9]/m;
        sleep 0.1;
    }
    like($stats, qr/^host_only=[1-9]\d*$/m, "stats() counts it");
};

$_->stop for @t;
done_testing;
