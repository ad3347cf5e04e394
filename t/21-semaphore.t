# resty.shmlock.semaphore inside nginx, 2 workers beside plain LuaJIT
# processes (docs/semaphore.md, "Inside nginx"):
#
# * a board: never more than `permits` holders of a key at once across
#   both workers' requests and a LuaJIT process (each holder counts itself
#   in and out of the zone, and any count above the limit is recorded);
# * a worker SIGKILLed while holding gives its permit back at once: a
#   queued waiter of the other worker gets it (its timeout, 20 s, is well
#   below the permit's 60 s lease: no wall-clock bound needed);
# * the phase rules, as the lock's: init_worker, log and header_filter
#   refuse to wait ("cannot wait in <phase> phase"), a timer waits,
#   blocking_timeout blocks (and refuses at once when this very worker
#   holds every permit);
# * waiters that nginx aborts (ngx.thread.kill, a client abort) leak no
#   permit and hold nobody back: the next acquirer gets the permit;
# * nginx -s reload: a permit held by an old worker's in-flight request
#   stays counted until that request releases it; the new workers see the
#   count.
#
# Nothing waits on a clock margin: each step waits for a state (a count, a
# mark, a flag), bounded far from the expected time.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use IO::Socket::INET;
use Time::HiRes qw(time sleep);
use ShmTest qw(spawn parallel give_up);

