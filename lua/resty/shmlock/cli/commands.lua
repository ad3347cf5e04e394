-- resty.shmlock.cli.commands (internal): the shmlock commands.  Each takes
-- the parsed command line (resty.shmlock.cli.args) and a context with
-- out(text) and err(text), writes its result, and returns the exit status
-- (EXIT).  Zones are only ever attached to ({ create = false }): no
-- command creates one.

local shdict = require "resty.shmlock.shdict"
local inspect = require "resty.shmlock.lock.inspect"
local fs = require "resty.shmlock.cli.fs"
local glob = require "resty.shmlock.cli.glob"
local json = require "resty.shmlock.cli.json"
local output = require "resty.shmlock.cli.output"
local caches = require "resty.shmlock.cli.caches"

local type = type
local tostring = tostring
local sort = table.sort
local concat = table.concat
local format = string.format
local sub = string.sub

local _M = {}

-- exit statuses (docs/cli.md)
local EXIT = {
    OK = 0,
    CORRUPT = 1,    -- verify found the zone broken, or a call met breakage
    USAGE = 2,
    NO_ZONE = 3,    -- no zone of that name in the directory
    REFUSED = 4,    -- the file is there but is not ours to use: another
                    -- user's, writable by others, another pid or time
                    -- namespace, not a zone of this layout
    NO_KEY = 5,     -- get: the key is absent or expired
    FAILED = 6,     -- anything else: a system error, a zone destroyed
                    -- (or its file removed) meanwhile, an unreadable
                    -- directory
}
_M.EXIT = EXIT


-- the library's advice in the command's words: opts.group = "G" is
-- --group G here
local function advice(msg)
    return (msg:gsub('opts%.group = "([^"]*)"', "--group %1"))
end

local function fail(ctx, status, msg)
    ctx.err("shmlock: " .. advice(msg) .. "\n")
    return status
end

-- the exit status for an error string of the library
local function status_of(err)
    if err == "not found" then
        return EXIT.NO_ZONE
    elseif err == "bad zone name" or sub(err, 1, 14) == "unknown group "
    then
        return EXIT.USAGE
    elseif err == "corrupt zone" or sub(err, 1, 8) == "corrupt:" then
        return EXIT.CORRUPT
    elseif err:find("permission denied", 1, true) then
        -- "failed to open zone ...: permission denied opening zone file
        -- ... (owner, group, mode)": not ours to use
        return EXIT.REFUSED
    elseif err == "zone destroyed" or sub(err, 1, 17) == "zone file removed"
           or err == "zone directory locked by another process"
           or sub(err, 1, 19) == "failed to open zone"
           or sub(err, 1, 22) == "failed to destroy zone"
    then
        return EXIT.FAILED
    end
    -- "incompatible zone", "zone file owned by another user", ...: every
    -- other refusal of shdict.open, as the library words it
    return EXIT.REFUSED
end

local function where(cmd)
    return fs.dir(cmd.dir)
end

-- the dict of zone `name`, or nil and the exit status (reported)
local function open(ctx, cmd, name)
    local dict, err = shdict.open(name, { dir = cmd.dir, create = false,
                                          group = cmd.group })
    if dict then
        return dict
    end
    local status = status_of(err)
    if status == EXIT.NO_ZONE then
        return nil, fail(ctx, status, format('no zone "%s" in %s', name,
                                             where(cmd)))
    end
    return nil, fail(ctx, status, format('zone "%s": %s', name, err))
end

local function emit(ctx, cmd, data, text)
    if cmd.json then
        ctx.out(json.encode(data) .. "\n")
    else
        ctx.out(text)
    end
    return EXIT.OK
end


-- what ls and stat show of a zone: the file's and, once attached, the
-- zone's; err: why it could not be attached; then the zone's stats()
local function describe(cmd, name)
    local path = fs.path(cmd.dir, name)
    local null = json.null
    local info = { name = name, path = path, error = null, owner = null,
                   uid = null, mode = null, size = null, shards = null,
                   used = null, free = null, entries = null }
    local st, serr = fs.stat(path)
    if not st then
        info.error = serr
        return info, serr
    end
    info.owner, info.uid, info.mode, info.size =
        st.owner, st.uid, st.mode, st.size

    local dict, err = shdict.open(name, { dir = cmd.dir, create = false,
                                          group = cmd.group })
    if not dict then
        info.error = err
        return info, err
    end
    local stats
    stats, err = dict:stats()
    if not stats then
        info.error = err
        return info, err
    end
    info.size = stats.capacity
    info.free = stats.free_space
    info.used = info.size - info.free
    info.shards = stats.shards
    info.entries = stats.entries
    return info, nil, stats
end

