# A queued lock waiter that nginx aborts never keeps a key
# (lua/resty/shmlock/lock/wait.lua, "Aborted waiters"): its Lua
# thread is killed (ngx.thread.kill), ended with its request (ngx.exit
# while it is a light thread, a client abort with lua_check_client_abort
# on) or with its worker (a reload with worker_shutdown_timeout), after it
# has marked the lock.  Its mark names a live worker (but for the last
# case), yet a release afterwards frees the key or hands it to a live
# waiter, and the worker's registry of queued waiters does not keep it.
# A release by another process, which cannot tell a ghost from a waiter,
# hands it the key for lock.wait.ACCEPT (0.5 s) only.
#
# Also: with blocking_timeout, a phase that cannot yield (log_by_lua)
# never blocks the worker on a key that a request of this very worker
# holds (that request could not run meanwhile): an error at once.
#
# One worker, so that every request shares the waiter's worker.  Nothing
# here depends on timing: each step waits for a state (a mark in the zone,
# a registry count, a flag), bounded; the only bounds are far from the
# expected values (a wait that would take the whole timeout on failure).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use IO::Socket::INET;
use Time::HiRes qw(time sleep);
use ShmTest qw(spawn give_up);

my $t = ShmTest->new(
    workers => 1,
    main_config => 'worker_shutdown_timeout 300ms;',
    zone => 'aborted',
    init_by_lua => <<'EOF',
        T.wait = require "resty.shmlock.lock.wait"
        T.held = {}

        -- a waiter that queues (30 s: it never times out here, and its
        -- mark stays valid as long)
        function T.waiter(key)
            return resty_lock:new("aborted", { timeout = 30 }):lock(key)
        end

        -- waits (5 s at most) until a waiter of this worker marks key
        function T.wait_marked(key)
            for _ = 1, 500 do
                local info = resty_lock.inspect("aborted", key)
                if info and info.marked
                   and info.marked.pid == ngx.worker.pid()
                then
                    return true
                end
                ngx.sleep(0.01)
            end
            return false
        end

        -- "<elapsed or nil> <err>" of a lock() that then unlocks
        function T.try(key, opts)
            local lock = assert(resty_lock:new("aborted", opts))
            local elapsed, err = lock:lock(key)
            if elapsed then
                assert(lock:unlock() == 1)
            end
            return T.fmt(elapsed, err)
        end
EOF
    config => <<'EOF',
        lua_check_client_abort on;

        location = /take {
            content_by_lua_block {
                local key = ngx.var.arg_key
                T.held[key] = assert(resty_lock:new("aborted"))
                ngx.say(T.held[key]:lock(key))
            }
        }
        location = /give {
            content_by_lua_block {
                ngx.say(T.held[ngx.var.arg_key]:unlock())
            }
        }
        location = /marked {
            content_by_lua_block {
                local info = resty_lock.inspect("aborted", ngx.var.arg_key)
                ngx.say(info and info.marked and info.marked.pid or "none")
            }
        }
        # the waiter in a light thread, killed once it has marked the lock
        location = /kill {
            content_by_lua_block {
                local key = ngx.var.arg_key
                local th = ngx.thread.spawn(T.waiter, key)
                assert(T.wait_marked(key), "the waiter did not mark")
                assert(ngx.thread.kill(th))
                ngx.say("killed")
            }
        }
        # the waiter in a light thread; the request ends (ngx.exit) once
        # it has marked the lock
        location = /exit {
            content_by_lua_block {
                local key = ngx.var.arg_key
                ngx.thread.spawn(T.waiter, key)
                assert(T.wait_marked(key), "the waiter did not mark")
                ngx.exit(200)
            }
        }
        # the waiter in the request's own thread
        location = /wait {
            content_by_lua_block {
                ngx.say(T.fmt(T.waiter(ngx.var.arg_key)))
            }
        }
        # a ghost ahead of a live waiter, the release in this worker: the
        # live one gets the key
        location = /ghost_then_live {
            content_by_lua_block {
                local key = ngx.var.arg_key
                local holder = assert(resty_lock:new("aborted"))
                assert(holder:lock(key) == 0)
                local ghost = ngx.thread.spawn(T.waiter, key)
                assert(T.wait_marked(key), "the first waiter did not mark")
                assert(ngx.thread.kill(ghost))
                local live = ngx.thread.spawn(function()
                    return resty_lock:new("aborted", { timeout = 5 }):lock(key)
                end)
                -- queued (past its 0.2 s of steps), bounded
                for _ = 1, 500 do
                    if T.wait.queued(key) == 1 then
                        break
                    end
                    ngx.sleep(0.01)
                end
                assert(holder:unlock() == 1)
                local _, elapsed, err = ngx.thread.wait(live)
                ngx.say(elapsed and "got it" or "no", " ", tostring(err))
                if elapsed then
                    -- the lock is the live waiter's for its exptime (30 s)
                    local info = resty_lock.inspect("aborted", key)
                    ngx.say(info.ttl > 10 and "full exptime" or info.ttl)
                end
            }
        }
        location = /try {
            content_by_lua_block {
                ngx.say(T.try(ngx.var.arg_key, { timeout = 3 }))
            }
        }
        # "<live waiters queued on key> <live waiters of the worker>"
        location = /registry {
            content_by_lua_block {
                ngx.say(T.wait.queued(ngx.var.arg_key), " ",
                        (T.wait.registry()))
            }
        }
        # with blocking_timeout where the phase cannot yield, a key held
        # by a request of this worker
        location = /hold_own {
            content_by_lua_block {
                local lock = assert(resty_lock:new("aborted"))
                assert(lock:lock("own") == 0)
                T.zone:set("own-held", true)
                for _ = 1, 1000 do
                    if T.zone:get("own-release") then
                        break
                    end
                    ngx.sleep(0.01)
                end
                ngx.say(lock:unlock())
            }
        }
        location = /log_own {
            content_by_lua_block { ngx.say("ok") }
            log_by_lua_block {
                local t0 = ngx.now()
                local res = T.try("own", { timeout = 60,
                                           blocking_timeout = 60 })
                ngx.update_time()
                T.zone:set("own-result", res .. " "
                           .. string.format("%.3f", ngx.now() - t0))
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
EOF
);
$t->start;

# polls $uri until its body matches $re (30 s at most); returns the body
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

# after an abort: the release frees the key, nothing is left in the
# registry (for a client abort, nginx notices it when it reads the
# connection: the registry first)
sub released_free {
    my ($key, $what, $registry_first) = @_;
    my $registry = sub {
        is(wait_for("/registry?key=$key", qr/^0 0\n/), "0 0\n",
           "$what: the worker keeps no queued waiter");
    };
    $registry->() if $registry_first;
    is($t->get("/give?key=$key")->{body}, "1\n", "$what: released");
    is($t->get("/try?key=$key")->{body}, "0 nil\n",
       "$what: the key is free at once, not handed to the aborted waiter");
    $registry->() unless $registry_first;
}

for my $round (1 .. 3) {
    $t->block("round $round: ngx.thread.kill of a queued waiter",
              request => ["GET /take?key=kill", "GET /kill?key=kill"],
              body => ["0\n", "killed\n"]);
    released_free("kill", "thread.kill, round $round");
}

$t->block("ngx.exit with the queued waiter in a light thread",
          request => ["GET /take?key=exit", "GET /exit?key=exit"],
          body => ["0\n", ""]);
released_free("exit", "ngx.exit");

subtest "a client abort (lua_check_client_abort on)" => sub {
    is($t->get("/take?key=abort")->{body}, "0\n", "held");
    my $sock = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                     PeerPort => $t->port, Timeout => 5)
        or give_up("cannot connect: $!");
    print $sock "GET /wait?key=abort HTTP/1.1\r\nHost: localhost\r\n"
              . "Connection: close\r\n\r\n";
    like(wait_for("/marked?key=abort", qr/^\d+\n/), qr/^\d+\n/,
         "the waiter marked the lock");
    close $sock;
    released_free("abort", "client abort", 1);
    $t->check_log("client abort", nested => 1);
};

$t->block("a ghost ahead of a live waiter: the release in this worker "
          . "hands the key to the live one",
          request => "GET /ghost_then_live?key=live",
          body => "got it nil\nfull exptime\n");

# A LuaJIT process holding $key until the flag "release-$key"; after its
# unlock it prints what the key then holds: "after <pid> <ttl>" or "after
# free".
sub luajit_holder {
    my ($key) = @_;
    my $p = $t->luajit_bg(ShmTest::lua_prelude() . <<"EOF");
local resty_lock = require "resty.shmlock"
local lock = assert(resty_lock:new("aborted", { exptime = 30 }))
print("lock: " .. tostring(lock:lock("$key")))
assert(wait_flag("release-$key", 60))
print("unlock: " .. tostring(lock:unlock()))
local info = resty_lock.inspect("aborted", "$key")
print(info and string.format("after %d %.3f", info.pid, info.ttl)
      or "after free")
EOF
    defined $p->wait_for(qr/^lock: 0$/m)
        or give_up("the LuaJIT holder could not take $key");
    return $p;
}

subtest "a release in another process hands a ghost the key for "
        . "ACCEPT (0.5 s) only" => sub {
    my $h = luajit_holder("remote");
    is($t->get("/kill?key=remote")->{body}, "killed\n", "ghost marked");
    $t->set_flag("release-remote");
    my $after = $h->wait_for(qr/^(after .*)$/m);
    my ($pid, $ttl) = ($after // '') =~ /^after (\d+) (\S+)/;
    is($pid, ($t->worker_pids)[0], "handed to the (unknowable) ghost");
    ok(defined $ttl && $ttl <= 0.5,
       "for ACCEPT at most (ttl " . ($ttl // 'none') . ", not the 30 s "
       . "exptime)");
    # a LuaJIT waiter gets the key when the handoff lapses
    my ($code, $out) = $t->luajit(<<'EOF', timeout => 30);
local resty_lock = require "resty.shmlock"
local lock = assert(resty_lock:new("aborted", { timeout = 10 }))
print(lock:lock("remote"))
EOF
    like($out, qr/^\d[\d.e-]*\n\z/, "the next waiter gets the key")
        or diag($out);
    $t->check_log("remote release", nested => 1);
};

subtest "with blocking_timeout, log_by_lua does not block on a key held "
        . "by a request of its own worker" => sub {
    my $holder = spawn(sub { $t->get("/hold_own")->{body} });
    is(wait_for("/get?key=own-held", qr/^true\n/), "true\n", "held");
    is($t->get("/log_own")->{body}, "ok\n", "the request");
    my $res = wait_for("/get?key=own-result", qr/^(?!nil\n)/);
    like($res, qr/^nil cannot wait in log phase: held by this worker \S+\n/,
         "refused at once, with the cause");
    my ($took) = $res =~ /(\S+)\n\z/;
    ok(defined $took && $took < 30,
       "without blocking (" . ($took // '?') . " s; blocking: 60 s)");
    $t->get("/set?key=own-release");
    is($holder->join(20), "1\n", "the holder ran on and released");
    $t->check_log("own holder", nested => 1);
};

subtest "worker shutdown (reload, worker_shutdown_timeout) with a queued "
        . "waiter" => sub {
    my $h = luajit_holder("shutdown");
    # a raw connection: HTTP::Tiny would send the request again to the
    # new worker when the old one closes it
    my $sock = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                     PeerPort => $t->port, Timeout => 5)
        or give_up("cannot connect: $!");
    print $sock "GET /wait?key=shutdown HTTP/1.1\r\nHost: localhost\r\n"
              . "Connection: close\r\n\r\n";
    like(wait_for("/marked?key=shutdown", qr/^\d+\n/), qr/^\d+\n/,
         "the waiter marked the lock");
    my @new = $t->reload;
    ok(@new, "the old worker is gone");
    close $sock;
    $t->set_flag("release-shutdown");
    is($h->wait_for(qr/^(after .*)$/m), "after free",
       "the release frees the key (the marked waiter's worker is dead)");
    is($t->get("/try?key=shutdown")->{body}, "0 nil\n", "free at once");
    $t->check_log("shutdown", nested => 1);
};

$t->stop;
done_testing();
