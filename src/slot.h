/*
 * slot: lock slots (issue 22).  A table of 64-byte slots, one per lock
 * key, that stays allocated after a release, so that a lock pair costs one
 * 16-byte compare-and-swap each way instead of a dictionary entry created
 * and destroyed under the shard mutex.  Slots hold nothing but locks: a
 * CAS on an ordinary chunk would be unsafe (a freed chunk can become
 * another entry's data), a slot is only ever a slot.
 *
 * Each shard of a zone ends with one table (zone.h: since layout 8;
 * layout 9 sizes it for every lock of the zone, about 1/16 of the shard);
 * the ABI is shmlock_slot_* (shmlock_slot.c).  Tested on its own by
 * ctest/slot_test.c (semantics, 4 processes x 200k locked increments, a
 * crash before every write, the mutex fallback) and through the ABI by
 * ctest/shmlock_test.c.  The Lua lock lives here: see "The Lua lock" at
 * the end.
 *
 *   slot_t (64 bytes, 64-aligned)
 *   +----------------------+------+---------+---------+-------------------+
 *   | state: owner | stamp | hash | kind << | process | key: 32 bytes     |
 *   | (16 bytes, one CAS)  |      | 24 |    |         | inline, or 24 +   |
 *   |                      |      | key_len |         | fingerprint       |
 *   +----------------------+------+---------+---------+-------------------+
 *
 * The state is two 64-bit words changed together by one 16-byte CAS
 * (cmpxchg16b):
 *
 *   owner   0: free; else the holder, the caller's word: its pid in the
 *           high 32 bits, an id of the caller's in the low ones
 *   stamp   expiry (ms, 40 bits) << 24 | flags (LIVE, DEAD, MARKED) << 20
 *           | serial (20 bits)
 *
 * process is a hint beside the state: the holder's process as the shard
 * mutexes name theirs (pid | low 32 bits of its start time << 32), so
 * that a waiter can tell a dead holder from a pid reused.  An acquirer
 * writes it just before its CAS (and again after, if a racer overwrote
 * it); it is the holder's only while its pid is the owner's
 * (slot_process_of), else unknown.  Before: written after the CAS only,
 * a slot last held by a dead process whose pid we reuse would, between
 * our CAS and that write, name the dead one (our pid, its start time) as
 * our process, and a waiter would take a live holder for dead.  After: a
 * racer of another process may have written its own meanwhile (another
 * pid: unknown, never dead, but our process would be lost to the
 * waiters).  Each is a load and a compare, and a store only when the
 * hint differs: none when one process takes a slot again and again.  A
 * swap to another owner (a handoff to the waiter it names, a takeover)
 * writes it after its CAS only: a swap from a stale state must not
 * overwrite the holder's.  A releaser killed between the two leaves the
 * new owner's process unknown for good; the owner's own process, which
 * knows the lock by its owner word, writes it again by a swap to the
 * same state (slot_swap_hint in slot.c).
 *
 * Every change of the state bumps the serial, so a state read once names
 * one moment of the slot: a CAS from it fails if anything happened since.
 * The kinds of slot, by the stamp's flags:
 *
 *   EMPTY   no flag (a zeroed table is all EMPTY): ends every probe
 *   DEAD    a tombstone: probes pass it; the mutex holder may reuse it
 *   LIVE    the slot of the key in hash/key_len/key; owner 0 (free) or
 *           the holder; MARKED: a waiter is queued for it (the mark's
 *           fields are the caller's; every fast path leaves a marked
 *           slot to the slow path)
 *
 * A slot's key is its kind, its length and its bytes (zone layout 10):
 * the kind (SLOT_KIND_SHIFT) says whose the key is.  SLOT_KIND_LOCK (0)
 * is a lock's key, the bytes a caller of the ABI gave; other kinds are
 * the holder groups' records (group.h), whose bytes the group makes.
 * Every lookup compares the kind with the length, in one word, so no
 * user key, whatever its bytes, ever finds a record's slot (before: a
 * user key spelt as a record's bytes took a record's slot through the
 * hinted acquire while another process took the key's own slot in
 * another shard: two holders, issue 30).  The lock-free paths of a
 * lock's key (slot_acquire_fast, slot_acquire_hint) compare the word
 * with the bare length: kind 0, never a record's.
 *
 * Lookups are linear probing from the hash's home slot, without the
 * mutex: read the state (acquire), then the key, then the state again; a
 * key compared while it was being rewritten is caught by the second read,
 * since a slot's key changes only after its state left LIVE (reclaim) and
 * before it becomes LIVE again.  (The uncontended acquire,
 * slot_acquire_fast, reads the state once: its CAS from that read
 * validates the key too; see there.)  Creating a key's slot, reclaiming
 * free slots (LIVE -> DEAD: the state moves first, with a CAS, so a
 * lock-free acquirer either took the slot first or fails its CAS) and
 * turning a run of tombstones that ends at an EMPTY slot back to EMPTY
 * happen under the caller's mutex.  A held slot is never reclaimed: its
 * index stays valid for the holder's ticket.
 *
 * Crash safety: each change of a state is one CAS (old or new, nothing
 * between); a key is written into a slot that is EMPTY or DEAD, and only
 * the CAS that makes it LIVE publishes it, so a writer killed before that
 * CAS leaves an EMPTY or DEAD slot with a half key, which no one reads.
 * The table's counters (live, dead) are derived, rebuilt by
 * slot_recover_locked.  In the test build every write is a crash point
 * (wordstore.h).
 *
 * Keys longer than SLOT_KEY_INLINE bytes keep their first SLOT_KEY_PREFIX
 * bytes and a 64-bit fingerprint of the whole key (slot_fingerprint),
 * besides the 32-bit hash and the length: two keys that agree in all of
 * them share one slot.  That can only merge two locks (extra exclusion,
 * never lost exclusion), for a pair of long keys with equal length,
 * prefix, hash and fingerprint: about 2^-96 per pair.
 *
 * Without a 16-byte CAS (slot_cas16(): cpuid at first use; another
 * architecture), every slot operation runs under the mutex (the *_locked
 * calls; the lock-free ones answer SLOT_SLOW) and writes the two words of
 * a state under an undo record in the table's header, which
 * slot_recover_locked plays back.
 *
 * The serial has 20 bits: a lock-free caller holding a state read is
 * fooled only if that very slot changed 2^20 times, and came back to the
 * same owner and expiry, between two of its instructions.
 *
 * Spilled slots (zone layout 11, issue 34).  The table above is a floor:
 * a shard's keys past its room (7/8 of its slots) go to slots in the
 * shard's chunks, a pair of chunks each (the slot, then its mark record),
 * taken from the dictionary as a `set` takes room (spill.h: evicting
 * set entries) and given back as soon as the slot is free again.  A
 * spilled slot is reached through its key's home slot: the floor's mark
 * record of the home (hash & mask) keeps the first spilled record of that
 * home (slot_mark_t.spill), each spilled record the next one and its
 * slot's chunk (slot_mark_t.slot): a chain, changed by one word store
 * each way (a slot written whole in chunks nobody reaches, then
 * published by the store of the link to its record; unlinked by one
 * store, then given back).  A ticket names a spilled slot by
 * SLOT_SPILL | its record's chunk.
 *
 * A spilled slot is read and changed only under the mutex: no lock-free
 * call ever reads one's state for a CAS, so no CAS can land on a chunk
 * the dictionary took back (a freed chunk becomes another entry's data).
 * The lock-free calls answer SLOT_SLOW for a ticket of one, and for a
 * key they do not find in the floor (a look: only when the home has a
 * chain).  Under the mutex, a ticket of a spilled slot counts only while
 * its record is on the chain of its slot's home; a slot spilled again
 * into the same chunks gets a serial from the table's own counter
 * (spill_serial), so an earlier ticket of those chunks does not match it
 * but after 2^20 more spills.  Recovery walks the chains (the chunks they
 * hold are not the dictionary's free ones), plays the fallback's undo
 * back into a spilled slot too, and recounts; verify walks them.  The
 * floor's slots stay the fast path: a pair is one lock-free CAS each way
 * there; a spilled key costs the mutex.
 *
 * Marks.  Each slot has a mark record of its own (slot_mark_t, in an
 * array after the slots): the waiter a release is to hand the lock to.
 * It is written under the mutex inside a seqlock of its own (seq odd
 * while it is written), and only then is MARKED set in the state by CAS
 * (slot_mark_locked); readers take a record only with an even seq that
 * did not move, for a state that is still MARKED.  A writer killed in
 * the middle leaves seq odd: recovery clears the slot's MARKED flag (a
 * mark that may be half written is dropped; its waiter marks again) and
 * makes seq even.
 *
 * The Lua lock (lua/resty/shmlock/lock/zone.lua) keeps every lock of a
 * zone in these slots, none in the dictionary: the owner word is the
 * holder's pid with an owner id of the acquisition (token.next_id, from
 * shmlock_owner_ids), the handle of the lock object keeps the ticket,
 * unlock and expire are a release and an extend from it, a starving
 * waiter marks the slot (slot_mark_locked) and the holder's release,
 * answered CHANGED, hands the lock over by a swap to the mark's owner.
 * A waiter asks whether a holder lives with the process hint
 * (shmlock_slot_alive).  resty_lock.inspect looks at a key's slot, and
 * `shmlock locks` walks the table (shmlock_slot_scan); the semaphores'
 * holder groups (group.h) are slots too.
 */

