/*
 * A C driver for libshmlock's public ABI (src/shmlock.h), run under
 * valgrind (`make test-valgrind`) and under ASan+UBSan (`make test-asan`).
 *
 * It walks every exported operation, the error paths, eviction, a full
 * zone, zone files that are not ours, and the crash paths: processes
 * SIGKILLed in the middle of an update or while holding a shard's mutex.
 * After each phase the zone must pass verify().  Then zones with garbage
 * written into them: every call must still return one of its statuses.
 * Zones live in a private temporary directory that is removed at the end.
 *
 * usage: shmlock_test [dir]     (default: a new directory under $TMPDIR)
 * SHMLOCK_CORRUPT_ROUNDS=n: corruption rounds per zone (default 300)
 * SHMLOCK_SLOT_ROUNDS=n: slot lock rounds per process (default 5000)
 */

#define _GNU_SOURCE
#include "shmlock.h"
#include "shmlock_testing.h"
#include "zone.h"       /* the corruption test finds the words to overwrite */

#define CHECK_RC_NAME  shmlock_strerror
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>

#define KEY(s)  (s), strlen(s)

static char  dir[4096];


/* ---- helpers ---- */

static void
sleep_ms(long ms)
{
    struct timespec  ts = { ms / 1000, (ms % 1000) * 1000000 };

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) { /* void */ }
}

/*
 * Open handles are also kept here: a forked child that _exit()s holds its
 * parent's handles, and valgrind must find them reachable, not lost.
 */
static shmlock_zone_t  *open_zones[8];

static shmlock_zone_t *
open_zone(const char *name, size_t size)
{
    shmlock_zone_t  *z = NULL;
    size_t           i;

    CHECK_RC(shmlock_zone_open(dir, KEY(name), size, 0, &z), SHMLOCK_OK);
    CHECK(z != NULL);
    for (i = 0; open_zones[i] != NULL; i++) {
        CHECK(i + 1 < sizeof(open_zones) / sizeof(open_zones[0]));
    }
    open_zones[i] = z;
    return z;
}

static void
close_zone(shmlock_zone_t *z)
{
    size_t  i, n = sizeof(open_zones) / sizeof(open_zones[0]);

    for (i = 0; i < n && open_zones[i] != z; i++) { /* void */ }
    CHECK(i < n);
    for ( ; i + 1 < n; i++) {
        open_zones[i] = open_zones[i + 1];
    }
    open_zones[n - 1] = NULL;
    shmlock_zone_close(z);
}

static void
verify(shmlock_zone_t *z)
{
    char  msg[256];
    int   rc = shmlock_dict_verify(z, msg, sizeof(msg));

    if (rc != SHMLOCK_OK) {
        fprintf(stderr, "verify: %s\n", msg);
        exit(1);
    }
}

static shmlock_value_t
str_value(const char *s, size_t len, uint32_t flags)
{
    shmlock_value_t  v;

    memset(&v, 0, sizeof(v));
    v.type = SHMLOCK_TSTRING;
    v.str = s;
    v.len = len;
    v.flags = flags;
    return v;
}

static shmlock_value_t
num_value(double n)
{
    shmlock_value_t  v;

    memset(&v, 0, sizeof(v));
    v.type = SHMLOCK_TNUMBER;
    v.num = n;
    return v;
}

static shmlock_value_t
nil_value(void)
{
    shmlock_value_t  v;

    memset(&v, 0, sizeof(v));
    v.type = SHMLOCK_TNIL;
    return v;
}

static int
store(shmlock_zone_t *z, int op, const char *key, shmlock_value_t v,
    int64_t exptime_ms)
{
    int  forcible = -1;
    int  rc = shmlock_dict_store(z, op, KEY(key), &v, exptime_ms, &forcible);

    CHECK(forcible == 0 || forcible == 1);
    return rc;
}

static int
set_str(shmlock_zone_t *z, int op, const char *key, const char *s)
{
    return store(z, op, key, str_value(s, strlen(s), 0), 0);
}

/* The string stored under key must be exactly s (len bytes). */
static void
expect_str(shmlock_zone_t *z, const char *key, const char *s, size_t len)
{
    shmlock_value_t  out;
    char            *buf = malloc(len + 1);

    CHECK(buf != NULL);
    CHECK_RC(shmlock_dict_get(z, KEY(key), 0, &out, buf, len + 1),
             SHMLOCK_OK);
    CHECK(out.type == SHMLOCK_TSTRING);
    CHECK(out.len == len);
    CHECK(memcmp(buf, s, len) == 0);
    free(buf);
}

/* What get() says of key; its bytes are dropped (8 at most may come). */
static shmlock_value_t
get_small(shmlock_zone_t *z, const char *key)
{
    shmlock_value_t  out;
    char             buf[8];

    CHECK_RC(shmlock_dict_get(z, KEY(key), 0, &out, buf, sizeof(buf)),
             SHMLOCK_OK);
    return out;
}

static double
expect_num(shmlock_zone_t *z, const char *key)
{
    shmlock_value_t  out = get_small(z, key);

    CHECK(out.type == SHMLOCK_TNUMBER);
    return out.num;
}

/* The number under key, 0 when absent. */
static double
read_num(shmlock_zone_t *z, const char *key)
{
    shmlock_value_t  out = get_small(z, key);

    CHECK(out.type == SHMLOCK_TNUMBER || out.type == SHMLOCK_TNIL);
    return out.type == SHMLOCK_TNIL ? 0 : out.num;
}

static void
expect_absent(shmlock_zone_t *z, const char *key)
{
    CHECK(get_small(z, key).type == SHMLOCK_TNIL);
}

/* The key's wake word as it is now (counted and uncounted at once). */
static uint32_t
wait_word(shmlock_zone_t *z, uint32_t hash)
{
    uint32_t  seq = shmlock_wait_begin(z, hash);

    CHECK_RC(shmlock_wait_end(z, hash, seq, 0), SHMLOCK_OK);
    return seq;
}

static int
count_keys(shmlock_zone_t *z)
{
    int     count = -1;
    size_t  used = 0, size = 1 << 20;
    char   *buf = malloc(size);

    CHECK(buf != NULL);
    CHECK_RC(shmlock_dict_get_keys(z, 0, buf, size, &count, &used),
             SHMLOCK_OK);
    free(buf);
    return count;
}

static char *
zone_file(const char *name)
{
    static char  path[4200];

    snprintf(path, sizeof(path), "%s/shmlock.%s", dir, name);
    return path;
}

/* Waits for a child; returns its exit status, or 128 + signal. */
static int
reap(pid_t pid)
{
    int  status;

    while (waitpid(pid, &status, 0) < 0) {
        CHECK(errno == EINTR);
    }
    if (WIFSIGNALED(status)) {
        return 128 + WTERMSIG(status);
    }
    return WEXITSTATUS(status);
}


/* ---- names, sizes, zone files ---- */

static void
test_names(void)
{
    char             long_name[SHMLOCK_NAME_MAX + 2];
    shmlock_zone_t  *z = NULL;

    CHECK(shmlock_zone_name_ok(KEY("ok_name-1.x")) == 1);
    CHECK(shmlock_zone_name_ok(KEY(".hidden")) == 0);
    CHECK(shmlock_zone_name_ok(KEY("a/b")) == 0);
    CHECK(shmlock_zone_name_ok(KEY("a b")) == 0);
    CHECK(shmlock_zone_name_ok(KEY("")) == 0);

    memset(long_name, 'n', sizeof(long_name));
    CHECK(shmlock_zone_name_ok(long_name, SHMLOCK_NAME_MAX) == 1);
    CHECK(shmlock_zone_name_ok(long_name, SHMLOCK_NAME_MAX + 1) == 0);

    CHECK_RC(shmlock_zone_open(dir, KEY("../x"), 1 << 20, 0, &z),
             SHMLOCK_BAD_NAME);
    CHECK_RC(shmlock_zone_open(dir, KEY("small"), 1024, 0, &z),
             SHMLOCK_BAD_SIZE);
    CHECK_RC(shmlock_zone_destroy(dir, KEY("a/b")), SHMLOCK_BAD_NAME);
    CHECK_RC(shmlock_zone_destroy(dir, KEY("never-made")), SHMLOCK_NOT_FOUND);

    /* shmlock_errno: the errno behind a SHMLOCK_SYSTEM, and 0 after any
     * other outcome of a zone call: never a stale one */
    CHECK_RC(shmlock_zone_open("/nonexistent-shmlock-dir", KEY("x"), 1 << 20,
                               0, &z), SHMLOCK_SYSTEM);
    CHECK(shmlock_errno() == ENOENT);
    CHECK_RC(shmlock_zone_destroy(dir, KEY("never-made")), SHMLOCK_NOT_FOUND);
    CHECK(shmlock_errno() == 0);
    CHECK_RC(shmlock_zone_destroy("/nonexistent-shmlock-dir", KEY("x")),
             SHMLOCK_SYSTEM);
    CHECK(shmlock_errno() == ENOENT);
    CHECK_RC(shmlock_zone_open(dir, KEY("errno"), 64 * 1024, 0, &z),
             SHMLOCK_OK);
    CHECK(shmlock_errno() == 0);
    CHECK_RC(shmlock_zone_open("/nonexistent-shmlock-dir", KEY("x"), 1 << 20,
                               0, &z), SHMLOCK_SYSTEM);
    CHECK_RC(shmlock_zone_destroy(dir, KEY("errno")), SHMLOCK_OK);
    CHECK(shmlock_errno() == 0);
    shmlock_zone_close(z);

    for (int rc = SHMLOCK_OK; rc <= SHMLOCK_VALUE_TOO_LARGE; rc++) {
        CHECK(shmlock_strerror(rc) != NULL);
    }
    CHECK(strcmp(shmlock_strerror(SHMLOCK_NO_MEMORY), "no memory") == 0);
    CHECK(strcmp(shmlock_strerror(SHMLOCK_INCOMPATIBLE), "incompatible zone")
          == 0);
}

/* shmlock_zone_open2: the mode and group of a new zone, its checks, the
 * file's identity reported, created and zone_size */
static void
test_open2(void)
{
    shmlock_zone_t  *z = NULL, *again = NULL;
    shmlock_open_t   o;
    struct stat      st;
    char             path[4200];
    unsigned         bad[] = { 0666, 0602, 0400, 0460, 0700, 01600 };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&o, 0, sizeof(o));
        o.dir = dir; o.name = "m"; o.name_len = 1; o.size = 64 * 1024;
        o.mode = bad[i]; o.group = -1;
        CHECK_RC(shmlock_zone_open2(&o, &z), SHMLOCK_BAD_MODE);
    }

    memset(&o, 0, sizeof(o));
    o.dir = dir; o.name = "m"; o.name_len = 1; o.size = 61 * 1024 + 1;
    o.mode = 0640; o.group = (int64_t) getegid();
    CHECK_RC(shmlock_zone_open2(&o, &z), SHMLOCK_OK);
    CHECK(o.created == 1);
    CHECK(o.zone_size == 64 * 1024);
    CHECK(o.file_mode == 0640);
    CHECK(o.file_uid == (int64_t) geteuid());
    CHECK(snprintf(path, sizeof(path), "%s/shmlock.m", dir)
          < (int) sizeof(path));
    CHECK(stat(path, &st) == 0 && (st.st_mode & 07777) == 0640);

    /* attaching: not created, the real size, whatever was asked */
    memset(&o, 0, sizeof(o));
    o.dir = dir; o.name = "m"; o.name_len = 1; o.size = 1 << 20;
    o.group = -1;
    CHECK_RC(shmlock_zone_open2(&o, &again), SHMLOCK_OK);
    CHECK(again == z && o.created == 0 && o.zone_size == 64 * 1024);
    shmlock_zone_close(again);

    /* group-writable: trusted only when its group is named */
    CHECK(chmod(path, 0660) == 0);
    shmlock_zone_close(z);
    o.group = -1;
    CHECK_RC(shmlock_zone_open2(&o, &z), SHMLOCK_UNSAFE_MODE);
    CHECK(o.file_mode == 0660 && o.file_gid == (int64_t) st.st_gid);
    o.group = (int64_t) st.st_gid;
    CHECK_RC(shmlock_zone_open2(&o, &z), SHMLOCK_OK);
    shmlock_zone_close(z);
    CHECK(chmod(path, 0662) == 0);
    CHECK_RC(shmlock_zone_open2(&o, &z), SHMLOCK_UNSAFE_MODE);
    CHECK_RC(shmlock_zone_destroy(dir, KEY("m")), SHMLOCK_OK);
}

/* owner_uid (root only): a new zone file is made the owner's, a file of
 * our own is handed over on attach, a file of the owner is trusted as our
 * own, and a file of anyone else is still refused */
static void
test_hand_over(void)
{
    shmlock_zone_t  *z = NULL;
    shmlock_open_t   o;
    struct stat      st;
    char             path[4200];
    const int64_t    owner = 65534, other = 65533;

    if (geteuid() != 0) {
        return;
    }
    CHECK(snprintf(path, sizeof(path), "%s/shmlock.h", dir)
          < (int) sizeof(path));

    memset(&o, 0, sizeof(o));
    o.dir = dir; o.name = "h"; o.name_len = 1; o.size = 64 * 1024;
    o.group = -1; o.owner_uid = owner; o.owner_gid = owner;
    CHECK_RC(shmlock_zone_open2(&o, &z), SHMLOCK_OK);
    CHECK(o.created == 1 && o.file_uid == owner && o.file_gid == owner);
    CHECK(stat(path, &st) == 0 && st.st_uid == (uid_t) owner
          && st.st_gid == (gid_t) owner && (st.st_mode & 07777) == 0600);
    shmlock_zone_close(z);

    /* trusted as our own only when we hand zones to its owner */
    o.owner_uid = 0;
    CHECK_RC(shmlock_zone_open2(&o, &z), SHMLOCK_NOT_OWNER);
    o.owner_uid = other;
    CHECK_RC(shmlock_zone_open2(&o, &z), SHMLOCK_NOT_OWNER);
    o.owner_uid = owner;
    CHECK_RC(shmlock_zone_open2(&o, &z), SHMLOCK_OK);
    CHECK(o.created == 0 && o.file_uid == owner);
    shmlock_zone_close(z);

    /* ours: handed over on attach, group and all */
    CHECK(chown(path, 0, 0) == 0);
    CHECK_RC(shmlock_zone_open2(&o, &z), SHMLOCK_OK);
    CHECK(stat(path, &st) == 0 && st.st_uid == (uid_t) owner
          && st.st_gid == (gid_t) owner);
    shmlock_zone_close(z);

    /* a group shared on purpose stays */
    CHECK(chown(path, 0, 0) == 0);
    o.group = 0;
    CHECK_RC(shmlock_zone_open2(&o, &z), SHMLOCK_OK);
    CHECK(stat(path, &st) == 0 && st.st_uid == (uid_t) owner
          && st.st_gid == 0);
    shmlock_zone_close(z);
    CHECK_RC(shmlock_zone_destroy(dir, KEY("h")), SHMLOCK_OK);
}