my $t = ShmTest->new(
    workers => 2,
    zone => 'sem',
    zone_opts => '{ size = "2m" }',
    init_by_lua => <<'EOF',
        T.semaphore = require "resty.shmlock.semaphore"
        T.wait = require "resty.shmlock.lock.wait"
        -- a turn lasts 3 s (renewed by its live waiter at half), not 0.5:
        -- a waiter's poll late by a loaded machine never ends its turn
        -- while a test looks at it; an aborted waiter's turn still lapses
        -- well within the 10 s the test gives the next acquirer
        T.wait.ACCEPT = 3
        T.held = {}

        -- one round on the board: acquire, count in (a count above the
        -- limit is a violation), a short hold, count out, release
        function T.round(key, permits)
            local sem = assert(T.semaphore:new("sem", { permits = permits,
                                                        timeout = 30 }))
            local elapsed, err = sem:acquire(key)
            if not elapsed then
                return nil, err
            end
            local n = T.zone:incr("in-" .. key, 1, 0)
            if n > permits then
                T.zone:incr("bad-" .. key, 1, 0)
            end
            ngx.sleep(0.001)
            T.zone:incr("in-" .. key, -1)
            T.zone:incr("done-" .. key, 1, 0)
            return sem:release()
        end

        -- "<elapsed or nil> <err>" of an acquire that then releases
        function T.try(key, opts)
            local sem = assert(T.semaphore:new("sem", opts))
            local elapsed, err = sem:acquire(key)
            if elapsed then
                assert(sem:release() == 1)
            end
            return T.fmt(elapsed and (elapsed == 0 and 0 or "waited"), err)
        end

        -- waits (5 s at most) until a waiter of this worker marks key
        function T.wait_marked(key)
            for _ = 1, 500 do
                local info = T.semaphore.inspect("sem", key)
                if info and info.marked
                   and info.marked.pid == ngx.worker.pid()
                then
                    return true
                end
                ngx.sleep(0.01)
            end
            return false
        end

        function T.waiter(key)
            return T.semaphore:new("sem", { timeout = 30 }):acquire(key)
        end
EOF
    http_config => <<'EOF',
    init_worker_by_lua_block {
        -- per worker, so that the two workers do not meet
        local key = "iw-" .. ngx.worker.id()
        local a = assert(T.semaphore:new("sem"))
        local b = assert(T.semaphore:new("sem"))
        local c = assert(T.semaphore:new("sem", { blocking_timeout = 2 }))
        local r = { T.fmt(a:acquire(key)), T.fmt(b:acquire(key)),
                    T.fmt(c:acquire(key)) }
        a:release()
        T.zone:set(key, table.concat(r, " | "))
    }
EOF
    config => <<'EOF',
        lua_check_client_abort on;

        location = /board {
            content_by_lua_block {
                local key = ngx.var.arg_key
                local permits = tonumber(ngx.var.arg_permits)
                for _ = 1, tonumber(ngx.var.arg_rounds) do
                    local ok, err = T.round(key, permits)
                    if ok ~= 1 then
                        ngx.say("round failed: ", tostring(err))
                        return
                    end
                end
                ngx.say("ok")
            }
        }
        location = /get {
            content_by_lua_block {
                ngx.say(tostring(T.zone:get(ngx.var.arg_key)))
            }
        }
        location = /set {
            content_by_lua_block {
                T.zone:set(ngx.var.arg_key, true)
                ngx.say("ok")
            }
        }
        location = /count {
            content_by_lua_block {
                local sem = assert(T.semaphore:new("sem"))
                ngx.say(sem:count(ngx.var.arg_key))
            }
        }
        location = /try {
            content_by_lua_block {
                ngx.say(T.try(ngx.var.arg_key, {
                    permits = tonumber(ngx.var.arg_permits) or 1,
                    timeout = tonumber(ngx.var.arg_timeout) or 0 }))
            }
        }
        location = /marked {
            content_by_lua_block {
                local info = T.semaphore.inspect("sem", ngx.var.arg_key)
                ngx.say(info and info.marked and info.marked.pid or "none")
            }
        }
        # this worker keeps a permit of key (60 s lease) past the request
        location = /hold {
            content_by_lua_block {
                local key = ngx.var.arg_key
                if not T.held[key] then
                    local sem = assert(T.semaphore:new("sem", {
                        permits = tonumber(ngx.var.arg_permits),
                        exptime = 60 }))
                    local elapsed, err = sem:acquire(key, 0)
                    if not elapsed then
                        ngx.say("no: ", err)
                        return
                    end
                    T.held[key] = sem
                end
                ngx.say(ngx.worker.pid())
            }
        }
        # a timer on this worker waits for a permit of key; answers the pid
        location = /wait_timer {
            content_by_lua_block {
                local function run(premature, key, permits)
                    local sem = assert(T.semaphore:new("sem", {
                        permits = permits, timeout = 20 }))
                    local elapsed, err = sem:acquire(key)
                    if elapsed then
                        assert(sem:release() == 1)
                    end
                    T.zone:set("result-" .. key, T.fmt(elapsed ~= nil, err))
                end
                T.zone:delete("result-" .. ngx.var.arg_key)
                assert(ngx.timer.at(0, run, ngx.var.arg_key,
                                    tonumber(ngx.var.arg_permits)))
                ngx.say(ngx.worker.pid())
            }
        }
        # the phases that cannot yield, without blocking_timeout
        location = /log_phase {
            content_by_lua_block { ngx.say("ok") }
            log_by_lua_block {
                T.zone:set("log-result", T.try(ngx.var.arg_key,
                                               { timeout = 5 }))
            }
        }
        location = /header_filter {
            content_by_lua_block { ngx.say("ok") }
            header_filter_by_lua_block {
                T.zone:set("hf-result", T.try(ngx.var.arg_key,
                                              { timeout = 5 }))
            }
        }
        # log_by_lua with blocking_timeout: the worker blocks for it
        location = /log_block {
            content_by_lua_block { ngx.say("ok") }
            log_by_lua_block {
                T.zone:set("block-result", T.try(ngx.var.arg_key,
                    { timeout = 20, blocking_timeout = 20 }))
            }
        }
        location = /timer_wait {
            content_by_lua_block {
                T.zone:delete("timer-result")
                assert(ngx.timer.at(0, function(_, key)
                    T.zone:set("timer-result", T.try(key, { timeout = 20 }))
                end, ngx.var.arg_key))
                ngx.say("ok")
            }
        }
        # a queued waiter in a light thread, killed once it has marked the
        # head; the holder (this request) then releases: the permit is
        # free at once, and the worker keeps no waiter
        location = /kill_waiter {
            content_by_lua_block {
                local key = ngx.var.arg_key
                local holder = assert(T.semaphore:new("sem"))
                assert(holder:acquire(key, 0) == 0)
                local th = ngx.thread.spawn(T.waiter, key)
                assert(T.wait_marked(key), "the waiter did not mark")
                assert(ngx.thread.kill(th))
                assert(holder:release() == 1)
                ngx.say(T.try(key, { timeout = 0 }), " ",
                        (T.wait.registry()))
            }
        }
        # a ghost ahead of a live waiter: the live one gets the permit
        location = /ghost_then_live {
            content_by_lua_block {
                local key = ngx.var.arg_key
                local holder = assert(T.semaphore:new("sem"))
                assert(holder:acquire(key, 0) == 0)
                local ghost = ngx.thread.spawn(T.waiter, key)
                assert(T.wait_marked(key), "the first waiter did not mark")
                assert(ngx.thread.kill(ghost))
                local live = ngx.thread.spawn(T.waiter, key)
                for _ = 1, 500 do
                    if T.wait.registry() == 1 then
                        break
                    end
                    ngx.sleep(0.01)
                end
                assert(holder:release() == 1)
                local _, elapsed, err = ngx.thread.wait(live)
                ngx.say(elapsed and "got it" or "no", " ", tostring(err))
            }
        }
        # the waiter in the request's own thread; releases what it got
        location = /wait {
            content_by_lua_block {
                local sem = T.semaphore:new("sem", { timeout = 30 })
                local elapsed, err = sem:acquire(ngx.var.arg_key)
                if elapsed then
                    assert(sem:release() == 1)
                end
                ngx.say(T.fmt(elapsed ~= nil, err))
            }
        }
        # docs/semaphore.md's limit.conn-style recipe: a permit per request
        # taken in access (503 over the limit), released in log
        location = /conn {
            access_by_lua_block {
                local sem = assert(T.semaphore:new("sem", { permits = 2,
                                                            exptime = 60 }))
                local elapsed, err = sem:acquire("conn-client", 0)
                if not elapsed then
                    if err == "timeout" then
                        return ngx.exit(503)
                    end
                    ngx.log(ngx.ERR, "conn limit: ", err)
                    return
                end
                ngx.ctx.conn_permit = sem
            }
            content_by_lua_block {
                for _ = 1, 3000 do
                    if T.zone:get("conn-go") then
                        break
                    end
                    ngx.sleep(0.01)
                end
                ngx.say("served")
            }
            log_by_lua_block {
                local sem = ngx.ctx.conn_permit
                if sem then
                    sem:release()
                end
            }
        }
        # holds a permit until the zone's key release-<key> is set
        location = /hold_until {
            content_by_lua_block {
                local key = ngx.var.arg_key
                local sem = assert(T.semaphore:new("sem", { permits = 2,
                                                            exptime = 60 }))
                assert(sem:acquire(key, 0) == 0)
                for _ = 1, 3000 do
                    if T.zone:get("release-" .. key) then
                        break
                    end
                    ngx.sleep(0.01)
                end
                ngx.say("held ", tostring(sem:release()))
            }
        }
EOF
);
$t->start;

