-- resty.shmlock.cli.args (internal): the shmlock command line, parsed.
--
--     shmlock [options] COMMAND [operands] [options]
--
-- Options may come before or after the command; "--" ends them.  Each
-- command takes a fixed number of operands and the options listed for it
-- in COMMANDS.

local unprintable = require("resty.shmlock.cli.output").unprintable

local tonumber = tonumber
local sub = string.sub
local find = string.find
local unpack = unpack or table.unpack     -- luacheck: compat

local _M = {}

-- operands, and the options beyond the global ones (--dir, --json, --help)
local COMMANDS = {
    ls = { operands = {} },
    stat = { operands = { "ZONE" } },
    keys = { operands = { "ZONE" }, match = true, limit = true },
    get = { operands = { "ZONE", "KEY" } },
    locks = { operands = { "ZONE" } },
    verify = { operands = { "ZONE" } },
    destroy = { operands = { "ZONE" } },
    unlock = { operands = { "ZONE", "KEY" }, kind = true, pid = true },
    -- then COMMAND [ARG...]: cmd.command
    run = { operands = { "ZONE", "KEY" }, wait = true, exptime = true,
            shared = true, permits = true, ["conflict-exit-code"] = true,
            command = true },
}
_M.COMMANDS = COMMANDS

-- options that take a value
local VALUED = { dir = true, match = true, limit = true, group = true,
                 wait = true, exptime = true, permits = true,
                 ["conflict-exit-code"] = true, kind = true, pid = true }

-- options for every command
local GLOBAL = { dir = true, group = true }
local FLAGS = { json = true, help = true, escaped = true, version = true,
                shared = true }