static void
test_zone_files(void)
{
    shmlock_zone_t  *a, *b;
    struct stat      st;

    a = open_zone("files", 256 * 1024);
    CHECK(stat(zone_file("files"), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
    CHECK(S_ISREG(st.st_mode));
    CHECK(shmlock_dict_capacity(a) == 256 * 1024);

    /* attaching with another size keeps the real one */
    b = open_zone("files", 4 << 20);
    CHECK(shmlock_dict_capacity(b) == 256 * 1024);
    CHECK(shmlock_dict_capacity(b) == shmlock_dict_capacity(a));

    CHECK_RC(set_str(a, SHMLOCK_OP_SET, "k", "from a"), SHMLOCK_OK);
    expect_str(b, "k", KEY("from a"));

    /* destroy unlinks the name, and every mapping of the zone refuses to
     * act on it from then on */
    CHECK(shmlock_zone_dead(a) == 0);
    CHECK_RC(shmlock_zone_destroy(dir, KEY("files")), SHMLOCK_OK);
    CHECK(stat(zone_file("files"), &st) != 0 && errno == ENOENT);
    CHECK(shmlock_zone_dead(a) == 1 && shmlock_zone_dead(b) == 1);
    CHECK_RC(set_str(b, SHMLOCK_OP_SET, "k2", "too late"),
             SHMLOCK_DESTROYED);
    {
        shmlock_ticket_t  t;

        memset(&t, 0, sizeof(t));
        CHECK_RC(shmlock_slot_acquire(a, KEY("lk"), 1, 1000, 0, &t),
                 SHMLOCK_DESTROYED);
    }
    CHECK_RC(shmlock_zone_destroy(dir, KEY("files")), SHMLOCK_NOT_FOUND);
    close_zone(a);
    close_zone(b);

    /* the same name now makes a new, empty zone */
    a = open_zone("files", 64 * 1024);
    expect_absent(a, "k");
    CHECK(shmlock_dict_capacity(a) == 64 * 1024);
    close_zone(a);
    CHECK_RC(shmlock_zone_destroy(dir, KEY("files")), SHMLOCK_OK);
}

/*
 * A zone file removed (rm) and made again under its name (issue 30): the
 * creator marks the removed zone dead before it publishes the new file
 * (shm_removed.h); here the one process is both the holder and the
 * creator, so its scan reaches the old mapping through /proc/self.  The
 * holder's release and a new acquisition there refuse at once, whatever
 * the watch's clock, and the new zone holds the key.
 */
static void
test_zone_made_again(void)
{
    shmlock_zone_t    *a, *b;
    shmlock_ticket_t   t, u;

    a = open_zone("again", 64 * 1024);
    CHECK_RC(shmlock_slot_acquire(a, KEY("k"), 1, 0, 0, &t), SHMLOCK_OK);
    CHECK_RC(shmlock_slot_acquire(a, KEY("j"), 1, 0, 0, &u), SHMLOCK_OK);
    CHECK_RC(shmlock_slot_release(a, &u), SHMLOCK_OK);
    CHECK(unlink(zone_file("again")) == 0);
    b = open_zone("again", 64 * 1024);
    CHECK(b != a);
    CHECK(*shmlock_zone_dead_word(a) == 2);
    CHECK_RC(shmlock_slot_acquire(b, KEY("k"), 2, 0, 0, &u), SHMLOCK_OK);
    CHECK_RC(shmlock_slot_release(a, &t), SHMLOCK_REMOVED);
    CHECK_RC(shmlock_slot_acquire(a, KEY("j"), 3, 0, 0, &t),
             SHMLOCK_REMOVED);
    CHECK_RC(set_str(a, SHMLOCK_OP_SET, "x", "lost"), SHMLOCK_REMOVED);
    CHECK_RC(shmlock_slot_release(b, &u), SHMLOCK_OK);
    close_zone(a);
    close_zone(b);
    CHECK_RC(shmlock_zone_destroy(dir, KEY("again")), SHMLOCK_OK);
}

static void
write_file(const char *path, size_t size, int fill)
{
    char  *buf = malloc(size);
    int    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

    CHECK(buf != NULL && fd >= 0);
    memset(buf, fill, size);
    CHECK(write(fd, buf, size) == (ssize_t) size);
    close(fd);
    free(buf);
}

static void
test_foreign_files(void)
{
    shmlock_zone_t  *z = NULL;
    char             target[4300];

    write_file(zone_file("garbage"), 64 * 1024, 'x');
    CHECK_RC(shmlock_zone_open(dir, KEY("garbage"), 1 << 20, 0, &z),
             SHMLOCK_INCOMPATIBLE);
    CHECK(z == NULL);

    write_file(zone_file("short"), 100, 0);
    CHECK_RC(shmlock_zone_open(dir, KEY("short"), 1 << 20, 0, &z),
             SHMLOCK_INCOMPATIBLE);

    /* a symlink where the zone should be is never followed */
    snprintf(target, sizeof(target), "%s/target", dir);
    write_file(target, 64 * 1024, 0);
    CHECK(symlink(target, zone_file("link")) == 0);
    CHECK_RC(shmlock_zone_open(dir, KEY("link"), 64 * 1024, 0, &z),
             SHMLOCK_INCOMPATIBLE);

    /* a zone file that is not a regular file */
    CHECK(mkdir(zone_file("adir"), 0700) == 0);
    CHECK(shmlock_zone_open(dir, KEY("adir"), 64 * 1024, 0, &z) != SHMLOCK_OK);

    CHECK(unlink(zone_file("garbage")) == 0);
    CHECK(unlink(zone_file("short")) == 0);
    CHECK(unlink(zone_file("link")) == 0);
    CHECK(unlink(target) == 0);
    CHECK(rmdir(zone_file("adir")) == 0);
}


/* ---- dictionary operations ---- */

/*
 * Layout 11's head (src/entry.h): 32 bytes of key and string, 24 of key
 * before a number, user flags (when not 0) 4 bytes after the key.  Keys
 * of 20 to 40 bytes take turns between a string of 0 to 40 bytes, with
 * and without flags, and a number: each overwrite moves the head's room
 * and the value's place, in place or through a new entry.
 */
static void
test_head_room(shmlock_zone_t *z, const char *bytes)
{
    shmlock_value_t  out;
    char             key[41], buf[64];
    size_t           klen, vlen;
    uint32_t         flags;

    for (klen = 20; klen <= 40; klen++) {
        memcpy(key, bytes + 3, klen);
        for (vlen = 0; vlen <= 40; vlen += 3) {
            flags = (uint32_t) (vlen % 2 ? 0 : 1000 + vlen);
            CHECK_RC(shmlock_dict_store(z, SHMLOCK_OP_SET, key, klen,
                         &(shmlock_value_t) { .type = SHMLOCK_TSTRING,
                                              .str = bytes, .len = vlen,
                                              .flags = flags },
                         0, &(int) { 0 }), SHMLOCK_OK);
            CHECK_RC(shmlock_dict_get(z, key, klen, 0, &out, buf,
                                      sizeof(buf)), SHMLOCK_OK);
            CHECK(out.type == SHMLOCK_TSTRING && out.len == vlen
                  && out.flags == flags && memcmp(buf, bytes, vlen) == 0);

            CHECK_RC(shmlock_dict_store(z, SHMLOCK_OP_SET, key, klen,
                         &(shmlock_value_t) { .type = SHMLOCK_TNUMBER,
                                              .num = (double) vlen + 0.5,
                                              .flags = flags ^ 3 },
                         0, &(int) { 0 }), SHMLOCK_OK);
            CHECK_RC(shmlock_dict_get(z, key, klen, 0, &out, buf,
                                      sizeof(buf)), SHMLOCK_OK);
            CHECK(out.type == SHMLOCK_TNUMBER
                  && out.num == (double) vlen + 0.5
                  && out.flags == (flags ^ 3));
        }
        CHECK_RC(shmlock_dict_store(z, SHMLOCK_OP_SET, key, klen,
                     &(shmlock_value_t) { .type = SHMLOCK_TNIL }, 0,
                     &(int) { 0 }), SHMLOCK_OK);
    }
    verify(z);
}

static void
test_strings_and_types(shmlock_zone_t *z)
{
    shmlock_value_t  v, out;
    char             big[5000], small[4];
    size_t           i;

    for (i = 0; i < sizeof(big); i++) {
        big[i] = (char) ('a' + i % 26);
    }

    /* sizes around the chunk boundaries: 32 bytes of key and string in the
     * head, 60 after */
    for (i = 0; i < 200; i += 7) {
        CHECK_RC(store(z, SHMLOCK_OP_SET, "s", str_value(big, i, 0), 0),
                 SHMLOCK_OK);
        expect_str(z, "s", big, i);
    }
    test_head_room(z, big);
    CHECK_RC(store(z, SHMLOCK_OP_SET, "big", str_value(big, sizeof(big), 7),
                   0), SHMLOCK_OK);
    expect_str(z, "big", big, sizeof(big));

    /* a buffer too small says how much is needed */
    CHECK_RC(shmlock_dict_get(z, KEY("big"), 0, &out, small, sizeof(small)),
             SHMLOCK_AGAIN);
    CHECK(out.len == sizeof(big));
    CHECK(out.flags == 7);

    CHECK_RC(store(z, SHMLOCK_OP_SET, "n", num_value(-2.5), 0), SHMLOCK_OK);
    CHECK(expect_num(z, "n") == -2.5);

    memset(&v, 0, sizeof(v));
    v.type = SHMLOCK_TBOOLEAN;
    v.num = 1;
    CHECK_RC(store(z, SHMLOCK_OP_SET, "b", v, 0), SHMLOCK_OK);
    CHECK_RC(shmlock_dict_get(z, KEY("b"), 0, &out, small, sizeof(small)),
             SHMLOCK_OK);
    CHECK(out.type == SHMLOCK_TBOOLEAN && out.num != 0);

    /* a key as long as allowed */
    {
        char  *key = malloc(SHMLOCK_KEY_MAX);

        CHECK(key != NULL);
        memset(key, 'k', SHMLOCK_KEY_MAX);
        v = num_value(1);
        CHECK_RC(shmlock_dict_store(z, SHMLOCK_OP_SET, key, SHMLOCK_KEY_MAX,
                                    &v, 0, &(int) {0}), SHMLOCK_OK);
        CHECK_RC(shmlock_dict_get(z, key, SHMLOCK_KEY_MAX, 0, &out, small,
                                  sizeof(small)), SHMLOCK_OK);
        CHECK(out.type == SHMLOCK_TNUMBER && out.num == 1);
        free(key);
    }

    verify(z);
}

static void
test_add_replace_delete(shmlock_zone_t *z)
{
    CHECK_RC(set_str(z, SHMLOCK_OP_ADD, "a", "1"), SHMLOCK_OK);
    CHECK_RC(set_str(z, SHMLOCK_OP_ADD, "a", "2"), SHMLOCK_EXISTS);
    CHECK_RC(set_str(z, SHMLOCK_OP_ADD | SHMLOCK_OP_SAFE, "a", "2"),
             SHMLOCK_EXISTS);
    expect_str(z, "a", KEY("1"));

    CHECK_RC(set_str(z, SHMLOCK_OP_REPLACE, "none", "x"), SHMLOCK_NOT_FOUND);
    CHECK_RC(set_str(z, SHMLOCK_OP_REPLACE, "a", "3"), SHMLOCK_OK);
    expect_str(z, "a", KEY("3"));

    /* delete = set to nil; deleting an absent key is fine */
    CHECK_RC(store(z, SHMLOCK_OP_SET, "a", nil_value(), 0), SHMLOCK_OK);
    expect_absent(z, "a");
    CHECK_RC(store(z, SHMLOCK_OP_SET, "a", nil_value(), 0), SHMLOCK_OK);
    CHECK_RC(set_str(z, SHMLOCK_OP_ADD, "a", "4"), SHMLOCK_OK);
    expect_str(z, "a", KEY("4"));

    verify(z);
}

static void
test_incr(shmlock_zone_t *z)
{
    double  v;
    int     forcible;

    v = 1;
    CHECK_RC(shmlock_dict_incr(z, KEY("cnt"), &v, 0, 0, 0, &forcible),
             SHMLOCK_NOT_FOUND);

    v = 2;
    CHECK_RC(shmlock_dict_incr(z, KEY("cnt"), &v, 1, 10, 0, &forcible),
             SHMLOCK_OK);
    CHECK(v == 12);
    v = -0.5;
    CHECK_RC(shmlock_dict_incr(z, KEY("cnt"), &v, 1, 100, 0, &forcible),
             SHMLOCK_OK);
    CHECK(v == 11.5);
    CHECK(expect_num(z, "cnt") == 11.5);

    CHECK_RC(set_str(z, SHMLOCK_OP_SET, "str", "abc"), SHMLOCK_OK);
    v = 1;
    CHECK_RC(shmlock_dict_incr(z, KEY("str"), &v, 0, 0, 0, &forcible),
             SHMLOCK_NOT_A_NUMBER);

    /* init_ttl applies to the entry incr creates */
    v = 1;
    CHECK_RC(shmlock_dict_incr(z, KEY("short"), &v, 1, 0, 30, &forcible),
             SHMLOCK_OK);
    CHECK(v == 1);
    sleep_ms(50);
    expect_absent(z, "short");

    verify(z);
}

/* lists: both ends, long elements, AGAIN without popping, removal when
 * emptied, and a list under every kind of store */
static void
test_lists(shmlock_zone_t *z)
{
    shmlock_value_t  v, out;
    char             buf[16], big[3000];
    uint32_t         len;
    int              i, forcible;
    double           d;

    memset(&v, 0, sizeof(v));
    memset(big, 'L', sizeof(big));
    for (i = 0; i < 6; i++) {
        if (i % 2 == 0) {
            v.type = SHMLOCK_TSTRING;
            v.str = big;
            v.len = 100 + (size_t) i * 500;
        } else {
            v.type = SHMLOCK_TNUMBER;
            v.num = i;
        }
        CHECK_RC(shmlock_dict_push(z, i < 3 ? SHMLOCK_LEFT : SHMLOCK_RIGHT,
                                   KEY("list"), &v, &len), SHMLOCK_OK);
        CHECK(len == (uint32_t) i + 1);
    }
    CHECK_RC(shmlock_dict_llen(z, KEY("list"), &len), SHMLOCK_OK);
    CHECK(len == 6);
    verify(z);

    /* left to right: 100+1000 bytes, 1, 100 bytes, 3, 2100 bytes, 5 */
    CHECK_RC(shmlock_dict_pop(z, SHMLOCK_LEFT, KEY("list"), &out, buf,
                              sizeof(buf)), SHMLOCK_AGAIN);
    CHECK(out.len == 1100);
    CHECK_RC(shmlock_dict_llen(z, KEY("list"), &len), SHMLOCK_OK);
    CHECK(len == 6);
    CHECK_RC(shmlock_dict_pop(z, SHMLOCK_LEFT, KEY("list"), &out, big,
                              sizeof(big)), SHMLOCK_OK);
    CHECK(out.type == SHMLOCK_TSTRING && out.len == 1100);
    CHECK_RC(shmlock_dict_pop(z, SHMLOCK_RIGHT, KEY("list"), &out, buf,
                              sizeof(buf)), SHMLOCK_OK);
    CHECK(out.type == SHMLOCK_TNUMBER && out.num == 5);
    verify(z);

    CHECK_RC(shmlock_dict_get(z, KEY("list"), 0, &out, buf, sizeof(buf)),
             SHMLOCK_OK);
    CHECK(out.type == SHMLOCK_TLIST && out.len == 4);
    d = 1;
    CHECK_RC(shmlock_dict_incr(z, KEY("list"), &d, 0, 0, 0, &forcible),
             SHMLOCK_NOT_A_NUMBER);

    v.type = SHMLOCK_TBOOLEAN;
    CHECK_RC(shmlock_dict_push(z, SHMLOCK_LEFT, KEY("list"), &v, &len),
             SHMLOCK_BAD_VALUE);
    CHECK_RC(set_str(z, SHMLOCK_OP_SET, "plain", "x"), SHMLOCK_OK);
    v.type = SHMLOCK_TNUMBER;
    CHECK_RC(shmlock_dict_push(z, SHMLOCK_LEFT, KEY("plain"), &v, &len),
             SHMLOCK_NOT_A_LIST);
    CHECK_RC(shmlock_dict_pop(z, SHMLOCK_LEFT, KEY("plain"), &out, buf,
                              sizeof(buf)), SHMLOCK_NOT_A_LIST);
    CHECK_RC(shmlock_dict_llen(z, KEY("plain"), &len), SHMLOCK_NOT_A_LIST);

    /* set over the list frees its elements */
    CHECK_RC(set_str(z, SHMLOCK_OP_SET, "list", "now a string"), SHMLOCK_OK);
    expect_str(z, "list", KEY("now a string"));

    /* popped empty: the key goes */
    CHECK_RC(shmlock_dict_push(z, SHMLOCK_RIGHT, KEY("one"), &v, &len),
             SHMLOCK_OK);
    CHECK_RC(shmlock_dict_pop(z, SHMLOCK_RIGHT, KEY("one"), &out, buf,
                              sizeof(buf)), SHMLOCK_OK);
    CHECK(out.type == SHMLOCK_TNUMBER);
    CHECK_RC(shmlock_dict_pop(z, SHMLOCK_RIGHT, KEY("one"), &out, buf,
                              sizeof(buf)), SHMLOCK_OK);
    CHECK(out.type == SHMLOCK_TNIL);
    expect_absent(z, "one");

    CHECK_RC(store(z, SHMLOCK_OP_SET, "list", nil_value(), 0), SHMLOCK_OK);
    CHECK_RC(store(z, SHMLOCK_OP_SET, "plain", nil_value(), 0), SHMLOCK_OK);
    verify(z);
}

static void
test_expiry(shmlock_zone_t *z)
{
    shmlock_value_t  out;
    int64_t          ttl, t0;
    char             buf[16];
    int              rc, tries;

    /* the ttl of a 60 ms entry, read back: sound only when read within
     * those 60 ms, which a loaded machine (or valgrind) does not promise:
     * done again when late, 10 times at most */
    for (tries = 0;; tries++) {
        t0 = shmlock_now_ms();
        CHECK_RC(store(z, SHMLOCK_OP_SET, "e", str_value(KEY("v"), 3), 60),
                 SHMLOCK_OK);
        rc = shmlock_dict_ttl(z, KEY("e"), &ttl);
        if (shmlock_now_ms() - t0 < 59) {
            break;
        }
        CHECK(tries < 10);
    }
    CHECK_RC(rc, SHMLOCK_OK);
    CHECK(ttl > 0 && ttl <= 60);

    CHECK_RC(set_str(z, SHMLOCK_OP_SET, "forever", "v"), SHMLOCK_OK);
    CHECK_RC(shmlock_dict_ttl(z, KEY("forever"), &ttl), SHMLOCK_OK);
    CHECK(ttl == 0);
    CHECK_RC(shmlock_dict_ttl(z, KEY("none"), &ttl), SHMLOCK_NOT_FOUND);
    CHECK_RC(shmlock_dict_expire(z, KEY("none"), 10), SHMLOCK_NOT_FOUND);

    sleep_ms(80);
    expect_absent(z, "e");
    CHECK_RC(shmlock_dict_get(z, KEY("e"), 1, &out, buf, sizeof(buf)),
             SHMLOCK_OK);
    CHECK(out.type == SHMLOCK_TSTRING && out.stale == 1 && out.flags == 3);
    CHECK(out.len == 1 && buf[0] == 'v');
    CHECK_RC(shmlock_dict_ttl(z, KEY("e"), &ttl), SHMLOCK_NOT_FOUND);
    CHECK_RC(shmlock_dict_expire(z, KEY("e"), 10), SHMLOCK_NOT_FOUND);

    /* expire gives a live key a deadline, and 0 takes it away */
    CHECK_RC(shmlock_dict_expire(z, KEY("forever"), 30000), SHMLOCK_OK);
    CHECK_RC(shmlock_dict_ttl(z, KEY("forever"), &ttl), SHMLOCK_OK);
    CHECK(ttl > 0 && ttl <= 30000);
    CHECK_RC(shmlock_dict_expire(z, KEY("forever"), 0), SHMLOCK_OK);
    CHECK_RC(shmlock_dict_ttl(z, KEY("forever"), &ttl), SHMLOCK_OK);
    CHECK(ttl == 0);

    /* an expired key may be added again */
    CHECK_RC(set_str(z, SHMLOCK_OP_ADD, "e", "new"), SHMLOCK_OK);
    expect_str(z, "e", KEY("new"));

    verify(z);
}

static void
test_cas_cad(shmlock_zone_t *z)
{
    shmlock_value_t  one = str_value(KEY("one"), 0);
    shmlock_value_t  two = str_value(KEY("two"), 0);
    shmlock_value_t  nil = nil_value();
    int              forcible;

    /* old = nil: the key must be absent */
    CHECK_RC(shmlock_dict_cas(z, KEY("c"), &nil, &one, 0, &forcible),
             SHMLOCK_OK);
    CHECK_RC(shmlock_dict_cas(z, KEY("c"), &nil, &two, 0, &forcible),
             SHMLOCK_CHANGED);
    CHECK_RC(shmlock_dict_cas(z, KEY("c"), &two, &one, 0, &forcible),
             SHMLOCK_CHANGED);
    CHECK_RC(shmlock_dict_cas(z, KEY("c"), &one, &two, 0, &forcible),
             SHMLOCK_OK);
    expect_str(z, "c", KEY("two"));

    /* same value again: only the deadline changes */
    CHECK_RC(shmlock_dict_cas(z, KEY("c"), &two, &two, 1000, &forcible),
             SHMLOCK_OK);
    CHECK_RC(shmlock_dict_cas(z, KEY("absent"), &one, &two, 0, &forcible),
             SHMLOCK_NOT_FOUND);

    CHECK_RC(shmlock_dict_cad(z, KEY("c"), &one), SHMLOCK_CHANGED);
    CHECK_RC(shmlock_dict_cad(z, KEY("c"), &two), SHMLOCK_OK);
    CHECK_RC(shmlock_dict_cad(z, KEY("c"), &two), SHMLOCK_NOT_FOUND);
    expect_absent(z, "c");

    verify(z);
}

/* a slot lock's owner word: this process's pid, an id */
#define OWN(id)  ((uint64_t) getpid() << 32 | (id))

/* A lock object's record of zone z (shmlock_lock_t), zeroed. */
static shmlock_lock_t
lock_of(shmlock_zone_t *z)
{
    shmlock_lock_t  l;

    memset(&l, 0, sizeof(l));
    l.zone = z;
    return l;
}

/* A look of a starving waiter (since, till: its wait, ms) or not. */
static shmlock_look_t
look_how(int64_t exptime_ms, int flags, int64_t since, int64_t till)
{
    shmlock_look_t  how;

    memset(&how, 0, sizeof(how));
    how.exptime_ms = exptime_ms;
    how.flags = flags;
    how.since_ms = since;
    how.till_ms = till;
    return how;
}

/* a child that takes "lk" as lock object of its own and exits holding it
 * (exptime 60 s): its lock is a dead process's */
static void
lock_left_by_child(shmlock_zone_t *z)
{
    shmlock_lock_t  c;
    pid_t           pid = fork();

    CHECK(pid >= 0);
    if (pid == 0) {
        c = lock_of(z);
        _exit(shmlock_lock_acquire(&c, KEY("lk"), 60000, 0) == SHMLOCK_OK
              ? 0 : 1);
    }
    CHECK(reap(pid) == 0);
}

/*
 * The lock (shmlock_lock_*): its acquire, release and extend by ticket,
 * the wake-up of a release; a look that takes a dead holder's lock over,
 * a starving waiter's mark and the release that hands the lock to it,
 * the extend that keeps a mark, the withdrawal; owners of this process
 * judged by the caller (SHMLOCK_ASK); the wait across processes.
 */
static void
test_lock_calls(shmlock_zone_t *z)
{
    shmlock_lock_t    a = lock_of(z), b = lock_of(z), c = lock_of(z);
    shmlock_look_t    how;
    shmlock_wait_t    w;
    shmlock_ticket_t  t;
    int64_t           now, elapsed;
    uint32_t          hash, seq, id;
    pid_t             pid;
    int               i;

    /* pairs: the same slot each time (the ticket a hint), a fresh owner
     * id per acquisition, a stale ticket touches nothing */
    for (i = 0; i < 200; i++) {
        CHECK_RC(shmlock_lock_acquire(&a, KEY("lk"), 5000, 0), SHMLOCK_OK);
        CHECK(a.pid == getpid() && a.id != 0 && a.tk.owner == OWN(a.id));
        CHECK_RC(shmlock_lock_acquire(&b, KEY("lk"), 5000, 0),
                 SHMLOCK_EXISTS);
        CHECK(b.tk.owner == a.tk.owner && b.id != a.id);
        CHECK(shmlock_lock_holds(&a, KEY("lk")) == 1
              && shmlock_lock_holds(&b, KEY("lk")) == 0
              && shmlock_lock_here(z, KEY("lk"), 0) == 1);
        CHECK_RC(shmlock_lock_release(&a, 0), SHMLOCK_OK);
        CHECK_RC(shmlock_lock_release(&a, 0), SHMLOCK_NOT_FOUND);
        CHECK(shmlock_lock_here(z, KEY("lk"), 0) == 0);
    }

    /* short locks and the caller's clock reading keep their precision */
    {
        int64_t  t0 = shmlock_now_ms(), e;

        CHECK_RC(shmlock_lock_acquire(&a, KEY("lk"), 40, 0), SHMLOCK_OK);
        e = (int64_t) (a.tk.stamp >> SHMLOCK_SLOT_EXPIRY_SHIFT);
        CHECK(e >= t0 + 40 && e <= shmlock_now_ms() + 40);
        CHECK_RC(shmlock_lock_release(&a, 0), SHMLOCK_OK);
        CHECK_RC(shmlock_lock_acquire(&a, KEY("lk"), 5000,
                                      shmlock_now_ms() - 1000), SHMLOCK_OK);
        e = (int64_t) (a.tk.stamp >> SHMLOCK_SLOT_EXPIRY_SHIFT)
            - shmlock_now_ms();
        CHECK(e > 3000 && e <= 4000);   /* (what passed: any load's) */
        CHECK_RC(shmlock_lock_release(&a, 0), SHMLOCK_OK);
    }

    /* extend: a new expiry; an expired lock nobody took is still ours,
     * one that was taken is not */
    CHECK_RC(shmlock_lock_acquire(&a, KEY("lk"), 30, 0), SHMLOCK_OK);
    CHECK_RC(shmlock_lock_extend(&a, 5000), SHMLOCK_OK);
    CHECK((int64_t) (a.tk.stamp >> SHMLOCK_SLOT_EXPIRY_SHIFT)
          > shmlock_now_ms() + 4000);
    CHECK_RC(shmlock_lock_extend(&a, 1), SHMLOCK_OK);
    sleep_ms(5);
    CHECK_RC(shmlock_lock_release(&a, 0), SHMLOCK_OK);     /* not taken */
    CHECK_RC(shmlock_lock_acquire(&a, KEY("lk"), 1, 0), SHMLOCK_OK);
    sleep_ms(5);
    CHECK_RC(shmlock_lock_acquire(&b, KEY("lk"), 5000, 0), SHMLOCK_OK);
    CHECK_RC(shmlock_lock_extend(&a, 5000), SHMLOCK_NOT_FOUND);
    CHECK_RC(shmlock_lock_release(&a, 0), SHMLOCK_NOT_FOUND);
    CHECK(shmlock_lock_holds(&b, KEY("lk")) == 1);

    /* a release wakes a counted waiter of the key; a failed one does
     * not */
    hash = shmlock_hash(KEY("lk"));
    seq = shmlock_wait_begin(z, hash);
    CHECK_RC(shmlock_lock_release(&b, 0), SHMLOCK_OK);
    CHECK(wait_word(z, hash) != seq);
    CHECK_RC(shmlock_wait_end(z, hash, seq, 1000000), SHMLOCK_OK);
    seq = shmlock_wait_begin(z, hash);
    CHECK_RC(shmlock_lock_release(&b, 0), SHMLOCK_NOT_FOUND);
    CHECK(wait_word(z, hash) == seq);
    CHECK_RC(shmlock_wait_end(z, hash, seq, 0), SHMLOCK_OK);

    /* a dead holder: a look that asks takes its lock at once; one that
     * does not ask leaves it busy */
    lock_left_by_child(z);
    CHECK_RC(shmlock_lock_acquire(&a, KEY("lk"), 5000, 0), SHMLOCK_EXISTS);
    how = look_how(5000, 0, 0, 0);
    CHECK_RC(shmlock_lock_look(&a, KEY("lk"), &how), SHMLOCK_EXISTS);
    how.flags = SHMLOCK_LOOK_CHECK;
    CHECK_RC(shmlock_lock_look(&a, KEY("lk"), &how), SHMLOCK_OK);
    CHECK(a.dead != 0 && a.dead != (uint32_t) getpid() && a.dead_to == 0);
    CHECK(shmlock_lock_holds(&a, KEY("lk")) == 1);
    a.dead = 0;

    /* a starving waiter marks the lock; the holder's release hands it
     * over, and the waiter's next look finds it its own */
    CHECK_RC(shmlock_lock_acquire(&b, KEY("lk"), 5000, 0), SHMLOCK_EXISTS);
    now = shmlock_now_ms();
    how = look_how(5000, SHMLOCK_LOOK_CHECK, now - 10, now + 5000);
    CHECK_RC(shmlock_lock_look(&b, KEY("lk"), &how), SHMLOCK_EXISTS);
    CHECK(b.marked == 1);
    /* an extend keeps the mark; a younger starver does not replace it */
    CHECK_RC(shmlock_lock_extend(&a, 6000), SHMLOCK_OK);
    CHECK_RC(shmlock_slot_look(z, KEY("lk"), &t), SHMLOCK_OK);
    CHECK(t.stamp & SHMLOCK_SLOT_MARKED);
    CHECK_RC(shmlock_lock_acquire(&c, KEY("lk"), 5000, 0), SHMLOCK_EXISTS);
    how = look_how(5000, SHMLOCK_LOOK_CHECK, now - 5, now + 5000);
    CHECK_RC(shmlock_lock_look(&c, KEY("lk"), &how), SHMLOCK_EXISTS);
    CHECK(c.marked == 0);
    seq = shmlock_wait_begin(z, shmlock_hash(KEY("lk")) ^ 0x5bd1e995u);
    CHECK_RC(shmlock_lock_release(&a, 0), SHMLOCK_OK);
    /* (the handoff wakes the marked waiter on its own word) */
    CHECK(wait_word(z, shmlock_hash(KEY("lk")) ^ 0x5bd1e995u) != seq);
    shmlock_wait_end(z, shmlock_hash(KEY("lk")) ^ 0x5bd1e995u, seq, 0);
    CHECK(shmlock_lock_holds(&a, KEY("lk")) == 0);
    how = look_how(5000, 0, now - 10, now + 5000);
    CHECK_RC(shmlock_lock_look(&b, KEY("lk"), &how), SHMLOCK_OK);
    CHECK(shmlock_lock_holds(&b, KEY("lk")) == 1 && b.tk.owner == OWN(b.id));

    /* a withdrawal: the mark gone, the lock not ours; or, handed over
     * meanwhile, ours */
    how = look_how(5000, 0, now - 10, now + 5000);
    CHECK_RC(shmlock_lock_look(&c, KEY("lk"), &how), SHMLOCK_EXISTS);
    CHECK(c.marked == 1);
    CHECK_RC(shmlock_lock_withdraw(&c, KEY("lk")), SHMLOCK_EXISTS);
    CHECK_RC(shmlock_slot_look(z, KEY("lk"), &t), SHMLOCK_OK);
    CHECK(!(t.stamp & SHMLOCK_SLOT_MARKED));
    CHECK_RC(shmlock_lock_look(&c, KEY("lk"), &how), SHMLOCK_EXISTS);
    CHECK_RC(shmlock_lock_release(&b, 0), SHMLOCK_OK);    /* to c */
    CHECK_RC(shmlock_lock_withdraw(&c, KEY("lk")), SHMLOCK_OK);
    CHECK(shmlock_lock_holds(&c, KEY("lk")) == 1);

    /* owners of this process: a mark of a's, which the caller says is
     * gone, is not handed to (the release asks first); one it says is
     * alive is */
    CHECK_RC(shmlock_lock_acquire(&a, KEY("lk"), 5000, 0), SHMLOCK_EXISTS);
    how = look_how(5000, 0, now - 20, now + 5000);
    CHECK_RC(shmlock_lock_look(&a, KEY("lk"), &how), SHMLOCK_EXISTS);
    CHECK(a.marked == 1);
    CHECK_RC(shmlock_lock_release(&c, SHMLOCK_LOOK_ASK), SHMLOCK_ASK);
    CHECK(c.ask == a.id && shmlock_lock_holds(&c, KEY("lk")) == 1);
    c.gone[0] = a.id;
    CHECK_RC(shmlock_lock_release(&c, SHMLOCK_LOOK_ASK), SHMLOCK_OK);
    CHECK_RC(shmlock_slot_look(z, KEY("lk"), &t), SHMLOCK_OK);
    CHECK(t.owner == 0);                          /* freed, not handed */
    c.gone[0] = 0;
    CHECK_RC(shmlock_lock_acquire(&c, KEY("lk"), 5000, 0), SHMLOCK_OK);
    CHECK_RC(shmlock_lock_look(&a, KEY("lk"), &how), SHMLOCK_EXISTS);
    CHECK_RC(shmlock_lock_release(&c, SHMLOCK_LOOK_ASK), SHMLOCK_ASK);
    c.alive[0] = a.id;
    CHECK_RC(shmlock_lock_release(&c, SHMLOCK_LOOK_ASK), SHMLOCK_OK);
    c.alive[0] = 0;
    CHECK_RC(shmlock_lock_look(&a, KEY("lk"), &how), SHMLOCK_OK);
    /* a holder of this process the caller says is gone: taken over */
    id = a.id;
    CHECK_RC(shmlock_lock_acquire(&b, KEY("lk"), 5000, 0), SHMLOCK_EXISTS);
    how = look_how(5000, SHMLOCK_LOOK_ASK, 0, 0);
    CHECK_RC(shmlock_lock_look(&b, KEY("lk"), &how), SHMLOCK_ASK);
    CHECK(b.ask == id);
    b.gone[1] = id;
    CHECK_RC(shmlock_lock_look(&b, KEY("lk"), &how), SHMLOCK_OK);
    CHECK(b.dead == (uint32_t) getpid() && (b.dead_to & 2));
    b.gone[1] = 0;
    CHECK_RC(shmlock_lock_release(&a, 0), SHMLOCK_NOT_FOUND);
    CHECK_RC(shmlock_lock_release(&b, 0), SHMLOCK_OK);

    /* the wait: a holder in a child for 50 ms, then released; a waiter
     * here gets it after about that long, and not before */
    {
        int  go[2];
        char ch;

        CHECK(pipe(go) == 0);
        pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            shmlock_lock_t  h = lock_of(z);

            if (shmlock_lock_acquire(&h, KEY("lk"), 5000, 0) != SHMLOCK_OK
                || write(go[1], "x", 1) != 1)
            {
                _exit(1);
            }
            sleep_ms(50);
            _exit(shmlock_lock_release(&h, 0) == SHMLOCK_OK ? 0 : 2);
        }
        CHECK(read(go[0], &ch, 1) == 1);
        close(go[0]);
        close(go[1]);
        CHECK_RC(shmlock_lock_acquire(&a, KEY("lk"), 5000, 0),
                 SHMLOCK_EXISTS);
        memset(&w, 0, sizeof(w));
        w.exptime_ms = 5000;
        w.timeout_us = 10000000;
        w.step = 0.001;
        w.ratio = 2;
        w.max_step = 0.5;
        CHECK_RC(shmlock_lock_wait(&a, KEY("lk"), &w, &elapsed),
                 SHMLOCK_OK);
        CHECK(elapsed > 0 && shmlock_lock_holds(&a, KEY("lk")) == 1);
        CHECK(reap(pid) == 0);
        /* held here: a wait that must not wait for this process stops */
        CHECK_RC(shmlock_lock_acquire(&b, KEY("lk"), 5000, 0),
                 SHMLOCK_EXISTS);
        w.flags = SHMLOCK_LOOK_HERE;
        CHECK_RC(shmlock_lock_wait(&b, KEY("lk"), &w, &elapsed),
                 SHMLOCK_BUSY);
        /* and a short timeout ends as one */
        w.flags = 0;
        w.timeout_us = 20000;
        w.start_us = 0;
        CHECK_RC(shmlock_lock_wait(&b, KEY("lk"), &w, &elapsed),
                 SHMLOCK_TIMEOUT);
        CHECK_RC(shmlock_lock_release(&a, 0), SHMLOCK_OK);
    }

    CHECK_RC(shmlock_lock_acquire(&a, "", 0, 5000, 0), SHMLOCK_BAD_KEY);
    CHECK_RC(shmlock_lock_acquire(&a, KEY("lk"), -1, 0), SHMLOCK_BAD_VALUE);
    verify(z);
}


/* The walk's entry for ticket t's slot; 0 if it lists none. */
static int
listed(shmlock_zone_t *z, const shmlock_ticket_t *t, shmlock_slot_info_t *out)
{
    shmlock_slot_info_t  info[16];
    uint64_t             cursor = 0, next;
    int                  count, i;

    do {
        CHECK_RC(shmlock_slot_scan(z, cursor, info, 16, &count, &next),
                 SHMLOCK_OK);
        for (i = 0; i < count; i++) {
            if (info[i].ticket.slot == t->slot) {
                *out = info[i];
                return 1;
            }
        }
        cursor = next;
    } while (cursor != 0);
    return 0;
}

/* the shard of a key's hash in z (zone.h: its top bits) */
static unsigned
shard_of(shmlock_zone_t *z, const char *key, size_t len)
{
    return (unsigned) ((uint64_t) shmlock_hash(key, len)
                       * shmlock_zone_shards(z) >> 32);
}

/*
 * Lock keys spelt as a holder group's records and heads (issue 30): as
 * layouts before 10 spelt them ("\0" kind i>>8 i&255 K; a semaphore's
 * head, index 0xffff) and as layout 10 does (four bytes of index, then
 * K).  Such a key is a key of its own through every acquire: plain
 * (fast and slow paths), and hinted by a ticket of the very record or
 * head it spells (its holder gone: the slot free), with K in another
 * shard where the zone has several.  It never waits for K's group nor
 * the group for it, it never has two holders, and the walk lists it as
 * a lock, the records as records of K.
 */
static void
test_key_kinds(shmlock_zone_t *z)
{
    static const struct {
        int          kind;      /* the group; -1: a semaphore's head */
        const char  *prefix;    /* 4 bytes */
    } crafted[] = {
        { SHMLOCK_SHARED, "\0r\0\0" }, { SHMLOCK_SEMAPHORE, "\0s\0\0" },
        { -1, "\0s\377\377" }, { SHMLOCK_SHARED, "\0\0\0\0" },
        { SHMLOCK_SEMAPHORE, "\0\0\0\0" }, { -1, "\0\0\0\0" },
    };
    shmlock_ticket_t     g, h, t, u;
    shmlock_slot_info_t  info;
    char                 k[16], x[20];
    size_t               klen, xlen, c;
    int                  n, kind, permits;

    for (c = 0; c < sizeof(crafted) / sizeof(crafted[0]); c++) {
        kind = crafted[c].kind < 0 ? SHMLOCK_SEMAPHORE : crafted[c].kind;
        permits = kind == SHMLOCK_SEMAPHORE ? 1 : 0;
        /* K whose crafted key is in another shard, if there are several */
        for (n = 0; n < 1000; n++) {
            klen = (size_t) snprintf(k, sizeof(k), "kinds%d", n);
            memcpy(x, crafted[c].prefix, 4);
            memcpy(x + 4, k, klen);
            xlen = klen + 4;
            if (shmlock_zone_shards(z) == 1
                || shard_of(z, x, xlen) != shard_of(z, k, klen))
            {
                break;
            }
        }

        /* K's group held: the crafted key is free, and the group is let
         * in beside the crafted key held */
        CHECK_RC(shmlock_group_acquire(z, kind, k, klen, 21, permits, 5000,
                                       &g), SHMLOCK_OK);
        CHECK_RC(shmlock_slot_acquire(z, x, xlen, 22, 5000, 0, &t),
                 SHMLOCK_OK);
        CHECK_RC(shmlock_group_acquire(z, kind, k, klen, 23,
                                       permits == 0 ? 0 : 2, 5000, &u),
                 SHMLOCK_OK);
        CHECK(listed(z, &t, &info) && info.kind == SHMLOCK_SLOT_LOCK
              && info.key_len == xlen && info.shown == xlen
              && memcmp(info.key, x, xlen) == 0);
        CHECK(listed(z, &g, &info)
              && info.kind == (kind == SHMLOCK_SHARED ? SHMLOCK_SLOT_SHARED
                                                      : SHMLOCK_SLOT_PERMIT)
              && info.key_len == klen && memcmp(info.key, k, klen) == 0
              && info.index == 0);
        CHECK_RC(shmlock_group_release(z, kind, k, klen, &u), SHMLOCK_OK);
        CHECK_RC(shmlock_slot_release(z, &t), SHMLOCK_OK);

        /* the group's ticket (the head's, for a head), its holder gone */
        if (crafted[c].kind < 0) {
            CHECK_RC(shmlock_group_head(z, kind, k, klen, &h), SHMLOCK_OK);
            CHECK(listed(z, &h, &info)
                  && info.kind == SHMLOCK_SLOT_SEMAPHORE);
        } else {
            h = g;
        }
        CHECK_RC(shmlock_group_release(z, kind, k, klen, &g), SHMLOCK_OK);
        /* as a hint: the crafted key's own slot is taken, not the
         * group's */
        u = h;
        CHECK_RC(shmlock_slot_acquire_hint(z, x, xlen, 24, 5000, 0, &u),
                 SHMLOCK_OK);
        CHECK(u.slot != h.slot && u.owner == OWN(24));
        /* the one holder: every other acquire finds it */
        CHECK_RC(shmlock_slot_acquire(z, x, xlen, 25, 5000, 0, &t),
                 SHMLOCK_EXISTS);
        CHECK(t.owner == OWN(24) && t.slot == u.slot);
        t = h;
        CHECK_RC(shmlock_slot_acquire_hint(z, x, xlen, 26, 5000, 0, &t),
                 SHMLOCK_EXISTS);
        CHECK(t.owner == OWN(24) && t.slot == u.slot);
        CHECK_RC(shmlock_slot_look(z, x, xlen, &t), SHMLOCK_OK);
        CHECK(t.owner == OWN(24) && t.slot == u.slot);
        /* and K's group comes in beside it */
        CHECK_RC(shmlock_group_acquire(z, kind, k, klen, 27, permits, 5000,
                                       &g), SHMLOCK_OK);
        CHECK_RC(shmlock_group_release(z, kind, k, klen, &g), SHMLOCK_OK);
        CHECK_RC(shmlock_slot_release(z, &u), SHMLOCK_OK);
    }
    verify(z);
}

/*
 * The lock slots through the ABI (shmlock_slot_*): a pair, a refused
 * acquire naming the holder, a stale ticket, expiry and extend, marks and
 * a handoff by swap, the wake word, long keys, bad arguments, a full
 * shard, the counts in stats; none of it is a dictionary key.
 */
static void
test_slot_calls(shmlock_zone_t *z)
{
    shmlock_ticket_t  t, u, seen, m;
    shmlock_stats_t   st;
    uint32_t          hash, seq;
    char              key[300];
    int64_t           now;
    int               i;

    for (i = 0; i < 200; i++) {
        CHECK_RC(shmlock_slot_acquire(z, KEY("slk"), 11, 5000, 0, &t),
                 SHMLOCK_OK);
        CHECK(t.owner == OWN(11) && !(t.stamp & SHMLOCK_SLOT_MARKED));
        CHECK_RC(shmlock_slot_acquire(z, KEY("slk"), 12, 5000, 0, &u),
                 SHMLOCK_EXISTS);
        CHECK(u.owner == OWN(11) && u.slot == t.slot && u.stamp == t.stamp);
        CHECK_RC(shmlock_slot_release(z, &t), SHMLOCK_OK);
        CHECK_RC(shmlock_slot_release(z, &t), SHMLOCK_NOT_FOUND);
    }
    /* a slot is no dictionary key */
    expect_absent(z, "slk");

    /* the holder's process: pid and start time; a dead holder is told
     * from a live one, and its lock taken over by a swap; a swap's owner
     * must be of the process it names */
    CHECK_RC(shmlock_slot_acquire(z, KEY("slk"), 11, 5000, 0, &t),
             SHMLOCK_OK);
    CHECK((uint32_t) t.process == (uint32_t) getpid()
          && t.process >> 32 == (uint32_t) shmlock_proc_start(getpid()));
    CHECK_RC(shmlock_slot_acquire(z, KEY("slk"), 12, 5000, 0, &u),
             SHMLOCK_EXISTS);
    CHECK(u.process == t.process && shmlock_slot_alive(&u) == 1);
    CHECK_RC(shmlock_slot_release(z, &t), SHMLOCK_OK);
    {
        pid_t  pid = fork();

        CHECK(pid >= 0);
        if (pid == 0) {
            _exit(shmlock_slot_acquire(z, KEY("slk"), 1, 5000, 0, &t));
        }
        CHECK(reap(pid) == SHMLOCK_OK);
        CHECK_RC(shmlock_slot_acquire(z, KEY("slk"), 12, 5000, 0,
                                      &seen), SHMLOCK_EXISTS);
        CHECK(seen.owner >> 32 == (uint64_t) pid
              && (uint32_t) seen.process == (uint32_t) pid);
        CHECK(shmlock_slot_alive(&seen) == 0);
        /* the same owner (an expiry moved, a mark cleared) keeps its
         * process, whoever swaps: still the dead child's */
        CHECK_RC(shmlock_slot_swap(z, &seen, seen.owner, 0, 0, 5000, 0, &u),
                 SHMLOCK_OK);
        CHECK(u.owner == seen.owner && u.process == seen.process);
        CHECK(shmlock_slot_alive(&u) == 0);
        seen = u;
        /* a new owner must be of the process named */
        CHECK_RC(shmlock_slot_swap(z, &seen, (uint64_t) 1 << 32 | 7, 0, 0,
                                   5000, 0, &u), SHMLOCK_BAD_VALUE);
        CHECK_RC(shmlock_slot_swap(z, &seen, OWN(12), 0, 0, 5000, 0, &u),
                 SHMLOCK_OK);
        CHECK(u.process == t.process);
        CHECK_RC(shmlock_slot_release(z, &u), SHMLOCK_OK);
        memset(&u, 0, sizeof(u));
        CHECK(shmlock_slot_alive(&u) == 0);
    }
    CHECK_RC(shmlock_slot_look(z, KEY("slk"), &u), SHMLOCK_OK);
    CHECK(u.owner == 0);
    CHECK_RC(shmlock_slot_look(z, KEY("no such"), &u), SHMLOCK_NOT_FOUND);

    /* expiry (the caller's clock): an expired lock is taken at once, its
     * old holder's ticket releases and extends nothing */
    now = shmlock_now_ms();
    CHECK_RC(shmlock_slot_acquire(z, KEY("slk"), 11, 100, now, &t),
             SHMLOCK_OK);
    CHECK((int64_t) (t.stamp >> SHMLOCK_SLOT_EXPIRY_SHIFT) == now + 100);
    CHECK_RC(shmlock_slot_acquire(z, KEY("slk"), 12, 100, now + 99, &u),
             SHMLOCK_EXISTS);
    CHECK_RC(shmlock_slot_acquire(z, KEY("slk"), 12, 5000, now + 100, &u),
             SHMLOCK_OK);
    CHECK_RC(shmlock_slot_release(z, &t), SHMLOCK_NOT_FOUND);
    CHECK_RC(shmlock_slot_extend(z, &t, 5000, 0), SHMLOCK_NOT_FOUND);
    /* extend: the ticket follows */
    CHECK_RC(shmlock_slot_extend(z, &u, 7000, now), SHMLOCK_OK);
    CHECK((int64_t) (u.stamp >> SHMLOCK_SLOT_EXPIRY_SHIFT) == now + 7000);
    CHECK_RC(shmlock_slot_release(z, &u), SHMLOCK_OK);

    /* a mark: the holder's release answers CHANGED and the holder hands
     * over by swap; the waiter it names holds the key, the key's
     * sleepers are woken by the caller */
    CHECK_RC(shmlock_slot_acquire(z, KEY("slk"), 11, 5000, 0, &t),
             SHMLOCK_OK);
    CHECK_RC(shmlock_slot_acquire(z, KEY("slk"), 12, 5000, 0, &seen),
             SHMLOCK_EXISTS);
    CHECK_RC(shmlock_slot_swap(z, &seen, seen.owner, 0, SHMLOCK_SLOT_MARKED,
                               SHMLOCK_KEEP_TTL, 0, &m), SHMLOCK_OK);
    CHECK(m.stamp >> SHMLOCK_SLOT_EXPIRY_SHIFT
          == t.stamp >> SHMLOCK_SLOT_EXPIRY_SHIFT);
    CHECK_RC(shmlock_slot_swap(z, &seen, OWN(13), 0, 0, 5000, 0, &u),
             SHMLOCK_CHANGED);              /* seen is stale */
    CHECK_RC(shmlock_slot_acquire(z, KEY("slk"), 13, 5000, 0, &u),
             SHMLOCK_EXISTS);
    CHECK(u.stamp & SHMLOCK_SLOT_MARKED);
    CHECK_RC(shmlock_slot_release(z, &t), SHMLOCK_CHANGED);
    CHECK_RC(shmlock_slot_extend(z, &t, 5000, 0), SHMLOCK_CHANGED);
    CHECK_RC(shmlock_slot_swap(z, &m, OWN(12), 0, 0, 5000, 0, &u),
             SHMLOCK_OK);
    CHECK(u.owner == OWN(12) && !(u.stamp & SHMLOCK_SLOT_MARKED));
    CHECK_RC(shmlock_slot_release(z, &t), SHMLOCK_NOT_FOUND);
    /* a mark withdrawn: the holder's own ticket works again */
    CHECK_RC(shmlock_slot_swap(z, &u, OWN(12), 0, SHMLOCK_SLOT_MARKED,
                               SHMLOCK_KEEP_TTL, 0, &m), SHMLOCK_OK);
    CHECK_RC(shmlock_slot_swap(z, &m, OWN(12), 0, 0, SHMLOCK_KEEP_TTL, 0,
                               &seen), SHMLOCK_OK);
    CHECK_RC(shmlock_slot_release(z, &u), SHMLOCK_OK);

    /* marks through their records: a waiter marks the held lock, the
     * holder's release answers CHANGED, reads the mark and hands over;
     * a mark of an older waiter replaces it */
    {
        shmlock_mark_t  mk = { OWN(20), 0, 3000, 100, 900 }, got;

        CHECK_RC(shmlock_slot_acquire(z, KEY("slk"), 11, 5000, 0, &t),
                 SHMLOCK_OK);
        CHECK_RC(shmlock_slot_look(z, KEY("slk"), &seen), SHMLOCK_OK);
        CHECK_RC(shmlock_slot_read_mark(z, &seen, &got), SHMLOCK_CHANGED);
        CHECK_RC(shmlock_slot_mark(z, &seen, &mk, &m), SHMLOCK_OK);
        CHECK(m.stamp & SHMLOCK_SLOT_MARKED);
        CHECK_RC(shmlock_slot_mark(z, &seen, &mk, &u), SHMLOCK_CHANGED);
        CHECK_RC(shmlock_slot_read_mark(z, &m, &got), SHMLOCK_OK);
        CHECK(got.owner == OWN(20) && got.exptime_ms == 3000
              && got.since_ms == 100 && got.until_ms == 900
              && got.process == t.process);
        mk.owner = OWN(21);
        mk.since_ms = 50;
        CHECK_RC(shmlock_slot_mark(z, &m, &mk, &u), SHMLOCK_OK);
        CHECK(u.stamp == m.stamp && u.owner == m.owner);
        CHECK_RC(shmlock_slot_read_mark(z, &u, &got), SHMLOCK_OK);
        CHECK(got.owner == OWN(21) && got.since_ms == 50);
        CHECK_RC(shmlock_slot_release(z, &t), SHMLOCK_CHANGED);
        CHECK_RC(shmlock_slot_look(z, KEY("slk"), &seen), SHMLOCK_OK);
        CHECK_RC(shmlock_slot_read_mark(z, &seen, &got), SHMLOCK_OK);
        CHECK_RC(shmlock_slot_swap(z, &seen, got.owner, got.process, 0,
                                   got.exptime_ms, 0, &u), SHMLOCK_OK);
        CHECK(u.owner == OWN(21) && !(u.stamp & SHMLOCK_SLOT_MARKED));
        CHECK_RC(shmlock_slot_read_mark(z, &seen, &got), SHMLOCK_CHANGED);
        CHECK_RC(shmlock_slot_release(z, &u), SHMLOCK_OK);
        /* a free slot takes no mark; a mark names a waiter of its
         * process */
        CHECK_RC(shmlock_slot_look(z, KEY("slk"), &seen), SHMLOCK_OK);
        CHECK_RC(shmlock_slot_mark(z, &seen, &mk, &u), SHMLOCK_BAD_VALUE);
        CHECK_RC(shmlock_slot_acquire(z, KEY("slk"), 11, 5000, 0, &t),
                 SHMLOCK_OK);
        mk.owner = 1;
        CHECK_RC(shmlock_slot_mark(z, &t, &mk, &u), SHMLOCK_BAD_VALUE);
        CHECK_RC(shmlock_slot_release(z, &t), SHMLOCK_OK);
    }

    /* a release wakes the key's word when a waiter is counted; a
     * refused one does not */
    hash = shmlock_hash(KEY("slk"));
    CHECK_RC(shmlock_slot_acquire(z, KEY("slk"), 11, 5000, 0, &t),
             SHMLOCK_OK);
    CHECK(t.hash == hash);
    seq = shmlock_wait_begin(z, hash);
    CHECK_RC(shmlock_slot_release(z, &t), SHMLOCK_OK);
    CHECK(wait_word(z, hash) != seq);
    CHECK_RC(shmlock_wait_end(z, hash, seq, 1000000), SHMLOCK_OK);
    seq = shmlock_wait_begin(z, hash);
    CHECK_RC(shmlock_slot_release(z, &t), SHMLOCK_NOT_FOUND);
    CHECK(wait_word(z, hash) == seq);
    CHECK_RC(shmlock_wait_end(z, hash, seq, 0), SHMLOCK_OK);

    /* long keys: one slot each, whatever they share */
    memset(key, 'L', sizeof(key) - 1);
    key[sizeof(key) - 1] = '\0';
    CHECK_RC(shmlock_slot_acquire(z, KEY(key), 11, 5000, 0, &t),
             SHMLOCK_OK);
    key[sizeof(key) - 2] = 'M';
    CHECK_RC(shmlock_slot_acquire(z, KEY(key), 12, 5000, 0, &u),
             SHMLOCK_OK);
    CHECK(t.slot != u.slot);
    CHECK_RC(shmlock_slot_release(z, &t), SHMLOCK_OK);
    CHECK_RC(shmlock_slot_release(z, &u), SHMLOCK_OK);

    /* the hinted acquire: any ticket is only a hint, the answers are
     * shmlock_slot_acquire's */
    {
        shmlock_ticket_t  h, v;

        CHECK_RC(shmlock_slot_acquire(z, KEY("hint a"), 11, 5000, 0, &t),
                 SHMLOCK_OK);
        CHECK_RC(shmlock_slot_release(z, &t), SHMLOCK_OK);
        CHECK_RC(shmlock_slot_acquire(z, KEY("hint b"), 12, 5000, 0, &u),
                 SHMLOCK_OK);
        CHECK_RC(shmlock_slot_release(z, &u), SHMLOCK_OK);
        /* the right slot */
        h = t;
        CHECK_RC(shmlock_slot_acquire_hint(z, KEY("hint a"), 13, 5000, 0,
                                           &h), SHMLOCK_OK);
        CHECK(h.slot == t.slot && h.hash == t.hash && h.owner == OWN(13));
        /* held: refused, the holder's state as by shmlock_slot_acquire */
        v = h;
        CHECK_RC(shmlock_slot_acquire_hint(z, KEY("hint a"), 14, 5000, 0,
                                           &v), SHMLOCK_EXISTS);
        CHECK(v.owner == OWN(13) && v.stamp == h.stamp);
        CHECK_RC(shmlock_slot_release(z, &h), SHMLOCK_OK);
        /* another key's slot, a slot of no shard, garbage, zeroes: the
         * key's own slot all the same */
        v = u;
        CHECK_RC(shmlock_slot_acquire_hint(z, KEY("hint a"), 15, 5000, 0,
                                           &v), SHMLOCK_OK);
        CHECK(v.slot == t.slot && v.hash == t.hash && v.owner == OWN(15));
        CHECK_RC(shmlock_slot_release(z, &v), SHMLOCK_OK);
        memset(&v, 0xa5, sizeof(v));
        CHECK_RC(shmlock_slot_acquire_hint(z, KEY("hint a"), 16, 5000, 0,
                                           &v), SHMLOCK_OK);
        CHECK(v.slot == t.slot && v.owner == OWN(16));
        CHECK_RC(shmlock_slot_release(z, &v), SHMLOCK_OK);
        memset(&v, 0, sizeof(v));
        CHECK_RC(shmlock_slot_acquire_hint(z, KEY("hint b"), 17, 5000, 0,
                                           &v), SHMLOCK_OK);
        CHECK(v.slot == u.slot && v.hash == u.hash && v.owner == OWN(17));
        CHECK_RC(shmlock_slot_release(z, &v), SHMLOCK_OK);
        /* bad arguments, as shmlock_slot_acquire answers them */
        v = t;
        CHECK_RC(shmlock_slot_acquire_hint(z, "", 0, 11, 5000, 0, &v),
                 SHMLOCK_BAD_KEY);
        CHECK_RC(shmlock_slot_acquire_hint(z, KEY("hint a"), 11, -5, 0, &v),
                 SHMLOCK_BAD_VALUE);
    }

    /* bad arguments, and tickets of no slot */
    CHECK_RC(shmlock_slot_acquire(z, "", 0, 11, 5000, 0, &t),
             SHMLOCK_BAD_KEY);
    CHECK_RC(shmlock_slot_acquire(z, KEY("slk"), 11, -5, 0, &t),
             SHMLOCK_BAD_VALUE);
    CHECK_RC(shmlock_slot_look(z, "", 0, &t), SHMLOCK_BAD_KEY);
    memset(&t, 0, sizeof(t));
    t.slot = 0xffffffff;
    CHECK_RC(shmlock_slot_release(z, &t), SHMLOCK_NOT_FOUND);
    CHECK_RC(shmlock_slot_extend(z, &t, 10, 0), SHMLOCK_NOT_FOUND);
    CHECK_RC(shmlock_slot_swap(z, &t, OWN(1), 0, 0, 10, 0, &u),
             SHMLOCK_CHANGED);
    t.slot = 0;
    CHECK_RC(shmlock_slot_swap(z, &t, 0, 0, 0, 10, 0, &u), SHMLOCK_BAD_VALUE);

    /* the walk: every key's slot once, held ones with their holder, a
     * long key by its first 24 bytes */
    {
        shmlock_slot_info_t  info[3];
        uint64_t             cursor = 0, next;
        int                  count, steps = 0, seen_slk = 0, seen_long = 0;
        int                  held = 0;

        CHECK_RC(shmlock_slot_acquire(z, KEY("slk"), 11, 5000, 0, &t),
                 SHMLOCK_OK);
        CHECK_RC(shmlock_slot_scan(z, 0, info, 0, &count, &next),
                 SHMLOCK_BAD_VALUE);
        do {
            CHECK(++steps < 100000);
            CHECK_RC(shmlock_slot_scan(z, cursor, info, 3, &count, &next),
                     SHMLOCK_OK);
            CHECK(count >= 0 && count <= 3 && (next == 0 || next > cursor));
            for (i = 0; i < count; i++) {
                if (info[i].key_len == 3 && info[i].shown == 3
                    && memcmp(info[i].key, "slk", 3) == 0)
                {
                    seen_slk++;
                    CHECK(info[i].ticket.owner == OWN(11)
                          && info[i].ticket.slot == t.slot
                          && info[i].ticket.stamp == t.stamp
                          && info[i].ticket.hash == t.hash
                          && info[i].ticket.process == t.process);
                }
                if (info[i].key_len == sizeof(key) - 1) {
                    seen_long++;
                    CHECK(info[i].shown == 24
                          && memcmp(info[i].key, key, 24) == 0);
                }
                held += info[i].ticket.owner != 0;
            }
            cursor = next;
        } while (cursor != 0);
        CHECK(seen_slk == 1 && seen_long == 2 && held == 1);
        CHECK_RC(shmlock_slot_scan(z, ~(uint64_t) 0, info, 3, &count, &next),
                 SHMLOCK_OK);
        CHECK(count == 0 && next == 0);
        CHECK_RC(shmlock_slot_release(z, &t), SHMLOCK_OK);
    }

    /* stats count the slots and the keys' ones */
    CHECK_RC(shmlock_dict_stats(z, -1, &st), SHMLOCK_OK);
    CHECK(st.slots >= 16 * shmlock_zone_shards(z) && st.slots_used >= 3
          && st.slots_used < st.slots);
    verify(z);
}

/* Locks of keys prefix0, prefix1, ... until NO_MEMORY: how many; *first
 * the first one's ticket. */
static int
locks_until_full(shmlock_zone_t *z, const char *prefix, int most,
    shmlock_ticket_t *first)
{
    shmlock_ticket_t  t;
    char              key[32];
    int               i, rc;

    for (i = 0; ; i++) {
        CHECK(i <= most);
        snprintf(key, sizeof(key), "%s%d", prefix, i);
        rc = shmlock_slot_acquire(z, KEY(key), 1, 0, 0, &t);
        if (rc == SHMLOCK_NO_MEMORY) {
            return i;
        }
        CHECK_RC(rc, SHMLOCK_OK);
        if (i == 0) {
            *first = t;
        }
    }
}

/*
 * Locks past the floor of a shard's slots spill into its chunks, two
 * each (zone layout 11, issue 34): a shard answers NO_MEMORY only when
 * its floor is full and no chunk is left, free or a `set` entry's to
 * evict; live `add` entries are never evicted for a lock.  A slot released
 * is reclaimed for another key, a spilled one's chunks given back at
 * once.  In zones of one shard.
 */
static void
test_slots_full(void)
{
    shmlock_zone_t   *z = open_zone("slots", SHMLOCK_MIN_SIZE);
    shmlock_ticket_t  t, first, spilled;
    shmlock_stats_t   st, st2;
    shmlock_value_t   v;
    char              key[32], val[200];
    uint64_t          floor, chunks;
    int               i, n, rc, forcible;

    CHECK_RC(shmlock_dict_stats(z, -1, &st), SHMLOCK_OK);
    floor = st.slots;
    chunks = st.free_space / 64;
    n = locks_until_full(z, "full", (int) (floor + chunks), &first);
    /* 7/8 of the floor (probes stay short), then a pair of chunks each */
    CHECK(n == (int) (floor - floor / 8 + chunks / 2));
    CHECK_RC(shmlock_dict_stats(z, -1, &st2), SHMLOCK_OK);
    CHECK(st2.slots == floor + chunks / 2 && st2.slots_used == (uint64_t) n
          && st2.free_space < 128);
    verify(z);
    /* the dictionary has no room left either */
    memset(&v, 0, sizeof(v));
    v.type = SHMLOCK_TSTRING;
    v.str = val;
    v.len = 40;                             /* two chunks with its key */
    memset(val, 'v', sizeof(val));
    CHECK_RC(shmlock_dict_store(z, SHMLOCK_OP_SET, KEY("val"), &v, 0,
                                &forcible), SHMLOCK_NO_MEMORY);
    /* a floor slot released: reclaimed for a new key once no chunk is
     * left */
    CHECK_RC(shmlock_slot_release(z, &first), SHMLOCK_OK);
    CHECK_RC(shmlock_slot_acquire(z, KEY("one more"), 1, 0, 0, &t),
             SHMLOCK_OK);
    CHECK_RC(shmlock_slot_look(z, KEY("full0"), &t), SHMLOCK_NOT_FOUND);
    CHECK_RC(shmlock_slot_acquire(z, KEY("two more"), 1, 0, 0, &t),
             SHMLOCK_NO_MEMORY);
    /* a spilled one released: its chunks are back at once, for a lock or
     * for the dictionary */
    snprintf(key, sizeof(key), "full%d", n - 1);
    CHECK_RC(shmlock_slot_look(z, KEY(key), &spilled), SHMLOCK_OK);
    CHECK(spilled.slot & 0x80000000u);
    CHECK_RC(shmlock_slot_release(z, &spilled), SHMLOCK_OK);
    CHECK_RC(shmlock_slot_release(z, &spilled), SHMLOCK_NOT_FOUND);
    CHECK_RC(shmlock_slot_look(z, KEY(key), &t), SHMLOCK_NOT_FOUND);
    CHECK_RC(shmlock_dict_stats(z, -1, &st2), SHMLOCK_OK);
    CHECK(st2.free_space >= 128);
    /* (an `add` entry: a lock takes a `set` entry's chunks, not an
     * add's) */
    CHECK_RC(shmlock_dict_store(z, SHMLOCK_OP_ADD, KEY("val"), &v, 0,
                                &forcible), SHMLOCK_OK);
    CHECK_RC(shmlock_slot_acquire(z, KEY("two more"), 1, 0, 0, &t),
             SHMLOCK_NO_MEMORY);
    v.type = SHMLOCK_TNIL;                  /* a delete */
    CHECK_RC(shmlock_dict_store(z, SHMLOCK_OP_SET, KEY("val"), &v, 0,
                                &forcible), SHMLOCK_OK);
    v.type = SHMLOCK_TSTRING;
    CHECK_RC(shmlock_slot_acquire(z, KEY("two more"), 1, 0, 0, &t),
             SHMLOCK_OK);
    verify(z);
    close_zone(z);
    CHECK_RC(shmlock_zone_destroy(dir, KEY("slots")), SHMLOCK_OK);

    /* a dictionary full of `set` entries: every lock still fits, the
     * entries evicted for them */
    z = open_zone("slots", SHMLOCK_MIN_SIZE);
    for (i = 0; ; i++) {
        CHECK(i < 100000);
        snprintf(key, sizeof(key), "set%d", i);
        CHECK_RC(shmlock_dict_store(z, SHMLOCK_OP_SET, KEY(key), &v, 0,
                                    &forcible), SHMLOCK_OK);
        if (forcible) {
            break;
        }
    }
    CHECK_RC(shmlock_dict_stats(z, -1, &st2), SHMLOCK_OK);
    CHECK(st2.free_space < 256 && st2.entries > 10);
    CHECK(locks_until_full(z, "lock", (int) (floor + chunks), &first)
          == (int) (floor - floor / 8 + chunks / 2));
    CHECK_RC(shmlock_dict_stats(z, -1, &st2), SHMLOCK_OK);
    CHECK(st2.entries == 0 && st2.evictions > 10);
    verify(z);
    close_zone(z);
    CHECK_RC(shmlock_zone_destroy(dir, KEY("slots")), SHMLOCK_OK);

    /* full of `add` entries: only the floor's locks */
    z = open_zone("slots", SHMLOCK_MIN_SIZE);
    for (i = 0; ; i++) {
        CHECK(i < 100000);
        snprintf(key, sizeof(key), "add%d", i);
        rc = shmlock_dict_store(z, SHMLOCK_OP_ADD, KEY(key), &v, 0,
                                &forcible);
        if (rc == SHMLOCK_NO_MEMORY) {
            break;
        }
        CHECK_RC(rc, SHMLOCK_OK);
    }
    CHECK(locks_until_full(z, "lock", (int) (floor + chunks), &first)
          == (int) (floor - floor / 8));
    verify(z);
    close_zone(z);
    CHECK_RC(shmlock_zone_destroy(dir, KEY("slots")), SHMLOCK_OK);
}

/*
 * Slot locks across processes: 4 processes take one key's slot lock in
 * turn and increment a dictionary number by a get and a set (exact only
 * under exclusion), churning keys of their own through the table.
 */
static void
test_slot_processes(shmlock_zone_t *z, int rounds)
{
    pid_t  pids[4];
    int    p, i;

    CHECK_RC(store(z, SHMLOCK_OP_SET, "slot counter", num_value(0), 0),
             SHMLOCK_OK);
    for (p = 0; p < 4; p++) {
        pids[p] = fork();
        CHECK(pids[p] >= 0);
        if (pids[p] != 0) {
            continue;
        }
        for (i = 0; i < rounds; i++) {
            shmlock_ticket_t  t, c;
            uint32_t          owner = (uint32_t) i + 1;
            char              key[32];
            int               rc, n;

            for (n = 0; ; n++) {
                rc = shmlock_slot_acquire(z, KEY("slot lock"), owner, 60000,
                                          0, &t);
                if (rc == SHMLOCK_OK) {
                    break;
                }
                CHECK_RC(rc, SHMLOCK_EXISTS);
                if (n % 16 == 15) {
                    sched_yield();
                }
            }
            CHECK_RC(store(z, SHMLOCK_OP_SET, "slot counter",
                           num_value(read_num(z, "slot counter") + 1), 0),
                     SHMLOCK_OK);
            CHECK_RC(shmlock_slot_release(z, &t), SHMLOCK_OK);
            snprintf(key, sizeof(key), "churn %d %d", p, i % 50);
            rc = shmlock_slot_acquire(z, KEY(key), owner, 60000, 0, &c);
            CHECK(rc == SHMLOCK_OK || rc == SHMLOCK_NO_MEMORY);
            if (rc == SHMLOCK_OK) {
                CHECK_RC(shmlock_slot_release(z, &c), SHMLOCK_OK);
            }
        }
        _exit(0);
    }
    for (p = 0; p < 4; p++) {
        CHECK(reap(pids[p]) == 0);
    }
    CHECK(read_num(z, "slot counter") == 4.0 * rounds);
    verify(z);
}

/*
 * Slot locks under kill -9.  Workers take one key's slot lock (that never
 * expires: a dead holder's lock is only ever taken over, when
 * shmlock_slot_alive says it is gone, by a swap from the state seen) and
 * write their pid in a word while inside; the parent SIGKILLs a random
 * worker, wherever it is, 40 times, starting another each time.  Whoever
 * enters finds nobody alive inside, every release of a lock taken is
 * accepted, and the zone verifies.  (The pauses between kills only spread
 * them out: no outcome depends on them.)
 */
enum { SK_INSIDE, SK_VIOLATIONS, SK_TAKEOVERS, SK_STOP, SK_ROUNDS };

static void
slot_kill_worker(shmlock_zone_t *z, uint32_t *sk)
{
    shmlock_ticket_t  t, u;
    uint32_t          me = (uint32_t) getpid(), id = 0, was;
    int               rc, i;

    while (!__atomic_load_n(&sk[SK_STOP], __ATOMIC_ACQUIRE)) {
        rc = shmlock_slot_acquire(z, KEY("kill lock"), ++id, 0, 0, &t);
        if (rc == SHMLOCK_EXISTS) {
            if (shmlock_slot_alive(&t)
                || shmlock_slot_swap(z, &t, OWN(id), 0, 0, 0, 0, &u)
                   != SHMLOCK_OK)
            {
                sched_yield();
                continue;
            }
            t = u;
            __atomic_add_fetch(&sk[SK_TAKEOVERS], 1, __ATOMIC_RELAXED);
        } else if (rc != SHMLOCK_OK) {
            __atomic_add_fetch(&sk[SK_VIOLATIONS], 1, __ATOMIC_RELAXED);
            _exit(1);
        }
        was = __atomic_load_n(&sk[SK_INSIDE], __ATOMIC_ACQUIRE);
        if (was != 0 && shmlock_proc_alive((int) was, 0)) {
            __atomic_add_fetch(&sk[SK_VIOLATIONS], 1, __ATOMIC_RELAXED);
        }
        __atomic_store_n(&sk[SK_INSIDE], me, __ATOMIC_RELEASE);
        for (i = 0; i < 2000; i++) {
            if (__atomic_load_n(&sk[SK_INSIDE], __ATOMIC_ACQUIRE) != me) {
                __atomic_add_fetch(&sk[SK_VIOLATIONS], 1, __ATOMIC_RELAXED);
            }
        }
        __atomic_store_n(&sk[SK_INSIDE], 0, __ATOMIC_RELEASE);
        if (shmlock_slot_release(z, &t) != SHMLOCK_OK) {
            __atomic_add_fetch(&sk[SK_VIOLATIONS], 1, __ATOMIC_RELAXED);
        }
        __atomic_add_fetch(&sk[SK_ROUNDS], 1, __ATOMIC_RELAXED);
    }
    _exit(0);
}

static pid_t
slot_kill_spawn(shmlock_zone_t *z, uint32_t *sk)
{
    pid_t  pid = fork();

    CHECK(pid >= 0);
    if (pid == 0) {
        slot_kill_worker(z, sk);
    }
    return pid;
}

static void
test_slot_kills(void)
{
    shmlock_zone_t    *z = open_zone("slotkill", 1 << 20);
    shmlock_ticket_t   t, u;
    uint32_t          *sk, rounds;
    pid_t              pids[4];
    int                i, k, rc;

    sk = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
              -1, 0);
    CHECK(sk != MAP_FAILED);
    memset(sk, 0, 4096);
    srand((unsigned) getpid());
    for (i = 0; i < 4; i++) {
        pids[i] = slot_kill_spawn(z, sk);
    }
    for (k = 0; k < 40; k++) {
        sleep_ms(1 + rand() % 4);
        i = rand() % 4;
        kill(pids[i], SIGKILL);
        CHECK(reap(pids[i]) == 128 + SIGKILL);
        pids[i] = slot_kill_spawn(z, sk);
    }
    /* the survivors go on until they have done some rounds (bounded) */
    rounds = __atomic_load_n(&sk[SK_ROUNDS], __ATOMIC_ACQUIRE);
    for (k = 0; k < 6000 && __atomic_load_n(&sk[SK_ROUNDS], __ATOMIC_ACQUIRE)
                            < rounds + 100; k++)
    {
        sleep_ms(10);
    }
    __atomic_store_n(&sk[SK_STOP], 1, __ATOMIC_RELEASE);
    for (i = 0; i < 4; i++) {
        CHECK(reap(pids[i]) == 0);
    }
    CHECK(sk[SK_VIOLATIONS] == 0);
    CHECK(sk[SK_ROUNDS] >= rounds + 100);
    /* the lock is free, or a dead worker's: taken over at once */
    rc = shmlock_slot_acquire(z, KEY("kill lock"), 1, 0, 0, &t);
    if (rc == SHMLOCK_EXISTS) {
        CHECK(shmlock_slot_alive(&t) == 0);
        CHECK_RC(shmlock_slot_swap(z, &t, OWN(1), 0, 0, 0, 0, &u),
                 SHMLOCK_OK);
        t = u;
    } else {
        CHECK_RC(rc, SHMLOCK_OK);
    }
    CHECK_RC(shmlock_slot_release(z, &t), SHMLOCK_OK);
    verify(z);
    printf("  slot locks under kill -9: %u rounds, %u dead holders' locks "
           "taken over\n", sk[SK_ROUNDS], sk[SK_TAKEOVERS]);
    fflush(stdout);         /* before a later test's children inherit it */
    munmap(sk, 4096);
    close_zone(z);
    CHECK_RC(shmlock_zone_destroy(dir, KEY("slotkill")), SHMLOCK_OK);
}

