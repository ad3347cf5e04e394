#define _GNU_SOURCE
#include "shm_zone.h"
#include "shm_removed.h"
#include "shmlock.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHM_ZONE_DEFAULT_DIR  "/dev/shm"
#define SHM_ZONE_PREFIX       "shmlock."
#define SHM_ZONE_ATTEMPTS     8
#define SHM_ZONE_TMP_TRIES    8
#define SHM_ZONE_DIR_WAIT_MS  2000   /* destroy's wait for the dir lock */

/* attach outcomes that send shm_zone_open round again */
#define SHM_ZONE_GONE  (-1)          /* no file under the name */
#define SHM_ZONE_DEAD  (-2)          /* a dead zone still under the name */
#define SHM_ZONE_AGAIN (-3)          /* the file went between our open and
                                        our mmap, or a file was published */

#ifdef SHMLOCK_TESTING
/* the test build's pause in an attach, between its open and its mmap */
static int  shm_zone_pause_fd[2] = { -1, -1 };

void
shm_zone_test_pause(int notify_fd, int wait_fd)
{
    shm_zone_pause_fd[0] = notify_fd;
    shm_zone_pause_fd[1] = wait_fd;
}

/* Once armed: a byte to notify_fd, then a read of wait_fd (a byte or
 * EOF), then disarmed. */
static void
shm_zone_test_paused(void)
{
    char  c = '!';

    if (shm_zone_pause_fd[0] < 0) {
        return;
    }
    if (write(shm_zone_pause_fd[0], &c, 1) == 1) {
        while (read(shm_zone_pause_fd[1], &c, 1) < 0 && errno == EINTR) {
        }
    }
    shm_zone_pause_fd[0] = shm_zone_pause_fd[1] = -1;
}
#endif