-- every long option, sorted (spec/50 checks that the help and the manual
-- page name each)
_M.OPTIONS = {}
for _, t in ipairs { VALUED, FLAGS } do
    for name in pairs(t) do
        _M.OPTIONS[#_M.OPTIONS + 1] = name
    end
end
table.sort(_M.OPTIONS)

-- the kinds of hold `unlock --kind` names
local KINDS = { lock = true, shared = true, semaphore = true }

-- the most permits of a key (src/shmlock.h: SHMLOCK_GROUP_MAX)
local PERMITS_MAX = require("resty.shmlock.internal.codes").GROUP_MAX


-- v (a string) as a whole number from lo to hi, or nil
local function whole(v, lo, hi)
    local n = tonumber(v)
    if not n or find(v, "[^%d]") or n < lo or n > hi then
        return nil
    end
    return n
end

-- syntax: cmd, err = args.parse(argv)
-- argv: the arguments (argv[1] ...).  cmd: { name, operands = { ... },
-- dir, json, help, version, match, limit, group, wait, exptime, shared,
-- permits, conflict_exit_code, kind, pid, escaped, command = { ... }
-- (run's COMMAND and ARGs) }; name is nil with help or version and no
-- command.  With --escaped, a KEY operand is read as keys prints it:
-- \xHH a byte, \\ a backslash (output.unprintable).
-- nil and a message for a usage error.
function _M.parse(argv)
    local cmd = { operands = {} }
    local words = {}
    local i, n = 1, #argv
    local options_end = false
    while i <= n do
        local a = argv[i]
        if words[1] == "run" and #words == 3
           and (options_end or sub(a, 1, 1) ~= "-" or a == "-")
        then
            -- run ZONE KEY [--] COMMAND [ARG...]: the rest, as it is
            cmd.command = { unpack(argv, i, n) }
            break
        elseif options_end or sub(a, 1, 1) ~= "-" or a == "-" then
            words[#words + 1] = a
        elseif a == "--" then
            options_end = true
        elseif a == "-h" then
            cmd.help = true
        elseif a == "-e" then
            cmd.escaped = true
        elseif sub(a, 1, 2) == "--" then
            local name, value = a:match("^%-%-([%w-]+)=(.*)$")
            name = name or sub(a, 3)
            if VALUED[name] then
                if not value then
                    i = i + 1
                    value = argv[i]
                    if value == nil then
                        return nil, "option --" .. name .. " needs a value"
                    end
                end
                cmd[name] = value
            elseif FLAGS[name] and not value then
                cmd[name] = true
            else
                return nil, "unknown option " .. a
            end
        else
            return nil, "unknown option " .. a
        end
        i = i + 1
    end

    if #words == 0 then
        if cmd.help or cmd.version then
            return cmd
        end
        return nil, "no command"
    end
    cmd.name = words[1]
    local spec = COMMANDS[cmd.name]
    if not spec then
        return nil, "unknown command " .. cmd.name
    end
    if cmd.help or cmd.version then
        return cmd
    end
    for j = 2, #words do
        cmd.operands[j - 1] = words[j]
    end
    local want = #spec.operands
    if #cmd.operands ~= want then
        local list = want == 0 and "no operands"
                     or table.concat(spec.operands, " ")
        return nil, cmd.name .. " takes " .. list
    end
    if spec.command and not cmd.command then
        return nil, cmd.name .. " takes ZONE KEY -- COMMAND [ARG...]"
    end
    for name in pairs(VALUED) do
        if cmd[name] ~= nil and not GLOBAL[name] and not spec[name] then
            return nil, "option --" .. name .. " is not for " .. cmd.name
        end
    end
    if cmd.shared and not spec.shared then
        return nil, "option --shared is not for " .. cmd.name
    end
    if cmd.escaped then
        -- KEY as keys prints it (output.printable)
        local ok = false
        for j, name in ipairs(spec.operands) do
            if name == "KEY" then
                local key, err = unprintable(cmd.operands[j])
                if not key then
                    return nil, "KEY: " .. err
                end
                cmd.operands[j] = key
                ok = true
            end
        end
        if not ok then
            return nil, "option --escaped is not for " .. cmd.name
        end
    end
    if cmd.dir == "" then
        return nil, "option --dir needs a directory"
    end
    if cmd.group == "" then
        return nil, "option --group needs a group name or gid"
    end
    if cmd.group and not find(cmd.group, "[^%d]") then
        cmd.group = tonumber(cmd.group)         -- a gid
    end
    for _, name in ipairs { "wait", "exptime" } do
        local v = cmd[name]
        if v then
            local s = tonumber(v)
            if not s or s ~= s or s < 0 or s > 1e12 or find(v, "^%s")
               or find(v, "[xX]")
            then
                return nil, "option --" .. name .. " needs seconds, a "
                            .. "number from 0 to 1e12"
            end
            -- a lifetime the keeper renews every third of: below a tenth
            -- of a second the renewals would be a busy loop, and the lock
            -- would lapse at the first scheduling delay
            if name == "exptime" and s > 0 and s < 0.1 then
                return nil, "option --exptime needs 0 (never expires) or "
                            .. "at least 0.1 seconds"
            end
            cmd[name] = s
        end
    end
    if cmd.permits then
        cmd.permits = whole(cmd.permits, 1, PERMITS_MAX)
        if not cmd.permits then
            return nil, "option --permits needs a whole number from 1 to "
                        .. PERMITS_MAX
        end
        if cmd.shared then
            return nil, "options --shared and --permits do not go together"
        end
    end
    local code = cmd["conflict-exit-code"]
    if code then
        cmd["conflict-exit-code"] = nil
        cmd.conflict_exit_code = whole(code, 0, 255)
        if not cmd.conflict_exit_code then
            return nil, "option --conflict-exit-code needs a whole number "
                        .. "from 0 to 255"
        end
    end
    if cmd.kind and not KINDS[cmd.kind] then
        return nil, "option --kind needs lock, shared or semaphore"
    end
    if cmd.pid then
        cmd.pid = whole(cmd.pid, 1, 2 ^ 31 - 1)
        if not cmd.pid then
            return nil, "option --pid needs a process id"
        end
    end
    if cmd.limit then
        local limit = tonumber(cmd.limit)
        if not limit or limit < 1 or limit % 1 ~= 0
           or find(cmd.limit, "[^%d]")
        then
            return nil, "option --limit needs a whole number >= 1"
        end
        cmd.limit = limit
    end
    return cmd
end

return _M
