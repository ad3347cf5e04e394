-- helpers.fake_clock: a lock module loaded afresh over a clock that moves
-- only when the lock sleeps, so that its waits are exact whatever the
-- machine's load (a timer margin is not: a loaded machine wakes a sleeper
-- late).
--
--     local fc = fake_clock.new()
--     local resty_lock = fc:require("resty.shmlock")  -- or .redis
--     ... lock:lock(key) ...
--     fc.sleeps           --> { 0.001, 0.002, ... }: each sleep, seconds
--
-- The stand-ins: resty.shmlock.internal.clock (now_us, now_ms, now and
-- sleep read and move fc.us; cached_ms answers 0, "read the clock
-- yourself", as outside nginx), and the C library's shmlock_wait_end (a
-- futex wait of a waiter outside nginx): it ends a wait of us > 0 at
-- once, as a wait no release cut short (SHMLOCK_TIMEOUT), and moves the
-- clock by its length.  Everything else is the real library: the zone's
-- own clock still expires keys (hold them with a long exptime), Redis
-- still runs.  fake_clock.new { lib = stand_in } forwards the other C
-- calls to stand_in (one that injects errors, say) instead.
--
-- fake_clock.new { real = true } keeps the real clock and waits, and
-- records each futex wait (and each clock.sleep: a Redis lock's wait) in
-- fc.waits: { from = us, to = us, woken = whether a release ended it, not
-- its timeout }, read on the clock just before and after it: so each lies
-- inside the lock call that made it, whose elapsed is at least the span
-- from the first one's start to the last one's end.
--
-- The zone lock's wait outside nginx is the C core's (src/shmlock_lock.c):
-- its clock and futex waits are the test build's seam
-- (shmlock_test_lock_clock), switched to this clock (or, real, to
-- recording) for the length of each call of a module fc:require loaded,
-- and what it recorded is added to fc.sleeps (fc.us moved on) or fc.waits.
--
-- The modules are loaded with the stand-ins in package.loaded, then
-- package.loaded is put back as it was: the rest of the spec file keeps
-- the real modules.  Modules that declare C types (ffi.cdef) can be
-- loaded only once per process; they are shared, not reloaded (none of
-- them reads the clock).

local ffi = require "ffi"
local lib = require "resty.shmlock.lib"
local hooks = require "helpers.test_hooks"

local floor = math.floor
local unpack = unpack or table.unpack   -- luacheck: ignore 143

local MAX_WAITS = 4096
local waits_buf = ffi.new("int64_t[?]", 3 * MAX_WAITS)

local SHARED = {
    ["resty.shmlock.lib"] = true,
    ["resty.shmlock.shdict"] = true,
    ["resty.shmlock.lock.handle"] = true,
    ["resty.shmlock.internal.token"] = true,
    ["resty.shmlock.internal.nginx_user"] = true,
    ["resty.shmlock.cli.fs"] = true,
}

local function ours(name)
    return name:find("^resty%.shmlock") and not SHARED[name]
end

local fc_mt = {}
fc_mt.__index = fc_mt

local _M = {}

-- syntax: fc = fake_clock.new(opts?)
-- fc.us: the time (starts at the real clock's); fc.sleeps: every sleep
function _M.new(opts)
    local real = opts and opts.lib or lib
    local fc = setmetatable({ us = tonumber(real.shmlock_now_us()),
                              sleeps = {}, waits = {},
                              real = opts and opts.real or false }, fc_mt)
    local TIMEOUT = real.SHMLOCK_TIMEOUT
    if opts and opts.real then
        local clock = require "resty.shmlock.internal.clock"
        fc.clock = setmetatable({
            sleep = function(seconds)
                local from = clock.now_us()
                clock.sleep(seconds)
                fc.waits[#fc.waits + 1] = { from = from, to = clock.now_us(),
                                            woken = false }
            end,
        }, { __index = clock })
        fc.lib = setmetatable({
            shmlock_wait_end = function(zone, hash, seq, us)
                local from = tonumber(real.shmlock_now_us())
                local rc = real.shmlock_wait_end(zone, hash, seq, us)
                if us <= 0 then
                    return rc
                end
                fc.waits[#fc.waits + 1] = {
                    from = from, to = tonumber(real.shmlock_now_us()),
                    woken = rc ~= TIMEOUT }
                return rc
            end,
        }, { __index = real })
        return fc
    end
    local function advance(seconds, us)
        fc.sleeps[#fc.sleeps + 1] = seconds
        fc.us = fc.us + (us or seconds * 1e6)
    end
    fc.clock = {
        now_us = function() return fc.us end,
        now_ms = function() return floor(fc.us / 1000) end,
        now = function() return fc.us / 1e6 end,
        cached_ms = function() return 0 end,
        sleep = advance,
    }
    fc.lib = setmetatable({
        shmlock_wait_end = function(zone, hash, seq, us)
            -- uncounts the waiter (shmlock_wait_begin counted it)
            -- (a wait of 0 only does that: no sleep)
            real.shmlock_wait_end(zone, hash, seq, 0)
            if us <= 0 then
                return real.SHMLOCK_OK
            end
            us = tonumber(us)
            advance(us / 1e6, us)
            return TIMEOUT
        end,
    }, { __index = real })
    return fc
end

-- what the C core's lock recorded in a call, into fc
local function collect(fc)
    local n = hooks.shmlock_test_lock_waits(waits_buf, MAX_WAITS)
    for i = 0, n - 1 do
        local from = tonumber(waits_buf[3 * i])
        local to = tonumber(waits_buf[3 * i + 1])
        if fc.real then
            fc.waits[#fc.waits + 1] = { from = from, to = to,
                                        woken = waits_buf[3 * i + 2] ~= 0 }
        else
            fc.sleeps[#fc.sleeps + 1] = (to - from) / 1e6
        end
    end
    if not fc.real then
        fc.us = tonumber(hooks.shmlock_test_lock_now())
    end
end

local function pack(...)
    return { n = select("#", ...), ... }
end

-- f, its calls made with the C core's lock on this clock
local function on_clock(fc, f)
    return function(...)
        hooks.shmlock_test_lock_clock(fc.real and 2 or 1, fc.us)
        local out = pack(pcall(f, ...))
        collect(fc)
        hooks.shmlock_test_lock_clock(0, 0)
        if not out[1] then
            error(out[2], 0)
        end
        return unpack(out, 2, out.n)
    end
end

-- syntax: mod = fc:require(name)
-- name (and the modules it needs) loaded afresh over this clock
function fc_mt:require(name)
    local loaded = package.loaded
    local saved = {}
    for k, v in pairs(loaded) do
        if ours(k) then
            saved[k] = v
            loaded[k] = nil
        end
    end
    saved["resty.shmlock.lib"] = lib
    loaded["resty.shmlock.lib"] = self.lib
    loaded["resty.shmlock.internal.clock"] = self.clock
    local ok, mod = pcall(require, name)
    for k in pairs(loaded) do
        if ours(k) then
            loaded[k] = nil
        end
    end
    for k, v in pairs(saved) do
        loaded[k] = v
    end
    assert(loaded["resty.shmlock.lib"] == lib, "package.loaded not restored")
    assert(ok, mod)
    -- its functions (a lock object's methods among them) on this clock
    for k, v in pairs(mod) do
        if type(v) == "function" then
            mod[k] = on_clock(self, v)
        end
    end
    return mod
end

-- syntax: s = fc:slept()
-- the sum of the sleeps, in seconds
function fc_mt:slept()
    local sum = 0
    for _, s in ipairs(self.sleeps) do
        sum = sum + s
    end
    return sum
end

return _M
