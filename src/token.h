/*
 * token: owner tokens of locks, "<pid>:<start>:<serial>".
 *
 * pid and start (the process's start time in clock ticks since boot)
 * name the process even after its pid is reused; serial is 16 hex digits
 * from one counter in this library, shared by every Lua VM and thread of
 * the process, so that no two acquisitions on the host get the same token
 * however many VMs a process runs (nginx with lua_code_cache off, http and
 * stream Lua in one worker, an embedding host).  The counter starts at a
 * random value, so that two copies of the library loaded in one process
 * (from two paths) do not count the same serials; it lives in sys.h's
 * sys_proc, so that every child starts a counter of its own (and its
 * tokens carry its own pid), however it was made.
 *
 * A VM takes serials in blocks of TOKEN_BLOCK: here it gets a block's 13
 * high digits, and it counts the 3 low ones itself, so that a token costs
 * no call into C but once per block.
 */

#ifndef TOKEN_H
#define TOKEN_H

#include <stdint.h>

#define TOKEN_BLOCK_BITS  12
#define TOKEN_HIGH_LEN    13    /* hex digits of a block number */

/* Writes the next free block's 13 hex digits to dst; returns the pid of
 * this process (the caller's prefix is stale if made for another). */
uint32_t token_block(char *dst);
/* The first id of the next free block, as 32-bit numbers: the low 32
 * bits of its serials (never 0: a block starting at 0 starts at 1); the
 * block holds 2^TOKEN_BLOCK_BITS ids from there. */
uint32_t token_ids(void);

/*
 * Owner ids for the lock calls, one at a time: this thread's block of
 * them (initial-exec TLS: a load relative to the thread pointer, no
 * __tls_get_addr call per acquire), a fresh block when it is used up or
 * when the process is another (a child: the block it inherited is its
 * parent's).  Never 0.
 */
#define TOKEN_TLS  __thread __attribute__((tls_model("initial-exec")))

/* (one struct: one GOT load of its offset reaches all three words) */
typedef struct {
    uint32_t  at, end, pid;
} token_id_t;

extern TOKEN_TLS token_id_t  token_id;

void token_id_block(uint32_t pid);

/* whether token_next_id(pid) draws from the block this thread has */
static inline int
token_id_ready(uint32_t pid)
{
    return __builtin_expect(token_id.at != token_id.end
                            && token_id.pid == pid, 1);
}

static inline uint32_t
token_next_id(uint32_t pid)
{
    if (!token_id_ready(pid)) {
        token_id_block(pid);
    }
    return token_id.at++;
}

#endif /* TOKEN_H */
