-- resty.shmlock.redis.renew (internal): the lease renewal of a Redis lock
-- held inside nginx (opts.renew): a timer of the worker extends the lock
-- every exptime / 3 (resty.shmlock.redis.scripts' extend, on a connection
-- of the lock's connect function), with the host's turn, until one of:
--
--   * the lock is released or taken anew (the object's epoch moved on);
--   * the object is collected (the timer keeps it through a weak table
--     only: a renewal never keeps a lock object alive);
--   * the Lua thread that took the lock ends: the request's handler, the
--     timer's function, the light thread (its coroutine is dead, or
--     collected: nginx drops the coroutine of an aborted request);
--   * the worker exits (a premature timer), or the object is not this
--     process's (a copy in a forked process);
--   * the renewal finds the lock gone (expired, taken by someone else):
--     the object learns it (owned() false, unlock() 1, "expired"), and
--     the host's turn goes to the host's next process at once.
--
-- A renewal that fails (Redis slow or down) tries again at the next
-- period; the lease runs out by itself if it keeps failing.

local nginx = require "resty.shmlock.internal.nginx"
local token = require "resty.shmlock.internal.token"
local log = require "resty.shmlock.internal.log"
local link = require "resty.shmlock.redis.link"
local scripts = require "resty.shmlock.redis.scripts"
local now_ms = require("resty.shmlock.internal.clock").now_ms

local error = error
local tostring = tostring
local setmetatable = setmetatable
local co_running = coroutine.running
local co_status = coroutine.status
local ours = token.ours
local EXTEND = scripts.extend

local _M = {}

local ngx = nginx.api()

local WEAK = { __mode = "v" }

-- syntax: renew.check(l, level): raises where opts.renew cannot work
function _M.check(l, level)
    if not ngx then
        error("opts.renew works inside nginx only (a timer renews the "
              .. "lease)", level + 1)
    end
    if not link.connects(l) then
        error("opts.renew needs a connect function (the renewal uses "
              .. "connections of its own)", level + 1)
    end
end

local tick

local function arm(st)
    local ok, err = ngx.timer.at(st.period, tick, st)
    if not ok then
        log.event("error", "redis lock " .. st.key .. ": renewal stopped: "
                           .. "could not start a timer: " .. tostring(err))
    end
end

-- the object whose lock st renews, while it still does
local function target(st)
    local self = st.ref[1]
    if not self or self.epoch ~= st.epoch or not ours(self.pid) then
        return nil
    end
    local co = st.co[1]
    if not co or co_status(co) == "dead" then
        return nil
    end
    return self
end

tick = function(premature, st)
    if premature or not target(st) then
        return
    end
    local sent = now_ms()
    local ok, res = link.script(st.link, EXTEND, st.key, st.fence_key,
                                st.token, st.ms, st.fence_ms)
    -- (the script yielded: look again)
    local self = target(st)
    if not self then
        return
    end
    if ok and res == 0 then
        st.lost(self, st.epoch)
        return
    end
    if ok then
        st.renewed(self, st.epoch, sent)
    end
    arm(st)
end

-- syntax: renew.start(self, renewed, lost)
-- Renews the lock self has just taken (nothing for a lock that never
-- expires); renewed(self, epoch, sent_ms) after each renewal,
-- lost(self, epoch) when one finds the lock gone (resty.shmlock.redis's:
-- only it writes a lock's fields).
function _M.start(self, renewed, lost)
    if self.exptime == 0 then
        return
    end
    arm({
        ref = setmetatable({ self }, WEAK),
        co = setmetatable({ co_running() }, WEAK),
        epoch = self.epoch,
        period = self.exptime / 3,
        link = self.link,
        key = self.key,
        fence_key = self.fence_key,
        token = self.token,
        ms = self.ms,
        fence_ms = self.fence_ms,
        renewed = renewed,
        lost = lost,
    })
end

return _M
