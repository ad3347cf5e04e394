-- resty.shmlock.internal.random (internal): randomness that tells
-- processes apart, for tokens that must be unique across hosts and for
-- waiters that must not back off in lockstep.  Not for secrets.

local core = require "resty.shmlock.internal.core"
local bit = core.bit

local bxor, lshift, rshift, tobit = bit.bxor, bit.lshift, bit.rshift, bit.tobit
local byte = string.byte
local rep = string.rep
local tostring = tostring
local io_open = io.open

local _M = {}

-- syntax: s = random.bytes(n)
-- n bytes from /dev/urandom; where there is none (a chroot), bytes that
-- still vary: the time and a heap address.
local function bytes(n)
    local f = io_open("/dev/urandom", "rb")
    local s = f and f:read(n)
    if f then
        f:close()
    end
    if not s or #s < n then
        s = tostring(os.time()) .. tostring(os.clock()) .. tostring({})
        s = s .. rep("\0", n)
    end
    return s
end
_M.bytes = bytes

local seed                      -- drawn at the first number
local state = 1
local state_pid = -1

-- syntax: x = random.number()
-- [0, 1), xorshift32; the generator is seeded again in each new process
-- (nginx forks its workers after loading modules), so forked waiters do
-- not draw the same numbers.
function _M.number()
    local pid = core.self_pid()
    if pid ~= state_pid then
        if not seed then
            local b = bytes(4)
            seed = tobit(((byte(b, 1) * 256 + byte(b, 2)) * 256
                          + byte(b, 3)) * 256 + byte(b, 4))
        end
        state_pid = pid
        state = bxor(seed, tobit(pid * 2654435761 % 4294967296))
        if state == 0 then
            state = 1
        end
    end
    local x = state
    x = bxor(x, lshift(x, 13))
    x = bxor(x, rshift(x, 17))
    x = bxor(x, lshift(x, 5))
    state = x
    return (x % 4294967296) / 4294967296
end

return _M
