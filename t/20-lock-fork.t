# A lock taken in init_by_lua (in the master) is inherited by every
# worker nginx forks from it, as a copy of the lock object: the copy is
# not a holder in the worker, whatever method is called, on a zone and on
# an ngx.shared dict alike.  The master keeps the lock: no worker frees,
# extends or takes it (docs/lock.md, "Across fork").
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use ShmTest;

my $t = ShmTest->new(
    workers => 2,
    zone => 'forked',
    http_config => <<'EOF',
    lua_shared_dict shared 1m;
EOF
    init_by_lua => <<'EOF',
        -- the master locks "k" in both stores, for good
        T.locks = {
            zone = assert(resty_lock:new(T.zone, { exptime = 0 })),
            shared = assert(resty_lock:new("shared", { exptime = 0 })),
        }
        T.dicts = { zone = T.zone, shared = ngx.shared.shared }
        T.before = {}
        for store, lock in pairs(T.locks) do
            assert(lock:lock("k") == 0)
            T.before[store] = T.dicts[store]:get("k")
        end
EOF
    config => <<'EOF',
        location = /inherited {
            content_by_lua_block {
                local store = ngx.var.arg_store
                local lock, dict = T.locks[store], T.dicts[store]
                local fmt = T.fmt
                ngx.say("owned ", fmt(lock:owned()))
                ngx.say("unlock ", fmt(lock:unlock()))
                ngx.say("expire ", fmt(lock:expire(100)))
                ngx.say("lock ", fmt(lock:lock("k", 0)))
                ngx.say("value kept ", fmt(dict:get("k") == T.before[store]))
                local other = assert(resty_lock:new(store == "zone"
                                                    and T.zone or store))
                ngx.say("other ", fmt(other:lock("k", 0)))
                ngx.say("copy locks k2 ", fmt(lock:lock("k2")),
                        " ", fmt(lock:unlock()))
            }
        }
EOF
);
$t->start;

my $expected = <<'EOF';
owned false
unlock nil unlocked
expire nil unlocked
lock nil timeout
value kept true
other nil timeout
copy locks k2 0 1
EOF

for my $store ("zone", "shared") {
    # enough requests to reach both workers, each more than once
    for my $i (1 .. 6) {
        my $r = $t->get("/inherited?store=$store");
        is($r->{status}, 200, "$store #$i: status");
        is($r->{body}, $expected, "$store #$i: the copy holds nothing");
    }
}

$t->stop;
done_testing;
