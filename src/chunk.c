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
    first = last = chunk_index(z, d->free_head);
    for (i = 1; i < n && last != 0; i++) {
        last = chunk_next(z, last);
    }
    if (last == 0) {
        z->broken = 1;          /* fewer free chunks than counted */
        return 0;
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
    uint32_t       last = first, next, n = 1, steps = 0;

    while ((next = chunk_next(z, last)) != 0
           && !chunk_walk_over(z, &steps))
    {
        last = next;
        n++;
    }
    ZW32(z, ((cont_t *) chunk_at(z, last))->next, d->free_head);
    ZW32(z, d->free_head, first);
    ZW32(z, d->free_count, d->free_count + n);
}

/*
 * The data of an entry's stream from byte `off` on: *c is the chunk it is
 * in, *room how many bytes of the stream that chunk holds from there.  The
 * stream is the head's 16 data bytes, then 60 per continuation chunk; a
 * head chunk links its first continuation through the same `next` word.
 */
static inline char *
chunk_seek(const zone_t *z, uint32_t head, size_t off, uint32_t *c,
    size_t *room)
{
    uint32_t  i;

    if (off < CHUNK_HEAD_DATA) {
        *c = head;
        *room = CHUNK_HEAD_DATA - off;
        return entry_at(z, head)->data + off;
    }
    off -= CHUNK_HEAD_DATA;
    i = chunk_next(z, head);
    while (off >= CHUNK_CONT_DATA) {
        i = chunk_next(z, i);
        off -= CHUNK_CONT_DATA;
    }
    *c = i;
    *room = CHUNK_CONT_DATA - off;
    return ((cont_t *) chunk_at(z, i))->data + off;
}

/* The next chunk's data, which it holds CHUNK_CONT_DATA bytes of. */
static inline char *
chunk_next_data(const zone_t *z, uint32_t *c)
{
    *c = chunk_next(z, *c);
    return ((cont_t *) chunk_at(z, *c))->data;
}

/*
 * Copies len bytes between the stream, from byte `off` on, and mem: into
 * the chunks when `in`, out of them otherwise (a constant at each caller,
 * so the branch folds away).
 */
static inline void
chunk_copy(const zone_t *z, uint32_t head, size_t off, char *mem, size_t len,
    int in)
{
    uint32_t  c;
    size_t    room;
    char     *p = chunk_seek(z, head, off, &c, &room);

    for ( ;; ) {
        size_t  n = len < room ? len : room;

        if (in) {
            memcpy(p, mem, n);
        } else {
            memcpy(mem, p, n);
        }
        if (len <= room) {
            return;
        }
        mem += room;
        len -= room;
        p = chunk_next_data(z, &c);
        room = CHUNK_CONT_DATA;
    }
}

void
chunk_write(zone_t *z, uint32_t head, size_t off, const char *src, size_t len)
{
    /* src is only read */
    chunk_copy(z, head, off, (char *) src, len, 1);
}

void
chunk_read(const zone_t *z, uint32_t head, size_t off, char *dst, size_t len)
{
    chunk_copy(z, head, off, dst, len, 0);
}

int
chunk_equal(const zone_t *z, uint32_t head, size_t off, const char *s,
    size_t len)
{
    uint32_t  c;
    size_t    room;
    char     *p = chunk_seek(z, head, off, &c, &room);

    while (len > room) {
        if (!bytes_equal(p, s, room)) {
            return 0;
        }
        s += room;
        len -= room;
        p = chunk_next_data(z, &c);
        room = CHUNK_CONT_DATA;
    }
    return bytes_equal(p, s, len);
}
