# resty.shmlock.cache inside nginx: 10,000 distinct keys missing at once
# in a 10 MiB zone (issue 34).  Each miss holds its key's lock while its
# loader runs; the loaders do not return before every key's loader has
# started (a count in a zone of its own), so all 10,000 locks are held at
# once whatever the machine's speed.  Before the lock slots could spill
# into the zone's memory, a 10 MiB zone held about 3,300 locks and the
# rest answered "could not acquire lock: no memory" (6,416 errors); now
# every get answers its value, each loader runs once, and the zone still
# verifies.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use ShmTest;

my $K = 10000;

# (a request spawns 5,000 light threads: slow on a loaded machine)
$ShmTest::HTTP_TIMEOUT = 120;

my $t = ShmTest->new(
    workers => 2,
    zone => "cache-burst-count",
    init_by_lua => <<'EOF',
        local shdict = require "resty.shmlock.shdict"
        local cache = require "resty.shmlock.cache"
        T.values = assert(shdict.open("cache-burst", { size = "10m" }))
        T.c = assert(cache.new("cache-burst-c", {
            dict = T.values, lock_opts = { timeout = 60 } }))
        -- counts its calls; returns once every key's loader has started
        -- (k of them), 60 s at most
        function T.loader(key, k)
            T.zone:incr("started", 1, 0)
            T.zone:incr("calls:" .. key, 1, 0)
            local deadline = ngx.now() + 60
            while (T.zone:get("started") or 0) < k and ngx.now() < deadline
            do
                ngx.sleep(0.01)
            end
            ngx.sleep(0.3)
            return "v:" .. key
        end
EOF
    config => <<'EOF',
        # every key of [from, to) in a light thread of its own:
        # "<ok> <errors> <first error>"
        location = /burst {
            content_by_lua_block {
                local from = tonumber(ngx.var.arg_from)
                local to = tonumber(ngx.var.arg_to)
                local k = tonumber(ngx.var.arg_k)
                local threads = {}
                for i = from, to - 1 do
                    threads[#threads + 1] = ngx.thread.spawn(function()
                        local key = "key" .. i
                        local v, err = T.c:get(key, nil, T.loader, key, k)
                        if v ~= "v:" .. key then
                            return tostring(err)
                        end
                    end)
                end
                local ok, errors, first = 0, 0, "none"
                for _, th in ipairs(threads) do
                    local _, err = ngx.thread.wait(th)
                    if err then
                        errors = errors + 1
                        first = first == "none" and err or first
                    else
                        ok = ok + 1
                    end
                end
                ngx.say(ok, " ", errors, " ", first)
            }
        }
        # loaders that ran more than once, and the zone's check
        location = /check {
            content_by_lua_block {
                local twice = 0
                for i = 0, tonumber(ngx.var.arg_k) - 1 do
                    if T.zone:get("calls:key" .. i) ~= 1 then
                        twice = twice + 1
                    end
                end
                ngx.say(twice, " ", tostring(T.values:verify()))
            }
        }
EOF
);
$t->start;

# half the keys in each of two requests at once (the kernel spreads them
# over the workers)
my $half = $K / 2;
my @res = ShmTest::parallel(2, sub {
    my $i = shift;
    return $t->get("/burst?from=" . ($i * $half) . "&to=" . (($i + 1) * $half)
                   . "&k=$K");
}, timeout => 120);
is(join("", map { $_->{body} // "no answer: " . ($_->{status} // "?") . "\n" }
                @res),
   "$half 0 none\n$half 0 none\n",
   "$K keys missing at once: every get answers its value, no error");
is($t->get("/check?k=$K")->{body}, "0 true\n",
   "each loader ran once; the zone verifies");

$t->stop;
done_testing;