#ifndef SLOT_H
#define SLOT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hash.h"
#include "wordstore.h"

#define SLOT_KEY_INLINE      32
#define SLOT_KEY_PREFIX      24

/* slot_t.key_len: the key's kind in the high byte, its length below */
#define SLOT_KIND_SHIFT      24
#define SLOT_LEN_MASK        (((uint32_t) 1 << SLOT_KIND_SHIFT) - 1)
#define SLOT_KIND_LOCK       0      /* a lock's key: a user's bytes */

#define SLOT_SERIAL_MASK     ((uint64_t) 0xfffff)
#define SLOT_LIVE            ((uint64_t) 1 << 20)
#define SLOT_DEAD            ((uint64_t) 1 << 21)
#define SLOT_MARKED          ((uint64_t) 1 << 22)
#define SLOT_FLAGS           ((uint64_t) 0xf << 20)
#define SLOT_EXPIRY_SHIFT    24
#define SLOT_NEVER           (((uint64_t) 1 << 40) - 1)   /* no expiry */

/* probes longer than this (in slots) give up: the table is too full */
#define SLOT_PROBE_MAX       256

typedef struct {
    uint64_t  owner;
    uint64_t  stamp;
} __attribute__((aligned(16))) slot_state_t;

typedef struct {
    slot_state_t  state;
    uint32_t      hash;
    uint32_t      key_len;      /* kind << SLOT_KIND_SHIFT | length */
    uint64_t      process;      /* the holder's process: a hint */
    char          key[SLOT_KEY_INLINE];
} __attribute__((aligned(64))) slot_t;

