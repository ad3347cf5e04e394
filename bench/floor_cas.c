/*
 * The floor of an uncontended lock+unlock across processes: one
 * compare-exchange (0 -> 1, acquire) to lock and one release store to
 * unlock, on a word of a MAP_SHARED mapping.  Nothing can be cheaper and
 * still be a lock other processes see.
 *
 * Prints one result line (see bench/lib/bench.lua): the median, min and
 * max ns per pair over the repetitions.
 *
 * usage: floor_cas [reps] [seconds-per-rep]
 */

#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void lock(uint32_t *word)
{
    uint32_t expected;

    do {
        expected = 0;
    } while (!__atomic_compare_exchange_n(word, &expected, 1, 0,
                                          __ATOMIC_ACQUIRE,
                                          __ATOMIC_RELAXED));
}

static void unlock(uint32_t *word)
{
    __atomic_store_n(word, 0, __ATOMIC_RELEASE);
}

/* noinline: the loop must not be folded into nothing */
__attribute__((noinline))
static void run(uint32_t *word, long n)
{
    for (long i = 0; i < n; i++) {
        lock(word);
        unlock(word);
    }
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;

    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 7;
    double target = argc > 2 ? atof(argv[2]) : 0.25;
    double ns[64], t, med;
    uint32_t *word;
    long n = 1000;

    if (reps < 1 || reps > 64) {
        reps = 7;
    }
    word = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (word == MAP_FAILED) {
        perror("mmap");
        return 1;
    }

    for (;;) {                     /* calibrate: one rep ~ target seconds */
        t = now();
        run(word, n);
        t = now() - t;
        if (t >= target / 10) {
            break;
        }
        n *= 4;
    }
    n = (long) (n * target / t);

    for (int i = 0; i < reps; i++) {
        t = now();
        run(word, n);
        ns[i] = (now() - t) * 1e9 / n;
    }
    qsort(ns, reps, sizeof(double), cmp);
    med = reps % 2 ? ns[reps / 2] : (ns[reps / 2 - 1] + ns[reps / 2]) / 2;

    printf("uncont\tfloor_cas\tns\t%.6g\t%.6g\t%.6g\t%d\t"
           "C, one CAS + one release store, %ld iterations per repetition\n",
           med, ns[0], ns[reps - 1], reps, n);
    return 0;
}
