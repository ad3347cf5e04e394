# Phases that cannot yield (init_worker_by_lua*, set_by_lua*,
# header_filter_by_lua*, body_filter_by_lua*, log_by_lua*): lock() on a free
# key succeeds at once; on a held key it returns the module's documented
# error at once (no hang, no crash, no blocked worker); timeout = 0 still
# answers "timeout" as resty.lock does.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use ShmTest qw(give_up);

# lock() on a held key where ngx.sleep is not allowed answers
# nil, "cannot wait in <phase> phase" (lua/resty/shmlock.lua), <phase> as
# ngx.get_phase() names it.
sub want {
    my ($phase) = @_;
    my $err = "nil cannot wait in $phase phase";
    return join '|', '0', $err, '1', '0', $err, 'nil timeout', 'fast';
}

my $t = ShmTest->new(
    workers => 2,
    zone => 'phases',
    init_by_lua => <<'EOF',
        local fmt = T.fmt

        -- "free|held by us|unlock|free again|held by LuaJIT|timeout=0|ms"
        function T.check(tag)
            local start = ngx.now()
            local key = tag .. "-" .. ngx.worker.pid()
            local a = assert(resty_lock:new("phases"))
            local b = assert(resty_lock:new("phases"))
            local z = assert(resty_lock:new("phases", { timeout = 0 }))
            local r = {}
            r[1] = fmt(a:lock(key))
            r[2] = fmt(b:lock(key))
            r[3] = fmt(a:unlock())
            r[4] = fmt(b:lock(key))
            b:unlock()
            r[5] = fmt(b:lock("ext-busy"))
            r[6] = fmt(z:lock("ext-busy"))
            ngx.update_time()
            -- no wait before the answers: b's would last its timeout, 5 s
            -- (a bound far from both, which timer lag cannot reach)
            r[7] = ngx.now() - start < 2.5 and "fast" or "SLOW"
            return table.concat(r, "|")
        end
EOF
    http_config => <<'EOF',
    init_worker_by_lua_block {
        T.init_worker = T.check("iw")
    }
EOF
    config => <<'EOF',
        location = /init_worker {
            content_by_lua_block { ngx.say(T.init_worker) }
        }
        location = /set {
            set_by_lua_block $res { return T.check("set") }
            return 200 "$res\n";
        }
        location = /header_filter {
            content_by_lua_block { ngx.say("body") }
            header_filter_by_lua_block {
                ngx.header["X-Res"] = T.check("hf")
            }
        }
        location = /body_filter {
            content_by_lua_block { ngx.say("body") }
            body_filter_by_lua_block {
                if ngx.arg[2] then
                    ngx.arg[1] = (ngx.arg[1] or "") .. T.check("bf") .. "\n"
                end
            }
        }
        location = /log {
            content_by_lua_block { ngx.say("body") }
            log_by_lua_block {
                T.zone:set("log-" .. ngx.var.arg_n, T.check("log"))
            }
        }
        location = /get {
            content_by_lua_block {
                ngx.say(tostring(T.zone:get(ngx.var.arg_key)))
            }
        }
EOF
);

# A LuaJIT process holds "ext-busy" for the whole file, from before nginx
# starts (so that init_worker_by_lua sees it held).
my $holder = $t->luajit_bg(ShmTest::lua_prelude() . <<'EOF');
local shdict = require "resty.shmlock.shdict"
assert(shdict.open("phases"))
local resty_lock = require "resty.shmlock"
local lock = assert(resty_lock:new("phases", { exptime = 120 }))
print("lock: " .. tostring(lock:lock("ext-busy")))
wait_flag("release", 100)
print("unlock: " .. tostring(lock:unlock()))
EOF
defined $holder->wait_for(qr/^lock: 0$/m)
    or give_up("the LuaJIT holder could not take ext-busy");

$t->start;

$t->block("init_worker_by_lua: free key locks, held key errors at once",
    request => [ ("GET /init_worker") x 4 ],
    body    => want("init_worker") . "\n");

$t->block("set_by_lua: free key locks, held key errors at once",
    request  => "GET /set",
    body     => want("set") . "\n",
    max_time => 1);

$t->block("header_filter_by_lua: free key locks, held key errors at once",
    request  => "GET /header_filter",
    body     => "body\n",
    headers  => { 'X-Res' => want("header_filter") },
    max_time => 1);

$t->block("body_filter_by_lua: free key locks, held key errors at once",
    request  => "GET /body_filter",
    body     => "body\n" . want("body_filter") . "\n",
    max_time => 1);

subtest "log_by_lua: free key locks, held key errors at once" => sub {
    for my $n (1 .. 3) {
        my $r = $t->get("/log?n=$n");
        is($r->{body}, "body\n", "request $n answered");
        my $got;
        my $deadline = time + 30;
        while (time < $deadline) {
            $got = $t->get("/get?key=log-$n")->{body};
            last if $got ne "nil\n";
            sleep 0.01;
        }
        is($got, want("log") . "\n", "log phase result $n");
    }
    $t->check_log("log_by_lua", nested => 1);
};

$t->set_flag("release");
my ($rc, $out) = $holder->finish(10);
is($out, "lock: 0\nunlock: 1\n", "the LuaJIT holder released ext-busy");

$t->stop;
done_testing;
