# Lists in a zone against ngx.shared.DICT's own, inside nginx: every case
# runs twice in the same request, on a lua_shared_dict and on a zone, and
# both must print what lua-nginx-module's list suite (t/145-shdict-list.t)
# says ngx.shared.DICT prints.  Then a seeded random sequence of list and
# plain operations runs on both, and every answer must be the same.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use ShmTest;

my $t = ShmTest->new(
    workers => 1,
    zone => "dogs_zone",
    zone_opts => '{ size = "1m" }',
    init_by_lua => <<'EOF',
        local fmt = string.format
        -- each case writes lines with say(...); d is the dict under test
        CASES = {}

        CASES.push_pop_one = function(d, say)
            say(d:lpush("foo", "bar"))
            say(d:llen("foo"))
            say(d:lpop("foo"))
            say(d:llen("foo"))
            say(d:lpop("foo"))
        end
        CASES.get = function(d, say)
            say(d:lpush("foo", "bar"))
            say(d:get("foo"))
            say(d:get_stale("foo"))
        end
        CASES.set = function(d, say)
            d:lpush("foo", "bar")
            say(d:set("foo", "bar"))
            say(d:get("foo"))
        end
        CASES.replace = function(d, say)
            d:lpush("foo", "bar")
            say(d:replace("foo", "baz"))
            say(d:get("foo"))
        end
        CASES.add = function(d, say)
            d:lpush("foo", "bar")
            say(d:add("foo", "bar"))
            say(d:get("foo"))
        end
        CASES.delete = function(d, say)
            d:lpush("foo", "bar")
            say(d:delete("foo"))
            say(d:get("foo"))
        end
        CASES.incr = function(d, say)
            d:lpush("foo", "bar")
            say(d:incr("foo", 1))
            say(d:get("foo"))
        end
        CASES.get_keys = function(d, say)
            d:lpush("foo", "bar")
            local keys = d:get_keys()
            say(#keys, keys[1])
        end
        CASES.on_value = function(d, say)
            say(d:set("foo", "bar"))
            say(d:lpush("foo", "bar"))
            say(d:rpush("foo", 1))
            say(d:lpop("foo"))
            say(d:rpop("foo"))
            say(d:llen("foo"))
            say(d:get("foo"))
        end
        CASES.order = function(d, say)
            for i = 1, 3 do
                say(d:lpush("lp", i), d:rpush("rp", i))
            end
            say(d:lpop("lp"), d:lpop("lp"), d:lpop("lp"))
            for i = 1, 3 do
                d:lpush("lp", i)
            end
            say(d:rpop("lp"), d:rpop("lp"), d:rpop("lp"))
            say(d:lpop("rp"), d:lpop("rp"), d:lpop("rp"))
        end
        CASES.bad_value = function(d, say)
            say(d:lpush("foo", true))
            say(d:rpush("foo", {}))
            say(d:llen("foo"))
        end
        -- pushes of new keys until the dict is full, then the same after
        -- flush_all (the expired lists give their room back) and after
        -- flush_expired
        CASES.expired_room = function(d, say)
            local N, max = 100000, 0
            for i = 1, N do
                if not d:lpush(fmt("%05d", i), i) then
                    max = i
                    break
                end
            end
            say("filled", max > 1, #d:get_keys(0) == max - 1)
            d:flush_all()
            say("left", #d:get_keys(0))
            for i = N, 1, -1 do
                if not d:lpush(fmt("%05d", i), i) then
                    say("again", N + 1 - i == max)
                    break
                end
            end
            d:flush_all()
            d:flush_expired()
            for i = 1, N do
                if not d:lpush(fmt("%05d", i), i) then
                    say("again", i == max)
                    break
                end
            end
        end
        -- set() evicts lists to make room, as it evicts values
        CASES.forcible = function(d, say)
            local max = 0
            for i = 1, 200000 do
                local ok, _, forcible = d:set(i, i)
                if not ok or forcible then
                    max = i
                    break
                end
            end
            say("two", d:get(2))
            d:flush_all()
            d:flush_expired()
            say("left", #d:get_keys(0))
            for i = 1, 200000 do
                if not d:lpush(fmt("%05d", i), i) then
                    break
                end
            end
            local failed = 0
            for i = 1, max do
                if not d:set(i, i) then
                    failed = failed + 1
                end
            end
            say("failed", failed, "two", d:get(2))
        end
        CASES.flush_all = function(d, say)
            d:lpush("list", "foo")
            d:set("key", "bar")
            say(#d:get_keys(0))
            d:flush_all()
            say(#d:get_keys(0))
        end
        CASES.long_elements = function(d, say)
            local s = string.rep("foo", 10)
            for _ = 1, 3 do
                d:lpush("list", s)
            end
            for _ = 1, 3 do
                say(d:lpop("list") == s)
            end
        end
        CASES.incr_expired = function(d, say)
            local long = string.rep("foo", 10 * 1024)
            local bad = 0
            for _ = 1, 100 do
                for j = 1, 10 do
                    if not d:lpush("list" .. j, long) then
                        bad = bad + 1
                    end
                end
                d:flush_all()
                for j = 10, 1, -1 do
                    if not d:incr("list" .. j, 1, 0) then
                        bad = bad + 1
                    end
                end
                d:flush_all()
            end
            say("failures", bad)
        end
        CASES.push_expired = function(d, say)
            d:lpush("cc", "1")
            d:lpush("aa", "1")
            d:lpush("aa", "0")
            say(d:expire("aa", 0.05))
            ngx.sleep(0.1)
            say(d:llen("aa"))
            say(d:lpush("aa", "2"))
            say(d:ttl("aa"))
            say(d:lpop("aa"))
            say(d:lpop("aa"))
        end

        -- a seeded sequence of operations, the same for both dicts: the
        -- answers, one line each
        function SEQUENCE(d, seed, steps)
            local x = seed
            local function rnd(n)          -- a small LCG: the same on both
                x = (x * 1103515245 + 12345) % 2147483648
                return x % n + 1
            end
            local out = {}
            local function put(...)
                local t = { n = select("#", ...), ... }
                for i = 1, t.n do
                    t[i] = tostring(t[i])
                end
                out[#out + 1] = table.concat(t, " ", 1, t.n)
            end
            for _ = 1, steps do
                local k = "k" .. rnd(12)
                local v = rnd(3) == 1 and rnd(100) or string.rep("v", rnd(90))
                local op = rnd(13)
                if op <= 2 then put("lpush", d:lpush(k, v))
                elseif op <= 4 then put("rpush", d:rpush(k, v))
                elseif op <= 6 then put("lpop", d:lpop(k))
                elseif op <= 8 then put("rpop", d:rpop(k))
                elseif op == 9 then put("llen", d:llen(k))
                elseif op == 10 then put("set", d:set(k, v))
                elseif op == 11 then put("get", d:get(k))
                elseif op == 12 then put("delete", d:delete(k))
                else put("incr", d:incr(k, 1, 0)) end
            end
            return out
        end
EOF
    http_config => <<'EOF',
    lua_shared_dict dogs 1m;
EOF
    config => <<'EOF',
        # runs case ?case= on ngx.shared.dogs, then on the zone
        location = /t {
            content_by_lua_block {
                local case = CASES[ngx.var.arg_case]
                for _, which in ipairs({ "ngx.shared", "zone" }) do
                    local d = which == "zone" and T.zone or ngx.shared.dogs
                    d:flush_all()
                    d:flush_expired()
                    ngx.say(which, ":")
                    case(d, function(...) ngx.say(T.fmt(...)) end)
                end
                ngx.say("verify: ", T.fmt(T.zone:verify()))
            }
        }
        location = /sequence {
            content_by_lua_block {
                local seed = tonumber(ngx.var.arg_seed)
                local got = {}
                for _, which in ipairs({ "ngx.shared", "zone" }) do
                    local d = which == "zone" and T.zone or ngx.shared.dogs
                    d:flush_all()
                    d:flush_expired()
                    got[which] = SEQUENCE(d, seed, 5000)
                end
                local a, b = got["ngx.shared"], got.zone
                for i = 1, #a do
                    if a[i] ~= b[i] then
                        ngx.say("step ", i, ": ngx.shared said ", a[i],
                                ", the zone ", b[i])
                        return
                    end
                end
                ngx.say("the same ", #a, " answers; verify: ",
                        T.fmt(T.zone:verify()))
            }
        }
EOF
);

$t->start;

# the expected lines, once for each dict
sub both {
    my ($lines) = @_;
    return "ngx.shared:\n$lines" . "zone:\n$lines" . "verify: true\n";
}

my @cases = (
    [ push_pop_one => "1\n1\nbar\n0\nnil\n" ],
    [ get => "1\nnil value is a list\nnil value is a list\n" ],
    [ set => "true nil false\nbar\n" ],
    [ replace => "true nil false\nbaz\n" ],
    [ add => "false exists false\nnil value is a list\n" ],
    [ delete => "true nil false\nnil\n" ],
    [ incr => "nil not a number\nnil value is a list\n" ],
    [ get_keys => "1 foo\n" ],
    [ on_value => "true nil false\nnil value not a list\n"
                . "nil value not a list\nnil value not a list\n"
                . "nil value not a list\nnil value not a list\nbar\n" ],
    [ order => "1 1\n2 2\n3 3\n3 2 1\n1 2 3\n1 2 3\n" ],
    [ bad_value => "nil bad value type\nnil bad value type\n0\n" ],
    [ expired_room => "filled true true\nleft 0\nagain true\nagain true\n" ],
    [ forcible => "two 2\nleft 0\nfailed 0 two 2\n" ],
    [ flush_all => "2\n0\n" ],
    [ long_elements => "true\ntrue\ntrue\n" ],
    [ incr_expired => "failures 0\n" ],
    [ push_expired => "true\n0\n1\n0\n2\nnil\n" ],
);

for my $c (@cases) {
    my ($name, $lines) = @$c;
    $t->block("lists: $name, on ngx.shared and on a zone",
              request => "GET /t?case=$name", body => both($lines));
}

for my $seed (1, 7, 2024) {
    $t->block("a random sequence (seed $seed): the same answers from both",
              request => "GET /sequence?seed=$seed",
              body => qr/^the same 5000 answers; verify: true$/m);
}

$t->stop;
done_testing();
