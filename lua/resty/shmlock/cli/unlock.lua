-- resty.shmlock.cli.unlock (internal): `shmlock unlock ZONE KEY`, the
-- release of a stuck lock from the shell, whoever holds it.
--
-- It releases the lock in the state it found it, as that holder's unlock()
-- would (resty.shmlock.lock.zone: one compare-and-swap from that very
-- state, so a lock taken again meanwhile by someone else is left alone,
-- and a starving waiter marked on the lock gets it handed over), and wakes
-- the waiters.  A key held shared: every shared hold is released, each as
-- its holder's release would.

local commands = require "resty.shmlock.cli.commands"
local zone_backend = require "resty.shmlock.lock.zone"
local inspect = require "resty.shmlock.lock.inspect"
local shared_hold = require "resty.shmlock.lock.shared"
local output = require "resty.shmlock.cli.output"
local codes = require "resty.shmlock.internal.codes"
local errors = require "resty.shmlock.errors"

local format = string.format

local EXIT = commands.EXIT
local fail = commands.fail

local _M = {}

-- KEY's shared holds, every one (resty.shmlock.lock.shared.release_all)
function _M.shared(ctx, cmd, dict, name, key, shown)
    local n, err = shared_hold.release_all(dict._zone, key)
    if not n then
        return fail(ctx, commands.status_of(err), format('zone "%s": %s',
                                                         name, err))
    end
    if n == 0 then
        return fail(ctx, EXIT.NO_KEY, format('no lock "%s" in zone "%s"',
                                             shown, name))
    end
    return commands.emit(ctx, cmd, { zone = name, key = key, shared = n,
                                     released = true },
                         format("released %s (%d shared hold%s)\n", shown,
                                n, n == 1 and "" or "s"))
end


-- syntax: status = unlock.unlock(ctx, cmd)
-- Exit 0 and "released KEY (held by pid P)"; 5 when KEY holds no lock
-- (absent, or expired; a dictionary value is no lock); the zone's
-- errors as the other commands.
function _M.unlock(ctx, cmd)
    local name, key = cmd.operands[1], cmd.operands[2]
    local dict, status = commands.open(ctx, cmd, name)
    if not dict then
        return status
    end
    local shown = output.printable(key)
    local info, err = inspect.key(dict, key, dict._zone)
    if not info then
        if err == "not locked" then
            return fail(ctx, EXIT.NO_KEY, format('no lock "%s" in zone "%s"',
                                                 shown, name))
        end
        local bad_key = err == "empty key" or err == "key too long"
        return fail(ctx, bad_key and EXIT.USAGE or commands.status_of(err),
                    format('zone "%s": %s', name, err))
    end
    if info.kind == "shared" then
        return _M.shared(ctx, cmd, dict, name, key, shown)
    end
    -- the state inspect saw, again (it may have moved since: the release
    -- then fails, or releases the newer holder's lock, which is as much
    -- "KEY's lock" as the one shown)
    local rc = zone_backend.look_at(dict._zone, key, #key)
    local ok
    if rc == codes.OK then
        ok, err = zone_backend.release(dict._zone,
                                       zone_backend.holders_ticket())
    elseif rc ~= codes.NOT_FOUND then
        err = errors[rc]
    end
    if not ok or err == "expired" then
        if rc == codes.NOT_FOUND or err == "expired" then
            -- released or expired between the look and the release
            return fail(ctx, EXIT.NO_KEY, format('no lock "%s" in zone "%s"',
                                                 shown, name))
        end
        return fail(ctx, commands.status_of(err), format('zone "%s": %s',
                                                         name, err))
    end
    return commands.emit(ctx, cmd, { zone = name, key = key, pid = info.pid,
                                     alive = info.alive, released = true },
                         format("released %s (held by pid %d%s)\n", shown,
                                info.pid, info.alive and "" or ", dead"))
end

return _M
