-- resty.shmlock.cli.fs (internal): what the shmlock command needs from
-- the file system besides the zones themselves: the zone directory's
-- listing, and a zone file's owner, mode and size (Linux, through the FFI:
-- readdir64 and statx, whose layouts are the same on every architecture;
-- the owner's name comes from the core's getpwuid).

local ffi = require "ffi"
local bit = require "bit"
local C = require "resty.shmlock.lib"
local core = require "resty.shmlock.internal.core"

local ffi_str = ffi.string
local ffi_new = ffi.new
local tonumber = tonumber
local tostring = tostring
local band = bit.band
local sort = table.sort
local str_sub = string.sub
local format = string.format

-- the prefixed names keep clear of other modules' declarations of libc
pcall(ffi.cdef, [[
typedef struct shmlock_cli_dir_s shmlock_cli_dir_t;
struct shmlock_cli_dirent {
    uint64_t        d_ino;
    int64_t         d_off;
    unsigned short  d_reclen;
    unsigned char   d_type;
    char            d_name[256];
};
shmlock_cli_dir_t *shmlock_cli_opendir(const char *name) __asm__("opendir");
struct shmlock_cli_dirent *shmlock_cli_readdir(shmlock_cli_dir_t *dir)
    __asm__("readdir64");
int shmlock_cli_closedir(shmlock_cli_dir_t *dir) __asm__("closedir");

struct shmlock_cli_statx_ts { int64_t sec; uint32_t nsec; int32_t pad; };
struct shmlock_cli_statx {
    uint32_t  mask, blksize;
    uint64_t  attributes;
    uint32_t  nlink, uid, gid;
    uint16_t  mode, spare0;
    uint64_t  ino, size, blocks, attributes_mask;
    struct shmlock_cli_statx_ts  atime, btime, ctime, mtime;
    uint32_t  rdev_major, rdev_minor, dev_major, dev_minor;
    uint64_t  spare2[14];
};
int shmlock_cli_statx(int dirfd, const char *path, int flags,
    unsigned int mask, struct shmlock_cli_statx *buf) __asm__("statx");
]])

local AT_FDCWD = -100
local AT_SYMLINK_NOFOLLOW = 0x100
local AT_EMPTY_PATH = 0x1000
local STATX_TYPE = 0x1
local STATX_BASIC_STATS = 0x7ff
local S_IFMT, S_IFREG, S_IFLNK = 0xf000, 0x8000, 0xa000
local S_IFIFO, S_IFSOCK = 0x1000, 0xc000

local PREFIX = "shmlock."

local _M = { PREFIX = PREFIX }

local stx = ffi_new("struct shmlock_cli_statx")

local function sys_error()
    return core.sys_strerror(ffi.errno())
end


-- syntax: dir = fs.dir(dir?)
-- The zone directory the library uses for dir (nil: $SHMLOCK_DIR, else
-- /dev/shm, as src/shm_zone.c): the library's own answer.
_M.dir = require("resty.shmlock.shdict").directory


-- syntax: path = fs.path(dir, name): the file of zone name in dir
function _M.path(dir, name)
    return _M.dir(dir) .. "/" .. PREFIX .. name
end


-- syntax: names, err = fs.names(dir)
-- Every name in dir but "." and "..", in the directory's order; nil and
-- a message naming dir and the system's error.
function _M.names(dir)
    local d = ffi.C.shmlock_cli_opendir(dir)
    if d == nil then
        return nil, format("cannot read directory %s: %s", dir, sys_error())
    end
    local names = {}
    while true do
        local e = ffi.C.shmlock_cli_readdir(d)
        if e == nil then
            break
        end
        local file = ffi_str(e.d_name)
        if file ~= "." and file ~= ".." then
            names[#names + 1] = file
        end
    end
    ffi.C.shmlock_cli_closedir(d)
    return names
end


-- syntax: names, err = fs.zone_names(dir)
-- The sorted names of the zone files in dir ("shmlock.<name>" with a valid
-- zone name; hidden files, the ones zones are built in, are not).
function _M.zone_names(dir)
    local files, err = _M.names(dir)
    if not files then
        return nil, err
    end
    local names = {}
    for _, file in ipairs(files) do
        if str_sub(file, 1, #PREFIX) == PREFIX then
            local name = str_sub(file, #PREFIX + 1)
            if C.shmlock_zone_name_ok(name, #name) == 1 then
                names[#names + 1] = name
            end
        end
    end
    sort(names)
    return names
end


-- syntax: is_pipe = fs.is_pipe(fd)
-- Whether file descriptor fd is a pipe or a socket: a reader of its other
-- end waits for every writer to close it.
function _M.is_pipe(fd)
    if ffi.C.shmlock_cli_statx(fd, "", AT_EMPTY_PATH, STATX_TYPE, stx) ~= 0
    then
        return false
    end
    local fmt = band(tonumber(stx.mode), S_IFMT)
    return fmt == S_IFIFO or fmt == S_IFSOCK
end


-- syntax: info, err = fs.stat(path)
-- { uid, owner (the user's name, or the uid as a string), mode (the
-- permission bits as "0600"), size (bytes), regular, symlink } of path,
-- not following a symbolic link; nil and the system's error.
function _M.stat(path)
    if ffi.C.shmlock_cli_statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW,
                               STATX_BASIC_STATS, stx) ~= 0 then
        return nil, sys_error()
    end
    local uid = tonumber(stx.uid)
    local mode = tonumber(stx.mode)
    local fmt = band(mode, S_IFMT)
    return {
        uid = uid,
        owner = core.getpwuid(uid) or tostring(uid),
        mode = format("%04o", band(mode, 0xfff)),
        size = tonumber(stx.size),
        regular = fmt == S_IFREG,
        symlink = fmt == S_IFLNK,
    }
end


return _M
