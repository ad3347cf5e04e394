# resty.shmlock.cache inside nginx: the L1 (lua-resty-lrucache) expires by
# the monotonic clock, as the zone does (docs/cache.md), not by ngx.now
# (the wall clock).  A wall clock stepped back one hour must not keep an
# expired value coming from L1.
#
# The machine's clock is not touched: in this nginx's Lua VM, ngx.now is
# replaced (init_by_lua) by the real one plus an offset the request sets
# to -3600 s, which is what ngx.now answers after such a step; and so is
# the copy of ngx.now that resty.lrucache took when it loaded (resty.core
# loads it before init_by_lua runs): the upvalue `ngx_now` of its
# functions.  The value's ttl (0.2 s) passes during a 0.5 s
# ngx.sleep (nginx's timers run by the monotonic clock); lateness only
# makes it more expired.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use ShmTest;

my $t = ShmTest->new(
    workers => 1,
    init_by_lua => <<'EOF',
        local wall_now = ngx.now
        T.offset = 0
        local function stepped()
            return wall_now() + T.offset
        end
        ngx.now = stepped
        local replaced = 0
        for _, fn in pairs(require "resty.lrucache") do
            if type(fn) == "function" then
                for i = 1, math.huge do
                    local name = debug.getupvalue(fn, i)
                    if name == nil then
                        break
                    end
                    if name == "ngx_now" then
                        debug.setupvalue(fn, i, stepped)
                        replaced = replaced + 1
                    end
                end
            end
        end
        assert(replaced > 0, "resty.lrucache has no ngx_now upvalue")
        local cache = require "resty.shmlock.cache"
        T.c = assert(cache.new("l1clock", { ttl = 0.2 }))
        T.loads = 0
        function T.loader()
            T.loads = T.loads + 1
            return "v" .. T.loads
        end
EOF
    config => <<'EOF',
        location = /t {
            content_by_lua_block {
                local function get()
                    local v, err, level = T.c:get("k", nil, T.loader)
                    ngx.say(T.fmt(v, err, level))
                end
                get()                   -- loaded
                get()                   -- from L1
                T.offset = -3600        -- the wall clock steps back 1 h
                ngx.sleep(0.5)          -- the value's 0.2 s pass
                get()                   -- expired: loaded again
                get()                   -- from L1
                T.offset = 0
            }
        }
EOF
);
$t->start;

$t->block("after the wall clock steps back, an expired value is not "
          . "served from L1",
          request => "GET /t",
          body => "v1 nil 3\nv1 nil 1\nv2 nil 3\nv2 nil 1\n");

$t->stop;
done_testing();