_Static_assert(sizeof(slot_t) == 64, "a slot is one cache line");

/* A slot's mark record. */
typedef struct {
    uint32_t  seq;          /* odd while written */
    uint32_t  spill;        /* the floor's: its home's first spilled
                               record; a spilled one: the next (a chunk;
                               0: none) */
    uint64_t  owner;        /* the waiter */
    uint64_t  process;      /* its process */
    int64_t   expiry;       /* the time to live (ms) it asks for on handoff */
    int64_t   since;        /* when it began to wait (ms) */
    int64_t   until;        /* its deadline (ms): stale from then on */
    uint32_t  slot;         /* a spilled record: its slot's chunk */
    uint32_t  pad;
} __attribute__((aligned(64))) slot_mark_t;

_Static_assert(sizeof(slot_mark_t) == 64, "a mark record is one line");

/* The table's header, in shared memory. */
typedef struct {
    uint32_t      nslots;       /* a power of two (checked at attach) */
    uint32_t      live;         /* LIVE slots of the floor (derived) */
    uint32_t      dead;         /* DEAD slots (derived) */
    uint32_t      undo_active;  /* the fallback's undo record: */
    uint32_t      undo_index;   /*   the slot being written (a ticket's
                                     index), */
    uint32_t      spilled;      /* spilled slots (derived) */
    slot_state_t  undo_state;   /*   its state before */
    uint32_t      spill_serial; /* the serial of the next slot spilled */
    uint32_t      pad;
} __attribute__((aligned(64))) slot_hdr_t;

