-- resty.shmlock.cli.main (internal): the shmlock command (bin/shmlock is
-- a thin launcher).  run() takes the arguments and where to write, so the
-- specs can call it in process as well as run the script.

local args = require "resty.shmlock.cli.args"
local commands = require "resty.shmlock.cli.commands"
local version = require "resty.shmlock.version"

local EXIT = commands.EXIT

-- the commands in their own files
local handlers = setmetatable({
    unlock = require("resty.shmlock.cli.unlock").unlock,
    run = require("resty.shmlock.cli.run").run,
}, { __index = commands })

local _M = { EXIT = EXIT }

_M.USAGE = [[
usage: shmlock [--dir D] [--group G] [--json] COMMAND [ARGS]
       shmlock --version | --help

Looks at shmlock zones; never creates one, except run.

commands:
  ls                     the zones: name, size, shards, used, entries,
                         owner, mode, status
  stat ZONE              one zone's figures
  keys ZONE [--match GLOB] [--limit N]
                         its live keys, sorted (GLOB: *, ?, [a-z], \x)
  get ZONE KEY           the value under KEY (numbers: nan, inf, -inf
                         too, strings in JSON)
  locks ZONE             the held locks: key, holder pid, alive, ttl,
                         waiters, marked waiter
  verify ZONE            checks every structure (exit 0 ok, 1 corrupt)
  destroy ZONE           destroys the zone
  unlock ZONE KEY [--kind lock|shared|semaphore] [--pid PID]
                         releases KEY's lock, shared holds or semaphore
                         permits, whoever holds them (PID's only, with
                         --pid); --kind picks one where KEY has several
  run [--wait S] [--exptime S] [--shared | --permits N]
      [--conflict-exit-code N] ZONE KEY -- COMMAND [ARG...]
                         runs COMMAND holding lock KEY, as flock(1) does
                         with a file (creates ZONE if absent), for as
                         long as any process of COMMAND's process group
                         lives; exits with COMMAND's status, 1 (or
                         --conflict-exit-code N) if --wait S runs out;
                         --shared: a shared hold (flock -s); --permits N:
                         at most N commands at once on KEY

options:
  --dir D                the zone directory (default: $SHMLOCK_DIR, else
                         /dev/shm)
  --json                 JSON output, for scripts
  --group G              trust a zone shared with group G (name or gid),
                         as opts.group; run creates a zone for G (0660)
  -e, --escaped          KEY is written as keys prints it: \xHH for a
                         byte, \\ for a backslash
  -h, --help             this text
  --version              the version

exit status: 0 ok, 1 corrupt zone, 2 usage error, 3 no such zone,
4 zone refused (another user's, unsafe mode, not a zone of ours),
5 no such key (unlock: no hold of that kind on KEY), 6 other errors;
run: COMMAND's status (128+N if killed by signal N), 1 (or
--conflict-exit-code N) if --wait ran out

See shmlock(1).
]]

local function default_ctx()
    return {
        out = function(s) io.stdout:write(s) end,
        err = function(s) io.stderr:write(s) end,
    }
end

-- syntax: status = cli.run(argv, ctx?)
-- argv: the arguments (argv[1] ...); ctx: { out = fn(text), err =
-- fn(text) } (default: stdout, stderr).  Returns the exit status.
function _M.run(argv, ctx)
    ctx = ctx or default_ctx()
    local cmd, err = args.parse(argv)
    if not cmd then
        ctx.err("shmlock: " .. err .. "\nTry 'shmlock --help'.\n")
        return EXIT.USAGE
    end
    if cmd.help then
        ctx.out(_M.USAGE)
        return EXIT.OK
    end
    if cmd.version then
        ctx.out("shmlock " .. version .. "\n")
        return EXIT.OK
    end
    local ok, status = pcall(handlers[cmd.name], ctx, cmd)
    if not ok then
        ctx.err("shmlock: internal error: " .. tostring(status) .. "\n")
        return EXIT.FAILED
    end
    return status
end

return _M
