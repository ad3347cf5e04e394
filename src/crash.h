/*
 * crash: the test build's crash countdown (SHMLOCK_TESTING only).
 *
 * shmlock_test_crash_at(n) arms it; every structural write of the
 * dictionary ticks it first (wordstore.h), and the n-th tick SIGKILLs the
 * process.  The crash tests stop a process before each write of an update
 * in turn and check that the survivors see every key old or new.  The
 * library users load has neither the countdown nor the check.
 */

#ifndef CRASH_H
#define CRASH_H

#ifndef SHMLOCK_TESTING
#error "crash.h is for the test build (-DSHMLOCK_TESTING) only"
#endif

/* hidden: read by every structural write, so no GOT load */
extern int  crash_countdown __attribute__((visibility("hidden")));

void crash_at(int n);
void crash_tick(void);

static inline void
crash_point(void)
{
    if (__builtin_expect(crash_countdown != 0, 0)) {
        crash_tick();
    }
}

#endif /* CRASH_H */
