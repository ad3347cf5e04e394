/*
 * The lock slots (src/slot.c) on their own, before they are placed in
 * the zone file: built from the sources with the test build's crash
 * countdown (make test-slots; under valgrind and ASan+UBSan in
 * test-valgrind and test-asan).  Each phase runs with the 16-byte CAS and
 * with the mutex fallback:
 *
 *   semantics   acquire, held, release, a stale ticket, expiry, extend,
 *               marks, a dead holder's takeover, long keys, keys of
 *               another kind with the same bytes (every lookup tells
 *               them apart), a full table, reclaim and tombstones
 *   exact       4 processes x SLOT_TEST_ROUNDS (default 200000) locked
 *               increments of one counter, while they churn other keys
 *               through a small table (creation, reclaim, tombstones
 *               under the lock-free paths); the counter must be exact
 *   spill       keys past the floor's room spill into chunks of the
 *               test's own (as a shard's, spill.h): held, released
 *               (their chunks given back at once), stale tickets,
 *               extend, marks, takeovers, reclaim of expired ones, the
 *               chunks used up (SLOT_FULL), no lock-free path on them
 *   crash       a process SIGKILLed before each write of a key's
 *               creation, a reclaim, a release, a mark, of the fast
 *               paths' pair (no mutex: nothing to recover), of a
 *               release that hands a marked lock to its waiter, and of
 *               a spilled slot's creation, release, mark and reclaim,
 *               in turn: the table recovers (the chunks the chains do
 *               not hold are free again, as a shard's recovery frees
 *               them), verifies, and every key is held by exactly its
 *               last holder or free; a handoff killed before its hint
 *               leaves the waiter's process unknown, and the waiter's
 *               own swap to the same state writes it again
 *
 * The lock-free acquire is tried as shmlock_slot.c tries it: the inline
 * home-slot fast path (slot_acquire_fast) first, then slot_acquire.
 *
 * usage: slot_test             the phases
 *        slot_test pairs N     N acquire+release pairs of one key (for
 *                              callgrind: bench/README.md)
 */

#define _GNU_SOURCE
#include "slot.h"
#include "hash.h"
#include "crash.h"

#include "check.h"

/* the chunks a table spills into (as a shard's, spill.h) */
#define POOL  64

/* shared memory: the caller's mutex, a counter, the spill chunks' use,
 * the chunks, the table */
typedef struct {
    uint32_t    mutex;          /* 0 free, else the holder's pid */
    uint32_t    pad;
    uint64_t    counter;
    uint64_t    fast;           /* acquires the fast path made */
    uint32_t    pool_used;      /* chunks taken */
    uint8_t     used[POOL + 1]; /* chunk i taken (1..POOL) */
    char        chunks[(POOL + 1) * 64] __attribute__((aligned(64)));
    slot_hdr_t  hdr;
} shared_t;

static shared_t  *shm;
static slots_t    tab;
static size_t     shm_size;

/* the spill chunks: the first two free ones (the mutex held) */
static int
pool_take(void *ctx, uint32_t *slot, uint32_t *rec)
{
    uint32_t  c, got = 0, two[2];

    (void) ctx;
    for (c = 1; c <= POOL && got < 2; c++) {
        if (!shm->used[c]) {
            two[got++] = c;
        }
    }
    if (got < 2) {
        return -1;
    }
    shm->used[two[0]] = shm->used[two[1]] = 1;
    shm->pool_used += 2;
    *slot = two[0];
    *rec = two[1];
    return 0;
}

static void
pool_give(void *ctx, uint32_t slot, uint32_t rec)
{
    (void) ctx;
    CHECK(slot >= 1 && slot <= POOL && rec >= 1 && rec <= POOL
          && shm->used[slot] && shm->used[rec]);
    shm->used[slot] = shm->used[rec] = 0;
    shm->pool_used -= 2;
}

/* (recovery) a chunk a chain holds */
static void
pool_mark(void *arg, uint32_t c)
{
    (void) arg;
    shm->used[c] = 1;
    shm->pool_used++;
}

/* after a crash, as a shard's recovery rebuilds its free list: the
 * chunks the chains hold are taken, the others free */
static void
pool_recover(void)
{
    memset(shm->used, 0, sizeof(shm->used));
    shm->pool_used = 0;
    slot_spill_chunks(&tab, pool_mark, NULL);
}

/* the chains hold exactly the chunks taken */
static void
pool_check(void)
{
    uint8_t   was[POOL + 1];
    uint32_t  n = shm->pool_used;

    memcpy(was, shm->used, sizeof(was));
    pool_recover();
    CHECK(shm->pool_used == n && memcmp(was, shm->used, sizeof(was)) == 0);
    CHECK(shm->hdr.spilled * 2 == n);
}

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

/* a table that spills into the pool's chunks */
static void
table_spill(uint32_t nslots, int cas16)
{
    table_new(nslots, cas16);
    slot_attach_spill(&tab, shm->chunks, POOL, pool_take, pool_give, NULL);
}

/* The caller's mutex: a spin on a shared word (the zone's is shmtx). */
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
    pool_check();
    mutex_unlock();
}

/* The calls as a lock would make them: the fast path (a free key in its
 * home slot), lock-free, then locked.  (The fast path takes no clock: a
 * free slot is taken whatever its expiry.) */