/* flush_expired's count (the call itself must succeed) */
static int
flush_expired(shmlock_zone_t *z, int max_count)
{
    int  freed = -1;

    CHECK_RC(shmlock_dict_flush_expired(z, max_count, &freed), SHMLOCK_OK);
    return freed;
}

static void
test_flush_and_keys(shmlock_zone_t *z)
{
    char     key[32], small[8];
    int      i, count, freed, tries;
    int64_t  t0;
    size_t   used;

    CHECK_RC(shmlock_dict_flush_all(z), SHMLOCK_OK);
    CHECK(count_keys(z) == 0);
    freed = flush_expired(z, 0);
    CHECK(freed >= 0);
    verify(z);

    /* the ten that expire go last: slow runs (valgrind) must not see them
     * expire, and be reclaimed by later stores, before they are counted;
     * a run that took 200 ms or more to count them (a loaded machine) is
     * done again, 10 times at most */
    for (tries = 0;; tries++) {
        t0 = shmlock_now_ms();
        for (i = 99; i >= 0; i--) {
            snprintf(key, sizeof(key), "key%d", i);
            CHECK_RC(store(z, i % 2 ? SHMLOCK_OP_ADD : SHMLOCK_OP_SET, key,
                           num_value(i), i < 10 ? 200 : 0), SHMLOCK_OK);
        }
        count = count_keys(z);
        if (shmlock_now_ms() - t0 < 199) {
            break;
        }
        CHECK(tries < 10);
        CHECK_RC(shmlock_dict_flush_all(z), SHMLOCK_OK);
        (void) flush_expired(z, 0);
    }
    CHECK(count == 100);

    count = -1;
    CHECK_RC(shmlock_dict_get_keys(z, 0, small, sizeof(small), &count, &used),
             SHMLOCK_AGAIN);
    CHECK(used > sizeof(small));
    CHECK_RC(shmlock_dict_get_keys(z, 0, small, 0, &count, &used),
             SHMLOCK_AGAIN);

    sleep_ms(250);
    CHECK(count_keys(z) == 90);
    CHECK(flush_expired(z, 3) == 3);
    CHECK(flush_expired(z, 0) == 7);
    CHECK(flush_expired(z, 0) == 0);
    CHECK(count_keys(z) == 90);

    CHECK_RC(shmlock_dict_flush_all(z), SHMLOCK_OK);
    CHECK(count_keys(z) == 0);
    CHECK(flush_expired(z, 0) == 90);
    verify(z);
}

