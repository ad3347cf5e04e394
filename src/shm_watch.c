#define _GNU_SOURCE
#include "shm_watch.h"
#include "shm_removed.h"
#include "shm_zone.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

/* one check at a time in the process (the fd may be replaced) */
static pthread_mutex_t  shm_watch_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t   shm_watch_once = PTHREAD_ONCE_INIT;

/* a thread that held the lock at fork() is not in the child to release it */
static void
shm_watch_child(void)
{
    pthread_mutex_t  fresh = PTHREAD_MUTEX_INITIALIZER;

    shm_watch_mutex = fresh;
}

static void
shm_watch_init(void)
{
    pthread_atfork(NULL, NULL, shm_watch_child);
}

int
shm_watch_dead_status(shmlock_zone_t *z)
{
    uint32_t  dead = __atomic_load_n(&z->hdr->dead, __ATOMIC_ACQUIRE);

    if (dead == ZONE_REMOVED) {
        return SHMLOCK_REMOVED;
    }
    return dead != 0 ? SHMLOCK_DESTROYED : SHMLOCK_OK;
}

/*
 * Our fd is gone (closed, maybe reused): the path again, if it still
 * names our file; else the zone is lost to this process.
 */
static void
shm_watch_reopen(shmlock_zone_t *z)
{
    struct stat  st;
    int          fd = open(z->path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);

    if (fd >= 0 && fstat(fd, &st) == 0 && shm_zone_is_file(z, &st)) {
        z->fd = fd;
        return;
    }
    if (fd >= 0) {
        close(fd);
    }
    z->fd = -1;
    __atomic_store_n(&z->lost, 1, __ATOMIC_RELEASE);
}

/* Looks at the file: marks the zone removed when no name reaches it. */
static void
shm_watch_file(shmlock_zone_t *z)
{
    struct stat  st;
    uint32_t     live = 0;

    if (z->fd < 0 || fstat(z->fd, &st) != 0 || !shm_zone_is_file(z, &st)) {
        shm_watch_reopen(z);
        return;
    }
    if (!z->listed) {
        /* refused at the attach (another program's exclusive flock):
         * a creator's scan relies on it (shm_removed.h) */
        z->listed = shm_removed_list(z->fd);
    }
    if (st.st_nlink == 0) {
        /* a destroy's mark (ZONE_DESTROYED) stays */
        __atomic_compare_exchange_n(&z->hdr->dead, &live, ZONE_REMOVED, 0,
                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
}

int
shm_watch_check(shmlock_zone_t *z, int64_t now_ms)
{
    int64_t  now, at;
    int      rc = shm_watch_dead_status(z);

    if (rc != SHMLOCK_OK) {
        return rc;
    }
    if (__atomic_load_n(&z->lost, __ATOMIC_ACQUIRE)) {
        return SHMLOCK_REMOVED;
    }
    pthread_once(&shm_watch_once, shm_watch_init);
    pthread_mutex_lock(&shm_watch_mutex);
    now = sys_coarse_ms();
    /* due by the coarse clock or by the caller's reading, which may be a
     * tick ahead (a fine one); the next is set from the coarse clock, so
     * that no reading, however wrong, puts it off.  Another thread may
     * have checked meanwhile. */
    at = __atomic_load_n(&z->watch_at, __ATOMIC_RELAXED);
    if (now >= at || now_ms >= at) {
        shm_watch_file(z);
        __atomic_store_n(&z->watch_at, now + SHMLOCK_WATCH_MS,
                         __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&shm_watch_mutex);
    rc = shm_watch_dead_status(z);
    if (rc == SHMLOCK_OK && __atomic_load_n(&z->lost, __ATOMIC_ACQUIRE)) {
        rc = SHMLOCK_REMOVED;
    }
    return rc;
}
