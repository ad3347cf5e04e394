/*
 * shard_lock: a shard's mutex around a dictionary call, with the recovery
 * of a dead holder's half-done update when its mutex is taken over, the
 * count of acquisitions that had to wait (the shard's counters, shard.h),
 * and the seqlock write (seqlock.h) around a call that changes the
 * dictionary.
 * Every exported call that touches a dictionary goes through these, for
 * the shard of its key (zone_shard) or for each shard in turn.
 */

#ifndef SHARD_LOCK_H
#define SHARD_LOCK_H

#include "recover.h"
#include "seqlock.h"
#include "shard.h"
#include "shmlock.h"
#include "shmtx.h"
#include "sys.h"

/*
 * After a lock that did not get the mutex at once (`how`: SHMTX_* flags),
 * the mutex held: counted in the shard's figures, each such acquisition
 * once (sleeps, else spins).
 */
static inline void
shard_lock_waited(shard_t *sh, int how)
{
    if (how & SHMTX_SLEPT) {
        sh->hdr->stats.sleeps++;
    } else if (how & SHMTX_SPUN) {
        sh->hdr->stats.spins++;
    }
    /* taking over a dead holder's mutex: its update may be half done, and
     * it may have died inside a seqlock write */
    if (how & SHMTX_TOOK_OVER) {
        recover_shard(sh);
        seqlock_repair(&sh->hdr->seq);
    }
}

#ifdef SHMLOCK_TESTING
/* the test build's hook, once a shard's mutex is ours (shmlock_test_hooks.c,
 * shmlock_test_dead_at_lock: a zone marked dead in the middle of a call) */
void shard_test_locked(void);
#endif

static inline void
shard_lock(shard_t *sh)
{
    int  how = shmtx_lock(&sh->hdr->mutex, sys_self());

    if (__builtin_expect(how != 0, 0)) {
        shard_lock_waited(sh, how);
    }
#ifdef SHMLOCK_TESTING
    shard_test_locked();
#endif
}

/*
 * Returns rc, or SHMLOCK_CORRUPT if the call met a broken structure (see
 * chunk_index); the mark is cleared for the next call while the mutex is
 * still ours (it is only ever set under the mutex).
 */
static inline int
shard_unlock(shard_t *sh, int rc)
{
    if (__builtin_expect(sh->broken, 0)) {
        sh->broken = 0;
        rc = SHMLOCK_CORRUPT;
    }
    shmtx_unlock(&sh->hdr->mutex, sys_self());
    return rc;
}

/* A change to the dictionary: mutex held, and seq odd for lock-free
 * readers. */
static inline void
shard_write_lock(shard_t *sh)
{
    shard_lock(sh);
    seqlock_write_begin(&sh->hdr->seq);
}

static inline int
shard_write_unlock(shard_t *sh, int rc)
{
    seqlock_write_end(&sh->hdr->seq);
    return shard_unlock(sh, rc);
}

#endif /* SHARD_LOCK_H */