static int
acquire(const char *key, uint64_t owner, int64_t expiry, int64_t now,
    slot_ticket_t *tk)
{
    size_t    klen = strlen(key);
    uint32_t  hash = hash_bytes(key, klen);
    int       rc;

    rc = slot_acquire_fast(&tab, key, klen, hash, owner, owner >> 32 | 0x100,
                           expiry, tk);
    if (rc == SLOT_OK) {
        shm->fast++;
        return rc;
    }
    CHECK(rc == SLOT_SLOW);
    rc = slot_acquire(&tab, SLOT_KIND_LOCK, key, klen, hash, owner,
                      owner >> 32 | 0x100, expiry, now, tk);
    if (rc != SLOT_SLOW) {
        return rc;
    }
    mutex_lock();
    rc = slot_acquire_locked(&tab, SLOT_KIND_LOCK, key, klen, hash, owner,
                             owner >> 32 | 0x100, expiry, now, tk);
    mutex_unlock();
    return rc;
}

static int
release(const slot_ticket_t *tk)
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
extend(slot_ticket_t *tk, int64_t expiry)
{
    int  rc = slot_extend(&tab, tk, expiry);

    if (rc == SLOT_SLOW) {
        mutex_lock();
        rc = slot_extend_locked(&tab, tk, expiry);
        mutex_unlock();
    }
    return rc;
}

static int
look(const char *key, slot_ticket_t *tk)
{
    size_t    klen = strlen(key);
    uint32_t  hash = hash_bytes(key, klen);
    int       rc = slot_look(&tab, SLOT_KIND_LOCK, key, klen, hash, tk);

    if (rc == SLOT_SLOW) {
        mutex_lock();
        rc = slot_look_locked(&tab, SLOT_KIND_LOCK, key, klen, hash, tk);
        mutex_unlock();
    }
    return rc;
}

static int
swap(const slot_ticket_t *seen, uint64_t owner, uint64_t flags,
    int64_t expiry, slot_ticket_t *tk)
{
    int  rc = slot_swap(&tab, seen, owner, owner >> 32 | 0x100, flags,
                        expiry, tk);

    if (rc == SLOT_SLOW) {
        mutex_lock();
        rc = slot_swap_locked(&tab, seen, owner, owner >> 32 | 0x100, flags,
                              expiry, tk);
        mutex_unlock();
    }
    return rc;
}

/* swap with the process named (swap's is the owner's pid | 0x100) */
static int
swap_as(const slot_ticket_t *seen, uint64_t owner, uint64_t process,
    uint64_t flags, int64_t expiry, slot_ticket_t *tk)
{
    int  rc = slot_swap(&tab, seen, owner, process, flags, expiry, tk);

    if (rc == SLOT_SLOW) {
        mutex_lock();
        rc = slot_swap_locked(&tab, seen, owner, process, flags, expiry, tk);
        mutex_unlock();
    }
    return rc;
}


/* ---- semantics ---- */

