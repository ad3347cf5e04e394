-- The lock across fork() and time namespaces: a lock object copied into a
-- child is not a holder there, whatever method the child calls and however
-- the child was made (fork(), and a raw clone system call or glibc's
-- _Fork(), which run no pthread_atfork handler); a child never mints its
-- parent's tokens; a zone is not shared across time namespaces, whose
-- monotonic clocks disagree.

local ffi = require "ffi"
local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local token = require "resty.shmlock.internal.token"
local proc = require "harness.proc"
local fixture = require "helpers.fixture"
local checkout = require "helpers.checkout"
local children = require "helpers.children"
local slot = require "helpers.lock_slot"

local fmt = string.format
local sh = checkout.sh

-- the child's results come back through a file: the child's last words
local function note(path, s)
    checkout.write_file(path, s)
end

local function spawn(kind, fn)
    return proc.spawn_with({ fork = kind.fork }, fn)
end

local function clean_exit(pid)
    children.expect_clean_exits({ pid }, 30)
end

local function tokens(n)
    local t = {}
    for i = 1, n do
        t[i] = ffi.string(token.next())
    end
    return t
end

describe("owner ids and token serials", function()
    it("start at random in each process: two fresh processes draw "
       .. "different first blocks", function()
        local cmd = "LUA_PATH='" .. checkout.LUA_PATH .. "' luajit -e '"
            .. "print(require(\"resty.shmlock.lib\").shmlock_owner_ids())'"
        local a, b = tonumber(sh(cmd)), tonumber(sh(cmd))
        assert.is_number(a)
        assert.not_equal(a, b)
    end)
end)

for _, kind in ipairs(proc.fork_kinds()) do
    describe("a lock object copied into a child made by " .. kind.name,
             function()
        local fx = fixture.new { dir = "test", children = "assert" }
        local dict, lock

        before_each(function()
            dict = fx:zone("f", { size = "64k" })
            lock = assert(resty_lock:new(dict, { timeout = 1 }))
            assert.equal(0, lock:lock("k"))
        end)

        it("is not the holder there: owned() is false, unlock() and "
           .. "expire() answer 'unlocked', the parent's lock stays as it was",
           function()
            local before = slot.state(dict, "k")
            clean_exit(spawn(kind, function()
                assert(lock:owned() == false, "owned() in the child")
                local ok, err = lock:unlock()
                assert(ok == nil and err == "unlocked",
                       "unlock: " .. tostring(ok) .. " " .. tostring(err))
                ok, err = lock:expire(100)
                assert(ok == nil and err == "unlocked",
                       "expire: " .. tostring(ok) .. " " .. tostring(err))
                assert(slot.state(dict, "k") == before, "the key changed")
            end))
            assert.equal(before, slot.state(dict, "k"))
            assert.is_true(lock:owned())
            assert.same({ 1 }, { lock:unlock() })
        end)

        it("cannot make the lock its own: once the child has exited after "
           .. "an expire(), the lock is still the parent's", function()
            clean_exit(spawn(kind, function()
                lock:expire(100)
            end))
            local other = assert(resty_lock:new(dict, { timeout = 1 }))
            assert.same({ nil, "timeout" }, { other:trylock("k") })
            assert.same({ 1 }, { lock:unlock() })
        end)

        it("releases nothing when the child collects it", function()
            local before = slot.state(dict, "k")
            clean_exit(spawn(kind, function()
                lock = nil
                collectgarbage()
                collectgarbage()
            end))
            assert.equal(before, slot.state(dict, "k"))
            assert.same({ 1 }, { lock:unlock() })
        end)

        it("is free in the child: lock() waits for the parent's lock like "
           .. "any other process's, then the copy locks other keys",
           function()
            clean_exit(spawn(kind, function()
                local r = { lock:lock("k", 0.01) }
                assert(r[1] == nil and r[2] == "timeout",
                       "lock: " .. tostring(r[1]) .. " " .. tostring(r[2]))
                assert(lock:lock("k2") == 0)
                assert(lock:unlock() == 1)
            end))
            assert.is_nil(slot.info(dict, "k2"))
            assert.same({ 1 }, { lock:unlock() })
        end)
    end)

    describe("a child made by " .. kind.name, function()
        local fx = fixture.new { dir = "test", children = "assert" }
        local dict

        before_each(function()
            dict = fx:zone("t", { size = "64k" })
        end)

        it("mints tokens its parent does not", function()
            tokens(1)       -- the parent has its token state
            local path = fx.dir .. "/child-tokens"
            clean_exit(spawn(kind, function()
                note(path, table.concat(tokens(3), "\n"))
            end))
            local mine = tokens(3)
            local theirs = checkout.read_file(path)
            for _, t in ipairs(mine) do
                assert.is_nil(theirs:find(t, 1, true), t .. " minted twice")
            end
        end)

        it("takes owner ids its parent does not (a pid reused by a "
           .. "sibling must not hold its earlier owner's ids)", function()
            token.next_id()     -- the parent has a block of ids
            local path = fx.dir .. "/child-ids"
            clean_exit(spawn(kind, function()
                note(path, table.concat({ token.next_id(), token.next_id() },
                                        " "))
            end))
            local mine = { token.next_id(), token.next_id() }
            local theirs = checkout.read_file(path)
            for _, id in ipairs(mine) do
                assert.is_nil(theirs:find(tostring(id), 1, true),
                              id .. " taken twice")
            end
        end)

        it("cannot take a key its parent locked after the fork", function()
            local go = proc.pipe()
            local pid = spawn(kind, function()
                go:close_write()
                assert(go:await(10), "never told to go")
                local l = assert(resty_lock:new(dict, { timeout = 0.01 }))
                local r = { l:lock("k") }
                assert(r[1] == nil and r[2] == "timeout",
                       "lock: " .. tostring(r[1]) .. " " .. tostring(r[2]))
            end)
            go:close_read()
            local l = assert(resty_lock:new(dict))
            assert.equal(0, l:lock("k"))
            go:notify()
            clean_exit(pid)
            go:close()
            assert.is_true(l:owned())
            assert.same({ 1 }, { l:unlock() })
        end)
    end)
