/*
 * fixed_random.so: an LD_PRELOAD shim for bench/instructions.lua only.
 * LuaJIT (OpenResty's branch) seeds its PRNG from getrandom(2) through
 * syscall(3), and that seed decides string hashes, the placement of
 * machine code and so which traces it records: instruction counts of two
 * runs of the same script differed by up to 7%.  Here getrandom fills
 * its buffer with a fixed pattern, so that callgrind counts the same
 * instructions in every run; every other system call goes through.
 * FIXED_RANDOM_SEED (a number, default 0) picks another fixed pattern:
 * instructions.lua counts each operation under a few and takes the
 * median.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/types.h>

static void
fill(unsigned char *buf, size_t len)
{
    const char  *env = getenv("FIXED_RANDOM_SEED");
    unsigned     seed = env != NULL ? (unsigned) atoi(env) : 0;
    size_t       i;

    for (i = 0; i < len; i++) {
        buf[i] = (unsigned char) (i * 131 + 7 + seed * 29);
    }
}

ssize_t
getrandom(void *buf, size_t len, unsigned int flags)
{
    (void) flags;
    fill(buf, len);
    return (ssize_t) len;
}

long
syscall(long number, ...)
{
    static long  (*real)(long, ...);
    va_list       ap;
    long          a[6];
    int           i;

    /* callers pass at most 6 arguments, in registers on x86-64 */
    va_start(ap, number);
    for (i = 0; i < 6; i++) {
        a[i] = va_arg(ap, long);
    }
    va_end(ap);

    if (number == SYS_getrandom) {
        fill((unsigned char *) a[0], (size_t) a[1]);
        return a[1];
    }
    if (real == NULL) {
        real = (long (*)(long, ...)) dlsym(RTLD_NEXT, "syscall");
    }
    return real(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}
