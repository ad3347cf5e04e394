/*
 * zw: how the dictionary writes its structural words.
 *
 * The hash chains are the source of truth, and every change to them is a
 * single aligned word store: an entry is built in unreachable chunks and
 * published by one link store, removed by one unlink store, replaced by one
 * store that swaps the link.  Everything else (the free list, the LRU list,
 * the counters) is derived and is rebuilt from the hash chains by
 * shdict_recover() when a holder died with the mutex (see recover.c).  So a
 * crash at any instruction leaves every key with its old or its new value.
 *
 * SIGKILL stops a process after a prefix of its program, and the kernel
 * makes that prefix's stores visible before anyone can see the death; only
 * the compiler must be kept from moving the publishing store before the
 * stores that fill the entry: hence the compiler barrier.
 */

#ifndef ZW_H
#define ZW_H

#include <stdint.h>

#ifdef SHMLOCK_TESTING
#include "crash.h"
#endif

static inline void
zw_before(void)
{
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
#ifdef SHMLOCK_TESTING
    crash_point();
#endif
}

#define ZW32(z, word, v)  do { uint32_t zw_v_ = (v); zw_before();            \
                               *(volatile uint32_t *) &(word) = zw_v_; }     \
                          while (0)
#define ZW64(z, word, v)  do { uint64_t zw_v_ = (v); zw_before();            \
                               *(volatile uint64_t *) &(word) = zw_v_; }     \
                          while (0)

#endif /* ZW_H */
