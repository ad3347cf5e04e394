# The Redis lock's lease renewal inside nginx (resty.shmlock.redis with
# opts.renew = true and a connect function), with Debian's lua-resty-redis
# (lua-nginx-redis: `require "nginx.redis"`, 0.27): a lock held across
# 3 x exptime stays held; renewal stops when the request that took it
# ends, when the timer that took it ends, when its object is collected
# (collectgarbage() in the request: no waiting for a GC), and at unlock;
# a renewal that finds the lock gone makes owned() false, gives the
# host's turn back at once, and unlock() answers 1, "expired".  One
# worker, so that every request shares the worker that renews.  A private
# redis-server on a free loopback port (t/lib/ShmRedis.pm).
#
# Nothing waits on a timer margin but the lease itself: each check is a
# state (the key's PTTL, a count of Redis's commands) read after the time
# it takes to change, with the renewal period (exptime / 3 = 0.2 s)
# far below the waits (>= 1.2 s).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use ShmTest;
use ShmRedis;

my $redis = ShmRedis->start;
my $rport = $redis->port;

my $t = ShmTest->new(
    workers => 1,
    init_by_lua => <<"EOF",
        local redis = require "nginx.redis"
        redis_lock = require "resty.shmlock.redis"
        function T.connect()
            local red = redis:new()
            red:set_timeout(1000)
            local ok, err = red:connect("127.0.0.1", $rport)
            if not ok then
                return nil, err
            end
            return red
        end
        function T.pttl(key)
            local red = assert(T.connect())
            local ms = red:pttl("lock:{" .. key .. "}")
            red:set_keepalive()
            return ms
        end
        function T.lock(renew)
            return assert(redis_lock.new(T.connect, { exptime = 0.6,
                                                      renew = renew }))
        end
EOF
    config => <<'EOF',
        # held for 3 x exptime, with and without renewal
        location = /hold {
            content_by_lua_block {
                local renew = ngx.var.arg_renew == "1"
                local lock = T.lock(renew)
                local _, _, fence = assert(lock:lock("hold"))
                ngx.sleep(1.8)
                local ttl = T.pttl("hold")
                local owned = lock:owned()
                ngx.say(T.fmt(owned, ttl > 0, lock:unlock()))
            }
        }
        # the request ends holding the lock (no unlock; the object kept,
        # so that only the request's end can stop the renewal)
        location = /forget {
            content_by_lua_block {
                T.kept = T.lock(true)
                assert(T.kept:lock("forget"))
                ngx.say("held ", T.pttl("forget") > 0)
            }
        }
        # a timer takes it and ends
        location = /timer {
            content_by_lua_block {
                assert(ngx.timer.at(0, function()
                    T.timer_lock = T.lock(true)   -- kept: not collected
                    assert(T.timer_lock:lock("timer"))
                end))
                ngx.say("ok")
            }
        }
        # the object is collected while the request goes on
        location = /drop {
            content_by_lua_block {
                local lock = T.lock(true)
                assert(lock:lock("drop"))
                ngx.sleep(0.5)
                local before = T.pttl("drop") > 0
                lock = nil              -- luacheck: ignore 311
                collectgarbage()
                collectgarbage()
                ngx.sleep(1.2)
                ngx.say(T.fmt(before, T.pttl("drop")))
            }
        }
        # the lock is taken from us: the renewal finds it gone
        location = /gone {
            content_by_lua_block {
                local lock = T.lock(true)
                assert(lock:lock("gone"))
                local red = assert(T.connect())
                red:del("lock:{gone}")
                red:set_keepalive()
                ngx.sleep(0.5)
                -- the host's turn went with it: another lock object of
                -- this host takes the key at once
                local other = T.lock(false)
                local got = other:trylock("gone")
                other:unlock()
                ngx.say(T.fmt(lock:owned()), " ", T.fmt(got),
                        " ", T.fmt(lock:unlock()))
            }
        }
        # renewal stops at unlock: no Redis command in 3 periods after
        location = /unlock {
            content_by_lua_block {
                local lock = T.lock(true)
                assert(lock:lock("unlock"))
                ngx.sleep(0.5)
                assert(lock:unlock() == 1)
                local red = assert(T.connect())
                red:config("resetstat")
                ngx.sleep(1)
                local info = red:info("commandstats")
                red:set_keepalive()
                ngx.say(info:match("cmdstat_evalsha:calls=(%d+)") or "0")
            }
        }
        # renewal needs connections of its own
        location = /misuse {
            content_by_lua_block {
                local red = assert(T.connect())
                local ok, err = pcall(redis_lock.new, red, { renew = true })
                red:set_keepalive()
                ngx.say(ok, " ", (tostring(err):gsub("^[^:]*:%d+: ", "")))
            }
        }
        location = /pttl {
            content_by_lua_block {
                ngx.say(T.pttl(ngx.var.arg_key))
            }
        }
EOF
);
$t->start;

$t->block("renewal keeps the lock across 3 x exptime; without it, it expires",
    request => ["GET /hold?renew=1", "GET /hold?renew=0"],
    body    => ["true true 1\n", "false false 1 expired\n"]);

# the key's lease, polled: gone (PTTL -2) within $within seconds
sub gone_within {
    my ($key, $within) = @_;
    my $deadline = time + $within;
    while (time < $deadline) {
        return 1 if $t->get("/pttl?key=$key")->{body} eq "-2\n";
        sleep 0.05;
    }
    return 0;
}

subtest "renewal stops when the request that took the lock ends" => sub {
    is($t->get("/forget")->{body}, "held true\n", "held");
    # past the request, the renewal stops at its next period: the lease
    # (0.6 s) runs out (10 s: a ceiling a renewal going on never meets,
    # not a margin on a loaded machine's late timers)
    ok(gone_within("forget", 10), "the key expired");
};

subtest "renewal stops when the timer that took the lock ends" => sub {
    is($t->get("/timer")->{body}, "ok\n", "timer started");
    sleep 0.1;
    ok(gone_within("timer", 10), "the key expired");
};

$t->block("renewal stops when the lock object is collected",
    request => "GET /drop",
    body    => "true -2\n");

$t->block("a renewal that finds the lock gone: owned() false, the host's "
          . "turn free, unlock() 1, \"expired\"",
    request => "GET /gone",
    body    => "false expired 0 1 expired\n");

$t->block("renewal stops at unlock",
    request => "GET /unlock",
    body    => "0\n");

$t->block("renew with a connected client raises",
    request => "GET /misuse",
    body    => "false opts.renew needs a connect function (the renewal uses "
               . "connections of its own)\n");

$t->stop;
done_testing;
