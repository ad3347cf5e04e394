# A full ngx.shared dict does not refuse a lock that resty.lock would take:
# as resty.lock's add, our lock evicts least recently used entries to make
# room.  The layout is lua-resty-mlcache's: cached values (set) and the
# locks in one small lua_shared_dict.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use ShmTest;

my $t = ShmTest->new(
    workers => 1,
    init_by_lua => <<'EOF',
        -- fills ngx.shared.cache with set() values, large ones first, until
        -- not even a 1-byte value fits without evicting; returns the count
        function fill()
            local d = ngx.shared.cache
            d:flush_all()
            d:flush_expired()
            local n = 0
            for _, size in ipairs({ 3000, 1000, 200, 50, 1 }) do
                local v = string.rep("x", size)
                while d:safe_set("value:" .. n, v) do
                    n = n + 1
                end
            end
            return n
        end
EOF
    http_config => <<'EOF',
    lua_shared_dict cache 100k;
EOF
    config => <<'EOF',
        location = /t {
            content_by_lua_block {
                local d = ngx.shared.cache
                local key = "lua-resty-mlcache:lock:ns" .. ngx.var.arg_key

                -- what resty.lock does there: its add evicts (forcible)
                ngx.say("filled ", fill() > 20)
                ngx.say("safe_add: ", tostring(select(2, d:safe_add(key, true))))
                local ok, err, forcible = d:add(key, true)
                ngx.say("resty.lock's add: ", tostring(ok), " ", tostring(err),
                        " ", tostring(forcible))

                -- ours, on the same full dict
                local n = fill()
                local lock = assert(resty_lock:new("cache"))
                ngx.say("lock: ", tostring(lock:lock(key)))
                -- our owner: a number, or for this 55-byte key a compact
                -- token (resty.shmlock.lock.ngx_shared, "The value")
                local v = d:get(key)
                ngx.say("owner stored: ", ngx.var.arg_key == "a"
                        and type(v) == "number"
                        or type(v) == "string" and #v == 3)
                local evicted = 0
                for i = 0, n - 1 do
                    if d:get("value:" .. i) == nil then
                        evicted = evicted + 1
                    end
                end
                ngx.say("values evicted: ", evicted > 0)
                ngx.say("unlock: ", tostring(lock:unlock()))
                d:flush_all()
            }
        }
EOF
);
$t->start;

for my $key ("a", "abcdefghijabcdefghijabcdefghij") {
    $t->block("a full ngx.shared dict: lock('$key') is taken at once, as"
              . " resty.lock's add, by evicting LRU values",
        request => "GET /t?key=$key",
        body    => <<'EOF');
filled true
safe_add: no memory
resty.lock's add: true nil true
lock: 0
owner stored: true
values evicted: true
unlock: 1
EOF
}

$t->stop;
done_testing;
