/*
 * list: the nodes of a list value (ngx.shared.DICT's lpush/rpush/lpop/rpop
 * values), and how a push or a pop changes them.  The shard's mutex is
 * held; the semantics (types, expiry, "value not a list") are shdict.c's.
 *
 * A list is an entry of type SHMLOCK_TLIST (entry.h) whose head keeps, in
 * place of a number, its first and last node, and in value_len how many
 * nodes it has.  A node is a chain of chunks shaped like an entry that is
 * in no hash chain:
 *
 *   list head:  hnext (hash chain) ... value_len = count ... list.first,
 *               list.last, data = key
 *   node:       next (its own data) | hnext = the next node (0: the last)
 *               | lru_prev = the node before (0: the first) | value_len,
 *               vtype, num, data = the element (key_len 0)
 *
 * The truth is list.first and the nodes' hnext links; list.last, the
 * count and the back links (lru_prev) are derived from them.  A push or a
 * pop commits with one word store of the truth (wordstore.h), then brings
 * the derived words in line; a crash in between leaves them behind, and
 * recovery rebuilds them (list_rebuild).  A list always has a node: the
 * pop of its last one removes the entry instead.
 */

#ifndef LIST_H
#define LIST_H

#include "entry.h"

/* The chunks of a node holding v. */
static inline uint32_t
list_node_chunks(const shmlock_value_t *v)
{
    return entry_chunks(0, 0, (uint32_t) v->type, v->len);
}

/*
 * Builds a new list of key in the fresh chain c (chunk_alloc) of
 * chunks_for(ENTRY_ROOM_SHORT, klen) + list_node_chunks(v) chunks: the head in the first
 * chunks, its one node, holding v, in the rest.  Unreachable yet:
 * entry_publish() makes it visible.
 */
void list_fill(shard_t *sh, uint32_t c, const char *key, size_t klen,
    uint32_t hash, const shmlock_value_t *v);

/* Builds a node holding v in the fresh chain c, unreachable yet. */
void list_node_fill(shard_t *sh, uint32_t c, const shmlock_value_t *v);

/* Links node c (list_node_fill) at one end (SHMLOCK_LEFT: first) of list
 * i. */
void list_push(shard_t *sh, uint32_t i, uint32_t c, int side);

/*
 * The node at one end of list i, checked against the truth: 0 (and the
 * call marked broken) if the list has no node or its derived words
 * disagree with its links.  *only: 1 if it is the list's only node.
 */
uint32_t list_end(shard_t *sh, uint32_t i, int side, int *only);

/* Unlinks and frees the node at one end of list i, which has more than
 * one (list_end said so). */
void list_pop(shard_t *sh, uint32_t i, int side);

/*
 * Recovery: rebuilds list i's derived words (last, count, back links)
 * from its first node and hnext links, and calls mark for each node.  A
 * link out of range or a cycle ends the walk and marks the shard broken.
 */
typedef void (*list_mark_pt)(shard_t *sh, uint32_t node, void *ctx);
void list_rebuild(shard_t *sh, uint32_t i, list_mark_pt mark, void *ctx);

#endif /* LIST_H */
