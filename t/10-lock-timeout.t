# lock:lock(key, timeout) inside nginx: the per-call timeout overrides the
# object's for one call, on a zone of ours and on an ngx.shared dict, while
# the key is held by another request; a bad timeout raises at the caller.
#
# How long a call waits is read from the ngx.sleep steps it took (a hook
# around ngx.sleep, set before the modules load), not from the wall clock
# against a margin: none for timeout 0, steps adding up to at most 0.05 s
# for 0.05 (a loaded machine's late timers only make fewer of them).
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
    lua_shared_dict tshared 1m;
    init_by_lua_block {
        -- T.slept: the seconds of ngx.sleep of the coroutine T.waiter
        T = {}
        local sleep = ngx.sleep
        ngx.sleep = function(s)
            if coroutine.running() == T.waiter then
                T.slept = T.slept + s
            end
            return sleep(s)
        end
        resty_lock = require "resty.shmlock"
        assert(require("resty.shmlock.shdict").open("tzone"))
    }
EOF
    config => <<'EOF',
        # ?store=tzone|tshared: a holder (a timer releases it after 0.3 s),
        # then one waiter object of timeout 5 locking with timeouts 0, 0.05,
        # 3; one line per call: the returns, and what it slept or the
        # wall time
        location = /t {
            content_by_lua_block {
                local name = ngx.var.arg_store
                local holder = assert(resty_lock:new(name))
                assert(holder:lock("k") == 0)
                ngx.say("store ", holder.dict._zone and "zone" or "ngx.shared")
                local waiter = assert(resty_lock:new(name, { timeout = 5 }))

                local function timed(timeout)
                    ngx.update_time()
                    local t0 = ngx.now()
                    T.waiter, T.slept = coroutine.running(), 0
                    local elapsed, err = waiter:lock("k", timeout)
                    T.waiter = nil
                    ngx.update_time()
                    return elapsed, err, ngx.now() - t0, T.slept
                end

                local e, err, wall, slept = timed(0)
                ngx.say("0: ", tostring(e), " ", tostring(err), " ",
                        slept == 0)
                e, err, wall, slept = timed(0.05)
                ngx.say("0.05: ", tostring(e), " ", tostring(err), " ",
                        wall >= 0.04 and slept > 0 and slept <= 0.05 + 1e-9)

                assert(ngx.timer.at(0.3, function() holder:unlock() end))
                e, err, wall = timed(3)
                ngx.say("3: ", e ~= nil and e > 0.2 and e < 3, " ",
                        tostring(err), " ", wall > 0.2 and wall < 3)
                ngx.say("unlock ", tostring(waiter:unlock()),
                        ", object timeout ", waiter.timeout)
            }
        }
        # bad timeouts raise, pointing at this handler's line
        location = /bad {
            content_by_lua_block {
                local lock = assert(resty_lock:new(ngx.var.arg_store))
                for _, v in ipairs({ "1", 0 / 0, -1, math.huge, 2e12 }) do
                    local ok, err = pcall(function() lock:lock("b", v) end)
                    ngx.say(ok, " ", (tostring(err):gsub(
                        "^content_by_lua%(nginx%.conf:%d+%):%d+: ", "AT ")))
                end
                ngx.say(tostring(lock:lock("b")), " ", tostring(lock:unlock()))
            }
        }
EOF
);
$t->start;

for my $store (qw(tzone tshared)) {
    my $kind = $store eq 'tzone' ? 'zone' : 'ngx.shared';
    $t->block("$kind: lock(key, 0) answers at once, lock(key, 0.05) times out"
              . " near 0.05 although the object's timeout is 5, a longer one"
              . " gets the key when the holder releases",
        request => "GET /t?store=$store",
        body    => <<"EOF");
store $kind
0: nil timeout true
0.05: nil timeout true
3: true nil true
unlock 1, object timeout 5
EOF

    $t->block("$kind: a bad per-call timeout raises at the caller's line",
        request => "GET /bad?store=$store",
        body    => <<'EOF');
false AT timeout must be a number
false AT timeout must be a number
false AT timeout must be >= 0
false AT timeout must be <= 1e12
false AT timeout must be <= 1e12
0 1
EOF
}

$t->stop;
done_testing;
