-- Lock keys of any bytes against the holder groups (src/group.h: a
-- semaphore's permits, a lock's shared holds; records and heads in the
-- lock slots): issue 30.  Between real processes, under LuaJIT and a PUC
-- Lua (the C module), through spec/helpers/key_kinds.lua:
--
--   * a user key spelt as a record or head of another key's group (as
--     layouts before 10 spelt them, "\0r\0\0" .. K, "\0s\0\0" .. K,
--     "\0s\255\255" .. K, and as layout 10 does, "\0\0\0\0" .. K) is a
--     key of its own: neither waits for the other, through lock(),
--     trylock(), lock_shared() and a semaphore's acquire;
--   * the hinted acquire (a lock object's handle whose last ticket names
--     K's record or head slot: "any bytes are a safe hint") never gives
--     such a key a second holder: before, it took the record's slot while
--     another process took the key's own slot in its shard;
--   * a fuzz of random key bytes (NUL, 0xff, the record spellings, every
--     length 1 .. 300) against every acquire path, with exclusion
--     counters, across 4 processes (KEY_FUZZ_SEED replays a run's keys and
--     choices; the interleaving is the machine's);
--   * more than 65,535 holders of one key (shared holds, then permits):
--     all let in; past the shard's slot table, "no memory" at once.
--
-- What is asserted: answers, counts, counters; never a time.

local proc = require "harness.proc"
local fixture = require "helpers.fixture"
local checkout = require "helpers.checkout"
local children = require "helpers.children"
local resty_lock = require "resty.shmlock"
local semaphore = require "resty.shmlock.semaphore"
local C = require "resty.shmlock.lib"

local ROOT = checkout.ROOT
local LUA_PATH = ROOT .. "/lua/?.lua;" .. ROOT .. "/lua/?/init.lua;;"
local SCRIPT = ROOT .. "/spec/helpers/key_kinds.lua"
-- the PUC Lua of these runs (any would do: spec/60 runs every one)
local PUC = "lua5.4"

local function q(s)
    return "'" .. s:gsub("'", "'\\''") .. "'"
end

-- a child process: `lua` on key_kinds.lua with args; exits as it does
-- (its output in dir/<tag>.out)
local function start(lua, dir, tag, ...)
    local words = {}
    for i, w in ipairs { ... } do
        words[i] = q(w)
    end
    local cmd = "cd /tmp && LUA_PATH=" .. q(LUA_PATH) .. " exec timeout 60 "
                .. lua .. " " .. q(SCRIPT) .. " " .. q(dir) .. " "
                .. table.concat(words, " ") .. " >" .. q(dir .. "/" .. tag
                                                          .. ".out")
                .. " 2>&1"
    return proc.spawn(function()
        local a, _, c = os.execute(cmd)
        if type(a) == "number" then
            return a >= 256 and math.floor(a / 256) or a
        end
        return a and 0 or c
    end)
end

local function hex(s)
    return (s:gsub(".", function(c) return ("%02x"):format(c:byte()) end))
end

local function output(dir, tag)
    return checkout.read_file(dir .. "/" .. tag .. ".out")
end

-- the shard of key in a zone of n shards (src/zone.h: the hash's top bits)
local function shard_of(key, n)
    return math.floor(tonumber(C.shmlock_hash(key, #key)) / (2 ^ 32 / n))
end

-- the spellings of a record or head of K's groups, by layout
local CRAFTED = {
    -- before 10: "\0" kind i>>8 i&255 K, a semaphore's head index 0xffff
    { "a shared hold's record (before layout 10)", "shared", "\0r\0\0" },
    { "a permit's record (before layout 10)", "permit", "\0s\0\0" },
    { "a semaphore's head (before layout 10)", "head", "\0s\255\255" },
    -- 10: four bytes of index, then K (the kind is the slot's)
    { "a shared hold's record (layout 10)", "shared", "\0\0\0\0" },
    { "a permit's record (layout 10)", "permit", "\0\0\0\0" },
}


describe("a lock key spelt as a holder group's record or head", function()
    local fx = fixture.new { dir = "test", children = "assert" }

    it("is a key of its own: neither it nor the group waits for the other",
       function()
        -- one shard: every slot of both in one table
        local dict = fx:zone("one", { size = "256k", shards = 1 })
        local K = "job"
        local held, go = proc.pipe(), proc.pipe()
        local child = proc.spawn(function()
            held:close_read()
            local r = assert(resty_lock:new(dict))
            local s = assert(semaphore:new(dict, { permits = 1 }))
            assert(r:lock_shared(K) == 0)
            assert(s:acquire(K) == 0)
            held:notify()
            assert(go:await(20))
            assert(r:unlock() == 1)
            assert(s:release() == 1)
        end)
        held:close_write()
        assert.is_true(held:await(10))
        local lk = assert(resty_lock:new(dict, { timeout = 0 }))
        local sem = assert(semaphore:new(dict, { permits = 1, timeout = 0 }))
        for _, c in ipairs(CRAFTED) do
            local key = c[3] .. K
            assert.same({ 0 }, { lk:lock(key, 0) }, c[1])
            assert.same({ 1 }, { lk:unlock() }, c[1])
            assert.same({ 0 }, { lk:trylock(key) }, c[1])
            assert.same({ 1 }, { lk:unlock() }, c[1])
            assert.same({ 0 }, { lk:lock_shared(key, 0) }, c[1])
            assert.same({ 1 }, { lk:unlock() }, c[1])
            assert.same({ 0 }, { sem:acquire(key, 0) }, c[1])
            assert.same({ 1 }, { sem:release() }, c[1])
        end
        go:notify()
        children.expect_clean_exits({ child }, 20)

        -- and the other way: the crafted keys held, K's groups come in
        local locks, seen = {}, {}
        for _, c in ipairs(CRAFTED) do
            if not seen[c[3]] then
                seen[c[3]] = true
                locks[#locks + 1] = assert(resty_lock:new(dict))
                assert.same({ 0 }, { locks[#locks]:lock(c[3] .. K, 0) }, c[1])
            end
        end
        local pid = proc.spawn(function()
            local r = assert(resty_lock:new(dict))
            local s = assert(semaphore:new(dict, { permits = 1 }))
            assert(r:lock_shared(K, 0) == 0, "lock_shared")
            assert(s:acquire(K, 0) == 0, "acquire")
            assert(r:unlock() == 1 and s:release() == 1)
        end)
        children.expect_clean_exits({ pid }, 20)
        for _, l in ipairs(locks) do
            assert.equal(1, l:unlock())
        end
        assert.is_true(dict:verify())
    end)

    -- the hinted acquire: P's next lock() takes a handle whose ticket is
    -- the record's (or head's) of K, freed; P locks the crafted key, and
    -- Q, another process, must find it held (and, for a shared hold of
    -- it, held exclusive); a permit of it is another key: free
    for _, pair in ipairs { { "luajit", PUC }, { PUC, "luajit" } } do
        it("never has two holders through the hint (" .. pair[1]
           .. " hinted, " .. pair[2] .. " plain)", function()
            local dir = fx.dir
            fx:zone("kinds", { size = "1m", shards = 4 })
            local board = fx:zone("board", { size = "1m" })
            for _, c in ipairs(CRAFTED) do
                -- K whose crafted key lives in another shard
                local K
                for i = 1, 100 do
                    K = "k" .. i
                    if shard_of(c[3] .. K, 4) ~= shard_of(K, 4) then
                        break
                    end
                end
                board:flush_all()
                local p = start(pair[1], dir, "plant", "plant", c[2], hex(K),
                                hex(c[3] .. K))
                local q_ = start(pair[2], dir, "try", "try", hex(c[3] .. K))
                local res = proc.wait_all({ p, q_ }, 60)
                assert.same({ 0, 0 }, { res[1].code, res[2].code },
                            c[1] .. ": " .. tostring(output(dir, "plant"))
                            .. tostring(output(dir, "try")))
                assert.equal("0", board:get("planted"), c[1])
                assert.equal("timeout timeout timeout 0", board:get("tried"),
                             c[1])
            end
        end)
    end
end)


describe("a fuzz of lock keys against every acquire path", function()
    local fx = fixture.new { dir = "test", children = "assert" }

    it("never lets two holders in, nor a writer beside a reader, nor more "
       .. "than the permits", function()
        local seed = tonumber(os.getenv("KEY_FUZZ_SEED")) or os.time()
        print(("\nkey fuzz: KEY_FUZZ_SEED=%d"):format(seed))
        local dir = fx.dir
        -- small tables (32 slots a shard): slots reclaimed and made again
        -- all the time, a handle's old ticket naming another key's slot
        local kinds = fx:zone("kinds", { size = "512k", shards = 4 })
        local board = fx:zone("board", { size = "16m" })
        local lua = { "luajit", "luajit", "luajit", PUC }
        local pids = {}
        for w, l in ipairs(lua) do
            pids[w] = start(l, dir, "fuzz" .. w, "fuzz", tostring(seed),
                            tostring(w), tostring(#lua), "1500")
        end
        local res = proc.wait_all(pids, 120)
        for w, r in ipairs(res) do
            assert.same({ "exit", 0 }, { r.how, r.code },
                        lua[w] .. ": " .. output(dir, "fuzz" .. w))
        end
        for w = 1, #lua do
            print(("  worker %d (%s): %s"):format(w, lua[w],
                                                 board:get("stats:" .. w)))
        end
        assert.same({ 0 }, { board:get("violations") or 0 },
                    board:get("first"))
        assert.same({ 0 }, { board:get("errors") or 0 },
                    board:get("first_error"))
        -- every path ran, holds were taken, the attack tried
        for w = 1, #lua do
            local s = board:get("stats:" .. w)
            for _, what in ipairs { "lock", "trylock", "shared", "permit",
                                    "attack", "taken" } do
                assert.truthy(tonumber(s:match(what .. "=(%d+)")) > 0,
                              lua[w] .. ": " .. s)
            end
        end
        assert.is_true(kinds:verify())
    end)
end)


describe("more than 65,535 holders of one key", function()
    local fx = fixture.new { dir = "test", children = "assert" }

    -- One shard of 16 MiB: a floor of 4,096 lock slots (src/zone.c:
    -- about 1/16 of the shard), then the slots spilled into its chunks,
    -- two chunks each (layout 12): room for more than 100,000 holders.
    local SIZE = "16m"
    local AT_LEAST = 100000

    -- n holders of key, in this process, each its own object
    local function take(n, new, get)
        local list = {}
        for i = 1, n do
            local o = new()
            local got, err = get(o)
            if got ~= 0 then
                return list, err, i
            end
            list[i] = o
        end
        return list
    end

    for _, kind in ipairs { "shared holds", "semaphore permits" } do
        it("lets them all in (" .. kind .. "); past the slots: no memory, "
           .. "at once", function()
            local dict = fx:zone("many", { size = SIZE, shards = 1 })
            local function new()
                if kind == "shared holds" then
                    return assert(resty_lock:new(dict, { timeout = 60 }))
                end
                return assert(semaphore:new(dict, { permits = 16777215,
                                                    timeout = 60 }))
            end
            local function get(o)
                if kind == "shared holds" then
                    return o:lock_shared("many")
                end
                return o:acquire("many")
            end
            local function put(o)
                if kind == "shared holds" then
                    return o:unlock()
                end
                return o:release()
            end
            -- 40,000 in a child, 30,000 here: 70,000 at once
            local held, go = proc.pipe(), proc.pipe()
            local child = proc.spawn(function()
                held:close_read()
                local list, err, at = take(40000, new, get)
                assert(not err, ("child: %s at %s"):format(err, at))
                held:notify()
                assert(go:await(60))
                for _, o in ipairs(list) do
                    assert(put(o) == 1)
                end
            end)
            held:close_write()
            assert.is_true(held:await(60))
            local list, err, at = take(30000, new, get)
            assert.same({ nil, nil }, { err, at })
            if kind == "shared holds" then
                local info = resty_lock.inspect(dict, "many")
                assert.equal(70000, #info.holders)
            else
                assert.equal(70000, new():count("many"))
            end
            -- then until the zone's memory is used up (a timeout of 60 s:
            -- a wait would answer "timeout", a minute later)
            local more
            more, err = take(200000, new, get)
            assert.equal("no memory", err)
            assert.is_true(70000 + #more >= AT_LEAST)
            assert.is_true(dict:free_space() < 128)
            print(("\n%s: %d holders, then no memory")
                  :format(kind, 70000 + #more))
            -- and again: no memory, not a wait
            assert.same({ nil, "no memory" }, { get(new()) })
            go:notify()
            children.expect_clean_exits({ child }, 60)
            for _, o in ipairs(list) do
                assert.equal(1, put(o))
            end
            for _, o in ipairs(more) do
                assert.equal(1, put(o))
            end
            -- all gone: one more comes in at once
            local o = new()
            assert.same({ 0 }, { get(o) })
            assert.equal(1, put(o))
            assert.is_true(dict:verify())
        end)
    end
end)
