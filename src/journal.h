/*
 * journal: an undo log that makes every dictionary update atomic with
 * respect to a crash of the process that holds the zone mutex.
 *
 * Each write to a structural word of the zone goes through journal_w32/w64,
 * which first records the word's offset and old value, then writes.  Bytes
 * copied into freshly allocated (still unreachable) chunks need no record.
 * journal_commit() marks a consistent state.  Whoever next takes the mutex
 * and finds records left behind by a dead holder rolls them back in reverse
 * order; rolling back twice gives the same result, so a crash during
 * recovery is recovered too.
 *
 * Ordering: a SIGKILLed process has executed a prefix of its program, and
 * the kernel makes all its stores visible before anyone can observe its
 * death, so only the compiler must keep record, count and write in order.
 */

#ifndef JOURNAL_H
#define JOURNAL_H

#include <stdint.h>

#define JOURNAL_MAX  96

typedef struct {
    uint32_t  off;      /* from the zone base */
    uint32_t  width;    /* 4 or 8 */
    uint64_t  old;
} journal_rec_t;

typedef struct {
    uint32_t       count;
    uint32_t       recoveries;   /* times a dead holder's work was undone */
    journal_rec_t  rec[JOURNAL_MAX];
} journal_t;

extern int  journal_crash_countdown;
void journal_crash_now(void);

static inline void
journal_append(journal_t *j, char *base, void *word, uint32_t width,
    uint64_t old)
{
    uint32_t  n = j->count;

    if (__builtin_expect(n >= JOURNAL_MAX, 0)) {
        /* an update wrote more words than designed for: a bug.  Dying here
         * leaves the records so far for the next holder to undo. */
        __builtin_trap();
    }
    j->rec[n].off = (uint32_t) ((char *) word - base);
    j->rec[n].width = width;
    j->rec[n].old = old;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    *(volatile uint32_t *) &j->count = n + 1;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);

    if (__builtin_expect(journal_crash_countdown != 0, 0)) {
        journal_crash_now();
    }
}

static inline void
journal_w32(journal_t *j, char *base, uint32_t *word, uint32_t v)
{
    journal_append(j, base, word, 4, *word);
    *word = v;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
}

static inline void
journal_w64(journal_t *j, char *base, uint64_t *word, uint64_t v)
{
    journal_append(j, base, word, 8, *word);
    *word = v;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
}

static inline void
journal_commit(journal_t *j)
{
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    *(volatile uint32_t *) &j->count = 0;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
}

/* Undo whatever a dead holder left; returns the number of records undone. */
int journal_recover(journal_t *j, char *base, uint64_t size);

/* Test hook: SIGKILL this process at the n-th journalled write from now. */
void journal_crash_at(int n);

#endif /* JOURNAL_H */
