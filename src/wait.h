/*
 * wait: the per-key wake-up words (see shmlock.h), as the core's own
 * callers use them.
 */

#ifndef WAIT_H
#define WAIT_H

#include "shmlock.h"
#include "sys.h"
#include "zone.h"

static inline uint32_t
wait_slot(uint32_t hash)
{
    return hash & (ZONE_WAIT_WORDS - 1);
}

/*
 * Wakes the sleepers on the key's word, if any is counted: one load when
 * nobody waits.  The load is sequentially consistent, after the release
 * (a seq_cst unlock of the shard's mutex) it must not be moved before.
 */
static inline void
wait_wake_counted(shmlock_zone_t *zone, uint32_t hash)
{
    uint32_t  s = wait_slot(hash);

    if (__atomic_load_n(&zone->wait_sleepers[s], __ATOMIC_SEQ_CST) != 0) {
        __atomic_add_fetch(&zone->wait_seq[s], 1, __ATOMIC_SEQ_CST);
        sys_futex_wake(&zone->wait_seq[s], 0x7fffffff);
    }
}

#endif /* WAIT_H */
