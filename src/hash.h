/*
 * hash: a fast 32-bit hash of a byte string (8 bytes per multiply, then a
 * murmur-style finaliser), used for the buckets and the wait words.
 */

#ifndef HASH_H
#define HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint64_t
hash_mix(uint64_t h, uint64_t k)
{
    h = (h ^ k) * 0x9fb21c651e98df25ULL;
    return h ^ (h >> 29);
}

static inline uint32_t
hash_bytes(const char *p, size_t n)
{
    uint64_t  h = 0x9e3779b97f4a7c15ULL ^ ((uint64_t) n * 0xff51afd7ed558ccdULL);
    uint64_t  k;

    for ( ; n >= 8; p += 8, n -= 8) {
        memcpy(&k, p, 8);
        h = hash_mix(h, k);
    }
    if (n > 0) {
        k = 0;
        memcpy(&k, p, n);
        h = hash_mix(h, k);
    }
    h ^= h >> 32;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return (uint32_t) h;
}

#endif /* HASH_H */