# polls $uri until its body matches $re (10 s at most); returns the body
sub wait_for {
    my ($uri, $re) = @_;
    my $body = '';
    my $deadline = time + 30;
    while (time < $deadline) {
        $body = $t->get($uri)->{body} // '';
        return $body if $body =~ $re;
        sleep 0.02;
    }
    return $body;
}

# A LuaJIT process holding a permit of $key (of $permits) until the flag
# "release-$key".
sub luajit_holder {
    my ($key, $permits) = @_;
    $permits //= 1;
    my $p = $t->luajit_bg(ShmTest::lua_prelude() . <<"EOF");
local semaphore = require "resty.shmlock.semaphore"
local sem = assert(semaphore:new("sem", { permits = $permits, exptime = 60 }))
print("acquire: " .. tostring(sem:acquire("$key", 0)))
assert(wait_flag("release-$key", 60))
print("release: " .. tostring(sem:release()))
EOF
    defined $p->wait_for(qr/^acquire: 0$/m)
        or give_up("the LuaJIT holder could not take $key");
    return $p;
}

subtest "the board: never more than 2 holders across 2 workers and a "
        . "LuaJIT process" => sub {
    my $rounds = 40;
    my $lj = $t->luajit_bg(ShmTest::lua_prelude() . <<"EOF");
local shdict = require "resty.shmlock.shdict"
local semaphore = require "resty.shmlock.semaphore"
local zone = assert(shdict.open("sem"))
local sem = assert(semaphore:new("sem", { permits = 2, timeout = 30 }))
for _ = 1, 3 * $rounds do
    assert(sem:acquire("board"))
    local n = zone:incr("in-board", 1, 0)
    if n > 2 then zone:incr("bad-board", 1, 0) end
    sleep_ms(1)
    zone:incr("in-board", -1)
    zone:incr("done-board", 1, 0)
    assert(sem:release() == 1)
end
print("luajit done")
EOF
    my @bodies = parallel(6, sub {
        $t->get("/board?key=board&permits=2&rounds=$rounds")->{body};
    });
    is_deeply(\@bodies, [ ("ok\n") x 6 ], "every request's rounds ran");
    is($lj->wait_for(qr/^(luajit done)$/m), "luajit done",
       "the LuaJIT process's rounds ran");
    is($t->get("/get?key=bad-board")->{body}, "nil\n",
       "no count ever above 2");
    is($t->get("/get?key=done-board")->{body}, (9 * $rounds) . "\n",
       "every round counted");
    is($t->get("/get?key=in-board")->{body}, "0\n", "nobody inside");
    is($t->get("/count?key=board")->{body}, "0\n", "no permit left held");
    $t->check_log("board", nested => 1);
};

