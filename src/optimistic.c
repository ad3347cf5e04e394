#include "optimistic.h"

int
optimistic_stream(const shard_t *sh, uint32_t c, size_t hroom, size_t off,
    const char *cmp, char *dst, size_t len, int *equal)
{
    const char  *p;
    size_t       room, n;
    int          head = 1;

    while (len > 0) {
        if (c == 0 || c > sh->nchunks) {
            return 0;
        }
        if (head) {
            p = entry_at(sh, c)->data;
            room = hroom;
        } else {
            p = ((const chunk_t *) chunk_at(sh, c))->data;
            room = CHUNK_CONT_DATA;
        }
        if (off >= room) {
            off -= room;
        } else {
            n = room - off < len ? room - off : len;
            if (cmp != NULL) {
                if (!hash_equal(p + off, cmp, n)) {
                    *equal = 0;
                    return 1;
                }
                cmp += n;
            } else {
                memcpy(dst, p + off, n);
                dst += n;
            }
            len -= n;
            off = 0;
        }
        head = 0;
        c = __atomic_load_n(&((const chunk_t *) chunk_at(sh, c))->next,
                            __ATOMIC_RELAXED);
    }
    *equal = 1;
    return 1;
}
