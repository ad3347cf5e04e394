# lua-resty-mlcache's use of resty.lock, written in our words (mlcache
# itself is not needed): our lock must serve it as resty.lock does.
#
# 1. A loader that outlasts the lock's exptime.  mlcache's get() locks the
#    key, runs the callback, then unlock()s and drops the value unless
#    unlock answers a true first value.  Request A's lock expires while its
#    callback runs, request B takes the key meanwhile: A's unlock() must
#    answer 1 (and "expired"), and leave B's lock alone.
# 2. A full lua_shared_dict shared by the cached values and the locks
#    (mlcache's default: shm_locks = shm).  Filled by set() of small values
#    until set evicts, as mlcache's tests do (then a large set that fails,
#    as a value too large to cache): wherever resty.lock's add(key, true)
#    still succeeds, so must our lock(), for every key length (a token
#    longer than `true` needed the next slab size class: "no memory").
#    In such a dict the token may be stored compact: it still tells owners
#    apart.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use ShmTest;

my $t = ShmTest->new(
    workers => 1,
    zone => 'mlc',
    # 64k: /full fills it 2400 times (the smallest slab pages behave as a
    # 1m dict's: resty.lock's add takes the same 118 of the 600 keys)
    http_config => <<'EOF',
    lua_shared_dict cache_shm 64k;
EOF
    init_by_lua => <<'EOF',
        -- mlcache's lock keys: a prefix, the cache's name, the key
        function T.key(len)
            local k = "lua-resty-mlcache:lock:my_mlcache"
            return (k .. string.rep("k", len)):sub(1, len)
        end

        -- fills cache_shm as mlcache's tests do: set(idx, value) until set
        -- evicts; then, if `large`, a set too large to fit (it fails)
        function T.fill(size, large)
            local d = ngx.shared.cache_shm
            d:flush_all()
            d:flush_expired()
            local idx = 0
            while true do
                local ok, err, forcible = d:set(idx, string.rep("a", size))
                if not ok then
                    error("fill: " .. tostring(err))
                end
                if forcible then
                    break
                end
                idx = idx + 1
            end
            if large then
                assert(not d:set("large", string.rep("a", 2^20)))
            end
        end

        -- two light threads, as two requests for one key: A's lock
        -- expires during its "callback", B takes the key, A unlocks
        -- while B holds it.  Returns what each unlock answered and
        -- whether B still held the key at A's unlock.
        function T.outlast(store, key)
            local a = assert(resty_lock:new(store, { exptime = 0.1 }))
            local b = assert(resty_lock:new(store, { exptime = 30,
                                                     timeout = 10 }))
            assert(a:lock(key) == 0)
            local b_holds, a_done = false, false
            local res = {}
            local tb = ngx.thread.spawn(function()
                -- waits until A's lock expires (exptime 0.1 s; timeout 10)
                local elapsed, err = b:lock(key)
                if not elapsed then
                    return "B lock: " .. tostring(err)
                end
                b_holds = true
                for _ = 1, 10000 do
                    if a_done then
                        break
                    end
                    ngx.sleep(0.001)
                end
                local ok, uerr = b:unlock()
                return "B unlock: " .. tostring(ok) .. " " .. tostring(uerr)
            end)
            -- A's callback: runs until B has the key (A's lock expired)
            for _ = 1, 10000 do
                if b_holds then
                    break
                end
                ngx.sleep(0.001)
            end
            local ok, err = a:unlock()
            res[1] = "A unlock: " .. tostring(ok) .. " " .. tostring(err)
            res[2] = "B owned at A's unlock: " .. tostring(b:owned())
            a_done = true
            local _, r = ngx.thread.wait(tb)
            res[3] = r
            return table.concat(res, "\n")
        end