_Static_assert(sizeof(slot_hdr_t) == 64, "a table's header is one line");

/* The bytes of a table of n slots: header, slots, mark records. */
#define SLOT_TABLE_BYTES(n) \
    (sizeof(slot_hdr_t) + (uint64_t) (n) * (sizeof(slot_t) \
                                            + sizeof(slot_mark_t)))

/* A ticket's index of a spilled slot: SLOT_SPILL | its record's chunk. */
#define SLOT_SPILL           ((uint32_t) 1 << 31)

/*
 * Where spilled slots come from (spill.h for a shard; a test's own
 * memory for ctest/): take two chunks (the slot's, the record's: 0, or
 * -1 when there is no room), give them back.  Called with the mutex.
 */
typedef int (*slot_take_fn)(void *ctx, uint32_t *slot, uint32_t *rec);
typedef void (*slot_give_fn)(void *ctx, uint32_t slot, uint32_t rec);

/* A table as a process sees it. */
typedef struct {
    slot_hdr_t  *hdr;
    slot_t      *slots;
    slot_mark_t *marks;         /* after the slots */
    uint32_t     mask;          /* nslots - 1, this process's copy */
    int          cas16;         /* 1: lock-free paths; 0: all locked */
    /* the chunks slots spill into: chunk i at chunks + 64 i, 1..nchunks
     * (none: nchunks 0) */
    char        *chunks;
    uint32_t     nchunks;
    slot_take_fn take;
    slot_give_fn give;
    void        *ctx;
} slots_t;

/* What an acquire hands out and a release gives back. */
typedef struct {
    uint32_t      index;
    uint32_t      pad;
    slot_state_t  state;        /* the state the holder set */
    uint64_t      process;      /* the holder's process, 0: not known */
} slot_ticket_t;

/* Answers of the calls below. */
enum {
    SLOT_OK = 0,        /* acquired / released / changed as asked */
    SLOT_HELD,          /* acquire: held (live) by another; the ticket
                           tells the holder */
    SLOT_GONE,          /* release, extend: the state is no longer the
                           ticket's (expired and taken, or reclaimed) */
    SLOT_ABSENT,        /* look: no slot for the key */
    SLOT_SLOW,          /* lock-free call: take the mutex and call the
                           *_locked one (no slot yet, a marked slot, a
                           busy CAS, no 16-byte CAS) */
    SLOT_MARKED_STATE,  /* the slot is marked: the caller's slow path */
    SLOT_FULL           /* no slot can be made: the table is full, and
                           no chunk is left to spill into */
};

/* 1 if this CPU has a 16-byte CAS the lock-free paths can use. */
int slot_cas16(void);

/* An empty table of n slots (a power of two) at hdr and slots (with
 * SLOT_TABLE_BYTES(n) from hdr). */
void slot_format(slot_hdr_t *hdr, slot_t *slots, uint32_t n);
/* This process's view of a table of n slots (a power of two: the
 * caller's checked geometry, never the shared header's); cas16 < 0: ask
 * the CPU. */
void slot_attach(slots_t *t, slot_hdr_t *hdr, slot_t *slots, uint32_t n,
    int cas16);
