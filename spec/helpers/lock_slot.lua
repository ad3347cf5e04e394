-- helpers.lock_slot: what a zone's lock holds, for the specs.  A zone's
-- locks live in its lock slots, not among the dictionary's entries
-- (resty.shmlock.lock.zone): dict:get(key) does not see them.

local ffi = require "ffi"
local C = require "resty.shmlock.lib"
local resty_lock = require "resty.shmlock"
local zone_lock = require "resty.shmlock.lock.zone"
local codes = require "resty.shmlock.internal.codes"
local checkout = require "helpers.checkout"

local _M = {}


-- syntax: info = lock_slot.info(dict, key)
-- resty_lock.inspect's table, or nil when key holds no live lock.
function _M.info(dict, key)
    return (resty_lock.inspect(dict, key))
end


-- syntax: locked = lock_slot.locked(dict, key)
function _M.locked(dict, key)
    return resty_lock.inspect(dict, key) ~= nil
end


-- syntax: ttl = lock_slot.ttl(dict, key)
-- Seconds left (0: no expiry), or nil when not locked.
function _M.ttl(dict, key)
    local info = resty_lock.inspect(dict, key)
    return info and info.ttl
end


-- syntax: s = lock_slot.state(dict, key)
-- The slot's state (owner and stamp) as a string, to tell whether it
-- changed; nil when the key never had a slot.
function _M.state(dict, key)
    local rc, seen = zone_lock.look_at(dict._zone, key, #key)
    if rc ~= codes.OK then
        return nil
    end
    return ffi.string(ffi.cast("char *", seen) + 8, 16)
end


-- syntax: ok = lock_slot.mark(dict, key, m)
-- Marks key's held lock as a starving waiter would, with the mark m: {
-- pid, id, process (pid | start << 32; nil: pid's own), exptime (ms),
-- since (ms), till (ms) }.  true, or false when the lock is not held.
function _M.mark(dict, key, m)
    local zone = dict._zone
    local rc, seen = zone_lock.look_at(zone, key, #key)
    if rc ~= codes.OK then
        return false
    end
    local want = ffi.new("shmlock_mark_t")
    local owner = ffi.new("uint64_t", m.pid) * 2 ^ 32 + m.id
    want.owner = owner
    want.process = m.process
                   or ffi.new("uint64_t", m.pid)
                      + ffi.new("uint64_t", C.shmlock_proc_start(m.pid))
                        % 2 ^ 32 * 2 ^ 32
    want.exptime_ms = m.exptime or 30000
    want.since_ms = m.since or 1
    want.until_ms = m.till or 2 ^ 50
    local out = ffi.new("shmlock_ticket_t")
    return C.shmlock_slot_mark(zone, seen, want, out) == codes.OK
end


-- syntax: pid, id, exptime, since, till = lock_slot.marked(dict, key)
-- The mark on key's lock, or nil.
function _M.marked(dict, key)
    local zone = dict._zone
    local rc, seen = zone_lock.look_at(zone, key, #key)
    if rc ~= codes.OK then
        return nil
    end
    local _, _, _, is_marked = zone_lock.state(seen)
    if not is_marked
       or zone_lock.read_mark(zone, seen) ~= codes.OK
    then
        return nil
    end
    return zone_lock.mark_of()
end


-- syntax: pid, id, expiry, marked = lock_slot.owner(dict, key)
-- The state of key's slot as numbers (resty.shmlock.lock.zone.state:
-- pid, id 0, 0 when free; the expiry in ms of the zone clock), expired or
-- not; nil when the key never had a slot.
function _M.owner(dict, key)
    local rc, seen = zone_lock.look_at(dict._zone, key, #key)
    if rc ~= codes.OK then
        return nil
    end
    return zone_lock.state(seen)
end


-- syntax: lock_slot.release(dict, key)
-- Releases key's lock, whoever holds it (as `shmlock unlock` does).
function _M.release(dict, key)
    local rc, seen = zone_lock.look_at(dict._zone, key, #key)
    if rc == codes.OK then
        zone_lock.release_seen(dict._zone, seen)
    end
end


-- syntax: pid = lock_slot.dead_holder(dict, key, exptime?)
-- key locked (exptime: 30 s) by a process that then exits without
-- releasing it: its pid.  The zone is found by name (SHMLOCK_DIR as this
-- process has it).
function _M.dead_holder(dict, key, exptime)
    assert(key:match("^[%w_.-]+$"), "a plain key")
    local f = assert(io.popen("LUA_PATH='" .. checkout.LUA_PATH .. "' "
        .. "exec luajit -e 'local l = require(\"resty.shmlock\"):new(\""
        .. dict.name .. "\", { exptime = " .. (exptime or 30) .. " }) "
        .. "assert(l:lock(\"" .. key .. "\") == 0) "
        .. "io.write(require(\"resty.shmlock.lib\").shmlock_self_pid()) "
        .. "io.stdout:flush() os.exit(0)'"))
    local pid = tonumber(f:read("*a"))
    f:close()
    assert(pid, "the holder did not lock")
    return pid
end


return _M
