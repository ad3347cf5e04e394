# resty.shmlock.cache inside nginx: many concurrent requests on 2 workers
# (and plain LuaJIT processes at the same time) miss the same cold key;
# the loader runs exactly once, everyone gets its value.
#
# The loader does not return before every caller has arrived (each request
# counts itself in a zone first), so all of them are in flight while it
# runs: the test does not depend on timing.  The waiters wait with
# ngx.sleep; a wait that blocked its worker would also block the loader's
# ngx.sleep in that worker, and the loader would never finish.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use ShmTest qw(parallel);

my $CLIENTS = 30;     # concurrent requests
my $LUAJITS = 4;      # LuaJIT processes joining the stampede

my $t = ShmTest->new(
    workers   => 2,
    reuseport => 1,     # the kernel spreads connections over both workers
    http_config => <<'EOF',
    init_worker_by_lua_block {
        local shdict = require "resty.shmlock.shdict"
        local cache = require "resty.shmlock.cache"
        T = {
            stats = assert(shdict.open("cache-t-stats")),
            c = assert(cache.new("cache-t", { lock_opts = { timeout = 30 } })),
        }
        -- counts its calls; returns once `n` callers have arrived
        function T.loader(key, n)
            T.stats:incr("calls:" .. key, 1, 0)
            local deadline = ngx.now() + 20
            while (T.stats:get("arrived:" .. key) or 0) < n
                  and ngx.now() < deadline
            do
                ngx.sleep(0.01)
            end
            return "v:" .. key
        end
    }
EOF
    config => <<'EOF',
        # answers "value hit_level pid"
        location = /get {
            content_by_lua_block {
                local key, n = ngx.var.arg_key, tonumber(ngx.var.arg_n)
                T.stats:incr("arrived:" .. key, 1, 0)
                local value, err, level = T.c:get(key, nil, T.loader, key, n)
                if err then
                    ngx.status = 500
                    return ngx.say("error: ", err)
                end
                ngx.say(value, " ", level, " ", ngx.worker.pid())
            }
        }
        location = /calls {
            content_by_lua_block {
                ngx.say(T.stats:get("calls:" .. ngx.var.arg_key))
            }
        }
        location = /fail {
            content_by_lua_block {
                local value, err = T.c:get(ngx.var.arg_key, nil, function()
                    ngx.sleep(0.01)
                    return nil, "backend down"
                end)
                ngx.say(tostring(value), " ", tostring(err))
            }
        }
        location = /peek {
            content_by_lua_block {
                local ttl, err, value = T.c:peek(ngx.var.arg_key)
                ngx.say(tostring(ttl), " ", tostring(err), " ",
                        tostring(value))
            }
        }
        # a phase that cannot yield: an uncontended miss needs no wait
        location = /set_phase {
            set_by_lua_block $v {
                local value, err, level = T.c:get("set-phase", nil,
                    function() return "loaded in set" end)
                return tostring(value) .. " " .. tostring(level)
            }
            return 200 "$v\n";
        }
EOF
);
$t->start;

# Tallies "200 value level pid" answers: (ok, {level => n}, {pid => n}, bad)
sub tally {
    my ($want, @answers) = @_;
    my ($ok, %levels, %pids, @bad) = (0);
    for my $a (@answers) {
        if (defined $a && $a =~ /^200 \Q$want\E ([123]) (\d+)\n\z/) {
            $ok++;
            $levels{$1}++;
            $pids{$2}++;
        } else {
            push @bad, ref $a ? explain($a) : $a // 'undef';
        }
    }
    return ($ok, \%levels, \%pids, \@bad);
}

subtest "$CLIENTS concurrent requests on 2 workers: one loader call" => sub {
    my @answers = parallel($CLIENTS, sub {
        my $r = $t->get("/get?key=cold&n=$CLIENTS");
        return "$r->{status} $r->{body}";
    });
    my ($ok, $levels, $pids, $bad) = tally('v:cold', @answers);
    is($ok, $CLIENTS, "every request got the value")
        or diag(join '', @$bad[0 .. ($#$bad < 5 ? $#$bad : 4)]);
    is($levels->{3}, 1, "one request ran the loader (hit level 3)")
        or diag(explain $levels);
    is(($levels->{1} // 0) + ($levels->{2} // 0), $CLIENTS - 1,
       "the others were served by the cache");
    is(scalar keys %$pids, 2, "both workers served requests")
        or diag(explain $pids);
    is($t->get("/calls?key=cold")->{body}, "1\n", "exactly one loader call");
    $t->check_log("cold key", nested => 1);
};

subtest "$CLIENTS requests and $LUAJITS LuaJIT processes: one loader call"
      => sub {
    my $n = $CLIENTS + $LUAJITS;
    my $code = ShmTest::lua_prelude() . <<"EOF";
local shdict = require "resty.shmlock.shdict"
local cache = require "resty.shmlock.cache"
local stats = assert(shdict.open("cache-t-stats"))
local c = assert(cache.new("cache-t", { lock_opts = { timeout = 30 } }))
local function loader(key, n)
    stats:incr("calls:" .. key, 1, 0)
    for _ = 1, 2000 do
        if (stats:get("arrived:" .. key) or 0) >= n then
            break
        end
        sleep_ms(10)
    end
    return "v:" .. key
end
print("ready")
wait_flag("go", 20)
stats:incr("arrived:mixed", 1, 0)
local value, err, level = c:get("mixed", nil, loader, "mixed", $n)
print("200 " .. tostring(value or err) .. " " .. tostring(level) .. " 0")
EOF
    my @lj = map { $t->luajit_bg($code) } 1 .. $LUAJITS;
    for my $p (@lj) {
        ok(defined $p->wait_for(qr/^ready$/m), "LuaJIT process ready")
            or return;
    }
    $t->set_flag("go");
    my @answers = parallel($CLIENTS, sub {
        my $r = $t->get("/get?key=mixed&n=$n");
        return "$r->{status} $r->{body}";
    });
    for my $p (@lj) {
        my ($rc, $out) = $p->finish(60);
        is($rc, 0, "LuaJIT process exit code");
        push @answers, $out =~ /^(200 .*\n)\z/m ? $1 : $out;
    }
    my ($ok, $levels) = tally('v:mixed', @answers);
    is($ok, $n, "every caller got the value") or diag(explain \@answers);
    is($levels->{3}, 1, "one caller ran the loader") or diag(explain $levels);
    is($t->get("/calls?key=mixed")->{body}, "1\n", "exactly one loader call");
    $t->check_log("mixed", nested => 1);
};

$t->block("a loader error reaches the caller and is not cached",
    request => [ "GET /fail?key=bad", "GET /peek?key=bad",
                 "GET /get?key=bad&n=0" ],
    body    => [ "nil backend down\n", "nil nil nil\n",
                 qr/^v:bad 3 \d+\n\z/ ]);

$t->block("a miss in a phase that cannot yield loads when uncontended",
    request => "GET /set_phase",
    body    => "loaded in set 3\n");

$t->stop;
done_testing;
