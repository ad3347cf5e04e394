-- resty.shmlock.cli.unlock (internal): `shmlock unlock ZONE KEY [--kind
-- lock|shared|semaphore] [--pid PID]`, the release of what holds KEY from
-- the shell, whoever holds it: a stuck lock, shared holds, a semaphore's
-- permits.
--
-- A key may be held in two ways at once: its lock slot (an exclusive
-- lock, or shared holds: never both) and a semaphore's permits of the
-- same name (resty.shmlock.semaphore: records of their own).  Without
-- --kind, unlock frees whichever KEY has, and asks for --kind when it has
-- both.
--
-- A lock is released in the state it was found in, as that holder's
-- unlock() would (resty.shmlock.lock.zone: one compare-and-swap from that
-- very state, so a lock taken again meanwhile by someone else is left
-- alone, and a starving waiter marked on the lock gets it handed over),
-- and the waiters wake.  Shared holds and permits: each hold (of --pid's
-- process only, with --pid) is released as its holder's release would
-- (the last shared hold hands the key to a marked exclusive waiter).

local commands = require "resty.shmlock.cli.commands"
local groups = require "resty.shmlock.cli.groups"
local zone_backend = require "resty.shmlock.lock.zone"
local inspect = require "resty.shmlock.lock.inspect"
local output = require "resty.shmlock.cli.output"
local codes = require "resty.shmlock.internal.codes"
local errors = require "resty.shmlock.errors"
local zone_handle = require("resty.shmlock.shdict")._zone_handle

local format = string.format

local EXIT = commands.EXIT
local fail = commands.fail

local _M = {}

-- how the messages name a kind's holds
local NAMES = {
    lock = "lock", shared = "shared holds", semaphore = "semaphore permits",
}
local ONE = { shared = "shared hold", semaphore = "semaphore permit" }


-- 'no <holds> "KEY" [of pid P] in zone "ZONE"', exit 5
local function none(ctx, cmd, kind, shown, name)
    local of = cmd.pid and format(" of pid %d", cmd.pid) or ""
    local what = kind and NAMES[kind] or "lock"
    local on = what == "lock" and " " or " on "
    return fail(ctx, EXIT.NO_KEY, format('no %s%s"%s"%s in zone "%s"', what,
                                         on, shown, of, name))
end


-- KEY's shared holds or permits (kind), every one or --pid's
local function group(ctx, cmd, dict, name, key, kind)
    local shown = output.printable(key)
    local pids, err = groups.release(zone_handle(dict), groups.KIND[kind], key,
                                     cmd.pid)
    if not pids then
        return fail(ctx, commands.status_of(err), format('zone "%s": %s',
                                                         name, err))
    end
    local n = #pids
    if n == 0 then
        return none(ctx, cmd, kind, shown, name)
    end
    local data = { zone = name, key = key, kind = kind, count = n,
                   pids = pids, released = true }
    if kind == "shared" then
        data.shared = n
    end
    return commands.emit(ctx, cmd, data,
                         format("released %s (%d %s%s)\n", shown, n,
                                n == 1 and ONE[kind] or NAMES[kind],
                                cmd.pid and format(" of pid %d", cmd.pid)
                                or ""))
end


-- KEY's exclusive lock (info: inspect's), --pid's only with --pid
local function lock(ctx, cmd, dict, name, key, info)
    local shown = output.printable(key)
    -- the state inspect saw, again (it may have moved since: the release
    -- then fails, or releases the newer holder's lock, which is as much
    -- "KEY's lock" as the one shown, unless --pid names another)
    local zone = zone_handle(dict)
    local rc, seen = zone_backend.look_at(zone, key, #key)
    local ok, err
    if rc == codes.OK then
        local pid = zone_backend.state(seen)
        if cmd.pid and pid ~= cmd.pid then
            return none(ctx, cmd, "lock", shown, name)
        end
        info.pid = cmd.pid or info.pid
        ok, err = zone_backend.release_seen(zone, seen)
    elseif rc ~= codes.NOT_FOUND then
        err = errors[rc]
    end
    if not ok or err == "expired" then
        if rc == codes.NOT_FOUND or err == "expired" then
            -- released or expired between the look and the release
            return none(ctx, cmd, "lock", shown, name)
        end
        return fail(ctx, commands.status_of(err), format('zone "%s": %s',
                                                         name, err))
    end
    return commands.emit(ctx, cmd, { zone = name, key = key, kind = "lock",
                                     pid = info.pid, alive = info.alive,
                                     released = true },
                         format("released %s (held by pid %d%s)\n", shown,
                                info.pid, info.alive and "" or ", dead"))
end


-- what holds KEY: inspect's info of its lock slot (nil when free), and
-- whether a semaphore's permit is held; nil, status on an error
local function kinds(ctx, dict, name, key)
    local info, err = inspect.key(dict, key, zone_handle(dict))
    if not info and err ~= "not locked" then
        local bad_key = err == "empty key" or err == "key too long"
        return nil, fail(ctx, bad_key and EXIT.USAGE
                              or commands.status_of(err),
                         format('zone "%s": %s', name, err))
    end
    local permits
    permits, err = groups.holders(zone_handle(dict), groups.KIND.semaphore, key)
    if not permits then
        return nil, fail(ctx, commands.status_of(err),
                         format('zone "%s": %s', name, err))
    end
    return info or false, #permits > 0
end


-- syntax: status = unlock.unlock(ctx, cmd)
-- Exit 0 and "released KEY (...)"; 5 when KEY holds nothing of the kind
-- asked (absent, or expired; a dictionary value is no lock); 2 when KEY
-- holds a lock and permits and no --kind says which; the zone's errors
-- as the other commands.
function _M.unlock(ctx, cmd)
    local name, key = cmd.operands[1], cmd.operands[2]
    local dict, status = commands.open(ctx, cmd, name)
    if not dict then
        return status
    end
    local shown = output.printable(key)
    local info, permits = kinds(ctx, dict, name, key)
    if info == nil then
        return permits          -- the status of the error reported
    end
    local kind = cmd.kind
    if not kind then
        if info and permits then
            return fail(ctx, EXIT.USAGE, format(
                '"%s" in zone "%s" holds a %s and semaphore permits: pick '
                .. "one with --kind %s or --kind semaphore", shown, name,
                info.kind == "shared" and "shared lock" or "lock",
                info.kind))
        end
        kind = info and info.kind or permits and "semaphore"
        if not kind then
            return none(ctx, cmd, nil, shown, name)
        end
    end
    if kind == "semaphore" or kind == "shared" then
        return group(ctx, cmd, dict, name, key, kind)
    end
    if not info or info.kind ~= "lock" then
        return none(ctx, cmd, "lock", shown, name)
    end
    return lock(ctx, cmd, dict, name, key, info)
end

return _M
