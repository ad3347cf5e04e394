/*
 * zone_guard: a shard's mutex around a dictionary call, and recovery of a
 * dead holder's half-done update when its mutex is taken over.  Every
 * exported call that touches the dictionary goes through these, for the
 * shard of its key (zone_shard) or for each shard in turn.
 */

#ifndef ZONE_GUARD_H
#define ZONE_GUARD_H

#include "optimistic.h"
#include "shdict.h"
#include "sys.h"

static inline void
zone_lock(zone_t *z)
{
    /* taking over a dead holder's mutex: its update may be half done */
    if (__builtin_expect(shmtx_lock(&z->hdr->mutex, sys_self()), 0)) {
        shdict_recover(z);
        /* it may have died with seq odd: make it even, and different */
        __atomic_store_n(&z->hdr->seq, (z->hdr->seq | 1) + 1,
                         __ATOMIC_RELEASE);
    }
}

/*
 * Returns rc, or SHMLOCK_CORRUPT if the call met a broken structure (see
 * chunk_index); the mark is cleared for the next call while the mutex is
 * still ours (it is only ever set under the mutex).
 */
static inline int
zone_unlock(zone_t *z, int rc)
{
    if (__builtin_expect(z->broken, 0)) {
        z->broken = 0;
        rc = SHMLOCK_CORRUPT;
    }
    shmtx_unlock(&z->hdr->mutex, sys_self());
    return rc;
}

/* A change to the dictionary: mutex held, and seq odd for lock-free readers */
static inline void
zone_write_lock(zone_t *z)
{
    zone_lock(z);
    zone_write_begin(z);
}

static inline int
zone_write_unlock(zone_t *z, int rc)
{
    zone_write_end(z);
    return zone_unlock(z, rc);
}

#endif /* ZONE_GUARD_H */