/* The chunks the table may spill into (spill.h), and how it gets them. */
void slot_attach_spill(slots_t *t, char *chunks, uint32_t nchunks,
    slot_take_fn take, slot_give_fn give, void *ctx);

uint64_t slot_fingerprint(const char *key, size_t len);

/* ---- lock-free (each answers SLOT_SLOW without a 16-byte CAS) ---- */

/* kind: the key's (SLOT_KIND_LOCK, or a group's record kind); expiry:
 * absolute ms of the zone clock (0: SLOT_NEVER); now: the clock */
int slot_acquire(slots_t *t, int kind, const char *key, size_t klen,
    uint32_t hash, uint64_t owner, uint64_t process, int64_t expiry,
    int64_t now, slot_ticket_t *tk);
int slot_release(slots_t *t, const slot_ticket_t *tk);
int slot_extend(slots_t *t, slot_ticket_t *tk, int64_t expiry);
/* SLOT_OK (tk: the slot's state, owner 0 when free), SLOT_ABSENT */
int slot_look(slots_t *t, int kind, const char *key, size_t klen,
    uint32_t hash, slot_ticket_t *tk);
/* From the state `seen` (a look's ticket) to owner/flags/expiry: a dead
 * holder's takeover, a mark set or cleared.  SLOT_OK (tk: the new state),
 * SLOT_GONE. */
int slot_swap(slots_t *t, const slot_ticket_t *seen, uint64_t owner,
    uint64_t process, uint64_t flags, int64_t expiry, slot_ticket_t *tk);

/* ---- the caller's mutex held ---- */

int slot_acquire_locked(slots_t *t, int kind, const char *key, size_t klen,
    uint32_t hash, uint64_t owner, uint64_t process, int64_t expiry,
    int64_t now, slot_ticket_t *tk);
int slot_release_locked(slots_t *t, const slot_ticket_t *tk);
int slot_extend_locked(slots_t *t, slot_ticket_t *tk, int64_t expiry);
int slot_look_locked(slots_t *t, int kind, const char *key, size_t klen,
    uint32_t hash, slot_ticket_t *tk);
int slot_swap_locked(slots_t *t, const slot_ticket_t *seen, uint64_t owner,
    uint64_t process, uint64_t flags, int64_t expiry, slot_ticket_t *tk);
/* The mark of the marked state `seen`: its record written, then MARKED
 * set (or, marked already, the record replaced): SLOT_OK (tk: the
 * state), SLOT_GONE (the state is no longer seen). */
int slot_mark_locked(slots_t *t, const slot_ticket_t *seen,
    const slot_mark_t *m, slot_ticket_t *tk);
/* The mark of state `at` (MARKED), lock-free: SLOT_OK, or SLOT_GONE if
 * the slot left that state (or its record is being written: look
 * again); SLOT_SLOW for a spilled slot (slot_mark_read_locked). */
int slot_mark_read(slots_t *t, const slot_ticket_t *at, slot_mark_t *m);
int slot_mark_read_locked(slots_t *t, const slot_ticket_t *at,
    slot_mark_t *m);
/* The state of ticket index i's slot, and its holder's process (a hint,
 * 0 unknown): 0; -1 if i names no slot (a spilled one given back).  A
 * floor slot's lock-free; a spilled one's only with the mutex held. */
int slot_state_at(slots_t *t, uint32_t i, slot_state_t *st,
    uint64_t *process);
/* The process hint of ticket index i's slot written (the mutex held: a
 * spilled slot's too). */
void slot_hint_locked(slots_t *t, uint32_t i, uint64_t process);
/* Spilled slot `pos` (0, 1, ...) of home's chain, under the mutex: 1 and
 * what slot_info gives (tk's index: the spilled slot's); 0 past the
 * chain's end. */
int slot_spill_info_locked(slots_t *t, uint32_t home, uint32_t pos,
    slot_ticket_t *tk, int *kind, char *key, uint32_t *klen, uint32_t *shown,
    uint32_t *hash);
