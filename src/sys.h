/*
 * sys: the few OS services the core needs, wrapped once: who this process
 * is (pid and start time, cached, forgotten in every child), the monotonic
 * clock, futexes on shared memory, process liveness, the pid and time
 * namespaces.
 */

#ifndef SYS_H
#define SYS_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/*
 * What the library knows of this process, in a page the kernel zeroes in
 * every child (MADV_WIPEONFORK, Linux 4.14): a child made by fork(), by a
 * raw fork or clone system call, or by glibc's _Fork() (none of which but
 * fork() runs pthread_atfork handlers) finds every field 0 and computes
 * its own on first use.  Where the kernel cannot wipe the page, a
 * pthread_atfork handler zeroes it (children of fork() only).
 *
 * self: this process as the shard mutexes and lock tokens name it: the pid
 * in the low 32 bits, the low 32 bits of its start time (clock ticks since
 * boot) in the high ones.  A pid is reused by another process; a pid with
 * the start time is not (but for a pid reused within one clock tick, which
 * takes a privileged writer of ns_last_pid).  Never 0 once known.
 */
typedef struct {
    uint64_t  self;
    uint64_t  start;        /* the start time, whole */
    uint64_t  pidns;        /* inode of the pid namespace (0: not read) */
    uint64_t  timens;       /* inode of the time namespace (0: not read) */
    uint64_t  tokens;       /* token.c's next block (0: not seeded) */
    int32_t   pid;          /* self's pid, for readers of one int (Lua) */
} sys_proc_t;

/* never NULL: a static copy until the page is mapped (at load) */
extern sys_proc_t  *sys_proc __attribute__((visibility("hidden")));
uint64_t sys_self_slow(void);

/* sys_self's word alone: 0 until sys_self_slow fills it (for a fast path
 * that leaves that call to its slow one) */
static inline uint64_t
sys_self_word(void)
{
    return __atomic_load_n(&sys_proc->self, __ATOMIC_RELAXED);
}

static inline uint64_t
sys_self(void)
{
    uint64_t  self = sys_self_word();

    return __builtin_expect(self != 0, 1) ? self : sys_self_slow();
}

static inline uint32_t
sys_pid(void)
{
    return (uint32_t) sys_self();
}

/* Start time of this process, whole (the id keeps its low 32 bits). */
uint64_t sys_self_start(void);

/* (called through the GOT, not a PLT stub: the lock pair reads the clock
 * on both its fast paths) */
#if defined(__GNUC__) && !defined(__clang__)
extern int clock_gettime(clockid_t clk, struct timespec *ts)
    __attribute__((noplt));
#endif

/* CLOCK_MONOTONIC in ms; inline: the lock's acquire reads it on its fast
 * path. */
static inline int64_t
sys_now_ms(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    /* (tv_nsec is below 10^9: an unsigned division, no sign fix-up) */
    return (int64_t) ts.tv_sec * 1000 + (uint32_t) ts.tv_nsec / 1000000u;
}

int64_t sys_now_us(void);
/* CLOCK_MONOTONIC_COARSE in ms, the kernel's clock of the last tick (vDSO,
 * no system call): the same clock as sys_now_ms, up to one tick behind it,
 * at a few loads; inline: every call on a zone reads it (shm_watch.h). */
static inline int64_t
sys_coarse_ms(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    /* (tv_nsec is below 10^9: an unsigned division, no sign fix-up) */
    return (int64_t) ts.tv_sec * 1000 + (uint32_t) ts.tv_nsec / 1000000u;
}
int sys_ncpu(void);

/* seconds as microseconds, rounded up (a wait's step: never a sleep
 * shorter than asked; no libm, which the library links without) */
static inline int64_t
sys_seconds_us(double seconds)
{
    double   d = seconds * 1e6;
    int64_t  us = (int64_t) d;

    return (double) us < d ? us + 1 : us;
}

/* Shared (not process-private) futex on a word in a MAP_SHARED mapping. */
int sys_futex_wait(uint32_t *word, uint32_t expected, int64_t timeout_us);
/* Wakes at most n sleepers; returns how many it woke. */
int sys_futex_wake(uint32_t *word, int n);

/*
 * 1 if process pid runs and, when start != 0, started at `start` (compared
 * on the bits `start_mask` keeps); 0 if it is gone, a zombie, or a younger
 * process that reuses the pid, and for pid 0 or one beyond the kernel's
 * PID_MAX_LIMIT.  A process of another user counts as alive (kill answers
 * EPERM; /proc still shows its start time).  Without /proc the pid alone
 * decides.
 */
int sys_proc_alive(uint32_t pid, uint64_t start, uint64_t start_mask);
/* 1 if a process of pid runs (has not exited: a zombie is 0), whatever
 * its start time (a younger process reusing the pid passes): a pidfd
 * polled, no /proc read where the kernel has pidfd_open (Linux 5.3) */
int sys_proc_running(uint32_t pid);
/* 0 if no process has pid (exited and reaped), for pid 0 or one beyond
 * PID_MAX_LIMIT; 1 else (a zombie, a younger process reusing the pid, a
 * process of another user pass): one kill(pid, 0), no /proc read */
int sys_proc_exists(uint32_t pid);
#ifdef SHMLOCK_TESTING
/* /proc/<pid>/stat reads (shmlock_test_proc_reads) */
extern uint64_t  sys_test_proc_reads;
#endif
uint64_t sys_proc_start(uint32_t pid);

/* The inode of this process's pid namespace (0 if /proc cannot tell). */
uint64_t sys_pidns(void);

/*
 * The inode of this process's time namespace (0 if /proc cannot tell, or
 * the kernel has none: before Linux 5.6).  The monotonic clock of a
 * process reads with its time namespace's offset.
 */
uint64_t sys_timens(void);

/* n random bytes from the kernel; 0 on success. */
int sys_random(void *buf, size_t n);

static inline void
sys_cpu_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

#endif /* SYS_H */
