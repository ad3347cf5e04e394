# opts.blocking_timeout: where the phase cannot yield (init_worker_by_lua,
# log_by_lua, balancer_by_lua), a lock with blocking_timeout > 0 waits for
# a held key by blocking the worker, up to that long: it gets a key that a
# LuaJIT process releases meanwhile (woken by the release), answers
# "timeout" after the bound for a key held longer, and without the option
# still answers "cannot wait in <phase> phase" at once.  A blocking wait
# for a key this very worker holds (a lock behind its own shared hold,
# alone or beside a LuaJIT reader; a shared hold behind its own lock; a
# permit behind its own) could never end: refused at once, "held by this
# worker".
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use ShmTest qw(give_up);

my $t = ShmTest->new(
    workers => 2,
    init_by_lua => <<'EOF',
        local shdict = require "resty.shmlock.shdict"
        T = { zone = assert(shdict.open("blocking")) }

        -- "<elapsed or nil> <err> <seconds the call took>"
        function T.try(key, blocking_timeout)
            local lock = assert(resty_lock:new("blocking", {
                timeout = 30, blocking_timeout = blocking_timeout }))
            ngx.update_time()
            local t0 = ngx.now()
            local elapsed, err = lock:lock(key)
            ngx.update_time()
            local took = ngx.now() - t0
            if elapsed then
                assert(lock:unlock() == 1)
                elapsed = string.format("%.3f", elapsed)
            end
            return string.format("%s %s %.3f", tostring(elapsed),
                                 tostring(err), took)
        end

        -- the three cases of a phase, stored under "<tag>-<case>"
        function T.cases(tag, id)
            T.zone:set(tag .. "-acquire" .. id, T.try("short-" .. tag, 3))
            T.zone:set(tag .. "-timeout" .. id, T.try("long", 0.3))
            T.zone:set(tag .. "-default" .. id, T.try("long", nil))
        end

        -- A hold of this very worker on key (how: "shared", "lock" or
        -- "permit"), then a blocking wait for it by another object (what:
        -- "lock", "shared" or "permit"), blocking_timeout 30 s: such a
        -- wait could never end (nothing else runs in the worker while it
        -- blocks).  "<elapsed> <err> <seconds the call took>", stored
        -- under "own-<key>".
        local semaphore = require "resty.shmlock.semaphore"
        local OPTS = { timeout = 30, blocking_timeout = 30, exptime = 60 }
        local function take(how, key)
            if how == "permit" then
                local s = assert(semaphore:new("blocking", OPTS))
                return s, s:acquire(key)
            end
            local l = assert(resty_lock:new("blocking", OPTS))
            if how == "shared" then
                return l, l:lock_shared(key)
            end
            return l, l:lock(key)
        end
        function T.own(how, what, key)
            local holder, got = take(how, key)
            assert(got == 0, "this worker's hold")
            ngx.update_time()
            local t0 = ngx.now()
            local waiter, elapsed, err = take(what, key)
            ngx.update_time()
            local took = ngx.now() - t0
            if elapsed then
                (waiter.unlock or waiter.release)(waiter)
            end
            assert((holder.unlock or holder.release)(holder) == 1)
            T.zone:set("own-" .. key, string.format("%s %s %.3f",
                       tostring(elapsed), tostring(err), took))
        end
EOF
    http_config => <<'EOF',
    init_worker_by_lua_block {
        T.cases("init_worker", ngx.worker.id())
    }
    upstream backend {
        server 0.0.0.1;
        balancer_by_lua_block {
            T.cases("balancer", "")
            local balancer = require "ngx.balancer"
            assert(balancer.set_current_peer("127.0.0.1", {{PORT}}))
        }
    }
EOF
    config => <<'EOF',
        location = /log {
            content_by_lua_block { ngx.say("body") }
            log_by_lua_block { T.cases("log", "") }
        }
        location = /balancer {
            proxy_pass http://backend/backend;
        }
        location = /backend {
            return 200 "backend\n";
        }
        location = /own {
            content_by_lua_block { ngx.say("body") }
            log_by_lua_block {
                T.own(ngx.var.arg_how, ngx.var.arg_what, ngx.var.arg_key)
            }
        }
        location = /get {
            content_by_lua_block {
                ngx.say(tostring(T.zone:get(ngx.var.arg_key)))
            }
        }
EOF
);

# A LuaJIT process holds "long" for the whole file; others hold
# "short-<phase>" for 0.5 s.  ($how: "lock_shared" for a shared hold.)
sub holder {
    my ($key, $ms, $how) = @_;
    $how //= "lock";
    my $p = $t->luajit_bg(ShmTest::lua_prelude() . <<"EOF");
local shdict = require "resty.shmlock.shdict"
assert(shdict.open("blocking"))
local resty_lock = require "resty.shmlock"
local lock = assert(resty_lock:new("blocking", { exptime = 120 }))
print("lock: " .. tostring(lock:$how("$key")))
if $ms > 0 then
    sleep_ms($ms)
else
    wait_flag("release", 100)
end
print("unlock: " .. tostring(lock:unlock()))
EOF
    defined $p->wait_for(qr/^lock: 0$/m)
        or give_up("the LuaJIT holder could not take $key");
    return $p;
}

