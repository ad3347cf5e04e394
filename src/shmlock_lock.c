/*
 * The lock (shmlock_lock_*, shmlock.h): the whole algorithm of a zone's
 * exclusive lock, written once here over the lock slots' calls
 * (shmlock_slot_*, shmlock_group_reclaim, the wait words), so that each
 * step a lock object takes is one call: an acquire, a look at a busy
 * key, a release with its handoff, an extend, a withdrawal, the wait.
 *
 * Owners.  A lock's owner word is the holder's pid << 32 with an owner id
 * of the acquisition, drawn here from the process's one counter
 * (shmlock_owner_ids, a block at a time per thread), so that no two
 * acquisitions of a process, whatever Lua VM or thread made them, share
 * one.  The slot's process hint (pid and start time) tells a dead holder
 * from a reused pid.
 *
 * Starvation mode (fairness).  A waiter that has waited LOCK_STARVE_AFTER
 * is starving: it marks the held lock (the slot's mark record names it,
 * with the time to live it asks for, when it began to wait and its
 * deadline; then MARKED is set in the state).  A release of a marked lock
 * fails, and the holder hands the lock over by a swap of the state to the
 * starver, so the key is never free in between and nobody barges in.
 * One mark at a time; an older starver (smaller since) replaces a younger
 * one's mark.  So once starving, a waiter gets the lock after at most one
 * handoff per older concurrent waiter, plus one release race to place its
 * mark:  worst wait <= STARVE_AFTER + (W + 1) * (H + L), W the concurrent
 * waiters, H the longest hold, L a woken waiter's latency.
 *
 * A mark changes the MARKED flag alone, keeping the serial: the holder's
 * ticket still names its lock (release and extend answer CHANGED), and
 * clearing the mark gives the holder's state back exactly.  A starver
 * whose deadline passes withdraws its mark unless the lock reached it;
 * from its deadline on the mark is stale anyway: a release clears it and
 * frees the key, a takeover ignores it, any starver replaces it.
 *
 * Expiry.  An expired lock is free: the next acquire takes it (a marked
 * one by a takeover, dropping the mark: its waiter marks again).  A holder
 * whose lock expired and was not taken still releases it, and is told so
 * (SHMLOCK_NOT_FOUND only once it was taken).
 *
 * Dead holders.  A look with SHMLOCK_LOOK_CHECK asks whether the holder's
 * process lives (shmlock_slot_alive); a dead one's lock is taken at once
 * (a swap from its state), or handed to a live starver marked on it.  A
 * release does not leave the key to a starver whose process is gone: it
 * asks after the handoff and releases the key again (lock_handed).
 * Shared holds keep a head in the key's slot whose pid is no process's:
 * their dead readers are dropped instead (shmlock_group_reclaim).
 *
 * A handoff writes the starver's process hint after its swap (slot.c: a
 * swap from a stale state must not overwrite the holder's).  A releaser
 * killed between the two leaves the hint unknown; the starver knows the
 * lock for its own by the owner word then (its pid and id: no other live
 * process has its pid), takes it, and writes its process again by a swap
 * to the same state.
 *
 * Waking.  A waiter counts itself on the key's wait word and reads it
 * before it looks (shmlock_wait_begin), so a release in between cuts its
 * sleep short; a release wakes one sleeper, a handoff wakes the marked
 * waiter on a word of its own (the hash salted: lock_marked_hash), not
 * the herd.  A waiter woken that leaves without the key passes the
 * wake-up on.  Every wait is bounded by LOCK_CHECK_EVERY_US between
 * looks, so a wake-up lost (a waker killed) costs at most that.
 *
 * Bounded loops: a swap that fails because the state moved is tried
 * again at most LOCK_RETRIES times; any other answer of the zone ends the
 * call with it.
 */

#include "shmlock.h"
#ifdef SHMLOCK_TESTING
#include "shmlock_testing.h"
#endif
#include "shard_lock.h"
#include "shm_watch.h"
#include "slot.h"
#include "sys.h"
#include "ticket.h"
#include "token.h"
#include "wait.h"
#include "zone.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define LOCK_CHECK_EVERY_US   100000
#define LOCK_STARVE_AFTER_US  2000
#define LOCK_RETRIES          32
#define LOCK_MIN_SLEEP        0.001
#define LOCK_SPIN_US          50      /* a marked waiter's spin, at most */
#define LOCK_FIRST_SPIN_US    5       /* a wait's spin before its first look */
#define LOCK_SPIN_PAUSES      32      /* pauses between two reads */
#define LOCK_MARKED_SALT      0x5bd1e995u
#define LOCK_NEVER            (((uint64_t) 1 << 40) - 1)
#define LOCK_HEAD_PID         0xffff0000u   /* a group head's (group.h) */

/* outcomes of a look, inside this file */
enum { LOCK_BUSY, LOCK_ACQUIRED };


/* ---- the clock, the sleeps, the slots' calls: the specs' seam ---- */

#ifdef SHMLOCK_TESTING

#define LOCK_TEST_WAITS  4096

static int      lock_test_mode;
static int64_t  lock_test_us;
static int64_t  lock_test_waits[3 * LOCK_TEST_WAITS];
static int      lock_test_nwaits;
static int      lock_test_fail[SHMLOCK_TEST_LOCK_CALLS];
static int64_t  lock_test_spin_us = -1;
static int64_t  lock_test_first_spin_us = -1;

void
shmlock_test_lock_spin(int64_t us)
{
    lock_test_spin_us = us;
}

void
shmlock_test_lock_first_spin(int64_t us)
{
    lock_test_first_spin_us = us;
}

void
shmlock_test_lock_clock(int mode, int64_t at_us)
{
    lock_test_mode = mode;
    lock_test_us = at_us;
    lock_test_nwaits = 0;
}

int64_t
shmlock_test_lock_now(void)
{
    return lock_test_us;
}

