-- polling_lock: the peer.  The algorithm of OpenResty's resty.lock
-- (lua-resty-lock, lib/resty/lock.lua), written again for the benchmark
-- because Debian does not package lua-resty-lock.  It keeps everything that costs time in the
-- original, so the comparison is fair:
--
--   new():    a dictionary lookup by name, one ffi.new of a cdata type
--             with a __gc metamethod (so an abandoned lock is deleted), a
--             slot in a Lua-side registry for the dict, a table of seven
--             fields and setmetatable;
--   lock():   dict:add(key, true, exptime); when the key exists, sleep
--             `step` and try again, step = min(max(0.001, step * ratio),
--             timeout left, max_step), until `timeout`;
--   unlock(): dict:delete(key), after looking the key up in the registry.
--
-- Defaults as resty.lock: exptime 30, timeout 5, step 0.001, ratio 2,
-- max_step 0.5, with its clamping (timeout <= exptime, step <= timeout).
--
-- Inside nginx the dictionary is ngx.shared[name] and waits are ngx.sleep;
-- outside nginx the dictionary is any object with add/delete (a
-- resty.shmlock.shdict zone) and waits are nanosleep(2).

local ffi = require "ffi"

local ffi_new = ffi.new
local max = math.max
local min = math.min
local tonumber = tonumber
local setmetatable = setmetatable
local type = type

local in_nginx = ngx ~= nil and ngx.shared ~= nil
local shared = in_nginx and ngx.shared or {}
local sleep = in_nginx and ngx.sleep or require("bench").sleep

local _M = { _VERSION = "0.09-bench" }
local mt = { __index = _M }

-- The registry: slot 0 heads the list of free slots.  The cdata holds
-- slot numbers, because a cdata cannot reference Lua objects.
local registry = {}
local FREE = 0

local function ref(obj)
    if obj == nil then
        return -1
    end
    local slot = registry[FREE]
    if slot and slot ~= 0 then
        registry[FREE] = registry[slot]
    else
        slot = #registry + 1
    end
    registry[slot] = obj
    return slot
end

local function unref(slot)
    if slot >= 0 then
        registry[slot] = registry[FREE]
        registry[FREE] = slot
    end
end

-- an abandoned lock object deletes its key
local function collect(cd)
    local key_slot = tonumber(cd.key_slot)
    local dict_slot = tonumber(cd.dict_slot)
    if key_slot > 0 then
        local key = registry[key_slot]
        unref(key_slot)
        registry[dict_slot]:delete(key)
        cd.key_slot = 0
    end
    unref(dict_slot)
end

local holder_t = ffi.metatype("struct { int key_slot; int dict_slot; }",
                              { __gc = collect })

function _M.new(_, dict_name, opts)
    local dict
    if type(dict_name) == "string" then
        dict = shared[dict_name]
    else
        dict = dict_name
    end
    if not dict then
        return nil, "dictionary not found"
    end
    local cd = ffi_new(holder_t)
    cd.key_slot = 0
    cd.dict_slot = ref(dict)

    local timeout, exptime, step, ratio, max_step
    if opts then
        timeout = opts.timeout
        exptime = opts.exptime
        step = opts.step
        ratio = opts.ratio
        max_step = opts.max_step
    end
    exptime = exptime or 30
    if timeout then
        timeout = min(timeout, exptime)
        if step then
            step = min(step, timeout)
        end
    end

    return setmetatable({
        cdata = cd,
        dict = dict,
        timeout = timeout or 5,
        exptime = exptime,
        step = step or 0.001,
        ratio = ratio or 2,
        max_step = max_step or 0.5,
    }, mt)
end

function _M.lock(self, key, exptime)
    if not key then
        return nil, "nil key"
    end
    local dict = self.dict
    local cd = self.cdata
    if cd.key_slot > 0 then
        return nil, "locked"
    end
    exptime = exptime or self.exptime

    local ok, err = dict:add(key, true, exptime)
    if ok then
        cd.key_slot = ref(key)
        return 0
    end
    if err ~= "exists" then
        return nil, err
    end

    local step = self.step
    local ratio = self.ratio
    local timeout = self.timeout
    if timeout > exptime then
        timeout = exptime
    end
    local max_step = self.max_step
    local elapsed = 0
    while timeout > 0 do
        sleep(step)
        elapsed = elapsed + step
        timeout = timeout - step

        ok, err = dict:add(key, true, exptime)
        if ok then
            cd.key_slot = ref(key)
            return elapsed
        end
        if err ~= "exists" then
            return nil, err
        end
        if timeout <= 0 then
            break
        end
        step = min(max(0.001, step * ratio), timeout, max_step)
    end
    return nil, "timeout"
end

function _M.unlock(self)
    local cd = self.cdata
    local key_slot = tonumber(cd.key_slot)
    if key_slot <= 0 then
        return nil, "unlocked"
    end
    local key = registry[key_slot]
    unref(key_slot)
    local ok, err = self.dict:delete(key)
    if not ok then
        return nil, err
    end
    cd.key_slot = 0
    return 1
end

return _M