/*
 * scan: a walk meets every key once, step by step; a buffer too small for
 * a bucket's keys is SHMLOCK_AGAIN with the bytes needed; a cursor beyond
 * the zone ends the walk.
 */
static void
test_scan(shmlock_zone_t *z)
{
    char      key[32], buf[4096], small[4];
    int       i, keys, total = 0, steps = 0, n;
    size_t    used;
    uint64_t  cursor = 0, next;

    CHECK_RC(shmlock_dict_flush_all(z), SHMLOCK_OK);
    flush_expired(z, 0);
    for (i = 0; i < 300; i++) {
        snprintf(key, sizeof(key), "scan%d", i);
        CHECK_RC(store(z, SHMLOCK_OP_SET, key, num_value(i), 0), SHMLOCK_OK);
    }
    do {
        CHECK_RC(shmlock_dict_scan(z, cursor, 7, buf, sizeof(buf), &next,
                                   &keys, &used), SHMLOCK_OK);
        CHECK(used <= sizeof(buf));
        total += keys;
        steps++;
        CHECK(steps < 1 << 22);
        cursor = next;
    } while (cursor != 0);
    CHECK(total == 300);
    CHECK(steps > 1);

    /* the first bucket with keys, with a buffer too small for them */
    cursor = 0;
    for ( ;; ) {
        n = shmlock_dict_scan(z, cursor, 1, small, sizeof(small), &next,
                              &keys, &used);
        if (n == SHMLOCK_AGAIN) {
            CHECK(next == cursor && keys == 0 && used > sizeof(small));
            break;
        }
        CHECK_RC(n, SHMLOCK_OK);
        CHECK(keys == 0 && next != 0);
        cursor = next;
    }
    CHECK_RC(shmlock_dict_scan(z, (uint64_t) 99 << 32, 1, buf, sizeof(buf),
                               &next, &keys, &used), SHMLOCK_OK);
    CHECK(next == 0 && keys == 0 && used == 0);
    CHECK_RC(shmlock_dict_flush_all(z), SHMLOCK_OK);
    flush_expired(z, 0);
    verify(z);
}