static void
test_semantics(int cas16)
{
    slot_ticket_t  a, b, c, d, m, old;
    char           key[200], key2[200];
    int            i;

    table_new(64, cas16);

    /* acquire, held, release, a stale ticket */
    CHECK_RC(acquire("k", 1, 0, 100, &a), SLOT_OK);
    CHECK_RC(acquire("k", 2, 0, 100, &b), SLOT_HELD);
    CHECK(b.state.owner == 1 && b.index == a.index);
    /* (a HELD answer is the holder's state, as a look's: it names the
     * holder, for a takeover; a ticket of another owner releases
     * nothing) */
    b.state.owner = 2;
    CHECK_RC(release(&b), SLOT_GONE);
    CHECK_RC(release(&a), SLOT_OK);
    CHECK_RC(release(&a), SLOT_GONE);
    CHECK_RC(look("k", &c), SLOT_OK);
    CHECK(c.state.owner == 0);
    CHECK_RC(look("none", &c), SLOT_ABSENT);
    CHECK_RC(acquire("k", 2, 0, 100, &b), SLOT_OK);
    CHECK(b.index == a.index);              /* the slot stayed */
    CHECK_RC(release(&a), SLOT_GONE);       /* 1's old ticket: not 2's */
    CHECK_RC(release(&b), SLOT_OK);

    /* the fast path: a free key in its home slot only (else SLOT_SLOW,
     * and slot_acquire decides) */
    if (cas16) {
        uint32_t  hk = hash_bytes("k", 1);
        uint64_t  fast = shm->fast;

        CHECK_RC(acquire("k", 3, 0, 100, &a), SLOT_OK);
        CHECK(shm->fast == fast + 1 && a.index == (hk & tab.mask));
        CHECK_RC(slot_acquire_fast(&tab, "k", 1, hk, 4, 0x100, 0, &b),
                 SLOT_SLOW);                    /* held */
        CHECK_RC(release(&a), SLOT_OK);
        /* a key whose home slot is k's: its own slot is further on */
        for (i = 0; ; i++) {
            snprintf(key, sizeof(key), "c%d", i);
            if ((hash_bytes(key, strlen(key)) & tab.mask) == (hk & tab.mask)) {
                break;
            }
        }
        CHECK_RC(acquire(key, 3, 0, 100, &a), SLOT_OK);     /* made */
        CHECK_RC(release(&a), SLOT_OK);
        CHECK_RC(slot_acquire_fast(&tab, key, strlen(key),
                                   hash_bytes(key, strlen(key)), 4, 0x100,
                                   0, &b), SLOT_SLOW);
        CHECK_RC(acquire(key, 4, 0, 100, &b), SLOT_OK);
        CHECK(shm->fast == fast + 1 && b.index == a.index
              && b.index != (hk & tab.mask));
        CHECK_RC(release(&b), SLOT_OK);
    }

    /* expiry: taken at once when expired; the old holder touches nothing */
    CHECK_RC(acquire("e", 1, 110, 100, &a), SLOT_OK);
    CHECK_RC(acquire("e", 2, 200, 109, &b), SLOT_HELD);
    CHECK_RC(acquire("e", 2, 200, 110, &b), SLOT_OK);
    CHECK_RC(release(&a), SLOT_GONE);
    CHECK_RC(extend(&a, 500), SLOT_GONE);
    CHECK_RC(look("e", &c), SLOT_OK);
    CHECK(c.state.owner == 2 && (c.state.stamp >> SLOT_EXPIRY_SHIFT) == 200);

    /* extend: a new expiry, and the ticket follows it */
    CHECK_RC(extend(&b, 300), SLOT_OK);
    CHECK_RC(acquire("e", 3, 400, 250, &c), SLOT_HELD);
    CHECK_RC(release(&b), SLOT_OK);
    /* an expired lock no one took: released by its holder */
    CHECK_RC(acquire("e", 3, 400, 250, &c), SLOT_OK);
    CHECK_RC(release(&c), SLOT_OK);

    /* marks: the holder's release and extend go to the slow path, others
     * find it held; cleared, the holder's ticket works again */
    CHECK_RC(acquire("m", 1, 0, 100, &a), SLOT_OK);
    CHECK_RC(look("m", &c), SLOT_OK);
    CHECK_RC(swap(&c, 1, SLOT_MARKED, 0, &m), SLOT_OK);
    CHECK_RC(release(&a), SLOT_MARKED_STATE);
    CHECK_RC(extend(&a, 900), SLOT_MARKED_STATE);
    CHECK_RC(acquire("m", 2, 0, 100, &b), SLOT_HELD);
    CHECK(b.state.stamp & SLOT_MARKED);
    CHECK_RC(swap(&c, 1, 0, 0, &m), SLOT_GONE);   /* c is stale now */
    CHECK_RC(swap(&b, 1, 0, 0, &m), SLOT_OK);     /* mark cleared */
    CHECK_RC(release(&a), SLOT_OK);
    /* a handoff: from the marked state straight to the starver */
    CHECK_RC(acquire("m", 1, 0, 100, &a), SLOT_OK);
    CHECK_RC(look("m", &c), SLOT_OK);
    CHECK_RC(swap(&c, 1, SLOT_MARKED, 0, &m), SLOT_OK);
    CHECK_RC(swap(&m, 7, 0, 5000, &b), SLOT_OK);
    CHECK_RC(release(&a), SLOT_GONE);
    CHECK_RC(release(&b), SLOT_OK);
    /* a marked lock that expired: the caller's slow path decides */
    CHECK_RC(acquire("x", 1, 150, 100, &a), SLOT_OK);
    CHECK_RC(swap(&a, 1, SLOT_MARKED, 150, &m), SLOT_OK);
    CHECK_RC(acquire("x", 2, 0, 200, &b), SLOT_MARKED_STATE);

    /* a dead holder's takeover: a swap from the state seen */
    CHECK_RC(acquire("d", 1, 0, 100, &a), SLOT_OK);
    CHECK_RC(acquire("d", 2, 0, 100, &old), SLOT_HELD);
    CHECK_RC(swap(&old, 2, 0, 0, &b), SLOT_OK);
    CHECK_RC(swap(&old, 3, 0, 0, &c), SLOT_GONE);  /* only once */
    CHECK_RC(release(&a), SLOT_GONE);
    CHECK_RC(release(&b), SLOT_OK);

    /* long keys: a prefix and a fingerprint; keys that differ only past
     * the prefix get slots of their own */
    memset(key, 'a', 150);
    key[150] = '\0';
    memcpy(key2, key, sizeof(key));
    key2[149] = 'b';
    CHECK_RC(acquire(key, 1, 0, 100, &a), SLOT_OK);
    CHECK_RC(acquire(key2, 2, 0, 100, &b), SLOT_OK);
    CHECK(a.index != b.index);
    CHECK_RC(acquire(key, 3, 0, 100, &c), SLOT_HELD);
    CHECK_RC(release(&a), SLOT_OK);
    CHECK_RC(release(&b), SLOT_OK);
    verify();

    /* kinds: a key of another kind (a holder group's record: group.h)
     * with the very bytes of a lock's key is another key.  Every lookup
     * tells them apart: the fast path, the hint (named the other kind's
     * slot: passed over), the probe, the locked probe, look, the walk */
    {
        uint32_t  h = hash_bytes("twin", 4), klen, shown, hh;
        char      shown_key[SLOT_KEY_INLINE];
        int       kind;

        mutex_lock();
        CHECK_RC(slot_acquire_locked(&tab, 1, "twin", 4, h, 5, 0x100, 0, 100,
                                     &a), SLOT_OK);
        mutex_unlock();
        CHECK_RC(release(&a), SLOT_OK);             /* LIVE and free */
        CHECK_RC(look("twin", &c), SLOT_ABSENT);
        CHECK_RC(slot_acquire_hint(&tab, a.index, "twin", 4, 6, 0x100, 0, &b,
                                   &hh), SLOT_SLOW);
        CHECK_RC(slot_acquire_fast(&tab, "twin", 4, h, 6, 0x100, 0, &b),
                 SLOT_SLOW);
        CHECK_RC(acquire("twin", 6, 0, 100, &b), SLOT_OK);
        CHECK(b.index != a.index);
        CHECK_RC(look("twin", &c), SLOT_OK);
        CHECK(c.index == b.index && c.state.owner == 6);
        /* the other kind's slot, held again: the lock's is not */
        mutex_lock();
        CHECK_RC(slot_acquire_locked(&tab, 1, "twin", 4, h, 7, 0x100, 0, 100,
                                     &c), SLOT_OK);
        CHECK(c.index == a.index);
        CHECK_RC(slot_look_locked(&tab, 1, "twin", 4, h, &d), SLOT_OK);
        CHECK(d.index == a.index && d.state.owner == 7);
        mutex_unlock();
        CHECK(slot_info(&tab, a.index, &d, &kind, shown_key, &klen, &shown,
                        &hh) && kind == 1 && klen == 4 && shown == 4
              && memcmp(shown_key, "twin", 4) == 0);
        CHECK(slot_info(&tab, b.index, &d, &kind, shown_key, &klen, &shown,
                        &hh) && kind == SLOT_KIND_LOCK && klen == 4);
        verify();
        CHECK_RC(release(&b), SLOT_OK);
        CHECK_RC(release(&c), SLOT_OK);
    }

    /* full: 7/8 of the slots held, the next key gets SLOT_FULL; once
     * some are released, reclaim makes room */
    table_new(16, cas16);
    for (i = 0; i < 14; i++) {
        snprintf(key, sizeof(key), "full%d", i);
        CHECK_RC(acquire(key, 1, 0, 100, &a), SLOT_OK);
        if (i == 0) {
            old = a;
        }
    }
    CHECK_RC(acquire("one more", 1, 0, 100, &a), SLOT_FULL);
    verify();
    CHECK_RC(release(&old), SLOT_OK);
    CHECK_RC(acquire("one more", 1, 0, 100, &a), SLOT_OK);
    CHECK(shm->hdr.live == 14);
    verify();
    /* the reclaimed key is gone: its name makes a new slot when asked */
    CHECK_RC(look("full0", &c), SLOT_ABSENT);

    /* churn: many keys through a small table (reclaim, tombstones made
     * EMPTY again), each exclusive while held */
    table_new(32, cas16);
    for (i = 0; i < 3000; i++) {
        snprintf(key, sizeof(key), "churn%d", i % 500);
        CHECK_RC(acquire(key, 1, 0, 100, &a), SLOT_OK);
        CHECK_RC(acquire(key, 2, 0, 100, &b), SLOT_HELD);
        CHECK_RC(release(&a), SLOT_OK);
        if (i % 97 == 0) {
            verify();
        }
    }
    verify();
    CHECK(shm->hdr.live + shm->hdr.dead <= 28);
}


