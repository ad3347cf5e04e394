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
#include <sys/sysmacros.h>
#include <unistd.h>

#define SHM_REMOVED_BUF     (64 * 1024)  /* maps text read at a time */
#define SHM_REMOVED_KNOWN   32           /* files marked, remembered */
#define SHM_REMOVED_LOCKS   (1 << 16)    /* flocks on the file system */
#define SHM_REMOVED_LOCKS_MAX  (8 << 20) /* bytes of /proc/locks read */
#define SHM_REMOVED_SUFFIX  " (deleted)"

/* A flock on the zones' file system, from /proc/locks: the inode of a
 * file some process maps, and the process that took it. */
typedef struct {
    uint64_t  ino;
    unsigned  pid;
    unsigned  major;
    unsigned  minor;
    unsigned  resolved;      /* a maps line of that inode was read */
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
    unsigned             npids;         /* of pids[]: maps read */
    unsigned             dev_major;     /* the file system, as /proc/locks */
    unsigned             dev_minor;     /* and maps print it */
    int                  resolving;     /* maps lines matched to locks */
    shm_removed_file_t   known[SHM_REMOVED_KNOWN];   /* files judged */
    dev_t                marked_dev[SHM_REMOVED_KNOWN];  /* and marked */
    ino_t                marked_ino[SHM_REMOVED_KNOWN];
    shm_removed_lock_t  *locks;         /* sorted by inode */
    unsigned            *pids;
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
    unsigned        major, minor, i, lo, hi;
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
        /* the first lock of that inode, then the others after it */
        lo = 0;
        hi = s->nlocks;
        while (lo < hi) {
            i = lo + (hi - lo) / 2;
            if (s->locks[i].ino < ino) {
                lo = i + 1;
            } else {
                hi = i;
            }
        }
        for (i = lo; i < s->nlocks && s->locks[i].ino == ino; i++) {
            s->locks[i].resolved = 1;
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

static int
shm_removed_mine_cmp(const void *a, const void *b)
{
    const shm_removed_mine_t  *x = a, *y = b;

    if (x->ino != y->ino) {
        return x->ino < y->ino ? -1 : 1;
    }
    return x->dev < y->dev ? -1 : x->dev > y->dev;
}

/* Whether mine[n] (the files this process maps, sorted) has the file. */
static int
shm_removed_mine(const shm_removed_mine_t *mine, size_t n,
    const shm_removed_lock_t *l)
{
    size_t  lo = 0, hi = n, i;

    while (lo < hi) {
        i = lo + (hi - lo) / 2;
        if (mine[i].ino < l->ino) {
            lo = i + 1;
        } else {
            hi = i;
        }
    }
    for (i = lo; i < n && mine[i].ino == l->ino; i++) {
        if (major(mine[i].dev) == l->major && minor(mine[i].dev) == l->minor) {
            return 1;
        }
    }
    return 0;
}

static int
shm_removed_by_ino(const void *a, const void *b)
{
    uint64_t  x = ((const shm_removed_lock_t *) a)->ino;
    uint64_t  y = ((const shm_removed_lock_t *) b)->ino;

    return x < y ? -1 : x > y;
}

/*
 * One line of /proc/locks, "N: FLOCK  ADVISORY  READ PID MAJ:MIN:INO 0
 * EOF", into *l: 1 for a flock held, 0 for anything else (another kind of
 * lock, a blocked request's "N: -> FLOCK ...", a lock of no inode).
 */
static int
shm_removed_lock_line(const char *p, shm_removed_lock_t *l, int *pid)
{
    char  *e;
    int    field;

    p = strchr(p, ':');
    if (p == NULL) {
        return 0;
    }
    for (p++; *p == ' '; p++) { /* void */ }
    if (strncmp(p, "FLOCK ", 6) != 0) {
        return 0;
    }
    p += 5;
    for (field = 0; field < 2; field++) {      /* ADVISORY, READ */
        for ( ; *p == ' '; p++) { /* void */ }
        for ( ; *p != ' ' && *p != '\n' && *p != '\0'; p++) { /* void */ }
    }
    *pid = (int) strtol(p, &e, 10);
    if (e == p) {
        return 0;
    }
    l->major = (unsigned) strtoul(e, &e, 16);
    if (*e != ':') {
        return 0;
    }
    l->minor = (unsigned) strtoul(e + 1, &e, 16);
    if (*e != ':') {
        return 0;
    }
    p = e + 1;
    l->ino = strtoull(p, &e, 10);
    l->resolved = 0;
    return e != p;
}

/* One more flock into s->locks; -1 when there are too many. */
static int
shm_removed_add_lock(shm_removed_scan_t *s, const shm_removed_lock_t *l,
    unsigned *cap)
{
    shm_removed_lock_t  *grown;

    if (s->nlocks == *cap) {
        if (*cap == SHM_REMOVED_LOCKS) {
            return -1;
        }
        *cap = *cap == 0 ? 64 : *cap * 2;
        grown = realloc(s->locks, *cap * sizeof(*grown));
        if (grown == NULL) {
            return -1;
        }
        s->locks = grown;
    }
    s->locks[s->nlocks++] = *l;
    return 0;
}

/* /proc/locks, whole, NUL-terminated (free it); NULL if it cannot be. */
static char *
shm_removed_read_locks(shm_removed_scan_t *s)
{
    char     *text = NULL, *grown;
    size_t    size = 0, have = 0;
    ssize_t   n;
    int       fd = openat(s->procfd, "locks", O_RDONLY | O_CLOEXEC);

    while (fd >= 0) {
        if (size - have < 4096) {
            size = size == 0 ? 64 * 1024 : size * 2;
            grown = size <= SHM_REMOVED_LOCKS_MAX ? realloc(text, size + 1)
                                                  : NULL;
            if (grown == NULL) {
                break;
            }
            text = grown;
        }
        n = read(fd, text + have, size - have);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            if (n == 0) {
                text[have] = '\0';
                close(fd);
                return text;
            }
            break;
        }
        have += (size_t) n;
    }
    if (fd >= 0) {
        close(fd);
    }
    free(text);
    return NULL;
}

/*
 * The flocks of /proc/locks on the zones' file system, into s->locks,
 * sorted by inode.  own_fd is the file being built, flocked here a
 * moment: its line tells how /proc/locks names the file system (as maps
 * does: the super block's device, which stat does not always give).  Left
 * out: the directory's inode (destroy's flock), and our own flocks on the
 * files we map (mine, sorted here: the caller judged those; a flock of
 * ours on another file, which a child of ours may map, stays).  0, or -1
 * when the listing cannot be used whole (no /proc/locks, our lock not in
 * it, a lock of no process we can see, too many): then every process's
 * maps is read.
 */
static int
shm_removed_locks(shm_removed_scan_t *s, int own_fd, uint64_t dir_ino,
    shm_removed_mine_t *mine, size_t nmine)
{
    shm_removed_lock_t   l;
    struct stat          st;
    char                *text, *p, *nl, self[32];
    ssize_t              n;
    unsigned             i, kept = 0, cap = 0;
    int                  pid, me, found = 0, rc = -1;

    n = readlinkat(s->procfd, "self", self, sizeof(self) - 1);
    if (n <= 0 || fstat(own_fd, &st) != 0 || !shm_removed_list(own_fd)) {
        return -1;
    }
    self[n] = '\0';
    me = atoi(self);                /* our pid as this /proc names it */
    text = shm_removed_read_locks(s);
    flock(own_fd, LOCK_UN);
    if (text == NULL) {
        return -1;
    }
    for (p = text; (nl = strchr(p, '\n')) != NULL; p = nl + 1) {
        if (!shm_removed_lock_line(p, &l, &pid)) {
            continue;
        }
        if (pid == me && l.ino == (uint64_t) st.st_ino) {
            s->dev_major = l.major;         /* our own: the file system */
            s->dev_minor = l.minor;
            found = 1;
            continue;
        }
        if (pid == me) {
            l.resolved = 1;                 /* judged below, if of mine */
        }
        l.pid = (unsigned) (pid > 0 ? pid : 0);
        if (shm_removed_add_lock(s, &l, &cap) != 0) {
            goto done;
        }
    }
    if (!found) {
        goto done;
    }
    if (nmine > 0) {
        qsort(mine, nmine, sizeof(mine[0]), shm_removed_mine_cmp);
    }
    for (i = 0; i < s->nlocks; i++) {
        l = s->locks[i];
        if (l.major != s->dev_major || l.minor != s->dev_minor
            || l.ino == dir_ino
            || (l.resolved && shm_removed_mine(mine, nmine, &l)))
        {
            continue;
        }
        if (l.pid == 0) {
            goto done;                      /* a process we cannot see */
        }
        l.resolved = 0;
        s->locks[kept++] = l;
    }
    s->nlocks = kept;
    if (kept > 0) {
        qsort(s->locks, kept, sizeof(s->locks[0]), shm_removed_by_ino);
    }
    rc = 0;
done:
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
    unsigned  i, j, *grown, cap = 0;
    int       read;

    s->resolving = 1;
    for (i = 0; i < s->nlocks; i++) {
        if (s->locks[i].resolved) {
            continue;
        }
        for (j = 0, read = 0; j < s->npids && !read; j++) {
            read = s->pids[j] == s->locks[i].pid;
        }
        if (read) {
            continue;       /* its maps had no line of it: another pid may */
        }
        if (s->npids == cap) {
            cap = cap == 0 ? 16 : cap * 2;
            grown = realloc(s->pids, cap * sizeof(*grown));
            if (grown == NULL) {
                s->resolving = 0;
                return -1;
            }
            s->pids = grown;
        }
        s->pids[s->npids++] = s->locks[i].pid;
        shm_removed_maps(s, s->locks[i].pid);
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
    shm_removed_mine_t *mine, size_t nmine, shm_removed_stats_t *stats)
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
    s->npids = 0;
    s->locks = NULL;
    s->pids = NULL;
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
        || shm_removed_locks(s, own_fd, (uint64_t) d.st_ino, mine, nmine)
           != 0
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
    free(s->locks);
    free(s->pids);
    free(s);
}
