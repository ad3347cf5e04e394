/*
 * Holder groups (src/group.c: semaphores and shared holds) on a lock slot
 * table of their own, built from the sources with the test build's crash
 * countdown (make test-groups; under valgrind and ASan+UBSan in
 * test-valgrind and test-asan).  Each phase runs with the 16-byte CAS and
 * with the mutex fallback:
 *
 *   semantics   permits, callers with different limits, leases, extend,
 *               a sweep, shared holds against the key's exclusive lock
 *               (both ways), a marked exclusive waiter keeping readers
 *               out and the last reader's handoff, a semaphore's marked
 *               waiter keeping its turn, a holder killed with
 *               SIGKILL dropped by its ticket, bad input; lock keys
 *               spelt as records and heads (of the layouts before 10
 *               and of 10) kept apart from the groups, whatever path
 *   many        GROUP_TEST_MANY (default 70000) holders of one key at
 *               least, in a table of 2^17 slots, then SLOT_FULL (the
 *               table, not the group, is full): shared, then permits
 *   exact       4 processes x GROUP_TEST_ROUNDS (default 20000): at most
 *               3 inside at once (limits 2 and 3 on one key; the
 *               semantics phase pins each caller's own limit),
 *               a plain counter exact under permits 1, and readers and
 *               writers of one key never inside together
 *   crash       a process SIGKILLed before each write of an acquire, a
 *               release, an extend, a sweep, a shared acquire, a
 *               handoff and a semaphore's turn (the holder's release
 *               under a waiter's mark, then the waiter's acquire), in turn: the table recovers and verifies, and
 *               the group then admits exactly `permits` holders
 *
 * usage: group_test            the phases
 *        group_test pairs N    N acquire+release pairs (callgrind)
 */

#define _GNU_SOURCE
#include "group.h"
#include "hash.h"
#include "crash.h"

#include "check.h"

#include <time.h>

typedef struct {
    uint32_t    mutex;          /* 0 free, else the holder's pid */
    uint32_t    pad;
    uint64_t    counter;
    uint32_t    inside;         /* holders in their critical section */
    uint32_t    readers;
    uint32_t    writers;
    uint32_t    worst;          /* a broken bound, if any */
    slot_hdr_t  hdr;
} shared_t;

static shared_t  *shm;
static slots_t    tab;
static size_t     shm_size;
static char       kbuf[512];

