-- Randomised semaphore operations against a plain Lua model: objects of
-- different limits acquiring, releasing, extending and being collected,
-- processes that take a permit and die (SIGKILL) holding it, on a few
-- keys.  After every operation each answer must be the model's, and the
-- zone must verify.
--
-- The model of a key: `live` (the permits of live holders) and `dead`
-- (permits of dead processes not dropped yet).  An acquire by a caller of
-- limit p drops the dead first when the key looks full to it (live + dead
-- >= p: the C core refuses, the Lua side reclaims and tries again), then
-- gets a permit iff live < p; count() drops the dead and answers live;
-- inspect() lists live + dead holders, `alive` telling them apart.

local fixture = require "helpers.fixture"
local proc = require "harness.proc"
local shdict = require "resty.shmlock.shdict"
local semaphore = require "resty.shmlock.semaphore"

local SEED = tonumber(os.getenv("MODEL_SEED") or "") or os.time()

describe("resty.shmlock.semaphore against a model", function()
    local fx = fixture.new { children = "assert" }

    it("answers every operation as the model does (seed " .. SEED .. ")",
       function()
        math.randomseed(SEED)
        local rnd = math.random
        local dict = assert(shdict.open("semmodel", { dir = fx.dir,
                                                      size = "256k" }))
        local KEYS = { "a", "b", "c" }
        local keys = {}                 -- key -> { live = n, dead = n }
        for _, k in ipairs(KEYS) do
            keys[k] = { live = 0, dead = 0 }
        end
        local objs = {}                 -- i -> { sem, permits, key held }
        for i = 1, 10 do
            local permits = rnd(1, 4)
            objs[i] = { sem = assert(semaphore:new(dict,
                                         { permits = permits, exptime = 0 })),
                        permits = permits, held = false }
        end

        -- the model's acquire by a caller of limit p: got it?
        local function model_acquire(m, p)
            if m.live + m.dead >= p then
                m.dead = 0
            end
            return m.live < p
        end

        local ops = 0
        local function check(what, got, want)
            assert.same(want, got, what .. " (op " .. ops .. ", seed "
                                   .. SEED .. ")")
        end

        for _ = 1, 600 do
            ops = ops + 1
            local r = rnd(100)
            local o = objs[rnd(#objs)]
            local key = KEYS[rnd(#KEYS)]
            local m = keys[key]
            if r <= 35 then
                if o.held then
                    check("acquire while holding", { o.sem:acquire(key, 0) },
                          { nil, "locked" })
                elseif model_acquire(m, o.permits) then
                    check("acquire", { o.sem:acquire(key, 0) }, { 0 })
                    m.live = m.live + 1
                    o.held = key
                else
                    check("acquire of a full key", { o.sem:acquire(key, 0) },
                          { nil, "timeout" })
                end
            elseif r <= 65 then
                if o.held then
                    check("release", { o.sem:release() }, { 1 })
                    keys[o.held].live = keys[o.held].live - 1
                    o.held = false
                else
                    check("release of none", { o.sem:release() },
                          { nil, "unlocked" })
                end
            elseif r <= 72 then
                check("expire", { o.sem:expire(100) },
                      o.held and { true } or { nil, "unlocked" })
                check("owned", o.sem:owned(), o.held and true or false)
            elseif r <= 80 then
                check("count", { o.sem:count(key) }, { m.live })
                m.dead = 0
            elseif r <= 87 then
                local info = semaphore.inspect(dict, key)
                local alive = 0
                for _, h in ipairs(info and info.holders or {}) do
                    if h.alive then
                        alive = alive + 1
                    end
                end
                check("inspect", { info and info.count or 0, alive },
                      { m.live + m.dead, m.live })
            elseif r <= 94 then
                -- a process takes a permit and dies holding it
                local p = rnd(1, 4)
                local got = model_acquire(m, p)
                local res = proc.wait(proc.spawn(function()
                    local s = assert(semaphore:new(dict, { permits = p,
                                                           exptime = 0 }))
                    local elapsed, err = s:acquire(key, 0)
                    if (elapsed == 0) ~= got then
                        error("a dying process's acquire: "
                              .. tostring(elapsed) .. " " .. tostring(err))
                    end
                    proc.kill(proc.getpid(), proc.SIGKILL)
                end), 10)
                check("a dying process", { res.how, res.sig },
                      { "signal", proc.SIGKILL })
                if got then
                    m.dead = m.dead + 1
                end
            else
                -- an object collected while holding gives its permit back
                local i = rnd(#objs)
                if objs[i].held then
                    keys[objs[i].held].live = keys[objs[i].held].live - 1
                end
                local permits = rnd(1, 4)
                objs[i] = { sem = assert(semaphore:new(dict,
                                             { permits = permits,
                                               exptime = 0 })),
                            permits = permits, held = false }
                o = nil         -- luacheck: ignore (the only other reference)
                collectgarbage()
                collectgarbage()
            end
            check("verify", { dict:verify() }, { true })
        end

        for _, o in ipairs(objs) do
            if o.held then
                check("release at the end", { o.sem:release() }, { 1 })
            end
        end
        for _, k in ipairs(KEYS) do
            check("count at the end", { objs[1].sem:count(k) }, { 0 })
        end
    end)
end)
