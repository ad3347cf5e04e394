#include "journal.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

int  journal_crash_countdown;

void
journal_crash_at(int n)
{
    journal_crash_countdown = n;
}

void
journal_crash_now(void)
{
    if (--journal_crash_countdown == 0) {
        kill(getpid(), SIGKILL);
    }
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