/* The chunks the spilled slots hold, each given to fn (recovery and
 * verify mark them used); the chains' walks are bounded.  Returns how
 * many chunks. */
uint32_t slot_spill_chunks(slots_t *t, void (*fn)(void *arg, uint32_t c),
    void *arg);
/* Slot i, lock-free (under the mutex without a 16-byte CAS): 1 if it is
 * a key's (LIVE), read whole: tk its state, *kind the key's kind, *klen
 * its length, key (SLOT_KEY_INLINE bytes) its first *shown bytes (all of
 * it, or SLOT_KEY_PREFIX of a longer one), *hash its hash; 0 if not a
 * key's, or it changed while read. */
int slot_info(slots_t *t, uint32_t i, slot_ticket_t *tk, int *kind,
    char *key, uint32_t *klen, uint32_t *shown, uint32_t *hash);
/* Free slots (no owner, or expired and unmarked) become DEAD, and runs of
 * DEAD slots that end at an EMPTY one become EMPTY; spilled ones (spill:
 * 1) are given back.  Returns the slots freed. */
uint32_t slot_reclaim_locked(slots_t *t, int64_t now, int spill);
/* After the mutex was taken over from a dead holder: the fallback's undo,
 * then the counters recounted. */
void slot_recover_locked(slots_t *t);
/* 0, or -1 with msg saying what is broken. */
int slot_verify_locked(slots_t *t, char *msg, size_t msg_size);


/* ---- inline: the state's primitives (slot.c's too) and the fast paths
 * of an uncontended pair, for shmlock_slot.c ---- */

/*
 * The stamp first, then the owner: every change moves the stamp (its
 * serial, or its MARKED flag), so two reads with equal stamps saw no
 * change between them, and the owner read in between is that state's.
 */
static inline slot_state_t
slot_load(const slot_t *s)
{
    slot_state_t  st;

    st.stamp = __atomic_load_n(&s->state.stamp, __ATOMIC_ACQUIRE);
    st.owner = __atomic_load_n(&s->state.owner, __ATOMIC_ACQUIRE);
    return st;
}

static inline uint64_t
slot_stamp(uint64_t flags, int64_t expiry, uint64_t old_stamp)
{
    /* none (<= 0) and past the field's range are both SLOT_NEVER: one
     * unsigned compare (0 and negatives wrap to the top) */
    uint64_t  e = (uint64_t) expiry - 1 < SLOT_NEVER ? (uint64_t) expiry
                                                     : SLOT_NEVER;

    return e << SLOT_EXPIRY_SHIFT | flags
           | ((old_stamp + 1) & SLOT_SERIAL_MASK);
}

/* The one CAS of a state (lock-free callers, and locked ones when others
 * may be lock-free at the same time); *expect gets the state found. */
static inline int
slot_cas(slot_t *s, slot_state_t *expect, slot_state_t want)
{
#if defined(__x86_64__) && defined(__GCC_ASM_FLAG_OUTPUTS__)
    int  ok;

    /* the zero flag as the asm's output: no setz and test after it */
    wordstore_before();
    __asm__ __volatile__ ("lock cmpxchg16b %1"
                          : "=@ccz" (ok), "+m" (s->state),
                            "+a" (expect->owner), "+d" (expect->stamp)
                          : "b" (want.owner), "c" (want.stamp)
                          : "memory");
    return ok;
#elif defined(__x86_64__)
    unsigned char  ok;

    wordstore_before();
    __asm__ __volatile__ ("lock cmpxchg16b %1\n\tsetz %0"
                          : "=q" (ok), "+m" (s->state),
                            "+a" (expect->owner), "+d" (expect->stamp)
                          : "b" (want.owner), "c" (want.stamp)
                          : "memory", "cc");
    return ok;
#else
    (void) s;
    (void) expect;
    (void) want;
    return 0;                               /* never called: cas16 is 0 */
#endif
}

