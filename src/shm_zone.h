/*
 * shm_zone: the file behind a zone, and this process's mappings of zones.
 * A zone named N lives in <dir>/shmlock.N (dir: $SHMLOCK_DIR, else
 * /dev/shm, a tmpfs).
 *
 * Creation never exposes a half-built zone, and cannot be denied by files
 * planted in the directory: the creator builds the zone in an anonymous
 * file (O_TMPFILE; where the file system lacks it, a temporary name with
 * 64 random bits) and publishes it with link(2), which fails with EEXIST
 * if another process published first; the loser then attaches to the
 * winner's zone.  Before it publishes, the creator marks dead every
 * removed file of the name that a process still maps (shm_removed.h), and
 * it then attaches by the name like any opener.  An attach looks at the
 * file's link count once it is mapped: a file removed between its open
 * and its mmap is marked dead and the name looked at again.  Files are created 0600 (or the mode and group asked, for
 * zones shared between users), opened with O_NOFOLLOW, and must be regular
 * files made in our pid namespace that nobody untrusted may write: owned
 * by the caller or of the group it trusts, never writable by others (the
 * rule: shmlock_open_t in shmlock.h).
 *
 * Destroying a zone marks it dead in its header, then unlinks the name:
 * every process that still has it mapped answers SHMLOCK_DESTROYED from
 * then on instead of acting on a zone nobody else will see, and opening the
 * name again reaches the new zone.  Destroy and the removal of a dead file
 * left by a destroyer that died midway hold an flock on the directory, so
 * that neither unlinks a zone published in between.
 *
 * A process maps each zone file once, whatever the number of Lua VMs or
 * threads that open it: open finds an existing mapping by the file's
 * device and inode, and the last close unmaps it.
 */

#ifndef SHM_ZONE_H
#define SHM_ZONE_H

#include "shmlock.h"
#include "zone.h"

#include <sys/stat.h>

/* As shmlock_zone_open2 (shmlock.h): o's out fields are filled. */
int shm_zone_open(shmlock_open_t *o, shmlock_zone_t **out, int *err);
void shm_zone_retain(shmlock_zone_t *z);
/* Drops one reference; the last one unmaps the zone. */
void shm_zone_close(shmlock_zone_t *z);
int shm_zone_destroy(const char *dir, const char *name, size_t name_len,
    int *err);
int shm_zone_name_ok(const char *name, size_t len);

#ifdef SHMLOCK_TESTING
/* The next attach that maps a file pauses between its open and its mmap:
 * a byte to notify_fd, then a read of wait_fd (a byte, or EOF). */
void shm_zone_test_pause(int notify_fd, int wait_fd);
#endif

/* Whether st (an fstat's) is the file z maps. */
static inline int
shm_zone_is_file(const shmlock_zone_t *z, const struct stat *st)
{
    return (uint64_t) st->st_dev == z->dev && (uint64_t) st->st_ino == z->ino;
}

static inline int
shm_zone_dead(const shmlock_zone_t *z)
{
    return __atomic_load_n(&z->hdr->dead, __ATOMIC_ACQUIRE) != 0;
}

#endif /* SHM_ZONE_H */
