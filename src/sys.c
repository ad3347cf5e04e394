#define _GNU_SOURCE
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SYS_PID_MAX  (4 * 1024 * 1024)     /* the kernel's PID_MAX_LIMIT */

/*
 * getpid() is a real system call in current glibc, and the start time a
 * read of /proc; the mutex needs both on every lock, so they are cached
 * here and forgotten in the child after a fork (nginx forks its workers
 * after init_by_lua has opened zones): the child computes its own on first
 * use.
 */
uint64_t                sys_cached_self;
static uint64_t         self_start;
static uint64_t         self_pidns;
static pthread_once_t   self_once = PTHREAD_ONCE_INIT;

static void
self_forget(void)
{
    __atomic_store_n(&sys_cached_self, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&self_pidns, 0, __ATOMIC_RELAXED);
}

static void
self_init(void)
{
    pthread_atfork(NULL, NULL, self_forget);
}

uint64_t
sys_self_slow(void)
{
    uint32_t  pid;
    uint64_t  start, self;

    pthread_once(&self_once, self_init);
    pid = (uint32_t) getpid();
    start = sys_proc_start(pid);
    self = (uint64_t) pid | (start << 32);
    /* threads racing here compute the same value */
    __atomic_store_n(&self_start, start, __ATOMIC_RELAXED);
    __atomic_store_n(&sys_cached_self, self, __ATOMIC_RELAXED);
    return self;
}

uint64_t
sys_self_start(void)
{
    sys_self();
    return __atomic_load_n(&self_start, __ATOMIC_RELAXED);
}

uint64_t
sys_pidns(void)
{
    char                buf[64];
    ssize_t             n;
    unsigned long long  ino;
    uint64_t            ns = __atomic_load_n(&self_pidns, __ATOMIC_RELAXED);

    if (ns != 0) {
        return ns;
    }
    sys_self();     /* registers the fork handler that forgets it */
    n = readlink("/proc/self/ns/pid", buf, sizeof(buf) - 1);
    if (n <= 0) {
        return 0;
    }
    buf[n] = '\0';
    if (sscanf(buf, "pid:[%llu]", &ino) != 1) {
        return 0;
    }
    __atomic_store_n(&self_pidns, (uint64_t) ino, __ATOMIC_RELAXED);
    return ino;
}

int
sys_random(void *buf, size_t n)
{
    ssize_t  r;

    do {
        r = getrandom(buf, n, 0);
    } while (r < 0 && errno == EINTR);
    return r == (ssize_t) n ? 0 : -1;
}

int64_t
sys_now_ms(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The kernel's clock of the last tick (vDSO, no system call): the same
 * clock as sys_now_ms, at most one tick behind it, at a few loads. */
int64_t
sys_coarse_ms(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t
sys_now_us(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int
sys_ncpu(void)
{
    static int  ncpu;

    if (ncpu == 0) {
        long  n = sysconf(_SC_NPROCESSORS_ONLN);
        ncpu = n > 0 ? (int) n : 1;
    }
    return ncpu;
}

int
sys_futex_wait(uint32_t *word, uint32_t expected, int64_t timeout_us)
{
    struct timespec  ts, *tsp = NULL;

    if (timeout_us >= 0) {
        ts.tv_sec = timeout_us / 1000000;
        ts.tv_nsec = (timeout_us % 1000000) * 1000;
        tsp = &ts;
    }
    /* FUTEX_WAIT without FUTEX_PRIVATE_FLAG: the word is shared between
     * processes, so the kernel must key it by the mapped page. */
    if (syscall(SYS_futex, word, FUTEX_WAIT, expected, tsp, NULL, 0) == 0) {
        return 0;
    }
    return errno;
}

void
sys_futex_wake(uint32_t *word, int n)
{
    syscall(SYS_futex, word, FUTEX_WAKE, n, NULL, NULL, 0);
}

/* Reads /proc/<pid>/stat: state letter and start time (field 22). */
static int
proc_stat(uint32_t pid, char *state, uint64_t *start)
{
    char                path[64], buf[1024], *p;
    int                 fd, field;
    ssize_t             n;
    unsigned long long  v;

    snprintf(path, sizeof(path), "/proc/%u/stat", pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) {
        return -1;
    }
    buf[n] = '\0';

    /* the command name may hold spaces and parentheses: skip to the last ')' */
    p = strrchr(buf, ')');
    if (p == NULL || p[1] != ' ') {
        return -1;
    }
    p += 2;
    *state = *p;

    for (field = 3; field < 22 && p != NULL; field++) {
        p = strchr(p, ' ');
        if (p != NULL) {
            p++;
        }
    }
    if (p == NULL || sscanf(p, "%llu", &v) != 1) {
        return -1;
    }
    *start = v;
    return 0;
}

uint64_t
sys_proc_start(uint32_t pid)
{
    char      state;
    uint64_t  start;

    return proc_stat(pid, &state, &start) == 0 ? start : 0;
}

int
sys_proc_alive(uint32_t pid, uint64_t start, uint64_t start_mask)
{
    char      state;
    uint64_t  now_start;

    /* beyond the kernel's limit (PID_MAX_LIMIT) it is garbage, not a pid:
     * as a pid_t it might even be negative, a process group to kill() */
    if (pid == 0 || pid > SYS_PID_MAX) {
        return 0;
    }
    if (kill((pid_t) pid, 0) != 0 && errno != EPERM) {
        return 0;
    }
    if (proc_stat(pid, &state, &now_start) != 0) {
        /* gone since kill(), or no /proc: then the pid is all we know */
        return kill((pid_t) pid, 0) == 0 || errno == EPERM;
    }
    /* a killed process stays a zombie until its parent reaps it */
    if (state == 'Z' || state == 'X') {
        return 0;
    }
    return start == 0 || (now_start & start_mask) == (start & start_mask);
}
