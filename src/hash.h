/*
 * hash: a fast 32-bit hash of a byte string (8 bytes per multiply, then a
 * murmur-style finaliser), used for the shards, the buckets and the wait
 * words; and the equality test that goes with it, with the same loads.
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

static inline uint64_t
hash_load64(const char *p)
{
    uint64_t  v;

    memcpy(&v, p, 8);
    return v;
}

static inline uint64_t
hash_load32(const char *p)
{
    uint32_t  v;

    memcpy(&v, p, 4);
    return v;
}

/*
 * The tail is read with overlapping loads rather than copied byte by byte
 * into a word: the byte copy costs a store-forwarding stall on every call.
 */
static inline uint32_t
hash_bytes(const char *p, size_t n)
{
    uint64_t  h = 0x9e3779b97f4a7c15ULL
                  ^ ((uint64_t) n * 0xff51afd7ed558ccdULL);
    uint64_t  k;
    size_t    i;

    if (n >= 8) {
        for (i = 0; i + 8 < n; i += 8) {
            h = hash_mix(h, hash_load64(p + i));
        }
        k = hash_load64(p + n - 8);
    } else if (n >= 4) {
        k = hash_load32(p) | (hash_load32(p + n - 4) << 32);
    } else if (n > 0) {
        k = (uint64_t) (unsigned char) p[0]
            | ((uint64_t) (unsigned char) p[n >> 1] << 8)
            | ((uint64_t) (unsigned char) p[n - 1] << 16);
    } else {
        k = 0;
    }
    h = hash_mix(h, k);
    h ^= h >> 32;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return (uint32_t) h;
}

/* Equality of short byte strings without a call to memcmp. */
static inline int
hash_equal(const char *a, const char *b, size_t n)
{
    size_t  i;

    if (n >= 8) {
        for (i = 0; i + 8 < n; i += 8) {
            if (hash_load64(a + i) != hash_load64(b + i)) {
                return 0;
            }
        }
        return hash_load64(a + n - 8) == hash_load64(b + n - 8);
    }
    if (n >= 4) {
        return hash_load32(a) == hash_load32(b)
               && hash_load32(a + n - 4) == hash_load32(b + n - 4);
    }
    /* 1 to 3 bytes: the first, middle and last cover them all, as in
     * hash_bytes */
    return n == 0
           || (a[0] == b[0] && a[n >> 1] == b[n >> 1] && a[n - 1] == b[n - 1]);
}

#endif /* HASH_H */
