/*
 * Rewriting an entry in place: when the new key+value needs as many chunks
 * as the old, set/replace/cas reuse them instead of allocating a copy.  It
 * needs no free memory (a full zone still accepts overwrites, as ngx's
 * does) and is faster.  Crash safety comes from the undo area in the zone
 * header (zone.h): old head and value saved, `active` set, rewrite,
 * `active` cleared.  Values larger than the undo area take the copy path.
 */

#include "entry.h"
#include "shdict.h"

#include <string.h>

static void
rewrite_fence(void)
{
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
}

int
entry_rewrite(zone_t *z, uint32_t i, size_t klen, const shmlock_value_t *v,
    int64_t expires, int pinned)
{
    zone_undo_t  *u = &z->hdr->undo;
    entry_t      *e = entry_at(z, i);
    size_t        old_len = e->vtype == SHMLOCK_TSTRING ? e->value_len : 0;
    size_t        new_len = v->type == SHMLOCK_TSTRING ? v->len : 0;
    double        num = v->num;
    uint64_t      bits;
    int           was_pinned = e->eflags & ENTRY_PINNED;

    if (old_len > ZONE_UNDO_BYTES
        || chunks_for(klen + old_len) != chunks_for(klen + new_len))
    {
        return 0;
    }

    memcpy(u->head, e, ZONE_CHUNK_SIZE);
    chunk_read(z, i, klen, u->bytes, old_len);
    u->entry = i;
    u->len = (uint32_t) old_len;
    ZW32(z, u->active, 1);

    if (v->type == SHMLOCK_TBOOLEAN) {
        num = num != 0 ? 1 : 0;
    }
    memcpy(&bits, &num, sizeof(bits));
    ZW64(z, e->num, bits);
    ZW64(z, e->expires, (uint64_t) expires);
    ZW32(z, e->user_flags, v->flags);
    ZW32(z, e->value_len, (uint32_t) new_len);
    e->vtype = (uint8_t) v->type;
    e->eflags = pinned ? ENTRY_PINNED : 0;
    if (new_len > 0) {
        chunk_write(z, i, klen, v->str, new_len);
    }
    rewrite_fence();
    ZW32(z, u->active, 0);

    /*
     * The LRU list is derived state: bring it in line with the new class.
     * An entry that stays evictable is not moved: its read mark gives it
     * the CLOCK's second chance instead, for one byte store rather than
     * six link writes.
     */
    if (was_pinned && !pinned) {
        entry_lru_push(z, i);
        z->refs[i] = 0;
    } else if (!was_pinned && pinned) {
        entry_lru_unlink(z, i);
    } else if (!pinned) {
        z->refs[i] = 1;
    }
    return 1;
}

void
entry_rewrite_undo(zone_t *z)
{
    zone_undo_t  *u = &z->hdr->undo;
    entry_t      *e;

    if (!u->active || u->entry == 0 || u->entry > z->nchunks
        || u->len > ZONE_UNDO_BYTES)
    {
        u->active = 0;
        return;
    }
    e = entry_at(z, u->entry);
    memcpy(e, u->head, ZONE_CHUNK_SIZE);
    chunk_write(z, u->entry, e->key_len, u->bytes, u->len);
    rewrite_fence();
    u->active = 0;
}