/* A guarded store happens only while the word's masked bits are as given. */
static void
test_guarded_store(shmlock_zone_t *z)
{
    shmlock_gen_guard_t  g = { .word = 5 + SHMLOCK_GEN_WORDS,
                               .mask = 0xffff0000u };
    shmlock_value_t      v = num_value(1);
    int                  forcible = -1;

    g.value = shmlock_zone_gen_add(z, 5, 0);
    CHECK_RC(shmlock_dict_store_guarded(z, SHMLOCK_OP_SET, KEY("guarded"), &v,
                                        0, &g, &forcible), SHMLOCK_OK);
    CHECK(forcible == 0);
    shmlock_zone_gen_add(z, 5, 1);
    CHECK_RC(shmlock_dict_store_guarded(z, SHMLOCK_OP_ADD, KEY("guarded"), &v,
                                        0, &g, &forcible), SHMLOCK_EXISTS);
    shmlock_zone_gen_add(z, 5, 1u << 16);
    v = num_value(2);
    CHECK_RC(shmlock_dict_store_guarded(z, SHMLOCK_OP_SET, KEY("guarded"), &v,
                                        0, &g, &forcible), SHMLOCK_CHANGED);
    CHECK_RC(shmlock_dict_get(z, KEY("guarded"), 0, &v, NULL, 0),
             SHMLOCK_OK);
    CHECK(v.type == SHMLOCK_TNUMBER && v.num == 1);
    CHECK_RC(shmlock_dict_store_guarded(z, SHMLOCK_OP_SET, "", 0, &v, 0, &g,
                                        &forcible), SHMLOCK_BAD_KEY);
    CHECK_RC(store(z, SHMLOCK_OP_SET, "guarded", nil_value(), 0), SHMLOCK_OK);
    verify(z);
}