/* ---- spilled slots ---- */

static void
test_spill(int cas16)
{
    slot_ticket_t  a, b, c, m, f[14], sp[POOL / 2];
    slot_mark_t    mk = { 0, 0, 7, 0x100, 1000, 5, 900, 0, 0 }, got;
    char           key[32];
    uint32_t       hash;
    int            i, n;

    table_spill(16, cas16);
    /* the floor's room: 14 of 16 */
    for (i = 0; i < 14; i++) {
        snprintf(key, sizeof(key), "floor%d", i);
        CHECK_RC(acquire(key, 1, 0, 100, &f[i]), SLOT_OK);
        CHECK(!(f[i].index & SLOT_SPILL));
    }
    /* then two chunks each, until none is left */
    for (n = 0; ; n++) {
        CHECK(n <= POOL / 2);
        snprintf(key, sizeof(key), "spill%d", n);
        if (acquire(key, 2, 0, 100, &a) == SLOT_FULL) {
            break;
        }
        CHECK(a.index & SLOT_SPILL);
        sp[n] = a;
    }
    CHECK(n == POOL / 2 && shm->pool_used == POOL
          && shm->hdr.spilled == POOL / 2);
    verify();
    /* held, looked at, never on a lock-free path */
    CHECK_RC(acquire("spill3", 3, 0, 100, &b), SLOT_HELD);
    CHECK(b.index == sp[3].index && b.state.owner == 2);
    hash = hash_bytes("spill3", 6);
    CHECK_RC(slot_look(&tab, SLOT_KIND_LOCK, "spill3", 6, hash, &b),
             cas16 ? SLOT_SLOW : SLOT_SLOW);
    CHECK_RC(look("spill3", &b), SLOT_OK);
    CHECK(b.index == sp[3].index && b.state.owner == 2);
    CHECK_RC(slot_release(&tab, &sp[3]), SLOT_SLOW);
    CHECK_RC(slot_extend(&tab, &sp[3], 0), SLOT_SLOW);
    if (cas16) {
        CHECK_RC(slot_acquire_hint(&tab, sp[3].index, "spill3", 6, 3, 0x100,
                                   0, &b, &hash), SLOT_SLOW);
    }
    /* extend, release: its chunks back at once; a stale ticket gone */
    CHECK_RC(extend(&sp[3], 500), SLOT_OK);
    CHECK_RC(release(&sp[3]), SLOT_OK);
    CHECK(shm->pool_used == POOL - 2 && shm->hdr.spilled == POOL / 2 - 1);
    CHECK_RC(release(&sp[3]), SLOT_GONE);
    CHECK_RC(extend(&sp[3], 500), SLOT_GONE);
    CHECK_RC(look("spill3", &b), SLOT_ABSENT);
    verify();
    /* spilled again into the same chunks: an earlier ticket of them is
     * not its own */
    CHECK_RC(acquire("again", 2, 0, 100, &a), SLOT_OK);
    CHECK(a.index == sp[3].index && a.state.stamp != sp[3].state.stamp);
    CHECK_RC(release(&sp[3]), SLOT_GONE);
    CHECK_RC(look("again", &b), SLOT_OK);
    CHECK(b.state.owner == 2);
    /* a mark: written, read (under the mutex only), released into the
     * waiter's hands by a swap; the stale look's swap refused */
    CHECK_RC(slot_mark_read(&tab, &b, &got), SLOT_SLOW);
    mutex_lock();
    CHECK_RC(slot_mark_locked(&tab, &a, &mk, &m), SLOT_OK);
    CHECK_RC(slot_mark_read_locked(&tab, &m, &got), SLOT_OK);
    CHECK(got.owner == 7 && got.since == 5 && got.until == 900);
    mutex_unlock();
    CHECK_RC(release(&a), SLOT_MARKED_STATE);
    CHECK_RC(swap(&m, 7, 0, 0, &c), SLOT_OK);
    CHECK_RC(swap(&m, 8, 0, 0, &c), SLOT_GONE);
    CHECK_RC(look("again", &b), SLOT_OK);
    CHECK(b.state.owner == 7 && !(b.state.stamp & SLOT_MARKED));
    CHECK(shm->pool_used == POOL);
    /* a dead holder's takeover: a swap from the state seen */
    CHECK_RC(swap(&b, 9, 0, 300, &c), SLOT_OK);
    CHECK_RC(release(&c), SLOT_OK);
    CHECK(shm->pool_used == POOL - 2);
    verify();
    /* expired ones: taken by their key, given back by a reclaim (which
     * a full table runs before it answers SLOT_FULL) */
    CHECK_RC(acquire("exp1", 4, 150, 100, &a), SLOT_OK);
    CHECK(a.index & SLOT_SPILL);
    CHECK_RC(acquire("exp2", 5, 200, 100, &b), SLOT_FULL);
    CHECK_RC(acquire("exp2", 5, 200, 160, &b), SLOT_OK);    /* exp1's */
    CHECK(b.index == a.index);
    CHECK_RC(look("exp1", &c), SLOT_ABSENT);
    CHECK_RC(acquire("exp1", 4, 150, 190, &a), SLOT_FULL);
    CHECK_RC(acquire("exp2", 6, 0, 210, &c), SLOT_OK);      /* expired */
    CHECK(c.index == b.index && c.state.owner == 6);
    verify();
    /* every key released: the floor stays, the chunks are back */
    for (i = 0; i < 14; i++) {
        CHECK_RC(release(&f[i]), SLOT_OK);
    }
    for (i = 0; i < n; i++) {
        if (i != 3) {
            CHECK_RC(release(&sp[i]), SLOT_OK);
        }
    }
    CHECK_RC(release(&c), SLOT_OK);
    CHECK(shm->pool_used == 0 && shm->hdr.spilled == 0);
    verify();
}