# the result of a case, once written (log_by_lua runs after the response)
sub result {
    my ($key) = @_;
    my $deadline = time + 30;
    while (time < $deadline) {
        my $got = $t->get("/get?key=$key")->{body};
        return $got if $got ne "nil\n";
        sleep 0.05;
    }
    return "nothing stored under $key\n";
}

# the three results of a phase: acquired within its bound, timed out at
# 0.3 s, refused at once.  The ceilings (10 s) are not margins: a wait that
# went by the lock's timeout instead (30 s) still exceeds them, and a
# loaded machine does not.
sub check {
    my ($tag, $id) = @_;
    my $acq = result("$tag-acquire$id");
    like($acq, qr/^(\d\.\d+) nil (\d\.\d+)\n\z/,
         "$tag: the released key is acquired");
    my ($elapsed, $took) = $acq =~ /^(\S+) nil (\S+)/;
    if (defined $elapsed) {
        cmp_ok($elapsed, '>', 0.05, "$tag: it waited ($elapsed s)");
        cmp_ok($took, '<', 10, "$tag: within the bound (3 s), not the timeout");
    }
    my $to = result("$tag-timeout$id");
    like($to, qr/^nil timeout (\d\.\d+)\n\z/, "$tag: held longer: timeout");
    my ($t2) = $to =~ /^nil timeout (\S+)/;
    if (defined $t2) {
        cmp_ok($t2, '>=', 0.28, "$tag: after the bound (0.3 s): $t2 s");
        cmp_ok($t2, '<', 10, "$tag: not at the timeout: $t2 s");
    }
    my $def = result("$tag-default$id");
    like($def, qr/^nil cannot wait in $tag phase \d+\.\d+\n\z/,
         "$tag: blocking_timeout 0 refuses");
    my ($t3) = $def =~ /(\d+\.\d+)\n\z/;
    cmp_ok($t3 // 99, '<', 10, "$tag: ... at once, not at the timeout");
}

my $long = holder("long", 0);
my $short = holder("short-init_worker", 500);

$t->start;

subtest "init_worker_by_lua" => sub {
    check("init_worker", $_) for 0, 1;
    my ($rc, $out) = $short->finish(10);
    is($out, "lock: 0\nunlock: 1\n", "the LuaJIT holder released it");
    $t->check_log("init_worker", nested => 1);
};

subtest "log_by_lua" => sub {
    my $p = holder("short-log", 500);
    my $r = $t->get("/log");
    is($r->{body}, "body\n", "request answered");
    check("log", "");
    $p->finish(10);
    $t->check_log("log_by_lua", nested => 1);
};

subtest "balancer_by_lua" => sub {
    my $p = holder("short-balancer", 500);
    my $r = $t->get("/balancer");
    is($r->{status}, 200, "proxied");
    is($r->{body}, "backend\n", "the backend answered");
    check("balancer", "");
    $p->finish(10);
    $t->check_log("balancer_by_lua", nested => 1);
};

# A blocking wait for a key this very worker holds could never end: it
# is refused at once, whatever the two kinds of hold, with the cause.
# (blocking_timeout is 30 s: "at once" is the answer's words and a call
# far shorter than that, no timer margin.)
# (a LuaJIT process holds "mixed" shared too, until the end)
my $mixed = holder("mixed", 0, "lock_shared");
subtest "log_by_lua: a blocking wait for this worker's own hold is refused "
        . "at once, for every kind" => sub {
    for my $case ([ "shared", "lock", "sl" ], [ "lock", "shared", "ls" ],
                  [ "shared", "lock", "mixed" ],
                  [ "permit", "permit", "pp" ]) {
        my ($how, $what, $key) = @$case;
        my $r = $t->get("/own?how=$how&what=$what&key=$key");
        is($r->{body}, "body\n", "$key: request answered");
        my $got = result("own-$key");
        like($got, qr/^nil cannot wait in log phase: held by this worker (\d+\.\d+)\n\z/,
             "$key: a $how hold of this worker, then a blocking $what: "
             . "refused");
        my ($took) = $got =~ / (\d+\.\d+)\n\z/;
        cmp_ok($took // 99, '<', 10, "$key: at once, not after the 30 s")
            if defined $took;
    }
    $t->check_log("own holds", nested => 1);
};

$t->set_flag("release");
my ($rc, $out) = $long->finish(10);
is($out, "lock: 0\nunlock: 1\n", "the long holder released its key");
($rc, $out) = $mixed->finish(10);
is($out, "lock: 0\nunlock: 1\n", "the shared holder released its key");

$t->stop;
done_testing;
