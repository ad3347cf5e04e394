/*
 * Rewriting an entry in place: when the new key+value needs as many chunks
 * as the old or fewer, set/replace/cas reuse the entry's own chunks
 * instead of allocating a copy, and free the chunks it no longer needs.  So
 * a same-size or smaller value never needs free memory (a full shard still
 * takes it, as ngx.shared.DICT does), and it is faster.  Crash safety
 * comes from the undo area in the shard header (shard.h): the old head, the
 * old value bytes the new value overwrites and the link that cuts the
 * chain short are saved, `active` set, the entry rewritten, `active`
 * cleared; the chunks cut off are freed only then.  A value that would
 * overwrite more old bytes than the undo area holds (SHARD_UNDO_BYTES)
 * takes the copy path.
 */

#include "rewrite.h"

#include <string.h>

static void
rewrite_fence(void)
{
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
}

/* The chunk at position pos (0: the head) of the chain from i; 0 if the
 * chain is shorter (then the zone is corrupt). */
static uint32_t
rewrite_nth(shard_t *sh, uint32_t i, uint32_t pos)
{
    while (pos-- > 0 && i != 0) {
        i = chunk_next(sh, i);
    }
    if (i == 0) {
        sh->broken = 1;
    }
    return i;
}

int
rewrite_entry(shard_t *sh, uint32_t i, size_t klen, const shmlock_value_t *v,
    int64_t expires, int pinned)
{
    shard_undo_t  *u = &sh->hdr->undo;
    entry_t       *e = entry_at(sh, i);
    uint32_t       old_type = entry_vtype(e), new_type = (uint32_t) v->type;
    size_t         old_room = entry_room_for(old_type);
    size_t         new_room = entry_room_for(new_type);
    /* the stream after the key: user flags, a string's bytes */
    size_t         old_rest = entry_voff(e) - klen
                              + (old_type == SHMLOCK_TSTRING
                                 ? e->value_len : 0);
    size_t         new_rest = (v->flags != 0 ? ENTRY_FLAGS_LEN : 0)
                              + (new_type == SHMLOCK_TSTRING ? v->len : 0);
    /* the old bytes the new ones overwrite: in the same room, those up to
     * the shorter rest; when the room changes (the new stream lies shifted
     * over the old), all of them */
    size_t         saved = old_room != new_room || old_rest < new_rest
                           ? old_rest : new_rest;
    uint32_t       n_old = chunks_for(old_room, klen + old_rest);
    uint32_t       n_new = chunks_for(new_room, klen + new_rest);
    uint32_t       cut = 0, tail = 0;
    double         num = v->num;
    uint64_t       bits;
    int            was_pinned = entry_pinned(e);

    /* a list's nodes would have to go too: it is replaced by a copy; so is
     * an entry whose key would move (a head's room changes with the type:
     * a key longer than the shorter room is laid out by it) */
    if (old_type == SHMLOCK_TLIST || saved > SHARD_UNDO_BYTES
        || n_new > n_old || (old_room != new_room && klen > ENTRY_KEY_INLINE))
    {
        return 0;
    }
    if (n_new < n_old) {
        cut = rewrite_nth(sh, i, n_new - 1);      /* the last chunk kept */
        tail = cut != 0 ? chunk_next(sh, cut) : 0;
    }

    memcpy(u->head, e, SHARD_CHUNK_SIZE);
    chunk_read(sh, i, old_room, klen, u->bytes, saved);
    u->entry = i;
    u->len = (uint32_t) saved;
    u->cut = cut != i ? cut : 0;     /* the head's link is in the copy */
    u->cut_next = tail;
    WORDSTORE32(u->active, 1);

    if (new_type != SHMLOCK_TSTRING) {
        if (new_type == SHMLOCK_TBOOLEAN) {
            num = num != 0 ? 1 : 0;
        }
        memcpy(&bits, &num, sizeof(bits));
        WORDSTORE64(e->num, bits);
    }
    WORDSTORE64(e->meta, entry_meta(klen, new_type, pinned, v->flags != 0,
                                    expires));
    WORDSTORE32(e->value_len,
                new_type == SHMLOCK_TSTRING ? (uint32_t) v->len : 0);
    if (new_rest > 0) {
        entry_fill_value(sh, i, v);
    }
    if (cut != 0) {
        WORDSTORE32(((chunk_t *) chunk_at(sh, cut))->next, 0);
    }
    rewrite_fence();
    WORDSTORE32(u->active, 0);

    /* unreachable now: a crash from here on leaks them only until the
     * recovery, which rebuilds the free list from the hash chains */
    if (tail != 0) {
        chunk_free(sh, tail);
    }

    /*
     * The LRU list is derived state: bring it in line with the new class.
     * An entry that stays evictable is not moved: its read mark gives it
     * the CLOCK's second chance instead, for one byte store rather than
     * six link writes.
     */
    if (was_pinned && !pinned) {
        entry_lru_push(sh, i);
        *chunk_ref(sh, i) = 0;
    } else if (!was_pinned && pinned) {
        entry_lru_unlink(sh, i);
    } else if (!pinned) {
        *chunk_ref(sh, i) = 1;
    }
    return 1;
}

void
rewrite_undo(shard_t *sh)
{
    shard_undo_t  *u = &sh->hdr->undo;
    entry_t       *e;

    if (!u->active || u->entry == 0 || u->entry > sh->nchunks
        || u->cut > sh->nchunks || u->len > SHARD_UNDO_BYTES)
    {
        u->active = 0;
        return;
    }
    e = entry_at(sh, u->entry);
    memcpy(e, u->head, SHARD_CHUNK_SIZE);
    if (u->cut != 0) {
        ((chunk_t *) chunk_at(sh, u->cut))->next = u->cut_next;
    }
    chunk_write(sh, u->entry, entry_room(e), entry_key_len(e), u->bytes,
                u->len);
    rewrite_fence();
    u->active = 0;
}
