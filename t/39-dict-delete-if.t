# The drop-in's release on a lua_shared_dict is one compare-and-delete
# under the dict's own mutex (shmlock_ngx_dict_delete_if, src/
# shmlock_ngx_dict.c), and its expire() one compare-and-replace
# (shmlock_ngx_dict_replace_if), used only after a probe entry checked
# that file's picture of lua-nginx-module's structures in the running
# nginx.  Here: it is on in Debian's nginx; the probe refuses what is not
# where it expects (so a changed layout is caught, not trusted);
# delete_if and replace_if change only the number and flags asked,
# unexpired, and leave everything else;
# the lock on it keeps 2 workers' counter exact; a dict too full for the
# probe entry is released by get and delete and probed again later; and
# SHMLOCK_NGX_DELETE_IF=off turns it off.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use ShmTest qw(hammer);

my $CLIENTS  = 8;     # client processes
my $REQUESTS = 40;    # requests per client

my $http_config = <<'EOF';
    lua_shared_dict x 1m;
    lua_shared_dict counters 1m;
    lua_shared_dict small 64k;
EOF

my $config = <<'EOF';
        location = /on {
            content_by_lua_block {
                local ngx_shared = require "resty.shmlock.lock.ngx_shared"
                local d = ngx.shared.x
                d:flush_all()
                d:flush_expired()
                local free = d:free_space()
                ngx.say("direct: ", ngx_shared.direct(),
                        ", at once: ", ngx_shared.deletes_at_once(d))
                local lock = assert(resty_lock:new("x"))
                local bad = 0
                for i = 1, 2000 do
                    local key = "k" .. (i % 50)
                    if lock:lock(key) ~= 0 or lock:unlock() ~= 1
                       or d:get(key) ~= nil then
                        bad = bad + 1
                    end
                end
                ngx.say("bad pairs: ", bad)
                -- nothing left behind: no lock, no probe entry, no memory
                ngx.say("keys left: ", #d:get_keys(0),
                        ", free space kept: ", d:free_space() == free)
            }
        }

        # expire() on the drop-in: one compare-and-replace; a stale object's
        # leaves the holder's entry alone
        location = /expire {
            content_by_lua_block {
                local d = ngx.shared.x
                d:flush_all()
                local holder = assert(resty_lock:new("x", { exptime = 30 }))
                assert(holder:lock("e") == 0)
                local v, f = d:get("e")
                ngx.say("expire: ", holder:expire(100), " ttl ",
                        math.floor(d:ttl("e") + 0.5))
                local v2, f2 = d:get("e")
                ngx.say("a new owner stored: ", v2 ~= v or f2 ~= f,
                        ", owned: ", holder:owned())
                local stale = assert(resty_lock:new("x", { exptime = 30 }))
                assert(stale:lock("s") == 0)
                d:delete("s")                   -- as if stale's expired
                assert(holder:unlock() == 1)
                assert(holder:lock("s") == 0)
                local v3, f3 = d:get("s")
                local a, b = stale:expire(10)
                ngx.say("stale: ", tostring(a), " ", tostring(b))
                local v4, f4 = d:get("s")
                ngx.say("untouched: ", v4 == v3 and f4 == f3, " ttl ",
                        math.floor(d:ttl("s") + 0.5))
                ngx.say("unlock: ", holder:unlock(), " ", tostring(d:get("s")))
            }
        }

        # the C calls themselves, on entries made by lua-nginx-module
        location = /calls {
            content_by_lua_block {
                local ffi = require "ffi"
                local lib = require "resty.shmlock.lib"
                require "resty.core.shdict"
                local d = ngx.shared.x
                d:flush_all()
                local z = ffi.C.ngx_http_lua_ffi_shdict_udata_to_zone(d[1])
                local why = ffi.new("const char *[1]")
                local function probe(key, v, f, ms)
                    local rc = lib.shmlock_ngx_dict_probe(z, key, #key, v, f,
                                                          ms, why)
                    return rc == 0 and "ok" or ffi.string(why[0])
                end
                local function del(key, v, f)
                    return lib.shmlock_ngx_dict_delete_if(z, key, #key, v, f)
                end
                assert(d:add("p", 1.5, 3600, 7))
                ngx.say("right: ", probe("p", 1.5, 7, 3600000))
                ngx.say("flags: ", probe("p", 1.5, 8, 3600000))
                ngx.say("value: ", probe("p", 2.5, 7, 3600000))
                ngx.say("expiry: ", probe("p", 1.5, 7, 60000))
                ngx.say("absent: ", probe("q", 1.5, 7, 3600000))
                assert(d:set("s", "12345678", 3600, 7))
                ngx.say("a string: ", probe("s", 1.5, 7, 3600000))
                -- delete_if: only the number and flags asked
                ngx.say("wrong flags: ", del("p", 1.5, 8), " ", (d:get("p")))
                ngx.say("wrong value: ", del("p", 1, 7), " ", (d:get("p")))
                ngx.say("a string: ", del("s", 1.5, 7), " ", (d:get("s")))
                ngx.say("absent: ", del("q", 1.5, 7))
                ngx.say("right: ", del("p", 1.5, 7), " ", tostring(d:get("p")))
                ngx.say("again: ", del("p", 1.5, 7))
                -- keys that share a prefix, and many keys around: the walk
                -- finds each one in the tree
                local n, wrong = 300, 0
                for i = 1, n do
                    assert(d:set("w" .. i, i, 0, i))
                    assert(d:set("w" .. i .. "x", i, 0, i))
                end
                for i = 1, n do
                    if del("w" .. i, i, i) ~= 1 or d:get("w" .. i) ~= nil
                       or d:get("w" .. i .. "x") ~= i then
                        wrong = wrong + 1
                    end
                end
                ngx.say("walk: ", wrong, " wrong, left ", #d:get_keys(0))
                -- replace_if: the same checks; in place, with a new expiry
                local function rep(key, v, f, v2, f2, ms)
                    return lib.shmlock_ngx_dict_replace_if(z, key, #key, v, f,
                                                           v2, f2, ms)
                end
                assert(d:set("r", 4.5, 0, 9))
                ngx.say("replace, wrong flags: ", rep("r", 4.5, 8, 5.5, 10,
                                                      60000),
                        " ", (d:get("r")))
                ngx.say("replace, a string: ", rep("s", 4.5, 7, 5.5, 10, 0),
                        " ", (d:get("s")))
                ngx.say("replace: ", rep("r", 4.5, 9, 5.5, 10, 60000), " ",
                        table.concat({ d:get("r") }, " "), " ttl ",
                        math.floor(d:ttl("r") + 0.5))
                ngx.say("replace, never: ", rep("r", 5.5, 10, 6.5, 11, 0),
                        " ", d:ttl("r"))
                ngx.say("replace, the old value: ", rep("r", 5.5, 10, 1, 1, 0))
                -- an expired entry is not ours to delete or replace (get
                -- sees none)
                assert(d:set("e", 3, 0.001, 0))
                ngx.sleep(0.01)
                ngx.say("expired: ", del("e", 3, 0), " ", rep("e", 3, 0, 4, 0,
                                                              0))
                -- a list is never deleted
                assert(d:lpush("l", 1))
                ngx.say("a list: ", del("l", 1, 0), " ", d:llen("l"))
            }
        }

        # lock, read, yield, write read+1, unlock: answers "pid waited"
        location = /incr {
            content_by_lua_block {
                local d = ngx.shared.counters
                local lock = assert(resty_lock:new("counters",
                                                   { timeout = 30 }))
                local elapsed, err = lock:lock("lock-c")
                if not elapsed then
                    ngx.status = 500
                    return ngx.say("lock: ", err)
                end
                local n = d:get("c") or 0
                ngx.sleep(0.001)
                assert(d:set("c", n + 1))
                local ok, uerr = lock:unlock()
                if ok ~= 1 or uerr then
                    ngx.status = 500
                    return ngx.say("unlock: ", tostring(ok), " ",
                                   tostring(uerr))
                end
                ngx.say(ngx.worker.pid(), " ", elapsed > 0)
            }
        }
        location = /count {
            content_by_lua_block {
                local ngx_shared = require "resty.shmlock.lock.ngx_shared"
                local d = ngx.shared.counters
                ngx.say(d:get("c"), " ", ngx_shared.deletes_at_once(d))
            }
        }

        # a dict too full for the probe entry (safe_add): released by get
        # and delete meanwhile; probed again a second later
        location = /full {
            content_by_lua_block {
                local ngx_shared = require "resty.shmlock.lock.ngx_shared"
                local d = ngx.shared.small
                d:flush_all()
                d:flush_expired()
                local lock = assert(resty_lock:new("small"))
                ngx.say("lock: ", lock:lock("k"))
                -- then full: not even a 1-byte value fits without evicting
                local n = 0
                for _, size in ipairs({ 3000, 1000, 200, 50, 1 }) do
                    local v = string.rep("x", size)
                    while d:safe_set("v" .. n, v) do
                        n = n + 1
                    end
                end
                ngx.say("unlock: ", lock:unlock(), " ", tostring(d:get("k")))
                ngx.say("at once: ", ngx_shared.deletes_at_once(d))
                d:flush_all()
                d:flush_expired()
                ngx.say("at once, at once: ", ngx_shared.deletes_at_once(d))
                ngx.sleep(1.1)
                ngx.say("a second later: ", ngx_shared.deletes_at_once(d))
                ngx.say("keys left: ", #d:get_keys(0))
            }
        }
EOF

my $t = ShmTest->new(workers => 2, http_config => $http_config,
                     config => $config);
$t->start;

$t->block("Debian's nginx: the release is one compare-and-delete; 2000 "
          . "pairs leave nothing behind",
    request => "GET /on",
    body    => "direct: true, at once: true\nbad pairs: 0\n"
             . "keys left: 0, free space kept: true\n");

$t->block("the probe refuses what is not where it expects; delete_if "
          . "deletes only the number and flags asked",
    request => "GET /calls",
    body    => "right: ok\n"
             . "flags: the probe entry's value or flags are not where expected\n"
             . "value: the probe entry's value or flags are not where expected\n"
             . "expiry: the probe entry's expiry is not where expected\n"
             . "absent: the probe entry was not found\n"
             . "a string: the probe entry's value or flags are not where expected\n"
             . "wrong flags: 0 1.5\nwrong value: 0 1.5\na string: 0 12345678\n"
             . "absent: 0\nright: 1 nil\nagain: 0\n"
             . "walk: 0 wrong, left 301\n"
             . "replace, wrong flags: 0 4.5\nreplace, a string: 0 12345678\n"
             . "replace: 1 5.5 10 ttl 60\nreplace, never: 1 0\n"
             . "replace, the old value: 0\n"
             . "expired: 0 0\na list: 0 1\n");

$t->block("expire() on the drop-in: one compare-and-replace; a stale "
          . "object's leaves the holder's entry alone",
    request => "GET /expire",
    body    => "expire: true ttl 100\na new owner stored: true, owned: true\n"
             . "stale: nil expired\nuntouched: true ttl 30\nunlock: 1 nil\n");

subtest "2 workers, $CLIENTS x $REQUESTS locked increments of a counter "
      . "in a lua_shared_dict: exact" => sub {
    my ($ok, $pids, $waited, $bad) =
        hammer($t, $CLIENTS, $REQUESTS, "/incr");
    is($ok, $CLIENTS * $REQUESTS, "every request succeeded")
        or diag(join '', @$bad[0 .. ($#$bad < 5 ? $#$bad : 4)]);
    is(scalar keys %$pids, 2, "both workers served requests")
        or diag(explain $pids);
    cmp_ok($waited, '>', 0, "some requests had to wait ($waited)");
    # (the worker that answers /count has released through delete_if)
    is($t->get("/count")->{body}, ($CLIENTS * $REQUESTS) . " true\n",
       "exact count, released at once");
    $t->check_log("locked counter", nested => 1);
};
$t->stop;

my $t1 = ShmTest->new(workers => 1, http_config => $http_config,
                      config => $config);
$t1->start;
$t1->block("a dict too full for the probe entry: get and delete, probed "
           . "again a second later",
    request => "GET /full",
    body    => "lock: 0\nunlock: 1 nil\nat once: false\n"
             . "at once, at once: false\na second later: true\n"
             . "keys left: 0\n");
$t1->stop;

my $off = ShmTest->new(workers => 1, http_config => $http_config,
                       config => $config,
                       main_config => "env SHMLOCK_NGX_DELETE_IF=off;");
$off->start;
$off->block("SHMLOCK_NGX_DELETE_IF=off: get and delete, as before",
    request => "GET /on",
    body    => "direct: true, at once: false\nbad pairs: 0\n"
             . "keys left: 0, free space kept: true\n");
$off->stop;

done_testing;
