#include "zone.h"
#include "shdict.h"
#include "spill.h"
#include "shmlock.h"
#include "sys.h"

#include <stddef.h>
#include <string.h>

#define ZONE_ALIGN64(x)  (((x) + 63) & ~(uint64_t) 63)

/* Where things are in a zone of a given size and shard count. */
typedef struct {
    uint32_t  nshards;
    uint64_t  waits_off;
    uint64_t  shards_off;
    uint64_t  shard_size;
    uint32_t  nchunks;
    uint32_t  nbuckets;
    uint64_t  buckets_off;
    uint64_t  refs_off;
    uint64_t  chunks_off;
    uint32_t  nslots;
    uint64_t  slots_off;
} zone_geometry_t;

uint32_t
zone_shards_for(uint64_t size, uint32_t want)
{
    uint32_t  n = 1;

    if (want == 0) {
        while (n * 2 <= ZONE_SHARDS_MAX
               && size / (n * 2) >= ZONE_SHARD_AUTO_MIN)
        {
            n *= 2;
        }
        return n;
    }
    if (want == 1) {
        return 1;
    }
    if (want > ZONE_SHARDS_MAX || (want & (want - 1)) != 0
        || size / want < ZONE_SHARD_MIN)
    {
        return 0;
    }
    return want;
}

/*
 * Sizes the zone for `size` bytes: the wait and generation words, then
 * equal shards.  In
 * a shard, each chunk costs its 64 bytes, a 4-byte bucket (the bucket
 * count is the chunk count rounded down to a power of two, so chains stay
 * short however small the entries are) and a 1-byte read mark.
 */
static void
zone_geometry(uint64_t size, uint32_t nshards, zone_geometry_t *g)
{
    uint64_t  hdr, waits, shdr, fixed, avail, n, b, stride;

    hdr = ZONE_ALIGN64(sizeof(zone_hdr_t));
    waits = (2 * ZONE_WAIT_WORDS + ZONE_GEN_WORDS) * sizeof(uint32_t);
    g->nshards = nshards;
    g->waits_off = hdr;
    g->shards_off = ZONE_ALIGN64(hdr + waits);
    stride = size > g->shards_off ? (size - g->shards_off) / g->nshards : 0;
    stride &= ~(uint64_t) 63;
    g->shard_size = stride;

    shdr = ZONE_ALIGN64(sizeof(shard_hdr_t));
    fixed = shdr + 2 * 64 + SHARD_CHUNK_SIZE;   /* slack, chunk 0 */
    avail = stride > fixed ? stride - fixed : 0;

    /* the lock slots, at the shard's end */
    for (b = ZONE_SLOTS_MIN;
         SLOT_TABLE_BYTES(b * 2) * ZONE_SLOT_SHARE <= avail
         && b * 2 <= ((uint64_t) 1 << 24);
         b *= 2)
    { /* void */ }
    g->nslots = (uint32_t) b;
    fixed = SLOT_TABLE_BYTES(b);
    g->slots_off = stride > fixed ? stride - fixed : 0;
    avail = avail > fixed ? avail - fixed : 0;

    n = avail / (SHARD_CHUNK_SIZE + sizeof(uint32_t) + 1);
    for (b = 1; b * 2 <= n; b *= 2) { /* void */ }
    n = avail > b * sizeof(uint32_t)
        ? (avail - b * sizeof(uint32_t)) / (SHARD_CHUNK_SIZE + 1) : 0;
    /* below 2^27: a ticket names a spilled slot by its chunk in 27 bits
     * (shmlock_slot.c; a shard uses at most 8 GiB) */
    if (n > ((uint64_t) 1 << 27) - 1) {
        n = ((uint64_t) 1 << 27) - 1;
    }

    g->nbuckets = (uint32_t) b;
    g->buckets_off = shdr;
    g->refs_off = ZONE_ALIGN64(shdr + b * sizeof(uint32_t));
    for ( ;; ) {
        g->chunks_off = ZONE_ALIGN64(g->refs_off + n + 1);
        if (g->chunks_off + (n + 1) * SHARD_CHUNK_SIZE <= g->slots_off
            || n == 0)
        {
            break;
        }
        n--;
    }
    g->nchunks = (uint32_t) n;
}

