#include "zone.h"
#include "shdict.h"

#include <string.h>

/*
 * Sizes the three arrays for a zone of `size` bytes: one 4-byte bucket per
 * chunk (rounded down to a power of two) keeps chains short however small
 * the entries are, at a cost of 1/16 of the chunk area.
 */
static void
zone_geometry(uint64_t size, uint32_t *nchunks, uint32_t *nbuckets,
    uint64_t *buckets_off, uint64_t *waits_off, uint64_t *chunks_off)
{
    uint64_t  hdr, avail, n, b;

    hdr = (sizeof(zone_hdr_t) + 63) & ~(uint64_t) 63;
    avail = size - hdr - 2 * ZONE_WAIT_WORDS * sizeof(uint32_t)
            - ZONE_CHUNK_SIZE;   /* chunk 0 is never used */
    n = avail / (ZONE_CHUNK_SIZE + sizeof(uint32_t));
    if (n > UINT32_MAX - 1) {
        n = UINT32_MAX - 1;
    }
    for (b = 1; b * 2 <= n; b *= 2) { /* void */ }

    /* the buckets take b (<= n) words: give leftover room back to chunks */
    n = (avail - b * sizeof(uint32_t)) / ZONE_CHUNK_SIZE;
    if (n > UINT32_MAX - 1) {
        n = UINT32_MAX - 1;
    }

    *nchunks = (uint32_t) n;
    *nbuckets = (uint32_t) b;
    *buckets_off = hdr;
    *waits_off = hdr + b * sizeof(uint32_t);
    *chunks_off = (*waits_off + 2 * ZONE_WAIT_WORDS * sizeof(uint32_t) + 63)
                  & ~(uint64_t) 63;
    if (*chunks_off + (n + 1) * ZONE_CHUNK_SIZE > size) {
        n = (size - *chunks_off) / ZONE_CHUNK_SIZE - 1;
        *nchunks = (uint32_t) n;
    }
}

void
zone_format(char *base, uint64_t size)
{
    zone_hdr_t  *h = (zone_hdr_t *) base;
    zone_t       z;

    memset(h, 0, sizeof(*h));
    h->layout = ZONE_LAYOUT;
    h->hdr_size = sizeof(zone_hdr_t);
    h->size = size;
    h->chunk_size = ZONE_CHUNK_SIZE;
    h->wait_words = ZONE_WAIT_WORDS;
    zone_geometry(size, &h->nchunks, &h->nbuckets, &h->buckets_off,
                  &h->waits_off, &h->chunks_off);
    shmtx_init(&h->mutex);

    zone_attach(&z, base, size);
    shdict_format(&z);

    /* the magic goes last: a file without it is never taken for a zone */
    memcpy(h->magic, ZONE_MAGIC, sizeof(ZONE_MAGIC));
}

int
zone_check(const char *base, uint64_t size)
{
    const zone_hdr_t  *h = (const zone_hdr_t *) base;
    uint32_t           nchunks, nbuckets;
    uint64_t           boff, woff, coff;

    if (size < SHDICT_MIN_ZONE || size < sizeof(zone_hdr_t)) {
        return -1;
    }
    if (memcmp(h->magic, ZONE_MAGIC, sizeof(ZONE_MAGIC)) != 0
        || h->layout != ZONE_LAYOUT || h->hdr_size != sizeof(zone_hdr_t)
        || h->size != size || h->chunk_size != ZONE_CHUNK_SIZE
        || h->wait_words != ZONE_WAIT_WORDS)
    {
        return -1;
    }

    /* the geometry is a function of the size: anything else was tampered */
    zone_geometry(size, &nchunks, &nbuckets, &boff, &woff, &coff);
    if (h->nchunks != nchunks || h->nbuckets != nbuckets
        || h->buckets_off != boff || h->waits_off != woff
        || h->chunks_off != coff)
    {
        return -1;
    }
    return 0;
}

void
zone_attach(zone_t *z, char *base, uint64_t size)
{
    zone_hdr_t  *h = (zone_hdr_t *) base;

    z->hdr = h;
    z->base = base;
    z->size = size;
    z->buckets = (uint32_t *) (base + h->buckets_off);
    z->bucket_mask = h->nbuckets - 1;
    z->nchunks = h->nchunks;
    z->chunks = base + h->chunks_off;
    z->wait_seq = (uint32_t *) (base + h->waits_off);
    z->wait_sleepers = z->wait_seq + ZONE_WAIT_WORDS;
}
