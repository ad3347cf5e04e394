#define _GNU_SOURCE
#include "shm_removed.h"
#include "shmlock.h"
#include "zone.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHM_REMOVED_BUF     (64 * 1024)  /* maps text read at a time */
#define SHM_REMOVED_KNOWN   32           /* files marked, remembered */
#define SHM_REMOVED_SUFFIX  " (deleted)"
#define SHM_REMOVED_SUFFIX_LEN  (sizeof(SHM_REMOVED_SUFFIX) - 1)

typedef struct {
    int                  procfd;        /* /proc */
    size_t               path_len;      /* of path, without the suffix */
    size_t               needle_len;    /* path, the suffix, '\n' */
    unsigned             nknown;
    uint64_t             known[SHM_REMOVED_KNOWN];   /* inodes marked */
    shm_removed_stats_t  st;
    char                 needle[PATH_MAX + 32];
    char                 link[PATH_MAX + 32];
    char                 buf[SHM_REMOVED_BUF];
} shm_removed_scan_t;

#ifdef SHMLOCK_TESTING
static shm_removed_stats_t  shm_removed_last_stats;

void
shm_removed_last(shm_removed_stats_t *out)
{
    *out = shm_removed_last_stats;
}
#endif

static int
shm_removed_known(const shm_removed_scan_t *s, uint64_t ino)
{
    unsigned  i;

    for (i = 0; i < s->nknown; i++) {
        if (s->known[i] == ino) {
            return 1;
        }
    }
    return 0;
}

/*
 * fd: a file opened through a process's mapping or descriptor, closed
 * here; its inode in *ino (0 if fstat failed).  A zone of our layout with
 * no name left is marked removed: its dead word, if still 0 (a destroy's
 * mark stays).  Anything else (a zone of another layout, one given a
 * second name) is left alone.
 */
static void
shm_removed_mark_fd(shm_removed_scan_t *s, int fd, uint64_t *ino)
{
    struct stat  st;
    zone_hdr_t   h;
    uint32_t     removed = ZONE_REMOVED;

    *ino = 0;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return;
    }
    *ino = (uint64_t) st.st_ino;
    if (S_ISREG(st.st_mode) && st.st_nlink == 0
        && (uint64_t) st.st_size >= SHMLOCK_MIN_SIZE
        && pread(fd, &h, sizeof(h), 0) == (ssize_t) sizeof(h)
        && memcmp(h.magic, ZONE_MAGIC, sizeof(ZONE_MAGIC)) == 0
        && h.layout == ZONE_LAYOUT
        && (h.dead != 0
            /* the store is done before pwrite returns, so before the
             * creator's link(2) publishes the new file */
            || pwrite(fd, &removed, sizeof(removed),
                      offsetof(zone_hdr_t, dead))
               == (ssize_t) sizeof(removed))
        && !shm_removed_known(s, *ino))
    {
        s->st.marked++;
    }
    close(fd);
}

/* Remembers a file judged, so that the next process mapping it is
 * skipped; when full, later ones are only judged again. */
static void
shm_removed_remember(shm_removed_scan_t *s, uint64_t ino)
{
    if (!shm_removed_known(s, ino) && s->nknown < SHM_REMOVED_KNOWN) {
        s->known[s->nknown++] = ino;
    }
}

/* Judges every file process pid has an fd on whose link reads our path
 * " (deleted)"; 1 if one of them is the inode ino. */
static int
shm_removed_by_fd(shm_removed_scan_t *s, unsigned pid, uint64_t ino)
{
    char            name[64];
    struct dirent  *de;
    DIR            *d;
    ssize_t         n;
    uint64_t        got;
    int             dfd, fd, reached = 0;

    snprintf(name, sizeof(name), "%u/fd", pid);
    dfd = openat(s->procfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        return 0;
    }
    d = fdopendir(dfd);
    if (d == NULL) {
        close(dfd);
        return 0;
    }
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.') {
            continue;
        }
        n = readlinkat(dirfd(d), de->d_name, s->link, sizeof(s->link));
        if (n != (ssize_t) (s->path_len + SHM_REMOVED_SUFFIX_LEN)
            || memcmp(s->link, s->needle, (size_t) n) != 0)
        {
            continue;
        }
        fd = openat(dirfd(d), de->d_name, O_RDWR | O_CLOEXEC);
        if (fd >= 0) {
            shm_removed_mark_fd(s, fd, &got);
            shm_removed_remember(s, got);
            reached |= got == ino;
        }
    }
    closedir(d);
    return reached;
}

