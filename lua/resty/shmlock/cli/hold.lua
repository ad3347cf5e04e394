-- resty.shmlock.cli.hold (internal): what `shmlock run` holds on KEY
-- while COMMAND's process group lives, one interface over its three
-- kinds: the lock (resty.shmlock's lock()), a shared hold (--shared:
-- lock_shared()), a semaphore's permit (--permits N: at most N holders of
-- KEY at once).
--
--     local h = hold.new(dict, "lock", exptime, permits)
--     local elapsed, err = h:take(key, timeout)   -- as lock() answers
--     local ok, err = h:renew()   -- true; nil, "expired": not ours any
--                                 -- more (released from outside, or it
--                                 -- expired); nil, err: the zone's
--     local yes = h:held()        -- still ours, read without a write
--     h:release()
--
-- held() is how the keeper learns that the hold was taken from it
-- (`shmlock unlock`) without writing to the slot: a renewal moves the
-- slot's state on, and an unlock from the shell between its look and its
-- release would then find the lock changed.

local resty_lock = require "resty.shmlock"
local semaphore = require "resty.shmlock.semaphore"
local permit = require "resty.shmlock.semaphore.permit"
local groups = require "resty.shmlock.cli.groups"

local format = string.format

local _M = {}

local lock_mt = { __index = {} }
local shared_mt = { __index = {} }
local permit_mt = { __index = {} }

function lock_mt.__index.take(self, key, timeout)
    return self.obj:lock(key, timeout)
end

function shared_mt.__index.take(self, key, timeout)
    return self.obj:lock_shared(key, timeout)
end

function permit_mt.__index.take(self, key, timeout)
    return self.obj:acquire(key, timeout)
end

for _, mt in ipairs { lock_mt, shared_mt } do
    mt.__index.renew = function(self)
        return self.obj:expire()
    end
    mt.__index.release = function(self)
        return self.obj:unlock()
    end
end

for _, mt in ipairs { lock_mt, shared_mt } do
    mt.__index.held = function(self)
        return self.obj:owned()
    end
end

-- (a semaphore's owned() says whether the object took a permit, not
-- whether the zone still counts it)
function permit_mt.__index.held(self)
    local cd = permit.held(self.obj.permit)
    return cd ~= nil and groups.has(cd.zone, groups.KIND.semaphore,
                                    self.obj.key, cd.ticket)
end

function permit_mt.__index.renew(self)
    return self.obj:expire()
end

function permit_mt.__index.release(self)
    return self.obj:release()
end


-- syntax: what = hold.describe(kind, key, permits)
-- How messages name the hold: 'lock "KEY"', 'shared hold of "KEY"',
-- 'permit of "KEY" (N at most)'.
function _M.describe(kind, key, permits)
    if kind == "shared" then
        return format('shared hold of "%s"', key)
    elseif kind == "semaphore" then
        return format('permit of "%s" (%d at most)', key, permits)
    end
    return format('lock "%s"', key)
end


-- syntax: h, err = hold.new(dict, kind, exptime, permits)
-- kind: "lock", "shared" or "semaphore"; exptime: seconds, 0 for none;
-- permits: the semaphore's.  nil and the library's error.
function _M.new(dict, kind, exptime, permits)
    local obj, err
    local mt
    if kind == "semaphore" then
        obj, err = semaphore:new(dict, { permits = permits,
                                         exptime = exptime })
        mt = permit_mt
    else
        obj, err = resty_lock:new(dict, { exptime = exptime })
        mt = kind == "shared" and shared_mt or lock_mt
    end
    if not obj then
        return nil, err
    end
    return setmetatable({ obj = obj }, mt)
end

return _M