/*
 * A zone of 8 MB is split into 8 shards.  What spans the whole zone (keys,
 * flushes, free space) must see every shard; one entry fits one shard.
 */
static void
test_shard_counts(void)
{
    shmlock_zone_t  *z, *again;
    unsigned         bad[] = { 3, 5, 12, 17, 32, 1u << 31 };
    size_t           i;

    /* the default: one shard under 2 MiB, then 1 MiB or more each */
    z = open_zone("count", 1 << 20);
    CHECK(shmlock_zone_shards(z) == 1);
    close_zone(z);
    CHECK_RC(shmlock_zone_destroy(dir, KEY("count")), SHMLOCK_OK);
    z = open_zone("count", 6 << 20);
    CHECK(shmlock_zone_shards(z) == 4);
    close_zone(z);
    CHECK_RC(shmlock_zone_destroy(dir, KEY("count")), SHMLOCK_OK);
    z = open_zone("count", 64 << 20);
    CHECK(shmlock_zone_shards(z) == 16);
    close_zone(z);
    CHECK_RC(shmlock_zone_destroy(dir, KEY("count")), SHMLOCK_OK);

    /* asked for: a power of two up to 16, each shard 64 KiB or more */
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_RC(shmlock_zone_open(dir, KEY("count"), 4 << 20, bad[i], &z),
                 SHMLOCK_BAD_SHARDS);
    }
    CHECK_RC(shmlock_zone_open(dir, KEY("count"), 512 << 10, 16, &z),
             SHMLOCK_BAD_SHARDS);
    /* one shard, whatever the size; and a small zone is attached again */
    z = open_zone("count", SHMLOCK_MIN_SIZE);
    CHECK(shmlock_zone_shards(z) == 1);
    CHECK_RC(shmlock_zone_open(dir, KEY("count"), 0, 0, &again), SHMLOCK_OK);
    shmlock_zone_close(again);
    close_zone(z);
    CHECK_RC(shmlock_zone_destroy(dir, KEY("count")), SHMLOCK_OK);
    CHECK(strcmp(shmlock_strerror(SHMLOCK_BAD_SHARDS), "bad shards") == 0);
    CHECK_RC(shmlock_zone_open(dir, KEY("count"), 1 << 20, 16, &z),
             SHMLOCK_OK);
    CHECK(shmlock_zone_shards(z) == 16);
    /* attaching keeps the creator's count */
    CHECK_RC(shmlock_zone_open(dir, KEY("count"), 1 << 20, 2, &again),
             SHMLOCK_OK);
    CHECK(shmlock_zone_shards(again) == 16);
    shmlock_zone_close(again);
    CHECK_RC(shmlock_zone_open(dir, KEY("count"), 0, 0, &again), SHMLOCK_OK);
    CHECK(shmlock_zone_shards(again) == 16);
    shmlock_zone_close(again);
    verify(z);
    shmlock_zone_close(z);
    CHECK_RC(shmlock_zone_destroy(dir, KEY("count")), SHMLOCK_OK);
}

/*
 * The zone's figures are its shards' summed (but capacity), with
 * `expired` and `evictions` as given; a shard out of range is refused.
 */
static void
check_stats_sum(shmlock_zone_t *z, uint64_t expired, uint64_t evictions)
{
    shmlock_stats_t  all, one, sum;
    unsigned         s, n = shmlock_zone_shards(z);

    memset(&sum, 0, sizeof(sum));
    for (s = 0; s < n; s++) {
        CHECK_RC(shmlock_dict_stats(z, (int) s, &one), SHMLOCK_OK);
        CHECK(one.capacity > 0 && one.capacity <= shmlock_dict_capacity(z) / n);
        sum.free_space += one.free_space;
        sum.entries += one.entries;
        sum.evictions += one.evictions;
        sum.expired += one.expired;
        sum.spins += one.spins;
        sum.sleeps += one.sleeps;
        sum.takeovers += one.takeovers;
        sum.recoveries += one.recoveries;
    }
    CHECK_RC(shmlock_dict_stats(z, -1, &all), SHMLOCK_OK);
    CHECK(all.capacity == shmlock_dict_capacity(z));
    CHECK(all.free_space == shmlock_dict_free_space(z));
    CHECK(all.free_space == sum.free_space && all.entries == sum.entries
          && all.evictions == sum.evictions && all.expired == sum.expired
          && all.spins == sum.spins && all.sleeps == sum.sleeps
          && all.takeovers == sum.takeovers
          && all.recoveries == sum.recoveries);
    CHECK(all.entries == (uint64_t) count_keys(z));
    CHECK(all.expired == expired && all.evictions == evictions);

    CHECK_RC(shmlock_dict_stats(z, (int) n, &one), SHMLOCK_BAD_SHARDS);
    CHECK_RC(shmlock_dict_stats(z, -2, &one), SHMLOCK_BAD_SHARDS);
    CHECK(one.entries == 0 && one.capacity == 0);
}

static void
test_shards(void)
{
    shmlock_zone_t  *z = open_zone("shards", 8 << 20);
    shmlock_value_t  v;
    size_t           used, need = 0, empty = shmlock_dict_free_space(z);
    char             key[32], *buf, *p, *big;
    int              i, count, forcible, seen[1000];
    uint32_t         len;

    CHECK(shmlock_zone_shards(z) == 8);
    CHECK(empty > 7 << 20 && empty < 8 << 20);
    CHECK(shmlock_dict_capacity(z) == 8 << 20);

    for (i = 0; i < 1000; i++) {
        snprintf(key, sizeof(key), "key%d", i);
        CHECK_RC(store(z, SHMLOCK_OP_SET, key, num_value(i), 0), SHMLOCK_OK);
        need += sizeof(uint32_t) + strlen(key);
    }
    CHECK(shmlock_dict_free_space(z) == empty - 1000 * 64);

    /* every key once, from all shards */
    buf = malloc(need);
    CHECK(buf != NULL);
    CHECK_RC(shmlock_dict_get_keys(z, 0, buf, need, &count, &used),
             SHMLOCK_OK);
    CHECK(count == 1000 && used == need);
    memset(seen, 0, sizeof(seen));
    for (p = buf; p < buf + used; p += sizeof(len) + len) {
        memcpy(&len, p, sizeof(len));
        CHECK(len < sizeof(key) && len > 3);
        memcpy(key, p + sizeof(len), len);
        key[len] = '\0';
        i = atoi(key + 3);
        CHECK(i >= 0 && i < 1000 && !seen[i]);
        seen[i] = 1;
    }
    /* a buffer one byte short, wherever the shard boundary falls */
    CHECK_RC(shmlock_dict_get_keys(z, 0, buf, need - 1, &count, &used),
             SHMLOCK_AGAIN);
    CHECK(count == 1000 && used == need);
    CHECK_RC(shmlock_dict_get_keys(z, 300, buf, need, &count, &used),
             SHMLOCK_OK);
    CHECK(count == 300 && used < need);
    free(buf);

    /* flushes reach every shard */
    for (i = 0; i < 1000; i += 2) {
        snprintf(key, sizeof(key), "key%d", i);
        CHECK_RC(shmlock_dict_expire(z, KEY(key), 1), SHMLOCK_OK);
    }
    sleep_ms(5);
    CHECK(count_keys(z) == 500);
    CHECK(flush_expired(z, 100) == 100);
    CHECK(flush_expired(z, 0) == 400);
    CHECK_RC(shmlock_dict_flush_all(z), SHMLOCK_OK);
    CHECK(count_keys(z) == 0);
    CHECK(flush_expired(z, 0) == 500);
    CHECK(shmlock_dict_free_space(z) == empty);
    verify(z);
    check_stats_sum(z, 1000, 0);

    /* an entry larger than a shard: no memory, with the zone empty */
    big = malloc(2 << 20);
    CHECK(big != NULL);
    memset(big, 'b', 2 << 20);
    v = str_value(big, 2 << 20, 0);
    CHECK_RC(shmlock_dict_store(z, SHMLOCK_OP_SET, KEY("big"), &v, 0,
                                &forcible), SHMLOCK_NO_MEMORY);
    v = str_value(big, 512 << 10, 0);
    CHECK_RC(shmlock_dict_store(z, SHMLOCK_OP_SET, KEY("big"), &v, 0,
                                &forcible), SHMLOCK_OK);
    expect_str(z, "big", big, 512 << 10);
    free(big);
    verify(z);

    close_zone(z);
    CHECK_RC(shmlock_zone_destroy(dir, KEY("shards")), SHMLOCK_OK);
}

