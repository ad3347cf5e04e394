/*
 * What the C test drivers (ctest/shmlock_test.c, ctest/slot_test.c)
 * share: the headers both use and the checks that end the driver at the
 * first failure, naming the file, the line and the expression.
 *
 *   CHECK(cond)           cond must hold
 *   CHECK_RC(expr, want)  expr must return the status want; a driver that
 *                         defines CHECK_RC_NAME (a const char *(*)(int),
 *                         e.g. shmlock_strerror) before including this
 *                         header gets the statuses named as well
 */

#ifndef SHMLOCK_CTEST_CHECK_H
#define SHMLOCK_CTEST_CHECK_H

#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CHECK_RC_NAME
#define CHECK_RC_NAME  NULL
#endif

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, \
                    #cond);                                                  \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

#define CHECK_RC(expr, want)                                                 \
    do {                                                                     \
        int  rc_ = (expr);                                                   \
        if (rc_ != (want)) {                                                 \
            check_rc_failed(__FILE__, __LINE__, #expr, rc_, (want),          \
                            CHECK_RC_NAME);                                  \
        }                                                                    \
    } while (0)

static inline void __attribute__((noreturn))
check_rc_failed(const char *file, int line, const char *expr, int rc,
    int want, const char *(*name)(int))
{
    if (name != NULL) {
        fprintf(stderr, "%s:%d: %s returned %d (%s), want %d (%s)\n", file,
                line, expr, rc, name(rc), want, name(want));
    } else {
        fprintf(stderr, "%s:%d: %s returned %d, want %d\n", file, line, expr,
                rc, want);
    }
    exit(1);
}

#endif /* SHMLOCK_CTEST_CHECK_H */