EOF
    config => <<'EOF',
        location = /outlast {
            content_by_lua_block {
                local store = ngx.var.arg_store
                local key = T.key(tonumber(ngx.var.arg_len))
                ngx.say(T.outlast(store, key))
            }
        }

        # every key length: our lock() succeeds where resty.lock's
        # add(key, true) does, in the same freshly filled dict
        location = /full {
            content_by_lua_block {
                local d = ngx.shared.cache_shm
                local large = ngx.var.arg_large == "1"
                local lock = assert(resty_lock:new("cache_shm"))
                local theirs, ours, refused = 0, 0, {}
                for _, size in ipairs({ 4, 32 }) do
                    for len = 1, 300 do
                        local key = T.key(len)
                        T.fill(size, large)
                        local ok = d:add(key, true)
                        if ok then
                            theirs = theirs + 1
                        end
                        T.fill(size, large)
                        local elapsed, err = lock:lock(key)
                        if elapsed then
                            ours = ours + 1
                            assert(lock:unlock() == 1)
                        elseif ok then
                            refused[#refused + 1] = size .. "/" .. len
                                                    .. ": " .. tostring(err)
                        end
                    end
                end
                d:flush_all()
                -- (how many depends on nginx's allocator: keys up to
                -- 59 bytes get a node of 128 bytes, of the values' class)
                ngx.say("resty.lock's add took some: ", theirs >= 100)
                ngx.say("ours took as many: ", ours == theirs)
                ngx.say("refused where add took: ",
                        table.concat(refused, ", "))
            }
        }

        # a compact token still tells owners apart: for key lengths whose
        # room in resty.lock's size class is 1, 2, 3 bytes and more, an
        # "expired" holder (its entry deleted) neither releases nor
        # extends the next holder's lock; inspect sees our pid
        location = /owners {
            content_by_lua_block {
                local d = ngx.shared.cache_shm
                d:flush_all()
                local bad = {}
                local short = { [58] = true, [59] = true, [186] = true,
                                [187] = true }
                for _, len in ipairs({ 1, 20, 57, 58, 59, 60, 100, 186,
                                       187, 188, 300 }) do
                    local key = T.key(len)
                    local l0 = assert(resty_lock:new("cache_shm"))
                    local l1 = assert(resty_lock:new("cache_shm"))
                    local l2 = assert(resty_lock:new("cache_shm"))
                    assert(l0:lock(key) == 0)
                    d:delete(key)             -- as if l0's lock expired
                    assert(l1:lock(key) == 0)
                    local info = resty_lock.inspect("cache_shm", key)
                    -- (room for 1 or 2 bytes: no pid kept)
                    if not short[len]
                       and (not info or info.pid ~= ngx.worker.pid()
                            or not info.alive) then
                        bad[#bad + 1] = len .. ": inspect"
                    end
                    d:delete(key)             -- as if l1's lock expired
                    assert(l2:lock(key) == 0)
                    local v, f = d:get(key)
                    local a, b = l0:expire(10)
                    local c, e = l1:unlock()
                    if a ~= nil or b ~= "expired" or c ~= 1
                       or e ~= "expired" or not l2:owned() then
                        bad[#bad + 1] = len .. ": stale touched"
                    end
                    local v2, f2 = d:get(key)
                    if v2 ~= v or f2 ~= f then
                        bad[#bad + 1] = len .. ": value changed"
                    end
                    assert(l2:expire(10))
                    if l2:unlock() ~= 1 or d:get(key) ~= nil then
                        bad[#bad + 1] = len .. ": release"
                    end
                end
                ngx.say("bad: ", table.concat(bad, ", "))
            }
        }
EOF
);
$t->start;

for my $store ('cache_shm', 'mlc') {
    for my $len (20, 45) {
        $t->block("a loader outlasting exptime ($store, key of $len bytes):"
                  . " unlock answers 1, 'expired', B's lock untouched",
            request => "GET /outlast?store=$store&len=$len",
            body    => <<'EOF');
A unlock: 1 expired
B owned at A's unlock: true
B unlock: 1 nil
EOF
    }
}

for my $large (0, 1) {
    $t->block("a full lua_shared_dict (large set: $large): lock() succeeds"
              . " wherever resty.lock's add does",
        request => "GET /full?large=$large",
        # (1200 fills of the dict: seconds on a loaded box)
        timeout => 120,
        body    => <<'EOF');
resty.lock's add took some: true
ours took as many: true
refused where add took: 
EOF
}

$t->block("compact tokens tell owners apart",
    request => "GET /owners",
    body    => "bad: \n");

$t->stop;
done_testing;