/* set() may evict other set() entries; add() entries stay while live. */
static void
test_eviction(void)
{
    shmlock_zone_t  *z = open_zone("evict", SHMLOCK_MIN_SIZE);
    shmlock_value_t  v;
    char             key[32], val[100];
    size_t           total = shmlock_dict_free_space(z);
    int              i, forcible, evicted = 0, pinned;

    memset(val, 'v', sizeof(val));
    v = str_value(val, sizeof(val), 0);
    CHECK(total > 0 && total <= shmlock_dict_capacity(z));

    for (i = 0; i < 2000; i++) {
        snprintf(key, sizeof(key), "set%d", i);
        forcible = 0;
        CHECK_RC(shmlock_dict_store(z, SHMLOCK_OP_SET, KEY(key), &v, 0,
                                    &forcible), SHMLOCK_OK);
        evicted += forcible;
    }
    CHECK(evicted > 0);
    expect_str(z, "set1999", val, sizeof(val));
    verify(z);

    /* safe_set never evicts a live entry */
    CHECK_RC(store(z, SHMLOCK_OP_SET | SHMLOCK_OP_SAFE, "safe", v, 0),
             SHMLOCK_NO_MEMORY);

    /* add() entries push the set() ones out, then fill the zone */
    for (pinned = 0; ; pinned++) {
        snprintf(key, sizeof(key), "add%d", pinned);
        forcible = 0;
        if (shmlock_dict_store(z, SHMLOCK_OP_ADD, KEY(key), &v, 0, &forcible)
            != SHMLOCK_OK)
        {
            break;
        }
        CHECK(pinned < 2000);
    }
    CHECK(pinned > 10);
    CHECK_RC(store(z, SHMLOCK_OP_ADD, "more", v, 0), SHMLOCK_NO_MEMORY);
    CHECK_RC(store(z, SHMLOCK_OP_SET, "more", v, 0), SHMLOCK_NO_MEMORY);
    for (i = 0; i < pinned; i++) {
        snprintf(key, sizeof(key), "add%d", i);
        expect_str(z, key, val, sizeof(val));
    }
    CHECK(count_keys(z) >= pinned);
    verify(z);

    /* a value larger than the zone can never fit */
    {
        size_t  len = shmlock_dict_capacity(z) * 2;
        char   *huge = calloc(1, len);

        CHECK(huge != NULL);
        CHECK_RC(store(z, SHMLOCK_OP_SET, "huge", str_value(huge, len, 0), 0),
                 SHMLOCK_NO_MEMORY);
        free(huge);
    }

    /* once the locks expire they make room again */
    CHECK_RC(shmlock_dict_flush_all(z), SHMLOCK_OK);
    CHECK_RC(store(z, SHMLOCK_OP_SET, "more", v, 0), SHMLOCK_OK);
    CHECK_RC(shmlock_dict_flush_all(z), SHMLOCK_OK);
    flush_expired(z, 0);
    CHECK(shmlock_dict_free_space(z) == total);
    verify(z);

    close_zone(z);
    CHECK_RC(shmlock_zone_destroy(dir, KEY("evict")), SHMLOCK_OK);
}


/* ---- corrupted zones ---- */

/*
 * A zone whose body holds garbage must answer, not crash nor hang: each
 * round puts back a populated zone's bytes, overwrites a random span of its
 * body (or bends a few index words: buckets, the free and LRU lists'
 * heads, entries' chunk, chain and LRU links, lengths) from a seed, then
 * runs every dictionary call, each of which must return one of its
 * statuses (SHMLOCK_CORRUPT among them).  A crash or a hang (alarm) says
 * which round and call before the process dies.
 *
 * The shards' mutex words are the one thing set back after the garbage:
 * to 0, or every CORRUPT_DEAD_EVERY-th round to a dead process's pid, so
 * that the first call takes the mutex over and recovery runs over the
 * garbage.  A garbage owner could be this very process, which would then
 * wait for itself; spec/07-corrupt_spec.lua covers garbage owners.
 */

#define CORRUPT_ROUNDS      300
#define CORRUPT_DEAD_EVERY  8
#define CORRUPT_ALARM_S     20      /* one round, under valgrind too */
#define CORRUPT_KEY_MAX     256

#define ST(code)      (1u << SHMLOCK_##code)
#define ST_STORE      (ST(OK) | ST(NOT_FOUND) | ST(EXISTS) | ST(NO_MEMORY) \
                       | ST(CORRUPT))
#define ST_LOOKUP     (ST(OK) | ST(NOT_FOUND) | ST(CORRUPT))
#define ST_COMPARE    (ST(OK) | ST(NOT_FOUND) | ST(CHANGED) | ST(NO_MEMORY) \
                       | ST(CORRUPT))

/* the call `what`: its status must be one of `allowed` */
#define CALL(what, allowed, expr)                                            \
    do { corrupt_call = what; corrupt_expect((expr), (allowed)); } while (0)

static char         corrupt_what[512];   /* the round: seed and garbage */
static const char  *corrupt_call = "";   /* the call in progress */
static uint32_t     corrupt_rng;

/* the signals a crash or a hang ends in, and their handlers before ours */
static const int         corrupt_sigs[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL,
                                            SIGALRM };
#define CORRUPT_NSIGS    (sizeof(corrupt_sigs) / sizeof(corrupt_sigs[0]))
static struct sigaction  corrupt_old[CORRUPT_NSIGS];

static uint32_t
corrupt_rand(uint32_t n)
{
    corrupt_rng ^= corrupt_rng << 13;
    corrupt_rng ^= corrupt_rng >> 17;
    corrupt_rng ^= corrupt_rng << 5;
    return n == 0 ? corrupt_rng : corrupt_rng % n;
}

static void
corrupt_say(const char *s)
{
    ssize_t  n = write(2, s, strlen(s));

    (void) n;
}

/*
 * A crash or the alarm: say where, then let the handler from before ours
 * (ASan's, or the default) have the signal: a fault comes back as the
 * faulting instruction runs again, the alarm is raised again.
 */
static void
corrupt_signal(int sig)
{
    size_t  i;

    corrupt_say("shmlock_test: corrupted zone, ");
    corrupt_say(corrupt_what);
    corrupt_say(sig == SIGALRM ? ": hung in " : ": crashed in ");
    corrupt_say(corrupt_call);
    corrupt_say("\n");
    for (i = 0; i < CORRUPT_NSIGS; i++) {
        if (corrupt_sigs[i] == sig) {
            sigaction(sig, &corrupt_old[i], NULL);
        }
    }
    if (sig == SIGALRM) {
        raise(sig);
    }
}

/* on: our handler for the signals of a crash or hang; off: the old ones */
static void
corrupt_handlers(int on)
{
    struct sigaction  sa;
    size_t            i;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = corrupt_signal;
    sa.sa_flags = SA_NODEFER;
    for (i = 0; i < CORRUPT_NSIGS; i++) {
        CHECK(sigaction(corrupt_sigs[i], on ? &sa : &corrupt_old[i],
                        on ? &corrupt_old[i] : NULL) == 0);
    }
}

static void
corrupt_expect(int rc, unsigned allowed)
{
    if (rc < 0 || rc >= 32 || !(allowed & (1u << rc))) {
        fprintf(stderr, "%s: %s returned %d (%s)\n", corrupt_what,
                corrupt_call, rc, shmlock_strerror(rc));
        exit(1);
    }
}

/* Key number i: short or long, as the population and the calls use it. */
static size_t
corrupt_key(char *key, int i)
{
    if (i % 3 == 0) {
        int  n = snprintf(key, CORRUPT_KEY_MAX, "long/key/%d/", i);

        memset(key + n, 'x', (size_t) (20 + i % 200));
        key[n + 20 + i % 200] = '\0';
    } else {
        snprintf(key, CORRUPT_KEY_MAX, "k%d", i);
    }
    return strlen(key);
}

/* Fills the zone to about 97% with a mix of entries; returns their count. */
static int
corrupt_populate(shmlock_zone_t *z, char *val)
{
    static const size_t  lens[] = { 0, 5, 12, 40, 100, 300, 1000, 3000 };
    char                 key[CORRUPT_KEY_MAX];
    size_t               len;
    int                  i;

    for (i = 0; shmlock_dict_free_space(z) > shmlock_dict_capacity(z) / 32;
         i++)
    {
        CHECK(i < 1000000);
        corrupt_key(key, i);
        len = lens[i % 8];
        switch (i % 8) {
        case 0:
            store(z, SHMLOCK_OP_ADD, key, str_value(val, len, 0), 0);
            break;
        case 1:
            store(z, SHMLOCK_OP_SET, key, num_value(i * 1.5), 0);
            break;
        case 2:
            store(z, SHMLOCK_OP_ADD, key, str_value(val, len, 0), 1);
            break;
        case 3:
            store(z, SHMLOCK_OP_SET, key, str_value(val, len, i), 1);
            break;
        case 4:
            {
                shmlock_ticket_t  t;

                memset(&t, 0, sizeof(t));
                shmlock_slot_acquire(z, KEY(key), 1, 600000, 0, &t);
            }
            break;
        default:
            store(z, SHMLOCK_OP_SET, key, str_value(val, len, 0),
                  i % 2 ? 0 : 600000);
        }
    }
    sleep_ms(2);      /* the 1 ms entries expire */
    return i;
}

/* A random span of the body, or a few index words, overwritten. */
static void
corrupt_write(shmlock_zone_t *z)
{
    zone_hdr_t  *h = z->hdr;
    char        *s, *at;
    size_t       len, body = h->waits_off, n, w;
    uint32_t     v, words;

    if (corrupt_rand(2) == 0) {
        size_t  lens[3] = { 1 + corrupt_rand(16), 17 + corrupt_rand(240),
                            2048 };

        len = lens[corrupt_rand(3)];
        if (corrupt_rand(4) == 0) {
            /* a shard's header and first buckets: what every call reads */
            s = (char *) z->shard[corrupt_rand(z->nshards)].hdr;
            at = s + corrupt_rand((uint32_t) (h->buckets_off + 1024));
        } else {
            at = z->base + body + corrupt_rand((uint32_t) (z->size - body
                                                           - len));
        }
        for (n = 0; n < len; n++) {
            at[n] = (char) corrupt_rand(256);
        }
        n = strlen(corrupt_what);
        snprintf(corrupt_what + n, sizeof(corrupt_what) - n,
                 "%zu random bytes at %zu", len, (size_t) (at - z->base));
        return;
    }

    words = 1 + corrupt_rand(8);
    for (w = 0; w < words; w++) {
        shard_t   *sh = &z->shard[corrupt_rand(z->nshards)];
        uint32_t  *word, pick = corrupt_rand(8);
        uint32_t   values[4] = { 0xFFFFFFFF, sh->nchunks + 1,
                                 corrupt_rand(sh->nchunks + 1),
                                 corrupt_rand(0) };

        if (pick == 0) {
            /* free_head .. nentries */
            word = &sh->hdr->dict.free_head + corrupt_rand(5);
        } else if (pick == 1) {
            word = &sh->buckets[corrupt_rand(sh->bucket_mask + 1)];
        } else {
            /* next, hnext, lru_prev, lru_next, hash, value_len */
            word = (uint32_t *) (sh->chunks + (size_t) SHARD_CHUNK_SIZE
                                 * (1 + corrupt_rand(sh->nchunks)))
                   + corrupt_rand(6);
        }
        v = values[corrupt_rand(4)];
        *word = v;
        n = strlen(corrupt_what);
        snprintf(corrupt_what + n, sizeof(corrupt_what) - n, "%s%zu = %u",
                 w == 0 ? "words at " : ", ", (size_t) ((char *) word
                                                        - z->base), v);
    }
}

/* Every kind of update on one key that may exist. */
static void
corrupt_updates(shmlock_zone_t *z, const char *key, size_t klen, char *val,
    size_t n)
{
    shmlock_value_t  u = str_value(val, n, 0), one = num_value(1);
    int64_t          ttl;
    double           d;
    int              forcible;

    CALL("replace", ST_STORE, shmlock_dict_store(z, SHMLOCK_OP_REPLACE, key,
                                                 klen, &u, 0, &forcible));
    CALL("add", ST_STORE, shmlock_dict_store(z, SHMLOCK_OP_ADD, key, klen,
                                             &one, 0, &forcible));
    u.len = n + 200;
    CALL("set longer", ST_STORE, shmlock_dict_store(z, SHMLOCK_OP_SET, key,
                                                    klen, &u, 0, &forcible));
    u.len = n;
    CALL("set shorter", ST_STORE, shmlock_dict_store(z, SHMLOCK_OP_SET, key,
                                                     klen, &u, 0, &forcible));
    CALL("set same size", ST_STORE,
         shmlock_dict_store(z, SHMLOCK_OP_SET, key, klen, &u, 100000,
                            &forcible));
    CALL("safe_set", ST_STORE,
         shmlock_dict_store(z, SHMLOCK_OP_SET | SHMLOCK_OP_SAFE, key, klen,
                            &u, 0, &forcible));
    CALL("cas", ST_COMPARE, shmlock_dict_cas(z, key, klen, &u, &one, 0,
                                             &forcible));
    d = 1;
    CALL("incr", ST_LOOKUP | ST(NOT_A_NUMBER),
         shmlock_dict_incr(z, key, klen, &d, 0, 0, 0, &forcible));
    d = 1;
    CALL("incr with init", ST_LOOKUP | ST(NOT_A_NUMBER) | ST(NO_MEMORY),
         shmlock_dict_incr(z, key, klen, &d, 1, 0, 100000, &forcible));
    CALL("cad", ST_COMPARE, shmlock_dict_cad(z, key, klen, &one));
    CALL("expire", ST_LOOKUP, shmlock_dict_expire(z, key, klen, 100000));
    CALL("ttl", ST_LOOKUP, shmlock_dict_ttl(z, key, klen, &ttl));
    {
        shmlock_lock_t  l;

        memset(&l, 0, sizeof(l));
        l.zone = z;
        CALL("lock_acquire", ST_STORE,
             shmlock_lock_acquire(&l, key, klen, 100000, 0));
        CALL("lock_release", ST_COMPARE, shmlock_lock_release(&l, 0));
    }
    {
        shmlock_ticket_t  t = { 0, 0, 0, 0, 0 }, u = { 0, 0, 0, 0, 0 };

        CALL("slot_acquire", ST_STORE,
             shmlock_slot_acquire(z, key, klen, 5, 100000, 0, &t));
        CALL("slot_look", ST_LOOKUP, shmlock_slot_look(z, key, klen, &u));
        CALL("slot_swap", ST(OK) | ST(CHANGED) | ST(CORRUPT),
             shmlock_slot_swap(z, &t, OWN(5), 0, SHMLOCK_SLOT_MARKED,
                               SHMLOCK_KEEP_TTL, 0, &u));
        CALL("slot_extend", ST_COMPARE,
             shmlock_slot_extend(z, &t, 100000, 0));
        CALL("slot_release", ST_COMPARE, shmlock_slot_release(z, &t));
        CALL("slot_release marked", ST_COMPARE, shmlock_slot_release(z, &u));
    }
    {
        shmlock_slot_info_t  info[8];
        uint64_t             cursor = 0, next;
        int                  count, steps;

        for (steps = 0; steps < 100000; steps++) {
            CALL("slot_scan", ST(OK),
                 shmlock_slot_scan(z, cursor, info, 8, &count, &next));
            if (count < 0 || count > 8 || (next != 0 && next <= cursor)) {
                fprintf(stderr, "%s: slot_scan: count %d, next %llu after "
                        "%llu\n", corrupt_what, count,
                        (unsigned long long) next,
                        (unsigned long long) cursor);
                exit(1);
            }
            if (next == 0) {
                break;
            }
            cursor = next;
        }
    }
    if (n % 2 == 0) {
        CALL("delete", ST_STORE, store(z, SHMLOCK_OP_SET, key, nil_value(),
                                       0));
    }
}

/* get and get_stale: a status, and a length no larger than the zone. */
static void
corrupt_get(shmlock_zone_t *z, const char *key, size_t klen, int stale,
    char *buf, size_t size)
{
    shmlock_value_t  out;
    int              rc;

    corrupt_call = stale ? "get_stale" : "get";
    rc = shmlock_dict_get(z, key, klen, stale, &out, buf, size);
    corrupt_expect(rc, ST(OK) | ST(AGAIN) | ST(CORRUPT));
    if (rc == SHMLOCK_AGAIN && out.len > size) {
        fprintf(stderr, "%s: %s asks for %zu bytes from a zone of %zu\n",
                corrupt_what, corrupt_call, out.len, size);
        exit(1);
    }
}