-- the counters of dict:stats(), in the order stat shows them
local COUNTERS = { "evictions", "expired", "spins", "sleeps", "takeovers",
                   "recoveries" }


-- syntax: shmlock ls [--dir D]
function _M.ls(ctx, cmd)
    local names, err = fs.zone_names(where(cmd))
    if not names then
        return fail(ctx, EXIT.FAILED, err)
    end
    local zones, rows = json.array({}), {}
    for i, name in ipairs(names) do
        local info = describe(cmd, name)
        zones[i] = info
        rows[i] = {
            name = name,
            size = output.size(info.size),
            shards = info.shards,
            used = output.size(info.used),
            entries = info.entries,
            owner = info.owner,
            mode = info.mode,
            status = info.error == json.null and "ok" or info.error,
        }
    end
    return emit(ctx, cmd, zones, output.table({
        { "NAME", "name" }, { "SIZE", "size", right = true },
        { "SHARDS", "shards", right = true }, { "USED", "used", right = true },
        { "ENTRIES", "entries", right = true }, { "OWNER", "owner" },
        { "MODE", "mode" }, { "STATUS", "status" },
    }, rows))
end


-- syntax: shmlock stat ZONE
function _M.stat(ctx, cmd)
    local name = cmd.operands[1]
    local dict, status = open(ctx, cmd, name)
    if not dict then
        return status
    end
    local info, err, st = describe(cmd, name)
    if err then
        return fail(ctx, status_of(err), format('zone "%s": %s', name, err))
    end
    local function sized(n)
        return format("%s (%d bytes)", output.size(n), n)
    end
    local fields = {
        { "name", name }, { "path", info.path }, { "size", sized(info.size) },
        { "shards", info.shards }, { "used", sized(info.used) },
        { "free", sized(info.free) }, { "entries", info.entries },
        { "owner", info.owner }, { "mode", info.mode },
    }
    -- the counters, then each shard's figures (in a table when there are
    -- several)
    local shards, rows = json.array({}), {}
    for _, f in ipairs(COUNTERS) do
        info[f] = st[f]
        fields[#fields + 1] = { f, st[f] }
    end
    for i, one in ipairs(st.shard) do
        local s = { shard = i - 1, size = one.capacity, free = one.free_space,
                    used = one.capacity - one.free_space,
                    entries = one.entries }
        local row = { shard = i - 1, size = output.size(s.size),
                      used = output.size(s.used), entries = s.entries }
        for _, f in ipairs(COUNTERS) do
            s[f], row[f] = one[f], one[f]
        end
        shards[i], rows[i] = s, row
    end
    info.shard = shards
    local text = output.fields(fields)
    if #rows > 1 then
        local columns = { { "SHARD", "shard", right = true },
                          { "SIZE", "size", right = true },
                          { "USED", "used", right = true },
                          { "ENTRIES", "entries", right = true } }
        for _, f in ipairs(COUNTERS) do
            columns[#columns + 1] = { f:upper(), f, right = true }
        end
        text = text .. "\n" .. output.table(columns, rows)
    end
    -- the counters of the caches that keep their L2 here
    local keys, kerr = dict:get_keys(0)
    if not keys then
        return fail(ctx, status_of(kerr), format('zone "%s": %s', name, kerr))
    end
    local cache_text
    info.caches, cache_text = caches.stats(dict, keys)
    if cache_text ~= "" then
        text = text .. "\n" .. cache_text
    end
    return emit(ctx, cmd, info, text)
end


-- buckets a step of keys's walk visits (dict:scan's count)
local SCAN_STEP = 4096

-- syntax: shmlock keys ZONE [--match GLOB] [--limit N]
function _M.keys(ctx, cmd)
    local pattern
    if cmd.match then
        local err
        pattern, err = glob.compile(cmd.match)
        if not pattern then
            return fail(ctx, EXIT.USAGE, "bad --match pattern: " .. err)
        end
    end
    local dict, status = open(ctx, cmd, cmd.operands[1])
    if not dict then
        return status
    end
    -- a walk in steps (dict:scan): it ends whatever the zone's other
    -- users write meanwhile, and holds only the keys that match
    local found, all, cursor = {}, {}, 0
    repeat
        local keys
        cursor, keys = dict:scan(cursor, SCAN_STEP)
        if not cursor then
            return fail(ctx, status_of(keys), format('zone "%s": %s',
                                                    cmd.operands[1], keys))
        end
        for _, key in ipairs(keys) do
            if not found[key] and (not pattern or glob.match(pattern, key))
            then
                found[key] = true
                all[#all + 1] = key
            end
        end
    until cursor == 0
    sort(all)
    local keys, lines = json.array({}), {}
    for _, key in ipairs(all) do
        if cmd.limit and #keys >= cmd.limit then
            break
        end
        keys[#keys + 1] = key
        lines[#lines + 1] = output.printable(key) .. "\n"
    end
    return emit(ctx, cmd, keys, concat(lines))
end


-- syntax: shmlock get ZONE KEY
function _M.get(ctx, cmd)
    local name, key = cmd.operands[1], cmd.operands[2]
    local dict, status = open(ctx, cmd, name)
    if not dict then
        return status
    end
    local value, flags = dict:get(key)
    if value == nil and flags == "value is a list" then
        -- its elements cannot be read without popping them: its length
        local len = dict:llen(key)
        if len then
            return emit(ctx, cmd, {
                key = key, type = "list", length = len,
                ttl = dict:ttl(key) or json.null,
            }, format("(a list of %d element%s)\n", len,
                      len == 1 and "" or "s"))
        end
    end
    if value == nil then
        if flags then       -- the error: a bad key, a broken zone
            local bad_key = flags == "empty key" or flags == "key too long"
            return fail(ctx, bad_key and EXIT.USAGE or status_of(flags),
                        format('zone "%s": %s', name, flags))
        end
        return fail(ctx, EXIT.NO_KEY, format('no key "%s" in zone "%s"',
                                            output.printable(key), name))
    end
    local ttl = dict:ttl(key)
    -- a cache's entry (resty.shmlock.cache): decoded
    local entry, entry_text = caches.entry(key, value, ttl)
    if entry then
        return emit(ctx, cmd, entry, entry_text)
    end
    local text
    if type(value) == "number" then
        text = output.number(value) .. "\n"
    else
        text = tostring(value) .. "\n"
    end
    return emit(ctx, cmd, {
        key = key, value = value, type = type(value), flags = flags or 0,
        ttl = ttl or json.null,
    }, text)
end


-- syntax: shmlock locks ZONE
function _M.locks(ctx, cmd)
    local name = cmd.operands[1]
    local dict, status = open(ctx, cmd, name)
    if not dict then
        return status
    end
    local list, err = inspect.locks(shdict._zone_handle(dict))
    if not list then
        return fail(ctx, status_of(err), format('zone "%s": %s', name, err))
    end
    sort(list, function(a, b) return a.key < b.key end)
    local locks, rows = json.array({}), {}
    for _, info in ipairs(list) do
        local key = output.printable(info.key)
        if info.key_len > #info.key then
            -- a long key's slot keeps its first bytes only
            key = key .. "... (" .. info.key_len .. " bytes)"
        end
        if info.kind ~= "lock" then
            key = key .. " (" .. info.kind .. ")"
        end
        info.marked = info.marked or json.null
        locks[#locks + 1] = info
        local m = info.marked ~= json.null and info.marked
        rows[#rows + 1] = {
            key = key,
            pid = info.pid,
            alive = info.alive and "yes" or "no",
            ttl = output.seconds(info.ttl),
            waiters = info.waiters,
            marked = m and format("%d%s", m.pid, m.alive and ""
                                  or " (dead)") or nil,
        }
    end
    return emit(ctx, cmd, locks, output.table({
        { "KEY", "key" }, { "PID", "pid", right = true }, { "ALIVE", "alive" },
        { "TTL", "ttl", right = true }, { "WAITERS", "waiters", right = true },
        { "MARKED", "marked" },
    }, rows))
end


-- syntax: shmlock verify ZONE
function _M.verify(ctx, cmd)
    local name = cmd.operands[1]
    local dict, status = open(ctx, cmd, name)
    if not dict then
        return status
    end
    local ok, err = dict:verify()
    if ok then
        emit(ctx, cmd, { zone = name, ok = true, error = json.null },
             format("%s: ok\n", name))
        return EXIT.OK
    end
    status = status_of(err)
    if status ~= EXIT.CORRUPT then
        return fail(ctx, status, format('zone "%s": %s', name, err))
    end
    emit(ctx, cmd, { zone = name, ok = false, error = err },
         format("%s: %s\n", name, err))
    return EXIT.CORRUPT
end


-- syntax: shmlock destroy ZONE
function _M.destroy(ctx, cmd)
    local name = cmd.operands[1]
    local ok, err = shdict.destroy(name, { dir = cmd.dir })
    if not ok then
        local status = status_of(err)
        if status == EXIT.NO_ZONE then
            return fail(ctx, status, format('no zone "%s" in %s', name,
                                            where(cmd)))
        end
        return fail(ctx, status, format('zone "%s": %s', name, err))
    end
    return emit(ctx, cmd, { zone = name, destroyed = true },
                format("destroyed %s\n", name))
end


-- for the commands in their own files (resty.shmlock.cli.run, .unlock)
_M.fail = fail
_M.status_of = status_of
_M.open = open
_M.emit = emit
_M.where = where

return _M
