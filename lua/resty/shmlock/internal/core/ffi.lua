-- resty.shmlock.internal.core.ffi (internal): the binding's interface over
-- LuaJIT's FFI (resty.shmlock.lib declares and loads libshmlock.so).  The
-- list of functions here is the interface: core/capi.lua gives the same
-- ones over the C module.

local ffi = require "ffi"
local C = require "resty.shmlock.lib"

local ffi_str = ffi.string
local ffi_new = ffi.new
local ffi_gc = ffi.gc
local tonumber = tonumber
local pcall = pcall
local floor = math.floor

local _M = { ffi = true, C = C, name = "ffi", bit = require "bit" }

-- syntax: n = core.constant(name): SHMLOCK_<name> of src/shmlock.h
function _M.constant(name)
    return tonumber(C["SHMLOCK_" .. name])
end
-- Called at load time only (codes, errors: some 60 calls, past LuaJIT's
-- hot-call threshold): a trace of it would abort at each name's first
-- lookup in the library's namespace, so it is never compiled.
jit.off(_M.constant)

-- syntax: msg = core.strerror(rc): the core's message for a status
function _M.strerror(rc)
    return ffi_str(C.shmlock_strerror(rc))
end

-- syntax: errno = core.errno(); msg = core.sys_strerror(errno)
function _M.errno()
    return C.shmlock_errno()
end

function _M.sys_strerror(errno)
    return ffi_str(C.strerror(errno))
end

-- syntax: n = core.recoveries(): shard recoveries this process ran
local recovered = C.shmlock_recoveries()
function _M.recoveries()
    return recovered[0]
end

function _M.now_ms()
    return tonumber(C.shmlock_now_ms())
end

function _M.now_us()
    return tonumber(C.shmlock_now_us())
end

function _M.hash(key)
    return C.shmlock_hash(key, #key)
end

function _M.self_pid()
    return C.shmlock_self_pid()
end

-- syntax: digits = core.token_block(): a fresh block of token serials,
-- its 13 high hex digits (resty.shmlock.internal.token)
local block_buf = ffi_new("char[32]")
function _M.token_block()
    C.shmlock_token_block(block_buf)
    return ffi_str(block_buf, 13)
end

-- syntax: first = core.owner_ids(): SHMLOCK_OWNER_IDS fresh owner ids
function _M.owner_ids()
    return C.shmlock_owner_ids()
end

function _M.proc_start(pid)
    return tonumber(C.shmlock_proc_start(pid))
end

-- syntax: alive = core.proc_alive(pid, start?)
function _M.proc_alive(pid, start)
    return C.shmlock_proc_alive(pid, start or 0) == 1
end

-- zones

local zone_out = ffi_new("shmlock_zone_t *[1]")
local open_opts = ffi_new("shmlock_open_t")

-- A zone's finalizer.  A Lua function that holds the library (C, an
-- upvalue), not the library's C function itself: a function pointer does
-- not keep its library loaded, and when the library's last reference went
-- with the zone's (a program that drops the modules from package.loaded,
-- as busted does between spec files), the library could be unloaded
-- first, and the zone's close jump into unmapped memory (SIGSEGV).
local function close_zone(zone)
    C.shmlock_zone_close(zone)
end

-- syntax: zone, created = core.zone_open(opts)
--         nil, rc, found = core.zone_open(opts)
-- opts: dir, name, size, shards, mode, group, owner_uid, owner_gid (as
-- shmlock_open_t); found: what the core found (file_mode, file_uid,
-- file_gid, file_layout, zone_size, owner_uid, group) and errno.  The zone
-- is closed when collected.
function _M.zone_open(opts)
    local o = open_opts
    o.dir, o.name, o.name_len = opts.dir, opts.name, #opts.name
    o.size, o.shards, o.mode = opts.size or 0, opts.shards or 0,
                               opts.mode or 0
    o.group = opts.group or -1
    o.owner_uid, o.owner_gid = opts.owner_uid or 0, opts.owner_gid or -1
    local rc = C.shmlock_zone_open2(o, zone_out)
    local errno = C.shmlock_errno()
    o.dir, o.name = nil, nil
    if rc == 0 then
        return ffi_gc(zone_out[0], close_zone), o.created == 1
    end
    return nil, rc, {
        file_mode = tonumber(o.file_mode), file_uid = tonumber(o.file_uid),
        file_gid = tonumber(o.file_gid),
        file_layout = tonumber(o.file_layout),
        zone_size = tonumber(o.zone_size), owner_uid = tonumber(o.owner_uid),
        group = tonumber(o.group), errno = errno,
    }
end

