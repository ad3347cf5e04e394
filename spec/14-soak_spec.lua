-- The soak test, short: spec/soak.lua (which `make soak` runs for 300 s)
-- for 20 s, in a process of its own.  Every check it makes must pass
-- (TAP's TODO marks a known defect it reports without failing), and its
-- self-test must fail it: a lock that now and then does not lock, and a
-- worker that stops for good inside a round.

local LUAJIT = os.getenv("LUAJIT") or "luajit"

-- runs the soak with the given environment; its TAP output, parsed
local function soak(vars)
    local parts = {}
    for k, v in pairs(vars) do
        parts[#parts + 1] = k .. "=" .. v
    end
    local p = assert(io.popen(table.concat(parts, " ") .. " " .. LUAJIT
                              .. " spec/soak.lua 2>&1; echo \"exit=$?\""))
    local r = { tests = {}, lines = {}, figures = {} }
    for line in p:lines() do
        r.lines[#r.lines + 1] = line
        local status, n, desc = line:match("^(n?o?t? ?ok) (%d+) %- (.*)$")
        if status then
            local todo = desc:match(" # TODO (.*)$")
            r.tests[#r.tests + 1] = {
                ok = status == "ok", n = tonumber(n), todo = todo,
                desc = desc:gsub(" # TODO .*$", ""),
            }
        end
        r.plan = r.plan or tonumber(line:match("^1%.%.(%d+)$"))
        r.exit = r.exit or tonumber(line:match("^exit=(%d+)$"))
        local v, h = line:match("^# violations: (%d+), hangs: (%d+)")
        if v then
            r.violations, r.hangs = tonumber(v), tonumber(h)
        end
        if line:match("^# ") and not line:match("^#   ") then
            r.figures[#r.figures + 1] = line
        end
    end
    p:close()
    r.output = table.concat(r.lines, "\n")
    return r
end

local function by_desc(r, pattern)
    for _, t in ipairs(r.tests) do
        if t.desc:find(pattern) then
            return t
        end
    end
    error("no test " .. pattern .. " in:\n" .. r.output)
end


describe("the soak test (spec/soak.lua)", function()
    it("passes every check through 20 s of kills, pid reuse inside the "
       .. "mutex, full zones, destroys and several VMs per process",
       function()
        local r = soak({ SOAK_SECONDS = 20, SOAK_REUSE_EVERY = 5 })
        io.stderr:write("\n    ", table.concat(r.figures, "\n    "), "\n")
        assert.equal(0, r.exit, r.output)
        assert.equal(r.plan, #r.tests, r.output)
        for i, t in ipairs(r.tests) do
            assert.equal(i, t.n)
            if not t.todo then
                assert.is_true(t.ok, t.desc .. "\n" .. r.output)
            end
        end
        assert.same({ 0, 0 }, { r.violations, r.hangs }, r.output)
        assert.is_true(by_desc(r, "^every scenario ran").ok)
    end)

    -- (the self-test checks the soak's own checks, not the library: make
    -- test-asan leaves it out with SOAK_SELF_TEST=0, test-lua runs it)
    local self_test = os.getenv("SOAK_SELF_TEST") ~= "0"

    it("fails when a lock does not always lock (SOAK_BREAK=lock)",
       function()
        if not self_test then
            pending("SOAK_SELF_TEST=0")
            return
        end
        local r = soak({ SOAK_SECONDS = 3, SOAK_BREAK = "lock" })
        assert.equal(1, r.exit, r.output)
        assert.is_false(by_desc(r, "^counters exact").ok, r.output)
        assert.is_false(by_desc(r, "^no violations").ok, r.output)
        assert.is_true(r.violations > 0, r.output)
        assert.equal(0, r.hangs, r.output)
    end)

    it("fails when a worker stops inside a round (SOAK_BREAK=hang)",
       function()
        if not self_test then
            pending("SOAK_SELF_TEST=0")
            return
        end
        local r = soak({ SOAK_SECONDS = 6, SOAK_BREAK = "hang",
                         SOAK_HANG_AFTER = 3 })
        assert.equal(1, r.exit, r.output)
        assert.is_false(by_desc(r, "^no hangs").ok, r.output)
        assert.is_true(r.hangs >= 1, r.output)
        assert.equal(0, r.violations, r.output)
        -- the hung worker was killed: its lock went to the others
        assert.is_true(by_desc(r, "^counters exact").ok, r.output)
    end)
end)