/* One maps line of pid naming our path " (deleted)": its file reached
 * through the mapping (map_files), else through an fd of pid. */
static void
shm_removed_line(shm_removed_scan_t *s, unsigned pid, const char *line,
    size_t len)
{
    char           head[128], name[96];
    unsigned long  start, end, ino;
    uint64_t       got;
    int            fd;

    if (len >= sizeof(head)) {
        len = sizeof(head) - 1;
    }
    memcpy(head, line, len);
    head[len] = '\0';
    if (sscanf(head, "%lx-%lx %*s %*s %*s %lu", &start, &end, &ino) != 3) {
        return;
    }
    s->st.lines++;
    if (shm_removed_known(s, ino)) {
        return;
    }
    snprintf(name, sizeof(name), "%u/map_files/%lx-%lx", pid, start, end);
    fd = openat(s->procfd, name, O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
        shm_removed_mark_fd(s, fd, &got);
        shm_removed_remember(s, got);
        if (got == ino) {
            return;
        }
    }
    if (!shm_removed_by_fd(s, pid, ino)) {
        s->st.unreachable++;
    }
}

/* The complete lines of maps text in buf[0, len): each naming our path
 * " (deleted)" as its file (a space before it, the line's end after). */
static void
shm_removed_lines(shm_removed_scan_t *s, unsigned pid, const char *buf,
    size_t len)
{
    const char  *p = buf, *end = buf + len, *hit, *line;

    while ((hit = memmem(p, (size_t) (end - p), s->needle, s->needle_len))
           != NULL)
    {
        p = hit + s->needle_len;
        if (hit == buf || hit[-1] != ' ') {
            continue;
        }
        line = memrchr(buf, '\n', (size_t) (hit - buf));
        line = line == NULL ? buf : line + 1;
        shm_removed_line(s, pid, line, (size_t) (hit - line));
    }
}

/* Reads /proc/<pid>/maps, complete lines at a time. */
static void
shm_removed_maps(shm_removed_scan_t *s, unsigned pid)
{
    char         name[64];
    const char  *nl;
    size_t       have = 0, done;
    ssize_t      n;
    int          fd;

    snprintf(name, sizeof(name), "%u/maps", pid);
    fd = openat(s->procfd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return;                     /* gone, or not ours to read */
    }
    s->st.procs++;
    for (;;) {
        n = read(fd, s->buf + have, sizeof(s->buf) - have);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            break;
        }
        have += (size_t) n;
        nl = memrchr(s->buf, '\n', have);
        /* a line longer than the buffer names no path of ours */
        done = nl != NULL ? (size_t) (nl - s->buf) + 1
                          : have == sizeof(s->buf) ? have : 0;
        if (nl != NULL) {
            shm_removed_lines(s, pid, s->buf, done);
        }
        memmove(s->buf, s->buf + done, have - done);
        have -= done;
    }
    close(fd);
}

void
shm_removed_mark(const char *dir, const char *file,
    shm_removed_stats_t *stats)
{
    shm_removed_scan_t  *s;
    struct dirent       *de;
    char                 real[PATH_MAX];
    DIR                 *proc;
    int                  n;

    s = malloc(sizeof(*s));
    if (s == NULL) {
        return;
    }
    memset(&s->st, 0, sizeof(s->st));
    s->nknown = 0;
    /* maps names a file by its real path: no symbolic link, no "..", no
     * double slash */
    if (realpath(dir, real) != NULL) {
        dir = real;
    }
    n = snprintf(s->needle, sizeof(s->needle), "%s/%s" SHM_REMOVED_SUFFIX "\n",
                 dir, file);
    proc = opendir("/proc");
    if (n <= 0 || (size_t) n >= sizeof(s->needle) || proc == NULL) {
        if (proc != NULL) {
            closedir(proc);
        }
        free(s);
        return;
    }
    s->needle_len = (size_t) n;
    s->path_len = s->needle_len - SHM_REMOVED_SUFFIX_LEN - 1;
    s->procfd = dirfd(proc);
    while ((de = readdir(proc)) != NULL) {
        if (de->d_name[0] >= '1' && de->d_name[0] <= '9') {
            shm_removed_maps(s, (unsigned) strtoul(de->d_name, NULL, 10));
        }
    }
    closedir(proc);
    if (stats != NULL) {
        *stats = s->st;
    }
#ifdef SHMLOCK_TESTING
    shm_removed_last_stats = s->st;
#endif
    free(s);
}
