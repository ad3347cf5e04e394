-- resty.shmlock.shdict.zones (internal): opening and destroying zones by
-- name, their sizes, modes, groups and owners, and the messages of each
-- refusal: the module-level half of resty.shmlock.shdict, the same under
-- both bindings.  zones.module(methods) makes the resty.shmlock.shdict
-- module whose dicts have those methods (the binding's: FFI or C module).

local core = require "resty.shmlock.internal.core"
local nginx = require "resty.shmlock.internal.nginx"
local version = require "resty.shmlock.version"
local codes = require "resty.shmlock.internal.codes"
local check_key = require("resty.shmlock.internal.key").check
local log = require "resty.shmlock.internal.log"
local nginx_user = require "resty.shmlock.internal.nginx_user"

local type = type
local getmetatable = getmetatable
local tostring = tostring
local error = error
local setmetatable = setmetatable
local log_event = log.event
local recoveries = log.recoveries
local band = core.bit.band
local ceil = math.ceil
local str_format = string.format
local getenv = os.getenv

local OK = codes.OK
local NOT_FOUND = codes.NOT_FOUND
local SYSTEM = codes.SYSTEM
local INCOMPATIBLE = codes.INCOMPATIBLE
local LAYOUT = codes.LAYOUT
local NOT_OWNER = codes.NOT_OWNER
local UNSAFE_MODE = codes.UNSAFE_MODE

-- errno values of Linux, for messages
local EPERM, EACCES = 1, 13

-- the file type bit the core sets in file_mode when what it tells of is
-- the zone directory (shmlock_open_t in src/shmlock.h)
local S_IFDIR = 16384                                     -- 0040000

-- open() errors that refuse a file found under the zone's name, or where
-- the system said no: logged (error) as well as returned
local REFUSED = {
    [INCOMPATIBLE] = true, [NOT_OWNER] = true,
    [UNSAFE_MODE] = true, [codes.FOREIGN_NS] = true, [SYSTEM] = true,
    [codes.FOREIGN_TIME] = true,
}

local errors = require "resty.shmlock.errors"

local DEFAULT_SIZE = 1024 * 1024
local MAX_SIZE = 2 ^ 40             -- as the C side

-- dir .. "\0" .. name -> the dict this process opened there, while it is
-- in use: the table does not keep it alive, so a zone nobody references is
-- unmapped when its dict is collected (the C library maps each file once
-- per process, whoever opens it)
local zones = setmetatable({}, { __mode = "v" })

-- dir .. "\0" .. name -> the dict opened there in init_by_lua*: the nginx
-- master keeps it, so that every worker it forks (whatever user it runs
-- as) reaches the zone by name through the mapping it inherits, without
-- opening the file (docs/shdict.md, "Zones in nginx")
local pinned = {}

-- the user init_by_lua* hands zone files to (nginx_user.workers): false
-- until asked, then { uid, gid } (0, -1: nobody)
local hand_to = false

-- dir .. "\0" .. name -> the last refusal of that zone logged (see open)
local refused = {}

-- the module resty.shmlock.shdict, and its dicts' methods (see module)
local _M = { _VERSION = version }
local mt

local units = { [""] = 1, k = 1024, m = 1024 * 1024, g = 1024 * 1024 * 1024 }

local MIN_SIZE = codes.MIN_SIZE

-- what "bad size" tells the user to give
local SIZE_FORMS = '(give bytes as a whole number, or a string of digits '
                   .. 'with an optional unit k, m or g: 65536, "64k", "10m", '
                   .. '"1g"; from 32k to 1024g)'

-- "bad size: <what was given> <why>", then the accepted forms
local function bad_size(size, why)
    local shown = type(size) == "string" and str_format("%q", size)
                  or type(size) == "number" and tostring(size)
                  or "a " .. type(size)
    return "bad size: " .. shown .. why .. " " .. SIZE_FORMS
end

-- Sizes above MAX_SIZE never reach C: converting a double beyond 2^64 to
-- size_t wraps (2^64 + 4096 would arrive as 4096).  nil and the message
-- for a bad one.
local function parse_size(size)
    if size == nil then
        return DEFAULT_SIZE
    end
    local bytes
    if type(size) == "number" then
        if size ~= size or size % 1 ~= 0 then
            return nil, bad_size(size, " is not a whole number")
        end
        bytes = size
    elseif type(size) == "string" then
        local digits, unit = size:match("^%s*(%d+)%s*([kKmMgG]?)%s*$")
        if not digits then
            return nil, bad_size(size, " is not a size")
        end
        bytes = tonumber(digits) * units[unit:lower()]
    else
        return nil, bad_size(size, " is not a size")
    end
    if bytes < MIN_SIZE or bytes > MAX_SIZE then
        return nil, bad_size(size, " is out of range")
    end
    return bytes
end

-- dict, unless its zone was destroyed (by any process): then the name
-- must be resolved again
local function live(dict)
    if dict and not core.zone_dead(dict._zone) then
        return dict
    end
    return nil
end

-- the shard counts opts.shards may ask for (0: the default)
local SHARDS = { [0] = true, [1] = true, [2] = true, [4] = true, [8] = true,
                 [16] = true }

local function check_name(name)
    return type(name) == "string" and core.zone_name_ok(name)
end

-- syntax: ok = shdict.check_name(name): whether name is a zone name
_M.check_name = check_name


-- the gid of group `g` (a name or a number), or nil (getgrnam: called
-- only when a zone is opened with opts.group, or refused)
local function gid_of(g)
    if type(g) == "number" then
        return g
    end
    return core.getgrnam(g)
end

-- "name" of group gid, or its number when it has no name
local function group_name(gid)
    return core.getgrgid(gid) or tostring(gid)
end

-- nil if a zone file's mode is one we create: 0 (the default, 0600), or
-- owner read-write, no bit beyond 0666, never writable by others (as the
-- C side: SHMLOCK_BAD_MODE); else why not
local function mode_problem(mode)
    if type(mode) ~= "number" or mode % 1 ~= 0 or mode < 0 or mode > 511 then
        return "not a number from 0 to 0777 or an octal string like \"0660\""
    end
    if mode == 0 then
        return nil
    end
    local shown = str_format("%04o", mode)
    if band(mode, 2) ~= 0 then
        return shown .. " lets other users write the zone (share it with a "
               .. "group instead: opts.group and mode 0660)"
    end
    if band(mode, 73) ~= 0 then                           -- 0111
        return shown .. " has an execute bit"
    end
    if band(mode, 384) ~= 384 then                        -- 0600
        return shown .. " does not let the owner read and write"
    end
    return nil
end

local function octal(mode)
    return str_format("%04o", mode)
end

-- "name" of user uid (getpwuid, for the refusals' advice), or "uid N"
-- when it has no name
local function user_name(uid)
    return core.getpwuid(uid) or "uid " .. tostring(uid)
end

-- the overflow gid (nogroup, or nobody on some systems): the group of
-- files whose group means nothing here (unmapped, or nobody's), which no
-- one should trust with a zone
local NOGROUP = 65534

-- how to use a zone of another user on purpose: run as its owner, or
-- share it with a group
local function owner_hint(uid)
    return ": run as " .. user_name(uid) .. " (the zone's owner), or share "
           .. "the zone with a group on purpose: create it with opts.group "
           .. '= "G" and opts.mode = "0660", and attach with opts.group = "G"'
end

-- ': pass opts.group = "G" to trust group G', unless G is the overflow
-- group: then the owner's advice
local function trust_hint(gid, uid)
    if gid == NOGROUP then
        return " by " .. group_name(gid) .. ", a group no one should trust"
               .. owner_hint(uid)
    end
    local group = group_name(gid)
    return ': pass opts.group = "' .. group .. '" to trust group ' .. group
end

-- The owner uid and gid zone files opened now are handed to: inside
-- init_by_lua* of a root master, its workers' user (asked once per VM: a
-- reload loads a new one); else 0, -1.
local function hand_over_to(ngx)
    if not ngx then
        return 0, -1
    end
    if not hand_to then
        local uid, gid, why = nginx_user.workers(ngx)
        hand_to = { uid or 0, gid or -1 }
        if why then
            log_event("warn", "zone files opened in init_by_lua stay the "
                      .. "master's, not the workers' user's: " .. why)
        end
    end
    return hand_to[1], hand_to[2]
end

-- this process's effective uid (the second field of /proc/self/status's
-- Uid line, readable under every binding), or nil
local function euid()
    local f = io.open("/proc/self/status", "r")
    if not f then
        return nil
    end
    local status = f:read("*a")
    f:close()
    return tonumber(status:match("\nUid:%s+%d+%s+(%d+)"))
end

-- " --dir DIR" for a shmlock command on a zone of dir, unless dir is
-- /dev/shm (the operator's shell may not have this process's
-- $SHMLOCK_DIR)
local function dir_option(dir)
    if dir == "/dev/shm" then
        return ""
    end
    return " --dir " .. dir
end

-- how to get rid of a zone file of `uid` left from an earlier setup: the
-- file is never used by another user, so nothing else makes it go
local function leftover_hint(uid, name, dir)
    return "; a file left from an earlier setup (nginx's user changed, "
           .. "say) goes with `shmlock" .. dir_option(dir) .. " destroy "
           .. name .. "` run as root or " .. user_name(uid)
           .. ", and the next open makes the zone anew"
end

-- how to destroy zone `name` of directory `dir`, from the shell and Lua
local function destroy_hint(name, dir)
    if dir == "/dev/shm" then
        return str_format('shmlock destroy %s, or shdict.destroy("%s")',
                          name, name)
    end
    return str_format('shmlock --dir %s destroy %s, or shdict.destroy("%s", '
                      .. '{ dir = "%s" })', dir, name, name, dir)
end

-- why this process may not create (or look at) a zone file in dir, whose
-- owner, group and mode the core found (o), and how to change that
local function directory_refusal(o, dir)
    local uid = euid()
    local who = uid and (user_name(uid) == "uid " .. uid and "uid " .. uid
                         or "uid " .. uid .. " (" .. user_name(uid) .. ")")
                or "this process's user"
    local msg = "the directory " .. dir .. " (owner "
                .. user_name(tonumber(o.file_uid)) .. ", group "
                .. group_name(tonumber(o.file_gid)) .. ", mode "
                .. octal(band(tonumber(o.file_mode), 4095))
                .. ") does not let " .. who .. " create files in it: "
    if nginx.api() then
        msg = msg .. "open the zone in init_by_lua* (nginx's master makes "
              .. "it there and hands it to the workers' user), "
    else
        msg = msg .. "run as a user who may write there, "
    end
    return msg .. "make the directory writable for this user (chmod 1777 "
           .. dir .. ", the mode /dev/shm has), or use a directory it may "
           .. "write ($SHMLOCK_DIR, or opts.dir)"
end

-- the message for a zone file open() refused, naming the cause; dir: the
-- zone directory, path: the zone file's path
local function refusal(rc, o, name, dir, path)
    if rc == INCOMPATIBLE then
        local layout = tonumber(o.file_layout)
        if layout == 0 then
            return "incompatible zone: " .. path .. " is not a zone file"
        elseif layout ~= LAYOUT then
            return str_format("incompatible zone: %s is a zone of layout %d, "
                              .. "made by another version of lua-resty-"
                              .. "shmlock (this one reads layout %d): "
                              .. "destroy it to make it anew (%s)", path,
                              layout, LAYOUT, destroy_hint(name, dir))
        end
        return "incompatible zone: " .. path .. " has a header that does "
               .. "not match the file (truncated, or changed by another "
               .. "program)"
    end
    if rc == NOT_OWNER then
        return "zone file owned by another user (uid "
               .. tostring(tonumber(o.file_uid)) .. ")"
               .. owner_hint(tonumber(o.file_uid))
               .. leftover_hint(tonumber(o.file_uid), name, dir)
    end
    if rc == UNSAFE_MODE then
        local mode = tonumber(o.file_mode)
        if band(mode, 2) ~= 0 then
            return "zone file mode " .. octal(mode) .. " is writable by others"
        end
        return "zone file mode " .. octal(mode) .. " is group-writable"
               .. trust_hint(tonumber(o.file_gid), tonumber(o.file_uid))
    end
    if rc == SYSTEM then
        local errno = o.errno
        local msg = "failed to open zone \"" .. name .. "\": "
        if errno == EACCES and tonumber(o.file_mode) >= S_IFDIR then
            return msg .. "permission denied opening zone file " .. path
                   .. ": " .. directory_refusal(o, dir)
        end
        if errno == EACCES then
            msg = msg .. "permission denied opening zone file " .. path
            if o.file_mode ~= 0 then
                msg = msg .. " (owner uid " .. tostring(tonumber(o.file_uid))
                      .. ", group " .. group_name(tonumber(o.file_gid))
                      .. ", mode " .. octal(tonumber(o.file_mode)) .. ")"
            end
            return msg
        end
        msg = msg .. core.sys_strerror(errno)
        if errno == EPERM and o.owner_uid > 0 then
            msg = msg .. ": cannot give the zone file to the workers' user "
                  .. "(uid " .. tostring(tonumber(o.owner_uid)) .. ")"
        elseif errno == EPERM and o.group >= 0 then
            msg = msg .. ": cannot give the zone file group "
                  .. group_name(tonumber(o.group))
        end
        return msg
    end
    return errors[rc]
end

local env = core.env
local default_dir, default_serial = nil, -1

-- syntax: dir = shdict.directory(dir?)
-- The directory of the zone files for opts.dir (nil: $SHMLOCK_DIR, else
-- /dev/shm), for messages.
local function directory(dir)
    if dir == nil or dir == "" then
        -- read again after a change through core.setenv (resty.shmlock.
        -- testing's): a change made behind the library's back is not seen
        if default_serial ~= env.serial then
            dir = getenv("SHMLOCK_DIR")
            if dir == nil or dir == "" then
                dir = "/dev/shm"
            end
            default_dir, default_serial = dir, env.serial
        end
        return default_dir
    end
    return dir
end
_M.directory = directory

-- the zone file's path, for messages
local function path_of(dir, name)
    return directory(dir) .. "/shmlock." .. name
end

-- the third return of open: a note when the zone found is not of the size
-- asked (nil when no size was asked, or it matches)
local function size_note(dict, asked)
    if not asked then
        return nil
    end
    local want = ceil(asked / 4096) * 4096
    local has = dict:capacity()
    if has == want then
        return nil
    end
    return "size mismatch: the zone has " .. has .. " bytes, not " .. want
end

-- opts.dir, checked: nil or a string; a NUL byte would cut the path the
-- system sees, and open or destroy would act in another directory.  The
-- caller's caller is blamed.
local function dir_of(opts)
    local dir = opts and opts.dir
    if dir ~= nil and (type(dir) ~= "string" or dir:find("\0", 1, true))
    then
        error('bad "opts.dir" argument', 3)
    end
    return dir
end

-- syntax: dict, err, note = shdict.open(name, opts?)
--   opts.size:   bytes, or "64k" / "10m" / "1g" (default "1m")
--   opts.dir:    directory of the zone files (default $SHMLOCK_DIR or /dev/shm)
--   opts.shards: 1, 2, 4, 8 or 16 (default: by size, see shmlock.h)
--   opts.create: false: attach only (nil, "not found" when absent)
--   opts.mode:   permission bits of a new zone file (default 0600)
--   opts.group:  group (name or gid) of a new zone file, and the group
--                trusted when attaching (see shmlock_open_t in shmlock.h)
-- note: "size mismatch: ..." when opts.size was given and an existing
-- zone of another size was attached (it keeps its size).
function _M.open(name, opts)
    if not check_name(name) then
        return nil, "bad zone name"
    end
    if opts ~= nil and type(opts) ~= "table" then
        error('bad "opts" argument', 2)
    end
    local dir = dir_of(opts)
    local mode = opts and opts.mode or 0
    if type(mode) == "string" and mode:find("^0?[0-7][0-7][0-7]$") then
        mode = tonumber(mode, 8)        -- "0660"
    end
    local why = mode_problem(mode)
    if why then
        error('bad "opts.mode" argument: ' .. why, 2)
    end
    -- (a NUL byte would cut the name getgrnam sees: "adm\0x" would trust
    -- group adm)
    local group = opts and opts.group
    if group ~= nil
       and not (type(group) == "string" and group ~= ""
                and not group:find("\0", 1, true))
       and not (type(group) == "number" and group % 1 == 0 and group >= 0
                and group < 2 ^ 32)
    then
        error('bad "opts.group" argument', 2)
    end

    local asked = opts and opts.size
    local size, size_err = parse_size(asked)
    if not size then
        return nil, size_err
    end
    if asked ~= nil then
        asked = size
    end
    local shards = opts and opts.shards or 0
    if type(shards) ~= "number" or not SHARDS[shards] then
        return nil, "bad shards"
    end

    -- by the directory it resolves to now: $SHMLOCK_DIR may change
    -- (resty.shmlock.testing), and the same name is then another zone
    local id = directory(dir) .. "\0" .. name
    local dict = live(zones[id])
    if dict then
        return dict, nil, size_note(dict, asked)
    end
    if pinned[id] then
        pinned[id] = nil        -- destroyed: its mapping may go
    end

    local gid = -1
    if group ~= nil then
        gid = gid_of(group)
        if not gid then
            return nil, 'unknown group "' .. group .. '"'
        end
    end

    -- create = false: attach to an existing zone only (size 0 to the core)
    if opts and opts.create == false then
        size = 0
    end

    local init = nginx_user.init_phase()
    local owner_uid, owner_gid = hand_over_to(init)
    local zone, rc, o = core.zone_open {
        dir = dir, name = name, size = size, shards = shards, mode = mode,
        group = gid, owner_uid = owner_uid, owner_gid = owner_gid,
    }
    if not zone then
        local err = refusal(rc, o, name, directory(dir), path_of(dir, name))
        -- once per name and cause (a lock name refused at every request
        -- would fill error.log with the same line)
        if REFUSED[rc] and refused[id] ~= err then
            refused[id] = err
            log_event("error", 'zone "' .. name .. '" refused: ' .. err)
        end
        return nil, err
    end
    refused[id] = nil
    recoveries(name)

    dict = setmetatable({
        _zone = zone,
        name = name,
        dir = dir,
        -- (the C module's methods find the zone here: src/lua/dict_methods.c)
        core.methods_zone(zone),
    }, mt)
    zones[id] = dict
    if init then
        pinned[id] = dict
    end
    return dict, nil, size_note(dict, asked)
end

-- syntax: shdict.set_logger(fn)
-- Outside nginx, fn(level, message) receives the events an operator must
-- see (level "error", "warn", "notice" or "info"); nil: nothing is
-- printed (the default).  Inside nginx they go to error.log.
function _M.set_logger(fn)
    log.set_logger(fn)
end

-- the dict this process opened under `name` and still uses (nil if none,
-- or if the zone was destroyed since)
function _M.opened(name, dir)
    return live(zones[directory(dir) .. "\0" .. tostring(name)])
end

-- syntax: ok, err = shdict.destroy(name, opts?)
function _M.destroy(name, opts)
    if not check_name(name) then
        return nil, "bad zone name"
    end
    if opts ~= nil and type(opts) ~= "table" then
        error('bad "opts" argument', 2)
    end
    local dir = dir_of(opts)
    local rc, errno = core.zone_destroy(dir, name)
    if rc == OK then
        -- only now: a zone still there (the directory stayed locked, say)
        -- keeps the record that lets a lock reach it by name (opened)
        zones[directory(dir) .. "\0" .. name] = nil
        return true
    end
    if rc == NOT_FOUND then
        return nil, "not found"
    end
    if rc == SYSTEM then
        return nil, "failed to destroy zone \"" .. name .. "\": "
                    .. core.sys_strerror(errno)
    end
    return nil, errors[rc]
end

-- syntax: key, err = shdict.check_key(key)
-- key as a string, or nil and "nil key" / "empty key" / "key too long"
-- (resty.shmlock.internal.key)
_M.check_key = check_key

-- syntax: zone = shdict._zone_handle(dict)
-- The core's handle of a zone opened here (for the binding's calls on it:
-- resty.shmlock.internal.core), nil for anything else (an ngx.shared
-- dict, say).  Internal: the cache's and the command's.
function _M._zone_handle(dict)
    if type(dict) == "table" and mt and getmetatable(dict) == mt then
        return dict._zone
    end
    return nil
end

-- syntax: shdict = zones.module(methods): the module resty.shmlock.shdict,
-- its dicts with these methods (called once, by the binding's methods)
local function module(m)
    mt = { __index = m }
    _M.methods = m
    return _M
end

return { module = module }