int
shm_zone_name_ok(const char *name, size_t len)
{
    size_t  i;

    if (len == 0 || len > SHMLOCK_NAME_MAX || name[0] == '.') {
        return 0;
    }
    for (i = 0; i < len; i++) {
        char  c = name[i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
              || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-'))
        {
            return 0;
        }
    }
    return 1;
}

static const char *
shm_zone_dir(const char *dir)
{
    if (dir == NULL || dir[0] == '\0') {
        dir = getenv("SHMLOCK_DIR");
    }
    if (dir == NULL || dir[0] == '\0') {
        dir = SHM_ZONE_DEFAULT_DIR;
    }
    return dir;
}

static int
shm_zone_path(char *path, size_t size, const char *dir, const char *name,
    size_t name_len)
{
    int  n = snprintf(path, size, "%s/" SHM_ZONE_PREFIX "%.*s", dir,
                      (int) name_len, name);

    return n > 0 && (size_t) n < size ? 0 : -1;
}


/* ---- this process's mappings ---- */

static pthread_mutex_t   shm_zone_reg_mutex = PTHREAD_MUTEX_INITIALIZER;
static shmlock_zone_t   *shm_zone_reg_head;
static pthread_once_t    shm_zone_reg_once = PTHREAD_ONCE_INIT;

/* a thread that held the lock at fork() is not in the child to release it */
static void
shm_zone_reg_child(void)
{
    pthread_mutex_t  fresh = PTHREAD_MUTEX_INITIALIZER;

    shm_zone_reg_mutex = fresh;
}

static void
shm_zone_reg_init(void)
{
    pthread_atfork(NULL, NULL, shm_zone_reg_child);
}

static void
shm_zone_reg_lock(void)
{
    pthread_once(&shm_zone_reg_once, shm_zone_reg_init);
    pthread_mutex_lock(&shm_zone_reg_mutex);
}

static void
shm_zone_reg_unlock(void)
{
    pthread_mutex_unlock(&shm_zone_reg_mutex);
}

/* The live mapping of that file, with one more reference; else NULL. */
static shmlock_zone_t *
shm_zone_reg_find(const struct stat *st)
{
    shmlock_zone_t  *z;

    shm_zone_reg_lock();
    for (z = shm_zone_reg_head; z != NULL; z = z->next) {
        if (shm_zone_is_file(z, st) && !shm_zone_dead(z)) {
            z->handles++;
            break;
        }
    }
    shm_zone_reg_unlock();
    return z;
}

/*
 * A new mapping, with the file's fd (kept open, closed by the last close)
 * and its path: what shm_watch.h watches.  On failure fd is closed too.
 */
static int
shm_zone_reg_add(char *base, uint64_t size, const struct stat *st, int fd,
    const char *path, shmlock_zone_t **out)
{
    shmlock_zone_t  *z = malloc(sizeof(*z));
    char            *p = strdup(path);

    if (z == NULL || p == NULL) {
        free(z);
        free(p);
        munmap(base, size);
        close(fd);
        errno = ENOMEM;
        return SHMLOCK_SYSTEM;
    }
    zone_attach(z, base, size);
    z->dev = (uint64_t) st->st_dev;
    z->ino = (uint64_t) st->st_ino;
    z->handles = 1;
    z->fd = fd;
    z->lost = 0;
    z->listed = 0;
    z->watch_at = 0;
    z->path = p;
    shm_zone_reg_lock();
    z->next = shm_zone_reg_head;
    shm_zone_reg_head = z;
    shm_zone_reg_unlock();
    *out = z;
    return SHMLOCK_OK;
}

/*
 * This process's own mappings, for a creator's scan (shm_removed.h): one
 * opened by a path ending in "/<file>" (the name being made anew) whose
 * file has no link left is marked dead here, through the mapping; the
 * files of the mappings judged (any other name's; ours when our fd still
 * tells) go to *mine, so that the scan need not read our own maps for our
 * flocks on them.  *mine is NULL (the scan reads them) without memory.
 */
static size_t
shm_zone_reg_judge(const char *file, shm_removed_mine_t **mine)
{
    shmlock_zone_t  *z;
    struct stat      st;
    size_t           count = 0, n = 0, flen = strlen(file), plen;
    uint32_t         live;

    shm_zone_reg_lock();
    for (z = shm_zone_reg_head; z != NULL; z = z->next) {
        count++;
    }
    *mine = count > 0 ? malloc(count * sizeof(**mine)) : NULL;
    for (z = shm_zone_reg_head; z != NULL; z = z->next) {
        plen = strlen(z->path);
        if (plen > flen && z->path[plen - flen - 1] == '/'
            && strcmp(z->path + plen - flen, file) == 0)
        {
            if (z->fd < 0 || fstat(z->fd, &st) != 0
                || !shm_zone_is_file(z, &st))
            {
                continue;           /* left to the scan */
            }
            if (st.st_nlink == 0) {
                live = 0;
                __atomic_compare_exchange_n(&z->hdr->dead, &live,
                                            ZONE_REMOVED, 0, __ATOMIC_SEQ_CST,
                                            __ATOMIC_SEQ_CST);
            }
        }
        if (*mine != NULL) {
            (*mine)[n].dev = z->dev;
            (*mine)[n].ino = z->ino;
            n++;
        }
    }
    shm_zone_reg_unlock();
    return n;
}

void
shm_zone_retain(shmlock_zone_t *z)
{
    shm_zone_reg_lock();
    z->handles++;
    shm_zone_reg_unlock();
}

/*
 * Closes the mapping's fd, if it is still ours: a program that closed it
 * (closefrom after a fork) may have reused the number for a file of its
 * own, which we must not close.
 */
static void
shm_zone_close_fd(shmlock_zone_t *z)
{
    struct stat  st;

    if (z->fd >= 0 && fstat(z->fd, &st) == 0 && shm_zone_is_file(z, &st)) {
        close(z->fd);
    }
    z->fd = -1;
}

void
shm_zone_close(shmlock_zone_t *z)
{
    shmlock_zone_t  **l;
    int               last;

    if (z == NULL) {
        return;
    }
    shm_zone_reg_lock();
    last = --z->handles == 0;
    if (last) {
        for (l = &shm_zone_reg_head; *l != NULL; l = &(*l)->next) {
            if (*l == z) {
                *l = z->next;
                break;
            }
        }
    }
    shm_zone_reg_unlock();
    if (last) {
        /* the fd first: the mapping holds the open file, and with it the
         * flock that lists it (shm_removed.h), until munmap drops both */
        shm_zone_close_fd(z);
        munmap(z->base, z->size);
        free(z->path);
        free(z);
    }
}


/* ---- files ---- */

static int
shm_zone_map(int fd, uint64_t size, char **base)
{
    void  *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

    if (p == MAP_FAILED) {
        return -1;
    }
    *base = p;
    return 0;
}

static int
shm_zone_same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* What the caller learns of the file under a zone's name. */
static void
shm_zone_note_file(shmlock_open_t *o, const struct stat *st)
{
    o->file_uid = (int64_t) st->st_uid;
    o->file_gid = (int64_t) st->st_gid;
    o->file_mode = (unsigned) (st->st_mode & 07777);
}

/*
 * Permission denied with no file to tell of (none to open, or none the
 * caller may look at): the directory's owner, group and mode instead, with
 * S_IFDIR in file_mode saying so, for the message that names what to
 * change.  errno is kept.
 */
static void
shm_zone_note_dir(shmlock_open_t *o, const char *dir)
{
    struct stat  st;
    int          saved = errno;

    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) {
        shm_zone_note_file(o, &st);
        o->file_mode |= S_IFDIR;
    }
    errno = saved;
}