/* Before a CAS that makes `process` the holder's, and after it (a racer
 * may have written its own in between); a store only if it differs, so a
 * slot taken again and again by one process is not written twice. */
static inline void
slot_hint(slot_t *s, uint64_t process)
{
    if (__atomic_load_n(&s->process, __ATOMIC_RELAXED) != process) {
        WORDSTORE64(s->process, process);
    }
}

/* The word slot_t.key_len holds for a key of that kind and length. */
static inline uint32_t
slot_len_word(int kind, size_t klen)
{
    return (uint32_t) kind << SLOT_KIND_SHIFT | (uint32_t) klen;
}

/* Whether slot s holds key (its hash, kind and length already compared). */
static inline int
slot_key_is(const slot_t *s, const char *key, size_t klen)
{
    uint64_t  fp;

    if (klen <= SLOT_KEY_INLINE) {
        return hash_equal(s->key, key, klen);
    }
    if (!hash_equal(s->key, key, SLOT_KEY_PREFIX)) {
        return 0;
    }
    memcpy(&fp, s->key + SLOT_KEY_PREFIX, 8);
    return fp == slot_fingerprint(key, klen);
}

static inline void
slot_ticket(slot_ticket_t *tk, uint32_t i, slot_state_t st,
    uint64_t process)
{
    tk->index = i;
    tk->pad = 0;
    tk->state = st;
    tk->process = process;
}

/* A release or extend whose CAS failed: the holder's state but for the
 * MARKED flag is the caller's slow path; anything else is gone. */
static inline int
slot_not_ours(slot_state_t found, const slot_ticket_t *tk)
{
    if (found.owner == tk->state.owner
        && found.stamp == (tk->state.stamp | SLOT_MARKED))
    {
        return SLOT_MARKED_STATE;
    }
    return SLOT_GONE;
}

/*
 * slot_acquire's common case for a lock's key (SLOT_KIND_LOCK: the
 * length word compared with the bare length, which no record's equals),
 * inline: the key's slot is its home slot, LIVE, free and unmarked.  SLOT_OK (tk: the caller's state), or
 * SLOT_SLOW for anything else (another slot, held, marked, a CAS lost,
 * no 16-byte CAS): then slot_acquire, which starts over.
 *
 * One read of the state, not slot_find's two around the key compare:
 * the CAS from that first read validates the key too.  A slot's key is
 * rewritten only while its state is not LIVE (reclaim moves it LIVE ->
 * DEAD by CAS first; the CAS that makes it LIVE again comes after the
 * key), and every change of a state bumps its serial.  So if the key read
 * here overlapped a rewrite, the state changed between our read and our
 * CAS and cannot have come back to the very state read (serial caveat
 * above): the CAS fails.  If the CAS succeeds, the state was `st` from
 * the read to the CAS and the key compared was the slot's key all along.
 * (x86-64 only: the loads of the key are not moved before the acquire
 * load of the stamp nor after the locked cmpxchg16b; the rewriter's key
 * stores become visible only after its LIVE -> DEAD CAS.)  A key that
 * does not match proves nothing (it may be torn): slot_acquire decides.
 */
static inline int
slot_acquire_fast(slots_t *t, const char *key, size_t klen, uint32_t hash,
    uint64_t owner, uint64_t process, int64_t expiry, slot_ticket_t *tk)
{
    uint32_t      i = hash & t->mask;
    slot_t       *s = &t->slots[i];
    slot_state_t  st = slot_load(s), want;

    if (!t->cas16 || st.owner != 0
        || (st.stamp & SLOT_FLAGS) != SLOT_LIVE
        || __atomic_load_n(&s->hash, __ATOMIC_RELAXED) != hash
        || __atomic_load_n(&s->key_len, __ATOMIC_RELAXED)
           != slot_len_word(SLOT_KIND_LOCK, klen)
        || !slot_key_is(s, key, klen))
    {
        return SLOT_SLOW;
    }
    want.owner = owner;
    want.stamp = slot_stamp(SLOT_LIVE, expiry, st.stamp);
    slot_hint(s, process);
    if (!slot_cas(s, &st, want)) {
        return SLOT_SLOW;
    }
    slot_hint(s, process);
    slot_ticket(tk, i, want, process);
    return SLOT_OK;
}