subtest "init_worker_by_lua: a free permit is taken; a held one is "
        . "refused, with blocking_timeout too (held by this worker)" => sub {
    for my $id (0, 1) {
        is($t->get("/get?key=iw-$id")->{body},
           "0 | nil cannot wait in init_worker phase | nil cannot wait in "
           . "init_worker phase: held by this worker\n", "worker $id");
    }
};

subtest "log and header_filter refuse to wait; a timer waits; "
        . "blocking_timeout blocks the log phase until the release" => sub {
    my $h = luajit_holder("ph");
    is($t->get("/log_phase?key=ph")->{body}, "ok\n", "log request");
    is(wait_for("/get?key=log-result", qr/^(?!nil\n)/),
       "nil cannot wait in log phase\n", "log_by_lua");
    is($t->get("/header_filter?key=ph")->{body}, "ok\n", "request");
    is(wait_for("/get?key=hf-result", qr/^(?!nil\n)/),
       "nil cannot wait in header_filter phase\n", "header_filter_by_lua");
    is($t->get("/timer_wait?key=ph")->{body}, "ok\n", "timer started");
    is($t->get("/log_block?key=ph")->{body}, "ok\n", "blocking request");
    $t->set_flag("release-ph");
    my ($rc, $out) = $h->finish(20);
    like($out, qr/^release: 1$/m, "the LuaJIT holder released");
    like(wait_for("/get?key=block-result", qr/^(?!nil\n)/),
         qr/^(0|waited) nil\n/, "log_by_lua with blocking_timeout got it");
    like(wait_for("/get?key=timer-result", qr/^(?!nil\n)/),
         qr/^(0|waited) nil\n/, "the timer got it");
    is($t->get("/count?key=ph")->{body}, "0\n", "no permit left held");
    $t->check_log("phases", nested => 1);
};

subtest "a worker SIGKILLed while holding gives its permit back at once"
        => sub {
    my %holders;
    for (1 .. 400) {
        my $r = $t->get("/hold?key=kw&permits=2");
        $holders{$1}++ if $r->{body} =~ /^(\d+)\n\z/;
        last if keys %holders >= 2;
    }
    my ($victim, $survivor) = sort { $a <=> $b } keys %holders;
    ok($victim && $survivor, "both workers hold a permit of kw")
        or give_up("could not reach both workers");
    is($t->get("/count?key=kw")->{body}, "2\n", "2 held");
    my $waiting;
    for (1 .. 400) {
        if ($t->get("/wait_timer?key=kw&permits=2")->{body} eq "$survivor\n") {
            $waiting = 1;
            last;
        }
    }
    ok($waiting, "a timer on worker $survivor waits for a permit");
    ok(kill('KILL', $victim), "SIGKILL worker $victim");
    is(wait_for("/get?key=result-kw", qr/^(?!nil\n)/), "true nil\n",
       "the waiter got the dead worker's permit (timeout 20 s, lease 60 s)");
    is($t->get("/count?key=kw")->{body}, "1\n",
       "the survivor's permit is still held, the dead one's is not");
    $t->check_log("kill", nested => 1,
                  error_log => [qr/worker process $victim exited on signal 9/]);
};

for my $round (1 .. 3) {
    $t->block("round $round: ngx.thread.kill of a queued waiter leaks no "
              . "permit and holds nobody back",
              request => "GET /kill_waiter?key=kill$round",
              body => "0 nil 0\n");
}

$t->block("a ghost ahead of a live waiter: the live one gets the permit",
          request => "GET /ghost_then_live?key=live",
          body => "got it nil\n");

