#include "chunk.h"
#include "hash.h"

#include <string.h>

_Static_assert(sizeof(entry_t) == ZONE_CHUNK_SIZE, "entry_t is one chunk");
_Static_assert(sizeof(cont_t) == ZONE_CHUNK_SIZE, "cont_t is one chunk");

void
chunk_format(zone_t *z)
{
    dict_state_t  *d = &z->hdr->dict;
    uint32_t       i;

    for (i = 1; i < z->nchunks; i++) {
        ((cont_t *) chunk_at(z, i))->next = i + 1;
    }
    if (z->nchunks > 0) {
        ((cont_t *) chunk_at(z, z->nchunks))->next = 0;
    }
    d->free_head = z->nchunks > 0 ? 1 : 0;
    d->free_count = z->nchunks;
}

uint32_t
chunk_alloc(zone_t *z, uint32_t n)
{
    dict_state_t  *d = &z->hdr->dict;
    uint32_t       first, last, i;
    cont_t        *c;

    if (n == 0 || d->free_count < n) {
        return 0;
    }
    first = last = d->free_head;
    for (i = 1; i < n; i++) {
        last = ((cont_t *) chunk_at(z, last))->next;
    }
    c = chunk_at(z, last);
    ZW32(z, d->free_head, c->next);
    ZW32(z, c->next, 0);
    ZW32(z, d->free_count, d->free_count - n);
    return first;
}

void
chunk_free(zone_t *z, uint32_t first)
{
    dict_state_t  *d = &z->hdr->dict;
    uint32_t       last = first, n = 1;
    cont_t        *c;

    for (c = chunk_at(z, last); c->next != 0; c = chunk_at(z, last)) {
        last = c->next;
        n++;
    }
    ZW32(z, c->next, d->free_head);
    ZW32(z, d->free_head, first);
    ZW32(z, d->free_count, d->free_count + n);
}

/*
 * Positions (chunk, offset within its data) for byte `off` of an entry's
 * stream; the stream is the head's 16 data bytes, then 60 per chunk.
 */
static uint32_t
chunk_seek(const zone_t *z, uint32_t head, size_t off, size_t *in)
{
    uint32_t  c;

    if (off < CHUNK_HEAD_DATA) {
        *in = off;
        return head;
    }
    off -= CHUNK_HEAD_DATA;
    c = ((const cont_t *) chunk_at(z, head))->next;
    while (off >= CHUNK_CONT_DATA) {
        c = ((const cont_t *) chunk_at(z, c))->next;
        off -= CHUNK_CONT_DATA;
    }
    *in = off;
    return c;
}

static char *
chunk_data(const zone_t *z, uint32_t c, uint32_t head, size_t *room,
    size_t in)
{
    if (c == head) {
        *room = CHUNK_HEAD_DATA - in;
        return entry_at(z, c)->data + in;
    }
    *room = CHUNK_CONT_DATA - in;
    return ((cont_t *) chunk_at(z, c))->data + in;
}

void
chunk_write(zone_t *z, uint32_t head, size_t off, const char *src, size_t len)
{
    size_t    in, room, n;
    uint32_t  c = chunk_seek(z, head, off, &in);
    char     *p;

    while (len > 0) {
        p = chunk_data(z, c, head, &room, in);
        n = len < room ? len : room;
        memcpy(p, src, n);
        src += n;
        len -= n;
        in = 0;
        c = ((cont_t *) chunk_at(z, c))->next;
    }
}

void
chunk_read(const zone_t *z, uint32_t head, size_t off, char *dst, size_t len)
{
    size_t    in, room, n;
    uint32_t  c = chunk_seek(z, head, off, &in);
    char     *p;

    while (len > 0) {
        p = chunk_data(z, c, head, &room, in);
        n = len < room ? len : room;
        memcpy(dst, p, n);
        dst += n;
        len -= n;
        in = 0;
        c = ((const cont_t *) chunk_at(z, c))->next;
    }
}

int
chunk_equal(const zone_t *z, uint32_t head, size_t off, const char *s,
    size_t len)
{
    size_t    in, room, n;
    uint32_t  c = chunk_seek(z, head, off, &in);
    char     *p;

    while (len > 0) {
        p = chunk_data(z, c, head, &room, in);
        n = len < room ? len : room;
        if (!bytes_equal(p, s, n)) {
            return 0;
        }
        s += n;
        len -= n;
        in = 0;
        c = ((const cont_t *) chunk_at(z, c))->next;
    }
    return 1;
}
