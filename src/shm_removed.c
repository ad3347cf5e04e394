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
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHM_REMOVED_BUF     (64 * 1024)  /* maps text read at a time */
#define SHM_REMOVED_KNOWN   32           /* files marked, remembered */
#define SHM_REMOVED_LOCKS   512          /* flocks on the file system */
#define SHM_REMOVED_LOCKS_MAX  (4 << 20) /* bytes of /proc/locks read */
#define SHM_REMOVED_SUFFIX  " (deleted)"

/* A flock on the zones' file system, from /proc/locks: the inode of a
 * file some process maps, and the process that took it. */
typedef struct {
    uint64_t  ino;
    unsigned  pid;
    unsigned  resolved;      /* a maps line of that inode was read */
    unsigned  read;          /* pid's maps was read */
} shm_removed_lock_t;

/* A file judged, by the device and inode of its maps line. */
typedef struct {
    unsigned  major;
    unsigned  minor;
    uint64_t  ino;
} shm_removed_file_t;

typedef struct {
    int                  procfd;        /* /proc */
    size_t               needle_len;    /* "/shmlock.N (deleted)\n" */
    unsigned             nknown;
    unsigned             nmarked;
    unsigned             nlocks;
    unsigned             dev_major;     /* the file system, as /proc/locks */
    unsigned             dev_minor;     /* and maps print it */
    int                  resolving;     /* maps lines matched to locks */
    shm_removed_file_t   known[SHM_REMOVED_KNOWN];   /* files judged */
    dev_t                marked_dev[SHM_REMOVED_KNOWN];  /* and marked */
    ino_t                marked_ino[SHM_REMOVED_KNOWN];
    shm_removed_lock_t   locks[SHM_REMOVED_LOCKS];
    shm_removed_stats_t  st;
    char                 needle[SHMLOCK_NAME_MAX + 48];
    char                 link[PATH_MAX + 32];
    char                 buf[SHM_REMOVED_BUF];
} shm_removed_scan_t;

int
shm_removed_list(int fd)
{
    while (flock(fd, LOCK_SH | LOCK_NB) != 0) {
        if (errno != EINTR) {
            return 0;
        }
    }
    return 1;
}

#ifdef SHMLOCK_TESTING
static shm_removed_stats_t  shm_removed_last_stats;

void
shm_removed_last(shm_removed_stats_t *out)
{
    *out = shm_removed_last_stats;
}
#endif

static int
shm_removed_known(const shm_removed_scan_t *s, const shm_removed_file_t *f)
{
    unsigned  i;

    for (i = 0; i < s->nknown; i++) {
        if (s->known[i].ino == f->ino && s->known[i].major == f->major
            && s->known[i].minor == f->minor)
        {
            return 1;
        }
    }
    return 0;
}

/* Remembers a file judged, so that the next process mapping it is
 * skipped; when full, later ones are only judged again. */
static void
shm_removed_remember(shm_removed_scan_t *s, const shm_removed_file_t *f)
{
    if (!shm_removed_known(s, f) && s->nknown < SHM_REMOVED_KNOWN) {
        s->known[s->nknown++] = *f;
    }
}

/* Counts a file marked (or found dead), once. */
static void
shm_removed_count(shm_removed_scan_t *s, const struct stat *st)
{
    unsigned  i;

    for (i = 0; i < s->nmarked; i++) {
        if (s->marked_dev[i] == st->st_dev && s->marked_ino[i] == st->st_ino) {
            return;
        }
    }
    if (s->nmarked < SHM_REMOVED_KNOWN) {
        s->marked_dev[s->nmarked] = st->st_dev;
        s->marked_ino[s->nmarked++] = st->st_ino;
    }
    s->st.marked++;
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
               == (ssize_t) sizeof(removed)))
    {
        shm_removed_count(s, &st);
    }
    close(fd);
}

/* Judges every file process pid has an fd on whose link ends in our
 * name " (deleted)"; 1 if one of them is the inode ino. */
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
        if (n < (ssize_t) s->needle_len - 1
            || memcmp(s->link + n - (s->needle_len - 1), s->needle,
                      s->needle_len - 1) != 0)
        {
            continue;
        }
        fd = openat(dirfd(d), de->d_name, O_RDWR | O_CLOEXEC);
        if (fd >= 0) {
            shm_removed_mark_fd(s, fd, &got);
            reached |= got == ino;
        }
    }
    closedir(d);
    return reached;
}

/* One maps line of pid naming a file of our name " (deleted)": the file
 * reached through the mapping (map_files), else through an fd of pid. */
