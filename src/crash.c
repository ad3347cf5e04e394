#include "crash.h"

#include <signal.h>
#include <unistd.h>

int  crash_countdown;

/* 0 disarms; n > 0: SIGKILL before the n-th structural write from now */
void
crash_at(int n)
{
    crash_countdown = n;
}

void
crash_tick(void)
{
    if (--crash_countdown == 0) {
        kill(getpid(), SIGKILL);
    }
}
