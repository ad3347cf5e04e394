-- The Lua modules as a whole: one version, the core's numbers named once,
-- public modules and internals told apart, every module loadable alone.

local checkout = require "helpers.checkout"

local sh, trim = checkout.sh, checkout.trim
local read_file = checkout.read_file
local ROOT, LUA_PATH = checkout.ROOT, checkout.LUA_PATH

local PUBLIC = {
    "resty.shmlock", "resty.shmlock.shdict", "resty.shmlock.cache",
    "resty.shmlock.redis", "resty.shmlock.testing",
    "resty.shmlock.semaphore", "resty.shmlock.redis.semaphore",
}

-- every module of the checkout, by name
local function modules()
    local names = {}
    local find = sh("cd '" .. ROOT .. "/lua' && find resty -name '*.lua' "
                    .. "| sort")
    for f in find:gmatch("[^\n]+") do
        names[#names + 1] = f:gsub("%.lua$", ""):gsub("/", ".")
    end
    return names
end

local function path_of(name)
    return ROOT .. "/lua/" .. name:gsub("%.", "/") .. ".lua"
end


describe("resty.shmlock.version", function()
    local version = require "resty.shmlock.version"

    it("is every public module's _VERSION", function()
        assert.is_string(version)
        assert.truthy(version:find("^%d+%.%d+%.%d+$"), version)
        for _, name in ipairs(PUBLIC) do
            assert.equal(version, require(name)._VERSION, name)
        end
    end)

    it("is the rockspec's version", function()
        local spec = trim(sh("cd '" .. ROOT .. "' && ls lua-resty-shmlock-*"
                             .. ".rockspec | sort -V | tail -n 1"))
        assert.truthy(spec ~= "", "no rockspec at the root")
        local text = read_file(ROOT .. "/" .. spec)
        local v = text:match('\nversion%s*=%s*"([^"]+)%-%d+"')
        assert.equal(version, v, spec)
        assert.truthy(spec:find("-" .. version .. "-", 1, true), spec)
    end)
end)


describe("resty.shmlock.internal.codes", function()
    it("names the core's status codes by their messages", function()
        local codes = require "resty.shmlock.internal.codes"
        local errors = require "resty.shmlock.errors"
        local messages = {
            NOT_FOUND = "not found", EXISTS = "exists", CHANGED = "changed",
            SYSTEM = "system error", CORRUPT = "corrupt zone",
            AGAIN = "buffer too small", TIMEOUT = "timeout",
        }
        for name, msg in pairs(messages) do
            assert.equal(msg, errors[codes[name]], name)
        end
        assert.equal(0, codes.OK)
        assert.is_nil(errors[codes.OK])
    end)
end)


describe("the module tree", function()
    it("marks internal modules as such in their first line, and only them",
       function()
        local public = {}
        for _, name in ipairs(PUBLIC) do
            public[name] = true
        end
        public["resty.shmlock.version"] = true
        -- the C core's binding (resty.shmlock.lib, .errors) is internal too,
        -- and speaks for itself
        local core = { ["resty.shmlock.lib"] = true,
                       ["resty.shmlock.errors"] = true }
        local names = modules()
        assert.is_true(#names > #PUBLIC)
        for _, name in ipairs(names) do
            if not core[name] then
                local first = read_file(path_of(name)):match("^[^\n]*")
                local head = "-- " .. name
                assert.equal(head, first:sub(1, #head), name)
                assert.truthy(first:find("^[ :]", #head + 1), first)
                assert.equal(not public[name],
                             first:find("(internal)", 1, true) ~= nil, name)
            end
        end
    end)

    it("loads each module alone outside nginx, writing no global",
       function()
        -- (the C module's side loads under PUC Lua only: spec/60)
        local puc_only = { ["resty.shmlock.internal.core.capi"] = true,
                           ["resty.shmlock.shdict.capi"] = true,
                           ["resty.shmlock.lock.slots.capi"] = true,
                           ["resty.shmlock.semaphore.permit.capi"] = true }
        for _, name in ipairs(modules()) do
            if puc_only[name] then
                goto continue
            end
            local out = sh("LUA_PATH='" .. LUA_PATH .. "' luajit -e \""
                           .. "setmetatable(_G, { __newindex = function(_, k)"
                           .. " error('global ' .. tostring(k), 2) end });"
                           .. "require '" .. name .. "'; print('ok')\" 2>&1")
            assert.equal("ok", trim(out), name)
            ::continue::
        end
    end)
end)
