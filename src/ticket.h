/*
 * ticket: the slot word of a ticket (shmlock_ticket_t.slot, shmlock.h),
 * which names one slot of a zone: the index of the slot in its shard (a
 * floor slot's, below 2^24, or SLOT_SPILL | a spilled slot's record's
 * chunk, below 2^27: zone.c caps a shard's chunks there), with the shard
 * in bits 27 to 30.  The lock slots' calls (shmlock_slot.c) and the
 * holder groups' (shmlock_group.c) make and read tickets through these.
 */

#ifndef TICKET_H
#define TICKET_H

#include "shmlock.h"
#include "slot.h"
#include "zone.h"

#define TICKET_SHARD_SHIFT  27
#define TICKET_INDEX        (((uint32_t) 1 << 27) - 1)

_Static_assert(ZONE_SHARDS_MAX <= 16, "a ticket's slot has 4 shard bits");

/* t from the slot's ticket tk, in shard, of a key of that hash */
static inline void
ticket_out(shmlock_ticket_t *t, uint32_t shard, uint32_t hash,
    const slot_ticket_t *tk)
{
    t->slot = (tk->index & SLOT_SPILL) | shard << TICKET_SHARD_SHIFT
              | (tk->index & TICKET_INDEX);
    t->hash = hash;
    t->owner = tk->state.owner;
    t->stamp = tk->state.stamp;
    t->process = tk->process;
}

/* The shard t names (maybe none of the zone's: the caller checks). */
static inline uint32_t
ticket_shard(const shmlock_ticket_t *t)
{
    return (t->slot & ~SLOT_SPILL) >> TICKET_SHARD_SHIFT;
}

/* The index of t's slot in its shard. */
static inline uint32_t
ticket_index(const shmlock_ticket_t *t)
{
    return t->slot & (SLOT_SPILL | TICKET_INDEX);
}

/*
 * The floor slot an acquire may try first for t's key (an earlier
 * ticket's: a hint); for a spilled slot, an index past every floor's (no
 * slot: the full acquire).  A spilled slot's index counts
 * chunks, not floor slots: taken as a floor index it names an unrelated
 * slot, which may hold the very key, free; the acquire would succeed
 * there while t still named the spilled slot, and the release, made on
 * the spilled one, would leave the key locked until its expiry.
 */
static inline uint32_t
ticket_hint(const shmlock_ticket_t *t)
{
    /* ticket_index: the spilled flag kept, bit 31, above every floor's
     * mask (a floor index is below 2^24) */
    return ticket_index(t);
}

/* tk from t */
static inline void
ticket_in(const shmlock_ticket_t *t, slot_ticket_t *tk)
{
    tk->index = ticket_index(t);
    tk->pad = 0;
    tk->state.owner = t->owner;
    tk->state.stamp = t->stamp;
    tk->process = t->process;
}

#endif /* TICKET_H */