static void
shm_removed_line(shm_removed_scan_t *s, unsigned pid, const char *line,
    size_t len)
{
    shm_removed_file_t  f;
    char                head[128], name[96];
    unsigned long       start, end, ino;
    uint64_t            got;
    int                 fd;

    if (len >= sizeof(head)) {
        len = sizeof(head) - 1;
    }
    memcpy(head, line, len);
    head[len] = '\0';
    if (sscanf(head, "%lx-%lx %*s %*s %x:%x %lu", &start, &end, &f.major,
               &f.minor, &ino) != 5)
    {
        return;
    }
    f.ino = ino;
    s->st.lines++;
    if (shm_removed_known(s, &f)) {
        return;
    }
    snprintf(name, sizeof(name), "%u/map_files/%lx-%lx", pid, start, end);
    fd = openat(s->procfd, name, O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
        shm_removed_mark_fd(s, fd, &got);
        if (got == ino) {
            shm_removed_remember(s, &f);
            return;
        }
    }
    if (shm_removed_by_fd(s, pid, ino)) {
        shm_removed_remember(s, &f);
        return;
    }
    s->st.unreachable++;
}

/*
 * The complete lines of maps text in buf[0, len): each whose file's name
 * is ours " (deleted)" (the needle, "/shmlock.N (deleted)\n", ends the
 * line).  The directory is not compared: a process in another mount
 * namespace or root may name it otherwise, and a removed zone of our
 * name in another directory is one its own users' watch marks anyway.
 */
static void
shm_removed_lines(shm_removed_scan_t *s, unsigned pid, const char *buf,
    size_t len)
{
    const char  *p = buf, *end = buf + len, *hit, *line;

    while ((hit = memmem(p, (size_t) (end - p), s->needle, s->needle_len))
           != NULL)
    {
        p = hit + s->needle_len;
        line = memrchr(buf, '\n', (size_t) (hit - buf));
        line = line == NULL ? buf : line + 1;
        shm_removed_line(s, pid, line, (size_t) (hit - line));
    }
}

/* While resolving: each complete line of buf[0, len) whose file is on
 * the zones' file system resolves the flocks of its inode. */
static void
shm_removed_resolve(shm_removed_scan_t *s, const char *buf, size_t len)
{
    const char     *p = buf, *end = buf + len, *nl;
    char            head[128];
    unsigned        major, minor, i;
    unsigned long   ino;
    size_t          n;

    for ( ; p < end; p = nl + 1) {
        nl = memchr(p, '\n', (size_t) (end - p));
        if (nl == NULL) {
            return;
        }
        n = (size_t) (nl - p) < sizeof(head) - 1 ? (size_t) (nl - p)
                                                 : sizeof(head) - 1;
        memcpy(head, p, n);
        head[n] = '\0';
        if (sscanf(head, "%*x-%*x %*s %*s %x:%x %lu", &major, &minor, &ino)
            != 3 || major != s->dev_major || minor != s->dev_minor
            || ino == 0)
        {
            continue;
        }
        for (i = 0; i < s->nlocks; i++) {
            if (s->locks[i].ino == ino) {
                s->locks[i].resolved = 1;
            }
        }
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
            if (s->resolving) {
                shm_removed_resolve(s, s->buf, done);
            }
            shm_removed_lines(s, pid, s->buf, done);
        }
        memmove(s->buf, s->buf + done, have - done);
        have -= done;
    }
    close(fd);
}

/*
 * The flocks of /proc/locks on the zones' file system, into s->locks.
 * own_fd is the file being built, flocked here a moment: its line tells
 * how /proc/locks names the file system (as maps does: the super block's
 * device, which stat does not always give).  The directory's own inode
 * (destroy's flock) is left out.  0, or -1 when the listing cannot be
 * used whole (no /proc/locks, our lock not in it, a lock of no process
 * we can see, too many): then every process's maps is read instead.
 */
