#define _GNU_SOURCE
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/*
 * getpid() is a real system call in current glibc; the mutex needs the pid
 * on every lock, so it is cached here and refreshed in the child after a
 * fork (nginx forks its workers after init_by_lua has opened zones).
 */
uint32_t  sys_cached_pid;
static pthread_once_t  pid_once = PTHREAD_ONCE_INIT;

static void
pid_refresh(void)
{
    sys_cached_pid = (uint32_t) getpid();
}

static void
pid_init(void)
{
    pid_refresh();
    pthread_atfork(NULL, NULL, pid_refresh);
}

uint32_t
sys_pid_slow(void)
{
    pthread_once(&pid_once, pid_init);
    return sys_cached_pid;
}

int64_t
sys_now_ms(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
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
sys_pid_alive(uint32_t pid)
{
    char      state;
    uint64_t  start;

    if (pid == 0) {
        return 0;
    }
    if (kill((pid_t) pid, 0) != 0) {
        /* EPERM: it exists but belongs to another user; assume alive */
        return errno == EPERM;
    }
    /* a killed process stays a zombie until its parent reaps it */
    if (proc_stat(pid, &state, &start) == 0 && (state == 'Z' || state == 'X')) {
        return 0;
    }
    return 1;
}
