-- resty.shmlock.testing (docs/testing.md), the helpers for a user's specs:
-- under LuaJIT and each PUC Lua (spec/every_lua/testing.lua), and its
-- misuse.  (spec/user/shmlock_user.lua uses it as a user does, under
-- busted as installed: scripts/test-busted.sh.)

local checkout = require "helpers.checkout"
local testing = require "resty.shmlock.testing"

local sh, trim = checkout.sh, checkout.trim
local ROOT = checkout.ROOT
local LUA_PATH = ROOT .. "/lua/?.lua;;"

describe("resty.shmlock.testing", function()
    it("works under each interpreter", function()
        for _, lua in ipairs { "luajit", "lua5.1", "lua5.2", "lua5.3",
                               "lua5.4" } do
            -- SHMLOCK_DIR set before: restored to it afterwards
            local out = trim(sh("cd /tmp && SHMLOCK_DIR=/nonexistent LUA_PATH='"
                                .. LUA_PATH .. "' " .. lua .. " '" .. ROOT
                                .. "/spec/every_lua/testing.lua' 2>&1"))
            assert.equal("ok", out, lua)
        end
    end)

    it("kills a process past opts.timeout", function()
        local r = testing.processes(1, "while true do end",
                                    { timeout = 1, together = false })
        assert.is_false(r[1].ok)
        assert.equal(137, r[1].status)
    end)

    it("raises on misuse", function()
        local function msg(...)
            local ok, err = pcall(testing.processes, ...)
            assert.is_false(ok)
            return (tostring(err):gsub("^[^:]+:%d+: ", ""))
        end
        local n = "n must be an integer from 1 to 1024"
        assert.equal(n, msg(0, ""))
        assert.equal(n, msg(1.5, ""))
        -- (2^32 processes would only exhaust the host's)
        assert.equal(n, msg(1025, ""))
        assert.equal(n, msg(2 ^ 32, ""))
        assert.equal(n, msg(0 / 0, ""))
        assert.equal("source must be a string of Lua code", msg(1, print))
        assert.equal("opts must be a table", msg(1, "", 5))
        assert.equal("opts.timeout must be a number > 0",
                     msg(1, "", { timeout = 0 }))
    end)
end)