static int
shm_removed_locks(shm_removed_scan_t *s, int own_fd, uint64_t dir_ino)
{
    struct stat    st;
    char          *text = NULL, *p, *nl, *grown, kind[16], self[32];
    size_t         size = 0, have = 0;
    ssize_t        n;
    unsigned       major, minor, pass;
    unsigned long  ino;
    int            fd, pid, me, off, found = 0, rc = -1;

    n = readlinkat(s->procfd, "self", self, sizeof(self) - 1);
    if (n <= 0 || fstat(own_fd, &st) != 0 || !shm_removed_list(own_fd)) {
        return -1;
    }
    self[n] = '\0';
    me = atoi(self);                /* our pid as this /proc names it */
    fd = openat(s->procfd, "locks", O_RDONLY | O_CLOEXEC);
    while (fd >= 0) {
        if (size - have < 4096) {
            size = size == 0 ? 64 * 1024 : size * 2;
            grown = size <= SHM_REMOVED_LOCKS_MAX ? realloc(text, size + 1)
                                                  : NULL;
            if (grown == NULL) {
                goto done;
            }
            text = grown;
        }
        n = read(fd, text + have, size - have);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            goto done;
        }
        if (n == 0) {
            break;
        }
        have += (size_t) n;
    }
    if (fd < 0 || text == NULL) {
        goto done;
    }
    text[have] = '\0';
    /* "N: FLOCK  ADVISORY  READ PID MAJ:MIN:INO 0 EOF"; a blocked
     * request's line has "-> " after the colon and holds nothing.  Our
     * own line first (the file system), then the others on it. */
    for (pass = 0; pass < 2; pass++) {
        for (p = text; *p != '\0'; p = nl + 1) {
            nl = strchr(p, '\n');
            if (nl == NULL) {
                break;
            }
            off = 0;
            if (sscanf(p, "%*u: %n", &off) < 0 || off == 0
                || strncmp(p + off, "->", 2) == 0
                || sscanf(p + off, "%15s %*s %*s %d %x:%x:%lu", kind, &pid,
                          &major, &minor, &ino) != 5
                || strcmp(kind, "FLOCK") != 0)
            {
                continue;
            }
            if (pass == 0) {
                if (pid == me && ino == (unsigned long) st.st_ino) {
                    s->dev_major = major;
                    s->dev_minor = minor;
                    found = 1;
                }
                continue;
            }
            if (major != s->dev_major || minor != s->dev_minor
                || ino == (unsigned long) st.st_ino || ino == dir_ino)
            {
                continue;
            }
            if (pid <= 0 || s->nlocks == SHM_REMOVED_LOCKS) {
                goto done;
            }
            s->locks[s->nlocks].ino = ino;
            s->locks[s->nlocks].pid = (unsigned) pid;
            s->locks[s->nlocks].resolved = 0;
            s->locks[s->nlocks].read = 0;
            s->nlocks++;
        }
        if (!found) {
            goto done;
        }
    }
    rc = 0;
done:
    flock(own_fd, LOCK_UN);
    if (fd >= 0) {
        close(fd);
    }
    free(text);
    return rc;
}

/*
 * The fast way: each flock on the file system (every mapping of ours
 * holds one, see shm_removed_list) resolved by reading the maps of a
 * process that took one on that file: its maps line names the file (ours
 * removed, marked on the way; anything else, left alone).  0 when every
 * one was resolved.
 */
static int
shm_removed_by_locks(shm_removed_scan_t *s)
{
    unsigned  i, j;

    s->resolving = 1;
    for (i = 0; i < s->nlocks; i++) {
        if (s->locks[i].resolved || s->locks[i].read) {
            continue;
        }
        shm_removed_maps(s, s->locks[i].pid);
        for (j = i; j < s->nlocks; j++) {
            if (s->locks[j].pid == s->locks[i].pid) {
                s->locks[j].read = 1;
            }
        }
    }
    s->resolving = 0;
    for (i = 0; i < s->nlocks; i++) {
        if (!s->locks[i].resolved) {
            return -1;
        }
    }
    return 0;
}

void
shm_removed_mark(const char *dir, const char *file, int own_fd,
    shm_removed_stats_t *stats)
{
    shm_removed_scan_t  *s;
    struct dirent       *de;
    struct stat          d;
    DIR                 *proc;
    int                  n;

    s = malloc(sizeof(*s));
    if (s == NULL) {
        return;
    }
    memset(&s->st, 0, sizeof(s->st));
    s->nknown = 0;
    s->nmarked = 0;
    s->nlocks = 0;
    s->resolving = 0;
    n = snprintf(s->needle, sizeof(s->needle), "/%s" SHM_REMOVED_SUFFIX "\n",
                 file);
    proc = opendir("/proc");
    if (n <= 0 || (size_t) n >= sizeof(s->needle) || proc == NULL) {
        if (proc != NULL) {
            closedir(proc);
        }
        free(s);
        return;
    }
    s->needle_len = (size_t) n;
    s->procfd = dirfd(proc);
    /* the full scan also when a file of ours was found but not reached
     * (its flock's process closed its fd): another process may have one */
    if (stat(dir, &d) != 0
        || shm_removed_locks(s, own_fd, (uint64_t) d.st_ino) != 0
        || shm_removed_by_locks(s) != 0 || s->st.unreachable > 0)
    {
        s->st.full = 1;
        while ((de = readdir(proc)) != NULL) {
            if (de->d_name[0] >= '1' && de->d_name[0] <= '9') {
                shm_removed_maps(s, (unsigned) strtoul(de->d_name, NULL, 10));
            }
        }
    }
    s->st.locks = s->nlocks;
    closedir(proc);
    if (stats != NULL) {
        *stats = s->st;
    }
#ifdef SHMLOCK_TESTING
    shm_removed_last_stats = s->st;
#endif
    free(s);
}
