/*
 * The ABI but for the dictionary calls (shmlock_dict.c): status strings,
 * zones, the clock and the hash, the wait words, processes and lock
 * tokens.
 */

#include "shmlock.h"
#include "hash.h"
#include "recover.h"
#include "shm_zone.h"
#include "shm_watch.h"
#include "sys.h"
#include "token.h"
#include "wait.h"
#include "zone.h"

static __thread int  last_errno;

const char *
shmlock_strerror(int rc)
{
    switch (rc) {
    case SHMLOCK_OK:              return "ok";
    case SHMLOCK_NOT_FOUND:       return "not found";
    case SHMLOCK_EXISTS:          return "exists";
    case SHMLOCK_NO_MEMORY:       return "no memory";
    case SHMLOCK_NOT_A_NUMBER:    return "not a number";
    case SHMLOCK_CHANGED:         return "changed";
    case SHMLOCK_BAD_NAME:        return "bad zone name";
    case SHMLOCK_BAD_SIZE:        return "bad size";
    case SHMLOCK_INCOMPATIBLE:    return "incompatible zone";
    case SHMLOCK_SYSTEM:          return "system error";
    case SHMLOCK_CORRUPT:         return "corrupt zone";
    case SHMLOCK_BUSY:            return "busy";
    case SHMLOCK_AGAIN:           return "buffer too small";
    case SHMLOCK_TIMEOUT:         return "timeout";
    case SHMLOCK_VALUE_TOO_LARGE: return "value too large";
    case SHMLOCK_BAD_KEY:         return "bad key";
    case SHMLOCK_BAD_VALUE:       return "bad value type";
    case SHMLOCK_BAD_SHARDS:      return "bad shards";
    case SHMLOCK_DESTROYED:       return "zone destroyed";
    case SHMLOCK_NOT_OWNER:       return "zone file owned by another user";
    case SHMLOCK_UNSAFE_MODE:     return "zone file writable by group or "
                                         "others";
    case SHMLOCK_FOREIGN_NS:      return "zone made in another pid namespace";
    case SHMLOCK_DIR_BUSY:        return "zone directory locked by another "
                                         "process";
    case SHMLOCK_BAD_MODE:        return "bad mode";
    case SHMLOCK_NOT_A_LIST:      return "value not a list";
    case SHMLOCK_FOREIGN_TIME:    return "zone made in another time "
                                         "namespace";
    case SHMLOCK_REMOVED:         return "zone file removed: deleted while "
                                         "in use (rm, or systemd's "
                                         "RemoveIPC=yes at logout)";
    case SHMLOCK_ASK:             return "ask: an owner of this process "
                                         "to judge";
    default:                      return "unknown error";
    }
}

const volatile uint32_t *
shmlock_recoveries(void)
{
    return recover_counter();
}

int
shmlock_errno(void)
{
    return last_errno;
}

int
shmlock_zone_name_ok(const char *name, size_t len)
{
    return shm_zone_name_ok(name, len);
}

int
shmlock_zone_open2(shmlock_open_t *opts, shmlock_zone_t **out)
{
    int  err, rc;

    rc = shm_zone_open(opts, out, &err);
    /* err may hold what a round before the one that succeeded met */
    last_errno = rc == SHMLOCK_SYSTEM ? err : 0;
    return rc;
}

int
shmlock_zone_open(const char *dir, const char *name, size_t name_len,
    size_t size, unsigned shards, shmlock_zone_t **out)
{
    shmlock_open_t  o = { .dir = dir, .name = name, .name_len = name_len,
                          .size = size, .shards = shards, .group = -1 };

    return shmlock_zone_open2(&o, out);
}

void
shmlock_zone_retain(shmlock_zone_t *zone)
{
    shm_zone_retain(zone);
}

int
shmlock_zone_dead(shmlock_zone_t *zone)
{
    switch (shm_watch(zone)) {
    case SHMLOCK_OK:         return 0;
    case SHMLOCK_REMOVED:    return 2;
    default:                 return 1;
    }
}

const volatile uint32_t *
shmlock_zone_dead_word(shmlock_zone_t *zone)
{
    return &zone->hdr->dead;
}

void
shmlock_zone_close(shmlock_zone_t *zone)
{
    shm_zone_close(zone);
}

int
shmlock_zone_destroy(const char *dir, const char *name, size_t name_len)
{
    int  err, rc;

    rc = shm_zone_destroy(dir, name, name_len, &err);
    last_errno = rc == SHMLOCK_SYSTEM ? err : 0;
    return rc;
}

unsigned
shmlock_zone_shards(shmlock_zone_t *zone)
{
    return zone->nshards;
}

int64_t
shmlock_now_ms(void)
{
    return sys_now_ms();
}

int64_t
shmlock_now_us(void)
{
    return sys_now_us();
}

uint32_t
shmlock_hash(const char *key, size_t len)
{
    return hash_bytes(key, len);
}

uint32_t
shmlock_wait_begin(shmlock_zone_t *zone, uint32_t hash)
{
    return wait_begin(zone, hash);
}

int
shmlock_wait_end(shmlock_zone_t *zone, uint32_t hash, uint32_t seq,
    int64_t timeout_us)
{
    return wait_end(zone, hash, seq, timeout_us);
}

void
shmlock_wake_waiters(shmlock_zone_t *zone, uint32_t hash, int all)
{
    wait_wake(zone, hash, all);
}

volatile uint32_t *
shmlock_zone_gens(shmlock_zone_t *zone)
{
    return zone->gen;
}

uint32_t
shmlock_zone_gen_add(shmlock_zone_t *zone, uint32_t i, uint32_t delta)
{
    uint32_t  *w = &zone->gen[i & (ZONE_GEN_WORDS - 1)];

    /* a read takes no ownership of the line: readers do not bounce it */
    if (delta == 0) {
        return __atomic_load_n(w, __ATOMIC_SEQ_CST);
    }
    return __atomic_add_fetch(w, delta, __ATOMIC_SEQ_CST);
}

uint32_t
shmlock_wait_count(shmlock_zone_t *zone, uint32_t hash)
{
    return wait_count(zone, hash);
}

int
shmlock_self_pid(void)
{
    return (int) sys_pid();
}

const volatile int32_t *
shmlock_self_pid_word(void)
{
    return &sys_proc->pid;
}

uint64_t
shmlock_proc_start(int pid)
{
    return pid > 0 ? sys_proc_start((uint32_t) pid) : 0;
}

int
shmlock_proc_alive(int pid, uint64_t start)
{
    return pid > 0 && sys_proc_alive((uint32_t) pid, start, ~(uint64_t) 0);
}

int
shmlock_token_block(char *dst)
{
    return (int) token_block(dst);
}

uint32_t
shmlock_owner_ids(void)
{
    _Static_assert(SHMLOCK_OWNER_IDS == 1 << TOKEN_BLOCK_BITS,
                   "a block of ids is a block of token serials");
    return token_ids();
}
