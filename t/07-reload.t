# `nginx -s reload` (and kill -HUP of the master) keeps zones and held
# locks: keys written before are read after by the new workers, a lock held
# by a LuaJIT process across the reload is still held (and its owner can
# still unlock it), a lock held by an old worker's in-flight request stays
# held until that request releases it.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use ShmTest qw(spawn give_up);

my $t = ShmTest->new(
    workers => 2,
    # opened again by the new master-side VM on every reload
    zone => 'reload',
    zone_opts => '{ size = "1m" }',
    http_config => <<'EOF',
    init_worker_by_lua_block {
        local shdict = require "resty.shmlock.shdict"
        T.attached = assert(shdict.open("reload-w"))
    }
EOF
    config => <<'EOF',
        location = /set {
            content_by_lua_block {
                local z = T[ngx.var.arg_zone or "zone"]
                ngx.say(tostring(z:set(ngx.var.arg_key, ngx.var.arg_value)))
            }
        }
        location = /get {
            content_by_lua_block {
                local z = T[ngx.var.arg_zone or "zone"]
                ngx.say(tostring(z:get(ngx.var.arg_key)))
            }
        }
        location = /try {
            content_by_lua_block {
                local lock = assert(resty_lock:new("reload", { timeout = 0 }))
                local elapsed, err = lock:lock(ngx.var.arg_key)
                if elapsed then lock:unlock() end
                ngx.say(tostring(elapsed), " ", tostring(err))
            }
        }
        # keeps a lock in the worker's Lua state, past the request
        location = /keep {
            content_by_lua_block {
                local lock = assert(resty_lock:new("reload", { exptime = 60 }))
                T.kept = T.kept or {}
                local elapsed, err = lock:lock(ngx.var.arg_key)
                if elapsed then T.kept[#T.kept + 1] = lock end
                ngx.say(tostring(elapsed), " ", tostring(err))
            }
        }
        location = /hold {
            content_by_lua_block {
                local lock = assert(resty_lock:new("reload", { exptime = 30 }))
                assert(lock:lock(ngx.var.arg_key) == 0)
                ngx.sleep(tonumber(ngx.var.arg_secs))
                ngx.say("held ", tostring(lock:unlock()))
            }
        }
EOF
);
$t->start;

$t->block("keys written before the reload",
    request => [ "GET /set?key=before&value=one",
                 "GET /set?zone=attached&key=before-w&value=two" ],
    body    => "true\n");

my $holder = $t->luajit_bg(ShmTest::lua_prelude() . <<'EOF');
local resty_lock = require "resty.shmlock"
local lock = assert(resty_lock:new("reload", { exptime = 60 }))
print("lock: " .. tostring(lock:lock("ext")))
wait_flag("release", 30)
print("unlock: " .. tostring(lock:unlock()))
EOF
ok(defined $holder->wait_for(qr/^lock: 0$/m), "LuaJIT holds 'ext'")
    or give_up("LuaJIT holder failed");

$t->block("an old worker keeps a lock in its Lua state",
    request => "GET /keep?key=kept",
    body    => "0 nil\n");

# an in-flight request on an old worker holds 'inflight' across the reload
my $inflight = spawn(sub { $t->get("/hold?key=inflight&secs=2") });
my $deadline = time + 30;
while (time < $deadline) {
    last if $t->get("/try?key=inflight")->{body} eq "nil timeout\n";
    sleep 0.01;
}

my @old = $t->worker_pids;
my @new = $t->reload(wait_old => 0);
ok(!grep({ my $n = $_; grep { $_ == $n } @old } @new),
   "nginx -s reload started new workers (@new)");

$t->block("the new workers see the in-flight request's lock held",
    request => [ ("GET /try?key=inflight") x 4 ],
    body    => "nil timeout\n");

is($inflight->join(20)->{body}, "held 1\n",
   "the old worker's request unlocked after the reload");

$t->block("then the new workers can take it",
    request => [ ("GET /try?key=inflight") x 4 ],
    body    => "0 nil\n");

# wait for the old workers to finish before checking what they left
$deadline = time + 30;
while (time < $deadline) {
    my %new = map { $_ => 1 } @new;
    last unless grep { !$new{$_} } $t->worker_pids;
    sleep 0.02;
}

$t->block("the lock kept by an exited old worker is free (exptime 60)",
    request  => [ ("GET /try?key=kept") x 4 ],
    body     => "0 nil\n",
    no_error_log => [ "exited on signal" ]);

$t->block("keys written before the reload are read after it",
    request => [ ("GET /get?key=before") x 4 ],
    body    => "one\n");

$t->block("... in the zone attached in init_worker_by_lua too",
    request => [ ("GET /get?zone=attached&key=before-w") x 4 ],
    body    => "two\n");

$t->block("the LuaJIT process's lock is still held after the reload",
    request => [ ("GET /try?key=ext") x 4 ],
    body    => "nil timeout\n");

subtest "kill -HUP of the master: zones and locks survive again" => sub {
    my %before = map { $_ => 1 } $t->worker_pids;
    ok(kill('HUP', $t->pid), "HUP sent to the master");
    my @now;
    my $deadline = time + 30;
    while (time < $deadline) {
        @now = $t->worker_pids;
        last if @now == 2 && !grep { $before{$_} } @now;
        sleep 0.02;
    }
    ok(@now == 2 && !grep({ $before{$_} } @now), "new workers (@now)");
    is($t->get("/get?key=before")->{body}, "one\n", "key still there");
    is($t->get("/try?key=ext")->{body}, "nil timeout\n", "lock still held");
    $t->check_log("HUP", nested => 1);
};

subtest "the LuaJIT owner unlocks after the reloads, nginx takes the key" => sub {
    $t->set_flag("release");
    my ($rc, $out) = $holder->finish(10);
    is($out, "lock: 0\nunlock: 1\n", "LuaJIT unlock returned 1");
    is($t->get("/try?key=ext")->{body}, "0 nil\n", "nginx locks 'ext'");
    $t->check_log("release", nested => 1);
};

subtest "a LuaJIT process reads keys the new workers wrote" => sub {
    is($t->get("/set?key=after&value=three")->{body}, "true\n", "set");
    my ($rc, $out) = $t->luajit(<<'EOF');
local shdict = require "resty.shmlock.shdict"
local z = assert(shdict.open("reload"))
print(z:get("before"), z:get("after"))
EOF
    is($out, "one\tthree\n", "LuaJIT sees both keys");
};

$t->stop;
done_testing;
