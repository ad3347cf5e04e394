/*
 * wordstore: how the dictionary writes a structural word.
 *
 * The hash chains are the source of truth, and every change to them is a
 * single aligned word store: an entry is built in unreachable chunks and
 * published by one link store, removed by one unlink store, replaced by one
 * store that swaps the link.  Everything else (the free list, the LRU list,
 * the counters) is derived and is rebuilt from the hash chains by
 * recover_shard() when a holder died with the mutex (recover.c).  So a
 * crash at any instruction leaves every key with its old or its new value.
 * (The one update of several words, an in-place rewrite, keeps an undo
 * record: rewrite.c.)
 *
 * SIGKILL stops a process after a prefix of its program, and the kernel
 * makes that prefix's stores visible before anyone can see the death; only
 * the compiler must be kept from moving the publishing store before the
 * stores that fill the entry: hence the compiler barrier.  In the test
 * build each of these stores is also a point where the crash countdown
 * may kill the process (crash.h).
 */

#ifndef WORDSTORE_H
#define WORDSTORE_H

#include <stdint.h>

#ifdef SHMLOCK_TESTING
#include "crash.h"
#endif

static inline void
wordstore_before(void)
{
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
#ifdef SHMLOCK_TESTING
    crash_point();
#endif
}

#define WORDSTORE32(word, v)                                                  \
    do {                                                                      \
        uint32_t  wordstore_v_ = (v);                                         \
        wordstore_before();                                                   \
        *(volatile uint32_t *) &(word) = wordstore_v_;                        \
    } while (0)

#define WORDSTORE64(word, v)                                                  \
    do {                                                                      \
        uint64_t  wordstore_v_ = (v);                                         \
        wordstore_before();                                                   \
        *(volatile uint64_t *) &(word) = wordstore_v_;                        \
    } while (0)

#endif /* WORDSTORE_H */
