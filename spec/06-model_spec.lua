-- Randomised operations against a plain Lua table that models the
-- dictionary: after every operation the dictionary must answer exactly as
-- the model says, and its structures must verify.  Values of many sizes
-- exercise the chunk chains, the in-place rewrite and the copy path; a
-- small zone exercises eviction (set() entries may vanish, add() entries
-- never do).  Lists (lpush/rpush/lpop/rpop/llen) live among the other
-- values, so every operation meets them too.

local fixture = require "helpers.fixture"
local checkout = require "helpers.checkout"
local shdict = require "resty.shmlock.shdict"

local rep, char = string.rep, string.char

-- a fixed seed per run, printed on failure, so a failure can be replayed
local SEED = tonumber(os.getenv("MODEL_SEED") or "") or os.time()

local pack = checkout.pack

local function random_value(rnd)
    local r = rnd(10)
    if r <= 5 then
        local len = rnd(0, 3) == 0 and rnd(0, 600) or rnd(0, 40)
        return rep(char(96 + rnd(26)), len)
    elseif r <= 8 then
        return rnd(-1000, 1000) + (rnd(2) == 1 and 0.5 or 0)
    end
    return rnd(2) == 1
end

local function flags_out(f)
    if f == 0 then
        return nil
    end
    return f
end

