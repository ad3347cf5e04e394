/*
 * The floor of a lock handoff between two processes: a futex mutex on a
 * word of a MAP_SHARED mapping (the three-state mutex of Drepper's
 * "Futexes Are Tricky": 0 free, 1 locked, 2 locked with sleepers), ping-
 * ponged between a parent and a forked child with the protocol of
 * bench/handoff.lua: the holder waits until the other has announced its
 * lock() call, holds `hold_ns` more so that the waiter sleeps in the
 * kernel, writes the release time and unlocks; the waiter timestamps its
 * acquisition.  The difference is the handoff latency: a futex wake, a
 * context switch, nothing else.
 *
 * Prints one sample per round (ns) on stdout.
 *
 * usage: floor_futex rounds hold_ns
 */

#define _GNU_SOURCE
#include <linux/futex.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    uint32_t          word;          /* the mutex */
    volatile int64_t  ts;            /* release time, ns */
    volatile int64_t  waiting;       /* round the waiter announced */
    volatile int64_t  acquired;      /* round last acquired */
    int64_t           samples[];     /* by round */
} shared_t;

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* shared, not FUTEX_PRIVATE_FLAG: the word is in two processes */
static void futex_wait(uint32_t *word, uint32_t val)
{
    syscall(SYS_futex, word, FUTEX_WAIT, val, NULL, NULL, 0);
}

static void futex_wake(uint32_t *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE, 1, NULL, NULL, 0);
}

static void lock(uint32_t *word)
{
    uint32_t c = 0;

    if (__atomic_compare_exchange_n(word, &c, 1, 0, __ATOMIC_ACQUIRE,
                                    __ATOMIC_RELAXED)) {
        return;
    }
    /* mark "sleepers" (2) so that unlock knows to wake */
    if (c != 2) {
        c = __atomic_exchange_n(word, 2, __ATOMIC_ACQUIRE);
    }
    while (c != 0) {
        futex_wait(word, 2);
        c = __atomic_exchange_n(word, 2, __ATOMIC_ACQUIRE);
    }
}

static void unlock(uint32_t *word)
{
    if (__atomic_exchange_n(word, 0, __ATOMIC_RELEASE) == 2) {
        futex_wake(word);
    }
}

static void wait_for(volatile int64_t *v, int64_t value)
{
    int64_t deadline = now_ns() + (int64_t) 30 * 1000000000;

    while (*v != value) {
        if (now_ns() > deadline) {
            fprintf(stderr, "floor_futex: timed out\n");
            _exit(1);
        }
    }
}

static void spin_ns(int64_t ns)
{
    int64_t deadline = now_ns() + ns;

    while (now_ns() < deadline) {
    }
}

/* first = 1: holds in odd rounds (and at the start) */
static void player(shared_t *s, int first, long rounds, int64_t hold)
{
    if (first) {
        lock(&s->word);
        s->acquired = 0;
    }
    for (long r = 1; r <= rounds; r++) {
        if (r % 2 == first) {
            wait_for(&s->waiting, r);
            spin_ns(hold);
            s->ts = now_ns();
            unlock(&s->word);
        } else {
            wait_for(&s->acquired, r - 1);
            s->waiting = r;
            lock(&s->word);
            s->samples[r] = now_ns() - s->ts;
            s->acquired = r;
        }
    }
    if (rounds % 2 != first) {
        unlock(&s->word);
    }
}

int main(int argc, char **argv)
{
    long rounds = argc > 1 ? atol(argv[1]) : 1000;
    int64_t hold = argc > 2 ? atoll(argv[2]) : 100000;
    shared_t *s;
    int status;
    pid_t pid;

    if (rounds < 1) {
        rounds = 1000;
    }
    s = mmap(NULL, sizeof(shared_t) + (rounds + 1) * sizeof(int64_t),
             PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (s == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    s->acquired = -1;

    pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        player(s, 0, rounds, hold);
        _exit(0);
    }
    player(s, 1, rounds, hold);
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)
        || WEXITSTATUS(status) != 0)
    {
        fprintf(stderr, "floor_futex: child failed\n");
        return 1;
    }

    for (long r = 1; r <= rounds; r++) {
        printf("%lld\n", (long long) s->samples[r]);
    }
    return 0;
}