/*
 * Why a file under a zone's name cannot be trusted as a zone, or OK.
 * Whoever may write the zone may break it under us: its owner, its group
 * if group-writable, anyone if others-writable.  We trust ourselves, the
 * user we hand zones to (who writes them anyway) and the group the caller
 * names (an unprivileged owner can only give its file a group it belongs
 * to).
 */
static int
shm_zone_file_ok(const struct stat *st, const shmlock_open_t *o)
{
    int  group_trusted = o->group >= 0 && (int64_t) st->st_gid == o->group;
    int  owner_trusted = st->st_uid == geteuid()
                         || (o->owner_uid > 0
                             && (int64_t) st->st_uid == o->owner_uid);

    if (!S_ISREG(st->st_mode)) {
        return SHMLOCK_INCOMPATIBLE;
    }
    if (st->st_mode & S_IWOTH) {
        return SHMLOCK_UNSAFE_MODE;
    }
    if ((st->st_mode & S_IWGRP) && !group_trusted) {
        return SHMLOCK_UNSAFE_MODE;
    }
    if (!owner_trusted && !group_trusted) {
        return SHMLOCK_NOT_OWNER;
    }
    if ((uint64_t) st->st_size < SHMLOCK_MIN_SIZE) {
        return SHMLOCK_INCOMPATIBLE;
    }
    return SHMLOCK_OK;
}

/*
 * The owner (and group) a zone file of ours is handed to, if the caller
 * hands zones over (o->owner_uid), else -1: a group shared on purpose
 * stays.
 */
static uid_t
shm_zone_hand_uid(const shmlock_open_t *o)
{
    return o->owner_uid > 0 ? (uid_t) o->owner_uid : (uid_t) -1;
}

static gid_t
shm_zone_hand_gid(const shmlock_open_t *o)
{
    if (o->group >= 0) {
        return (gid_t) o->group;
    }
    return o->owner_uid > 0 && o->owner_gid >= 0 ? (gid_t) o->owner_gid
                                                 : (gid_t) -1;
}

/*
 * Hands an attached file of our own to o->owner_uid, as nginx chowns the
 * paths it creates as root: the users it hands zones to may then attach
 * by name too.  fd is the file judged, so no other file is changed.
 */
static int
shm_zone_hand_over(const shmlock_open_t *o, int fd, struct stat *st)
{
    if (o->owner_uid <= 0 || st->st_uid != geteuid()
        || (int64_t) st->st_uid == o->owner_uid)
    {
        return 0;
    }
    if (fchown(fd, shm_zone_hand_uid(o), shm_zone_hand_gid(o)) != 0) {
        return -1;
    }
    return fstat(fd, st);
}

/*
 * Expiry times in a zone are CLOCK_MONOTONIC readings, which a process in
 * another time namespace (unshare --time, a CRIU restore, some container
 * runtimes) reads with another offset: it would take live locks for
 * expired and keep dead ones.  So a zone is used in the time namespace
 * that made it only, as in its pid namespace only.  A zone that does not
 * know its creator's (0: no /proc there, a kernel without time namespaces,
 * a zone of an older version) is taken as ours.
 */
static int
shm_zone_same_time(const char *base)
{
    uint32_t  ns = ((const zone_hdr_t *) base)->timens;

    return ns == 0 || ns == (uint32_t) sys_timens();
}

