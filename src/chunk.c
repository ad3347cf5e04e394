#include "chunk.h"
#include "hash.h"

#include <string.h>

_Static_assert(sizeof(chunk_t) == SHARD_CHUNK_SIZE, "chunk_t is one chunk");

void
chunk_format(shard_t *sh)
{
    shard_dict_t  *d = &sh->hdr->dict;
    uint32_t       i;

    for (i = 1; i < sh->nchunks; i++) {
        ((chunk_t *) chunk_at(sh, i))->next = i + 1;
    }
    if (sh->nchunks > 0) {
        ((chunk_t *) chunk_at(sh, sh->nchunks))->next = 0;
    }
    d->free_head = sh->nchunks > 0 ? 1 : 0;
    d->free_count = sh->nchunks;
}

uint32_t
chunk_alloc(shard_t *sh, uint32_t n)
{
    shard_dict_t  *d = &sh->hdr->dict;
    uint32_t       first, last, i;
    chunk_t       *c;

    if (n == 0 || d->free_count < n) {
        return 0;
    }
    first = last = chunk_index(sh, d->free_head);
    for (i = 1; i < n && last != 0; i++) {
        last = chunk_next(sh, last);
    }
    if (last == 0) {
        sh->broken = 1;         /* fewer free chunks than counted */
        return 0;
    }
    c = chunk_at(sh, last);
    WORDSTORE32(d->free_head, c->next);
    WORDSTORE32(c->next, 0);
    WORDSTORE32(d->free_count, d->free_count - n);
    return first;
}

void
chunk_free(shard_t *sh, uint32_t first)
{
    shard_dict_t  *d = &sh->hdr->dict;
    uint32_t       last = first, next, n = 1, steps = 0;

    while ((next = chunk_next(sh, last)) != 0
           && !chunk_walk_over(sh, &steps))
    {
        last = next;
        n++;
    }
    WORDSTORE32(((chunk_t *) chunk_at(sh, last))->next, d->free_head);
    WORDSTORE32(d->free_head, first);
    WORDSTORE32(d->free_count, d->free_count + n);
}

/*
 * The data of an entry's stream from byte `off` on: *c is the chunk it is
 * in, *room how many bytes of the stream that chunk holds from there.  The
 * stream is the head's `hroom` data bytes, then 60 per continuation chunk;
 * a head chunk links its first continuation through the same `next` word.
 */
static inline char *
chunk_seek(const shard_t *sh, uint32_t head, size_t hroom, size_t off,
    uint32_t *c, size_t *room)
{
    uint32_t  i;

    if (off < hroom) {
        *c = head;
        *room = hroom - off;
        return chunk_head_data(sh, head) + off;
    }
    off -= hroom;
    i = chunk_next(sh, head);
    while (off >= CHUNK_CONT_DATA) {
        i = chunk_next(sh, i);
        off -= CHUNK_CONT_DATA;
    }
    *c = i;
    *room = CHUNK_CONT_DATA - off;
    return ((chunk_t *) chunk_at(sh, i))->data + off;
}

/* The next chunk's data, which it holds CHUNK_CONT_DATA bytes of. */
static inline char *
chunk_next_data(const shard_t *sh, uint32_t *c)
{
    *c = chunk_next(sh, *c);
    return ((chunk_t *) chunk_at(sh, *c))->data;
}

/*
 * Copies len bytes between the stream, from byte `off` on, and mem: into
 * the chunks when `in`, out of them otherwise (a constant at each caller,
 * so the branch folds away).
 */
static inline void
chunk_copy(const shard_t *sh, uint32_t head, size_t hroom, size_t off,
    char *mem, size_t len, int in)
{
    uint32_t  c;
    size_t    room;
    char     *p = chunk_seek(sh, head, hroom, off, &c, &room);

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
        p = chunk_next_data(sh, &c);
        room = CHUNK_CONT_DATA;
    }
}

void
chunk_write(shard_t *sh, uint32_t head, size_t room, size_t off,
    const char *src, size_t len)
{
    /* src is only read */
    chunk_copy(sh, head, room, off, (char *) src, len, 1);
}

void
chunk_read(const shard_t *sh, uint32_t head, size_t room, size_t off,
    char *dst, size_t len)
{
    chunk_copy(sh, head, room, off, dst, len, 0);
}

int
chunk_equal(const shard_t *sh, uint32_t head, size_t hroom, size_t off,
    const char *s, size_t len)
{
    uint32_t  c;
    size_t    room;
    char     *p = chunk_seek(sh, head, hroom, off, &c, &room);

    while (len > room) {
        if (!hash_equal(p, s, room)) {
            return 0;
        }
        s += room;
        len -= room;
        p = chunk_next_data(sh, &c);
        room = CHUNK_CONT_DATA;
    }
    return hash_equal(p, s, len);
}
