# resty.shmlock.cache inside nginx, 2 workers: every worker's L1 follows a
# set(), delete() or purge() made in any worker or LuaJIT process, also
# one made while a worker's loader ran; a stale value (stale_ttl) is
# served at once while one timer refreshes it.
#
# The values never expire (ttl 0), so a worker whose L1 missed a change
# would serve the old value for ever: each round asks both workers (20
# concurrent requests, spread over the workers by reuseport) and requires
# every answer to be the new state.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use ShmTest qw(parallel);

my $CLIENTS = 20;

my $t = ShmTest->new(
    workers   => 2,
    reuseport => 1,
    http_config => <<'EOF',
    init_worker_by_lua_block {
        local shdict = require "resty.shmlock.shdict"
        local cache = require "resty.shmlock.cache"
        T.stats = assert(shdict.open("coh-t-stats"))
        T.c = assert(cache.new("coh-t", { ttl = 0 }))
        T.s = assert(cache.new("coh-s", { dict = "coh-t", stale_ttl = 30,
                                          lock_opts = { timeout = 30 } }))
        T.st = assert(cache.new("coh-st", { dict = "coh-t", ttl = 0 }))
        function T.load(key)
            T.stats:incr("loads:" .. key, 1, 0)
            return "loaded:" .. key
        end
        -- the refresh loader: records its calls, the phase and its
        -- arguments; sleeps `delay` seconds; fails when asked to
        function T.slow(key, delay, fail, ttl)
            local n = T.stats:incr("calls:" .. key, 1, 0)
            T.stats:set("how:" .. key, ngx.get_phase() .. " " .. key .. " "
                                       .. delay .. " " .. tostring(fail))
            ngx.sleep(delay)
            if fail then
                return nil, "down"
            end
            return "v" .. n, nil, ttl
        end
    }
EOF
    config => <<'EOF',
        # "value hit_level pid"
        location = /get {
            content_by_lua_block {
                local value, err, level = T.c:get(ngx.var.arg_key, nil,
                                                  T.load, ngx.var.arg_key)
                if err then
                    ngx.status = 500
                    return ngx.say("error: ", err)
                end
                ngx.say(value, " ", level, " ", ngx.worker.pid())
            }
        }
        location = /set {
            content_by_lua_block {
                ngx.say(T.fmt(T.c:set(ngx.var.arg_key, ngx.var.arg_v)))
            }
        }
        location = /delete {
            content_by_lua_block {
                ngx.say(T.fmt(T.c:delete(ngx.var.arg_key)))
            }
        }
        location = /purge {
            content_by_lua_block {
                ngx.say(T.fmt(T.c:purge()))
            }
        }
        # "value hit_level ms" (ms: the time get() took, measured here)
        location = /stale {
            content_by_lua_block {
                local a = ngx.var
                ngx.update_time()
                local t0 = ngx.now()
                local value, err, level = T.s:get(a.arg_key, nil, T.slow,
                    a.arg_key, tonumber(a.arg_delay), a.arg_fail == "1",
                    tonumber(a.arg_ttl))
                ngx.update_time()
                if err then
                    ngx.status = 500
                    return ngx.say("error: ", err)
                end
                ngx.say(value, " ", level, " ",
                        math.floor((ngx.now() - t0) * 1000))
            }
        }
        # "value hit_level" from the cache whose counters are checked
        location = /st {
            content_by_lua_block {
                local value, err, level = T.st:get(ngx.var.arg_key, nil,
                    function() return "v" end)
                ngx.say(value, " ", level)
            }
        }
        location = /stats {
            content_by_lua_block {
                local s = assert(T.st:stats())
                ngx.say(s.hits_l1, " ", s.hits_l2, " ", s.loads, " ",
                        s.misses)
            }
        }
        # a get whose loader says it runs ("loading:KEY"), then waits
        # for "go:KEY" and returns "old"
        location = /slowload {
            content_by_lua_block {
                local key = ngx.var.arg_key
                local value, err, level = T.c:get(key, nil, function()
                    T.stats:set("loading:" .. key, true)
                    for _ = 1, 4000 do
                        if T.stats:get("go:" .. key) then
                            return "old"
                        end
                        ngx.sleep(0.005)
                    end
                    return nil, "no go"
                end)
                ngx.say(value, " ", err, " ", level)
            }
        }
        location = /flag {
            content_by_lua_block {
                local name = ngx.var.arg_name
                if ngx.var.arg_set then
                    T.stats:set(name, true)
                end
                ngx.say(tostring(T.stats:get(name)))
            }
        }
        location = /calls {
            content_by_lua_block {
                local k = ngx.var.arg_key
                ngx.say(T.stats:get("calls:" .. k), " ",
                        T.stats:get("how:" .. k))
            }
        }
EOF
);
$t->start;

