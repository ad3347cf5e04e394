/*
 * The test hooks (shmlock_testing.h, SHMLOCK_TESTING): built into
 * libshmlock-test.so and the sanitizer build only, for the crash tests.
 */

#ifndef SHMLOCK_TESTING
#error "shmlock_test_hooks.c is for the test build (-DSHMLOCK_TESTING) only"
#endif

#include "shmlock_testing.h"
#include "crash.h"
#include "shard_lock.h"
#include "shm_removed.h"
#include "shm_zone.h"
#include "sys.h"
#include "wait.h"
#include "zone.h"

void
shmlock_test_crash_at(int n)
{
    crash_at(n);
}

void
shmlock_test_mutex_lock(shmlock_zone_t *zone)
{
    uint32_t  i;

    for (i = 0; i < zone->nshards; i++) {
        shard_lock(&zone->shard[i]);
    }
}

void
shmlock_test_mutex_unlock(shmlock_zone_t *zone)
{
    uint32_t  i;

    for (i = 0; i < zone->nshards; i++) {
        shard_unlock(&zone->shard[i], SHMLOCK_OK);
    }
}

int64_t
shmlock_test_coarse_ms(void)
{
    return sys_coarse_ms();
}

int64_t
shmlock_test_watch_at(shmlock_zone_t *zone)
{
    return __atomic_load_n(&zone->watch_at, __ATOMIC_RELAXED);
}

uint32_t
shmlock_test_shard_seq(shmlock_zone_t *zone, unsigned shard)
{
    shard_t  *sh = &zone->shard[shard % zone->nshards];

    return __atomic_load_n(&sh->hdr->seq, __ATOMIC_SEQ_CST);
}

void
shmlock_test_attach_pause(int notify_fd, int wait_fd)
{
    shm_zone_test_pause(notify_fd, wait_fd);
}

void
shmlock_test_removed_scan(uint32_t out[6])
{
    shm_removed_stats_t  st;

    shm_removed_last(&st);
    out[0] = st.procs;
    out[1] = st.lines;
    out[2] = st.marked;
    out[3] = st.unreachable;
    out[4] = st.locks;
    out[5] = st.full;
}

static shmlock_zone_t  *dead_at_lock;

void
shmlock_test_dead_at_lock(shmlock_zone_t *zone)
{
    __atomic_store_n(&dead_at_lock, zone, __ATOMIC_SEQ_CST);
}

void
shard_test_locked(void)
{
    shmlock_zone_t  *z = __atomic_exchange_n(&dead_at_lock, NULL,
                                             __ATOMIC_SEQ_CST);

    if (z != NULL) {
        __atomic_store_n(&z->hdr->dead, ZONE_REMOVED, __ATOMIC_SEQ_CST);
    }
}

static uint64_t  wakes[3];

void
wait_test_woken(uint32_t n)
{
    if (n > 0) {
        __atomic_add_fetch(&wakes[0], 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&wakes[1], n, __ATOMIC_RELAXED);
        if (n > wakes[2]) {
            wakes[2] = n;
        }
    }
}

void
shmlock_test_wakes(uint64_t out[3], int reset)
{
    int  i;

    for (i = 0; i < 3; i++) {
        out[i] = __atomic_load_n(&wakes[i], __ATOMIC_RELAXED);
        if (reset) {
            wakes[i] = 0;
        }
    }
}

uint64_t
shmlock_test_proc_reads(int reset)
{
    uint64_t  n = __atomic_load_n(&sys_test_proc_reads, __ATOMIC_RELAXED);

    if (reset) {
        __atomic_store_n(&sys_test_proc_reads, 0, __ATOMIC_RELAXED);
    }
    return n;
}
