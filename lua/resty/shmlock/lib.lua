-- resty.shmlock.lib (internal): the C core, declared and loaded once per
-- process.  The raw FFI library, not an API: its functions trust their
-- arguments as C does (a NULL zone, a length past its string, a ticket
-- of another zone crash the process or worse).  The public modules check
-- every argument before they call it (spec/62: no bad argument of theirs
-- crashes); programs use them, never this.
--
-- The library is looked for, in order (resty.shmlock.internal.locate):
-- $SHMLOCK_LIB; libshmlock.so at the root of the checkout this file belongs
-- to (after `make`); then package.cpath (after `luarocks make`).  A failure
-- names every place tried.
-- The specs set SHMLOCK_LIB to the test build, libshmlock-test.so, which
-- adds the test hooks (scripts/busted.sh).

local ffi = require "ffi"
local locate = require "resty.shmlock.internal.locate"

-- The production ABI of src/shmlock.h, prototype for prototype and enum for
-- enum (spec/00-abi_spec.lua compares the two).  The status, type, op and
-- limit constants are read by name: C.SHMLOCK_NOT_FOUND, C.SHMLOCK_KEY_MAX.
-- The test hooks (SHMLOCK_TESTING) are declared by spec/helpers/test_hooks.
ffi.cdef[[
enum {
    SHMLOCK_OK = 0,
    SHMLOCK_NOT_FOUND,
    SHMLOCK_EXISTS,
    SHMLOCK_NO_MEMORY,
    SHMLOCK_NOT_A_NUMBER,
    SHMLOCK_CHANGED,
    SHMLOCK_BAD_NAME,
    SHMLOCK_BAD_SIZE,
    SHMLOCK_INCOMPATIBLE,
    SHMLOCK_SYSTEM,
    SHMLOCK_CORRUPT,
    SHMLOCK_BUSY,
    SHMLOCK_AGAIN,
    SHMLOCK_TIMEOUT,
    SHMLOCK_VALUE_TOO_LARGE,
    SHMLOCK_BAD_KEY,
    SHMLOCK_BAD_VALUE,
    SHMLOCK_BAD_SHARDS,
    SHMLOCK_DESTROYED,
    SHMLOCK_NOT_OWNER,
    SHMLOCK_UNSAFE_MODE,
    SHMLOCK_FOREIGN_NS,
    SHMLOCK_DIR_BUSY,
    SHMLOCK_BAD_MODE,
    SHMLOCK_NOT_A_LIST,
    SHMLOCK_FOREIGN_TIME,
    SHMLOCK_REMOVED,
    SHMLOCK_ASK
};

enum {
    SHMLOCK_TNIL = 0,
    SHMLOCK_TBOOLEAN = 1,
    SHMLOCK_TNUMBER = 3,
    SHMLOCK_TSTRING = 4,
    SHMLOCK_TLIST = 5
};

enum {
    SHMLOCK_OP_SET = 0,
    SHMLOCK_OP_ADD = 1,
    SHMLOCK_OP_REPLACE = 2,
    SHMLOCK_OP_SAFE = 4
};

enum {
    SHMLOCK_NAME_MAX = 64,
    SHMLOCK_KEEP_TTL = -1,
    SHMLOCK_KEY_MAX = 65535,
    SHMLOCK_MIN_SIZE = 32768,
    SHMLOCK_GEN_WORDS = 1024,
    SHMLOCK_LAYOUT = 12,
    SHMLOCK_WATCH_MS = 100
};

typedef struct shmlock_zone_s shmlock_zone_t;

typedef struct {
    int           type;
    uint32_t      flags;
    double        num;
    const char   *str;
    size_t        len;
    int           stale;
} shmlock_value_t;

int shmlock_zone_open(const char *dir, const char *name, size_t name_len,
    size_t size, unsigned shards, shmlock_zone_t **out);
typedef struct {
    const char   *dir;
    const char   *name;
    size_t        name_len;
    size_t        size;
    unsigned      shards;
    unsigned      mode;
    int64_t       group;
    int           created;
    unsigned      file_mode;
    int64_t       file_uid;
    int64_t       file_gid;
    size_t        zone_size;
    unsigned      file_layout;
    int64_t       owner_uid;
    int64_t       owner_gid;
} shmlock_open_t;

int shmlock_zone_open2(shmlock_open_t *opts, shmlock_zone_t **out);
unsigned shmlock_zone_shards(shmlock_zone_t *zone);
void shmlock_zone_retain(shmlock_zone_t *zone);
void shmlock_zone_close(shmlock_zone_t *zone);
int shmlock_zone_dead(shmlock_zone_t *zone);
const volatile uint32_t *shmlock_zone_dead_word(shmlock_zone_t *zone);
int shmlock_zone_destroy(const char *dir, const char *name, size_t name_len);
int shmlock_zone_name_ok(const char *name, size_t len);
const volatile uint32_t *shmlock_recoveries(void);
const char *shmlock_strerror(int rc);
int shmlock_errno(void);

int shmlock_dict_store(shmlock_zone_t *zone, int op, const char *key,
    size_t key_len, const shmlock_value_t *val, int64_t exptime_ms,
    int *forcible);
int shmlock_dict_store_at(shmlock_zone_t *zone, int op, const char *key,
    size_t key_len, const shmlock_value_t *val, int64_t exptime_ms,
    int64_t now_ms, int *forcible);
typedef struct {
    uint32_t  word;
    uint32_t  mask;
    uint32_t  value;
} shmlock_gen_guard_t;

int shmlock_dict_store_guarded(shmlock_zone_t *zone, int op,
    const char *key, size_t key_len, const shmlock_value_t *val,
    int64_t exptime_ms, const shmlock_gen_guard_t *guard, int *forcible);
int shmlock_dict_get(shmlock_zone_t *zone, const char *key, size_t key_len,
    int get_stale, shmlock_value_t *out, char *buf, size_t buf_size);
int shmlock_dict_get_at(shmlock_zone_t *zone, const char *key,
    size_t key_len, int get_stale, shmlock_value_t *out, char *buf,
    size_t buf_size, int64_t now_ms);
int shmlock_dict_incr(shmlock_zone_t *zone, const char *key, size_t key_len,
    double *value, int has_init, double init, int64_t init_ttl_ms,
    int *forcible);
int shmlock_dict_ttl(shmlock_zone_t *zone, const char *key, size_t key_len,
    int64_t *ttl_ms);
int shmlock_dict_expire(shmlock_zone_t *zone, const char *key,
    size_t key_len, int64_t exptime_ms);
int shmlock_dict_cas(shmlock_zone_t *zone, const char *key, size_t key_len,
    const shmlock_value_t *old, const shmlock_value_t *val,
    int64_t exptime_ms, int *forcible);
int shmlock_dict_cad(shmlock_zone_t *zone, const char *key, size_t key_len,
    const shmlock_value_t *old);
int shmlock_dict_flush_all(shmlock_zone_t *zone);
int shmlock_dict_flush_expired(shmlock_zone_t *zone, int max_count,
    int *freed);
int shmlock_dict_get_keys(shmlock_zone_t *zone, int max_count, char *buf,
    size_t buf_size, int *count, size_t *used);
int shmlock_dict_scan(shmlock_zone_t *zone, uint64_t cursor, int count,
    char *buf, size_t buf_size, uint64_t *next, int *keys, size_t *used);
size_t shmlock_dict_capacity(shmlock_zone_t *zone);
size_t shmlock_dict_free_space(shmlock_zone_t *zone);
enum {
    SHMLOCK_LEFT = 0,
    SHMLOCK_RIGHT = 1
};

int shmlock_dict_push(shmlock_zone_t *zone, int side, const char *key,
    size_t key_len, const shmlock_value_t *val, uint32_t *len);
int shmlock_dict_pop(shmlock_zone_t *zone, int side, const char *key,
    size_t key_len, shmlock_value_t *out, char *buf, size_t buf_size);
int shmlock_dict_llen(shmlock_zone_t *zone, const char *key,
    size_t key_len, uint32_t *len);

int shmlock_dict_verify(shmlock_zone_t *zone, char *msg, size_t msg_size);
typedef struct {
    uint64_t  capacity;
    uint64_t  free_space;
    uint64_t  entries;
    uint64_t  evictions;
    uint64_t  expired;
    uint64_t  spins;
    uint64_t  sleeps;
    uint64_t  takeovers;
    uint64_t  recoveries;
    uint64_t  slots;
    uint64_t  slots_used;
} shmlock_stats_t;

int shmlock_dict_stats(shmlock_zone_t *zone, int shard,
    shmlock_stats_t *out);

int64_t shmlock_now_ms(void);
int64_t shmlock_now_us(void);
uint32_t shmlock_hash(const char *key, size_t len);

uint32_t shmlock_wait_begin(shmlock_zone_t *zone, uint32_t hash);
int shmlock_wait_end(shmlock_zone_t *zone, uint32_t hash, uint32_t seq,
    int64_t timeout_us);
void shmlock_wake_waiters(shmlock_zone_t *zone, uint32_t hash, int all);
uint32_t shmlock_wait_count(shmlock_zone_t *zone, uint32_t hash);

typedef struct {
    uint32_t  slot;
    uint32_t  hash;
    uint64_t  owner;
    uint64_t  stamp;
    uint64_t  process;
} shmlock_ticket_t;
enum {
    SHMLOCK_SLOT_EXPIRY_SHIFT = 24,
    SHMLOCK_SLOT_MARKED = 4194304
};
int shmlock_slot_acquire(shmlock_zone_t *zone, const char *key,
    size_t key_len, uint32_t id, int64_t exptime_ms, int64_t now_ms,
    shmlock_ticket_t *t);
int shmlock_slot_acquire_hint(shmlock_zone_t *zone, const char *key,
    size_t key_len, uint32_t id, int64_t exptime_ms, int64_t now_ms,
    shmlock_ticket_t *t);
int shmlock_slot_release(shmlock_zone_t *zone, const shmlock_ticket_t *t);
int shmlock_slot_extend(shmlock_zone_t *zone, shmlock_ticket_t *t,
    int64_t exptime_ms, int64_t now_ms);
int shmlock_slot_look(shmlock_zone_t *zone, const char *key,
    size_t key_len, shmlock_ticket_t *t);
int shmlock_slot_swap(shmlock_zone_t *zone, const shmlock_ticket_t *seen,
    uint64_t owner, uint64_t process, unsigned marked, int64_t exptime_ms,
    int64_t now_ms, shmlock_ticket_t *t);
typedef struct {
    uint64_t  owner;
    uint64_t  process;
    int64_t   exptime_ms;
    int64_t   since_ms;
    int64_t   until_ms;
} shmlock_mark_t;
int shmlock_slot_mark(shmlock_zone_t *zone, const shmlock_ticket_t *seen,
    const shmlock_mark_t *m, shmlock_ticket_t *t);
int shmlock_slot_read_mark(shmlock_zone_t *zone, const shmlock_ticket_t *t,
    shmlock_mark_t *m);
enum {
    SHMLOCK_SLOT_LOCK = 0,
    SHMLOCK_SLOT_SHARED = 1,
    SHMLOCK_SLOT_PERMIT = 2,
    SHMLOCK_SLOT_SEMAPHORE = 3
};
typedef struct {
    shmlock_ticket_t  ticket;
    uint32_t          key_len;
    uint32_t          shown;
    char              key[32];
    uint32_t          kind;
    uint32_t          index;
} shmlock_slot_info_t;
int shmlock_slot_scan(shmlock_zone_t *zone, uint64_t cursor,
    shmlock_slot_info_t *out, int max, int *count, uint64_t *next);
int shmlock_slot_alive(const shmlock_ticket_t *t);

enum {
    SHMLOCK_SEMAPHORE = 0,
    SHMLOCK_SHARED = 1,
    SHMLOCK_GROUP_MAX = 16777215
};
int shmlock_group_acquire(shmlock_zone_t *zone, int kind, const char *key,
    size_t key_len, uint32_t id, uint32_t permits, int64_t exptime_ms,
    shmlock_ticket_t *t);
int shmlock_group_release(shmlock_zone_t *zone, int kind, const char *key,
    size_t key_len, const shmlock_ticket_t *t);
int shmlock_group_extend(shmlock_zone_t *zone, int kind, const char *key,
    size_t key_len, shmlock_ticket_t *t, int64_t exptime_ms);
int shmlock_group_reclaim(shmlock_zone_t *zone, int kind, const char *key,
    size_t key_len, uint32_t *count);
int shmlock_group_holders(shmlock_zone_t *zone, int kind, const char *key,
    size_t key_len, shmlock_ticket_t *out, int max, int *count);
int shmlock_group_head(shmlock_zone_t *zone, int kind, const char *key,
    size_t key_len, shmlock_ticket_t *t);

typedef struct {
    shmlock_zone_t   *zone;
    shmlock_ticket_t  tk;
    uint32_t          id;
    int32_t           pid;
    int32_t           held;
    uint32_t          marked;
    uint32_t          waited;
    uint32_t          ask;
    uint32_t          gone[2];
    uint32_t          alive[2];
    uint32_t          dead;
    uint32_t          dead_to;
    uint64_t          slot_zone;
    void             *slot_at;
    uint32_t          slot_tk;
    uint32_t          slot_pad;
} shmlock_lock_t;
enum {
    SHMLOCK_LOOK_CHECK = 1,
    SHMLOCK_LOOK_ASK = 2,
    SHMLOCK_LOOK_HERE = 4,
    SHMLOCK_LOOK_SHARED = 8
};
typedef struct {
    int64_t   exptime_ms;
    int64_t   since_ms;
    int64_t   till_ms;
    int64_t   ask_ms;
    int32_t   flags;
    int32_t   pad;
} shmlock_look_t;
typedef struct {
    int64_t   exptime_ms;
    int64_t   start_us;
    int64_t   timeout_us;
    double    step;
    double    ratio;
    double    max_step;
    int32_t   flags;
    int32_t   pad;
} shmlock_wait_t;
int shmlock_lock_acquire(shmlock_lock_t *l, const char *key,
    size_t key_len, int64_t exptime_ms, int64_t now_ms);
int shmlock_lock_retry(shmlock_lock_t *l, const char *key,
    size_t key_len, int64_t exptime_ms, int64_t now_ms);
int shmlock_lock_look(shmlock_lock_t *l, const char *key,
    size_t key_len, const shmlock_look_t *how);
int shmlock_lock_release(shmlock_lock_t *l, int flags);
int shmlock_lock_extend(shmlock_lock_t *l, int64_t exptime_ms);
int shmlock_lock_withdraw(shmlock_lock_t *l, const char *key,
    size_t key_len);
int shmlock_lock_holds(shmlock_lock_t *l, const char *key,
    size_t key_len);
int shmlock_lock_here(shmlock_zone_t *zone, const char *key,
    size_t key_len, int shared);
int shmlock_lock_wait(shmlock_lock_t *l, const char *key,
    size_t key_len, const shmlock_wait_t *w, int64_t *elapsed_us);
int shmlock_lock_owned(shmlock_lock_t *l);
int shmlock_shared_acquire(shmlock_lock_t *l, const char *key,
    size_t key_len, int64_t exptime_ms);
int shmlock_shared_retry(shmlock_lock_t *l, const char *key,
    size_t key_len, int64_t exptime_ms);
int shmlock_shared_look(shmlock_lock_t *l, const char *key,
    size_t key_len, int64_t exptime_ms, int flags);
int shmlock_shared_release(shmlock_lock_t *l, const char *key,
    size_t key_len);
int shmlock_shared_extend(shmlock_lock_t *l, const char *key,
    size_t key_len, int64_t exptime_ms);
int shmlock_shared_owned(shmlock_lock_t *l, const char *key,
    size_t key_len);
int shmlock_shared_wait(shmlock_lock_t *l, const char *key,
    size_t key_len, const shmlock_wait_t *w, int64_t *elapsed_us);
int shmlock_sem_acquire(shmlock_lock_t *l, const char *key,
    size_t key_len, uint32_t permits, int64_t exptime_ms);
int shmlock_sem_retry(shmlock_lock_t *l, const char *key,
    size_t key_len, uint32_t permits, int64_t exptime_ms);
int shmlock_sem_wait(shmlock_lock_t *l, const char *key,
    size_t key_len, uint32_t permits, const shmlock_wait_t *w,
    int64_t *elapsed_us);
int shmlock_sem_here(shmlock_zone_t *zone, const char *key,
    size_t key_len, uint32_t permits);

volatile uint32_t *shmlock_zone_gens(shmlock_zone_t *zone);
uint32_t shmlock_zone_gen_add(shmlock_zone_t *zone, uint32_t i,
    uint32_t delta);

int shmlock_self_pid(void);
const volatile int32_t *shmlock_self_pid_word(void);
uint64_t shmlock_proc_start(int pid);
int shmlock_proc_alive(int pid, uint64_t start);
int shmlock_token_block(char *dst);
enum { SHMLOCK_OWNER_IDS = 4096 };
uint32_t shmlock_owner_ids(void);

int shmlock_ngx_dict_probe(void *zone, const char *key, size_t key_len,
    double value, int flags, int64_t expires_in_ms, const char **why);
int shmlock_ngx_dict_delete_if(void *zone, const char *key, size_t key_len,
    double value, int flags);
int shmlock_ngx_dict_replace_if(void *zone, const char *key, size_t key_len,
    double value, int flags, double new_value, int new_flags,
    int64_t exptime_ms);

char *strerror(int errnum);
]]

-- the library at path, or nil and why
local function open(path)
    local ok, lib = pcall(ffi.load, path)
    if ok then
        return lib
    end
    return nil, lib
end

local lib, tried = locate.load("SHMLOCK_LIB", "libshmlock.so", "libshmlock",
                               open)
if not lib then
    error("resty.shmlock: cannot load libshmlock.so (run `make` in the "
          .. "checkout or `luarocks make`); tried: " .. tried, 2)
end
return lib
