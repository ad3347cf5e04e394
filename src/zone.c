#include "zone.h"
#include "shdict.h"

#include <stddef.h>
#include <string.h>

#define ALIGN64(x)  (((x) + 63) & ~(uint64_t) 63)

/*
 * Sizes the arrays for a zone of `size` bytes.  Each chunk costs its 64
 * bytes, a 4-byte bucket (the bucket count is the chunk count rounded down
 * to a power of two, so chains stay short however small the entries are)
 * and a 1-byte read mark.
 */
static void
zone_geometry(uint64_t size, zone_geometry_t *g)
{
    uint64_t  hdr, waits, fixed, avail, n, b;

    hdr = ALIGN64(sizeof(zone_hdr_t));
    waits = 2 * ZONE_WAIT_WORDS * sizeof(uint32_t);
    fixed = hdr + waits + 3 * 64 + ZONE_CHUNK_SIZE;   /* slack, chunk 0 */
    avail = size > fixed ? size - fixed : 0;

    n = avail / (ZONE_CHUNK_SIZE + sizeof(uint32_t) + 1);
    for (b = 1; b * 2 <= n; b *= 2) { /* void */ }
    n = (avail - b * sizeof(uint32_t)) / (ZONE_CHUNK_SIZE + 1);
    if (n > UINT32_MAX - 1) {
        n = UINT32_MAX - 1;
    }

    g->nbuckets = (uint32_t) b;
    g->buckets_off = hdr;
    g->waits_off = hdr + b * sizeof(uint32_t);
    g->refs_off = ALIGN64(g->waits_off + waits);
    for ( ;; ) {
        g->chunks_off = ALIGN64(g->refs_off + n + 1);
        if (g->chunks_off + (n + 1) * ZONE_CHUNK_SIZE <= size || n == 0) {
            break;
        }
        n--;
    }
    g->nchunks = (uint32_t) n;
}

void
zone_format(char *base, uint64_t size)
{
    zone_hdr_t       *h = (zone_hdr_t *) base;
    zone_t            z;
    zone_geometry_t   g;

    memset(h, 0, sizeof(*h));
    h->layout = ZONE_LAYOUT;
    h->hdr_size = sizeof(zone_hdr_t);
    h->size = size;
    h->chunk_size = ZONE_CHUNK_SIZE;
    h->wait_words = ZONE_WAIT_WORDS;
    zone_geometry(size, &g);
    h->nchunks = g.nchunks;
    h->nbuckets = g.nbuckets;
    h->buckets_off = g.buckets_off;
    h->waits_off = g.waits_off;
    h->refs_off = g.refs_off;
    h->chunks_off = g.chunks_off;
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
    zone_geometry_t    g;

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
    zone_geometry(size, &g);
    if (h->nchunks != g.nchunks || h->nbuckets != g.nbuckets
        || h->buckets_off != g.buckets_off || h->waits_off != g.waits_off
        || h->refs_off != g.refs_off || h->chunks_off != g.chunks_off)
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
    z->refs = (uint8_t *) (base + h->refs_off);
}

_Static_assert(offsetof(zone_hdr_t, dict) + sizeof(dict_state_t)
               - offsetof(zone_hdr_t, mutex) <= 64,
               "the header's hot words share one cache line");
_Static_assert(offsetof(zone_hdr_t, mutex) % 64 == 0,
               "the header's hot line is aligned");