/*
 * slot_acquire_fast at a slot the caller names (s, index i of its table:
 * where an earlier ticket was, a hint of where key's slot is; any slot of
 * a table with the 16-byte CAS is safe) instead of the key's home slot: the same one read of the state, and the key compared
 * whole (keys of at most SLOT_KEY_INLINE bytes: a longer one would need
 * its fingerprint, i.e. hashing, which the hint is there to avoid).  A
 * lock's key (SLOT_KIND_LOCK: the length word compared with the bare
 * length) has at most one LIVE slot (made under the mutex after a probe
 * of its own shard, reclaimed only through DEAD), so a LIVE slot that
 * holds key is key's slot wherever it sits.  A record's slot, whatever
 * its bytes, has another kind in that word: never taken here (it sits
 * in its group's key's shard, not in the bytes' own).  *hash: the slot's hash, which is key's (written
 * with the key, before the CAS that made the slot LIVE; validated by our
 * CAS as the key is).  SLOT_OK, or SLOT_SLOW for anything else.
 */
static inline int
slot_acquire_at(slot_t *s, uint32_t i, const char *key, size_t klen,
    uint64_t owner, uint64_t process, int64_t expiry, slot_ticket_t *tk,
    uint32_t *hash)
{
    slot_state_t  st, want;

    st = slot_load(s);
    if (st.owner != 0 || (st.stamp & SLOT_FLAGS) != SLOT_LIVE
        || __atomic_load_n(&s->key_len, __ATOMIC_RELAXED)
           != slot_len_word(SLOT_KIND_LOCK, klen)
        || !hash_equal(s->key, key, klen))
    {
        return SLOT_SLOW;
    }
    *hash = __atomic_load_n(&s->hash, __ATOMIC_RELAXED);
    want.owner = owner;
    want.stamp = slot_stamp(SLOT_LIVE, expiry, st.stamp);
    slot_hint(s, process);
    if (!slot_cas(s, &st, want)) {
        return SLOT_SLOW;
    }
    slot_hint(s, process);
    slot_ticket(tk, i, want, process);
    return SLOT_OK;
}

/* slot_acquire_at slot i of t, i any value (the hint's checks). */
static inline int
slot_acquire_hint(slots_t *t, uint32_t i, const char *key, size_t klen,
    uint64_t owner, uint64_t process, int64_t expiry, slot_ticket_t *tk,
    uint32_t *hash)
{
    if (i > t->mask || !t->cas16) {
        return SLOT_SLOW;
    }
    return slot_acquire_at(&t->slots[i], i, key, klen, owner, process,
                           expiry, tk, hash);
}

/* slot_release_fast's CAS at s, a floor slot of a table with the 16-byte
 * CAS: whether the state was still st (then the slot is free). */
static inline int
slot_release_at(slot_t *s, slot_state_t st)
{
    slot_state_t  want;

    want.owner = 0;
    want.stamp = slot_stamp(SLOT_LIVE, 0, st.stamp);
    return slot_cas(s, &st, want);
}

/* slot_release itself, inline. */
static inline int
slot_release_fast(slots_t *t, const slot_ticket_t *tk)
{
    slot_state_t  st = tk->state, want;

    if (!t->cas16 || (tk->index & SLOT_SPILL)) {
        return SLOT_SLOW;
    }
    if (tk->index > t->mask) {
        return SLOT_GONE;
    }
    want.owner = 0;
    want.stamp = slot_stamp(SLOT_LIVE, 0, st.stamp);
    if (slot_cas(&t->slots[tk->index], &st, want)) {
        return SLOT_OK;
    }
    return slot_not_ours(st, tk);
}

#endif /* SLOT_H */