end


describe("a zone and a process in another time namespace", function()
    local fx = fixture.new { dir = "test" }

    -- a script run in a fresh time namespace whose monotonic clock is
    -- 100000 s ahead; its output
    local function elsewhere(code)
        local script = fx.dir .. "/elsewhere.lua"
        checkout.write_file(script, code)
        return sh(fmt("LUA_PATH=%q unshare --time --fork --monotonic 100000 "
                      .. "luajit %q 2>&1", checkout.LUA_PATH, script))
    end

    local function can_unshare()
        local probe = sh("unshare --time --fork --monotonic 100000 true 2>&1")
        if probe ~= "" then
            pending("unshare --time not permitted here: " .. probe)
            return false
        end
        return true
    end

    it("is refused a zone made here, naming the cause", function()
        if not can_unshare() then
            return
        end
        local dict = fx:zone("here", { size = "64k" })
        local held = assert(resty_lock:new(dict, { exptime = 60 }))
        assert.equal(0, held:lock("k"))
        assert(dict:set("v", "live", 60))
        local out = elsewhere(fmt([[
local shdict = require "resty.shmlock.shdict"
local d, err = shdict.open("here", { dir = %q, create = false })
if not d then print(err) return end
local l = require("resty.shmlock"):new(d)
print("opened", d:get("v"), l:trylock("k"))]], fx.dir))
        assert.equal("zone made in another time namespace\n", out)
        assert.equal("live", dict:get("v"))
        assert.same({ 1 }, { held:unlock() })
    end)

    it("refuses here a zone made there, naming the cause", function()
        if not can_unshare() then
            return
        end
        local out = elsewhere(fmt([[
local shdict = require "resty.shmlock.shdict"
local d = assert(shdict.open("there", { dir = %q, size = "64k" }))
assert(d:set("v", "x"))
print("made")]], fx.dir))
        assert.equal("made\n", out)
        assert.same({ nil, "zone made in another time namespace" },
                    { shdict.open("there", { dir = fx.dir, create = false }) })
        shdict.destroy("there", { dir = fx.dir })
    end)
end)