/* ---- many processes, exact ---- */

static void
worker(int id, int rounds)
{
    slot_ticket_t  tk, other;
    char           key[32];
    uint64_t       owner = (uint64_t) getpid() << 32;
    int            i, rc, spins;
    int64_t        now = 1000;

    for (i = 0; i < rounds; i++) {
        owner++;
        for (spins = 0; ; spins++) {
            rc = acquire("counter", owner, 0, now, &tk);
            if (rc == SLOT_OK) {
                break;
            }
            CHECK(rc == SLOT_HELD);
            if (spins % 64 == 63) {
                sched_yield();
            }
        }
        /* a plain, non-atomic increment: exact only under exclusion */
        shm->counter = shm->counter + 1;
        CHECK_RC(release(&tk), SLOT_OK);

        /* churn: a key of our own, made and reclaimed meanwhile */
        if (i % 8 == 0) {
            snprintf(key, sizeof(key), "w%d-%d", id, (i / 8) % 40);
            rc = acquire(key, owner, 0, now, &other);
            CHECK(rc == SLOT_OK || rc == SLOT_FULL);
            if (rc == SLOT_OK) {
                CHECK_RC(release(&other), SLOT_OK);
            }
        }
    }
}

static void
test_exact(int cas16, int rounds)
{
    pid_t  pids[4];
    int    i, status;

    table_new(64, cas16);
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
    CHECK(shm->counter == (uint64_t) 4 * rounds);
    CHECK(!cas16 || shm->fast > 0);
    verify();
}


/* ---- crashes ---- */

#define FAST_OWNER  ((uint64_t) 0x200 << 32 | 9)

/* a handoff's holder and waiter, each with its process (pid | start) */
#define HAND_HOLDER   ((uint64_t) 0x300 << 32 | 1)
#define HAND_HPROC    ((uint64_t) 0x11 << 32 | 0x300)
#define HAND_WAITER   ((uint64_t) 0x400 << 32 | 77)
#define HAND_WPROC    ((uint64_t) 0x22 << 32 | 0x400)

/* (the locked paths first: the table without a 16-byte CAS has none of
 * the fast ones) */