/*
 * Whether the file mapped at base (fd) has lost its name, looked at once
 * it is mapped and listed (flocked): removed between our open and then,
 * it may have been missed by the scan of a process making the name's zone
 * anew (shm_removed.h), which found no mapping or flock of ours yet.
 * Marked dead then (for the others mapping it), and the name looked at
 * again.  A removal after this look finds our mapping and our flock.
 */
static int
shm_zone_removed(int fd, char *base)
{
    struct stat  st;
    uint32_t     live = 0;

    if (fstat(fd, &st) != 0 || st.st_nlink != 0) {
        return 0;
    }
    __atomic_compare_exchange_n(&((zone_hdr_t *) base)->dead, &live,
                                ZONE_REMOVED, 0, __ATOMIC_SEQ_CST,
                                __ATOMIC_SEQ_CST);
    return 1;
}

/*
 * Attach to the zone published under `path`.  SHM_ZONE_GONE: no such file
 * (it may be created); SHM_ZONE_DEAD: a dead zone is still there (*dead
 * gets its identity); SHM_ZONE_AGAIN: the file lost its name meanwhile.
 * made (or NULL): the file this call built, ours whatever its mode (a
 * group-writable one is the caller's choice, not a planted file).
 */
static int
shm_zone_attach_file(shmlock_open_t *o, const char *path,
    shmlock_zone_t **out, int *err, struct stat *dead, const struct stat *made)
{
    struct stat  st;
    char        *base;
    int          fd, rc, listed = 0;

    fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        *err = errno;
        if (errno == ENOENT) {
            return SHM_ZONE_GONE;
        }
        if (errno == EACCES && lstat(path, &st) == 0) {
            shm_zone_note_file(o, &st);     /* whose file it is, and why */
            errno = EACCES;
        }
        return *err == ELOOP ? SHMLOCK_INCOMPATIBLE : SHMLOCK_SYSTEM;
    }
    if (fstat(fd, &st) != 0) {
        *err = errno;
        close(fd);
        return SHMLOCK_SYSTEM;
    }
    shm_zone_note_file(o, &st);
    /* fstat before mmap: a short file would SIGBUS instead of failing */
    rc = made != NULL && shm_zone_same_file(&st, made)
         ? SHMLOCK_OK : shm_zone_file_ok(&st, o);
    if (rc != SHMLOCK_OK) {
        close(fd);
        return rc;
    }
    if (shm_zone_hand_over(o, fd, &st) != 0) {
        *err = errno;
        close(fd);
        return SHMLOCK_SYSTEM;
    }
    shm_zone_note_file(o, &st);
    *out = shm_zone_reg_find(&st);
    if (*out != NULL) {
        close(fd);
        return SHMLOCK_OK;
    }
#ifdef SHMLOCK_TESTING
    shm_zone_test_paused();
#endif
    if (shm_zone_map(fd, (uint64_t) st.st_size, &base) != 0) {
        *err = errno;
        close(fd);
        return SHMLOCK_SYSTEM;
    }

    rc = SHMLOCK_OK;
    if (zone_check(base, (uint64_t) st.st_size) != 0) {
        /* the caller's message tells another version from no zone */
        o->file_layout = memcmp(base, ZONE_MAGIC, sizeof(ZONE_MAGIC)) == 0
                         ? ((zone_hdr_t *) base)->layout : 0;
        rc = SHMLOCK_INCOMPATIBLE;
    } else if (((zone_hdr_t *) base)->dead) {
        *dead = st;
        rc = SHM_ZONE_DEAD;
    } else if (((zone_hdr_t *) base)->pidns != sys_pidns()) {
        rc = SHMLOCK_FOREIGN_NS;
    } else if (!shm_zone_same_time(base)) {
        rc = SHMLOCK_FOREIGN_TIME;
    } else {
        /* listed (a flock), then the link count: see shm_zone_removed */
        listed = shm_removed_list(fd);
        if (shm_zone_removed(fd, base)) {
            rc = SHM_ZONE_AGAIN;
        }
    }
    if (rc != SHMLOCK_OK) {
        munmap(base, (size_t) st.st_size);
        close(fd);
        return rc;
    }
    rc = shm_zone_reg_add(base, (uint64_t) st.st_size, &st, fd, path, out);
    if (rc != SHMLOCK_OK) {
        *err = errno;
        return rc;
    }
    (*out)->listed = listed;
    return rc;
}

