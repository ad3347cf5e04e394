# Zones inside nginx: opened in init_by_lua (master) and inherited by every
# worker, attached by name in init_worker_by_lua, and shared with a plain
# LuaJIT process started by the test.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use ShmTest;

my $t = ShmTest->new(
    workers   => 2,
    reuseport => 1,     # the kernel spreads connections over both workers
    init_by_lua => <<'EOF',
        -- in the master: every worker inherits the mapping
        T.inherited = assert(require("resty.shmlock.shdict").open(
            "inherited", { size = "1m" }))
EOF
    http_config => <<'EOF',
    lua_shared_dict ngx_dict 1m;
    init_worker_by_lua_block {
        local shdict = require "resty.shmlock.shdict"
        -- not opened by the master: each worker creates or attaches it
        T.attached = assert(shdict.open("attached", { size = "1m" }))
    }
EOF
    config => <<'EOF',
        # marks the zone with this worker's pid, answers "pid"
        location = /mark {
            content_by_lua_block {
                local z = T[ngx.var.arg_zone]
                local pid = ngx.worker.pid()
                assert(z:set("w-" .. pid, pid))
                ngx.say(pid)
            }
        }
        # answers "pid key1,key2,..." (sorted keys of the zone)
        location = /keys {
            content_by_lua_block {
                local z = T[ngx.var.arg_zone]
                local keys = z:get_keys(0)
                table.sort(keys)
                ngx.say(ngx.worker.pid(), " ", table.concat(keys, ","))
            }
        }
        location = /get {
            content_by_lua_block {
                local v, err = T[ngx.var.arg_zone]:get(ngx.var.arg_key)
                ngx.say(tostring(v), " ", tostring(err))
            }
        }
        location = /set {
            content_by_lua_block {
                local ok, err = T[ngx.var.arg_zone]:set(ngx.var.arg_key,
                                                        ngx.var.arg_value)
                ngx.say(tostring(ok), " ", tostring(err))
            }
        }
        # expiry against nginx's cached time, as ngx.shared.DICT: a value
        # stays until the event loop's next turn updates the time, however
        # long the handler runs (here: past the expiry on the real clock,
        # without yielding); "<ours> <ngx.shared.DICT's>" before and after
        # ngx.update_time()
        location = /cached {
            content_by_lua_block {
                local clock = require "resty.shmlock.internal.clock"
                local z, n = T.attached, ngx.shared.ngx_dict
                ngx.update_time()
                assert(clock.cached_ms() > 0, "no cached clock in nginx")
                assert(z:set("c", 1, 0.05))
                assert(n:set("c", 1, 0.05))
                local past = clock.now_ms() + 100
                while clock.now_ms() < past do end
                ngx.say(tostring(z:get("c")), " ", tostring(n:get("c")))
                ngx.update_time()
                ngx.say(tostring(z:get("c")), " ", tostring(n:get("c")))
            }
        }
        location = /same {
            content_by_lua_block {
                -- a second open of the same name in the worker gives the
                -- zone it already has
                local shdict = require "resty.shmlock.shdict"
                local z = assert(shdict.open("inherited"))
                ngx.say(z == T.inherited, " ", z:get("w-" .. ngx.worker.pid()))
            }
        }
        # lock held by this worker until /unlock (same worker: 1 worker
        # test only) -- here we use it through the zone shared with LuaJIT
        location = /trylock {
            content_by_lua_block {
                local resty_lock = require "resty.shmlock"
                local lock = assert(resty_lock:new("attached", { timeout = 0 }))
                local elapsed, err = lock:lock(ngx.var.arg_key)
                if elapsed then
                    assert(lock:unlock())
                end
                ngx.say(tostring(elapsed), " ", tostring(err))
            }
        }
        location = /hold {
            content_by_lua_block {
                local resty_lock = require "resty.shmlock"
                local lock = assert(resty_lock:new("attached",
                                                   { exptime = 30 }))
                T.held = T.held or {}
                local elapsed, err = lock:lock(ngx.var.arg_key)
                if elapsed then
                    T.held[ngx.var.arg_key] = lock
                end
                ngx.say(tostring(elapsed), " ", tostring(err), " ",
                        ngx.worker.pid())
            }
        }
        location = /release {
            content_by_lua_block {
                local lock = T.held and T.held[ngx.var.arg_key]
                if not lock then
                    return ngx.say("not held here ", ngx.worker.pid())
                end
                T.held[ngx.var.arg_key] = nil
                ngx.say(tostring(lock:unlock()))
            }
        }
EOF
);
$t->start;

# Requests until both workers have answered; returns the distinct pids.
sub both_workers {
    my ($path, $check) = @_;
    my %seen;
    for (1 .. 400) {
        my $res = $t->get($path);
        die "$path: $res->{status} $res->{body}" unless $res->{status} == 200;
        my ($pid) = $res->{body} =~ /^(\d+)/;
        $check->($pid, $res->{body}) if $check;
        $seen{$pid}++;
        last if keys %seen >= 2;
    }
    return sort keys %seen;
}