void
zone_format(char *base, uint64_t size, uint32_t nshards)
{
    zone_hdr_t       *h = (zone_hdr_t *) base;
    shmlock_zone_t    zone;
    zone_geometry_t   g;
    uint32_t          i;

    memset(h, 0, sizeof(*h));
    h->layout = ZONE_LAYOUT;
    h->hdr_size = sizeof(zone_hdr_t);
    h->size = size;
    h->chunk_size = SHARD_CHUNK_SIZE;
    h->wait_words = ZONE_WAIT_WORDS;
    h->shard_hdr_size = sizeof(shard_hdr_t);
    zone_geometry(size, nshards, &g);
    h->nshards = g.nshards;
    h->waits_off = g.waits_off;
    h->shards_off = g.shards_off;
    h->shard_size = g.shard_size;
    h->nchunks = g.nchunks;
    h->nbuckets = g.nbuckets;
    h->buckets_off = g.buckets_off;
    h->refs_off = g.refs_off;
    h->chunks_off = g.chunks_off;
    h->nslots = g.nslots;
    h->slots_off = g.slots_off;
    h->pidns = sys_pidns();
    h->timens = (uint32_t) sys_timens();

    zone_attach(&zone, base, size);
    memset(zone.wait_seq, 0,
           (2 * ZONE_WAIT_WORDS + ZONE_GEN_WORDS) * sizeof(uint32_t));
    for (i = 0; i < zone.nshards; i++) {
        shdict_format(&zone.shard[i]);
        slot_format(zone.shard[i].slots.hdr, zone.shard[i].slots.slots,
                    g.nslots);
    }

    /* the magic goes last: a file without it is never taken for a zone */
    memcpy(h->magic, ZONE_MAGIC, sizeof(ZONE_MAGIC));
}

int
zone_check(const char *base, uint64_t size)
{
    const zone_hdr_t  *h = (const zone_hdr_t *) base;
    zone_geometry_t    g;

    if (size < SHMLOCK_MIN_SIZE || size < sizeof(zone_hdr_t)) {
        return -1;
    }
    if (memcmp(h->magic, ZONE_MAGIC, sizeof(ZONE_MAGIC)) != 0
        || h->layout != ZONE_LAYOUT || h->hdr_size != sizeof(zone_hdr_t)
        || h->size != size || h->chunk_size != SHARD_CHUNK_SIZE
        || h->wait_words != ZONE_WAIT_WORDS
        || h->shard_hdr_size != sizeof(shard_hdr_t))
    {
        return -1;
    }

    /* the geometry is a function of the size and the shard count:
     * anything else was tampered */
    if (zone_shards_for(size, h->nshards) != h->nshards) {
        return -1;
    }
    zone_geometry(size, h->nshards, &g);
    if (h->nshards != g.nshards || h->waits_off != g.waits_off
        || h->shards_off != g.shards_off || h->shard_size != g.shard_size
        || h->nchunks != g.nchunks || h->nbuckets != g.nbuckets
        || h->buckets_off != g.buckets_off || h->refs_off != g.refs_off
        || h->chunks_off != g.chunks_off || h->nslots != g.nslots
        || h->slots_off != g.slots_off)
    {
        return -1;
    }
    return 0;
}

void
zone_attach(shmlock_zone_t *zone, char *base, uint64_t size)
{
    static uint64_t  serials;
    zone_hdr_t      *h = (zone_hdr_t *) base;
    shard_t         *sh;
    char            *s;
    uint32_t         i, bits;

    zone->serial = __atomic_add_fetch(&serials, 1, __ATOMIC_RELAXED);
    zone->hdr = h;
    zone->base = base;
    zone->size = size;
    zone->wait_seq = (uint32_t *) (base + h->waits_off);
    zone->wait_sleepers = zone->wait_seq + ZONE_WAIT_WORDS;
    zone->gen = zone->wait_sleepers + ZONE_WAIT_WORDS;
    zone->nshards = h->nshards;
    for (bits = 0; (1u << bits) < h->nshards; bits++) { /* void */ }
    zone->shard_shift = 32 - bits;

    for (i = 0; i < h->nshards; i++) {
        s = base + h->shards_off + i * h->shard_size;
        sh = &zone->shard[i];
        sh->hdr = (shard_hdr_t *) s;
        sh->buckets = (uint32_t *) (s + h->buckets_off);
        sh->bucket_mask = h->nbuckets - 1;
        sh->nchunks = h->nchunks;
        sh->chunks = s + h->chunks_off;
        sh->refs = (uint8_t *) (s + h->refs_off);
        sh->broken = 0;
        sh->scratch = 0;
        slot_attach(&sh->slots, (slot_hdr_t *) (s + h->slots_off),
                    (slot_t *) (s + h->slots_off + sizeof(slot_hdr_t)),
                    h->nslots, -1);
        spill_attach(sh);
    }
}
