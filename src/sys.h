/*
 * sys: the few OS services the core needs, wrapped once: the process's pid
 * (cached, refreshed after fork), the monotonic clock, futexes on shared
 * memory, and process liveness.
 */

#ifndef SYS_H
#define SYS_H

#include <stdint.h>

extern uint32_t  sys_cached_pid;
uint32_t sys_pid_slow(void);

static inline uint32_t
sys_pid(void)
{
    uint32_t  pid = sys_cached_pid;

    return __builtin_expect(pid != 0, 1) ? pid : sys_pid_slow();
}
int64_t sys_now_ms(void);
int64_t sys_now_us(void);
int sys_ncpu(void);

/* Shared (not process-private) futex on a word in a MAP_SHARED mapping. */
int sys_futex_wait(uint32_t *word, uint32_t expected, int64_t timeout_us);
void sys_futex_wake(uint32_t *word, int n);

/* 0 = gone (no such process, a zombie, or another user's), 1 = alive. */
int sys_pid_alive(uint32_t pid);
uint64_t sys_proc_start(uint32_t pid);

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
