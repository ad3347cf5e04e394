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
 * How a removed file is found: /proc/PID/maps names a mapped file by the
 * path it was opened by, with " (deleted)" once that name is gone.  Every
 * process's maps is read (cheap: no fd table is listed unless its maps
 * matched), and for each line naming "<dir>/shmlock.<name> (deleted)" the
 * file is opened through the mapping, /proc/PID/map_files/START-END (root
 * only, CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE), else through the fd the
 * process keeps on it (the watch's, /proc/PID/fd/N whose link reads the
 * same).  A file so opened that has no name left and is a zone of our
 * layout gets ZONE_REMOVED in its dead word (a destroy's mark stays), by
 * pread and pwrite: a file we do not map cannot raise SIGBUS in us,
 * whoever truncates it.  Every file found is marked once: the other
 * processes mapping it are skipped by the inode in their maps line.
 *
 * What no scan can reach: processes whose maps we may not read (another
 * user's, unless we are root; a non-dumpable process; /proc mounted with
 * hidepid, or not at all; a pid namespace our /proc does not show), and a
 * mapping without an fd (closed by closefrom) when map_files is denied.
 * Those are left to the watch (docs/guarantees.md, "Not defended").
 */

#ifndef SHM_REMOVED_H
#define SHM_REMOVED_H

#include <stddef.h>

/* What a scan did (the test build tells the last one, and so does a
 * creation's cost measurement). */
typedef struct {
    unsigned  procs;        /* maps read */
    unsigned  lines;        /* maps lines naming a removed file of the name */
    unsigned  marked;       /* removed zone files found and marked dead
                               (or found dead already) */
    unsigned  unreachable;  /* lines whose file no way in reached */
} shm_removed_stats_t;

/*
 * Marks dead every removed generation of the zone file at dir/file (file:
 * "shmlock.<name>") mapped by a process this one can see.  Nothing is
 * reported: a file not reached is left to the watch.  *stats may be NULL.
 */
void shm_removed_mark(const char *dir, const char *file,
    shm_removed_stats_t *stats);

#ifdef SHMLOCK_TESTING
/* The last scan's figures in this process (zeroes before any). */
void shm_removed_last(shm_removed_stats_t *out);
#endif

#endif /* SHM_REMOVED_H */
