-- resty.shmlock.internal.nginx_user (internal): the user an nginx master
-- running as root switches its workers to (the `user` directive, else the
-- compiled default), read in init_by_lua* so that the zones the master
-- opens there can be handed to that user, as nginx chowns the paths it
-- creates (docs/shdict.md, "Zones in nginx").
--
-- nginx tells no Lua API who its workers will be: the value is read from
-- the core module's configuration of the cycle being loaded (init_by_lua
-- runs with ngx_cycle set to it).  Its layout up to `group` has not moved
-- since nginx 1.11.11 (2017, worker_shutdown_timeout); older versions, a
-- layout that fails the checks below, or a user not known yet give nil and
-- the reason, and nothing is handed over (the workers still reach the
-- zones opened here through the mappings they inherit).

local type = type
local tonumber = tonumber
local tostring = tostring
local pcall = pcall

-- nginx runs LuaJIT: without the FFI (PUC Lua) this is never inside nginx
local has_ffi, ffi = pcall(require, "ffi")
local rawget = rawget

local _M = {}

-- NGX_CONF_UNSET_UINT as an uid_t / gid_t
local UNSET = 0xffffffff
-- the first nginx with this layout of ngx_core_conf_t
local MIN_VERSION = 1011011

local cdef_ok = has_ffi and pcall(ffi.cdef, [[
typedef struct { size_t len; unsigned char *data; } shmlock_ngx_str_t;
typedef struct {
    intptr_t            daemon;
    intptr_t            master;
    uintptr_t           timer_resolution;
    uintptr_t           shutdown_timeout;
    intptr_t            worker_processes;
    intptr_t            debug_points;
    intptr_t            rlimit_nofile;
    int64_t             rlimit_core;
    int                 priority;
    uintptr_t           cpu_affinity_auto;
    uintptr_t           cpu_affinity_n;
    void               *cpu_affinity;
    char               *username;
    uint32_t            user;
    uint32_t            group;
    shmlock_ngx_str_t   working_directory;
    shmlock_ngx_str_t   lock_file;
    shmlock_ngx_str_t   pid;
    shmlock_ngx_str_t   oldpid;
} shmlock_ngx_core_conf_t;
typedef struct { void ****conf_ctx; } shmlock_ngx_cycle_t;
typedef struct { uintptr_t ctx_index; uintptr_t index; } shmlock_ngx_module_t;
extern shmlock_ngx_cycle_t *shmlock_ngx_cycle asm("ngx_cycle");
extern shmlock_ngx_module_t shmlock_ngx_core_module asm("ngx_core_module");
struct shmlock_nu_passwd { char *pw_name; char *pw_passwd; uint32_t pw_uid;
                        uint32_t pw_gid; };
struct shmlock_nu_passwd *shmlock_getpwnam(const char *name) asm("getpwnam");
unsigned int shmlock_nu_geteuid(void) asm("geteuid");
]])

-- a ngx_flag_t as nginx leaves it: 0, 1 or NGX_CONF_UNSET
local function flag_ok(v)
    v = tonumber(v)
    return v == 0 or v == 1 or v == -1
end

-- the core configuration of the cycle being loaded, or nil and why
local function core_conf(ngx)
    if not cdef_ok then
        return nil, "cannot declare nginx's structures"
    end
    local version = ngx.config and ngx.config.nginx_version
    if type(version) ~= "number" or version < MIN_VERSION then
        return nil, "nginx " .. tostring(version) .. " is older than 1.11.11"
    end
    local ok, cycle = pcall(function() return ffi.C.shmlock_ngx_cycle end)
    if not ok or cycle == nil or cycle.conf_ctx == nil then
        return nil, "nginx's cycle is not reachable"
    end
    local index = tonumber(ffi.C.shmlock_ngx_core_module.index)
    local ccf = ffi.cast("shmlock_ngx_core_conf_t *", cycle.conf_ctx[index])
    if ccf == nil or not flag_ok(ccf.daemon) or not flag_ok(ccf.master) then
        return nil, "nginx's core configuration has an unknown layout"
    end
    return ccf
end

-- syntax: uid, gid = nginx_user.workers(ngx)
-- Inside init_by_lua* of a master running as root: the uid and gid its
-- workers will run as; nil, nil when they run as the master's user; nil,
-- nil, why when it cannot be known.
function _M.workers(ngx)
    if not cdef_ok or ffi.C.shmlock_nu_geteuid() ~= 0 then
        return nil, nil
    end
    local ccf, err = core_conf(ngx)
    if not ccf then
        return nil, nil, err
    end
    local uid, gid = tonumber(ccf.user), tonumber(ccf.group)
    if uid == UNSET then
        -- oldpid is set by the core module's init_conf, which also gives
        -- an unset user its compiled default: if it has run, the workers
        -- keep the master's user; if not (init_by_lua ran while the http
        -- block was parsed: no lua_shared_dict), a `user` directive may
        -- still follow, or the default apply
        if ccf.oldpid.len ~= 0 then
            return nil, nil
        end
        return nil, nil, "the workers' user is not known yet (no `user` "
                         .. "directive before the http block)"
    end
    -- ngx_set_user stored the name it looked up: the layout is right if
    -- the name gives that uid
    local pw = ccf.username ~= nil and ffi.C.shmlock_getpwnam(ccf.username)
    if not pw or pw == nil or tonumber(pw.pw_uid) ~= uid then
        return nil, nil, "nginx's core configuration has an unknown layout"
    end
    if uid == 0 then
        return nil, nil
    end
    return uid, gid
end

-- syntax: ngx = nginx_user.init_phase()
-- The global ngx when this VM runs init_by_lua* (in the nginx master),
-- else nil.
function _M.init_phase()
    local ngx = rawget(_G, "ngx")
    if type(ngx) == "table" and type(ngx.get_phase) == "function"
       and ngx.get_phase() == "init"
    then
        return ngx
    end
    return nil
end

return _M