-- syntax: rc, errno = core.zone_destroy(dir, name)
function _M.zone_destroy(dir, name)
    local rc = C.shmlock_zone_destroy(dir, name, #name)
    return rc, C.shmlock_errno()
end

function _M.zone_name_ok(name)
    return C.shmlock_zone_name_ok(name, #name) == 1
end

function _M.zone_dead(zone)
    return C.shmlock_zone_dead(zone) ~= 0
end

function _M.zone_shards(zone)
    return tonumber(C.shmlock_zone_shards(zone))
end

-- syntax: value = core.zone_gen_add(zone, i, delta)  (delta 0: a read)
function _M.zone_gen_add(zone, i, delta)
    return tonumber(C.shmlock_zone_gen_add(zone, i, delta))
end

-- syntax: words = core.zone_gens(zone): the zone's generation words, a
-- pointer into the mapping (words[i], i < GEN_WORDS: the cache's L1 hit
-- reads one with a load).  FFI only: core/capi.lua has no such function,
-- and its users read a word by zone_gen_add(zone, i, 0).
function _M.zone_gens(zone)
    return C.shmlock_zone_gens(zone)
end

function _M.wait_count(zone, hash)
    return tonumber(C.shmlock_wait_count(zone, hash))
end

-- users and groups by id (getgrnam, getgrgid, getpwuid), for messages

local grp_ok = pcall(ffi.cdef, [[
struct shmlock_group { char *gr_name; char *gr_passwd; unsigned int gr_gid;
                       char **gr_mem; };
struct shmlock_group *getgrnam(const char *name);
struct shmlock_group *getgrgid(unsigned int gid);
]])
local pw_ok = pcall(ffi.cdef, [[
struct shmlock_passwd { char *pw_name; };
struct shmlock_passwd *shmlock_getpwuid(unsigned int uid) __asm__("getpwuid");
]])

-- syntax: gid = core.getgrnam(name), or nil
function _M.getgrnam(name)
    local gr = grp_ok and ffi.C.getgrnam(name)
    if not gr or gr == nil then
        return nil
    end
    return tonumber(gr.gr_gid)
end

-- syntax: name = core.getgrgid(gid), or nil
function _M.getgrgid(gid)
    local gr = grp_ok and ffi.C.getgrgid(gid)
    if not gr or gr == nil then
        return nil
    end
    return ffi_str(gr.gr_name)
end

-- syntax: name = core.getpwuid(uid), or nil
function _M.getpwuid(uid)
    local pw = pw_ok and ffi.C.shmlock_getpwuid(uid)
    if not pw or pw == nil or pw.pw_name == nil then
        return nil
    end
    return ffi_str(pw.pw_name)
end

-- syntax: core.sleep(seconds): blocks the process the whole time, even
-- when signals interrupt it (outside nginx only)
for _, decl in ipairs {
    "struct timespec { long tv_sec; long tv_nsec; };",
    "int nanosleep(const struct timespec *req, struct timespec *rem);",
} do
    pcall(ffi.cdef, decl)  -- each alone: another module may have declared it
end

local EINTR = 4
local req = ffi_new("struct timespec")
local rem = ffi_new("struct timespec")

function _M.sleep(seconds)
    local sec = floor(seconds)
    req.tv_sec = sec
    req.tv_nsec = floor((seconds - sec) * 1e9)
    while ffi.C.nanosleep(req, rem) ~= 0 do
        if ffi.errno() ~= EINTR then
            return
        end
        req.tv_sec = rem.tv_sec    -- interrupted by a signal: sleep the rest
        req.tv_nsec = rem.tv_nsec
    end
end

-- syntax: ok, errno = core.setenv(name, value): value nil unsets
-- (the zone directory the core reads, $SHMLOCK_DIR: resty.shmlock.testing)
for _, decl in ipairs {
    "int setenv(const char *name, const char *value, int overwrite);",
    "int unsetenv(const char *name);",
} do
    pcall(ffi.cdef, decl)
end

-- core.env.serial counts the changes made here: the zone directory a name
-- resolves to is read from $SHMLOCK_DIR again only after one (getenv walks
-- the whole environment: on every resty_lock:new(name) it was a third of
-- new+lock+unlock)
_M.env = { serial = 0 }

function _M.setenv(name, value)
    local rc
    if value == nil then
        rc = ffi.C.unsetenv(name)
    else
        rc = ffi.C.setenv(name, value, 1)
    end
    if rc ~= 0 then
        return false, ffi.errno()
    end
    _M.env.serial = _M.env.serial + 1
    return true
end

-- the cache codec's doubles as 8 bytes (host order)
local dbl = ffi_new("double[1]")

function _M.pack_double(d)
    dbl[0] = d
    return ffi_str(dbl, 8)
end

function _M.unpack_double(s, pos)
    ffi.copy(dbl, ffi.cast("const char *", s) + (pos or 1) - 1, 8)
    return tonumber(dbl[0])
end


-- ---------------------------------------------------------------------
-- What differs between the bindings, asked for by what it does (no other
-- module tests which binding this is, or names a module of one).

-- the binding's own modules (core.part(what): nil where it has none)
local PARTS = {
    slots = "resty.shmlock.lock.slots.ffi",     -- the lock slots' calls
    handles = "resty.shmlock.lock.handle",      -- a Lua lock object's
    shared_holds = "resty.shmlock.lock.shared", -- its shared holds
    ngx_shared = "resty.shmlock.lock.ngx_shared", -- locks on ngx.shared
    permit = "resty.shmlock.semaphore.permit",  -- a semaphore's permit
}

-- syntax: mod = core.part(what)
function _M.part(what)
    local name = PARTS[what]
    return name and require(name) or nil
end

-- syntax: w = core.dead_word(zone); dead = core.word_dead(w)
-- A zone's dead word, read by one load (here: a pointer into the zone).
function _M.dead_word(zone)
    return C.shmlock_zone_dead_word(zone)
end

function _M.word_dead(w)
    return w[0] ~= 0
end


-- syntax: v = core.methods_zone(zone): what a dict object keeps at [1]
-- for its methods (the C module's find the zone there; the FFI's none)
function _M.methods_zone()
    return nil
end

return _M
