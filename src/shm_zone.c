#define _GNU_SOURCE
#include "shm_zone.h"
#include "shmlock.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ZONE_DEFAULT_DIR  "/dev/shm"
#define ZONE_PREFIX       "shmlock."
#define ZONE_ATTEMPTS     8

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

static int
zone_path(char *path, size_t size, const char *dir, const char *name,
    size_t name_len, const char *tmp)
{
    int  n;

    if (dir == NULL || dir[0] == '\0') {
        dir = getenv("SHMLOCK_DIR");
    }
    if (dir == NULL || dir[0] == '\0') {
        dir = ZONE_DEFAULT_DIR;
    }
    /* the temporary file is hidden: names never start with '.' */
    n = snprintf(path, size, "%s/%s" ZONE_PREFIX "%.*s%s", dir,
                 tmp ? "." : "", (int) name_len, name, tmp ? tmp : "");
    return n > 0 && (size_t) n < size ? 0 : -1;
}

static int
zone_map(int fd, uint64_t size, char **base)
{
    void  *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

    if (p == MAP_FAILED) {
        return -1;
    }
    *base = p;
    return 0;
}

static int
zone_handle(char *base, uint64_t size, shmlock_zone_t **out)
{
    shmlock_zone_t  *z = malloc(sizeof(*z));

    if (z == NULL) {
        munmap(base, size);
        errno = ENOMEM;
        return SHMLOCK_SYSTEM;
    }
    zone_attach(z, base, size);
    z->handles = 1;
    *out = z;
    return SHMLOCK_OK;
}

/* Attach to a published zone.  ENOENT is passed up: it was destroyed in
 * between, and the caller may create it again. */
static int
zone_attach_file(const char *path, shmlock_zone_t **out, int *err)
{
    struct stat  st;
    char        *base;
    int          fd, rc;

    fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        *err = errno;
        return errno == ELOOP ? SHMLOCK_INCOMPATIBLE : SHMLOCK_SYSTEM;
    }
    if (fstat(fd, &st) != 0) {
        *err = errno;
        close(fd);
        return SHMLOCK_SYSTEM;
    }
    /* fstat before mmap: a short file would SIGBUS instead of failing */
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid()
        || (uint64_t) st.st_size < SHMLOCK_MIN_SIZE)
    {
        close(fd);
        return SHMLOCK_INCOMPATIBLE;
    }
    if (zone_map(fd, (uint64_t) st.st_size, &base) != 0) {
        *err = errno;
        close(fd);
        return SHMLOCK_SYSTEM;
    }
    close(fd);

    if (zone_check(base, (uint64_t) st.st_size) != 0) {
        munmap(base, (size_t) st.st_size);
        return SHMLOCK_INCOMPATIBLE;
    }
    rc = zone_handle(base, (uint64_t) st.st_size, out);
    if (rc != SHMLOCK_OK) {
        *err = errno;
    }
    return rc;
}

/*
 * Reserve the zone's memory now: on a tmpfs short of room, a plain
 * ftruncate would succeed and the first write would SIGBUS instead.
 */
static int
zone_reserve(int fd, uint64_t size)
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

/* Build a zone in a hidden file and publish it under `path` with link(2). */
static int
zone_create_file(const char *dir, const char *name, size_t name_len,
    const char *path, uint64_t size, uint32_t nshards, shmlock_zone_t **out,
    int *err)
{
    static unsigned  seq;
    char             tmp[4096], suffix[64];
    char            *base;
    int              fd, rc;

    snprintf(suffix, sizeof(suffix), ".%u.%u.tmp", sys_pid(),
             __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED));
    if (zone_path(tmp, sizeof(tmp), dir, name, name_len, suffix) != 0) {
        *err = ENAMETOOLONG;
        return SHMLOCK_SYSTEM;
    }

    fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        *err = errno;
        return SHMLOCK_SYSTEM;
    }
    if (fchmod(fd, 0600) != 0 || zone_reserve(fd, size) != 0
        || zone_map(fd, size, &base) != 0)
    {
        *err = errno;
        close(fd);
        unlink(tmp);
        return SHMLOCK_SYSTEM;
    }
    close(fd);

    zone_format(base, size, nshards);

    if (link(tmp, path) != 0) {
        *err = errno;
        unlink(tmp);
        munmap(base, size);
        return *err == EEXIST ? SHMLOCK_EXISTS : SHMLOCK_SYSTEM;
    }
    unlink(tmp);

    rc = zone_handle(base, size, out);
    if (rc != SHMLOCK_OK) {
        *err = errno;
    }
    return rc;
}

int
shm_zone_open(const char *dir, const char *name, size_t name_len,
    uint64_t size, uint32_t shards, shmlock_zone_t **out, int *err)
{
    char      path[4096];
    int       rc, attempt;
    uint32_t  nshards;

    *err = 0;
    if (!shm_zone_name_ok(name, name_len)) {
        return SHMLOCK_BAD_NAME;
    }
    if (size != 0 && (size < SHMLOCK_MIN_SIZE || size > ((uint64_t) 1 << 40)))
    {
        return SHMLOCK_BAD_SIZE;
    }
    size = (size + 4095) & ~(uint64_t) 4095;
    nshards = zone_shards_for(size, shards);
    if (size != 0 && nshards == 0) {
        return SHMLOCK_BAD_SHARDS;
    }
    if (zone_path(path, sizeof(path), dir, name, name_len, NULL) != 0) {
        *err = ENAMETOOLONG;
        return SHMLOCK_SYSTEM;
    }

    /* attach, else create; a racing creator or destroyer sends us round */
    for (attempt = 0; attempt < ZONE_ATTEMPTS; attempt++) {
        rc = zone_attach_file(path, out, err);
        if (rc != SHMLOCK_SYSTEM || *err != ENOENT) {
            return rc;
        }
        if (size == 0) {
            return SHMLOCK_NOT_FOUND;    /* attach only */
        }
        rc = zone_create_file(dir, name, name_len, path, size, nshards, out,
                              err);
        if (rc != SHMLOCK_EXISTS) {
            return rc;
        }
    }
    *err = EAGAIN;
    return SHMLOCK_SYSTEM;
}

void
shm_zone_close(shmlock_zone_t *z)
{
    if (z != NULL && --z->handles == 0) {
        munmap(z->base, z->size);
        free(z);
    }
}

int
shm_zone_destroy(const char *dir, const char *name, size_t name_len, int *err)
{
    char  path[4096];

    *err = 0;
    if (!shm_zone_name_ok(name, name_len)) {
        return SHMLOCK_BAD_NAME;
    }
    if (zone_path(path, sizeof(path), dir, name, name_len, NULL) != 0) {
        *err = ENAMETOOLONG;
        return SHMLOCK_SYSTEM;
    }
    if (unlink(path) != 0) {
        *err = errno;
        return errno == ENOENT ? SHMLOCK_NOT_FOUND : SHMLOCK_SYSTEM;
    }
    return SHMLOCK_OK;
}