subtest "no barging: a queued waiter's turn keeps a fresh acquirer out "
        . "even with permits free for it" => sub {
    # two LuaJIT holders (limit 3); the queued waiter's limit is 1, so its
    # turn comes only when both have left, and meanwhile a caller whose
    # own limit (3) has room is refused all the same
    my $h1 = luajit_holder("turn", 3);
    my $h2 = luajit_holder("turn", 3);
    my $waiter = spawn(sub { $t->get("/wait?key=turn")->{body} });
    my $pid = wait_for("/marked?key=turn", qr/^\d+\n/);
    like($pid, qr/^\d+\n/, "the waiter marked the head");
    is($t->get("/try?key=turn&permits=3")->{body}, "nil timeout\n",
       "a fresh acquirer with room under its limit is refused");
    $t->set_flag("release-turn");
    for my $h ($h1, $h2) {
        my ($rc, $out) = $h->finish(20);
        like($out, qr/^release: 1$/m, "a LuaJIT holder released");
    }
    is($waiter->join(40), "true nil\n", "the marked waiter got its permit");
    is($t->get("/count?key=turn")->{body}, "0\n", "none left held");
    $t->check_log("no barging", nested => 1);
};

subtest "a client abort of a queued waiter, the release in a LuaJIT "
        . "process: the permit goes to the next acquirer" => sub {
    my $h = luajit_holder("abort");
    my $sock = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                     PeerPort => $t->port, Timeout => 5)
        or give_up("cannot connect: $!");
    print $sock "GET /wait?key=abort HTTP/1.1\r\nHost: localhost\r\n"
              . "Connection: close\r\n\r\n";
    like(wait_for("/marked?key=abort", qr/^\d+\n/), qr/^\d+\n/,
         "the waiter marked the head");
    close $sock;
    $t->set_flag("release-abort");
    my ($rc, $out) = $h->finish(20);
    like($out, qr/^release: 1$/m, "the LuaJIT holder released");
    # the ghost's turn lasts lock.wait.ACCEPT (3 s here) at most
    is($t->get("/try?key=abort&timeout=10")->{body} =~ s/^waited /0 /r,
       "0 nil\n", "the next acquirer gets the permit");
    is($t->get("/count?key=abort")->{body}, "0\n", "no permit left held");
    $t->check_log("client abort", nested => 1);
};

subtest "limit.conn-style (docs/semaphore.md): over the limit a request "
        . "gets 503, and every permit is back after the log phase" => sub {
    my @held = map { spawn(sub { $t->get("/conn")->{body} }) } 1 .. 2;
    is(wait_for("/count?key=conn-client", qr/^2\n/), "2\n",
       "2 requests hold the 2 permits");
    is($t->get("/conn")->{status}, 503, "a third one is refused");
    is($t->get("/set?key=conn-go")->{body}, "ok\n", "the holders go on");
    is($_->join(40), "served\n", "a holder was served") for @held;
    is(wait_for("/count?key=conn-client", qr/^0\n/), "0\n",
       "released in the log phase: nothing leaked");
    $t->check_log("limit.conn", nested => 1);
};

subtest "nginx -s reload: an old worker's permit stays counted until its "
        . "request releases it; the new workers see the count" => sub {
    my $h = luajit_holder("rl", 2);
    my $inflight = spawn(sub { $t->get("/hold_until?key=rl")->{body} });
    is(wait_for("/count?key=rl", qr/^2\n/), "2\n", "2 held before");
    my @old = $t->worker_pids;
    my @new = $t->reload(wait_old => 0);
    ok(!grep({ my $n = $_; grep { $_ == $n } @old } @new),
       "new workers (@new)");
    $t->block("the new workers see both permits held",
              request => [ ("GET /try?key=rl&permits=2") x 4 ],
              body => "nil timeout\n");
    is($t->get("/set?key=release-rl")->{body}, "ok\n", "release asked");
    is($inflight->join(40), "held 1\n",
       "the old worker's request released after the reload");
    $t->block("then the new workers get one",
              request => [ ("GET /try?key=rl&permits=2") x 4 ],
              body => "0 nil\n");
    $t->set_flag("release-rl");
    my ($rc, $out) = $h->finish(20);
    like($out, qr/^release: 1$/m, "the LuaJIT holder released");
    is($t->get("/count?key=rl")->{body}, "0\n", "none held");
    $t->check_log("reload", nested => 1);
};

$t->stop;
done_testing();
