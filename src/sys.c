#define _GNU_SOURCE
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SYS_PID_MAX  (4 * 1024 * 1024)     /* the kernel's PID_MAX_LIMIT */

/*
 * getpid() is a real system call in current glibc, and the start time a
 * read of /proc; the mutex needs both on every lock, so they are cached in
 * sys_proc, which every child finds zeroed (sys.h).  A child that went on
 * with its parent's identity would own the parent's shard mutexes and mint
 * the parent's lock tokens: nginx forks its workers after init_by_lua has
 * opened zones, a prefork server after its parent locked, and a raw fork
 * runs no handler at all.
 */
static sys_proc_t   proc_static;
sys_proc_t         *sys_proc = &proc_static;

/* the fallback where the kernel cannot wipe the page: fork() only */
static void
proc_forget(void)
{
    memset(sys_proc, 0, sizeof(*sys_proc));
}

__attribute__((constructor)) static void
proc_map(void)
{
    long    page = sysconf(_SC_PAGESIZE);
    size_t  size = page > (long) sizeof(sys_proc_t)
                   ? (size_t) page : sizeof(sys_proc_t);
    void   *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    if (p != MAP_FAILED) {
        if (madvise(p, size, MADV_WIPEONFORK) == 0) {
            sys_proc = p;
            return;
        }
        munmap(p, size);
    }
    pthread_atfork(NULL, NULL, proc_forget);
}

uint64_t
sys_self_slow(void)
{
    uint32_t  pid = (uint32_t) getpid();
    uint64_t  start = sys_proc_start(pid);
    uint64_t  self = (uint64_t) pid | (start << 32);

    /* threads racing here compute the same values; self goes last, so
     * that who sees it sees the others */
    __atomic_store_n(&sys_proc->start, start, __ATOMIC_RELAXED);
    __atomic_store_n(&sys_proc->pid, (int32_t) pid, __ATOMIC_RELAXED);
    __atomic_store_n(&sys_proc->self, self, __ATOMIC_RELEASE);
    return self;
}

uint64_t
sys_self_start(void)
{
    if (__atomic_load_n(&sys_proc->self, __ATOMIC_ACQUIRE) == 0) {
        sys_self_slow();
    }
    return __atomic_load_n(&sys_proc->start, __ATOMIC_RELAXED);
}

/* The inode of /proc/self/ns/<what> ("<what>:[<inode>]"), cached in *slot
 * (which a child finds zeroed); 0 if /proc cannot tell. */
static uint64_t
ns_inode(const char *what, uint64_t *slot)
{
    char                path[32], buf[64], fmt[32];
    ssize_t             n;
    unsigned long long  ino;
    uint64_t            ns = __atomic_load_n(slot, __ATOMIC_RELAXED);

    if (ns != 0) {
        return ns;
    }
    snprintf(path, sizeof(path), "/proc/self/ns/%s", what);
    n = readlink(path, buf, sizeof(buf) - 1);
    if (n <= 0) {
        return 0;
    }
    buf[n] = '\0';
    snprintf(fmt, sizeof(fmt), "%s:[%%llu]", what);
    if (sscanf(buf, fmt, &ino) != 1) {
        return 0;
    }
    __atomic_store_n(slot, (uint64_t) ino, __ATOMIC_RELAXED);
    return ino;
}

uint64_t
sys_pidns(void)
{
    return ns_inode("pid", &sys_proc->pidns);
}

uint64_t
sys_timens(void)
{
    return ns_inode("time", &sys_proc->timens);
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
sys_now_us(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000000 + (uint32_t) ts.tv_nsec / 1000u;
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

int
sys_futex_wake(uint32_t *word, int n)
{
    long  r = syscall(SYS_futex, word, FUTEX_WAKE, n, NULL, NULL, 0);

    return r > 0 ? (int) r : 0;
}

#ifdef SHMLOCK_TESTING
uint64_t  sys_test_proc_reads;
#endif

/* Reads /proc/<pid>/stat: state letter and start time (field 22). */
static int
proc_stat(uint32_t pid, char *state, uint64_t *start)
{
    char                path[64], buf[1024], *p;
    int                 fd, field;
    ssize_t             n;
    unsigned long long  v;

#ifdef SHMLOCK_TESTING
    __atomic_add_fetch(&sys_test_proc_reads, 1, __ATOMIC_RELAXED);
#endif
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

/*
 * A pidfd of the process, polled: readable once it has exited, a zombie
 * included (the kernel's thread_group_exited), which kill() cannot tell;
 * four cheap system calls instead of /proc's path walk and formatting.
 */
int
sys_proc_running(uint32_t pid)
{
#ifdef SYS_pidfd_open
    struct pollfd  p;
    int            fd, r;
#endif

    if (pid == 0 || pid > SYS_PID_MAX) {
        return 0;
    }
#ifdef SYS_pidfd_open
    fd = (int) syscall(SYS_pidfd_open, (pid_t) pid, 0);
    if (fd >= 0) {
        p.fd = fd;
        p.events = POLLIN;
        p.revents = 0;
        r = poll(&p, 1, 0);
        close(fd);
        if (r >= 0) {
            return r == 0;
        }
    } else if (errno == ESRCH) {
        return 0;
    }
#endif
    /* no pidfd (an older kernel, no fd left): /proc tells a zombie */
    return sys_proc_alive(pid, 0, 0);
}

int
sys_proc_exists(uint32_t pid)
{
    if (pid == 0 || pid > SYS_PID_MAX) {
        return 0;
    }
    return kill((pid_t) pid, 0) == 0 || errno == EPERM;
}

int
sys_proc_alive(uint32_t pid, uint64_t start, uint64_t start_mask)
{
    char      state;
    uint64_t  now_start, self_start;

    /* beyond the kernel's limit (PID_MAX_LIMIT) it is garbage, not a pid:
     * as a pid_t it might even be negative, a process group to kill() */
    if (pid == 0 || pid > SYS_PID_MAX) {
        return 0;
    }
    /* this very process (a lock of ours seen by a waiter of ours, a failed
     * trylock): no /proc read; our start time tells us from an earlier
     * process of our pid, as /proc would (where /proc told it) */
    if (pid == sys_pid()) {
        self_start = sys_self_start();
        if (self_start != 0) {
            return start == 0
                   || (self_start & start_mask) == (start & start_mask);
        }
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
