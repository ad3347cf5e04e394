#include "token.h"
#include "sys.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static uint64_t        token_serial;
static pthread_once_t  token_once = PTHREAD_ONCE_INIT;

/* The "<pid>:<start>:" of the process a thread last made a token for. */
static __thread uint64_t  prefix_self;
static __thread char      prefix[48];
static __thread size_t    prefix_len;

static void
token_seed(void)
{
    uint64_t  r;

    if (sys_random(&r, sizeof(r)) != 0) {
        r = (uint64_t) sys_now_us() * 0x9e3779b97f4a7c15ULL;
    }
    __atomic_store_n(&token_serial, r, __ATOMIC_RELAXED);
}

static void
token_prefix(uint64_t self)
{
    int  n;

    n = snprintf(prefix, sizeof(prefix), "%u:%llu:", (uint32_t) self,
                 (unsigned long long) sys_self_start());
    prefix_len = n > 0 && (size_t) n < sizeof(prefix) ? (size_t) n : 0;
    prefix_self = self;
}

size_t
token_next(char *buf)
{
    static const char  hex[] = "0123456789abcdef";
    uint64_t           self = sys_self(), serial;
    int                i;

    pthread_once(&token_once, token_seed);
    if (prefix_self != self) {
        token_prefix(self);
    }
    serial = __atomic_fetch_add(&token_serial, 1, __ATOMIC_RELAXED);

    memcpy(buf, prefix, prefix_len);
    buf += prefix_len;
    for (i = 15; i >= 0; i--) {
        buf[i] = hex[serial & 15];
        serial >>= 4;
    }
    return prefix_len + 16;
}
