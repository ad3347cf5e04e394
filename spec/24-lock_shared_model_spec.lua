-- Shared and exclusive holds against a model: random operations of 8
-- lock objects on 3 keys of one zone (lock and lock_shared without
-- waiting, trylock, unlock, expire, owned, an object dropped and
-- collected, inspect), each answer compared with what a plain Lua model
-- of a readers-writer lock says: any number of readers or one writer per
-- key, one hold per object.  Then the same with a second process holding
-- some keys shared or exclusive and SIGKILLed: its holds go at once.

local fixture = require "helpers.fixture"
local checkout = require "helpers.checkout"
local proc = require "harness.proc"
local resty_lock = require "resty.shmlock"

local pack = checkout.pack

-- a fixed seed per run, printed on failure, so a failure can be replayed
local SEED = tonumber(os.getenv("MODEL_SEED") or "") or os.time()

local KEYS = { "a", "b", "long key " .. ("x"):rep(60) }
local OBJECTS = 8

local function show(t)
    local out = {}
    for i = 1, t.n do
        out[i] = tostring(t[i])
    end
    return "(" .. table.concat(out, ", ") .. ")"
end

describe("shared and exclusive holds against a model", function()
    local fx = fixture.new { dir = "test", children = "assert" }
    local dict

    before_each(function()
        dict = fx:zone("model", { size = "256k" })
    end)

    -- the model: per key, `writer` (an object index) or `readers` (a set);
    -- per object, what it holds: nil or { key = ..., shared = bool }
    local function new_model()
        local m = { keys = {}, objs = {} }
        for _, k in ipairs(KEYS) do
            m.keys[k] = { readers = {}, n = 0 }
        end
        return m
    end

    -- what lock (shared: lock_shared) of object i on key answers, and the
    -- model's change
    local function model_lock(m, i, key, shared)
        if m.objs[i] then
            return pack(nil, "locked")
        end
        local s = m.keys[key]
        if s.writer or (not shared and s.n > 0) then
            return pack(nil, "timeout")
        end
        if shared then
            s.readers[i] = true
            s.n = s.n + 1
        else
            s.writer = i
        end
        m.objs[i] = { key = key, shared = shared }
        return pack(0)
    end

    local function model_unlock(m, i)
        local h = m.objs[i]
        if not h then
            return pack(nil, "unlocked")
        end
        local s = m.keys[h.key]
        if h.shared then
            s.readers[i] = nil
            s.n = s.n - 1
        else
            s.writer = nil
        end
        m.objs[i] = nil
        return pack(1)
    end

    -- inspect's answer, reduced: kind and holders, or "not locked"
    local function inspected(key)
        local info, err = resty_lock.inspect(dict, key)
        if not info then
            return err
        end
        return info.kind .. " " .. (info.holders and #info.holders or 1)
    end

    local function model_inspected(m, key)
        local s = m.keys[key]
        if s.writer then
            return "lock 1"
        end
        if s.n > 0 then
            return "shared " .. s.n
        end
        return "not locked"
    end

    it("answers every operation as the model does (seed " .. SEED .. ")",
       function()
        math.randomseed(SEED)
        local rnd = math.random
        local m = new_model()
        local objs = {}
        for i = 1, OBJECTS do
            objs[i] = assert(resty_lock:new(dict, { timeout = 0 }))
        end
        for step = 1, 4000 do
            local i = rnd(OBJECTS)
            local key = KEYS[rnd(#KEYS)]
            local o = objs[i]
            local op = rnd(100)
            local got, want, what
            if op <= 30 then
                what = "lock_shared"
                got = pack(o:lock_shared(key, 0))
                want = model_lock(m, i, key, true)
            elseif op <= 45 then
                what = "lock"
                got = pack(o:lock(key, 0))
                want = model_lock(m, i, key, false)
            elseif op <= 52 then
                what = "trylock"
                got = pack(o:trylock(key))
                want = model_lock(m, i, key, false)
            elseif op <= 80 then
                what = "unlock"
                got = pack(o:unlock())
                want = model_unlock(m, i)
            elseif op <= 85 then
                what = "expire"
                got = pack(o:expire(60))
                want = m.objs[i] and pack(true) or pack(nil, "unlocked")
            elseif op <= 92 then
                what = "owned"
                got = pack(o:owned())
                want = pack(m.objs[i] ~= nil)
            elseif op <= 95 then
                -- dropped and collected: its hold goes with it
                what = "collected"
                objs[i] = nil
                o = nil                                 -- luacheck: ignore
                collectgarbage()
                collectgarbage()
                objs[i] = assert(resty_lock:new(dict, { timeout = 0 }))
                model_unlock(m, i)
                got, want = pack(true), pack(true)
            else
                what = "inspect"
                got = pack(inspected(key))
                want = pack(model_inspected(m, key))
            end
            assert(show(got) == show(want),
                   ("step %d (seed %d): object %d %s(%q): %s, the model "
                    .. "says %s"):format(step, SEED, i, what, key, show(got),
                                         show(want)))
            if step % 50 == 0 then
                for _, k in ipairs(KEYS) do
                    assert.equal(model_inspected(m, k), inspected(k),
                                 ("step %d (seed %d), key %q"):format(step,
                                                                      SEED, k))
                end
            end
        end
        for i = 1, OBJECTS do
            objs[i]:unlock()
        end
        for _, k in ipairs(KEYS) do
            assert.equal("not locked", inspected(k))
        end
    end)

    it("drops every hold of a SIGKILLed process at once, whatever it held "
       .. "(seed " .. SEED .. ")", function()
        math.randomseed(SEED)
        local rnd = math.random
        for round = 1, 20 do
            -- the child holds each key shared (twice or once), exclusive,
            -- or not at all
            local plan = {}
            for k = 1, #KEYS do
                plan[k] = rnd(0, 3)
            end
            local held = proc.pipe()
            local pid = proc.spawn(function()
                held:close_read()
                local keep = {}
                for k, how in ipairs(plan) do
                    for _ = 1, how == 3 and 2 or (how == 0 and 0 or 1) do
                        local l = assert(resty_lock:new(dict))
                        local ok = how == 2 and l:lock(KEYS[k], 0)
                                   or how ~= 2 and l:lock_shared(KEYS[k], 0)
                        assert(ok == 0)
                        keep[#keep + 1] = l
                    end
                end
                held:notify()
                proc.sleep(30)
                return keep
            end)
            held:close_write()
            assert.is_true(held:await(20))
            held:close_read()
            for k, how in ipairs(plan) do
                local want = how == 0 and "not locked" or how == 2 and "lock 1"
                             or how == 3 and "shared 2" or "shared 1"
                assert.equal(want, inspected(KEYS[k]), "round " .. round)
            end
            proc.kill(pid, 9)
            assert.equal("signal", proc.wait(pid, 20).how)
            for k = 1, #KEYS do
                local l = assert(resty_lock:new(dict))
                -- a reader joins dead readers (it need not drop them),
                -- never a dead writer; an exclusive lock finds the key free
                if (round + k) % 2 == 1 then
                    assert.same({ 0 }, { l:lock_shared(KEYS[k], 0) })
                    assert.same({ 1 }, { l:unlock() })
                end
                assert.same({ 0 }, { l:lock(KEYS[k], 0) })
                assert.same({ 1 }, { l:unlock() })
                assert.equal("not locked", inspected(KEYS[k]))
            end
        end
    end)
end)
