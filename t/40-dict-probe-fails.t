# When the probe of t/39 fails (an nginx whose lua-nginx-module is not laid
# out as src/shmlock_ngx_dict.c reads it; here the test build's probe is
# told to fail), the drop-in on a lua_shared_dict never uses its
# compare-and-delete: unlock() and expire() compare with get, then delete
# or replace, and still leave another holder's lock alone; the probe is
# tried again a second later, and after the third failure error.log has
# one notice saying why.
use strict;
use warnings;
use FindBin;
BEGIN {
    # the test build: it has the hook that makes the probe fail
    $ENV{SHMLOCK_LIB} ||= "$FindBin::Bin/../libshmlock-test.so";
}
use lib "$FindBin::Bin/lib";
use Test::More;
use ShmTest;

-e $ENV{SHMLOCK_LIB}
    or BAIL_OUT("$ENV{SHMLOCK_LIB} is missing (make libshmlock-test.so)");

my $t = ShmTest->new(
    workers => 1,
    http_config => "    lua_shared_dict x 1m;\n",
    config => <<'EOF',
        location = /t {
            content_by_lua_block {
                local ffi = require "ffi"
                local lib = require "resty.shmlock.lib"
                pcall(ffi.cdef, "void shmlock_test_ngx_dict_probe_fails(int on);")
                local ngx_shared = require "resty.shmlock.lock.ngx_shared"
                local d = ngx.shared.x
                lib.shmlock_test_ngx_dict_probe_fails(1)
                local verdicts = {}
                for i = 1, 3 do
                    verdicts[i] = tostring(ngx_shared.deletes_at_once(d))
                    -- (at once: not probed again within the second)
                    verdicts[i] = verdicts[i] .. "/"
                                  .. tostring(ngx_shared.deletes_at_once(d))
                    ngx.sleep(1.1)
                end
                -- told to pass now: the verdict stands
                lib.shmlock_test_ngx_dict_probe_fails(0)
                ngx.say("probes: ", table.concat(verdicts, " "), ", then ",
                        tostring(ngx_shared.deletes_at_once(d)))

                -- the fallback keeps the owner check: a stale object's
                -- unlock() and expire() leave the new holder's lock alone
                for _, how in ipairs({ "unlock", "expire" }) do
                    local holder = assert(resty_lock:new("x"))
                    local stale = assert(resty_lock:new("x"))
                    assert(stale:lock(how) == 0)
                    d:delete(how)               -- as if stale's expired
                    assert(holder:lock(how) == 0)
                    local v, f = d:get(how)
                    local a, b = stale[how](stale, 10)
                    local v2, f2 = d:get(how)
                    ngx.say(how, ": ", tostring(a), " ", tostring(b),
                            ", untouched: ", v2 == v and f2 == f)
                    ngx.say("holder: ", tostring(holder:expire(10)), " ",
                            holder:unlock(), " ", tostring(d:get(how)))
                end
                ngx.say("keys left: ", #d:get_keys(0))
            }
        }
EOF
);
$t->start;
$t->block("a probe that fails: get and delete; probed again a second "
          . "later; after the third, a notice",
    request => "GET /t",
    body    => "probes: false/false false/false false/false, then false\n"
             . "unlock: 1 expired, untouched: true\nholder: true 1 nil\n"
             . "expire: nil expired, untouched: true\nholder: true 1 nil\n"
             . "keys left: 0\n");
my @notices = grep { /unlock compares with get/ } $t->log_entries(0);
is(scalar @notices, 1, "one notice") or diag(explain \@notices);
like($notices[0] // '', qr/\[notice\].*shmlock: lua_shared_dict "x": unlock compares with get, then deletes \(the test build's probe was told to fail\)/,
     "the notice names the dict and the cause");
$t->stop;

done_testing;
