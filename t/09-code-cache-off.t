# nginx with lua_code_cache off runs a fresh Lua VM for every request, so
# one worker runs many VMs at once.  Their locks must still exclude each
# other: concurrent requests on 2 workers lock one key around a read /
# sleep / write of a counter, and the count is exact, every unlock answers
# 1.  (Owner tokens once counted per VM: every request's first token was
# the same, and a request took a lock another request held for its own.)
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use ShmTest qw(parallel);

my $CLIENTS  = 8;     # client processes
my $REQUESTS = 25;    # requests per client

my $t = ShmTest->new(
    workers => 2,
    preamble => 0,      # nothing loaded before the requests' own VMs
    http_config => <<'EOF',
    lua_code_cache off;
EOF
    config => <<'EOF',
        location = /incr {
            content_by_lua_block {
                local shdict = require "resty.shmlock.shdict"
                local resty_lock = require "resty.shmlock"
                local z = assert(shdict.open("vm_counters"))
                local lock = assert(resty_lock:new(z, { timeout = 30 }))
                local elapsed, err = lock:lock("lock")
                if not elapsed then
                    ngx.status = 500
                    return ngx.say("lock: ", err)
                end
                local n = z:get("n") or 0
                ngx.sleep(0.002)
                assert(z:set("n", n + 1))
                local ok, uerr = lock:unlock()
                if ok ~= 1 then
                    ngx.status = 500
                    return ngx.say("unlock: ", uerr)
                end
                ngx.say(ngx.worker.pid())
            }
        }
        location = /get {
            content_by_lua_block {
                local shdict = require "resty.shmlock.shdict"
                ngx.say(tostring(assert(shdict.open("vm_counters")):get("n")))
            }
        }
EOF
);
$t->start;

subtest "a lock-protected counter is exact with a VM per request" => sub {
    my @res = parallel($CLIENTS, sub {
        my @out;
        for (1 .. $REQUESTS) {
            my $r = $t->get("/incr");
            push @out, "$r->{status} $r->{body}";
        }
        return \@out;
    });
    my ($ok, %pids, @bad) = (0);
    for my $r (@res) {
        if (ref $r ne 'ARRAY') { push @bad, $r->{error}; next }
        for my $line (@$r) {
            if ($line =~ /^200 (\d+)\n\z/) { $ok++; $pids{$1}++ }
            else { push @bad, $line }
        }
    }
    is($ok, $CLIENTS * $REQUESTS, "every lock and unlock succeeded")
        or diag(join '', @bad[0 .. ($#bad < 5 ? $#bad : 4)]);
    is(scalar keys %pids, 2, "both workers served requests")
        or diag(explain \%pids);
    is($t->get("/get")->{body}, ($CLIENTS * $REQUESTS) . "\n",
       "exact count");
    $t->check_log("code cache off", nested => 1,
                  error_log => [qr/lua_code_cache is off/]);
};

$t->stop;
done_testing;
