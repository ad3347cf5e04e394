/*
 * shm_removed: the removed generations of a zone file that live processes
 * still map, marked dead before a new file is published under the name.
 *
 * A zone file removed behind our back (rm, systemd's RemoveIPC=yes) lives
 * on in the processes that map it.  The watch (shm_watch.h) marks it dead
 * at a process's next look at the file, up to SHMLOCK_WATCH_MS later; a
 * process that made the name's zone anew within that time would hold a
 * key in the new file while a holder of the old one went on unaware (two
 * holders).  Creation is rare, so its creator closes that window: before
 * it publishes the new file (shm_zone.c) it marks every removed file of
 * the name that a process it can see still maps, so that from the
 * publication on every one of them is dead, and a holder that reads its
 * dead word after its own step (shm_watch_after) learns whether that step
 * came before the new file existed (the word was still 0) or not.
 *
 * Finding them.  /proc/PID/maps names a mapped file by the path it was
 * opened by, with " (deleted)" once that name is gone: a line ending in
 * "/shmlock.<name> (deleted)" is a removed file of the name (the
 * directory is not compared: a process in another mount namespace or root
 * names it otherwise, and a removed zone of the name elsewhere is one its
 * users' watch marks anyway), which is then opened through the mapping, /proc/PID/map_files/START-END (root
 * only: CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE), else through the fd the
 * process keeps on it (the watch's: /proc/PID/fd/N whose link reads the
 * same).  A file so opened that has no name left and is a zone of our
 * layout gets ZONE_REMOVED in its dead word (a destroy's mark stays), by
 * pread and pwrite: a file we do not map cannot raise SIGBUS in us,
 * whoever truncates it.  Each file is marked once: the other processes
 * mapping it are skipped by the inode of their maps line.
 *
 * Which maps to read.  Reading every process's costs about 0.1 ms each
 * (tens of ms on a busy host), so every mapping of ours holds a shared
 * flock(2) on its file (shm_removed_list: taken when it is mapped, kept by
 * the mapping itself, which holds the open file, so a child that inherits
 * it shares it and a closed fd does not drop it), and /proc/locks, one
 * read, lists them all: the inode and the process that took it.  Only the
 * maps of a process holding a flock on the zones' file system is read,
 * one per file: its line of that inode tells which file it is (the
 * creator's own flocks on files it maps are judged by its registry of
 * mappings instead, shm_zone.c).  A flock
 * no maps line explains (its process gone, another program's lock, a
 * mapping being made or dropped), a /proc/locks that cannot be read whole
 * or does not show our own lock, and every process's maps is read
 * instead: the full scan, the answer whatever the flocks say.  A mapping
 * made after /proc/locks was read takes its flock before it looks at the
 * file's link count (shm_zone.c), which is then 0: it looks again.
 *
 * What neither way reaches: processes whose maps we may not read (another
 * user's, unless we are root; a non-dumpable process; /proc mounted with
 * hidepid, or not at all; a pid namespace our /proc does not show), and a
 * mapping without an fd (closed by closefrom) when map_files is denied;
 * and a mapping whose flock was refused (another program held an
 * exclusive flock on the file as it attached) once that flock is gone,
 * until its process's next look at the file takes it.  Those are left to
 * the watch (docs/guarantees.md, "Not defended").
 */

#ifndef SHM_REMOVED_H
#define SHM_REMOVED_H

#include <stddef.h>
#include <stdint.h>

/* What a scan did (the test build tells the last one). */
typedef struct {
    unsigned  procs;        /* maps read */
    unsigned  lines;        /* maps lines naming a removed file of the name */
    unsigned  marked;       /* removed zone files found and marked dead
                               (or found dead already) */
    unsigned  unreachable;  /* lines whose file no way in reached */
    unsigned  locks;        /* flocks on the file system, /proc/locks */
    unsigned  full;         /* 1: every process's maps was read */
} shm_removed_stats_t;

/* A file this process maps (st_dev, st_ino), whose removal the caller
 * judges itself (shm_zone.c: its own mappings). */
typedef struct {
    uint64_t  dev;
    uint64_t  ino;
} shm_removed_mine_t;

/*
 * Marks dead every removed generation of the zone file at dir/file (file:
 * "shmlock.<name>") mapped by a process this one can see.  own_fd is the
 * new file, not published yet (flocked and unlocked again here); mine[n]
 * the files this process maps, which the caller has judged (sorted
 * here): our own flocks on them need no maps read.  Nothing is reported: a file not
 * reached is left to the watch.  *stats may be NULL.
 */
void shm_removed_mark(const char *dir, const char *file, int own_fd,
    shm_removed_mine_t *mine, size_t n, shm_removed_stats_t *stats);

/* The shared flock of a mapping of ours on its file's fd (see above): 1
 * if taken, 0 if refused (an exclusive flock of another program). */
int shm_removed_list(int fd);

#ifdef SHMLOCK_TESTING
/* The last scan's figures in this process (zeroes before any). */
void shm_removed_last(shm_removed_stats_t *out);
#endif

#endif /* SHM_REMOVED_H */