/*
 * Reserve the zone's memory now: on a tmpfs short of room, a plain
 * ftruncate would succeed and the first write would SIGBUS instead.
 */
static int
shm_zone_reserve(int fd, uint64_t size)
{
    int  rc = posix_fallocate(fd, 0, (off_t) size);

    if (rc == 0) {
        return 0;
    }
    if (rc != EOPNOTSUPP && rc != EINVAL) {
        errno = rc;
        return -1;
    }
    return ftruncate(fd, (off_t) size);
}

/*
 * A new, unpublished file in dir: anonymous (O_TMPFILE) where the file
 * system has it (tmp[0] is then '\0'), else under a hidden name with 64
 * random bits, which nobody can plant in advance.
 */
static int
shm_zone_tmpfile(const char *dir, const char *name, size_t name_len, char *tmp,
    size_t tmp_size)
{
    uint64_t  r;
    int       fd, i, n;

    tmp[0] = '\0';
    fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR
                    && errno != EINVAL))
    {
        return fd;
    }
    for (i = 0; i < SHM_ZONE_TMP_TRIES; i++) {
        if (sys_random(&r, sizeof(r)) != 0) {
            return -1;
        }
        n = snprintf(tmp, tmp_size, "%s/." SHM_ZONE_PREFIX "%.*s.%016llx.tmp",
                     dir, (int) name_len, name, (unsigned long long) r);
        if (n <= 0 || (size_t) n >= tmp_size) {
            errno = ENAMETOOLONG;
            return -1;
        }
        fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                  0600);
        if (fd >= 0 || errno != EEXIST) {
            return fd;
        }
    }
    return -1;
}

/* Gives the built file its name; fails with EEXIST if the name is taken. */
static int
shm_zone_publish(int fd, const char *tmp, const char *path)
{
    char  proc[64];

    if (tmp[0] != '\0') {
        return link(tmp, path);
    }
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    if (linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW) == 0) {
        return 0;
    }
    if (errno != ENOENT) {
        return -1;
    }
    /* no /proc: this one needs CAP_DAC_READ_SEARCH */
    return linkat(fd, "", AT_FDCWD, path, AT_EMPTY_PATH);
}

/*
 * Builds a zone in an unpublished file and publishes it under `path`,
 * once every removed file of the name that a process still maps is marked
 * dead (shm_removed.h): from the publication on, none of them answers as
 * the name's zone.  The file is not kept mapped: the caller attaches by
 * the name as any opener does (*made tells it the file it made), since
 * /proc/PID/maps names a mapping by the path it was opened by, and the
 * built file's is no name (O_TMPFILE) or a temporary one, which no later
 * creator's scan would look for.
 */
static int
shm_zone_create_file(shmlock_open_t *o, const char *dir, const char *path,
    uint64_t size, uint32_t nshards, struct stat *made, int *err)
{
    char                 tmp[4096];
    char                 file[sizeof(SHM_ZONE_PREFIX) + SHMLOCK_NAME_MAX];
    char                *base;
    struct stat          st;
    shm_removed_mine_t  *mine;
    size_t               nmine;
    int                  fd;

    fd = shm_zone_tmpfile(dir, o->name, o->name_len, tmp, sizeof(tmp));
    if (fd < 0) {
        *err = errno;
        return SHMLOCK_SYSTEM;
    }
    /* owner and group before mode: the file is 0600 until all are as
     * asked, and a failed chown leaves nothing published */
    if (((o->group >= 0 || o->owner_uid > 0)
         && fchown(fd, shm_zone_hand_uid(o), shm_zone_hand_gid(o)) != 0)
        || fchmod(fd, o->mode) != 0 || shm_zone_reserve(fd, size) != 0
        || fstat(fd, &st) != 0 || shm_zone_map(fd, size, &base) != 0)
    {
        *err = errno;
        goto failed;
    }

    zone_format(base, size, nshards);
    munmap(base, size);

    snprintf(file, sizeof(file), SHM_ZONE_PREFIX "%.*s", (int) o->name_len,
             o->name);
    nmine = shm_zone_reg_judge(file, &mine);
    shm_removed_mark(dir, file, fd, mine, nmine, NULL);
    free(mine);
    if (shm_zone_publish(fd, tmp, path) != 0) {
        *err = errno;
        goto failed;
    }
    if (tmp[0] != '\0') {
        unlink(tmp);
    }
    close(fd);
    *made = st;
    return SHMLOCK_OK;

failed:
    if (tmp[0] != '\0') {
        unlink(tmp);
    }
    close(fd);
    return *err == EEXIST ? SHMLOCK_EXISTS : SHMLOCK_SYSTEM;
}