enum { SC_CREATE, SC_RECLAIM, SC_RELEASE, SC_MARK, SC_HANDOFF, SC_SPILL,
       SC_UNSPILL, SC_SPILL_MARK, SC_SPILL_RECLAIM, SC_FAST, SC_HINT,
       SC_COUNT };

static const char  *scenario_name[] = { "create", "reclaim", "release",
                                        "mark", "handoff", "spill",
                                        "unspill", "s-mark", "s-reclaim",
                                        "fast", "hint" };

/* the spilled keys of the spill scenarios: "sheld" held by 1, "sexp"
 * held by 1 until 150 */
static slot_ticket_t  spill_held, spill_exp;

/* the floor's room held (14 of 16), then the two spilled keys */
static void
spill_setup(int cas16)
{
    slot_ticket_t  tk;
    char           key[32];
    int            i;

    table_spill(16, cas16);
    for (i = 0; i < 14; i++) {
        snprintf(key, sizeof(key), "f%d", i);
        CHECK_RC(acquire(key, 1, 0, 100, &tk), SLOT_OK);
    }
    CHECK_RC(acquire("sheld", 1, 0, 100, &spill_held), SLOT_OK);
    CHECK_RC(acquire("sexp", 1, 150, 100, &spill_exp), SLOT_OK);
    CHECK((spill_held.index & spill_exp.index & SLOT_SPILL) != 0);
}

/* after a spill scenario (done: it ran to its end) */
static void
spill_check(int sc, int done)
{
    slot_ticket_t  tk;
    slot_mark_t    got;
    int            rc;

    rc = acquire("sheld", 5, 0, 100, &tk);
    if (sc == SC_UNSPILL) {
        /* killed before its CAS: 1's; after: free (and maybe still on
         * its chain, until a reclaim gives it back) */
        CHECK(done ? rc == SLOT_OK
                   : rc == SLOT_OK || (rc == SLOT_HELD
                                       && tk.state.owner == 1));
    } else {
        CHECK(rc == SLOT_HELD && tk.state.owner == 1);
    }
    if (sc == SC_SPILL_MARK && look("sheld", &tk) == SLOT_OK
        && (tk.state.stamp & SLOT_MARKED))
    {
        mutex_lock();
        CHECK_RC(slot_mark_read_locked(&tab, &tk, &got), SLOT_OK);
        mutex_unlock();
        CHECK((got.owner == 77 && got.since == 1)
              || (got.owner == 78 && got.since == 0));
    }
    if (sc == SC_SPILL) {
        rc = look("new", &tk);
        CHECK(done ? rc == SLOT_OK && tk.state.owner == 9
                   : rc == SLOT_ABSENT
                     || (rc == SLOT_OK && tk.state.owner == 9));
    }
    /* "sexp" expired: free or given back, either way ours */
    CHECK_RC(acquire("sexp", 5, 0, 200, &tk), SLOT_OK);
}

/* the handoff's key "h": held by HAND_HOLDER, marked by HAND_WAITER */
static slot_ticket_t  hand_held;

static void
handoff_setup(void)
{
    slot_mark_t    m = { 0, 0, HAND_WAITER, HAND_WPROC, 0, 1, 1000, 0, 0 };
    slot_ticket_t  seen, tk;

    mutex_lock();
    CHECK_RC(slot_acquire_locked(&tab, SLOT_KIND_LOCK, "h", 1,
                                 hash_bytes("h", 1), HAND_HOLDER, HAND_HPROC,
                                 0, 100, &hand_held), SLOT_OK);
    CHECK_RC(slot_look_locked(&tab, SLOT_KIND_LOCK, "h", 1,
                              hash_bytes("h", 1), &seen), SLOT_OK);
    CHECK(seen.process == HAND_HPROC);
    CHECK_RC(slot_mark_locked(&tab, &seen, &m, &tk), SLOT_OK);
    mutex_unlock();
}

/* The release of "h" as lock/zone.lua's makes it: refused (marked), the
 * mark read, a swap to the waiter and its process. */
static void
handoff_run(void)
{
    slot_ticket_t  at = hand_held, tk;
    slot_mark_t    m;

    if (release(&hand_held) != SLOT_MARKED_STATE) {
        _exit(2);
    }
    at.state.stamp |= SLOT_MARKED;
    if (slot_mark_read(&tab, &at, &m) != SLOT_OK
        || swap_as(&at, m.owner, m.process, 0, 0, &tk) != SLOT_OK
        || tk.process != HAND_WPROC)
    {
        _exit(2);
    }
}

/* After a handoff killed at some write: "h" is the holder's, marked by
 * the waiter (killed before the swap's CAS), or the waiter's.  Returns 1
 * when the waiter's process is unknown there (killed between the CAS and
 * the hint): then only the waiter's own process writes it again, by a
 * swap to the same state. */
