-- Lists in a zone: lpush, rpush, lpop, rpop and llen with ngx.shared.DICT's
-- returns and error strings, checked case by case as lua-nginx-module's
-- list suite describes the behaviour (t/ runs the same operations against
-- a real ngx.shared dict and compares), then across processes: every
-- element pushed is popped exactly once.

local proc = require "harness.proc"
local fixture = require "helpers.fixture"
local checkout = require "helpers.checkout"
local shdict = require "resty.shmlock.shdict"

local pack = checkout.pack
local fmt = string.format

describe("resty.shmlock.shdict lists", function()
    local fx = fixture.new { children = "assert" }
    local d

    before_each(function()
        d = fx:zone("lists", { size = "1m" })
    end)

    describe("push and pop", function()
        it("pushes, counts and pops one element, then the key is gone",
           function()
            assert.same({ n = 1, 1 }, pack(d:lpush("foo", "bar")))
            assert.same({ n = 1, 1 }, pack(d:llen("foo")))
            assert.same({ n = 1, "bar" }, pack(d:lpop("foo")))
            assert.same({ n = 1, 0 }, pack(d:llen("foo")))
            assert.same({ n = 1, nil }, pack(d:lpop("foo")))
            assert.same({}, d:get_keys(0))
        end)

        it("keeps the order of each end", function()
            for i = 1, 3 do
                assert.equal(i, d:lpush("lp", i))
                assert.equal(i, d:rpush("rp", i))
            end
            assert.same({ 3, 2, 1 }, { d:lpop("lp"), d:lpop("lp"),
                                       d:lpop("lp") })
            assert.same({ 3, 2, 1 }, { d:rpop("rp"), d:rpop("rp"),
                                       d:rpop("rp") })
            for i = 1, 3 do
                d:lpush("l2", i)
                d:rpush("r2", i)
            end
            assert.same({ 1, 2, 3 }, { d:rpop("l2"), d:rpop("l2"),
                                       d:rpop("l2") })
            assert.same({ 1, 2, 3 }, { d:lpop("r2"), d:lpop("r2"),
                                       d:lpop("r2") })
        end)

        it("mixes both ends like a deque", function()
            d:rpush("q", "b")
            d:lpush("q", "a")
            d:rpush("q", "c")
            assert.equal(3, d:llen("q"))
            assert.same({ "c", "a", "b" }, { d:rpop("q"), d:lpop("q"),
                                             d:lpop("q") })
            assert.is_nil(d:rpop("q"))
        end)

        it("keeps numbers and strings apart, and long elements whole",
           function()
            local long = ("foo"):rep(10)
            local huge = ("x"):rep(70000)   -- beyond the first read buffer
            d:rpush("m", 1.5)
            d:rpush("m", "1.5")
            d:rpush("m", long)
            d:rpush("m", huge)
            d:rpush("m", "")
            d:rpush("m", -0.25)
            assert.same({ n = 1, 1.5 }, pack(d:lpop("m")))
            assert.same({ n = 1, "1.5" }, pack(d:lpop("m")))
            assert.same({ n = 1, -0.25 }, pack(d:rpop("m")))
            assert.same({ n = 1, "" }, pack(d:rpop("m")))
            assert.equal(huge, d:rpop("m"))
            assert.equal(long, d:lpop("m"))
            assert.is_nil(d:lpop("m"))
        end)

        it("answers the new length, however long the list", function()
            for i = 1, 1000 do
                assert.equal(i, (i % 2 == 0 and d.lpush or d.rpush)(d, "n", i))
            end
            assert.equal(1000, d:llen("n"))
            assert.same({ true }, { d:verify() })
        end)
    end)

    describe("with the other methods", function()
        before_each(function()
            assert.equal(1, d:lpush("foo", "bar"))
        end)

        it("get and get_stale: nil, \"value is a list\"", function()
            assert.same({ n = 2, nil, "value is a list" }, pack(d:get("foo")))
            assert.same({ n = 2, nil, "value is a list" },
                        pack(d:get_stale("foo")))
        end)

        it("set and replace put a value in its place", function()
            assert.same({ n = 3, true, nil, false }, pack(d:set("foo", "x")))
            assert.same({ n = 1, "x" }, pack(d:get("foo")))
            d:delete("foo")
            d:lpush("foo", "bar")
            assert.same({ n = 3, true, nil, false },
                        pack(d:replace("foo", "y")))
            assert.same({ n = 1, "y" }, pack(d:get("foo")))
        end)

        it("add: exists", function()
            assert.same({ n = 3, false, "exists", false },
                        pack(d:add("foo", "bar")))
            assert.same({ n = 2, nil, "value is a list" }, pack(d:get("foo")))
        end)

        it("delete removes it", function()
            assert.same({ n = 3, true, nil, false }, pack(d:delete("foo")))
            assert.same({ n = 1, nil }, pack(d:get("foo")))
            assert.same({ n = 1, 0 }, pack(d:llen("foo")))
        end)

        it("incr: not a number", function()
            assert.same({ n = 2, nil, "not a number" }, pack(d:incr("foo", 1)))
            assert.same({ n = 2, nil, "not a number" },
                        pack(d:incr("foo", 1, 0)))
            assert.same({ n = 2, nil, "value is a list" }, pack(d:get("foo")))
        end)

        it("cas and cad: changed (no value equals a list)", function()
            assert.same({ n = 3, nil, "changed", false },
                        pack(d:cas("foo", "bar", "baz")))
            assert.same({ n = 3, nil, "changed", false },
                        pack(d:cas("foo", nil, "baz")))
            assert.same({ n = 2, nil, "changed" }, pack(d:cad("foo", "bar")))
            assert.equal(1, d:llen("foo"))
        end)

        it("get_keys lists it", function()
            assert.same({ "foo" }, d:get_keys(0))
        end)

        it("ttl and expire work on it; a new list never expires", function()
            assert.same({ n = 1, 0 }, pack(d:ttl("foo")))
            assert.same({ n = 1, true }, pack(d:expire("foo", 100)))
            local ttl = d:ttl("foo")
            assert.is_true(ttl > 99 and ttl <= 100, tostring(ttl))
            -- a push onto a live list keeps its expiry
            assert.equal(2, d:rpush("foo", "baz"))
            assert.is_true(d:ttl("foo") > 99)
        end)

        it("push, pop and llen on a plain value: \"value not a list\"",
           function()
            d:set("kv", "bar")
            assert.same({ n = 2, nil, "value not a list" },
                        pack(d:lpush("kv", "x")))
            assert.same({ n = 2, nil, "value not a list" },
                        pack(d:rpush("kv", 1)))
            assert.same({ n = 2, nil, "value not a list" }, pack(d:lpop("kv")))
            assert.same({ n = 2, nil, "value not a list" }, pack(d:rpop("kv")))
            assert.same({ n = 2, nil, "value not a list" }, pack(d:llen("kv")))
            assert.same({ n = 1, "bar" }, pack(d:get("kv")))
        end)
    end)

    describe("expiry", function()
        it("treats an expired list as absent; a push makes a new one",
           function()
            d:rpush("aa", "1")
            d:rpush("aa", "2")
            assert.is_true((d:expire("aa", 0.01)))
            proc.sleep(0.02)
            assert.same({ n = 1, 0 }, pack(d:llen("aa")))
            assert.same({ n = 1, nil }, pack(d:lpop("aa")))
            assert.same({ n = 1, 1 }, pack(d:lpush("aa", "3")))
            assert.same({ n = 1, 0 }, pack(d:ttl("aa")))
            assert.same({ n = 1, "3" }, pack(d:rpop("aa")))
            assert.same({ n = 1, nil }, pack(d:rpop("aa")))
        end)

        it("pushes onto an expired plain value as onto nothing", function()
            d:set("kv", "old", 0.01)
            proc.sleep(0.02)
            assert.same({ n = 1, 1 }, pack(d:rpush("kv", "new")))
            assert.same({ n = 1, "new" }, pack(d:lpop("kv")))
        end)

        it("lets incr with init replace an expired list", function()
            local long = ("foo"):rep(10 * 1024)
            for _ = 1, 20 do
                for j = 1, 10 do
                    assert.is_number((d:lpush("list" .. j, long)))
                end
                d:flush_all()
                for j = 10, 1, -1 do
                    assert.same({ n = 3, 1, nil, false },
                                pack(d:incr("list" .. j, 1, 0)))
                end
                d:flush_all()
            end
            assert.same({ true }, { d:verify() })
        end)

        it("flush_all expires lists, flush_expired frees their memory",
           function()
            local empty = d:free_space()
            d:lpush("list", "foo")
            d:set("key", "bar")
            assert.equal(2, #d:get_keys(0))
            d:flush_all()
            assert.equal(0, #d:get_keys(0))
            assert.equal(2, d:flush_expired())
            assert.equal(empty, d:free_space())
        end)
    end)

    describe("memory", function()
        it("counts a list's elements in free_space, and gives them back",
           function()
            local empty = d:free_space()
            for i = 1, 200 do
                d:rpush("big", ("e"):rep(i))
            end
            local used = empty - d:free_space()
            -- 200 elements of 1..200 bytes: at least their bytes
            assert.is_true(used >= 200 * 201 / 2, tostring(used))
            for _ = 1, 100 do
                d:lpop("big")
                d:rpop("big")
            end
            assert.equal(empty, d:free_space())
            assert.same({ true }, { d:verify() })
        end)

        it("says \"no memory\" when full, never evicting a live entry for a "
           .. "push; an expired one makes room", function()
            local small = fx:zone("small", { size = "64k" })
            local n = 0
            while true do
                local len, err = small:lpush(fmt("%05d", n + 1), n + 1)
                if not len then
                    assert.equal("no memory", err)
                    break
                end
                n = n + 1
            end
            assert.is_true(n > 100)
            assert.equal(n, #small:get_keys(0))
            -- a longer list fails the same way, the lists all stay
            assert.same({ n = 2, nil, "no memory" },
                        pack(small:rpush("00001", ("z"):rep(2000))))
            assert.equal(n, #small:get_keys(0))
            -- once they expire, pushes of new keys find room again, as
            -- many as before
            small:flush_all()
            local again = 0
            for i = n + 100, 1, -1 do
                if not small:lpush(fmt("%05d", i), i) then
                    break
                end
                again = again + 1
            end
            assert.equal(n, again)
            assert.same({ true }, { small:verify() })
        end)

        it("lets set() evict lists like any set() value", function()
            local small = fx:zone("small", { size = "64k" })
            local max = 0
            for i = 1, 100000 do
                local ok, _, forcible = small:set(i, i)
                if not ok or forcible then
                    max = i
                    break
                end
            end
            assert.is_true(max > 0)
            small:flush_all()
            small:flush_expired()
            assert.same({}, small:get_keys(0))
            for i = 1, 100000 do
                if not small:lpush(fmt("%05d", i), i) then
                    break
                end
            end
            for i = 1, max do
                local ok, err = small:set(i, i)
                assert.is_true(ok, err)
            end
            assert.equal(2, small:get(2))
            assert.same({ true }, { small:verify() })
        end)
    end)

    describe("bad input", function()
        it("answers nil and the message for a bad key", function()
            for _, f in ipairs { "lpush", "rpush" } do
                assert.same({ n = 2, nil, "nil key" }, pack(d[f](d, nil, 1)))
                assert.same({ n = 2, nil, "empty key" }, pack(d[f](d, "", 1)))
                assert.same({ n = 2, nil, "key too long" },
                            pack(d[f](d, ("k"):rep(65536), 1)))
            end
            for _, f in ipairs { "lpop", "rpop", "llen" } do
                assert.same({ n = 2, nil, "nil key" }, pack(d[f](d, nil)))
                assert.same({ n = 2, nil, "empty key" }, pack(d[f](d, "")))
                assert.same({ n = 2, nil, "key too long" },
                            pack(d[f](d, ("k"):rep(65536))))
            end
        end)

        it("takes numbers and strings only: \"bad value type\"", function()
            for _, v in ipairs { true, false, {}, print } do
                assert.same({ n = 2, nil, "bad value type" },
                            pack(d:lpush("t", v)))
            end
            assert.same({ n = 2, nil, "bad value type" },
                        pack(d:rpush("t", nil)))
            assert.same({ n = 1, 0 }, pack(d:llen("t")))
        end)

        it("raises on a call that is not a method call", function()
            assert.has_error(function() d.lpush("foo", "bar") end,
                             'bad "zone" argument')
            assert.has_error(function() d.llen() end, 'bad "zone" argument')
        end)

        it("answers \"zone destroyed\" once the zone is gone", function()
            local z = fx:zone("doomed", { size = "64k" })
            z:rpush("l", 1)
            assert.is_true((shdict.destroy("doomed", { dir = fx.dir })))
            assert.same({ n = 2, nil, "zone destroyed" }, pack(z:rpush("l", 2)))
            assert.same({ n = 2, nil, "zone destroyed" }, pack(z:lpop("l")))
            assert.same({ n = 2, nil, "zone destroyed" }, pack(z:llen("l")))
        end)
    end)

    it("hands every element pushed by 4 processes to exactly one of 4 "
       .. "poppers", function()
        local PUSHERS, POPPERS, N = 4, 4, 3000
        local q = fx:zone("queue", { size = "4m", shards = 4 })
        local start = proc.pipe()
        local pushers, poppers = {}, {}
        for p = 1, PUSHERS do
            pushers[p] = proc.spawn(function()
                if not start:wait_release(10) then
                    error("never released")
                end
                for i = 1, N do
                    local push = i % 2 == 0 and q.lpush or q.rpush
                    local len, err = push(q, "jobs", p .. ":" .. i)
                    if not len then
                        error("push: " .. tostring(err))
                    end
                end
            end)
        end
        -- each popper writes what it got to its own file
        for c = 1, POPPERS do
            poppers[c] = proc.spawn(function()
                if not start:wait_release(10) then
                    error("never released")
                end
                local out = assert(io.open(fx.dir .. "/got" .. c, "w"))
                local deadline = proc.now() + 30
                while not q:get("done") or q:llen("jobs") > 0 do
                    if proc.now() > deadline then
                        error("never finished")
                    end
                    local v, err = (c % 2 == 0 and q.lpop or q.rpop)(q, "jobs")
                    if err then
                        error("pop: " .. err)
                    end
                    if v then
                        out:write(v, "\n")
                    end
                end
                out:close()
            end)
        end
        start:release()
        start:close()
        for i, r in ipairs(proc.wait_all(pushers, 60)) do
            assert.same({ "exit", 0 }, { r.how, r.code }, "pusher " .. i)
        end
        assert.is_true((q:set("done", true)))
        for i, r in ipairs(proc.wait_all(poppers, 60)) do
            assert.same({ "exit", 0 }, { r.how, r.code }, "popper " .. i)
        end

        local seen, total = {}, 0
        for c = 1, POPPERS do
            for line in io.lines(fx.dir .. "/got" .. c) do
                assert.is_nil(seen[line], line .. " popped twice")
                seen[line] = true
                total = total + 1
            end
        end
        assert.equal(PUSHERS * N, total)
        assert.same({ n = 1, 0 }, pack(q:llen("jobs")))
        assert.same({ true }, { q:verify() })
    end)
end)