/* ---- destroying ---- */

/*
 * An flock on the directory: whoever unlinks a zone name holds it, and
 * unlinks only the very file it judged, so two of them (or one and a
 * process creating the zone afresh) never remove a zone published in
 * between.  Creating needs no lock: link(2) fails on an existing name.
 */
static int
shm_zone_dir_lock(const char *dir, int *err)
{
    int      fd;
    int64_t  deadline = sys_now_ms() + SHM_ZONE_DIR_WAIT_MS;

    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        *err = errno;
        return -1;
    }
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if ((errno != EWOULDBLOCK && errno != EINTR)
            || sys_now_ms() >= deadline)
        {
            *err = errno == EWOULDBLOCK ? 0 : errno;
            close(fd);
            return -1;
        }
        usleep(1000);
    }
    return fd;
}

/* Unlinks `path` if it still names the file `st`; dir lock held. */
static int
shm_zone_unlink_if(const char *path, const struct stat *st)
{
    struct stat  now;

    if (lstat(path, &now) != 0) {
        return errno == ENOENT ? 0 : -1;
    }
    if (!shm_zone_same_file(&now, st)) {
        return 0;
    }
    return unlink(path);
}

/* A dead zone left under the name by a destroyer that died: finish it. */
static int
shm_zone_remove_dead(const char *dir, const char *path, const struct stat *dead,
    int *err)
{
    int  dfd = shm_zone_dir_lock(dir, err);

    if (dfd < 0) {
        return *err == 0 ? SHMLOCK_DIR_BUSY : SHMLOCK_SYSTEM;
    }
    if (shm_zone_unlink_if(path, dead) != 0) {
        *err = errno;
        close(dfd);
        return SHMLOCK_SYSTEM;
    }
    close(dfd);
    return SHMLOCK_OK;
}

/*
 * Marks the zone in the open file fd dead, if it is one of ours.  Whoever
 * could open it for writing may: a zone shared with a group is destroyed
 * by a member as by its owner, and its other users must see it dead.
 */
static void
shm_zone_mark_dead(int fd, const struct stat *st)
{
    zone_hdr_t  *h;

    if (!S_ISREG(st->st_mode) || (uint64_t) st->st_size < SHMLOCK_MIN_SIZE) {
        return;
    }
    h = mmap(NULL, sizeof(zone_hdr_t), PROT_READ | PROT_WRITE, MAP_SHARED,
             fd, 0);
    if (h == MAP_FAILED) {
        return;
    }
    if (memcmp(h->magic, ZONE_MAGIC, sizeof(ZONE_MAGIC)) == 0
        && h->layout == ZONE_LAYOUT)
    {
        __atomic_store_n(&h->dead, 1, __ATOMIC_SEQ_CST);
    }
    munmap(h, sizeof(zone_hdr_t));
}

/*
 * Whether we may unlink a file of `st` in dir: in a sticky directory
 * (/dev/shm, /tmp) only the file's or the directory's owner (or root) may.
 * Asked before a zone is marked dead, so that a group member's destroy
 * does not leave a dead zone under a name nobody but its owner can free.
 */
static int
shm_zone_may_unlink(const char *dir, const struct stat *st)
{
    struct stat  d;
    uid_t        me = geteuid();

    if (me == 0 || st->st_uid == me || stat(dir, &d) != 0) {
        return 1;
    }
    return !(d.st_mode & S_ISVTX) || d.st_uid == me;
}

