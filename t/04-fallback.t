# ngx.shared dicts: resty_lock:new("x") where x is `lua_shared_dict x 1m;`
# behaves as resty.lock on ngx.shared.x, and a name declared with
# lua_shared_dict is that dict even when a zone of ours has the same name
# (the zone is reached by passing its object).  The same name rule for
# every module: the cache's opts.dict of a lua_shared_dict's name keeps
# its values (and locks) in that dict, with no zone file made; the
# semaphore, which needs a zone, refuses such a name, naming the dict and
# what to do, and says what it tried for an unknown one in the lock's
# words.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use ShmTest qw(spawn);

my $t = ShmTest->new(
    workers => 2,
    http_config => <<'EOF',
    lua_shared_dict x 1m;
    lua_shared_dict both 1m;
    lua_shared_dict cache_shm 1m;
EOF
    init_by_lua => <<'EOF',
        -- a zone of ours with the name of a lua_shared_dict: the name
        -- means the dict; the zone is reached through its object
        T.both = assert(require("resty.shmlock.shdict").open("both"))
        -- mlcache's habit: the app's lua_shared_dict named as the store
        T.users = assert(require("resty.shmlock.cache").new("users",
                         { dict = "cache_shm", ttl = 60 }))
        T.semaphore = require "resty.shmlock.semaphore"
EOF
    config => <<'EOF',
        location = /api {
            content_by_lua_block {
                local fmt = T.fmt
                local lock = assert(resty_lock:new("x"))
                ngx.say(fmt(lock:lock(nil)))
                ngx.say(fmt(lock:lock("k")))
                ngx.say("in ngx.shared.x: ", ngx.shared.x:get("k") ~= nil)
                ngx.say(fmt(lock:lock("k2")))
                ngx.say(fmt(lock:expire(10)))
                ngx.say("ttl ~10: ", math.abs(ngx.shared.x:ttl("k") - 10) < 1)
                ngx.say(fmt(lock:expire()))
                ngx.say("ttl ~30: ", math.abs(ngx.shared.x:ttl("k") - 30) < 1)
                ngx.say(fmt(lock:unlock()))
                ngx.say("in ngx.shared.x: ", ngx.shared.x:get("k") ~= nil)
                ngx.say(fmt(lock:unlock()))
                ngx.say(fmt(lock:expire()))
            }
        }
        location = /timeout {
            content_by_lua_block {
                local holder = assert(resty_lock:new("x"))
                assert(holder:lock("to") == 0)
                local waiter = assert(resty_lock:new("x", { timeout = 0.05 }))
                ngx.say(T.fmt(waiter:lock("to")))
                local now = assert(resty_lock:new("x", { timeout = 0 }))
                ngx.say(T.fmt(now:lock("to")))
                holder:unlock()
            }
        }
        location = /gc {
            content_by_lua_block {
                do
                    local lost = assert(resty_lock:new("x"))
                    assert(lost:lock("gc") == 0)
                end
                collectgarbage()
                collectgarbage()
                local again = assert(resty_lock:new("x", { timeout = 0 }))
                ngx.say(T.fmt(again:lock("gc")))
                again:unlock()
            }
        }
        # holds `key` of ngx.shared.x within this request until
        # /release?key= (30 s at most)
        location = /hold {
            content_by_lua_block {
                local key = ngx.var.arg_key
                local lock = assert(resty_lock:new("x", { exptime = 60 }))
                local elapsed = assert(lock:lock(key))
                for _ = 1, 6000 do
                    if ngx.shared.x:get("release-" .. key) then
                        break
                    end
                    ngx.sleep(0.005)
                end
                ngx.say("held ", T.fmt(lock:unlock()), " ", ngx.worker.pid())
            }
        }
        location = /release {
            content_by_lua_block {
                ngx.say(tostring((ngx.shared.x:set("release-"
                                                   .. ngx.var.arg_key, true))))
            }
        }
        location = /flag {
            content_by_lua_block {
                ngx.say(tostring(ngx.shared.x:get(ngx.var.arg_name)))
            }
        }
        location = /try {
            content_by_lua_block {
                local lock = assert(resty_lock:new("x", { timeout = 0 }))
                local elapsed, err = lock:lock(ngx.var.arg_key)
                if elapsed then lock:unlock() end
                ngx.say(T.fmt(elapsed, err), " ", ngx.worker.pid())
            }
        }
        # "true nil" when the key was held at the first try, then came
        # to this waiter; it says it waits once that try was refused
        location = /wait {
            content_by_lua_block {
                local key = ngx.var.arg_key
                local lock = assert(resty_lock:new("x", { timeout = 30 }))
                local elapsed, err = lock:lock(key, 0)
                local held = not elapsed
                if held then
                    ngx.shared.x:set("waiting-" .. key, true)
                    elapsed, err = lock:lock(key)
                end
                if elapsed then lock:unlock() end
                ngx.say(T.fmt(held and elapsed ~= nil, err))
            }
        }
        location = /both {
            content_by_lua_block {
                local lock = assert(resty_lock:new("both"))
                ngx.say(lock.store)
                ngx.say(T.fmt(lock:lock("b")))
                ngx.say("in our zone: ", resty_lock.inspect(T.both, "b") ~= nil)
                ngx.say("in ngx.shared.both: ", ngx.shared.both:get("b") ~= nil)
                ngx.say(T.fmt(lock:unlock()))
                local zl = assert(resty_lock:new(T.both))
                ngx.say(zl.store)
                ngx.say(T.fmt(zl:lock("b")))
                ngx.say("in our zone: ", resty_lock.inspect(T.both, "b") ~= nil)
                ngx.say(T.fmt(zl:unlock()))
            }
        }
        location = /cache {
            content_by_lua_block {
                local fmt = T.fmt
                local users = T.users
                local v, err, level = users:get("u1", nil, function()
                    -- the miss's lock is in the lua_shared_dict too
                    local held = 0
                    for _, k in ipairs(ngx.shared.cache_shm:get_keys(0)) do
                        if k:find("u1", 1, true) then held = held + 1 end
                    end
                    return "user 1, lock keys seen: " .. held
                end)
                ngx.say(fmt(v, err, level))
                ngx.say("dict is ngx.shared.cache_shm: ",
                        users.dict == ngx.shared.cache_shm)
                ngx.say("lock_dict: ", users.lock_dict)
                ngx.say("values in it: ",
                        #ngx.shared.cache_shm:get_keys(0) > 0)
            }
        }
        location = /sem {
            content_by_lua_block {
                local fmt = T.fmt
                ngx.say(fmt(T.semaphore:new("x")))
                ngx.say(fmt(T.semaphore:new(ngx.shared.x)))
                ngx.say(fmt(T.semaphore:new("nowhere")))
                local s = assert(T.semaphore:new(T.both))
                ngx.say(fmt(s:acquire("k")), " ", fmt(s:release()))
            }
        }
        # a number key is the string every Lua gives it (not the dict's
        # tostring: "1e+15" and "-0" under LuaJIT), inspect's included
        location = /number {
            content_by_lua_block {
                local fmt = T.fmt
                local d = ngx.shared.x
                local lock = assert(resty_lock:new("x"))
                ngx.say(fmt(lock:lock(1e15)))
                ngx.say("1000000000000000: ", d:get("1000000000000000") ~= nil,
                        ", 1e+15: ", d:get(1e15) ~= nil)
                ngx.say("inspect: ", resty_lock.inspect("x", 1e15).pid
                                     == ngx.worker.pid())
                ngx.say(fmt(lock:unlock()))
                ngx.say(fmt(lock:lock(-0.0)))
                ngx.say("0: ", d:get("0") ~= nil, ", -0: ", d:get("-0") ~= nil)
                ngx.say(fmt(lock:unlock()))
            }
        }
        location = /unknown {
            content_by_lua_block {
                ngx.say(T.fmt(resty_lock:new("nowhere")))
            }
        }
        # a stale object (its lock expired, the key taken by another
        # object) neither releases nor extends the new holder's lock, by
        # unlock, expire or the GC; through nginx's functions (direct)
        location = /stale {
            content_by_lua_block {
                local fmt = T.fmt
                local d = ngx.shared.x
                ngx.say("direct: ", require("resty.shmlock.lock.ngx_shared")
                                        .direct())
                local holder = assert(resty_lock:new("x"))
                for _, key in ipairs({ "s", string.rep("k", 100) }) do
                    for _, how in ipairs({ "unlock", "expire", "gc" }) do
                        local stale = assert(resty_lock:new("x",
                                                     { exptime = 0.001 }))
                        assert(stale:lock(key) == 0)
                        ngx.sleep(0.01)
                        ngx.update_time()
                        assert(holder:lock(key) == 0)
                        local v, f = d:get(key)
                        if how == "gc" then
                            stale = nil -- luacheck: ignore 311
                            collectgarbage()
                            collectgarbage()
                            ngx.say("gc")
                        else
                            ngx.say(how, ": ", fmt(stale[how](stale)))
                        end
                        local v2, f2 = d:get(key)
                        ngx.say("untouched: ", v2 == v and f2 == f,
                                " owned: ", holder:owned())
                        ngx.say(fmt(holder:unlock()), " free: ",
                                d:get(key) == nil)
                    end
                end
            }
        }
        location = /inspect {
            content_by_lua_block {
                local fmt = T.fmt
                ngx.say(fmt(resty_lock.inspect("x", "i")))
                local lock = assert(resty_lock:new("x", { exptime = 10 }))
                assert(lock:lock("i") == 0)
                local info = assert(resty_lock.inspect("x", "i"))
                ngx.say(fmt(info.pid == ngx.worker.pid(), info.alive,
                            info.ttl > 9 and info.ttl <= 10, info.marked,
                            info.waiters))
                lock:unlock()
                ngx.shared.x:set("plain", "v")
                ngx.say(fmt(resty_lock.inspect("x", "plain")))
                ngx.say(fmt(resty_lock.inspect("nowhere", "i")))
            }
        }
EOF
);
$t->start;

$t->block("lock/expire/unlock on an ngx.shared dict, returns as resty.lock",
    request => "GET /api",
    body    => <<'EOF');
nil nil key
0
in ngx.shared.x: true
nil locked
true
ttl ~10: true
true
ttl ~30: true
1
in ngx.shared.x: false
nil unlocked
nil unlocked
EOF

$t->block("a held key: 'timeout' after opts.timeout, and with timeout = 0",
    request => "GET /timeout",
    body    => "nil timeout\nnil timeout\n");

$t->block("a number key on an ngx.shared dict: the string every Lua gives it",
    request => "GET /number",
    body    => <<'EOF');
0
1000000000000000: true, 1e+15: false
inspect: true
1
0
0: true, -0: false
1
EOF

$t->block("a lock object collected while holding releases its key",
    request => "GET /gc",
    body    => "0\n");

subtest "the ngx.shared lock is shared by the workers; waiters get it after release" => sub {
    my $holder = spawn(sub { $t->get("/hold?key=w") });
    my %seen;
    my $deadline = time + 30;
    while (time < $deadline && keys %seen < 2) {
        my $r = $t->get("/try?key=w");
        my ($res, $pid) = $r->{body} =~ /^(.*) (\d+)\n\z/ or next;
        if ($res eq "nil timeout") { $seen{$pid}++ }
        else { sleep 0.01 }
    }
    is(scalar keys %seen, 2, "both workers see the key held");
    # the holder lets go only once the waiter found the key held
    my $waiter = spawn(sub { $t->get("/wait?key=w") });
    $deadline = time + 30;
    sleep 0.01 until $t->get("/flag?name=waiting-w")->{body} eq "true\n"
                     || time > $deadline;
    is($t->get("/release?key=w")->{body}, "true\n", "release");
    is($waiter->join(40)->{body}, "true nil\n",
       "a waiter gets the key after the holder");
    like($holder->join(40)->{body}, qr/^held 1 \d+\n\z/, "holder unlocked");
    $t->check_log("shared", nested => 1);
};

$t->block("a name that is both our zone and a lua_shared_dict is the dict; "
          . "the zone object reaches the zone",
    request => "GET /both",
    body    => "ngx.shared\n0\nin our zone: false\nin ngx.shared.both: true\n1\n"
             . "zone\n0\nin our zone: true\n1\n",
    # the library's own line: "shmlock: ..." right after nginx's pid and
    # connection, not "[lua] log.lua:NN: event(): shmlock: ..."
    error_log => [ qr/\[info\] \d+#\d+: (?:\*\d+ )?shmlock: lock name "both" uses the lua_shared_dict "both"/ ],
    no_error_log => [ "log.lua:" ]);

$t->block("a name that is neither: nil, 'dictionary not found', the zone, "
          . "directory and lua_shared_dict tried",
    request => "GET /unknown",
    body    => "nil dictionary not found: no zone \"nowhere\" in "
             . $t->zone_dir . ", and no lua_shared_dict \"nowhere\"\n");

$t->block("the cache's opts.dict named as a lua_shared_dict: its values and "
          . "its locks in that dict",
    request => "GET /cache",
    body    => "user 1, lock keys seen: 1 nil 3\n"
             . "dict is ngx.shared.cache_shm: true\n"
             . "lock_dict: cache_shm\n"
             . "values in it: true\n");

subtest "the cache's choice is logged at info (by init_by_lua)" => sub {
    open my $fh, '<', $t->{error_log} or die "error.log: $!";
    my @lines = grep { /shmlock: cache "users": opts.dict "cache_shm" is the lua_shared_dict "cache_shm"/ } <$fh>;
    ok(@lines >= 1, "logged") or diag("no such line");
    like($lines[0] // '', qr/\[info\]/, "at info");
};

ok(!-e $t->zone_dir . "/shmlock.cache_shm",
   "no zone file named after the lua_shared_dict (before: made by the cache)");

my $sem_refusal = qq{the semaphore needs a zone: "x" is a lua_shared_dict, }
    . qq{and inside nginx a lua_shared_dict name is that dict: give the zone }
    . qq{another name, or pass the zone object (shdict.open("x"))};
$t->block("the semaphore refuses a lua_shared_dict, naming it and what to do; "
          . "an unknown name in the lock's words",
    request => "GET /sem",
    body    => "nil $sem_refusal\nnil $sem_refusal\n"
             . "nil dictionary not found: no zone \"nowhere\" in "
             . $t->zone_dir . "\n0 1\n");

ok(!-e $t->zone_dir . "/shmlock.x",
   "the fallback did not create a zone file named x");
ok(!-e $t->zone_dir . "/shmlock.nowhere",
   "an unknown name did not create a zone file");

my $stale = <<'EOF';
unlock: 1 expired
untouched: true owned: true
1 free: true
expire: nil expired
untouched: true owned: true
1 free: true
gc
untouched: true owned: true
1 free: true
EOF
$t->block("a stale object leaves the new holder's lock alone (unlock, "
          . "expire, the GC), on nginx's functions",
    request => "GET /stale",
    body    => "direct: true\n" . $stale . $stale);

$t->block("inspect() by name on an ngx.shared dict: holder, ttl, no waiter count",
    request => "GET /inspect",
    body    => <<"EOF");
nil not locked
true true true nil nil
nil not a lock
nil dictionary not found: no zone "nowhere" in ${\ $t->zone_dir}, and no lua_shared_dict "nowhere"
EOF

$t->stop;
done_testing;
