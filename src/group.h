/*
 * group: holders of one key counted together (issue 25): a semaphore's
 * permits and a lock's shared (reader) holds, kept in the lock slots of
 * slot.h.  No structure of its own: a group is a head slot and one
 * record slot per holder, all in the shard of the key's hash.
 *
 *   head     the count: owner = GROUP_TAG | count << 24 | top (0 when
 *            there is no holder: a free slot, reclaimed like any other),
 *            expiry = the latest of the records' expiries
 *   record   one holder: owner = the holder (pid << 32 | id), expiry =
 *            its lease, process hint = its process (slot.h), exactly as
 *            an exclusive lock's slot
 *
 *   the keys, for a user key K (n bytes), by slot kind (slot.h) and bytes:
 *     record i of shared holds   GROUP_SHARED    i (4 bytes, big-endian) K
 *     record i of a semaphore    GROUP_SEM       i (4 bytes, big-endian) K
 *     a semaphore's head         GROUP_SEM_HEAD  K
 *     the shared holds' head     SLOT_KIND_LOCK  K: the slot of K's
 *                                exclusive lock, so that each sees the
 *                                other
 *
 * The kind is part of every lookup of a slot (slot.h), so a user's lock
 * key (SLOT_KIND_LOCK), whatever its bytes, never finds a record or a
 * semaphore's head, nor they it.  (Layouts before 10 spelt the kind in
 * the key's bytes, "\0" 's' or 'r' and a 16-bit index before K, and a
 * user key of those bytes shared the slot: across shards and through the
 * hinted acquire, two holders of one lock, issue 30.)
 *
 * A head counts up to GROUP_MAX holders (24 bits; so does top): more
 * than any shard's table has slots (a ticket names a slot in 24 bits),
 * so the limit of a group is the room of its shard's table: an acquire
 * that finds no slot for its record answers SLOT_FULL.  The head's
 * owner has its top 16 bits set (GROUP_TAG): its pid field (owner >> 32)
 * is at least 0xffff0000, no process's (Linux pids are below 2^22).
 *
 * Every call below runs under the shard's mutex, so counting is exact:
 * an acquire checks count < permits and raises the count in one CAS of
 * the head.  Only the exclusive lock's lock-free calls (slot.c) run
 * beside them, on the shared holds' head; every change of a head is
 * therefore a CAS from the state read (slot_swap_locked).
 *
 * Invariants (what makes a crash between two writes harmless):
 *
 *   count >= the held, unexpired records (an over-count is safe: at
 *            worst an acquirer finds the group full and sweeps, and the
 *            sweep counts again);
 *   top   >  the index of every held, unexpired record (an acquire raises
 *            top in the same CAS as the count, before it takes a record);
 *   a record's expiry <= its head's (an extend raises the head first).
 *
 * So the writes go: acquire = head (count + 1), then the record; release
 * = the record freed, then the head (count - 1; free at 0); a crash
 * between the two leaves one too many in the count.  An expired record
 * is no holder: any acquirer may take it, a sweep frees it, and its
 * release or extend never touches the head (its count was given back by
 * a sweep, or the head expired with it; the expiry is judged on a fresh
 * clock under the mutex, never on a caller's cached one, so a release
 * never sees a record unexpired that an acquirer saw expired).  An
 * expired head counts nothing.
 *
 * Shared holds and the exclusive lock of K share K's slot: readers keep
 * a head there (a tagged owner, which the exclusive lock's lock-free
 * acquire finds held, and shmlock_slot_alive finds alive), an exclusive
 * holder keeps its own owner there (readers find it held).  A waiting
 * exclusive locker marks the slot (slot.h's marks): readers then stay out
 * (no starvation of the writer by a stream of readers) until the mark's
 * deadline passes, and the last reader out hands the slot to the marked
 * waiter.
 *
 * A semaphore's waiter whose turn is next (inside nginx, the queued
 * waiter of resty.shmlock.lock.nginx_wait) marks the semaphore's head the
 * same way: until the mark's deadline nobody else is let in, even with
 * permits free, and the marked waiter comes in (dropping the mark in the
 * head's CAS) as soon as fewer than its `permits` are held.  So that the
 * mark survives the last holder's release, a marked head counting none
 * keeps an owner (GROUP_TAG alone: a marked slot always has one) until
 * its waiter comes or its mark goes stale; then it is freed as any head.
 *
 * The dead are judged outside this file (it reads no /proc): the caller
 * lists the records (group_holders_locked), asks whether each holder
 * lives without the mutex, and drops the dead ones (group_release_locked
 * with the record's ticket: a CAS from the state it saw).
 *
 * Cost: an acquire or release is the shard mutex, two or three probes
 * (head, a record; the free record is looked for from index `count`, so
 * the usual one is the first tried) and two CASes; a sweep is a probe per
 * index below top.  Measured in bench/ (semaphore.lua).
 */