int
shm_zone_destroy(const char *dir, const char *name, size_t name_len, int *err)
{
    char         path[4096];
    struct stat  st;
    int          dfd, fd, rc = SHMLOCK_OK;

    *err = 0;
    if (!shm_zone_name_ok(name, name_len)) {
        return SHMLOCK_BAD_NAME;
    }
    dir = shm_zone_dir(dir);
    if (shm_zone_path(path, sizeof(path), dir, name, name_len) != 0) {
        *err = ENAMETOOLONG;
        return SHMLOCK_SYSTEM;
    }
    dfd = shm_zone_dir_lock(dir, err);
    if (dfd < 0) {
        return *err == 0 ? SHMLOCK_DIR_BUSY : SHMLOCK_SYSTEM;
    }

    fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 && fstat(fd, &st) == 0) {
        if (!shm_zone_may_unlink(dir, &st)) {
            *err = EPERM;
            rc = SHMLOCK_SYSTEM;
        } else {
            shm_zone_mark_dead(fd, &st);
            if (shm_zone_unlink_if(path, &st) != 0) {
                *err = errno;
                rc = SHMLOCK_SYSTEM;
            }
        }
    } else if (unlink(path) != 0) {
        /* not a zone we may open (a symlink, another user's file...):
         * the name goes all the same, as the caller asked */
        *err = errno;
        rc = errno == ENOENT ? SHMLOCK_NOT_FOUND : SHMLOCK_SYSTEM;
    }
    if (fd >= 0) {
        close(fd);
    }
    close(dfd);
    return rc;
}


/* ---- opening ---- */

/* mode: owner read-write, nothing beyond 0666, never others-writable */
static int
shm_zone_mode_ok(unsigned mode)
{
    return (mode & 0600) == 0600 && (mode & ~0666u) == 0
           && (mode & S_IWOTH) == 0;
}

int
shm_zone_open(shmlock_open_t *o, shmlock_zone_t **out, int *err)
{
    char         path[4096];
    struct stat  dead, made;
    const char  *dir;
    uint64_t     size = o->size;
    int          rc, attempt, made_one = 0;
    uint32_t     nshards;

    *err = 0;
    memset(&made, 0, sizeof(made));
    o->created = 0;
    o->file_mode = 0;
    o->file_layout = 0;
    o->file_uid = -1;
    o->file_gid = -1;
    o->zone_size = 0;
    if (!shm_zone_name_ok(o->name, o->name_len)) {
        return SHMLOCK_BAD_NAME;
    }
    if (size != 0 && (size < SHMLOCK_MIN_SIZE || size > ((uint64_t) 1 << 40)))
    {
        return SHMLOCK_BAD_SIZE;
    }
    size = (size + 4095) & ~(uint64_t) 4095;
    nshards = zone_shards_for(size, o->shards);
    if (size != 0 && nshards == 0) {
        return SHMLOCK_BAD_SHARDS;
    }
    if (o->mode == 0) {
        o->mode = 0600;
    }
    if (!shm_zone_mode_ok(o->mode)) {
        return SHMLOCK_BAD_MODE;
    }
    dir = shm_zone_dir(o->dir);
    if (shm_zone_path(path, sizeof(path), dir, o->name, o->name_len) != 0) {
        *err = ENAMETOOLONG;
        return SHMLOCK_SYSTEM;
    }

    /* attach, else create (then attach what we made); a racing creator,
     * destroyer or remover sends us round */
    for (attempt = 0; attempt < SHM_ZONE_ATTEMPTS; attempt++) {
        rc = shm_zone_attach_file(o, path, out, err, &dead,
                                  made_one ? &made : NULL);
        if (rc == SHM_ZONE_DEAD) {
            rc = shm_zone_remove_dead(dir, path, &dead, err);
            if (rc != SHMLOCK_OK) {
                return rc;
            }
            continue;
        }
        if (rc == SHM_ZONE_AGAIN) {
            continue;
        }
        if (rc != SHM_ZONE_GONE) {
            break;
        }
        *err = 0;
        if (size == 0) {
            return SHMLOCK_NOT_FOUND;    /* attach only */
        }
        rc = shm_zone_create_file(o, dir, path, size, nshards, &made, err);
        if (rc == SHMLOCK_OK) {
            made_one = 1;
            continue;
        }
        if (rc != SHMLOCK_EXISTS) {
            break;
        }
    }
    if (attempt == SHM_ZONE_ATTEMPTS) {
        *err = EAGAIN;
        return SHMLOCK_SYSTEM;
    }
    if (rc == SHMLOCK_SYSTEM && *err == EACCES && o->file_mode == 0) {
        shm_zone_note_dir(o, dir);
    }
    if (rc == SHMLOCK_OK) {
        o->zone_size = (size_t) (*out)->size;
        o->created = made_one && shm_zone_is_file(*out, &made);
    }
    return rc;
}
