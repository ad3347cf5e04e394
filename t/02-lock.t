# resty.shmlock in the phases that may yield (content, access, rewrite,
# ngx.timer.at): it waits with ngx.sleep, so while one request waits for a
# lock, other requests on the SAME worker (worker_processes 1) are served.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use ShmTest qw(spawn);

my $t = ShmTest->new(
    workers => 1,
    zone => 'locks',
    init_by_lua => <<'EOF',
        -- locks `key` (marking the waiter first), unlocks; "elapsed err"
        function T.take(key, opts)
            T.zone:set("waiting-" .. key, true)
            local lock = assert(resty_lock:new("locks", opts))
            local elapsed, err = lock:lock(key)
            local res = tostring(elapsed) .. " " .. tostring(err)
            if elapsed then
                local ok, uerr = lock:unlock()
                if ok ~= 1 then
                    res = res .. " unlock: " .. tostring(ok) .. " "
                          .. tostring(uerr)
                end
            end
            return res
        end
EOF
    config => <<'EOF',
        # the lock takes nginx's cached clock (ngx_current_msec) for the
        # expiry: it must be the zone's clock, and the lock's TTL right
        location = /clock {
            content_by_lua_block {
                local C = require "resty.shmlock.lib"
                local cached = tonumber(
                    require("resty.shmlock.internal.clock").cached_ms())
                local lag = tonumber(C.shmlock_now_ms()) - cached
                local lock = assert(resty_lock:new("locks", { exptime = 2 }))
                assert(lock:lock("clock-key"))
                local ttl = resty_lock.inspect(T.zone, "clock-key").ttl
                lock:unlock()
                ngx.say(cached > 0, " ", lag >= 0 and lag < 1000, " ",
                        ttl > 1.5 and ttl <= 2)
            }
        }

        # holds `key` inside this request until /release?key= (30 s at
        # most)
        location = /hold {
            content_by_lua_block {
                local key = ngx.var.arg_key
                local lock = assert(resty_lock:new("locks", { exptime = 60 }))
                local elapsed, err = lock:lock(key)
                if not elapsed then
                    return ngx.say("hold failed: ", err)
                end
                for _ = 1, 6000 do
                    if T.zone:get("release-" .. key) then
                        break
                    end
                    ngx.sleep(0.005)
                end
                ngx.say("held ", tostring(lock:unlock()))
            }
        }
        location = /release {
            content_by_lua_block {
                ngx.say(tostring((T.zone:set("release-" .. ngx.var.arg_key,
                                             true))))
            }
        }
        location = /held {
            content_by_lua_block {
                local lock = assert(resty_lock:new("locks", { timeout = 0 }))
                local elapsed, err = lock:lock(ngx.var.arg_key)
                if elapsed then
                    lock:unlock()
                    return ngx.say("free")
                end
                ngx.say(err == "timeout" and "held" or err)
            }
        }
        location = /waiting {
            content_by_lua_block {
                ngx.say(tostring(T.zone:get("waiting-" .. ngx.var.arg_key)))
            }
        }
        # control: blocks the worker (as a lock wait must never do) until
        # the file ?until= exists (30 s at most), having made ?started=
        location = /block {
            content_by_lua_block {
                local ffi = require "ffi"
                pcall(ffi.cdef, "int usleep(unsigned int usec);")
                assert(io.open(ngx.var.arg_started, "w")):close()
                for _ = 1, 3000 do
                    local f = io.open(ngx.var.arg_until)
                    if f then
                        f:close()
                        break
                    end
                    ffi.C.usleep(10000)
                end
                ngx.say("blocked")
            }
        }
        location = /fast {
            content_by_lua_block { ngx.say("fast") }
        }

        location = /content {
            content_by_lua_block { ngx.say(T.take(ngx.var.arg_key)) }
        }
        location = /access {
            access_by_lua_block { ngx.ctx.res = T.take(ngx.var.arg_key) }
            content_by_lua_block { ngx.say(ngx.ctx.res) }
        }
        location = /rewrite {
            rewrite_by_lua_block { ngx.ctx.res = T.take(ngx.var.arg_key) }
            content_by_lua_block { ngx.say(ngx.ctx.res) }
        }
        location = /timer {
            content_by_lua_block {
                local function run(premature, key)
                    T.zone:set("timer-" .. key, T.take(key))
                end
                assert(ngx.timer.at(0, run, ngx.var.arg_key))
                ngx.say("started")
            }
        }
        location = /result {
            content_by_lua_block {
                ngx.say(T.zone:get("timer-" .. ngx.var.arg_key) or "pending")
            }
        }

        location = /timeout {
            content_by_lua_block {
                local key = ngx.var.arg_key
                local holder = assert(resty_lock:new("locks"))
                assert(holder:lock(key) == 0)
                local waiter = assert(resty_lock:new("locks",
                                                     { timeout = 0.05 }))
                local start = ngx.now()
                local elapsed, err = waiter:lock(key)
                ngx.update_time()
                ngx.say(tostring(elapsed), " ", tostring(err), " ",
                        ngx.now() - start >= 0.04)
                holder:unlock()
            }
        }
        # a step or max_step below 1 ms: ngx.sleep would only yield and
        # the waiter spin; it must sleep >= 1 ms, so use little CPU
        location = /tiny-step {
            content_by_lua_block {
                local ffi = require "ffi"
                pcall(ffi.cdef, [[
                    struct t_rusage { long ut_s, ut_us, st_s, st_us;
                                      long rest[14]; };
                    int getrusage(int who, struct t_rusage *usage);
                ]])
                local ru = ffi.new("struct t_rusage")
                local function cpu()
                    assert(ffi.C.getrusage(0, ru) == 0)
                    return tonumber(ru.ut_s + ru.st_s)
                           + tonumber(ru.ut_us + ru.st_us) / 1e6
                end
                local key = ngx.var.arg_key
                local holder = assert(resty_lock:new("locks"))
                assert(holder:lock(key) == 0)
                local opts = { timeout = 0.3, max_step = 1e-7 }
                if ngx.var.arg_step then
                    opts.step = 1e-7
                end
                local waiter = assert(resty_lock:new("locks", opts))
                local cpu0 = cpu()
                local elapsed, err = waiter:lock(key)
                local used = cpu() - cpu0
                ngx.say(tostring(elapsed), " ", tostring(err), " ",
                        used < 0.1 or used)
                holder:unlock()
            }
        }
        location = /api {
            content_by_lua_block {
                local out = {}
                local function say(...)
                    local n, t = select("#", ...), { ... }
                    for i = 1, n do t[i] = tostring(t[i]) end
                    out[#out + 1] = table.concat(t, " ", 1, n)
                end
                say(resty_lock:new("no-such-zone"))
                local lock = assert(resty_lock:new("locks"))
                say(lock:lock(nil))
                say(lock:lock("api"))
                say(lock:lock("api2"))
                say(lock:expire(10))
                say(lock:expire())
                say(lock:unlock())
                say(lock:unlock())
                say(lock:expire())
                -- a dict object works as well as a name
                local lock2 = assert(resty_lock.new(T.zone))
                say(lock2:lock("api"))
                say(lock2:unlock())
                ngx.say(table.concat(out, "\n"))
            }
        }
EOF
);
$t->start;

# polls GET $uri until the body is $want (bounded); true if it was
sub poll {
    my ($uri, $want, $secs) = @_;
    my $deadline = time + ($secs // 5);
    while (time < $deadline) {
        return 1 if $t->get($uri)->{body} eq $want;
        sleep 0.01;
    }
    return 0;
}

$t->block("lock/unlock/expire returns and errors as resty.lock",
    request => "GET /api",
    body    => join("\n",
        "nil dictionary not found: no zone \"no-such-zone\" in "
          . $t->zone_dir . ", and no lua_shared_dict \"no-such-zone\"",
        "nil nil key",
        "0",
        "nil locked",
        "true",
        "true",
        "1",
        "nil unlocked",
        "nil unlocked",
        "0",
        "1") . "\n");

$t->block("inside nginx a lock's expiry comes from nginx's cached monotonic clock",
    request => "GET /clock",
    body    => "true true true\n");

$t->block("a waiter with max_step 1e-7 sleeps >= 1 ms steps, using little CPU",
    request => "GET /tiny-step?key=ts1",
    body    => "nil timeout true\n");

$t->block("... with step and max_step 1e-7 too",
    request => "GET /tiny-step?key=ts2&step=1",
    body    => "nil timeout true\n");

$t->block("a held key gives 'timeout' after opts.timeout",
    request => "GET /timeout?key=to",
    body    => "nil timeout true\n");

# One waiter in $phase behind a request that holds the key until told: a
# request to the same (only) worker is answered while the waiter waits,
# and only then is the holder told to let go.  A wait that blocked the
# worker would keep that request from being answered at all (its client's
# timeout fails the test), however loaded the machine: no timer margin
# decides.  (resty.lock's steps themselves: t/14-lock-elapsed.t.)
for my $phase (qw(content access rewrite timer)) {
    my $key = "k-$phase";
    subtest "$phase: waits with ngx.sleep, the worker keeps serving" => sub {
        my $holder = spawn(sub { $t->get("/hold?key=$key") });
        ok(poll("/held?key=$key", "held\n", 30), "the key is held") or return;

        my $waiter;
        if ($phase eq 'timer') {
            is($t->get("/timer?key=$key")->{body}, "started\n",
               "timer started");
        } else {
            $waiter = spawn(sub { $t->get("/$phase?key=$key") });
        }
        # (the waiter marks the key just before its lock(), without
        # yielding: this one worker answers /waiting once it waits)
        ok(poll("/waiting?key=$key", "true\n", 30), "the waiter is waiting")
            or return;

        my $fast = $t->get("/fast");
        is($fast->{body}, "fast\n", "the other request is served");
        is($t->get("/held?key=$key")->{body}, "held\n",
           "... while the key is still held: the waiter waits");
        is($t->get("/release?key=$key")->{body}, "true\n", "release");

        my $body;
        if ($phase eq 'timer') {
            my $deadline = time + 30;
            while (time < $deadline) {
                $body = $t->get("/result?key=$key")->{body};
                last if $body ne "pending\n";
                sleep 0.01;
            }
        } else {
            $body = $waiter->join(40)->{body};
        }
        like($body, qr/^(\d+(?:\.\d+)?) nil\n\z/, "the waiter got the lock");
        my ($elapsed) = $body =~ /^([\d.]+)/;
        cmp_ok($elapsed // 0, '>', 0,
               "after waiting for the holder (elapsed " . ($elapsed // '?')
               . ")");
        is($holder->join(40)->{body}, "held 1\n", "the holder released");
        $t->check_log($phase, nested => 1);
    };
}

# Control: the check above would see a blocked event loop.  While the
# worker is blocked (until a file exists), another request gets no answer;
# once unblocked, it does.  (A loaded machine only makes an answer later.)
subtest "control: a blocked worker answers the other request only once unblocked" => sub {
    my ($started, $until) = map { $t->prefix . "/block-$_" } qw(started until);
    my $blocker = spawn(sub { $t->get("/block?started=$started&until=$until") });
    my $deadline = time + 30;
    sleep 0.01 until -e $started || time > $deadline;
    ok(-e $started, "the blocker started") or return;
    my $fast = spawn(sub { $t->get("/fast") });
    sleep 0.3;
    ok(!$fast->reap, "no answer while the worker is blocked");
    open my $fh, '>', $until or die "$until: $!";
    close $fh;
    is($fast->join(40)->{body}, "fast\n", "answered once unblocked");
    is($blocker->join(40)->{body}, "blocked\n", "the blocker answered");
    $t->check_log("control", nested => 1);
};

subtest "content: waiting behind a LuaJIT holder, the worker keeps serving" => sub {
    my $key = "k-ext";
    my $p = $t->luajit_bg(ShmTest::lua_prelude() . <<"EOF");
local resty_lock = require "resty.shmlock"
local lock = assert(resty_lock:new("locks", { exptime = 30 }))
print("lock: " .. tostring(lock:lock("$key")))
wait_flag("release", 30)
print("unlock: " .. tostring(lock:unlock()))
EOF
    ok(defined $p->wait_for(qr/^lock: 0$/m), "LuaJIT holds the key")
        or return;
    my $waiter = spawn(sub { $t->get("/content?key=$key") });
    ok(poll("/waiting?key=$key", "true\n", 30), "the waiter is waiting")
        or return;
    # (LuaJIT lets go only after these: a blocked worker would answer
    # none of them)
    my @fast = map { $t->get("/fast") } 1 .. 5;
    is_deeply([ map { $_->{body} } @fast ], [ ("fast\n") x 5 ],
              "other requests are served while the waiter waits");
    sleep 0.5;
    is($t->get("/held?key=$key")->{body}, "held\n", "still held by LuaJIT");
    $t->set_flag("release");
    my $r = $waiter->join(20);
    like($r->{body}, qr/^[\d.]+ nil\n\z/, "the waiter got the lock");
    my ($elapsed) = $r->{body} =~ /^([\d.]+)/;
    cmp_ok($elapsed // 0, '>=', 0.4, "after waiting for the release");
    my ($rc, $out) = $p->finish(10);
    is($out, "lock: 0\nunlock: 1\n", "LuaJIT output");
    $t->check_log("luajit holder", nested => 1);
};

$t->stop;
done_testing;