int
shmlock_test_lock_waits(int64_t *out, int max)
{
    int  n = lock_test_nwaits < max ? lock_test_nwaits : max;

    memcpy(out, lock_test_waits, sizeof(int64_t) * 3 * (size_t) n);
    lock_test_nwaits = 0;
    return n;
}

void
shmlock_test_lock_fail(int call, int rc)
{
    if (call >= 0 && call < SHMLOCK_TEST_LOCK_CALLS) {
        lock_test_fail[call] = rc;
    }
}

static void
lock_test_record(int64_t from, int64_t to, int woken)
{
    if (lock_test_nwaits < LOCK_TEST_WAITS) {
        lock_test_waits[3 * lock_test_nwaits] = from;
        lock_test_waits[3 * lock_test_nwaits + 1] = to;
        lock_test_waits[3 * lock_test_nwaits + 2] = woken;
        lock_test_nwaits++;
    }
}

/* a slot call, or the failure a spec asked for */
#define LOCK_CALL(c, call) \
    (lock_test_fail[SHMLOCK_TEST_LOCK_##c] != 0 \
     ? lock_test_fail[SHMLOCK_TEST_LOCK_##c] : (call))
/* a fast path that makes the call itself: not while it is to fail */
#define LOCK_FAST(c)  (lock_test_fail[SHMLOCK_TEST_LOCK_##c] == 0)
/* a spin's length: us, or the spec's (shmlock_test_lock_*spin, >= 0) */
#define LOCK_SPIN_LEN(test_us, us)  ((test_us) >= 0 ? (test_us) : (us))

static int64_t
lock_now_us(void)
{
    return lock_test_mode == 1 ? lock_test_us : shmlock_now_us();
}

static int
lock_sleep(shmlock_zone_t *zone, uint32_t on, uint32_t seq, int64_t us)
{
    int64_t  from;
    int      rc;

    if (lock_test_mode == 1) {
        shmlock_wait_end(zone, on, seq, 0);
        lock_test_record(lock_test_us, lock_test_us + us, 0);
        lock_test_us += us;
        return SHMLOCK_TIMEOUT;
    }
    from = shmlock_now_us();
    rc = shmlock_wait_end(zone, on, seq, us);
    if (lock_test_mode == 2) {
        lock_test_record(from, shmlock_now_us(), rc != SHMLOCK_TIMEOUT);
    }
    return rc;
}

#else

#define LOCK_CALL(c, call)  (call)
#define LOCK_FAST(c)        1
#define LOCK_SPIN_LEN(test_us, us)  (us)

static inline int64_t
lock_now_us(void)
{
    return shmlock_now_us();
}

static inline int
lock_sleep(shmlock_zone_t *zone, uint32_t on, uint32_t seq, int64_t us)
{
    return shmlock_wait_end(zone, on, seq, us);
}

#endif

static inline int64_t
lock_now_ms(void)
{
    return lock_now_us() / 1000;
}

static inline int
lock_swap(shmlock_zone_t *zone, const shmlock_ticket_t *seen, uint64_t owner,
    uint64_t process, unsigned marked, int64_t exptime_ms, int64_t now_ms,
    shmlock_ticket_t *t)
{
    return LOCK_CALL(SWAP, shmlock_slot_swap(zone, seen, owner, process,
                                             marked, exptime_ms, now_ms, t));
}

static inline int
lock_slot_release(shmlock_lock_t *l)
{
    return LOCK_CALL(RELEASE, shmlock_slot_release(l->zone, &l->tk));
}

static inline int
lock_slot_extend(shmlock_lock_t *l, int64_t exptime_ms)
{
    return LOCK_CALL(EXTEND, shmlock_slot_extend(l->zone, &l->tk, exptime_ms,
                                                 0));
}

static inline int
lock_slot_mark(shmlock_lock_t *l, const shmlock_ticket_t *seen,
    const shmlock_mark_t *m, shmlock_ticket_t *t)
{
    return LOCK_CALL(MARK, shmlock_slot_mark(l->zone, seen, m, t));
}


/* ---- this process: its pid, start time, owner ids ---- */

/* the low 32 bits of this process's start time, as a slot's hint keeps */
static inline uint32_t
lock_self_start32(void)
{
    return (uint32_t) (sys_self() >> 32);
}

static inline uint64_t
lock_owner(const shmlock_lock_t *l)
{
    return (uint64_t) (uint32_t) l->pid << 32 | l->id;
}


/* ---- tickets ---- */

static inline uint32_t
lock_pid_of(uint64_t owner)
{
    return (uint32_t) (owner >> 32);
}

static inline int64_t
lock_expiry(const shmlock_ticket_t *t)
{
    return (int64_t) (t->stamp >> SHMLOCK_SLOT_EXPIRY_SHIFT);
}

static inline int
lock_is_marked(const shmlock_ticket_t *t)
{
    return (t->stamp & SHMLOCK_SLOT_MARKED) != 0;
}

static inline void
lock_copy(shmlock_ticket_t *dst, const shmlock_ticket_t *src, int marked)
{
    *dst = *src;
    if (marked) {
        dst->stamp |= SHMLOCK_SLOT_MARKED;
    } else {
        dst->stamp &= ~(uint64_t) SHMLOCK_SLOT_MARKED;
    }
}

static inline uint32_t
lock_marked_hash(uint32_t hash)
{
    return hash ^ LOCK_MARKED_SALT;
}

/* handoff: the lock went to the marked waiter, on its own word; else one
 * sleeper of the key */
static void
lock_wake(shmlock_zone_t *zone, uint32_t hash, int handoff)
{
    if (handoff) {
        shmlock_wake_waiters(zone, lock_marked_hash(hash), 1);
    } else {
        shmlock_wake_waiters(zone, hash, 0);
    }
}


/* ---- owners of this process that may be gone (SHMLOCK_ASK) ---- */

/* 1: owner (pid, id) is a gone waiter of this process; 0: not; -1: the
 * caller must say (l->ask) */
static int
lock_gone(shmlock_lock_t *l, uint64_t owner, int flags)
{
    uint32_t  id = (uint32_t) owner;

    if (!(flags & SHMLOCK_LOOK_ASK) || id == 0
        || lock_pid_of(owner) != (uint32_t) (int) sys_pid())
    {
        return 0;
    }
    if (id == l->gone[0] || id == l->gone[1]) {
        return 1;
    }
    if (id == l->alive[0] || id == l->alive[1]) {
        return 0;
    }
    l->ask = id;
    return -1;
}

/* Whether the lock may go to the starver of mark m: still waiting, not a
 * gone waiter of ours, and (alive) its process alive.  -1: ask. */
static int
lock_starver_ok(shmlock_lock_t *l, const shmlock_mark_t *m, int64_t now,
    int flags, int alive)
{
    shmlock_ticket_t  probe;
    int               g;

    if (m->until_ms <= now) {
        return 0;
    }
    g = lock_gone(l, m->owner, flags);
    if (g != 0) {
        return g < 0 ? -1 : 0;
    }
    if (!alive) {
        return 1;
    }
    memset(&probe, 0, sizeof(probe));
    probe.owner = m->owner;
    probe.process = m->process;
    return shmlock_slot_alive(&probe) != 0;
}

/* whether seen (a look's) holds a lock of l's: our owner, and the slot's
 * hint our process by its start time, or unknown (a handoff not yet
 * written, or whose releaser died: our pid and id are ours alone) */
static int
lock_ours_in(const shmlock_lock_t *l, const shmlock_ticket_t *seen)
{
    uint32_t  start;

    if (seen->owner != lock_owner(l) || l->id == 0) {
        return 0;
    }
    start = (uint32_t) (seen->process >> 32);
    return start == 0 || start == lock_self_start32();
}

/* seen is ours: l->tk becomes its ticket; an unknown hint is written
 * again by a swap to the same state (our process goes in) */
static void
lock_take_seen(shmlock_lock_t *l, const shmlock_ticket_t *seen)
{
    shmlock_ticket_t  moved;

    if ((uint32_t) (seen->process >> 32) == 0
        && lock_swap(l->zone, seen, seen->owner, 0,
                     lock_is_marked(seen) ? SHMLOCK_SLOT_MARKED : 0,
                     SHMLOCK_KEEP_TTL, 0, &moved) == SHMLOCK_OK)
    {
        lock_copy(&l->tk, &moved, 0);
    } else {
        lock_copy(&l->tk, seen, 0);
    }
}


/* ---- acquire, look ---- */

/* shmlock_lock_acquire but for its fast path: the hinted acquire of the
 * ABI (the key's own slot, the mutex), or a zone found dead after the
 * CAS: the key given back, the dead status */
static __attribute__((noinline)) int
lock_acquire_slow(shmlock_lock_t *l, const char *key, size_t key_len,
    int64_t exptime_ms, int64_t now_ms, int taken)
{
    int  rc;

    l->marked = 0;
    l->held = 0;
    if (taken) {
        shmlock_slot_release(l->zone, &l->tk);
        return shm_watch_dead_status(l->zone);
    }
    rc = shmlock_slot_acquire_hint(l->zone, key, key_len, l->id, exptime_ms,
                                   now_ms, &l->tk);
    l->held = rc == SHMLOCK_OK;
    return rc;
}

/* The floor slot l's ticket names in zone, decoded and checked (its
 * shard, its index within the floor, a table with the 16-byte CAS), and
 * kept in the record's cache (lock_slot_cached); NULL when there is none (a
 * spilled slot's ticket: ticket_hint).  Any ticket value is safe: the
 * slot is one of the zone's, and the caller compares its state and key.
 * Out of line: the fast paths find the cache's. */
static __attribute__((noinline)) slot_t *
lock_slot_find(shmlock_lock_t *l, shmlock_zone_t *zone)
{
    uint32_t  shard = ticket_shard(&l->tk), i = ticket_hint(&l->tk);
    slots_t  *t;

    if (shard >= zone->nshards) {
        return NULL;
    }
    t = &zone->shard[shard].slots;
    if (i > t->mask || !t->cas16) {
        return NULL;
    }
    l->slot_zone = zone->serial;
    l->slot_tk = l->tk.slot;
    l->slot_at = &t->slots[i];
    return &t->slots[i];
}

/* Whether the record's cache holds the floor slot l's ticket names in
 * zone, for the fast paths: found there for this very ticket word in this
 * very zone object (its serial: unique in the process, so a zone closed
 * and another opened at its address is never taken for it); else
 * lock_slot_find.  (A test and two branches rather than a function
 * answering the slot: the cached slot is never NULL, and the callers then
 * test only lock_slot_find's answer.) */
static inline int
lock_slot_cached(const shmlock_lock_t *l, const shmlock_zone_t *zone)
{
    return __builtin_expect(l->slot_zone == zone->serial
                            && l->slot_tk == l->tk.slot, 1);
}

/* shmlock_lock_acquire when the process word or this thread's owner ids
 * must be fetched first (a call each): then the call again, which finds
 * them (now_ms: the reading it made) */
static __attribute__((noinline)) int
lock_acquire_ids(shmlock_lock_t *l, const char *key, size_t key_len,
    int64_t exptime_ms, int64_t now_ms)
{
    uint32_t  pid = sys_pid();

    if (!token_id_ready(pid)) {
        token_id_block(pid);
    }
    return shmlock_lock_acquire(l, key, key_len, exptime_ms, now_ms);
}

/*
 * The uncontended case inline, as shmlock_slot_acquire_hint's (one clock
 * reading for the expiry and the watch's gate; the hint's slot, free; one
 * CAS; the dead word after it), with the owner id drawn here; anything
 * else out of line, by tail calls (the watch's check, when due, is the
 * slow path's: it reads the same clock).
 */
int
shmlock_lock_acquire(shmlock_lock_t *l, const char *key, size_t key_len,
    int64_t exptime_ms, int64_t now_ms)
{
    shmlock_zone_t  *zone;
    slot_ticket_t    tk;
    slot_t          *s;
    uint64_t         self;
    uint32_t         id, hash;

    if (now_ms <= 0) {
        now_ms = sys_now_ms();
    }
    self = sys_self_word();
    if (__builtin_expect(self == 0 || !token_id_ready((uint32_t) self), 0)) {
        return lock_acquire_ids(l, key, key_len, exptime_ms, now_ms);
    }
    /* (marked is the last look's, waited a wait's: set there) */
    id = token_id.at++;
    l->pid = (int32_t) (uint32_t) self;
    l->id = id;
    zone = l->zone;
    if (__builtin_expect(
            now_ms < __atomic_load_n(&zone->watch_at, __ATOMIC_RELAXED), 1)
        && __builtin_expect(key_len - 1 < SLOT_KEY_INLINE, 1)
        && __builtin_expect(exptime_ms >= 0, 1))
    {
        if (lock_slot_cached(l, zone)) {
            s = (slot_t *) l->slot_at;
        } else if ((s = lock_slot_find(l, zone)) == NULL) {
            goto slow;
        }
        if (__builtin_expect(
                   slot_acquire_at(s, ticket_hint(&l->tk), key, key_len,
                                   (uint64_t) (uint32_t) self << 32 | id,
                                   self,
                                   exptime_ms == 0 ? 0
                                                   : now_ms + exptime_ms,
                                   &tk, &hash) == SLOT_OK, 1))
        {
            l->tk.hash = hash;
            l->tk.owner = tk.state.owner;
            l->tk.stamp = tk.state.stamp;
            l->tk.process = tk.process;
            if (__builtin_expect(
                    __atomic_load_n(&zone->hdr->dead, __ATOMIC_SEQ_CST) == 0,
                    1))
            {
                l->held = 1;
                return SHMLOCK_OK;
            }
            return lock_acquire_slow(l, key, key_len, exptime_ms, now_ms, 1);
        }
    }
slow:
    return lock_acquire_slow(l, key, key_len, exptime_ms, now_ms, 0);
}

int
shmlock_lock_retry(shmlock_lock_t *l, const char *key, size_t key_len,
    int64_t exptime_ms, int64_t now_ms)
{
    int  rc = shmlock_slot_acquire(l->zone, key, key_len, l->id, exptime_ms,
                                   now_ms, &l->tk);

    if (rc == SHMLOCK_OK) {
        l->held = 1;
    }
    return rc;
}

/* the key free, or freed since: one more try, the same owner */
static int
lock_again(shmlock_lock_t *l, const char *key, size_t key_len,
    int64_t exptime_ms, int *outcome)
{
    int  rc = shmlock_slot_acquire(l->zone, key, key_len, l->id, exptime_ms,
                                   0, &l->tk);

    if (rc == SHMLOCK_OK) {
        *outcome = LOCK_ACQUIRED;
    } else if (rc == SHMLOCK_EXISTS) {
        *outcome = LOCK_BUSY;
        rc = SHMLOCK_OK;
    }
    return rc;
}

/* The lock in seen is ours to take (its holder dead, or expired with a
 * mark): taken, or given to the live starver of mark m (has_mark). */
static int
lock_take_over(shmlock_lock_t *l, const shmlock_ticket_t *seen,
    const shmlock_look_t *how, const shmlock_mark_t *m, int has_mark,
    int dead, int *outcome)
{
    shmlock_ticket_t  moved;
    int               to_starver = 0, rc, g;

    if (has_mark && m->owner != lock_owner(l)) {
        to_starver = lock_starver_ok(l, m, lock_now_ms(), how->flags, 1);
        if (to_starver < 0) {
            return SHMLOCK_ASK;
        }
    }
    if (to_starver) {
        rc = lock_swap(l->zone, seen, m->owner, m->process, 0,
                       m->exptime_ms, 0, &moved);
    } else {
        rc = lock_swap(l->zone, seen, lock_owner(l), 0, 0,
                       how->exptime_ms, 0, &l->tk);
    }
    if (rc != SHMLOCK_OK) {
        *outcome = LOCK_BUSY;
        return rc == SHMLOCK_CHANGED ? SHMLOCK_OK : rc;
    }
    lock_wake(l->zone, seen->hash, to_starver);
    if (dead) {
        g = lock_gone(l, seen->owner, how->flags);
        l->dead = lock_pid_of(seen->owner);
        l->dead_to = (to_starver ? 1 : 0) | (g > 0 ? 2 : 0);
    }
    *outcome = to_starver ? LOCK_BUSY : LOCK_ACQUIRED;
    return SHMLOCK_OK;
}

/* our mark on seen: placed (replacing another) */
static void
lock_place_mark(shmlock_lock_t *l, const shmlock_ticket_t *seen,
    const shmlock_look_t *how)
{
    shmlock_mark_t    m;
    shmlock_ticket_t  moved;

    m.owner = lock_owner(l);
    m.process = 0;
    m.exptime_ms = how->ask_ms > 0 ? how->ask_ms : how->exptime_ms;
    m.since_ms = how->since_ms;
    m.until_ms = how->till_ms;
    if (lock_slot_mark(l, seen, &m, &moved) == SHMLOCK_OK) {
        l->marked = 1;
    }
}

/* How a waiter outside nginx checks the holder (shmlock_lock_wait): */
enum {
    LOCK_CHECK_FULL,    /* as SHMLOCK_LOOK_CHECK says (a look of the ABI) */
    LOCK_CHECK_PID,     /* by the pid alone (a wait's first look) */
    LOCK_CHECK_SAME     /* in full, if the key kept the holder seen last */
};

/* whether seen's holder process runs, by its pid alone (a pidfd: a
 * zombie is dead, a younger process reusing the pid passes): no /proc
 * read */
static int
lock_pid_runs(const shmlock_ticket_t *seen)
{
    uint32_t  pid = lock_pid_of(seen->owner);

    if (pid == (uint32_t) (int) sys_pid() || pid >= LOCK_HEAD_PID) {
        return shmlock_slot_alive(seen);    /* no /proc read either */
    }
    return sys_proc_running(pid);
}

/* one look (see shmlock_lock_look); *outcome LOCK_ACQUIRED or LOCK_BUSY
 * when it answers SHMLOCK_OK.  *holder: the owner word seen (0: none).
 * mode (LOCK_CHECK_*): how SHMLOCK_LOOK_CHECK checks the holder; same:
 * LOCK_CHECK_SAME's holder. */
static int
lock_look(shmlock_lock_t *l, const char *key, size_t key_len,
    const shmlock_look_t *how, int mode, uint64_t same, uint64_t *holder,
    int *outcome)
{
    shmlock_ticket_t  seen;
    shmlock_mark_t    m;
    uint32_t          count;
    int64_t           now;
    int               rc, marked, has_mark, check, g, replace;

    check = (how->flags & SHMLOCK_LOOK_CHECK) != 0;
    l->marked = 0;
    *outcome = LOCK_BUSY;
    *holder = 0;
    rc = shmlock_slot_look(l->zone, key, key_len, &seen);
    if (rc == SHMLOCK_OK) {
        *holder = seen.owner;
        if (mode == LOCK_CHECK_SAME && seen.owner != same
            && lock_pid_of(seen.owner) < LOCK_HEAD_PID)
        {
            check = 0;
        }
    }
    if (rc == SHMLOCK_NOT_FOUND) {
        return lock_again(l, key, key_len, how->exptime_ms, outcome);
    }
    if (rc != SHMLOCK_OK) {
        return rc;
    }
    if (seen.owner == 0) {
        return lock_again(l, key, key_len, how->exptime_ms, outcome);
    }
    if (check && lock_pid_of(seen.owner) >= LOCK_HEAD_PID) {
        /* shared holds: their head is no process; dead readers dropped
         * (the last hands the key to our mark, or frees it), then again */
        rc = shmlock_group_reclaim(l->zone, SHMLOCK_SHARED, key, key_len,
                                   &count);
        if (rc != SHMLOCK_OK) {
            return rc;
        }
        rc = shmlock_slot_look(l->zone, key, key_len, &seen);
        if (rc == SHMLOCK_NOT_FOUND || (rc == SHMLOCK_OK && seen.owner == 0))
        {
            return lock_again(l, key, key_len, how->exptime_ms, outcome);
        }
        if (rc != SHMLOCK_OK) {
            return rc;
        }
        check = 0;
    }
    if (lock_ours_in(l, &seen)) {
        /* handed to us (and maybe marked by the next starver already) */
        lock_take_seen(l, &seen);
        *outcome = LOCK_ACQUIRED;
        return SHMLOCK_OK;
    }
    marked = lock_is_marked(&seen);
    now = lock_now_ms();
    if (lock_expiry(&seen) <= now) {
        /* expired: free; a mark on it is dropped (its waiter marks
         * again) */
        if (marked) {
            return lock_take_over(l, &seen, how, &m, 0, 0, outcome);
        }
        return lock_again(l, key, key_len, how->exptime_ms, outcome);
    }
    has_mark = marked
               && shmlock_slot_read_mark(l->zone, &seen, &m) == SHMLOCK_OK;
    g = lock_gone(l, seen.owner, how->flags);
    if (g < 0) {
        return SHMLOCK_ASK;
    }
    if (g || (check && (mode == LOCK_CHECK_PID ? lock_pid_runs(&seen)
                                               : shmlock_slot_alive(&seen))
                       == 0))
    {
        return lock_take_over(l, &seen, how, &m, has_mark, 1, outcome);
    }
    if (has_mark && m.owner == lock_owner(l)) {
        l->marked = 1;
        return SHMLOCK_OK;
    }
    if (how->since_ms == 0 || (marked && !has_mark)) {
        return SHMLOCK_OK;      /* not starving; or a mark being written */
    }
    replace = !has_mark || m.since_ms > how->since_ms || m.until_ms <= now;
    if (!replace) {
        g = lock_gone(l, m.owner, how->flags);
        if (g < 0) {
            return SHMLOCK_ASK;
        }
        replace = g > 0;
    }
    if (!replace && check) {
        shmlock_ticket_t  probe;

        memset(&probe, 0, sizeof(probe));
        probe.owner = m.owner;
        probe.process = m.process;
        replace = shmlock_slot_alive(&probe) == 0;
    }
    if (replace) {
        lock_place_mark(l, &seen, how);
    }
    return SHMLOCK_OK;
}

int
shmlock_lock_look(shmlock_lock_t *l, const char *key, size_t key_len,
    const shmlock_look_t *how)
{
    uint64_t  holder;
    int       outcome, rc;

    rc = lock_look(l, key, key_len, how, LOCK_CHECK_FULL, 0, &holder,
                   &outcome);
    if (rc != SHMLOCK_OK) {
        return rc;
    }
    if (outcome == LOCK_ACQUIRED) {
        l->held = 1;
        return SHMLOCK_OK;
    }
    return SHMLOCK_EXISTS;
}


/* ---- release, extend, withdraw ---- */

static int lock_release(shmlock_lock_t *l, int flags);

/* shmlock_lock_release but for its fast path (a marked lock, a ticket of
 * a spilled slot, a zone to look at, no 16-byte CAS...) */
static __attribute__((noinline)) int
lock_release_slow(shmlock_lock_t *l, int flags)
{
    int  rc = lock_release(l, flags);

    if (rc == SHMLOCK_OK || rc == SHMLOCK_NOT_FOUND) {
        l->held = 0;
    }
    return rc;
}

/* a fast release that found sleepers on the key's word, or the zone dead
 * after its CAS: out of line (a call), so that the fast path is a leaf */
static __attribute__((noinline)) int
lock_released(shmlock_lock_t *l)
{
    int  rc = shm_watch_after(l->zone, SHMLOCK_OK);

    wait_wake(l->zone, l->tk.hash, 0);
    if (rc == SHMLOCK_OK) {
        l->held = 0;
    }
    return rc;
}

/* The release of a ticket whose state is still the slot's, inline as
 * shmlock_slot_release's: the watch's gate (the coarse clock; its check,
 * when due, the slow path's), one CAS, the dead word after it, the
 * waiters' word (one load when none waits). */
int
shmlock_lock_release(shmlock_lock_t *l, int flags)
{
    /* (flags: the slow path's only; kept in the frame rather than in a
     * register saved around the clock's call, 2 instructions a release) */
    volatile int     slow_flags = flags;
    int64_t          now_ms = sys_coarse_ms();
    shmlock_zone_t  *zone = l->zone;
    slot_t          *s;
    slot_state_t     st;

    if (__builtin_expect(
            now_ms < __atomic_load_n(&zone->watch_at, __ATOMIC_RELAXED), 1)
        && __builtin_expect((l->tk.stamp & (SLOT_LIVE | SLOT_DEAD))
                            == SLOT_LIVE, 1)
        && LOCK_FAST(RELEASE))
    {
        if (lock_slot_cached(l, zone)) {
            s = (slot_t *) l->slot_at;
        } else if ((s = lock_slot_find(l, zone)) == NULL) {
            goto slow;
        }
        st.owner = l->tk.owner;
        st.stamp = l->tk.stamp;
        if (__builtin_expect(slot_release_at(s, st), 1)) {
            if (__builtin_expect(
                    __atomic_load_n(&zone->hdr->dead, __ATOMIC_SEQ_CST) != 0
                    || wait_sleeping(zone, l->tk.hash), 0))
            {
                return lock_released(l);
            }
            l->held = 0;
            return SHMLOCK_OK;
        }
    }
slow:
    return lock_release_slow(l, slow_flags);
}

/*
 * After a handoff (moved: the state handed over), whether the starver's
 * process exists: asked once the key is the starver's, by one kill(pid,
 * 0).  The full check (a /proc read, ~10 us on a VM) before the swap held
 * the key from everybody, the marked waiter spinning for it included,
 * while both CPUs were busy (bench 9: 32 processes on one key, 1.25x
 * flock's rate, 1.3-1.4x without it).  A gone starver's key is released
 * from that state, waking a sleeper of the key, before unlock() returns,
 * as it was freed when asked first.  A starver that is a zombie, or whose
 * pid a younger process took, keeps it as a holder that died holding it
 * does: the waiters' check of the holder (a zombie at a wait's first
 * look, the start time after each timed-out sleep step) takes it over.
 * So does a state that moved meanwhile (marked by the next starver).
 */
static void
lock_handed(shmlock_zone_t *zone, const shmlock_mark_t *m,
    const shmlock_ticket_t *moved)
{
    uint32_t  pid = lock_pid_of(m->owner);

    if (pid != (uint32_t) (int) sys_pid() && !sys_proc_exists(pid)) {
        (void) shmlock_slot_release(zone, moved);
    }
}

static int
lock_release(shmlock_lock_t *l, int flags)
{
    shmlock_ticket_t  seen, moved;
    shmlock_mark_t    m;
    int               n, rc, ok;

    for (n = 0; n < LOCK_RETRIES; n++) {
        rc = lock_slot_release(l);
        if (rc != SHMLOCK_CHANGED) {
            return rc;
        }
        /* marked: our state with the flag */
        lock_copy(&seen, &l->tk, 1);
        rc = shmlock_slot_read_mark(l->zone, &seen, &m);
        if (rc == SHMLOCK_OK) {
            /* the starver's process asked after the handoff: see
             * lock_handed */
            ok = lock_starver_ok(l, &m, lock_now_ms(), flags, 0);
            if (ok < 0) {
                return SHMLOCK_ASK;
            }
            if (ok) {
                rc = lock_swap(l->zone, &seen, m.owner, m.process, 0,
                               m.exptime_ms, 0, &moved);
                if (rc == SHMLOCK_OK) {
                    lock_wake(l->zone, seen.hash, 1);
                    lock_handed(l->zone, &m, &moved);
                    return SHMLOCK_OK;
                }
            } else {
                /* a stale mark: cleared, which gives our state back */
                rc = lock_swap(l->zone, &seen, seen.owner, 0, 0,
                               SHMLOCK_KEEP_TTL, 0, &moved);
            }
        }
        if (rc != SHMLOCK_OK && rc != SHMLOCK_CHANGED) {
            return rc;
        }
        /* the mark moved meanwhile (or we cleared it): again */
    }
    return SHMLOCK_CHANGED;
}

static int lock_extend(shmlock_lock_t *l, int64_t exptime_ms);

int
shmlock_lock_extend(shmlock_lock_t *l, int64_t exptime_ms)
{
    int  rc = lock_extend(l, exptime_ms);

    if (rc == SHMLOCK_NOT_FOUND) {
        l->held = 0;
    }
    return rc;
}

static int
lock_extend(shmlock_lock_t *l, int64_t exptime_ms)
{
    shmlock_ticket_t  seen, moved;
    int               n, rc;

    for (n = 0; n < LOCK_RETRIES; n++) {
        rc = lock_slot_extend(l, exptime_ms);
        if (rc != SHMLOCK_CHANGED) {
            return rc;
        }
        /* marked: the marked state gets the expiry, keeping the mark */
        lock_copy(&seen, &l->tk, 1);
        rc = lock_swap(l->zone, &seen, seen.owner, 0,
                       SHMLOCK_SLOT_MARKED, exptime_ms, 0, &moved);
        if (rc == SHMLOCK_OK) {
            lock_copy(&l->tk, &moved, 0);
        }
        if (rc != SHMLOCK_CHANGED) {
            return rc;
        }
    }
    return SHMLOCK_CHANGED;
}

int
shmlock_lock_withdraw(shmlock_lock_t *l, const char *key, size_t key_len)
{
    shmlock_ticket_t  seen, moved;
    shmlock_mark_t    m;
    int               n, rc;

    for (n = 0; n < LOCK_RETRIES; n++) {
        if (shmlock_slot_look(l->zone, key, key_len, &seen) != SHMLOCK_OK) {
            return SHMLOCK_EXISTS;
        }
        if (lock_ours_in(l, &seen)) {
            lock_take_seen(l, &seen);
            l->held = 1;
            return SHMLOCK_OK;
        }
        if (!lock_is_marked(&seen)) {
            return SHMLOCK_EXISTS;
        }
        rc = shmlock_slot_read_mark(l->zone, &seen, &m);
        if (rc == SHMLOCK_OK) {
            if (m.owner != lock_owner(l)) {
                return SHMLOCK_EXISTS;
            }
            rc = lock_swap(l->zone, &seen, seen.owner, 0, 0,
                           SHMLOCK_KEEP_TTL, 0, &moved);
        }
        if (rc != SHMLOCK_CHANGED) {
            return SHMLOCK_EXISTS;
        }
    }
    return SHMLOCK_EXISTS;
}

int
shmlock_lock_holds(shmlock_lock_t *l, const char *key, size_t key_len)
{
    shmlock_ticket_t  seen;

    if (shmlock_slot_look(l->zone, key, key_len, &seen) != SHMLOCK_OK) {
        return 0;
    }
    return lock_ours_in(l, &seen) && lock_expiry(&seen) > lock_now_ms();
}

/* whether one of key's live shared holds is this process's */
static int
lock_shared_here(shmlock_zone_t *zone, const char *key, size_t key_len)
{
    shmlock_ticket_t   batch[64], *out = batch;
    uint32_t           me = (uint32_t) (int) sys_pid();
    int                max = 64, count, i, rc, here = 0;

    for ( ;; ) {
        rc = shmlock_group_holders(zone, SHMLOCK_SHARED, key, key_len, out,
                                   max, &count);
        if (rc != SHMLOCK_AGAIN || max >= SHMLOCK_GROUP_MAX) {
            break;
        }
        /* more holders than room: again, with room for them all */
        if (out != batch) {
            free(out);
        }
        max = count + 16 < SHMLOCK_GROUP_MAX ? count + 16 : SHMLOCK_GROUP_MAX;
        out = malloc(sizeof(*out) * (size_t) max);
        if (out == NULL) {
            return 0;
        }
    }
    for (i = 0; rc == SHMLOCK_OK && i < count && !here; i++) {
        here = lock_pid_of(out[i].owner) == me;
    }
    if (out != batch) {
        free(out);
    }
    return here;
}

int
shmlock_lock_owned(shmlock_lock_t *l)
{
    shmlock_ticket_t  seen;
    slot_state_t      st;
    uint64_t          process;
    uint32_t          shard = ticket_shard(&l->tk), i = ticket_index(&l->tk);
    shard_t          *sh;
    int               rc;

    if (shard >= l->zone->nshards || l->id == 0) {
        return 0;
    }
    sh = &l->zone->shard[shard];
    if ((i & SLOT_SPILL) || !sh->slots.cas16) {
        shard_lock(sh);
        rc = slot_state_at(&sh->slots, i, &st, &process);
        shard_unlock(sh, SHMLOCK_OK);
    } else {
        rc = slot_state_at(&sh->slots, i, &st, &process);
    }
    if (rc != 0) {
        return 0;
    }
    seen.owner = st.owner;
    seen.stamp = st.stamp;
    seen.process = process;
    return lock_ours_in(l, &seen) && lock_expiry(&seen) > lock_now_ms();
}

int
shmlock_lock_here(shmlock_zone_t *zone, const char *key, size_t key_len,
    int shared)
{
    shmlock_ticket_t  seen;

    if (shmlock_slot_look(zone, key, key_len, &seen) != SHMLOCK_OK) {
        return 0;
    }
    if (lock_pid_of(seen.owner) >= LOCK_HEAD_PID) {
        if (shared && !lock_is_marked(&seen)) {
            return 0;
        }
        return lock_shared_here(zone, key, key_len);
    }
    return lock_pid_of(seen.owner) == (uint32_t) (int) sys_pid()
           && (uint32_t) seen.owner != 0
           && lock_expiry(&seen) > lock_now_ms();
}


/* ---- the wait outside nginx ---- */

/* resty.lock's next step: step * ratio, at most max_step, at least
 * LOCK_MIN_SLEEP */
static double
lock_next_step(double step, double ratio, double max_step)
{
    double  s = step * ratio;

    if (s > max_step) {
        s = max_step;
    }
    return s < LOCK_MIN_SLEEP ? LOCK_MIN_SLEEP : s;
}

/* the wait's end without the key: its wake-up passed on if it took one
 * (check 0: the last sleep was cut by a wake-up on the key's word) */
static void
lock_wait_leave(shmlock_zone_t *zone, uint32_t on, uint32_t hash,
    uint32_t seq, int check)
{
    shmlock_wait_end(zone, on, seq, 0);
    if (!check && on == hash) {
        shmlock_wake_waiters(zone, hash, 0);
    }
}

/*
 * Spins while key's state stays the one a first read finds, held, for up
 * to us (on the real clock, and not past the deadline), reading the slot
 * between pauses; no write.  Only with another CPU to run the holder.
 * 1: the state moved (look again); 0: it did not, or nothing to wait for.
 */
static int
lock_spin(shmlock_lock_t *l, const char *key, size_t key_len, int64_t us,
    int64_t deadline)
{
    shmlock_ticket_t  first, seen;
    int64_t           until;
    int               i;

#ifdef SHMLOCK_TESTING
    if (lock_test_mode == 1) {
        return 0;               /* the specs' clock: it moves by sleeps */
    }
#endif
    if (sys_ncpu() < 2
        || shmlock_slot_look(l->zone, key, key_len, &first) != SHMLOCK_OK
        || first.owner == 0)
    {
        return 0;
    }
    until = shmlock_now_us() + us;
    if (until > deadline) {
        until = deadline;
    }
    do {
        for (i = 0; i < LOCK_SPIN_PAUSES; i++) {
            sys_cpu_pause();
        }
        if (shmlock_slot_look(l->zone, key, key_len, &seen) != SHMLOCK_OK
            || seen.owner != first.owner || seen.stamp != first.stamp)
        {
            return 1;
        }
    } while (shmlock_now_us() < until);
    return 0;
}

/*
 * The marked waiter, next to have the key (the release hands it over),
 * spins a moment before it sleeps: a handoff to a sleeper leaves the key
 * to nobody for the time the kernel takes to run it (section 3 of the
 * bench: 13-33 us), which under sustained contention is the lock's cycle
 * time beside the hold (bench 9 on 2 CPUs: 24 k/s sleeping, 30-31 k/s
 * spinning, fewer CPU us per acquisition).  One mark at a time: at most
 * one such spinner per key.  1: the key's state moved (look again).
 */
static int
lock_spin_marked(shmlock_lock_t *l, const char *key, size_t key_len,
    int64_t deadline)
{
    return lock_spin(l, key, key_len,
                     LOCK_SPIN_LEN(lock_test_spin_us, LOCK_SPIN_US), deadline);
}

int
shmlock_lock_wait(shmlock_lock_t *l, const char *key, size_t key_len,
    const shmlock_wait_t *w, int64_t *elapsed_us)
{
    shmlock_look_t  how;
    uint64_t        holder = 0;
    uint32_t        hash = shmlock_hash(key, key_len), on = hash, next_on,
                    seq;
    int64_t         start = w->start_us, deadline, now, us;
    double          step = w->step;
    int             rc, outcome, check = 1, stopped;

    if (start <= 0) {
        start = lock_now_us();
    }
    l->waited = 0;
    deadline = start + w->timeout_us;
    memset(&how, 0, sizeof(how));
    how.exptime_ms = w->exptime_ms;
    *elapsed_us = 0;
    /* A wait begins with a spin of LOCK_FIRST_SPIN_US for a release of the
     * holder (the first look and its check of the holder come after: a
     * dead holder's key is still taken before any sleep).  The lock()
     * that called found the key held, most often in the middle of a
     * short hold: a waiter that looked, checked the holder (a pidfd,
     * ~6 us) and slept instead took a sleep, a wake-up and the check per
     * acquisition (bench 9, 32 processes on 2 CPUs: 0.55 switches and
     * 9 us of system time per acquisition; with the spin 0.2 and 2 us,
     * 1.56-1.58x flock's rate instead of 1.28-1.39x).  No barging past
     * a mark: a marked lock is never free. */
    lock_spin(l, key, key_len,
              LOCK_SPIN_LEN(lock_test_first_spin_us, LOCK_FIRST_SPIN_US),
              deadline);
    for ( ;; ) {
        /* counted as a waiter before looking: see shmlock_wait_begin */
        seq = shmlock_wait_begin(l->zone, on);
        now = lock_now_us();
        if (now >= start + LOCK_STARVE_AFTER_US) {
            how.since_ms = start / 1000;
            how.till_ms = deadline / 1000;
        }
        how.flags = (check ? SHMLOCK_LOOK_CHECK : 0)
                    | (w->flags & SHMLOCK_LOOK_ASK);
        rc = lock_look(l, key, key_len, &how,
                       holder == 0 ? LOCK_CHECK_PID : LOCK_CHECK_SAME, holder,
                       &holder, &outcome);
        if (rc == SHMLOCK_OK && outcome == LOCK_ACQUIRED) {
            shmlock_wait_end(l->zone, on, seq, 0);
            l->held = 1;
            *elapsed_us = lock_now_us() - start;
            return SHMLOCK_OK;
        }
        if (rc != SHMLOCK_OK) {
            /* a mark of ours goes stale at our deadline */
            lock_wait_leave(l->zone, on, hash, seq, check);
            return rc;
        }
        l->waited |= l->marked;

        now = lock_now_us();
        stopped = (w->flags & SHMLOCK_LOOK_HERE)
                  && shmlock_lock_here(l->zone, key, key_len, 0);
        if (stopped || now >= deadline) {
            lock_wait_leave(l->zone, on, hash, seq, check);
            if (l->waited
                && shmlock_lock_withdraw(l, key, key_len) == SHMLOCK_OK)
            {
                *elapsed_us = lock_now_us() - start;
                return SHMLOCK_OK;
            }
            return stopped ? SHMLOCK_BUSY : SHMLOCK_TIMEOUT;
        }

        next_on = l->marked ? lock_marked_hash(hash) : hash;
        if (next_on != on) {
            /* marked now, or no longer: the next round waits on the other
             * word, looking first (a wake-up meant for us may have gone
             * to the word we leave) */
            shmlock_wait_end(l->zone, on, seq, 0);
            on = next_on;
            check = 0;
            continue;
        }
        if (l->marked && lock_spin_marked(l, key, key_len, deadline)) {
            shmlock_wait_end(l->zone, on, seq, 0);
            check = 0;
            continue;
        }
        us = sys_seconds_us(step > LOCK_MIN_SLEEP ? step : LOCK_MIN_SLEEP);
        if (us > deadline - now) {
            us = deadline - now;
        }
        if (us > LOCK_CHECK_EVERY_US) {
            us = LOCK_CHECK_EVERY_US;
        }
        if (us < 1) {
            us = 1;
        }
        check = lock_sleep(l->zone, on, seq, us) == SHMLOCK_TIMEOUT;
        step = lock_next_step(step, w->ratio, w->max_step);
    }
}