#ifndef GROUP_H
#define GROUP_H

#include "slot.h"

#define GROUP_TAG        ((uint64_t) 0xffff << 48)  /* a head's owner */
#define GROUP_MAX        0xffffff   /* holders a head counts; the index no
                                       record has */
#define GROUP_PREFIX     4          /* bytes a record's key adds to K */

/* A group's kind is its records' slot kind (slot.h: never
 * SLOT_KIND_LOCK); a semaphore's head has a kind of its own. */
enum {
    GROUP_SHARED = 1,
    GROUP_SEM = 2,
    GROUP_SEM_HEAD = 3
};

/* A key's group as the calls see it: buf holds a record's index and K
 * (GROUP_PREFIX + klen bytes); hash: K's hash (the shard, the wait word,
 * the head's slot); kind: GROUP_SHARED or GROUP_SEM. */
typedef struct {
    slots_t     *t;
    char        *buf;
    size_t       klen;
    uint32_t     hash;
    int          kind;
} group_t;

/* What a head says (group_head_locked). */
typedef struct {
    slot_ticket_t  tk;          /* its state, for the CAS */
    int            found;       /* 0: no slot (an empty group) */
    uint32_t       count;       /* holders counted (0 if expired) */
    uint32_t       top;
    int            exclusive;   /* K held by an exclusive, live lock */
} group_head_t;

/* Fills buf (GROUP_PREFIX + klen bytes) and g. */
void group_init(group_t *g, slots_t *t, int kind, char *buf, const char *key,
    size_t klen);

/* Whether a slot's owner is a head's (inline: shmlock_slot_alive asks it
 * of every holder a waiter looks at). */
static inline int
group_is_head(uint64_t owner)
{
    return (owner & GROUP_TAG) == GROUP_TAG;
}

/* The head of g now. */
void group_head_locked(group_t *g, int64_t now, group_head_t *h);

/*
 * A record of g for owner, if fewer than permits (0: no limit) are
 * counted: SLOT_OK (tk: the record); SLOT_HELD (h: the head: permits
 * held, or K held exclusive, or marked for an exclusive waiter);
 * SLOT_FULL (no slot left for the record or the head).  expiry: absolute ms (0: never); now: a
 * fresh reading of the zone clock.
 */
int group_acquire_locked(group_t *g, uint64_t owner, uint64_t process,
    uint32_t permits, int64_t expiry, int64_t now, slot_ticket_t *tk,
    group_head_t *h);
/*
 * Gives back the record of ticket tk (the holder's, or a dead holder's
 * as listed): SLOT_OK; SLOT_GONE: its lease had run out (the record is
 * freed if it was still in tk's state, the head not touched).  *handed:
 * 1 if the shared holds' last reader handed K to its marked waiter (wake
 * every sleeper of K).
 */
int group_release_locked(group_t *g, const slot_ticket_t *tk, int64_t now,
    int *handed);
/* A new expiry (0: never) for tk's record (tk follows): SLOT_OK;
 * SLOT_GONE (expired, or not tk's any more). */
int group_extend_locked(group_t *g, slot_ticket_t *tk, int64_t expiry,
    int64_t now);
/* Frees g's expired records and counts the rest again: the holders now
 * (*handed as for release). */
uint32_t group_sweep_locked(group_t *g, int64_t now, int *handed);
/* The held, unexpired records of g from index *from on, at most max, into
 * out; *from: where to go on (top when done).  Returns how many. */
int group_holders_locked(group_t *g, int64_t now, uint32_t *from,
    slot_ticket_t *out, int max);

#endif /* GROUP_H */