for my $zone (qw(inherited attached)) {
    my $how = $zone eq 'inherited' ? 'opened in init_by_lua'
                                   : 'attached in init_worker_by_lua';
    subtest "zone $how: every worker writes and sees the others' keys" => sub {
        my @pids = both_workers("/mark?zone=$zone");
        is(scalar @pids, 2, "two different workers served /mark")
            or return;
        my $want = join ',', map { "w-$_" } sort @pids;
        my %answered;
        both_workers("/keys?zone=$zone", sub {
            my ($pid, $body) = @_;
            return if $answered{$pid}++;
            is($body, "$pid $want\n", "worker $pid sees both workers' keys");
        });
        is(scalar keys %answered, 2, "both workers answered /keys");
        $t->check_log("zone $zone", nested => 1);
    };
}

{
    my %seen;
    for (1 .. 200) {
        my $res = $t->get("/same");
        $seen{ $res->{body} }++;
        last if keys %seen >= 2;
    }
    subtest "shdict.open of an opened name in a worker returns the same dict" => sub {
        for my $body (sort keys %seen) {
            like($body, qr/^true \d+\n\z/, "answer: " . substr($body, 0, -1));
        }
        $t->check_log("same", nested => 1);
    };
}

$t->block("get compares expiries with nginx's cached time, as "
          . "ngx.shared.DICT does",
    request => "GET /cached",
    body    => "1 1\nnil nil\n");

$t->block("a key written by nginx can be read back",
    request => "GET /set?zone=attached&key=from-nginx&value=hello",
    body    => "true nil\n");

subtest "a plain LuaJIT process reads nginx's key and writes its own" => sub {
    my ($rc, $out) = $t->luajit(<<'EOF');
local shdict = require "resty.shmlock.shdict"
local z = assert(shdict.open("attached"))
print("nginx wrote: " .. tostring(z:get("from-nginx")))
assert(z:set("from-luajit", "world"))
print("capacity ok: " .. tostring(z:capacity() > 0))
EOF
    is($rc, 0, "luajit exit code");
    is($out, "nginx wrote: hello\ncapacity ok: true\n", "luajit output");
};

$t->block("nginx workers read the key the LuaJIT process wrote",
    request => [ ("GET /get?zone=attached&key=from-luajit") x 4 ],
    body    => "world nil\n");

subtest "a lock taken by a LuaJIT process is seen by nginx, and released" => sub {
    my $p = $t->luajit_bg(ShmTest::lua_prelude() . <<'EOF');
local resty_lock = require "resty.shmlock"
local lock = assert(resty_lock:new("attached", { exptime = 30 }))
print("lock: " .. tostring(assert(lock:lock("ext-key"))))
wait_flag("release-ext", 15)
print("unlock: " .. tostring(lock:unlock()))
EOF
    ok(defined $p->wait_for(qr/^lock: 0$/m), "LuaJIT took the lock")
        or return;
    for (1 .. 4) {
        my $r = $t->get("/trylock?key=ext-key");
        is($r->{body}, "nil timeout\n", "nginx: held by LuaJIT -> timeout");
    }
    $t->set_flag("release-ext");
    my ($rc, $out) = $p->finish(10);
    is($rc, 0, "luajit exit code");
    is($out, "lock: 0\nunlock: 1\n", "luajit output");
    for (1 .. 4) {
        my $r = $t->get("/trylock?key=ext-key");
        is($r->{body}, "0 nil\n", "nginx: released by LuaJIT -> lock() = 0");
    }
    $t->check_log("luajit lock", nested => 1);
};

subtest "a lock held by an nginx worker is seen by a LuaJIT process" => sub {
    my $r = $t->get("/hold?key=ngx-key");
    like($r->{body}, qr/^0 nil (\d+)\n\z/, "nginx took the lock");
    my ($rc, $out) = $t->luajit(<<'EOF');
local resty_lock = require "resty.shmlock"
local lock = assert(resty_lock:new("attached", { timeout = 0 }))
print(lock:lock("ngx-key"))
EOF
    is($rc, 0, "luajit exit code");
    is($out, "nil\ttimeout\n", "LuaJIT: held by nginx -> nil, timeout");

    # release it on the worker that holds it
    my $released;
    for (1 .. 400) {
        my $res = $t->get("/release?key=ngx-key");
        if ($res->{body} eq "1\n") { $released = 1; last }
    }
    ok($released, "the holding worker released the lock");
    ($rc, $out) = $t->luajit(<<'EOF');
local resty_lock = require "resty.shmlock"
local lock = assert(resty_lock:new("attached", { timeout = 0 }))
print(lock:lock("ngx-key"))
print(lock:unlock())
EOF
    is($out, "0\n1\n", "LuaJIT: released by nginx -> lock() = 0");
    $t->check_log("nginx lock", nested => 1);
};

$t->stop;
done_testing;
