#include "journal.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

static int  crash_countdown;

void
journal_crash_at(int n)
{
    crash_countdown = n;
}

static void
journal_append(journal_t *j, char *base, void *word, uint32_t width,
    uint64_t old)
{
    uint32_t  n = j->count;

    if (n >= JOURNAL_MAX) {
        /* an operation wrote more words than designed for: a bug; dying
         * here leaves the records so far for the next holder to undo */
        abort();
    }
    j->rec[n].off = (uint32_t) ((char *) word - base);
    j->rec[n].width = width;
    j->rec[n].old = old;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    *(volatile uint32_t *) &j->count = n + 1;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);

    if (__builtin_expect(crash_countdown != 0, 0) && --crash_countdown == 0) {
        kill(getpid(), SIGKILL);
    }
}

void
journal_w32(journal_t *j, char *base, uint32_t *word, uint32_t v)
{
    journal_append(j, base, word, 4, *word);
    *(volatile uint32_t *) word = v;
}

void
journal_w64(journal_t *j, char *base, uint64_t *word, uint64_t v)
{
    journal_append(j, base, word, 8, *word);
    *(volatile uint64_t *) word = v;
}

int
journal_recover(journal_t *j, char *base, uint64_t size)
{
    uint32_t  n = j->count, i;

    if (n > JOURNAL_MAX) {
        n = JOURNAL_MAX;
    }
    for (i = n; i-- > 0; ) {
        journal_rec_t  *r = &j->rec[i];

        if ((uint64_t) r->off + r->width > size || r->off % r->width != 0) {
            continue;
        }
        if (r->width == 8) {
            *(volatile uint64_t *) (base + r->off) = r->old;
        } else {
            *(volatile uint32_t *) (base + r->off) = (uint32_t) r->old;
        }
    }
    if (n > 0) {
        j->recoveries++;
    }
    journal_commit(j);
    return (int) n;
}