static int
handoff_check(int done)
{
    slot_ticket_t  tk, tk2;
    slot_mark_t    m;
    int            lost = 0;

    CHECK_RC(look("h", &tk), SLOT_OK);
    if (tk.state.owner == HAND_HOLDER) {
        CHECK(!done);
        CHECK(tk.process == HAND_HPROC && (tk.state.stamp & SLOT_MARKED));
        CHECK_RC(slot_mark_read(&tab, &tk, &m), SLOT_OK);
        CHECK(m.owner == HAND_WAITER && m.process == HAND_WPROC);
        return 0;
    }
    CHECK(tk.state.owner == HAND_WAITER && !(tk.state.stamp & SLOT_MARKED));
    if (tk.process == 0) {
        CHECK(!done);
        lost = 1;
        /* a process of another pid (`shmlock unlock`) swapping the same
         * state writes nothing */
        CHECK_RC(swap_as(&tk, HAND_WAITER, HAND_HPROC, 0, 0, &tk2), SLOT_OK);
        CHECK(tk2.process == 0);
        CHECK_RC(look("h", &tk), SLOT_OK);
        CHECK(tk.process == 0 && tk.state.owner == HAND_WAITER);
        /* the waiter's own swap: its process back */
        CHECK_RC(swap_as(&tk, HAND_WAITER, HAND_WPROC, 0, 0, &tk2), SLOT_OK);
        CHECK(tk2.process == HAND_WPROC);
        CHECK(tk2.state.owner == tk.state.owner
              && tk2.state.stamp == tk.state.stamp);
    }
    CHECK_RC(look("h", &tk), SLOT_OK);
    CHECK(tk.state.owner == HAND_WAITER && tk.process == HAND_WPROC);
    /* once known, a same-owner swap by a process of the waiter's pid but
     * another start time (its pid reused) does not overwrite it */
    CHECK_RC(swap_as(&tk, HAND_WAITER, (uint64_t) 0x33 << 32 | 0x400, 0, 0,
                     &tk2), SLOT_OK);
    CHECK(tk2.process == HAND_WPROC);
    CHECK_RC(look("h", &tk), SLOT_OK);
    CHECK(tk.process == HAND_WPROC);
    CHECK_RC(release(&tk), SLOT_OK);
    return lost;
}

/* The table before: "held" held by 1, "free" free, "gone" free, and the
 * slot of "d" DEAD. */
static void
crash_setup(int cas16, slot_ticket_t *held)
{
    slot_ticket_t  tk;

    table_new(16, cas16);
    CHECK_RC(acquire("held", 1, 0, 100, held), SLOT_OK);
    CHECK_RC(acquire("free", 1, 0, 100, &tk), SLOT_OK);
    CHECK_RC(release(&tk), SLOT_OK);
    CHECK_RC(acquire("d", 1, 0, 100, &tk), SLOT_OK);
    CHECK_RC(release(&tk), SLOT_OK);
    mutex_lock();
    CHECK(slot_reclaim_locked(&tab, 100, 1) == 2);     /* free and d */
    mutex_unlock();
    CHECK_RC(acquire("free", 1, 0, 100, &tk), SLOT_OK);
    CHECK_RC(release(&tk), SLOT_OK);
}

/* One update, in a child that may be killed before any of its writes;
 * the mutex is taken as the zone's callers take it. */
static void
crash_run(int sc, const slot_ticket_t *held)
{
    slot_ticket_t  tk, m;
    slot_mark_t    mark = { 0, 0, 77, 0x100, 1000, 1, 2, 0, 0 };
    slot_mark_t    mark2 = { 0, 0, 78, 0x100, 1000, 0, 2, 0, 0 };
    const char    *k = "new";

    if (sc == SC_FAST) {
        /* the fast paths take no mutex: "free" acquired by FAST_OWNER, of
         * another process (its hint written before the CAS), released */
        if (slot_acquire_fast(&tab, "free", 4, hash_bytes("free", 4),
                              FAST_OWNER, 0x200, 0, &tk) != SLOT_OK
            || slot_release_fast(&tab, &tk) != SLOT_OK)
        {
            _exit(2);
        }
        return;
    }
    if (sc == SC_HINT) {
        uint32_t  hash;

        /* the same through the slot an earlier ticket names (a look's,
         * which writes nothing) */
        if (look("free", &tk) != SLOT_OK
            || slot_acquire_hint(&tab, tk.index, "free", 4, FAST_OWNER,
                                 0x200, 0, &tk, &hash) != SLOT_OK
            || hash != hash_bytes("free", 4)
            || slot_release_fast(&tab, &tk) != SLOT_OK)
        {
            _exit(2);
        }
        return;
    }
    if (sc == SC_HANDOFF) {
        handoff_run();
        return;
    }
    mutex_lock();
    switch (sc) {
    case SC_SPILL:
        slot_acquire_locked(&tab, SLOT_KIND_LOCK, k, 3, hash_bytes(k, 3), 9,
                            0x100, 0, 100, &tk);
        break;
    case SC_UNSPILL:
        slot_release_locked(&tab, &spill_held);
        break;
    case SC_SPILL_MARK:
        slot_mark_locked(&tab, &spill_held, &mark, &m);
        slot_mark_locked(&tab, &m, &mark2, &m);
        break;
    case SC_SPILL_RECLAIM:
        slot_reclaim_locked(&tab, 200, 1);
        break;
    case SC_CREATE:
        slot_acquire_locked(&tab, SLOT_KIND_LOCK, k, 3, hash_bytes(k, 3), 9,
                            0x100, 0, 100, &tk);
        break;
    case SC_RECLAIM:
        slot_reclaim_locked(&tab, 100, 1);
        break;
    case SC_RELEASE:
        slot_release_locked(&tab, held);
        break;
    case SC_MARK:
        slot_mark_locked(&tab, held, &mark, &m);
        slot_mark_locked(&tab, &m, &mark2, &m);
        break;
    }
    mutex_unlock();
}

