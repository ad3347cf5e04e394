/*
 * verify: a walk of every structure of a shard's dictionary, for tests and
 * operators (shmlock_dict_verify).  The shard's mutex is held.
 */

#ifndef VERIFY_H
#define VERIFY_H

#include <stddef.h>

#include "shard.h"

/* SHMLOCK_OK, or SHMLOCK_CORRUPT with msg saying what is broken. */
int verify_shard(shard_t *sh, char *msg, size_t msg_size);

#endif /* VERIFY_H */