# every answer must be "200 $want <level> <pid>"; both workers must answer
sub round_ok {
    my ($name, $want, $key) = @_;
    $key //= 'k';
    my @answers = parallel($CLIENTS, sub {
        my $r = $t->get("/get?key=$key");
        return "$r->{status} $r->{body}";
    });
    my (%pids, @bad);
    for my $a (@answers) {
        if ($a =~ /^200 \Q$want\E [123] (\d+)\n\z/) {
            $pids{$1}++;
        } else {
            push @bad, $a;
        }
    }
    is(scalar @bad, 0, "$name: every answer is '$want'")
        or diag(explain [ @bad[0 .. ($#bad < 5 ? $#bad : 4)] ]);
    is(scalar keys %pids, 2, "$name: both workers answered")
        or diag(explain \%pids);
}

subtest "each worker's next get() sees a change made anywhere" => sub {
    is($t->get("/set?key=k&v=one")->{body}, "true\n", "set");
    round_ok("warm", "one");
    # both L1s hold "one" now: the next answers are L1 hits
    my @l1 = grep { /^200 one 1 / } parallel($CLIENTS, sub {
        my $r = $t->get("/get?key=k");
        return "$r->{status} $r->{body}";
    });
    is(scalar @l1, $CLIENTS, "served from L1 before the change");

    is($t->get("/set?key=k&v=two")->{body}, "true\n", "set in a worker");
    round_ok("after set", "two");

    my ($rc, $out) = $t->luajit(ShmTest::lua_prelude() . <<'EOF');
local cache = require "resty.shmlock.cache"
local c = assert(cache.new("coh-t", { ttl = 0 }))
print(c:set("k", "three"))
EOF
    is($rc, 0, "LuaJIT process exit code") or diag($out);
    round_ok("after a LuaJIT process's set", "three");

    is($t->get("/delete?key=k")->{body}, "true\n", "delete");
    round_ok("after delete", "loaded:k");

    is($t->get("/set?key=k&v=four")->{body}, "true\n", "set");
    round_ok("before purge", "four");
    is($t->get("/purge")->{body}, "true\n", "purge");
    round_ok("after purge", "loaded:k");
    $t->check_log("coherence", nested => 1);
};

subtest "a load that began before a change does not store over it" => sub {
    for my $change ("set", "delete", "purge") {
        my $key = "r$change";
        my $load = ShmTest::spawn(sub { $t->get("/slowload?key=$key")->{body} });
        my $loading = 0;
        for (1 .. 2000) {
            last if $loading = $t->get("/flag?name=loading:$key")->{body} eq "true\n";
            select(undef, undef, undef, 0.01);
        }
        ok($loading, "$change: the loader runs");
        my $uri = $change eq "set" ? "/set?key=$key&v=new"
                : $change eq "delete" ? "/delete?key=$key" : "/purge";
        is($t->get($uri)->{body}, "true\n", "$change returned");
        $t->get("/flag?name=go:$key&set=1");
        is($load->join(30), "old nil 3\n", "$change: the loader's caller has its value");
        round_ok("after a $change made while loading",
                 $change eq "set" ? "new" : "loaded:$key", $key);
    }
    $t->check_log("load and change", nested => 1);
};

subtest "a stale value is served at once; one timer refreshes it" => sub {
    like($t->get("/stale?key=s&delay=0&ttl=0.3")->{body}, qr/^v1 3 /,
         "loaded, fresh for 0.3 s");
    select(undef, undef, undef, 0.5);
    my @answers = parallel($CLIENTS, sub {
        my $r = $t->get("/stale?key=s&delay=1&ttl=30");
        return "$r->{status} $r->{body}";
    });
    my ($stale, @bad) = (0);
    for my $a (@answers) {
        if ($a =~ /^200 v1 4 (\d+)\n\z/ && $1 < 400) {
            $stale++;
        } elsif ($a !~ /^200 v2 [12] \d+\n\z/) {   # after the refresh
            push @bad, $a;
        }
    }
    ok($stale >= 1, "stale answers: $stale");
    is(scalar @bad, 0, "no request waited for the refresh")
        or diag(explain \@bad);
    select(undef, undef, undef, 1.3);
    is($t->get("/calls?key=s")->{body}, "2 timer s 1 false\n",
       "one refresh, in a timer, with the loader's arguments");
    like($t->get("/stale?key=s&delay=0&ttl=30")->{body}, qr/^v2 [12] /,
         "the refreshed value");
    $t->check_log("stale", nested => 1);
};

subtest "the counters of both workers reach the zone" => sub {
    my %levels;
    for my $round (1 .. 3) {
        for my $a (parallel($CLIENTS, sub {
            my $r = $t->get("/st?key=k" . ($round % 2));
            return "$r->{status} $r->{body}";
        })) {
            if ($a =~ /^200 v ([123])\n\z/) {
                $levels{$1}++;
            } else {
                fail("answer: $a");
            }
        }
    }
    # each worker's timer adds its counts to the zone within a second
    select(undef, undef, undef, 1.5);
    my $want = join ' ', map { $levels{$_} // 0 } 1 .. 3;
    my ($counts, $misses) = $t->get("/stats")->{body} =~ /^(\d+ \d+ \d+) (\d+)\n\z/;
    is($counts, $want, "hits_l1 hits_l2 loads: as the answers said")
        or diag(explain \%levels);
    # a miss ran the loader, or waited for it and was served by the zone
    ok($misses >= ($levels{3} // 0)
       && $misses <= ($levels{3} // 0) + ($levels{2} // 0), "misses: $misses");
    $t->check_log("stats", nested => 1);
};

$t->block("a key fresh for 0.2 s",
    request => "GET /stale?key=f&delay=0&ttl=0.2",
    body    => qr/^v1 3 \d+\n\z/);

select(undef, undef, undef, 0.3);
$t->block("a failed refresh is logged and the stale value stays",
    request   => [ "GET /stale?key=f&delay=0&fail=1&ttl=30",
                   "GET /stale?key=f&delay=0&fail=1&ttl=30" ],
    body      => [ qr/^v1 4 \d+\n\z/, qr/^v1 4 \d+\n\z/ ],
    error_log => [ qr/could not refresh the stale value of "f" .*: down/ ]);

$t->stop;
done_testing;