static void
test_crash(int cas16)
{
    slot_ticket_t  held, tk;
    int            sc, n, status, done, rc, lost;
    pid_t          pid;
    char           msg[256];

    /* (without a 16-byte CAS there is no fast path, hinted or not) */
    for (sc = 0; sc < (cas16 ? SC_COUNT : SC_FAST); sc++) {
        for (n = 1, done = 0, lost = 0; !done; n++) {
            CHECK(n < 100);
            if (sc >= SC_SPILL && sc <= SC_SPILL_RECLAIM) {
                spill_setup(cas16);
            } else {
                crash_setup(cas16, &held);
            }
            if (sc == SC_HANDOFF) {
                handoff_setup();
            }
            pid = fork();
            CHECK(pid >= 0);
            if (pid == 0) {
                crash_at(n);
                crash_run(sc, &held);
                _exit(0);
            }
            CHECK(waitpid(pid, &status, 0) == pid);
            done = WIFEXITED(status);
            CHECK((done && WEXITSTATUS(status) == 0)
                  || (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
            /* the dead child's mutex, taken over as shmtx would (the
             * fast paths die without it: nothing to recover; a handoff
             * takes it only without a 16-byte CAS, and dies holding it
             * or not) */
            if (sc == SC_FAST || sc == SC_HINT) {
                CHECK(shm->mutex == 0);
            } else if (!done && (sc != SC_HANDOFF
                                 || shm->mutex == (uint32_t) pid)) {
                CHECK(shm->mutex == (uint32_t) pid);
                shm->mutex = (uint32_t) getpid();
                slot_recover_locked(&tab);
                pool_recover();
                mutex_unlock();
            }
            if (slot_verify_locked(&tab, msg, sizeof(msg)) != 0) {
                fprintf(stderr, "crash %s before write %d: %s\n",
                        scenario_name[sc], n, msg);
                exit(1);
            }
            if (sc >= SC_SPILL && sc <= SC_SPILL_RECLAIM) {
                spill_check(sc, done);
                verify();
                continue;
            }
            /* "held" is 1's, or (released) free; "new" free or 9's */
            CHECK_RC(acquire("held", 5, 0, 100, &tk),
                     sc == SC_RELEASE && done ? SLOT_OK : SLOT_HELD);
            if (sc == SC_RELEASE && !done) {
                /* killed before or after its one CAS */
                CHECK(tk.state.owner == 1 || tk.state.owner == 5);
            }
            if (sc == SC_MARK) {
                slot_mark_t  got;

                /* marked: by a whole record (either), else not at all */
                CHECK_RC(look("held", &tk), SLOT_OK);
                if (tk.state.stamp & SLOT_MARKED) {
                    CHECK_RC(slot_mark_read(&tab, &tk, &got), SLOT_OK);
                    CHECK((got.owner == 77 && got.since == 1)
                          || (got.owner == 78 && got.since == 0));
                    CHECK(got.expiry == 1000 && got.until == 2);
                }
            }
            if (sc == SC_FAST || sc == SC_HINT) {
                /* free (killed before the acquire's CAS, or after the
                 * release's), or FAST_OWNER's, and then its process is
                 * known: the hint went in before the CAS */
                rc = acquire("free", 5, 0, 100, &tk);
                CHECK(done ? rc == SLOT_OK
                           : rc == SLOT_OK
                             || (rc == SLOT_HELD
                                 && tk.state.owner == FAST_OWNER
                                 && tk.process == 0x200));
            }
            if (sc == SC_HANDOFF) {
                lost += handoff_check(done);
            }
            if (sc == SC_CREATE) {
                int  made = look("new", &tk) == SLOT_OK
                            && tk.state.owner == 9;

                CHECK(!done || made);
                CHECK_RC(acquire("new", 5, 0, 100, &tk),
                         made ? SLOT_HELD : SLOT_OK);
            }
            verify();
        }
        /* the handoff's window: killed between its CAS and its hint */
        CHECK(sc != SC_HANDOFF || lost == 1);
        printf("  crash %-8s before each of %d writes: ok\n",
               scenario_name[sc], n - 2);
    }
}


int
main(int argc, char **argv)
{
    slot_ticket_t  tk;
    long           i, n;
    int            cas16, rounds = 200000;
    const char    *r = getenv("SLOT_TEST_ROUNDS");

    if (argc == 3 && strcmp(argv[1], "pairs") == 0) {
        n = atol(argv[2]);
        table_new(1024, -1);
        for (i = 0; i < n; i++) {
            if (slot_acquire(&tab, SLOT_KIND_LOCK, "lock:key", 8,
                             hash_bytes("lock:key", 8), 42, 0x100, 5000,
                             1000, &tk) == SLOT_SLOW)
            {
                CHECK_RC(acquire("lock:key", 42, 5000, 1000, &tk), SLOT_OK);
            }
            slot_release(&tab, &tk);
        }
        return 0;
    }
    if (r != NULL) {
        rounds = atoi(r);
    }
    for (cas16 = slot_cas16(); cas16 >= 0; cas16--) {
        printf("slot_test, %s:\n", cas16 ? "16-byte CAS" : "mutex fallback");
        test_semantics(cas16);
        printf("  semantics: ok\n");
        test_spill(cas16);
        printf("  spilled slots: ok\n");
        test_exact(cas16, rounds);
        printf("  4 processes x %d locked increments: exact\n", rounds);
        test_crash(cas16);
    }
    return 0;
}
