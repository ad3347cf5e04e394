#include "token.h"
#include "sys.h"

#include <string.h>

/* "00".."ff": two digits per byte of the serial */
static const char  hex_pairs[513] =
    "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
    "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"
    "404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f"
    "606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f"
    "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f"
    "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
    "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf"
    "e0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";

/* The next block: the first one random (never block 0, which means "not
 * seeded"); threads racing to seed agree on one seed.  The counter lives
 * in sys_proc, which every child finds zeroed: a child, however it was
 * made, draws its own seed rather than count on from its parent's.  (The
 * seed is put in place before the first block is counted: counting from
 * 0 first would make every process start at block 1.) */
static inline uint64_t
token_next_block(void)
{
    uint64_t  r, zero = 0;

    if (__builtin_expect(__atomic_load_n(&sys_proc->tokens, __ATOMIC_RELAXED)
                         == 0, 0))
    {
        if (sys_random(&r, sizeof(r)) != 0) {
            r = (uint64_t) sys_now_us() * 0x9e3779b97f4a7c15ULL;
        }
        r >>= TOKEN_BLOCK_BITS;
        r |= 1;
        __atomic_compare_exchange_n(&sys_proc->tokens, &zero, r, 0,
                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    }
    return __atomic_fetch_add(&sys_proc->tokens, 1, __ATOMIC_RELAXED);
}

uint32_t
token_block(char *dst)
{
    uint64_t  block = token_next_block();
    int       i;

    /* 13 digits: the low 52 bits of the block number */
    dst[TOKEN_HIGH_LEN - 1] = hex_pairs[2 * (block & 0xf) + 1];
    block >>= 4;
    for (i = TOKEN_HIGH_LEN - 3; i >= 0; i -= 2) {
        memcpy(dst + i, hex_pairs + 2 * (block & 0xff), 2);
        block >>= 8;
    }
    return sys_pid();
}

uint32_t
token_ids(void)
{
    uint64_t  block = token_next_block();
    uint32_t  first;

    /* the block's serials, low 32 bits; a block that starts at 0 skips
     * it (0 is no owner) */
    first = (uint32_t) (block << TOKEN_BLOCK_BITS);
    return first == 0 ? 1 : first;
}

TOKEN_TLS token_id_t  token_id;

void
token_id_block(uint32_t pid)
{
    token_id.pid = pid;
    token_id.at = token_ids();
    token_id.end = token_id.at - token_id.at % (1u << TOKEN_BLOCK_BITS)
                   + (1u << TOKEN_BLOCK_BITS);
}
