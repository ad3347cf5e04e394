-- helpers.fixture: the set-up and clean-up the specs share, registered in
-- the describe block that calls new() (busted's hooks, in the order of
-- registration: hooks the block registers later run after these).
--
--     local fx = fixture.new { dir = "test", children = "assert" }
--     before_each(function()
--         dict = fx:zone("z", { size = "64k" })   -- in fx.dir
--     end)
--
-- opts.dir       "test" (default): a fresh private directory fx.dir before
--                each test, removed after it; "block": one for the whole
--                block (setup/teardown); false: none.
-- opts.env       true: SHMLOCK_DIR is fx.dir while the block runs ("block").
-- opts.children  after each test, every child of harness.proc still there
--                is SIGKILLed and reaped; "assert": and the test fails if
--                there was one ("children left running"); nil: left alone.
--
-- After each test (and at the end of the block, for what setup made): the
-- children are reaped, the functions given to fx:defer() run, newest
-- first (fx:zone() destroys its zones so), two garbage collections unmap
-- the zones nothing holds any more, then the directory goes.

local proc = require "harness.proc"
local shdict = require "resty.shmlock.shdict"
local env = require "helpers.lock_env"
local busted = require "busted"
local luassert = require "luassert"

local _M = {}

local fx_mt = {}
fx_mt.__index = fx_mt

-- syntax: dict = fx:zone(name, opts)
-- Opens zone `name` in fx.dir (opts: size, shards, ...; opts.dir for
-- another directory), raising if it
-- cannot; the zone is destroyed at the clean-up of the test (or of the
-- block, when made in setup).
function fx_mt:zone(name, opts)
    local o = { dir = self.dir }
    for k, v in pairs(opts or {}) do
        o[k] = v
    end
    local dict = assert(shdict.open(name, o))
    self:defer(function()
        shdict.destroy(name, { dir = o.dir })
    end)
    return dict
end

-- syntax: fx:defer(fn)
-- fn() runs at the clean-up of the current test (of the block, when
-- called from setup), before the directory is removed.
function fx_mt:defer(fn)
    local list = self.in_test and self.test_defers or self.block_defers
    list[#list + 1] = fn
end

-- runs and empties a defer list, newest first; raises the first error
-- once every function ran
local function run_defers(list)
    local first
    for i = #list, 1, -1 do
        local ok, err = pcall(list[i])
        list[i] = nil
        if not ok and first == nil then
            first = err
        end
    end
    if first ~= nil then
        error(first, 0)
    end
end

local function clean(fx, list, remove_dir)
    local ok, err = pcall(run_defers, list)
    collectgarbage()
    collectgarbage()
    if remove_dir and fx.dir then
        proc.rmtree(fx.dir)
        fx.dir = nil
    end
    if not ok then
        error(err, 0)
    end
end

function _M.new(opts)
    opts = opts or {}
    local per = opts.dir
    if per == nil then
        per = "test"
    end
    assert(per == "test" or per == "block" or per == false,
           'opts.dir must be "test", "block" or false')
    assert(not opts.env or per == "block", 'opts.env needs dir = "block"')
    local fx = setmetatable({ test_defers = {}, block_defers = {},
                              in_test = false }, fx_mt)

    if per == "block" then
        busted.setup(function()
            fx.dir = proc.tmpdir()
            if opts.env then
                env.setenv("SHMLOCK_DIR", fx.dir)
            end
        end)
        busted.teardown(function()
            if opts.env then
                env.setenv("SHMLOCK_DIR", nil)
            end
            clean(fx, fx.block_defers, true)
        end)
    end

    busted.before_each(function()
        fx.in_test = true
        if per == "test" then
            fx.dir = proc.tmpdir()
        end
    end)

    busted.after_each(function()
        fx.in_test = false
        local left = opts.children and proc.reap_all() or {}
        clean(fx, fx.test_defers, per == "test")
        if opts.children == "assert" then
            luassert.same({}, left, "children left running")
        end
    end)

    return fx
end

return _M
