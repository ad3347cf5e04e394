-- helpers.test_hooks: the library under test with its test hooks declared
-- (src/shmlock.h, under SHMLOCK_TESTING).  Only the test build has them:
-- libshmlock-test.so, which scripts/busted.sh and `make soak` load unless
-- SHMLOCK_LIB names another (the sanitizer build has them too).

local ffi = require "ffi"
local lib = require "resty.shmlock.lib"

-- each declaration alone: another module may have declared some of them
for _, decl in ipairs {
    "void shmlock_test_crash_at(int n);",
    "void shmlock_test_mutex_lock(shmlock_zone_t *zone);",
    "void shmlock_test_mutex_unlock(shmlock_zone_t *zone);",
    "int64_t shmlock_test_coarse_ms(void);",
    "int64_t shmlock_test_watch_at(shmlock_zone_t *zone);",
    "uint32_t shmlock_test_shard_seq(shmlock_zone_t *zone, unsigned shard);",
    "void shmlock_test_wakes(uint64_t out[3], int reset);",
    "uint64_t shmlock_test_proc_reads(int reset);",
    "void shmlock_test_attach_pause(int notify_fd, int wait_fd);",
    "void shmlock_test_removed_scan(uint32_t out[6]);",
    "void shmlock_test_dead_at_lock(shmlock_zone_t *zone);",
    "void shmlock_test_lock_clock(int mode, int64_t at_us);",
    "int64_t shmlock_test_lock_now(void);",
    "int shmlock_test_lock_waits(int64_t *out, int max);",
    "void shmlock_test_lock_fail(int call, int rc);",
    "void shmlock_test_lock_spin(int64_t us);",
    "void shmlock_test_lock_first_spin(int64_t us);",
    "void shmlock_test_ngx_dict_probe_fails(int on);",
    [[enum {
        SHMLOCK_TEST_LOCK_SWAP = 0,
        SHMLOCK_TEST_LOCK_RELEASE,
        SHMLOCK_TEST_LOCK_EXTEND,
        SHMLOCK_TEST_LOCK_MARK,
        SHMLOCK_TEST_LOCK_LOOK,
        SHMLOCK_TEST_LOCK_CALLS
    };]],
} do
    pcall(ffi.cdef, decl)
end

local ok = pcall(function() return lib.shmlock_test_crash_at end)
if not ok then
    error("the library under test has no test hooks (shmlock_test_*): "
          .. "SHMLOCK_LIB=" .. tostring(os.getenv("SHMLOCK_LIB"))
          .. "; run `make` and load libshmlock-test.so (scripts/busted.sh "
          .. "does unless SHMLOCK_LIB is set)", 2)
end

return lib
