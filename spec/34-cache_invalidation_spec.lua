-- resty.shmlock.cache: a load never overwrites a set(), delete() or
-- purge() that another process made while its loader ran
-- (docs/cache.md#coherence).  Each interleaving is forced: the loader of
-- one process says it runs and waits for a byte; the change is made and
-- returns in another process; only then does the loader return its old
-- value.  Every process must then see the change.

local proc = require "harness.proc"
local fixture = require "helpers.fixture"
local cache = require "resty.shmlock.cache"
local fake_shared = require "helpers.fake_shared"

local pack = table.pack or function(...) -- luacheck: ignore 143
    return { n = select("#", ...), ... }
end

-- the changes, made in the parent while a child's loader waits; and what
-- a get (whose loader returns "fresh") must answer after each
local CHANGES = {
    set = {
        make = function(c) return c:set("k", "new") end,
        after = { "new", nil, 2 },
    },
    delete = {
        make = function(c) return c:delete("k") end,
        after = { "fresh", nil, 3 },
    },
    purge = {
        make = function(c) return c:purge() end,
        after = { "fresh", nil, 3 },
    },
}

local function fresh()
    return "fresh"
end

describe("resty.shmlock.cache: a load started before a change", function()
    local fx = fixture.new { dir = "test", children = "assert" }
    local zone

    before_each(function()
        zone = fx:zone("inv", { size = "1m" })
    end)

    local function new_cache(opts)
        opts = opts or {}
        opts.dict = opts.dict or zone
        opts.ttl = opts.ttl or 60
        return assert(cache.new("inv", opts))
    end

    -- a cache whose "k" was set to "stale" for 1 ms, which passed (peek
    -- gives nil)
    local function with_expired_k(opts)
        local c = new_cache(opts)
        assert.is_true(c:set("k", "stale", 0.001))
        local deadline = proc.now() + 10
        while c:peek("k") ~= nil do
            assert.is_true(proc.now() < deadline)
            proc.sleep(0.001)
        end
        return c
    end

    -- A child whose get("k") calls a loader that says so (`loading`),
    -- waits for a byte (`go`) and returns "old" (or raises: fail); it
    -- reports what get answered through the zone ("got"), then waits for
    -- a byte more and gets again ("again").
    local function loader_child(opts, loading, go, done, fail)
        loading:close_read()
        go:close_write()
        done:close_read()
        local c = new_cache(opts)
        local function slow()
            loading:notify()
            assert(go:await(30), "no go")
            if fail then
                error("the source is down")
            end
            return "old"
        end
        local v, err, level = c:get("k", nil, slow)
        zone:set("got", table.concat({ tostring(v), tostring(err),
                                       tostring(level) }, " "))
        done:notify()
        assert(go:await(30), "no second go")
        v, err, level = c:get("k", nil, fresh)
        zone:set("again", table.concat({ tostring(v), tostring(err),
                                         tostring(level) }, " "))
    end

    -- runs the interleaving; returns the child's two answers
    local function interleave(change, opts, fail, before)
        local loading, go, done = proc.pipe(), proc.pipe(), proc.pipe()
        local pid = proc.spawn(loader_child, opts, loading, go, done, fail)
        loading:close_write()
        go:close_read()
        done:close_write()
        assert.is_true(loading:await(30), "the loader did not start")
        local w = new_cache(opts)
        if before then
            before(w)
        end
        assert.same({ true }, { CHANGES[change].make(w) })
        -- the change has returned: now the loader returns
        go:notify()
        assert.is_true(done:await(30), "the get did not return")
        return pid, go, w
    end

    local function finish(pid, go)
        go:notify()
        assert.same("exit", proc.wait(pid, 30).how)
    end

    -- a reader in a process of its own (its own L1)
    local function reader_sees(opts)
        local pid = proc.spawn(function()
            local v, err, level = new_cache(opts):get("k", nil, fresh)
            zone:set("reader", table.concat({ tostring(v), tostring(err),
                                              tostring(level) }, " "))
        end)
        assert.same("exit", proc.wait(pid, 30).how)
        return zone:get("reader")
    end

    local function text(t)
        return tostring(t[1]) .. " " .. tostring(t[2]) .. " "
               .. tostring(t[3])
    end

    for _, change in ipairs({ "set", "delete", "purge" }) do
        local after = CHANGES[change].after

        it("does not store over a " .. change .. " made meanwhile in "
           .. "another process", function()
            local pid, go, w = interleave(change)
            -- the loader's caller has its own result
            assert.equal("old nil 3", zone:get("got"))
            -- the zone kept the change
            if change == "set" then
                assert.equal("new", select(3, w:peek("k")))
            else
                assert.same({ n = 1, nil }, pack(w:peek("k")))
            end
            assert.equal(text(after), reader_sees())
            finish(pid, go)
            -- the loader's process: its L1 holds nothing of the old value
            assert.equal(after[1] .. " nil 2", zone:get("again"))
            -- and the changing process
            assert.same({ after[1], nil, change == "set" and 1 or 2 },
                        { w:get("k", nil, fresh) })
        end)
    end

    it("does not store over a set made meanwhile in a refresh of a stale "
       .. "value (stale_ttl)", function()
        local opts = { stale_ttl = 60 }
        local c = with_expired_k(opts)
        assert.is_true(select(4, c:peek("k", true)))
        local pid, go, w = interleave("set", opts)
        -- the caller that refreshed has the loader's value
        assert.equal("old nil 3", zone:get("got"))
        assert.equal("new", select(3, w:peek("k")))
        assert.equal("new nil 2", reader_sees(opts))
        finish(pid, go)
        assert.equal("new nil 2", zone:get("again"))
    end)

    it("does not resurrect the old value over a set made while the loader "
       .. "failed (resurrect_ttl)", function()
        local opts = { resurrect_ttl = 60 }
        with_expired_k(opts)
        local pid, go, w = interleave("set", opts, true)
        -- the caller is served what the zone keeps (hit_level 4, as
        -- resurrect_ttl says): the set's value by now
        assert.equal("new nil 4", zone:get("got"))
        assert.equal("new", select(3, w:peek("k")))
        assert.equal("new nil 2", reader_sees(opts))
        finish(pid, go)
        assert.equal("new nil 2", zone:get("again"))
    end)

    it("stores a load when a set of another key of the same word was made "
       .. "meanwhile, and when another load stored there", function()
        -- "k" and the key sharing its generation word
        local C = require "resty.shmlock.lib"
        local function word(key)
            local vkey = "inv:" .. key
            return C.shmlock_hash(vkey, #vkey) % C.SHMLOCK_GEN_WORDS
        end
        local other
        for i = 1, 1e6 do
            if word("o" .. i) == word("k") then
                other = "o" .. i
                break
            end
        end
        assert.is_string(other)
        -- a load's store of the other key moves the word's low half only
        local pid, go = interleave("set", nil, nil, function(w)
            assert.same({ "x", nil, 3 },
                        { w:get(other, nil, function() return "x" end) })
        end)
        -- ...but the set of "k" was made too: nothing stored
        assert.equal("old nil 3", zone:get("got"))
        finish(pid, go)

        -- now only the other key's load: the load of "k" is stored
        assert.is_true(zone:delete("inv:k"))
        assert.is_true(zone:delete("inv:" .. other))
        local loading, go2, done = proc.pipe(), proc.pipe(), proc.pipe()
        local pid2 = proc.spawn(loader_child, nil, loading, go2, done)
        loading:close_write()
        go2:close_read()
        done:close_write()
        assert.is_true(loading:await(30))
        local w = new_cache()
        assert.same({ "y", nil, 3 },
                    { w:get(other, nil, function() return "y" end) })
        go2:notify()
        assert.is_true(done:await(30))
        assert.equal("old nil 3", zone:get("got"))
        assert.equal("old", select(3, w:peek("k")))
        finish(pid2, go2)
    end)

    it("does not store over a change made during the load, in a dict "
       .. "without generation words (an ngx.shared dict)", function()
        local fake = fake_shared.new()
        local opts = { dict = fake, lock_dict = zone }
        local a, b = new_cache(opts), new_cache(opts)
        for _, change in ipairs({ "set", "delete", "purge" }) do
            -- the change, made by another view (L1) while a's loader runs
            local function slow()
                assert.same({ true }, { CHANGES[change].make(b) })
                return "old"
            end
            assert.same({ "old", nil, 3 }, { a:get("k", nil, slow) })
            local after = CHANGES[change].after
            assert.same(after, { a:get("k", nil, fresh) })
            assert.same({ after[1], nil, 1 }, { a:get("k", nil, fresh) })
            assert.is_true(b:delete("k"))
        end
    end)

    it("stores with shdict._set_guarded only while the word's masked bits "
       .. "are as read", function()
        local C = require "resty.shmlock.lib"
        local set_guarded = require("resty.shmlock.shdict")._set_guarded
        local word = 7
        local gen = tonumber(C.shmlock_zone_gen_add(zone._zone, word, 0))
        local mask = 0xffff0000
        assert.same({ true, nil, false },
                    { set_guarded(zone, "g", "a", 0, nil, word, mask, gen) })
        C.shmlock_zone_gen_add(zone._zone, word, 1)
        assert.same({ true, nil, false },
                    { set_guarded(zone, "g", "b", 0, nil, word, mask, gen) })
        C.shmlock_zone_gen_add(zone._zone, word, 65536)
        assert.same({ false, "changed", false },
                    { set_guarded(zone, "g", "c", 0, nil, word, mask, gen) })
        assert.equal("b", zone:get("g"))
        assert.same({ true, nil, false },
                    { set_guarded(zone, "g", "d", 0, nil, word + 1024, mask,
                                  gen + 65536) })
        assert.equal("d", zone:get("g"))
    end)
end)