describe("the dictionary against a model", function()
    local fx = fixture.new()
    local dir

    before_each(function()
        dir = fx.dir
    end)

    it("answers every operation as the model does (seed " .. SEED .. ")",
       function()
        math.randomseed(SEED)
        local rnd = math.random
        local d = assert(shdict.open("model", { dir = dir, size = "4m" }))
        local model = {}          -- key -> { v = value, f = flags }
        local keys = {}
        for i = 1, 60 do
            keys[i] = "key" .. i .. rep("x", i % 3 == 0 and 20 or 0)
        end
        local free0 = d:free_space()

        -- a scan walk, one step of 50 buckets after each operation: when it
        -- ends, every key present throughout it must have come (once)
        local cursor, need, seen, walks = 0, nil, nil, 0
        local function walk_step(step)
            if cursor == 0 then
                need, seen = {}, {}
                for k in pairs(model) do
                    need[k] = true
                end
            end
            for k in pairs(need) do
                if not model[k] then
                    need[k] = nil
                end
            end
            local next_cursor, got = d:scan(cursor, 50)
            assert.is_number(next_cursor, got)
            for _, k in ipairs(got) do
                assert.is_nil(seen[k], "step " .. step .. ": " .. k
                                       .. " twice, seed " .. SEED)
                seen[k] = true
            end
            cursor = next_cursor
            if cursor == 0 then
                for k in pairs(need) do
                    assert.is_true(seen[k], "step " .. step .. ": the walk "
                                   .. "missed " .. k .. ", seed " .. SEED)
                end
                walks = walks + 1
            end
        end

        for step = 1, 20000 do
            local k = keys[rnd(#keys)]
            local m = model[k]
            local op = rnd(17)
            local v, f = random_value(rnd), rnd(0, 3)
            local got, want

            if op <= 3 then
                got = pack(d:set(k, v, 0, f))
                want = { n = 3, true, nil, false }
                model[k] = { v = v, f = f }
            elseif op == 4 then
                got = pack(d:add(k, v, 0, f))
                if m then
                    want = { n = 3, false, "exists", false }
                else
                    want = { n = 3, true, nil, false }
                    model[k] = { v = v, f = f }
                end
            elseif op == 5 then
                got = pack(d:replace(k, v, 0, f))
                if m then
                    want = { n = 3, true, nil, false }
                    model[k] = { v = v, f = f }
                else
                    want = { n = 3, false, "not found", false }
                end
            elseif op == 6 then
                got = pack(d:delete(k))
                want = { n = 3, true, nil, false }
                model[k] = nil
            elseif op == 7 then
                local by = rnd(-5, 5)
                got = pack(d:incr(k, by))
                if not m then
                    want = { n = 2, nil, "not found" }
                elseif type(m.v) ~= "number" then
                    want = { n = 2, nil, "not a number" }
                else
                    m.v = m.v + by
                    want = { n = 1, m.v }
                end
            elseif op == 8 then
                local by, init = rnd(-5, 5), rnd(0, 9)
                got = pack(d:incr(k, by, init))
                if not m then
                    model[k] = { v = init + by, f = 0 }
                    want = { n = 3, init + by, nil, false }
                elseif type(m.v) ~= "number" then
                    want = { n = 2, nil, "not a number" }
                else
                    m.v = m.v + by
                    want = { n = 3, m.v, nil, false }
                end
            elseif op == 9 then
                -- cas from the current value (often) or a wrong one (a
                -- list's is always wrong: no value equals a list)
                local old = (m and type(m.v) ~= "table" and rnd(3) > 1)
                            and m.v or random_value(rnd)
                got = pack(d:cas(k, old, v, 0, f))
                if not m then
                    want = { n = 3, nil, "not found", false }
                elseif m.v ~= old then
                    want = { n = 3, nil, "changed", false }
                else
                    want = { n = 3, true, nil, false }
                    model[k] = { v = v, f = f }
                end
            elseif op == 10 then
                local old = (m and type(m.v) ~= "table" and rnd(3) > 1)
                            and m.v or random_value(rnd)
                got = pack(d:cad(k, old))
                if not m then
                    want = { n = 2, nil, "not found" }
                elseif m.v ~= old then
                    want = { n = 2, nil, "changed" }
                else
                    want = { n = 1, true }
                    model[k] = nil
                end
            elseif op == 11 then
                got = pack(d:expire(k, 0))
                want = m and { n = 1, true } or { n = 2, nil, "not found" }
            elseif op == 12 then
                got = pack(d:ttl(k))
                want = m and { n = 1, 0 } or { n = 2, nil, "not found" }
            elseif op <= 14 then
                -- a list is modelled as its elements, a table in m.v
                local push = op == 13 and d.lpush or d.rpush
                got = pack(push(d, k, v))
                if type(v) == "boolean" then
                    want = { n = 2, nil, "bad value type" }
                elseif m and type(m.v) ~= "table" then
                    want = { n = 2, nil, "value not a list" }
                else
                    if not m then
                        m = { v = {}, f = 0 }
                        model[k] = m
                    end
                    table.insert(m.v, op == 13 and 1 or #m.v + 1, v)
                    want = { n = 1, #m.v }
                end
            elseif op <= 16 then
                local pop = op == 15 and d.lpop or d.rpop
                got = pack(pop(d, k))
                if not m then
                    want = { n = 1, nil }
                elseif type(m.v) ~= "table" then
                    want = { n = 2, nil, "value not a list" }
                else
                    want = { n = 1, table.remove(m.v, op == 15 and 1 or nil) }
                    if #m.v == 0 then
                        model[k] = nil
                    end
                end
            else
                got = pack(d:llen(k))
                if not m then
                    want = { n = 1, 0 }
                elseif type(m.v) ~= "table" then
                    want = { n = 2, nil, "value not a list" }
                else
                    want = { n = 1, #m.v }
                end
            end

            if not (got.n == want.n and require("luassert.util").deepcompare(
                    got, want, true))
            then
                assert.same(want, got, "step " .. step .. ", op " .. op
                            .. ", key " .. k .. ", seed " .. SEED)
            end

            local cur = model[k]
            if cur and type(cur.v) == "table" then
                assert.same({ n = 2, nil, "value is a list" }, pack(d:get(k)))
            elseif cur then
                assert.same({ n = cur.f ~= 0 and 2 or 1, cur.v,
                              flags_out(cur.f) }, pack(d:get(k)))
            else
                assert.same({ n = 1, nil }, pack(d:get(k)))
            end
            if step % 1000 == 0 then
                assert.same({ n = 1, true }, pack(d:verify()))
            end
            walk_step(step)
        end
        assert.is_true(walks >= 2, walks .. " walks")

        -- every key the model holds, and only those
        local listed = {}
        for _, k in ipairs(d:get_keys(0)) do
            listed[k] = true
        end
        for _, k in ipairs(keys) do
            assert.equal(model[k] ~= nil, listed[k] == true, k)
        end
        for _, k in ipairs(keys) do
            d:delete(k)
        end
        assert.equal(free0, d:free_space())
        assert.same({ n = 1, true }, pack(d:verify()))
    end)

    it("in a small zone, loses only set() entries and whole lists to "
       .. "eviction (seed "
       .. SEED .. ")", function()
        math.randomseed(SEED + 1)
        local rnd = math.random
        local d = assert(shdict.open("model_small", { dir = dir,
                                                      size = "64k" }))
        local pinned, stored, lists = {}, {}, {}
        -- a list may be evicted whole (as a set() value), never in part:
        -- it holds the model's elements, or it is gone
        local function check_list(k)
            local want = lists[k] or {}
            local len = d:llen(k)
            if len == 0 then
                lists[k] = nil
                return
            end
            assert.equal(#want, len, "list " .. k .. " lost part of itself")
        end
        for step = 1, 20000 do
            local i = rnd(400)
            local k = "k" .. i
            local v = rep(char(97 + i % 26), rnd(0, 300))
            if i > 360 then
                -- lists: pushes and pops, the model follows
                k = "l" .. i
                check_list(k)
                local l = lists[k] or {}
                lists[k] = l
                if rnd(3) > 1 then
                    local len, err = d:rpush(k, v)
                    if len then
                        l[#l + 1] = v
                        assert.equal(#l, len)
                    else
                        -- a push never evicts: a full shard says so
                        assert.equal("no memory", err)
                    end
                else
                    assert.equal(table.remove(l, 1), d:lpop(k))
                end
                if #l == 0 then
                    lists[k] = nil
                end
            elseif i <= 40 then
                -- add() entries: few and small enough to always fit
                if not pinned[k] then
                    local ok, err = d:add(k, i)
                    assert(ok or err == "exists", err)
                    pinned[k] = i
                end
            else
                local ok, err = d:set(k, v)
                assert.is_true(ok, err)
                stored[k] = v
            end
            local got = d:get(k)
            if pinned[k] then
                assert.equal(pinned[k], got)
            elseif i <= 360 then
                assert.equal(stored[k], got)   -- just written: still there
            end
            if step % 500 == 0 then
                for lk in pairs(lists) do
                    check_list(lk)
                end
                for pk, pv in pairs(pinned) do
                    assert.equal(pv, d:get(pk), "pinned " .. pk .. " lost")
                end
                for sk, sv in pairs(stored) do
                    local g = d:get(sk)
                    assert(g == nil or g == sv, "wrong value for " .. sk)
                end
                assert.same({ n = 1, true }, pack(d:verify()))
            end
        end
    end)
end)