/* Every call, on every key, a few new ones, and the whole zone. */
static void
corrupt_calls(shmlock_zone_t *z, int nkeys, char *val, char *buf)
{
    size_t           size = shmlock_dict_capacity(z), klen, used, stored;
    char             key[CORRUPT_KEY_MAX + 8], msg[256];
    int              i, count;
    shmlock_stats_t  st;

    for (i = 0; i < nkeys; i++) {
        klen = corrupt_key(key, i);
        corrupt_get(z, key, klen, 0, buf, size);
        corrupt_get(z, key, klen, 1, buf, size);
    }
    for (i = 0; i < nkeys; i += nkeys / 32 + 1) {
        klen = corrupt_key(key, i);
        corrupt_updates(z, key, klen, val, (size_t) (i % 70));
    }
    /* new keys, enough to make every shard evict */
    for (i = 0, stored = 0; stored < size / 8; i++, stored += 1000) {
        klen = corrupt_key(key, nkeys + i);
        memcpy(key + klen, ":new", 5);
        klen += 4;
        corrupt_updates(z, key, klen, val, 1000);
    }
    corrupt_call = "get_keys";
    corrupt_expect(shmlock_dict_get_keys(z, 0, buf, size, &count, &used),
                   ST(OK) | ST(AGAIN) | ST(CORRUPT));
    corrupt_call = "scan";
    {
        uint64_t  cursor = 0, next;
        int       steps = 0, rc;

        do {
            rc = shmlock_dict_scan(z, cursor, 64, buf, size, &next, &count,
                                   &used);
            corrupt_expect(rc, ST(OK) | ST(AGAIN) | ST(CORRUPT));
            cursor = rc == SHMLOCK_OK ? next : 0;
        } while (cursor != 0 && ++steps < 1 << 20);
    }
    corrupt_call = "flush_expired";
    corrupt_expect(shmlock_dict_flush_expired(z, 0, &count),
                   ST(OK) | ST(CORRUPT));
    corrupt_call = "free_space";
    (void) shmlock_dict_free_space(z);
    corrupt_call = "stats";
    corrupt_expect(shmlock_dict_stats(z, -1, &st), ST(OK) | ST(CORRUPT));
    corrupt_call = "verify";
    corrupt_expect(shmlock_dict_verify(z, msg, sizeof(msg)),
                   ST(OK) | ST(CORRUPT));
    corrupt_call = "flush_all";
    corrupt_expect(shmlock_dict_flush_all(z), ST(OK) | ST(CORRUPT));
    corrupt_call = "";
}

static void
test_corruption(size_t size, unsigned shards, int rounds)
{
    shmlock_zone_t  *z = NULL;
    char            *snapshot, *val, *buf;
    int              round, nkeys;
    uint32_t         s;
    pid_t            dead;

    dead = fork();
    CHECK(dead >= 0);
    if (dead == 0) {
        _exit(0);
    }
    CHECK(reap(dead) == 0);         /* its pid is nobody's now */

    CHECK_RC(shmlock_zone_open(dir, KEY("corrupt"), size, shards, &z),
             SHMLOCK_OK);
    snapshot = malloc(size);
    val = malloc(4096);
    buf = malloc(size);
    CHECK(snapshot != NULL && val != NULL && buf != NULL);
    memset(val, 'v', 4096);
    nkeys = corrupt_populate(z, val);
    verify(z);
    memcpy(snapshot, z->base, size);

    corrupt_handlers(1);
    for (round = 0; round < rounds; round++) {
        memcpy(z->base, snapshot, size);
        corrupt_rng = 0x9e3779b9u * (uint32_t) (round + 1);
        snprintf(corrupt_what, sizeof(corrupt_what),
                 "%zu bytes, %u shards, round %d: ", size, shards, round);
        corrupt_write(z);
        for (s = 0; s < z->nshards; s++) {
            z->shard[s].hdr->mutex.owner
                = round % CORRUPT_DEAD_EVERY == 0 ? (uint64_t) dead : 0;
        }
        alarm(CORRUPT_ALARM_S);
        corrupt_calls(z, nkeys, val, buf);
        alarm(0);
    }

    corrupt_handlers(0);
    free(snapshot);
    free(val);
    free(buf);
    shmlock_zone_close(z);
    CHECK_RC(shmlock_zone_destroy(dir, KEY("corrupt")), SHMLOCK_OK);
}


/* ---- processes ---- */

static void
test_processes(shmlock_zone_t *z)
{
    uint64_t  start = shmlock_proc_start(getpid());
    pid_t     pid;

    CHECK(shmlock_self_pid() == getpid());
    CHECK(start != 0);
    CHECK(shmlock_proc_alive(getpid(), start) == 1);
    CHECK(shmlock_proc_alive(getpid(), start + 1) == 0);
    CHECK(shmlock_proc_alive(0, 0) == 0);
    {
        /* a slot's holder of our pid: alive with our start time (low 32
         * bits, the hint's), dead with another (an earlier process of our
         * pid), told without /proc */
        shmlock_ticket_t  t;

        memset(&t, 0, sizeof(t));
        t.owner = (uint64_t) (uint32_t) getpid() << 32 | 9;
        t.process = (uint64_t) (uint32_t) getpid()
                    | (uint64_t) (uint32_t) start << 32;
        CHECK(shmlock_slot_alive(&t) == 1);
        t.process = (uint64_t) (uint32_t) getpid()
                    | (uint64_t) (uint32_t) (start + 1) << 32;
        CHECK(shmlock_slot_alive(&t) == 0);
        t.process = 0;
        CHECK(shmlock_slot_alive(&t) == 1);
    }

    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        /* the library caches the pid: a forked child must see its own */
        _exit(shmlock_self_pid() == getpid() ? 0 : 1);
    }
    CHECK(reap(pid) == 0);
    CHECK(shmlock_proc_alive(pid, 0) == 0);

    /*
     * A raw clone system call (or _Fork) runs no pthread_atfork handler:
     * the child must still see its own pid and draw its own token serials,
     * not go on with its parent's.
     */
    {
        char  mine[13], theirs[13];
        int   fds[2];

        CHECK(pipe(fds) == 0);
        shmlock_token_block(mine);
        pid = (pid_t) syscall(SYS_clone, (long) SIGCHLD, 0L, 0L, 0L, 0L);
        CHECK(pid >= 0);
        if (pid == 0) {
            int  own = shmlock_self_pid() == getpid()
                       && shmlock_token_block(theirs) == getpid();

            own = own && write(fds[1], theirs, sizeof(theirs))
                         == (ssize_t) sizeof(theirs);
            _exit(own ? 0 : 1);
        }
        CHECK(reap(pid) == 0);
        memset(theirs, 0, sizeof(theirs));
        CHECK(read(fds[0], theirs, sizeof(theirs)) == (ssize_t) sizeof(theirs));
        shmlock_token_block(mine);
        CHECK(memcmp(mine, theirs, sizeof(mine)) != 0);
        close(fds[0]);
        close(fds[1]);
    }

    /* wait words: a current sequence waits, a stale one returns at once */
    {
        uint32_t  h = shmlock_hash(KEY("w"));
        uint32_t  seq = shmlock_wait_begin(z, h);

        CHECK(h == shmlock_hash(KEY("w")));
        CHECK_RC(shmlock_wait_end(z, h, seq, 2000), SHMLOCK_TIMEOUT);
        seq = shmlock_wait_begin(z, h);
        shmlock_wake_waiters(z, h, 1);
        CHECK(wait_word(z, h) != seq);
        CHECK_RC(shmlock_wait_end(z, h, seq, 1000000), SHMLOCK_OK);
        /* nobody counted: a wake leaves the word alone */
        seq = wait_word(z, h);
        shmlock_wake_waiters(z, h, 1);
        CHECK(wait_word(z, h) == seq);
    }
    CHECK(shmlock_now_ms() > 0);
}

/*
 * A child SIGKILLed at its n-th structural write, for every n until one
 * run completes: each time, the next user repairs what the death left and the
 * zone verifies.  The operations cover allocation, eviction, replacement,
 * removal, incr, cas and flush.
 */
/*
 * Slot writes: keys' first slots (more keys than the zone's slots, so
 * reclaim and tombstones too), marks set and cleared, handoffs, releases,
 * slots spilled into chunks (evicting) and given back; 1 ms locks, so
 * that a child killed holding one leaves nothing for long.
 */
static void
crash_child_slots(shmlock_zone_t *z)
{
    shmlock_mark_t    mk = { OWN(8), 0, 1, 0, 0 };
    shmlock_ticket_t  t, m, u, held[60];
    char              key[16];
    int               i;

    for (i = 0; i < 40; i++) {
        snprintf(key, sizeof(key), "slot%d", i);
        if (shmlock_slot_acquire(z, KEY(key), 7, 1, 0, &t) != SHMLOCK_OK) {
            continue;
        }
        if (i % 4 == 0
            && shmlock_slot_mark(z, &t, &mk, &m) == SHMLOCK_OK)
        {
            if (i % 8 == 0) {
                if (shmlock_slot_swap(z, &m, OWN(8), 0, 0, 1, 0, &u)   /* handoff */
                    == SHMLOCK_OK)
                {
                    t = u;
                }
            } else {
                shmlock_slot_swap(z, &m, OWN(7), 0, 0, SHMLOCK_KEEP_TTL, 0, &u);
            }
        }
        shmlock_slot_release(z, &t);
    }
    /* past the floor's room (14 of a 64 KiB zone's 16 slots), held at
     * once: the last ones spill into chunks (layout 11), more than are
     * free, evicting `set` entries of the full zone; a spilled one marked and handed off; all
     * released, their chunks given back */
    for (i = 0; i < 60; i++) {
        snprintf(key, sizeof(key), "held%d", i);
        if (shmlock_slot_acquire(z, KEY(key), 9, 1, 0, &held[i])
            != SHMLOCK_OK)
        {
            held[i].owner = 0;
        }
    }
    if (held[59].owner != 0
        && shmlock_slot_mark(z, &held[59], &mk, &m) == SHMLOCK_OK
        && shmlock_slot_swap(z, &m, OWN(8), 0, 0, 1, 0, &u) == SHMLOCK_OK)
    {
        held[59] = u;
    }
    for (i = 0; i < 60; i++) {
        if (held[i].owner != 0) {
            shmlock_slot_release(z, &held[i]);
        }
    }
}

static void
crash_child_ops(shmlock_zone_t *z)
{
    char             big[300];
    double           d = 1;
    int              forcible;
    shmlock_value_t  one = num_value(1), two = num_value(2);

    memset(big, 'c', sizeof(big));
    store(z, SHMLOCK_OP_SET, "victim", str_value(big, sizeof(big), 0), 0);
    store(z, SHMLOCK_OP_ADD, "lock", one, 0);
    store(z, SHMLOCK_OP_SET, "victim", num_value(5), 0);
    shmlock_dict_incr(z, KEY("counter"), &d, 1, 0, 0, &forcible);
    shmlock_dict_cas(z, KEY("lock"), &one, &two, 0, &forcible);
    shmlock_dict_cad(z, KEY("lock"), &two);
    shmlock_dict_expire(z, KEY("victim"), 10);
    store(z, SHMLOCK_OP_SET, "victim", nil_value(), 0);
    CHECK_RC(shmlock_dict_flush_all(z), SHMLOCK_OK);
    flush_expired(z, 0);
    crash_child_slots(z);
}

static void
test_crash_in_update(void)
{
    shmlock_zone_t  *z = open_zone("crash", 64 * 1024);
    char             key[32], val[80];
    int              n, status, i;
    pid_t            pid;

    /* fill most of the zone so the child's stores must evict */
    memset(val, 'f', sizeof(val));
    for (i = 0; shmlock_dict_free_space(z) > 4096; i++) {
        snprintf(key, sizeof(key), "fill%d", i);
        CHECK_RC(store(z, SHMLOCK_OP_SET, key, str_value(val, sizeof(val), 0),
                       0), SHMLOCK_OK);
    }

    for (n = 1; ; n++) {
        pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            shmlock_test_crash_at(n);
            crash_child_ops(z);
            shmlock_test_crash_at(0);
            _exit(0);
        }
        status = reap(pid);
        CHECK(status == 0 || status == 128 + SIGKILL);

        /* the next operation takes the dead child's mutex and rolls back */
        CHECK_RC(set_str(z, SHMLOCK_OP_SET, "after", "ok"), SHMLOCK_OK);
        verify(z);
        if (status == 0) {
            break;
        }
        CHECK(n < 10000);
    }
    CHECK(n > 10);
    close_zone(z);
    CHECK_RC(shmlock_zone_destroy(dir, KEY("crash")), SHMLOCK_OK);
}

/* A process that dies holding the zone mutex does not wedge the others. */
static void
test_dead_mutex_holder(size_t size)
{
    shmlock_zone_t  *z = open_zone("dead", size);
    pid_t            pid;
    int              sync[2], i;
    char             c, key[16];

    CHECK(pipe(sync) == 0);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        shmlock_test_mutex_lock(z);
        CHECK(write(sync[1], "x", 1) == 1);
        kill(getpid(), SIGKILL);
        _exit(1);
    }
    CHECK(read(sync[0], &c, 1) == 1);
    CHECK(reap(pid) == 128 + SIGKILL);
    close(sync[0]);
    close(sync[1]);

    /* every shard's mutex was held: keys of all of them work again */
    for (i = 0; i < 64; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        CHECK_RC(set_str(z, SHMLOCK_OP_SET, key, "v"), SHMLOCK_OK);
        expect_str(z, key, KEY("v"));
    }
    verify(z);

    close_zone(z);
    CHECK_RC(shmlock_zone_destroy(dir, KEY("dead")), SHMLOCK_OK);
}

#define NPROC   4
#define NITER   2000

/*
 * NPROC processes race to create the same new zone, then each runs NITER
 * incr and NITER add-locked read-modify-write updates: both counters must
 * end exact.
 */
static int
hammer_child(int id, int start_fd)
{
    shmlock_zone_t  *z = NULL;
    shmlock_value_t  one = num_value(1);
    char             key[32], go;
    double           d, n;
    int              i, forcible, rc;

    if (read(start_fd, &go, 1) != 1) {
        return 2;
    }
    rc = shmlock_zone_open(dir, KEY("race"), 128 * 1024, 0, &z);
    if (rc != SHMLOCK_OK) {
        fprintf(stderr, "child %d: open: %s\n", id, shmlock_strerror(rc));
        return 3;
    }
    snprintf(key, sizeof(key), "child%d", id);
    store(z, SHMLOCK_OP_SET, key, num_value(id), 0);

    for (i = 0; i < NITER; i++) {
        d = 1;
        if (shmlock_dict_incr(z, KEY("incr"), &d, 1, 0, 0, &forcible)
            != SHMLOCK_OK)
        {
            return 4;
        }
        while (store(z, SHMLOCK_OP_ADD, "lock", one, 0) != SHMLOCK_OK) {
            sched_yield();    /* held: let the holder run (2 cores, 4 of us) */
        }
        n = read_num(z, "plain");
        if (store(z, SHMLOCK_OP_SET, "plain", num_value(n + 1), 0)
            != SHMLOCK_OK
            || shmlock_dict_cad(z, KEY("lock"), &one) != SHMLOCK_OK)
        {
            return 5;
        }
    }
    shmlock_zone_close(z);
    return 0;
}

static void
test_concurrency(void)
{
    shmlock_zone_t  *z;
    pid_t            pids[NPROC];
    int              start[2], i;
    char             key[32];

    CHECK(pipe(start) == 0);
    for (i = 0; i < NPROC; i++) {
        pids[i] = fork();
        CHECK(pids[i] >= 0);
        if (pids[i] == 0) {
            close(start[1]);
            _exit(hammer_child(i, start[0]));
        }
    }
    close(start[0]);

    /* one byte per child: they all open the new zone at once */
    for (i = 0; i < NPROC; i++) {
        CHECK(write(start[1], "g", 1) == 1);
    }
    close(start[1]);
    for (i = 0; i < NPROC; i++) {
        CHECK(reap(pids[i]) == 0);
    }

    z = open_zone("race", 128 * 1024);
    for (i = 0; i < NPROC; i++) {
        snprintf(key, sizeof(key), "child%d", i);
        CHECK(expect_num(z, key) == i);
    }
    CHECK(expect_num(z, "incr") == NPROC * NITER);
    CHECK(expect_num(z, "plain") == NPROC * NITER);
    expect_absent(z, "lock");
    verify(z);
    close_zone(z);
    CHECK_RC(shmlock_zone_destroy(dir, KEY("race")), SHMLOCK_OK);
}

int
main(int argc, char **argv)
{
    shmlock_zone_t  *z;
    const char      *tmp = getenv("TMPDIR");
    const char      *env = getenv("SHMLOCK_CORRUPT_ROUNDS");
    const char      *slot_env = getenv("SHMLOCK_SLOT_ROUNDS");
    int              own_dir = argc < 2, i, rounds;
    int              slot_rounds = slot_env ? atoi(slot_env) : 5000;
    size_t           sizes[2] = { 1 << 20, 8 << 20 };

    if (own_dir) {
        snprintf(dir, sizeof(dir), "%s/shmlock-ctest.XXXXXX",
                 tmp && tmp[0] ? tmp : "/tmp");
        CHECK(mkdtemp(dir) != NULL);
    } else {
        snprintf(dir, sizeof(dir), "%s", argv[1]);
    }

    test_names();
    test_open2();
    test_hand_over();
    test_zone_files();
    test_zone_made_again();
    test_foreign_files();

    /* the dictionary walk, on a zone of one shard and on one of eight */
    for (i = 0; i < 2; i++) {
        z = open_zone("dict", sizes[i]);
        test_strings_and_types(z);
        test_add_replace_delete(z);
        test_incr(z);
        test_lists(z);
        test_expiry(z);
        test_cas_cad(z);
        test_lock_calls(z);
        test_slot_calls(z);
        test_key_kinds(z);
        test_slot_processes(z, slot_rounds);
        test_flush_and_keys(z);
        test_scan(z);
        test_guarded_store(z);
        test_processes(z);
        close_zone(z);
        CHECK_RC(shmlock_zone_destroy(dir, KEY("dict")), SHMLOCK_OK);
        test_dead_mutex_holder(sizes[i]);
    }

    test_shard_counts();
    test_shards();
    test_eviction();
    test_slots_full();
    test_slot_kills();
    test_crash_in_update();
    test_concurrency();

    rounds = env ? atoi(env) : CORRUPT_ROUNDS;
    test_corruption(64 << 10, 1, rounds);
    test_corruption(512 << 10, 4, rounds);

    if (own_dir) {
        CHECK(rmdir(dir) == 0);
    }
    printf("shmlock_test: all checks passed\n");
    return 0;
}
