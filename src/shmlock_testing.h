/*
 * shmlock_testing.h: the test build's hooks (shmlock_test_*), in
 * libshmlock-test.so and the sanitizer build only (-DSHMLOCK_TESTING),
 * for the crash tests and the specs' seams; apart from the public ABI
 * (shmlock.h), which the library users install has none of them.
 */

#ifndef SHMLOCK_TESTING_H
#define SHMLOCK_TESTING_H

#ifndef SHMLOCK_TESTING
#error "shmlock_testing.h is for the test build (-DSHMLOCK_TESTING) only"
#endif

#include "shmlock.h"

/* SIGKILL this process before its n-th structural write from now (0: never). */
SHMLOCK_API void shmlock_test_crash_at(int n);
/* Take / release every shard's mutex of the zone directly. */
SHMLOCK_API void shmlock_test_mutex_lock(shmlock_zone_t *zone);
SHMLOCK_API void shmlock_test_mutex_unlock(shmlock_zone_t *zone);
/* The coarse clock the removal check is gated by, and the reading from
 * which the zone's next call looks at its file (shm_watch.h). */
SHMLOCK_API int64_t shmlock_test_coarse_ms(void);
SHMLOCK_API int64_t shmlock_test_watch_at(shmlock_zone_t *zone);
/* A shard's sequence word (seqlock.h): every call that takes the shard's
 * mutex to change it moves the word on by 2, whatever it changed. */
SHMLOCK_API uint32_t shmlock_test_shard_seq(shmlock_zone_t *zone,
    unsigned shard);
/* The wake-ups of releases (shmlock_wake_waiters with all = 0, and
 * shmlock_lock_release) this process made: out[0] the calls that woke
 * someone, out[1] the sleepers woken, out[2] the most one call woke;
 * reset = 1 zeroes them after reading. */
SHMLOCK_API void shmlock_test_wakes(uint64_t out[3], int reset);

/* /proc/<pid>/stat reads of this process (a liveness check's costly
 * part) since the last reset */
SHMLOCK_API uint64_t shmlock_test_proc_reads(int reset);
/* The next attach of a zone file in this process pauses between its open
 * and its mmap: it writes a byte to notify_fd, then reads wait_fd (a byte
 * or EOF) before it goes on. */
SHMLOCK_API void shmlock_test_attach_pause(int notify_fd, int wait_fd);
/* This process's last creation scan for removed files of the name
 * (shm_removed.h): out[0] maps read, out[1] maps lines naming a removed
 * file of the name, out[2] removed zones marked dead, out[3] lines whose
 * file could not be reached, out[4] flocks on the file system in
 * /proc/locks, out[5] 1 if every process's maps was read. */
SHMLOCK_API void shmlock_test_removed_scan(uint32_t out[6]);
/* The next time this process takes a shard's mutex (any zone's), zone is
 * marked removed (its dead word set to 2): a creator's mark landing
 * in the middle of a call, after the call looked at the word. */
SHMLOCK_API void shmlock_test_dead_at_lock(shmlock_zone_t *zone);
/*
 * The lock's clock and sleeps (shmlock_lock_*), for the specs' fake
 * clock: mode 0, the real ones; 1, a clock at at_us that moves only as
 * the lock sleeps (a futex wait of us > 0 ends at once as a timeout and
 * moves it by us); 2, the real ones.  Modes 1 and 2 record each futex
 * wait, read (and forgotten) by shmlock_test_lock_waits: out[3 i] its
 * start (us), out[3 i + 1] its end, out[3 i + 2] 1 if a wake-up ended
 * it; it returns how many (at most max).  shmlock_test_lock_now: the
 * fake clock's reading.
 */
SHMLOCK_API void shmlock_test_lock_clock(int mode, int64_t at_us);
SHMLOCK_API int64_t shmlock_test_lock_now(void);
SHMLOCK_API int shmlock_test_lock_waits(int64_t *out, int max);
/* The lock's calls of the slots that a spec makes fail: each such call
 * answers rc instead of running (0: runs again). */
enum {
    SHMLOCK_TEST_LOCK_SWAP = 0,
    SHMLOCK_TEST_LOCK_RELEASE,
    SHMLOCK_TEST_LOCK_EXTEND,
    SHMLOCK_TEST_LOCK_MARK,
    SHMLOCK_TEST_LOCK_LOOK,
    SHMLOCK_TEST_LOCK_CALLS
};
SHMLOCK_API void shmlock_test_lock_fail(int call, int rc);

/* The marked waiter's spin before it sleeps (shmlock_lock.c), in us:
 * a spec makes it long enough that the handoff it waits for surely comes
 * during it; < 0: the build's own (LOCK_SPIN_US). */
SHMLOCK_API void shmlock_test_lock_spin(int64_t us);
/* A wait's spin before its first look (shmlock_lock.c), in us, the same
 * way; < 0: the build's own (LOCK_FIRST_SPIN_US). */
SHMLOCK_API void shmlock_test_lock_first_spin(int64_t us);

/* shmlock_ngx_dict_probe fails while on is 1 (its why says so), as on
 * an nginx whose lua-nginx-module is not laid out as it reads: the
 * drop-in's fallback, tested in a real nginx (t/40). */
SHMLOCK_API void shmlock_test_ngx_dict_probe_fails(int on);

#endif /* SHMLOCK_TESTING_H */
