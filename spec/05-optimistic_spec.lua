-- get() reads without the zone mutex (seqlock-validated): readers racing
-- with writers that replace, delete and evict must only ever see a whole
-- value that some writer stored, never a torn or foreign one.

local proc = require "harness.proc"
local fixture = require "helpers.fixture"
local shdict = require "resty.shmlock.shdict"

local char, rep, byte = string.char, string.rep, string.byte

-- every value a writer stores is determined by its length, so a reader can
-- tell a whole value from a torn one
local function value_of(len)
    return rep(char(65 + len % 26), len)
end

local function whole(v)
    local len = #v
    return len > 0 and v == value_of(len)
end

describe("optimistic get under concurrent writers", function()
    local fx = fixture.new { children = "reap" }
    local dir, dict

    before_each(function()
        dir = fx.dir
        dict = fx:zone("optimistic", { size = "256k" })
    end)

    -- in a child: the zone, opened, once the parent releases start
    local function opened_at(start)
        local d = assert(shdict.open("optimistic", { dir = dir }))
        if not start:wait_release(10) then
            error("never released")
        end
        return d
    end

    it("never returns a torn string, number/flags pair or foreign key", function()
        local duration = 1.5
        local keys = 16
        local pids = {}

        -- writers: replace values with other sizes (new chunk chains),
        -- delete, and fill the zone so that eviction recycles chunks
        for w = 1, 2 do
            pids[#pids + 1] = proc.spawn(function()
                local d = assert(shdict.open("optimistic", { dir = dir }))
                local stop = proc.now() + duration
                local n = w * 7919
                while proc.now() < stop do
                    n = n + 1
                    local k = n % keys
                    local len = 1 + (n * 37) % 400
                    if n % 11 == 0 then
                        d:delete("s" .. k)
                    else
                        d:set("s" .. k, value_of(len))
                    end
                    d:set("n" .. k, n, 0, n % 1000)
                    d:set("fill" .. n % 500, value_of(200))
                end
            end)
        end

        -- readers: every answer must be nil or whole
        local readers = {}
        for r = 1, 2 do
            readers[r] = proc.spawn(function()
                local d = assert(shdict.open("optimistic", { dir = dir }))
                local stop = proc.now() + duration
                local reads, seen = 0, 0
                -- (past `duration` until it has read enough, 20 s at most:
                -- a loaded machine may run a reader late)
                while proc.now() < stop or (reads < 1000 or seen == 0)
                      and proc.now() < stop + 20 do
                    for k = 0, keys - 1 do
                        local v = d:get("s" .. k)
                        if v ~= nil then
                            if type(v) ~= "string" or not whole(v) then
                                error("torn value for s" .. k .. ": "
                                      .. tostring(v):sub(1, 40))
                            end
                            seen = seen + 1
                        end
                        local n, flags = d:get("n" .. k)
                        if n ~= nil then
                            if type(n) ~= "number" or n % keys ~= k
                               or (flags or 0) ~= n % 1000
                            then
                                error("inconsistent n" .. k .. ": "
                                      .. tostring(n) .. " flags "
                                      .. tostring(flags))
                            end
                        end
                        reads = reads + 2
                    end
                end
                if seen == 0 or reads < 1000 then
                    error("readers saw too little: " .. reads .. " reads, "
                          .. seen .. " values")
                end
            end)
        end

        for _, res in ipairs(proc.wait_all(pids, 30)) do
            assert.same({ how = "exit", code = 0, msg = "" }, res)
        end
        for _, res in ipairs(proc.wait_all(readers, 30)) do
            assert.same({ how = "exit", code = 0, msg = "" }, res)
        end
        assert.same({ true }, { dict:verify() })
    end)

    -- set() of a number over a number of the same flags, neither
    -- expiring, is one store in place: readers racing with it must see
    -- the old or the new number whole, with its own flags
    it("never returns a torn number while numbers are set in place",
       function()
        local keys, rounds = 8, 20000
        local start = proc.pipe()
        for k = 0, keys - 1 do
            assert(dict:set("m" .. k, k, 0, 100 + k))
        end

        local writers = {}
        for w = 1, 2 do
            writers[w] = proc.spawn(function()
                local d = opened_at(start)
                for n = 1, rounds do
                    for k = 0, keys - 1 do
                        -- k modulo keys, and never integral halves apart
                        local v = k + keys * (n * 2 + w) + 0.5
                        assert(d:set("m" .. k, v, 0, 100 + k))
                    end
                end
            end)
        end

        local readers = {}
        for r = 1, 2 do
            readers[r] = proc.spawn(function()
                local d = opened_at(start)
                for _ = 1, rounds do
                    for k = 0, keys - 1 do
                        local v, flags = d:get("m" .. k)
                        if type(v) ~= "number" or flags ~= 100 + k
                           or (v ~= k and (v - 0.5) % keys ~= k)
                        then
                            error("inconsistent m" .. k .. ": "
                                  .. tostring(v) .. " flags "
                                  .. tostring(flags))
                        end
                    end
                end
            end)
        end
        start:release()
        start:close()

        for _, res in ipairs(proc.wait_all(writers, 60)) do
            assert.same({ how = "exit", code = 0, msg = "" }, res)
        end
        for _, res in ipairs(proc.wait_all(readers, 60)) do
            assert.same({ how = "exit", code = 0, msg = "" }, res)
        end
        for k = 0, keys - 1 do
            local v = dict:get("m" .. k)
            assert.equal(k, (v - 0.5) % keys)
        end
        assert.same({ true }, { dict:verify() })
    end)

    it("sees a value stored by another process at once", function()
        local pid = proc.spawn(function()
            local d = assert(shdict.open("optimistic", { dir = dir }))
            assert(d:set("hello", value_of(100)))
        end)
        assert.same({ how = "exit", code = 0, msg = "" }, proc.wait(pid, 10))
        assert.same({ value_of(100) }, { dict:get("hello") })
        assert.equal(byte("W"), byte(dict:get("hello")))
    end)
end)
