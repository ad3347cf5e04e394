-- Several real processes on one zone: every invariant checked here is one
-- a lost update, a torn write or a broken mutex would break.

local proc = require "harness.proc"
local fixture = require "helpers.fixture"
local shdict = require "resty.shmlock.shdict"

local concat = table.concat

local expect_clean_exits = require("helpers.children").expect_clean_exits

local function list_dir(dir)
    local p = io.popen("ls -A '" .. dir .. "'")
    local names = {}
    for name in p:lines() do
        names[#names + 1] = name
    end
    p:close()
    table.sort(names)
    return names
end


describe("resty.shmlock.shdict across processes", function()
    local fx = fixture.new { children = "assert" }
    local dir

    before_each(function()
        dir = fx.dir
    end)

    local function open(name, size)
        local dict, err = shdict.open(name, { dir = dir, size = size })
        assert.is_nil(err)
        assert.is_table(dict)
        return dict
    end

    for _, size in ipairs({ "1m", "8m" }) do
        it("keeps an add()-locked read-modify-write counter exact with 6 "
           .. "processes in a " .. size .. " zone", function()
            local PROCS, N = 6, 5000
            local dict = open("counter", size)
            assert.is_true((dict:set("counter", 0)))

            local start = proc.pipe()
            local pids = {}
            for i = 1, PROCS do
                pids[i] = proc.spawn(function()
                    if not start:wait_release(10) then
                        error("never released")
                    end
                    local pid = proc.getpid()
                    local waited = 0
                    local deadline = proc.now() + 20
                    for iter = 1, N do
                        while true do
                            local ok, err = dict:add("lock", pid, 5)
                            if ok then
                                break
                            end
                            if err ~= "exists" then
                                error("add: " .. tostring(err))
                            end
                            waited = waited + 1
                            if waited % 1024 == 0 and proc.now() > deadline then
                                error("lock starvation at iteration " .. iter)
                            end
                            proc.yield()
                        end

                        local v = dict:get("counter")
                        local ok, err = dict:set("counter", v + 1)
                        if not ok then
                            error("set: " .. tostring(err))
                        end

                        local holder = dict:get("lock")
                        if holder ~= pid then
                            error("iteration " .. iter .. ": lock held by "
                                  .. tostring(holder) .. ", not by us " .. pid)
                        end
                        ok, err = dict:delete("lock")
                        if not ok then
                            error("delete: " .. tostring(err))
                        end
                    end
                    -- did we ever find the lock taken? (a run with no
                    -- contention would prove nothing)
                    return waited > 0 and 0 or 3
                end)
            end
            start:release()
            start:close()

            local res = proc.wait_all(pids, 40)
            local uncontended = 0
            for i, r in ipairs(res) do
                if r.how == "exit" and r.code == 3 then
                    uncontended = uncontended + 1
                else
                    assert.same({ how = "exit", code = 0, msg = "" },
                                { how = r.how, code = r.code, msg = r.msg },
                                "child " .. i)
                end
            end
            assert.is_true(uncontended < PROCS, "no process ever met the lock "
                           .. "taken: the processes did not overlap")

            assert.equal(PROCS * N, dict:get("counter"))
            assert.is_nil(dict:get("lock"))
            assert.same({ true }, { dict:verify() })
        end)
    end

    for _, size in ipairs({ "1m", "8m" }) do
        it("gives every concurrent incr a distinct result and an exact total "
           .. "in a " .. size .. " zone",
           function()
            local PROCS, N = 4, 5000
            local dict = open("incr", size)

            local start = proc.pipe()
            local pids = {}
            for i = 1, PROCS do
                pids[i] = proc.spawn(function()
                    if not start:wait_release(10) then
                        error("never released")
                    end
                    local got = {}
                    local last = 0
                    for j = 1, N do
                        local v, err = dict:incr("n", 1, 0)
                        if type(v) ~= "number" then
                            error("incr: " .. tostring(err))
                        end
                        if v <= last then
                            error("incr went backwards: " .. last
                                  .. " then " .. v)
                        end
                        last = v
                        got[j] = v
                    end
                    local f = assert(io.open(dir .. "/incr." .. i, "w"))
                    f:write(concat(got, "\n"), "\n")
                    f:close()
                end)
            end
            start:release()
            start:close()
            expect_clean_exits(pids, 40)

            local total = PROCS * N
            assert.equal(total, dict:get("n"))

            -- each of 1..total was returned to exactly one caller
            local seen, count = {}, 0
            for i = 1, PROCS do
                for line in io.lines(dir .. "/incr." .. i) do
                    local v = tonumber(line)
                    assert.is_nil(seen[v],
                                  "value " .. line .. " returned twice")
                    seen[v] = true
                    count = count + 1
                end
            end
            assert.equal(total, count)
            for v = 1, total do
                assert.is_true(seen[v], "value " .. v .. " never returned")
            end
            assert.same({ true }, { dict:verify() })
        end)
    end

    it("survives set/get/delete from 4 processes in a full small zone "
       .. "(eviction under contention)", function()
        local PROCS, OPS, KEYS = 4, 10000, 150
        local dict = open("mixed", "32k")
        local empty_free = dict:free_space()
        local capacity = dict:capacity()
        assert.is_true(empty_free > 0)

        local start = proc.pipe()
        local pids = {}
        for p = 1, PROCS do
            pids[p] = proc.spawn(function()
                if not start:wait_release(10) then
                    error("never released")
                end
                local pid = proc.getpid()
                math.randomseed(pid)
                local random = math.random

                -- a lock-like entry of ours: add() entries are never evicted
                local pin = "pin." .. pid
                local ok, err = dict:add(pin, pid)
                if not ok then
                    error("add " .. pin .. ": " .. tostring(err))
                end

                -- values describe themselves: any torn or misplaced value
                -- fails to parse or to match its key
                local function make(key, seq)
                    local kind = random(10)
                    if kind == 1 then
                        return seq + 0.25, 7
                    elseif kind == 2 then
                        return seq % 2 == 0, 9
                    end
                    local head = key .. "|" .. pid .. "|" .. seq .. "|"
                    local len = #head + random(0, 400)
                    local fill = string.char(97 + seq % 26)
                    return head .. fill:rep(len - #head), len % 65536
                end

                local function check(key, v, flags)
                    local t = type(v)
                    if t == "number" then
                        if flags ~= 7 or v % 1 ~= 0.25 then
                            error(key .. ": bad number " .. v .. " flags "
                                  .. tostring(flags))
                        end
                    elseif t == "boolean" then
                        if flags ~= 9 then
                            error(key .. ": bad boolean flags "
                                  .. tostring(flags))
                        end
                    elseif t == "string" then
                        local k, seq, rest = v:match("^([^|]+)|%d+|(%d+)|(.*)$")
                        local fill = seq
                                     and string.char(97 + tonumber(seq) % 26)
                        if k ~= key or rest:find("[^" .. fill .. "]")
                           or (flags or 0) ~= #v % 65536
                        then
                            error(key .. ": bad value " .. v:sub(1, 60)
                                  .. " (" .. #v .. " bytes, flags "
                                  .. tostring(flags) .. ")")
                        end
                    elseif v ~= nil then
                        error(key .. ": bad type " .. t)
                    end
                end

                local evictions = 0
                for seq = 1, OPS do
                    local key = "k" .. random(KEYS)
                    local r = random(100)
                    if r <= 45 then
                        local v, flags = make(key, seq)
                        local exptime = random(10) == 1 and 0.005 or 0
                        local forcible
                        ok, err, forcible = dict:set(key, v, exptime, flags)
                        if not ok then
                            error("set " .. key .. ": " .. tostring(err))
                        end
                        if forcible then
                            evictions = evictions + 1
                        end
                    elseif r <= 85 then
                        check(key, dict:get(key))
                    elseif r <= 97 then
                        ok, err = dict:delete(key)
                        if not ok then
                            error("delete " .. key .. ": " .. tostring(err))
                        end
                    elseif p == 1 then
                        ok, err = dict:verify()
                        if not ok then
                            error("verify at op " .. seq .. ": "
                                  .. tostring(err))
                        end
                    else
                        dict:flush_expired(5)
                    end

                    if seq % 500 == 0 and dict:get(pin) ~= pid then
                        error(pin .. " lost at op " .. seq)
                    end
                end

                if dict:get(pin) ~= pid then
                    error(pin .. " lost")
                end
                local f = assert(io.open(dir .. "/evictions." .. p, "w"))
                f:write(evictions, "\n")
                f:close()
            end)
        end
        start:release()
        start:close()
        expect_clean_exits(pids, 40)

        -- the zone was too small for the data: sets had to evict
        local evictions = 0
        for p = 1, PROCS do
            for line in io.lines(dir .. "/evictions." .. p) do
                evictions = evictions + tonumber(line)
            end
        end
        assert.is_true(evictions > 0, "no set ever evicted")

        assert.same({ true }, { dict:verify() })
        for _, pid in ipairs(pids) do
            assert.equal(pid, dict:get("pin." .. pid))
        end
        assert.equal(capacity, dict:capacity())

        -- every chunk comes back: nothing leaked under contention
        dict:flush_all()
        dict:flush_expired()
        assert.same({}, dict:get_keys(0))
        assert.equal(empty_free, dict:free_space())
        assert.same({ true }, { dict:verify() })
    end)

    it("ends up with one zone when 6 processes create it at once",
       function()
        local PROCS, ROUNDS = 6, 8
        local sizes = { "64k", "96k", "128k", "160k", "192k", "224k" }

        for round = 1, ROUNDS do
            local name = "race" .. round
            local start = proc.pipe()
            local pids = {}
            for i = 1, PROCS do
                pids[i] = proc.spawn(function()
                    if not start:wait_release(10) then
                        error("never released")
                    end
                    local dict, err = shdict.open(name, { dir = dir,
                                                          size = sizes[i] })
                    if not dict then
                        error("open: " .. tostring(err))
                    end
                    local ok
                    ok, err = dict:add("key" .. i, i)
                    if not ok then
                        error("add: " .. tostring(err))
                    end
                    ok, err = dict:set("cap" .. i, dict:capacity())
                    if not ok then
                        error("set: " .. tostring(err))
                    end
                end)
            end
            start:release()
            start:close()
            expect_clean_exits(pids, 20)

            local dict = open(name, "32k")
            local cap = dict:capacity()
            local created = false
            for i = 1, PROCS do
                -- the zone keeps its creator's size, whoever attached
                if cap == tonumber(sizes[i]:match("%d+")) * 1024 then
                    created = true
                end
            end
            assert.is_true(created, "capacity " .. cap .. " is nobody's size")
            for i = 1, PROCS do
                assert.equal(i, dict:get("key" .. i))
                assert.equal(cap, dict:get("cap" .. i))
            end
            assert.equal(2 * PROCS, #dict:get_keys(0))
            assert.same({ true }, { dict:verify() })
        end

        -- no half-built zone or temporary file left behind
        local expect = {}
        for round = 1, ROUNDS do
            expect[round] = "shmlock.race" .. round
        end
        table.sort(expect)
        assert.same(expect, list_dir(dir))
    end)
end)