static void
table_new(uint32_t nslots, int cas16)
{
    slot_t  *slots;

    if (shm != NULL) {
        munmap(shm, shm_size);
    }
    shm_size = sizeof(shared_t) + 64 + SLOT_TABLE_BYTES(nslots);
    shm = mmap(NULL, shm_size, PROT_READ | PROT_WRITE,
               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(shm != MAP_FAILED);
    memset(shm, 0, sizeof(*shm));
    slots = (slot_t *) (((uintptr_t) (shm + 1) + 63) & ~(uintptr_t) 63);
    slot_format(&shm->hdr, slots, nslots);
    slot_attach(&tab, &shm->hdr, slots, nslots, cas16);
}

static void
mutex_lock(void)
{
    uint32_t  free;

    for ( ;; ) {
        free = 0;
        if (__atomic_compare_exchange_n(&shm->mutex, &free,
                                        (uint32_t) getpid(), 0,
                                        __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        {
            return;
        }
        sched_yield();
    }
}

static void
mutex_unlock(void)
{
    __atomic_store_n(&shm->mutex, 0, __ATOMIC_RELEASE);
}

static void
verify(void)
{
    char  msg[256];

    mutex_lock();
    if (slot_verify_locked(&tab, msg, sizeof(msg)) != 0) {
        fprintf(stderr, "verify: %s\n", msg);
        exit(1);
    }
    mutex_unlock();
}

static group_t
group(int kind, const char *key)
{
    group_t  g;

    group_init(&g, &tab, kind, kbuf, key, strlen(key));
    return g;
}

/* the group calls as shmlock_group.c makes them: under the mutex */
static int
acquire(int kind, const char *key, uint64_t owner, uint32_t permits,
    int64_t expiry, int64_t now, slot_ticket_t *tk)
{
    group_t       g = group(kind, key);
    group_head_t  h;
    int           rc;

    mutex_lock();
    rc = group_acquire_locked(&g, owner, owner >> 32 | 0x100, permits,
                              expiry, now, tk, &h);
    mutex_unlock();
    if (rc == SLOT_HELD) {
        *tk = h.tk;
    }
    return rc;
}

static int
release(int kind, const char *key, const slot_ticket_t *tk, int64_t now,
    int *handed)
{
    group_t  g = group(kind, key);
    int      rc, hd;

    mutex_lock();
    rc = group_release_locked(&g, tk, now, handed ? handed : &hd);
    mutex_unlock();
    return rc;
}

static int
extend(int kind, const char *key, slot_ticket_t *tk, int64_t expiry,
    int64_t now)
{
    group_t  g = group(kind, key);
    int      rc;

    mutex_lock();
    rc = group_extend_locked(&g, tk, expiry, now);
    mutex_unlock();
    return rc;
}

static uint32_t
sweep(int kind, const char *key, int64_t now)
{
    group_t   g = group(kind, key);
    uint32_t  n;
    int       handed;

    mutex_lock();
    n = group_sweep_locked(&g, now, &handed);
    mutex_unlock();
    return n;
}

static int
holders(int kind, const char *key, int64_t now, slot_ticket_t *out, int max)
{
    group_t   g = group(kind, key);
    uint32_t  from = 0;
    int       n;

    mutex_lock();
    n = group_holders_locked(&g, now, &from, out, max);
    mutex_unlock();
    return n;
}

/* the exclusive lock of a key of klen bytes, as shmlock_slot.c takes it:
 * the fast path, lock-free, then the mutex */
static int
lock_n(const char *key, size_t klen, uint64_t owner, int64_t now,
    slot_ticket_t *tk)
{
    uint32_t  hash = hash_bytes(key, klen);
    int       rc;

    rc = slot_acquire_fast(&tab, key, klen, hash, owner, 0x100, 0, tk);
    if (rc == SLOT_OK) {
        return rc;
    }
    rc = slot_acquire(&tab, SLOT_KIND_LOCK, key, klen, hash, owner, 0x100, 0,
                      now, tk);
    if (rc == SLOT_SLOW) {
        mutex_lock();
        rc = slot_acquire_locked(&tab, SLOT_KIND_LOCK, key, klen, hash,
                                 owner, 0x100, 0, now, tk);
        mutex_unlock();
    }
    return rc;
}

static int
lock(const char *key, uint64_t owner, int64_t now, slot_ticket_t *tk)
{
    return lock_n(key, strlen(key), owner, now, tk);
}

static int
unlock(const slot_ticket_t *tk)
{
    int  rc = slot_release(&tab, tk);

    if (rc == SLOT_SLOW) {
        mutex_lock();
        rc = slot_release_locked(&tab, tk);
        mutex_unlock();
    }
    return rc;
}

static int
look(const char *key, slot_ticket_t *tk)
{
    size_t  klen = strlen(key);
    int     rc;

    mutex_lock();
    rc = slot_look_locked(&tab, SLOT_KIND_LOCK, key, klen,
                          hash_bytes(key, klen), tk);
    mutex_unlock();
    return rc;
}

#define O(n)  ((uint64_t) (1000 + (n)) << 32 | (n))


/* ---- semantics ---- */

static void
test_semantics(int cas16)
{
    slot_ticket_t  a, b, c, d, x, m, list[8];
    slot_mark_t    mark = { 0, 0, O(9), 0x100, 5000, 100, 300, 0, 0 };
    int            handed, status;
    pid_t          pid;

    table_new(128, cas16);

    /* permits: two holders, the third refused until one leaves */
    CHECK_RC(acquire(GROUP_SEM, "s", O(1), 2, 0, 100, &a), SLOT_OK);
    CHECK_RC(acquire(GROUP_SEM, "s", O(2), 2, 0, 100, &b), SLOT_OK);
    CHECK_RC(acquire(GROUP_SEM, "s", O(3), 2, 0, 100, &c), SLOT_HELD);
    CHECK(group_is_head(c.state.owner)
          && (c.state.owner >> 24 & GROUP_MAX) == 2);
    CHECK(holders(GROUP_SEM, "s", 100, list, 8) == 2);
    CHECK_RC(release(GROUP_SEM, "s", &a, 100, NULL), SLOT_OK);
    CHECK_RC(release(GROUP_SEM, "s", &a, 100, NULL), SLOT_GONE);
    CHECK_RC(acquire(GROUP_SEM, "s", O(3), 2, 0, 100, &c), SLOT_OK);
    /* another caller's limit: 3 lets one more in, 1 none */
    CHECK_RC(acquire(GROUP_SEM, "s", O(4), 3, 0, 100, &d), SLOT_OK);
    CHECK_RC(acquire(GROUP_SEM, "s", O(5), 1, 0, 100, &x), SLOT_HELD);
    CHECK_RC(acquire(GROUP_SEM, "s", O(5), 3, 0, 100, &x), SLOT_HELD);
    CHECK(sweep(GROUP_SEM, "s", 100) == 3);
    CHECK_RC(release(GROUP_SEM, "s", &b, 100, NULL), SLOT_OK);
    CHECK_RC(release(GROUP_SEM, "s", &c, 100, NULL), SLOT_OK);
    CHECK_RC(release(GROUP_SEM, "s", &d, 100, NULL), SLOT_OK);
    /* the last one out frees the head */
    CHECK_RC(look("s", &x), SLOT_ABSENT);       /* (K itself: untouched) */
    CHECK(holders(GROUP_SEM, "s", 100, list, 8) == 0);
    verify();

    /* leases: an expired holder counts no more; its release and extend
     * answer GONE; a live one's extend moves its lease */
    CHECK_RC(acquire(GROUP_SEM, "l", O(1), 1, 200, 100, &a), SLOT_OK);
    CHECK_RC(acquire(GROUP_SEM, "l", O(2), 1, 0, 199, &b), SLOT_HELD);
    CHECK_RC(extend(GROUP_SEM, "l", &a, 400, 150), SLOT_OK);
    CHECK_RC(acquire(GROUP_SEM, "l", O(2), 1, 0, 300, &b), SLOT_HELD);
    CHECK_RC(acquire(GROUP_SEM, "l", O(2), 1, 0, 400, &b), SLOT_OK);
    CHECK_RC(release(GROUP_SEM, "l", &a, 400, NULL), SLOT_GONE);
    CHECK_RC(extend(GROUP_SEM, "l", &a, 900, 400), SLOT_GONE);
    CHECK(holders(GROUP_SEM, "l", 400, list, 8) == 1 && list[0].state.owner
                                                         == O(2));
    CHECK_RC(release(GROUP_SEM, "l", &b, 400, NULL), SLOT_OK);
    /* an expired holder not yet swept: its release gives nothing back */
    CHECK_RC(acquire(GROUP_SEM, "l", O(1), 2, 500, 450, &a), SLOT_OK);
    CHECK_RC(acquire(GROUP_SEM, "l", O(2), 2, 0, 450, &b), SLOT_OK);
    CHECK_RC(release(GROUP_SEM, "l", &a, 600, NULL), SLOT_GONE);
    CHECK(sweep(GROUP_SEM, "l", 600) == 1);
    CHECK_RC(release(GROUP_SEM, "l", &b, 600, NULL), SLOT_OK);
    verify();

    /* shared holds and the key's exclusive lock */
    CHECK_RC(acquire(GROUP_SHARED, "rw", O(1), 0, 0, 100, &a), SLOT_OK);
    CHECK_RC(acquire(GROUP_SHARED, "rw", O(2), 0, 0, 100, &b), SLOT_OK);
    CHECK_RC(lock("rw", O(3), 100, &x), SLOT_HELD);
    CHECK(group_is_head(x.state.owner));
    CHECK_RC(release(GROUP_SHARED, "rw", &a, 100, NULL), SLOT_OK);
    CHECK_RC(lock("rw", O(3), 100, &x), SLOT_HELD);
    CHECK_RC(release(GROUP_SHARED, "rw", &b, 100, NULL), SLOT_OK);
    CHECK_RC(lock("rw", O(3), 100, &x), SLOT_OK);
    CHECK_RC(acquire(GROUP_SHARED, "rw", O(1), 0, 0, 100, &a), SLOT_HELD);
    CHECK(a.state.owner == O(3));
    CHECK_RC(unlock(&x), SLOT_OK);
    CHECK_RC(acquire(GROUP_SHARED, "rw", O(1), 0, 0, 100, &a), SLOT_OK);
    /* shared holds with leases: the exclusive lock takes the key once
     * the last lease ran out */
    CHECK_RC(acquire(GROUP_SHARED, "rw", O(2), 0, 250, 100, &b), SLOT_OK);
    CHECK_RC(release(GROUP_SHARED, "rw", &a, 100, NULL), SLOT_OK);
    CHECK_RC(lock("rw", O(3), 249, &x), SLOT_HELD);
    CHECK(sweep(GROUP_SHARED, "rw", 249) == 1);   /* the head: until 250 */
    CHECK_RC(lock("rw", O(3), 249, &x), SLOT_HELD);
    CHECK_RC(lock("rw", O(3), 250, &x), SLOT_OK);
    CHECK_RC(release(GROUP_SHARED, "rw", &b, 260, NULL), SLOT_GONE);
    CHECK_RC(look("rw", &c), SLOT_OK);
    CHECK(c.state.owner == O(3));
    CHECK_RC(unlock(&x), SLOT_OK);
    verify();

    /* a marked exclusive waiter: readers stay out; the last reader hands
     * the key over; a stale mark lets readers in */
    CHECK_RC(acquire(GROUP_SHARED, "rw", O(1), 0, 0, 100, &a), SLOT_OK);
    CHECK_RC(lock("rw", O(9), 100, &x), SLOT_HELD);
    mutex_lock();
    CHECK_RC(slot_mark_locked(&tab, &x, &mark, &m), SLOT_OK);
    mutex_unlock();
    CHECK_RC(acquire(GROUP_SHARED, "rw", O(2), 0, 0, 100, &b), SLOT_HELD);
    CHECK_RC(release(GROUP_SHARED, "rw", &a, 200, &handed), SLOT_OK);
    CHECK(handed == 1);
    CHECK_RC(look("rw", &c), SLOT_OK);
    CHECK(c.state.owner == O(9) && !(c.state.stamp & SLOT_MARKED)
          && (c.state.stamp >> SLOT_EXPIRY_SHIFT) == 5200);
    CHECK_RC(unlock(&c), SLOT_OK);
    CHECK_RC(acquire(GROUP_SHARED, "rw", O(1), 0, 0, 100, &a), SLOT_OK);
    CHECK_RC(lock("rw", O(9), 100, &x), SLOT_HELD);
    mutex_lock();
    CHECK_RC(slot_mark_locked(&tab, &x, &mark, &m), SLOT_OK);
    mutex_unlock();
    CHECK_RC(acquire(GROUP_SHARED, "rw", O(2), 0, 0, 299, &b), SLOT_HELD);
    CHECK_RC(acquire(GROUP_SHARED, "rw", O(2), 0, 0, 300, &b), SLOT_OK);
    CHECK_RC(release(GROUP_SHARED, "rw", &a, 300, &handed), SLOT_OK);
    CHECK_RC(release(GROUP_SHARED, "rw", &b, 300, &handed), SLOT_OK);
    CHECK(handed == 0);
    CHECK_RC(look("rw", &c), SLOT_OK);
    CHECK(c.state.owner == 0);
    verify();

    /* a holder killed: its ticket, as listed, drops it (the caller judged
     * it dead) and its permit is back */
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        CHECK_RC(acquire(GROUP_SEM, "k", O(7), 1, 0, 100, &a), SLOT_OK);
        kill(getpid(), SIGKILL);
    }
    CHECK(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status));
    CHECK_RC(acquire(GROUP_SEM, "k", O(1), 1, 0, 100, &a), SLOT_HELD);
    CHECK(holders(GROUP_SEM, "k", 100, list, 8) == 1);
    CHECK(list[0].state.owner == O(7));
    CHECK_RC(release(GROUP_SEM, "k", &list[0], 100, NULL), SLOT_OK);
    CHECK_RC(acquire(GROUP_SEM, "k", O(1), 1, 0, 100, &a), SLOT_OK);
    CHECK_RC(release(GROUP_SEM, "k", &list[0], 100, NULL), SLOT_GONE);
    CHECK_RC(release(GROUP_SEM, "k", &a, 100, NULL), SLOT_OK);

    /* a semaphore's marked waiter (the nginx queue): its mark keeps the
     * others out while its deadline is ahead, even with permits free
     * (the head stays, counting none); the waiter itself comes in and
     * drops the mark; a stale mark is cleared by anyone */
    {
        slot_mark_t  turn = { 0, 0, O(9), 0x100, 0, 100, 400, 0, 0 };

        CHECK_RC(acquire(GROUP_SEM, "t", O(1), 1, 0, 100, &a), SLOT_OK);
        CHECK_RC(acquire(GROUP_SEM, "t", O(2), 1, 0, 100, &x), SLOT_HELD);
        mutex_lock();
        CHECK_RC(slot_mark_locked(&tab, &x, &turn, &m), SLOT_OK);
        mutex_unlock();
        CHECK_RC(release(GROUP_SEM, "t", &a, 100, NULL), SLOT_OK);
        CHECK(holders(GROUP_SEM, "t", 100, list, 8) == 0);
        CHECK_RC(acquire(GROUP_SEM, "t", O(2), 3, 0, 100, &b), SLOT_HELD);
        CHECK(b.state.stamp & SLOT_MARKED);
        CHECK(group_is_head(b.state.owner));
        CHECK(sweep(GROUP_SEM, "t", 100) == 0);
        CHECK_RC(acquire(GROUP_SEM, "t", O(2), 3, 0, 100, &b), SLOT_HELD);
        verify();
        CHECK_RC(acquire(GROUP_SEM, "t", O(9), 1, 0, 100, &c), SLOT_OK);
        CHECK_RC(acquire(GROUP_SEM, "t", O(2), 3, 0, 100, &b), SLOT_OK);
        CHECK_RC(release(GROUP_SEM, "t", &c, 100, NULL), SLOT_OK);
        CHECK_RC(release(GROUP_SEM, "t", &b, 100, NULL), SLOT_OK);
        /* a mark that is not the waiter's turn yet (count >= its limit)
         * stays; a stale one is cleared and the key is free again */
        CHECK_RC(acquire(GROUP_SEM, "t", O(1), 1, 0, 100, &a), SLOT_OK);
        CHECK_RC(acquire(GROUP_SEM, "t", O(2), 1, 0, 100, &x), SLOT_HELD);
        mutex_lock();
        CHECK_RC(slot_mark_locked(&tab, &x, &turn, &m), SLOT_OK);
        mutex_unlock();
        CHECK_RC(acquire(GROUP_SEM, "t", O(9), 1, 0, 100, &c), SLOT_HELD);
        CHECK(c.state.stamp & SLOT_MARKED);
        CHECK_RC(release(GROUP_SEM, "t", &a, 100, NULL), SLOT_OK);
        CHECK_RC(acquire(GROUP_SEM, "t", O(2), 1, 0, 399, &b), SLOT_HELD);
        CHECK_RC(acquire(GROUP_SEM, "t", O(2), 1, 0, 400, &b), SLOT_OK);
        CHECK(!(b.state.stamp & SLOT_MARKED));
        CHECK_RC(release(GROUP_SEM, "t", &b, 400, NULL), SLOT_OK);
        verify();
    }

    /* long keys (records keep a prefix and a fingerprint) */
    memset(kbuf, 0, sizeof(kbuf));
    {
        char  key[200];

        memset(key, 'q', 150);
        key[150] = '\0';
        CHECK_RC(acquire(GROUP_SEM, key, O(1), 1, 0, 100, &a), SLOT_OK);
        key[149] = 'p';
        CHECK_RC(acquire(GROUP_SEM, key, O(1), 1, 0, 100, &b), SLOT_OK);
        CHECK_RC(acquire(GROUP_SEM, key, O(2), 1, 0, 100, &c), SLOT_HELD);
        CHECK_RC(release(GROUP_SEM, key, &b, 100, NULL), SLOT_OK);
        key[149] = 'q';
        CHECK_RC(release(GROUP_SEM, key, &a, 100, NULL), SLOT_OK);
    }

    /* a full table: SLOT_FULL, the count given back */
    table_new(16, cas16);
    {
        char  key[32];
        int   i, rc = SLOT_OK;

        for (i = 0; i < 20 && rc == SLOT_OK; i++) {
            snprintf(key, sizeof(key), "f%d", i);
            rc = acquire(GROUP_SEM, key, O(1), 1, 0, 100, &a);
        }
        CHECK_RC(rc, SLOT_FULL);
        verify();
    }
}


/* ---- kinds: lock keys of any bytes beside the records ---- */

/*
 * A lock's key spelt as a record or head of K's groups (layouts before
 * 10: "\0" kind i>>8 i&255 K, a head index 0xffff; layout 10: 4 bytes of
 * index, then K) is a key of its own: K's groups held, it is free
 * (through lock(): the lock-free paths, then the mutex), and held, K's
 * groups come in; a hint naming the record's or head's slot, free, is
 * passed over.  (Before layout 10 they shared a slot: two locks merged
 * in one table, two holders across shards: issue 30.)
 */
static void
test_kinds(int cas16)
{
    static const char  *prefix[] = {
        "\0r\0\0", "\0s\0\0", "\0s\377\377", "\0\0\0\0", "\0r\0\1",
    };
    slot_ticket_t  r, p, hd, x[5], tk;
    group_head_t   h;
    group_t        g;
    char           key[5][8];
    uint32_t       hash;
    size_t         i;

    table_new(128, cas16);
    for (i = 0; i < 5; i++) {
        memcpy(key[i], prefix[i], 4);
        memcpy(key[i] + 4, "kk", 3);
    }
    /* K's groups held: a reader, a permit */
    CHECK_RC(acquire(GROUP_SHARED, "kk", O(1), 0, 0, 100, &r), SLOT_OK);
    CHECK_RC(acquire(GROUP_SEM, "kk", O(2), 1, 0, 100, &p), SLOT_OK);
    for (i = 0; i < 5; i++) {
        CHECK_RC(lock_n(key[i], 6, O(3), 100, &x[i]), SLOT_OK);
        CHECK(x[i].index != r.index && x[i].index != p.index);
        CHECK_RC(unlock(&x[i]), SLOT_OK);
    }
    /* freed, the record, the permit and the semaphore's head are slots
     * a hint may name: never taken for the crafted keys */
    g = group(GROUP_SEM, "kk");
    mutex_lock();
    group_head_locked(&g, 100, &h);
    mutex_unlock();
    CHECK(h.found && group_is_head(h.tk.state.owner));
    hd = h.tk;
    CHECK_RC(release(GROUP_SHARED, "kk", &r, 100, NULL), SLOT_OK);
    CHECK_RC(release(GROUP_SEM, "kk", &p, 100, NULL), SLOT_OK);
    for (i = 0; i < 5; i++) {
        CHECK_RC(slot_acquire_hint(&tab, r.index, key[i], 6, O(4), 0x100, 0,
                                   &tk, &hash), SLOT_SLOW);
        CHECK_RC(slot_acquire_hint(&tab, p.index, key[i], 6, O(4), 0x100, 0,
                                   &tk, &hash), SLOT_SLOW);
        CHECK_RC(slot_acquire_hint(&tab, hd.index, key[i], 6, O(4), 0x100, 0,
                                   &tk, &hash), SLOT_SLOW);
    }
    /* the crafted keys held: K's groups come in */
    for (i = 0; i < 5; i++) {
        CHECK_RC(lock_n(key[i], 6, O(5), 100, &x[i]), SLOT_OK);
    }
    CHECK_RC(acquire(GROUP_SHARED, "kk", O(1), 0, 0, 100, &r), SLOT_OK);
    CHECK_RC(acquire(GROUP_SEM, "kk", O(2), 1, 0, 100, &p), SLOT_OK);
    verify();
    CHECK_RC(release(GROUP_SHARED, "kk", &r, 100, NULL), SLOT_OK);
    CHECK_RC(release(GROUP_SEM, "kk", &p, 100, NULL), SLOT_OK);
    for (i = 0; i < 5; i++) {
        CHECK_RC(unlock(&x[i]), SLOT_OK);
    }
    verify();
}

/*
 * More holders of one key than 16 bits count (a head counts 24): a table
 * of 2^17 slots (as a shard of 256 MiB has) lets `many` of them in, then
 * answers SLOT_FULL (no slot left: a full table, not a full group) for
 * shared holds and for a semaphore whose permits are GROUP_MAX.  The
 * count then goes back to 0 with every release.
 */
#define GROUP_TEST_SLOTS  131072

static uint32_t
test_many(int cas16, uint32_t many)
{
    static slot_ticket_t  held[GROUP_TEST_SLOTS];
    int                   kinds[2] = { GROUP_SHARED, GROUP_SEM }, k, rc;
    uint32_t              n, i;
    group_head_t          h;
    group_t               g;

    table_new(GROUP_TEST_SLOTS, cas16);
    for (k = 0; k < 2; k++) {
        for (n = 0; n < GROUP_TEST_SLOTS; n++) {
            rc = acquire(kinds[k], "many", O(n % 1000), kinds[k] == GROUP_SEM
                         ? GROUP_MAX : 0, 0, 100, &held[n]);
            if (rc != SLOT_OK) {
                break;
            }
        }
        CHECK_RC(rc, SLOT_FULL);
        CHECK(n >= many && n < GROUP_TEST_SLOTS - GROUP_TEST_SLOTS / 8);
        g = group(kinds[k], "many");
        mutex_lock();
        group_head_locked(&g, 100, &h);
        mutex_unlock();
        CHECK(h.count == n && h.top >= n && h.top <= n + 1);
        for (i = 0; i < n; i++) {
            CHECK_RC(release(kinds[k], "many", &held[i], 100, NULL),
                     SLOT_OK);
        }
        CHECK(sweep(kinds[k], "many", 100) == 0);
        verify();
    }
    return n;
}


/* ---- many processes ---- */

static void
bound(uint32_t in, uint32_t limit)
{
    if (in > limit) {
        __atomic_store_n(&shm->worst, in, __ATOMIC_SEQ_CST);
    }
}

static void
worker(int id, int rounds)
{
    slot_ticket_t  tk;
    uint64_t       owner = (uint64_t) getpid() << 32;
    uint32_t       permits = 2 + id % 2, in;
    int            i, rc, n;

    for (i = 0; i < rounds; i++) {
        owner++;
        /* a semaphore: each process its own limit (2 or 3) */
        for (n = 0; (rc = acquire(GROUP_SEM, "sem", owner, permits, 0, 100,
                                   &tk)) != SLOT_OK; n++)
        {
            CHECK_RC(rc, SLOT_HELD);
            if (n % 16 == 15) {
                sched_yield();
            }
        }
        /* (a limit binds its caller when it acquires: a limit-3 caller
         * may join two holders, one of limit 2; the key's bound is 3) */
        in = __atomic_add_fetch(&shm->inside, 1, __ATOMIC_SEQ_CST);
        bound(in, 3);
        __atomic_sub_fetch(&shm->inside, 1, __ATOMIC_SEQ_CST);
        CHECK_RC(release(GROUP_SEM, "sem", &tk, 100, NULL), SLOT_OK);

        /* permits 1: a plain increment, exact only under exclusion */
        while (acquire(GROUP_SEM, "one", owner, 1, 0, 100, &tk) != SLOT_OK) {
            sched_yield();
        }
        shm->counter = shm->counter + 1;
        CHECK_RC(release(GROUP_SEM, "one", &tk, 100, NULL), SLOT_OK);

        /* readers (processes 0, 1) and writers (2, 3) of one key */
        if (id < 2) {
            while (acquire(GROUP_SHARED, "rw", owner, 0, 0, 100, &tk)
                   != SLOT_OK)
            {
                sched_yield();
            }
            __atomic_add_fetch(&shm->readers, 1, __ATOMIC_SEQ_CST);
            bound(__atomic_load_n(&shm->writers, __ATOMIC_SEQ_CST), 0);
            __atomic_sub_fetch(&shm->readers, 1, __ATOMIC_SEQ_CST);
            CHECK_RC(release(GROUP_SHARED, "rw", &tk, 100, NULL), SLOT_OK);
        } else {
            while (lock("rw", owner, 100, &tk) != SLOT_OK) {
                sched_yield();
            }
            in = __atomic_add_fetch(&shm->writers, 1, __ATOMIC_SEQ_CST);
            bound(in, 1);
            bound(__atomic_load_n(&shm->readers, __ATOMIC_SEQ_CST) * 100, 0);
            __atomic_sub_fetch(&shm->writers, 1, __ATOMIC_SEQ_CST);
            CHECK_RC(unlock(&tk), SLOT_OK);
        }
    }
}

static void
test_exact(int cas16, int rounds)
{
    pid_t  pids[4];
    int    i, status;

    table_new(256, cas16);
    for (i = 0; i < 4; i++) {
        pids[i] = fork();
        CHECK(pids[i] >= 0);
        if (pids[i] == 0) {
            worker(i, rounds);
            _exit(0);
        }
    }
    for (i = 0; i < 4; i++) {
        CHECK(waitpid(pids[i], &status, 0) == pids[i]);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    CHECK(shm->worst == 0);
    CHECK(shm->counter == (uint64_t) 4 * rounds);
    CHECK(sweep(GROUP_SEM, "sem", 100) == 0);
    verify();
}


/* ---- crashes ---- */

/* the marked waiter's process: its pid (O(9)'s) and a start time */
#define P9  ((uint64_t) 0x100 << 32 | 1009)

enum { SC_ACQUIRE, SC_RELEASE, SC_EXTEND, SC_SWEEP, SC_SHARED, SC_HANDOFF,
       SC_TURN, SC_COUNT };

static const char  *scenario_name[] = { "acquire", "release", "extend",
                                        "sweep", "shared", "handoff",
                                        "turn" };

/* "m": a semaphore of one permit, held by O(1) (turn_held), its marked
 * waiter O(9) (deadline 900) */
static slot_ticket_t  turn_held;

#define PERMITS  3

/* Before: "g" has holders 1 (live, index 0), 2 (expired at 150), and a
 * free record; "rw" has one reader, marked by an exclusive waiter; "m"
 * (turn_held). */
static void
crash_setup(int cas16, slot_ticket_t *held, slot_ticket_t *reader)
{
    slot_ticket_t  tk, x, m;
    slot_mark_t    mark = { 0, 0, O(9), P9, 5000, 100, 900, 0, 0 };

    table_new(64, cas16);
    CHECK_RC(acquire(GROUP_SEM, "g", O(1), PERMITS, 1000, 100, held),
             SLOT_OK);
    CHECK_RC(acquire(GROUP_SEM, "g", O(2), PERMITS, 150, 100, &tk), SLOT_OK);
    CHECK_RC(acquire(GROUP_SEM, "g", O(3), PERMITS, 1000, 100, &tk),
             SLOT_OK);
    CHECK_RC(release(GROUP_SEM, "g", &tk, 100, NULL), SLOT_OK);
    CHECK_RC(acquire(GROUP_SHARED, "rw", O(4), 0, 0, 100, reader), SLOT_OK);
    CHECK_RC(lock("rw", O(9), 100, &x), SLOT_HELD);
    mutex_lock();
    CHECK_RC(slot_mark_locked(&tab, &x, &mark, &m), SLOT_OK);
    mutex_unlock();
    CHECK_RC(acquire(GROUP_SEM, "m", O(1), 1, 1000, 100, &turn_held),
             SLOT_OK);
    CHECK_RC(acquire(GROUP_SEM, "m", O(2), 1, 1000, 100, &x), SLOT_HELD);
    mark.until = 900;
    mutex_lock();
    CHECK_RC(slot_mark_locked(&tab, &x, &mark, &m), SLOT_OK);
    mutex_unlock();
}

static void
crash_run(int sc, slot_ticket_t *held, const slot_ticket_t *reader)
{
    slot_ticket_t  tk;
    group_t        g = group(GROUP_SEM, "g");
    group_head_t   h;
    int            handed;

    mutex_lock();
    switch (sc) {
    case SC_ACQUIRE:
        group_acquire_locked(&g, O(5), 0x100, PERMITS, 0, 100, &tk, &h);
        break;
    case SC_RELEASE:
        group_release_locked(&g, held, 100, &handed);
        break;
    case SC_EXTEND:
        group_extend_locked(&g, held, 2000, 100);
        break;
    case SC_SWEEP:
        group_sweep_locked(&g, 200, &handed);
        break;
    case SC_SHARED:
        g = group(GROUP_SHARED, "rw2");
        group_acquire_locked(&g, O(6), 0x100, 0, 0, 100, &tk, &h);
        break;
    case SC_HANDOFF:
        g = group(GROUP_SHARED, "rw");
        group_release_locked(&g, reader, 100, &handed);
        break;
    case SC_TURN:
        /* the holder leaves, its marked waiter comes in */
        g = group(GROUP_SEM, "m");
        group_release_locked(&g, &turn_held, 100, &handed);
        group_acquire_locked(&g, O(9), 0x100, 1, 0, 100, &tk, &h);
        break;
    }
    mutex_unlock();
}

/* After a crash in SC_TURN: one holder at most, the waiter's once done;
 * while its mark lasts nobody else comes in, the waiter does (unless it
 * holds, or O(1) still does); after its deadline, anyone. */
static void
turn_check(int done, int64_t now)
{
    slot_ticket_t  tk, list[4];
    int            n = holders(GROUP_SEM, "m", now, list, 4);
    int            mine = n == 1 && list[0].state.owner == O(9), rc;

    CHECK(n <= 1);
    CHECK(!done || mine);
    /* the waiter was the one killed: once its acquire dropped the mark
     * (the head's write), its turn is spent */
    rc = acquire(GROUP_SEM, "m", O(21), 1, 0, now, &tk);
    if (rc == SLOT_OK) {
        CHECK(n == 0);
        CHECK_RC(release(GROUP_SEM, "m", &tk, now, NULL), SLOT_OK);
    } else {
        CHECK_RC(rc, SLOT_HELD);
    }
    CHECK_RC(acquire(GROUP_SEM, "m", O(9), 1, 0, now, &tk),
             n == 0 ? SLOT_OK : SLOT_HELD);
    n = holders(GROUP_SEM, "m", now, list, 4);
    CHECK(n == 1);
    CHECK_RC(release(GROUP_SEM, "m", &list[0], now, NULL), SLOT_OK);
    CHECK_RC(acquire(GROUP_SEM, "m", O(21), 1, 0, 900, &tk), SLOT_OK);
    CHECK(holders(GROUP_SEM, "m", 900, list, 4) == 1);
}

/* After: the group admits new holders up to exactly PERMITS (an
 * over-count is swept away when the group looks full). */
static void
crash_check(int sc, int done, int64_t now)
{
    slot_ticket_t  tk, list[8];
    int            n, more;

    n = holders(GROUP_SEM, "g", now, list, 8);
    CHECK(n <= PERMITS && (n >= 1 || sc == SC_RELEASE));
    for (more = 0; acquire(GROUP_SEM, "g", O(20 + more), PERMITS, 0, now,
                           &tk) == SLOT_OK; more++)
    {
        CHECK(more < 8);
    }
    CHECK(holders(GROUP_SEM, "g", now, list, 8) == PERMITS);
    if (done) {
        /* holder 2 expired: 1 is left, and the new one; or none */
        CHECK(n == (sc == SC_RELEASE ? 0 : sc == SC_ACQUIRE ? 2 : 1));
    }
    if (sc == SC_SHARED) {
        n = holders(GROUP_SHARED, "rw2", now, list, 8);
        CHECK(n == (done ? 1 : n) && n <= 1);
        CHECK(sweep(GROUP_SHARED, "rw2", now) == (uint32_t) n);
        CHECK_RC(lock("rw2", O(8), now, &tk), n == 1 ? SLOT_HELD : SLOT_OK);
    }
    if (sc == SC_HANDOFF) {
        CHECK_RC(look("rw", &tk), SLOT_OK);
        /* the reader, or (handed over) the waiter; never free, nor both */
        CHECK(tk.state.owner == O(9) || group_is_head(tk.state.owner));
        CHECK(!done || tk.state.owner == O(9));
        if (tk.state.owner == O(9)) {
            CHECK(!(tk.state.stamp & SLOT_MARKED));
            /* the waiter's process with it: the waiter knows it as its own */
            CHECK(tk.process == P9);
        }
    }
    if (sc == SC_TURN) {
        turn_check(done, now);
    }
}

static void
test_crash(int cas16)
{
    slot_ticket_t  held, reader;
    int            sc, n, status, done;
    pid_t          pid;
    char           msg[256];

    for (sc = 0; sc < SC_COUNT; sc++) {
        for (n = 1, done = 0; !done; n++) {
            CHECK(n < 200);
            crash_setup(cas16, &held, &reader);
            pid = fork();
            CHECK(pid >= 0);
            if (pid == 0) {
                crash_at(n);
                crash_run(sc, &held, &reader);
                _exit(0);
            }
            CHECK(waitpid(pid, &status, 0) == pid);
            done = WIFEXITED(status);
            CHECK(done || (WIFSIGNALED(status)
                           && WTERMSIG(status) == SIGKILL));
            if (!done) {
                CHECK(shm->mutex == (uint32_t) pid);
                shm->mutex = (uint32_t) getpid();
                slot_recover_locked(&tab);
                mutex_unlock();
            }
            if (slot_verify_locked(&tab, msg, sizeof(msg)) != 0) {
                fprintf(stderr, "crash %s before write %d: %s\n",
                        scenario_name[sc], n, msg);
                exit(1);
            }
            crash_check(sc, done, 200);
            verify();
        }
        printf("  crash %-8s before each of %d writes: ok\n",
               scenario_name[sc], n - 2);
    }
}


int
main(int argc, char **argv)
{
    slot_ticket_t  tk;
    long           i, n;
    int            cas16, rounds = 20000;
    const char    *r = getenv("GROUP_TEST_ROUNDS");
    const char    *m = getenv("GROUP_TEST_MANY");
    uint32_t       many = m != NULL ? (uint32_t) atol(m) : 70000;

    if (argc == 3 && strcmp(argv[1], "pairs") == 0) {
        n = atol(argv[2]);
        table_new(1024, -1);
        for (i = 0; i < n; i++) {
            CHECK_RC(acquire(GROUP_SEM, "sem:key", 42, 4, 5000, 1000, &tk),
                     SLOT_OK);
            CHECK_RC(release(GROUP_SEM, "sem:key", &tk, 1000, NULL),
                     SLOT_OK);
        }
        return 0;
    }
    if (r != NULL) {
        rounds = atoi(r);
    }
    for (cas16 = slot_cas16(); cas16 >= 0; cas16--) {
        printf("group_test, %s:\n", cas16 ? "16-byte CAS" : "mutex fallback");
        test_semantics(cas16);
        test_kinds(cas16);
        printf("  semantics: ok\n");
        if (many > 0) {
            printf("  %u holders of a key (at least %u), then full: ok\n",
                   test_many(cas16, many), many);
        }
        test_exact(cas16, rounds);
        printf("  4 processes x %d rounds: bounds kept, counter exact\n",
               rounds);
        test_crash(cas16);
    }
    return 0;
}
