/*
 * lua-resty-shmlock: the public C ABI.
 *
 * Everything the Lua layer (or any C program) calls is declared here and
 * nowhere else.  Functions return an int status (SHMLOCK_OK or one of the
 * codes below, see shmlock_strerror()) and pass results through
 * out-parameters.  No function allocates memory on the hot path, takes more
 * than 8 arguments, or prints anything.
 */

#ifndef SHMLOCK_H
#define SHMLOCK_H

#include <stddef.h>
#include <stdint.h>

#define SHMLOCK_API  __attribute__((visibility("default")))

enum {
    SHMLOCK_OK = 0,
    SHMLOCK_NOT_FOUND,      /* "not found" */
    SHMLOCK_EXISTS,         /* "exists" */
    SHMLOCK_NO_MEMORY,      /* "no memory" */
    SHMLOCK_NOT_A_NUMBER,   /* "not a number" */
    SHMLOCK_CHANGED,        /* "changed" (cas/cad) */
    SHMLOCK_BAD_NAME,       /* "bad zone name" */
    SHMLOCK_BAD_SIZE,       /* "bad size" */
    SHMLOCK_INCOMPATIBLE,   /* "incompatible zone" */
    SHMLOCK_SYSTEM,         /* a system call failed: see shmlock_errno() */
    SHMLOCK_CORRUPT,        /* "corrupt zone": a structure is broken (verify
                               says which); the call did nothing sane */
    SHMLOCK_BUSY,           /* trylock: held by someone else */
    SHMLOCK_AGAIN,          /* output buffer too small: the size needed is
                               returned, call again with a larger buffer */
    SHMLOCK_TIMEOUT,        /* a wait timed out */
    SHMLOCK_VALUE_TOO_LARGE,/* "value too large" */
    SHMLOCK_BAD_KEY,        /* key empty or longer than SHMLOCK_KEY_MAX */
    SHMLOCK_BAD_VALUE,      /* "bad value type" */
    SHMLOCK_BAD_SHARDS,     /* "bad shards" */
    SHMLOCK_DESTROYED,      /* the zone was destroyed (shmlock_zone_destroy
                               by any process): open the name again */
    SHMLOCK_NOT_OWNER,      /* the zone file belongs to another user */
    SHMLOCK_UNSAFE_MODE,    /* the zone file is writable by group/others */
    SHMLOCK_FOREIGN_NS,     /* the zone was made in another pid namespace */
    SHMLOCK_DIR_BUSY,       /* the zone directory stayed locked (flock) by
                               another process: destroy could not finish */
    SHMLOCK_BAD_MODE,       /* shmlock_open_t.mode: not owner read-write,
                               bits beyond 0666, or writable by others */
    SHMLOCK_NOT_A_LIST,     /* "value not a list" (push, pop, llen) */
    SHMLOCK_FOREIGN_TIME,   /* the zone was made in another time namespace:
                               its expiry times are another clock's */
    SHMLOCK_REMOVED,        /* the zone's file was deleted behind our back
                               (rm, systemd's RemoveIPC): the zone is dead
                               as if destroyed; open the name again */
    SHMLOCK_ASK             /* the lock calls (shmlock_lock_*) with
                               SHMLOCK_LOOK_ASK: whether an owner id of this
                               process is gone decides; call again with the
                               answer (shmlock_lock_t.ask) */
};

/* Value types, numbered as Lua's (and ngx.shared.DICT's) type tags. */
enum {
    SHMLOCK_TNIL = 0,
    SHMLOCK_TBOOLEAN = 1,
    SHMLOCK_TNUMBER = 3,
    SHMLOCK_TSTRING = 4,
    SHMLOCK_TLIST = 5       /* a list (get answers the type, no value) */
};

/* Store operations (bit set), as ngx.shared.DICT's. */
enum {
    SHMLOCK_OP_SET = 0,
    SHMLOCK_OP_ADD = 1,
    SHMLOCK_OP_REPLACE = 2,
    SHMLOCK_OP_SAFE = 4
};

/* Limits (enum constants, so that the Lua cdef has them by name). */
enum {
    SHMLOCK_NAME_MAX = 64,        /* bytes of a zone name */
    SHMLOCK_KEEP_TTL = -1,        /* cas: keep the entry's current expiry */
    SHMLOCK_KEY_MAX = 65535,      /* bytes of a key */
    SHMLOCK_MIN_SIZE = 32768,     /* bytes of the smallest zone */
    SHMLOCK_GEN_WORDS = 1024,     /* generation words of a zone */
    SHMLOCK_LAYOUT = 12,          /* the zone layout this build reads and
                                     makes (zone.h) */
    SHMLOCK_WATCH_MS = 100        /* a process looks whether a zone's file
                                     was removed at most this often, at its
                                     next call on the zone (shm_watch.h) */
};

typedef struct shmlock_zone_s  shmlock_zone_t;

/*
 * A value crossing the ABI.  In: type, str/len (strings), num (numbers,
 * booleans as 0/1), flags.  Out (get): type, len, num, flags, stale; string
 * bytes go to the caller's buffer.
 */
typedef struct {
    int           type;
    uint32_t      flags;
    double        num;
    const char   *str;
    size_t        len;
    int           stale;
} shmlock_value_t;


/* ---- zones ---- */

/*
 * Create the zone `name` (size bytes) under `dir` (NULL: $SHMLOCK_DIR, else
 * /dev/shm), or attach to it if it exists (its real size and shards are
 * kept).  With size 0, only attach: SHMLOCK_NOT_FOUND when there is no
 * such zone.  shards: how many shards a new zone is split into (1, 2, 4,
 * 8 or 16, each at least 64 KiB: else SHMLOCK_BAD_SHARDS); 0 = the
 * default: 1 under 2 MiB, then as many as keep each shard 1 MiB or more,
 * up to 16.
 */
SHMLOCK_API int shmlock_zone_open(const char *dir, const char *name,
    size_t name_len, size_t size, unsigned shards, shmlock_zone_t **out);
/*
 * shmlock_zone_open2's options (in) and what it found (out), for zones
 * shared between users on purpose.
 *
 * mode: the permission bits of a new zone file (0 = 0600); it must give
 * its owner read and write, have no bit beyond 0666 and never let others
 * write (SHMLOCK_BAD_MODE).  group: -1, or a gid: a new zone file gets
 * that group (fchown: the caller must be a member, or root), and a zone
 * file of that group is trusted on attach.
 *
 * The trust rule on attach: a zone file is used when it is a regular file,
 * nobody but its owner and group may write it (others-writable:
 * SHMLOCK_UNSAFE_MODE), and both its owner and, if it is group-writable,
 * its group are trusted: the owner is the caller's euid, or the file's
 * group is `group`; a group-writable file needs its group to be `group`
 * (else SHMLOCK_UNSAFE_MODE; a file of another owner, SHMLOCK_NOT_OWNER).
 * An unprivileged owner can only give its file a group it belongs to, so
 * trusting a group trusts its members, the owner among them.
 *
 * Out, on success and on SHMLOCK_NOT_OWNER, SHMLOCK_UNSAFE_MODE and a
 * SHMLOCK_SYSTEM with EACCES (then from stat(2) of the name, when it can):
 * the file's owner, group and permission bits (file_mode 0: unknown); on
 * that EACCES with no file to stat (none could be created, or the name
 * cannot be looked at), the directory's, with S_IFDIR (0040000) set in
 * file_mode;
 * created: 1 if this call made the zone; zone_size: the bytes of the zone
 * attached or created.  On SHMLOCK_INCOMPATIBLE, why: file_layout, the
 * layout of a file that starts as a zone does (SHMLOCK_LAYOUT: this
 * build's; another: a zone of another version; 0: not a zone at all, or
 * not a regular file, or too short to be one).
 *
 * owner_uid: 0, or the user zone files are handed to (an nginx master
 * running as root hands them to its workers' user, as nginx chowns the
 * paths it creates).  Then a new zone file is created owned by owner_uid
 * (group: `group` if set, else owner_gid), a file of the caller's own is
 * handed over on attach (its group too, unless it is `group`), and a file
 * owned by owner_uid is trusted on attach as the caller's own.  Only root
 * may hand files over; 0 (a zeroed struct) hands over nothing.
 */
typedef struct {
    const char   *dir;
    const char   *name;
    size_t        name_len;
    size_t        size;
    unsigned      shards;
    unsigned      mode;
    int64_t       group;
    int           created;
    unsigned      file_mode;
    int64_t       file_uid;
    int64_t       file_gid;
    size_t        zone_size;
    unsigned      file_layout;
    int64_t       owner_uid;
    int64_t       owner_gid;
} shmlock_open_t;

/* shmlock_zone_open with the options above (dir, name, size and shards
 * as there). */
SHMLOCK_API int shmlock_zone_open2(shmlock_open_t *opts, shmlock_zone_t **out);
/* The number of shards of an open zone. */
SHMLOCK_API unsigned shmlock_zone_shards(shmlock_zone_t *zone);
/*
 * A zone handle is reference counted within the process: open gives one
 * reference, retain adds one, close drops one and the last unmaps.  Lua
 * finalizers run in any order at exit, so a lock that releases its key in
 * its finalizer retains the zone while it holds the key.
 */
SHMLOCK_API void shmlock_zone_retain(shmlock_zone_t *zone);
SHMLOCK_API void shmlock_zone_close(shmlock_zone_t *zone);
/*
 * 0 while the zone lives; 1 once it was destroyed (by any process): every
 * call on it then answers SHMLOCK_DESTROYED; 2 once its file was found
 * removed behind our back (SHMLOCK_REMOVED; looked at as every call does,
 * at most every SHMLOCK_WATCH_MS).  Open the name again for the zone that
 * has it now.
 */
SHMLOCK_API int shmlock_zone_dead(shmlock_zone_t *zone);
/*
 * The zone's dead word, for a caller that asks often: nonzero once the
 * zone is destroyed, or its file was found removed, by any process
 * (shmlock_zone_dead's 1 and 2); a load, without shmlock_zone_dead's look
 * at the file when one is due.  Valid while the caller keeps a reference
 * to the zone.
 */
SHMLOCK_API const volatile uint32_t *shmlock_zone_dead_word(
    shmlock_zone_t *zone);
SHMLOCK_API int shmlock_zone_destroy(const char *dir, const char *name,
    size_t name_len);
SHMLOCK_API int shmlock_zone_name_ok(const char *name, size_t len);

/*
 * The word counting how many times this process took over a dead holder's
 * shard mutex and recovered the shard, in any zone, since it started (a
 * forked child inherits the count).  A pointer, so that a caller checking
 * after every call reads it with one load instead of a call.  The core
 * prints nothing: the caller reports it.
 */
SHMLOCK_API const volatile uint32_t *shmlock_recoveries(void);

SHMLOCK_API const char *shmlock_strerror(int rc);
/*
 * The errno behind SHMLOCK_SYSTEM: what this thread's last
 * shmlock_zone_open or shmlock_zone_destroy met when it returned
 * SHMLOCK_SYSTEM, else 0 (each of the two sets it, success included).  No
 * other call returns SHMLOCK_SYSTEM, and none touches it.
 */
SHMLOCK_API int shmlock_errno(void);


/* ---- dictionary (ngx.shared.DICT semantics; times in milliseconds) ---- */

SHMLOCK_API int shmlock_dict_store(shmlock_zone_t *zone, int op,
    const char *key, size_t key_len, const shmlock_value_t *val,
    int64_t exptime_ms, int *forcible);

/*
 * The zone clock (CLOCK_MONOTONIC, ms) is read where a call needs it: to
 * compare with an expiry or compute one, and (a coarse reading) to gate
 * the look at the zone's file (SHMLOCK_WATCH_MS).  The _at variants take
 * the caller's reading, now_ms (0: read it here, as the plain calls do),
 * and then read no clock: inside nginx, its cached ngx_current_msec is
 * that clock, as ngx.shared.DICT compares with nginx's cached time.  A
 * reading stale by d ms serves a value up to d ms past its expiry, sets
 * expiries d ms short, and looks at the file up to d ms late; nginx
 * updates it at every turn of its event loop (every timer_resolution
 * with that directive), so d is the time the worker has run since.
 */
SHMLOCK_API int shmlock_dict_store_at(shmlock_zone_t *zone, int op,
    const char *key, size_t key_len, const shmlock_value_t *val,
    int64_t exptime_ms, int64_t now_ms, int *forcible);

/*
 * shmlock_dict_store on a condition: generation word `word` (see below,
 * modulo SHMLOCK_GEN_WORDS) holds `value` in the bits of `mask`.  It is
 * read under the key's shard mutex, in the critical section of the store:
 * a change whose writer bumps the word before it writes the key (and so
 * must wait for that mutex) either came first, and the store does not
 * happen (SHMLOCK_CHANGED, nothing written), or comes after the store and
 * overwrites it.  The cache's loads store so, so that a load never
 * overwrites a set, delete or purge that began while it ran.
 */
typedef struct {
    uint32_t  word;
    uint32_t  mask;
    uint32_t  value;
} shmlock_gen_guard_t;

SHMLOCK_API int shmlock_dict_store_guarded(shmlock_zone_t *zone, int op,
    const char *key, size_t key_len, const shmlock_value_t *val,
    int64_t exptime_ms, const shmlock_gen_guard_t *guard, int *forcible);

/* On SHMLOCK_AGAIN, out->len holds the string length needed.  A list
 * answers out->type SHMLOCK_TLIST (out->len: its length), no value. */
SHMLOCK_API int shmlock_dict_get(shmlock_zone_t *zone, const char *key,
    size_t key_len, int get_stale, shmlock_value_t *out, char *buf,
    size_t buf_size);
/* shmlock_dict_get with the caller's clock reading (see _store_at). */
SHMLOCK_API int shmlock_dict_get_at(shmlock_zone_t *zone, const char *key,
    size_t key_len, int get_stale, shmlock_value_t *out, char *buf,
    size_t buf_size, int64_t now_ms);

SHMLOCK_API int shmlock_dict_incr(shmlock_zone_t *zone, const char *key,
    size_t key_len, double *value, int has_init, double init,
    int64_t init_ttl_ms, int *forcible);

SHMLOCK_API int shmlock_dict_ttl(shmlock_zone_t *zone, const char *key,
    size_t key_len, int64_t *ttl_ms);
SHMLOCK_API int shmlock_dict_expire(shmlock_zone_t *zone, const char *key,
    size_t key_len, int64_t exptime_ms);

/* exptime_ms SHMLOCK_KEEP_TTL keeps the entry's expiry as it is. */
SHMLOCK_API int shmlock_dict_cas(shmlock_zone_t *zone, const char *key,
    size_t key_len, const shmlock_value_t *old, const shmlock_value_t *val,
    int64_t exptime_ms, int *forcible);
SHMLOCK_API int shmlock_dict_cad(shmlock_zone_t *zone, const char *key,
    size_t key_len, const shmlock_value_t *old);

SHMLOCK_API int shmlock_dict_flush_all(shmlock_zone_t *zone);
/* max_count 0 = all; *freed gets the number freed */
SHMLOCK_API int shmlock_dict_flush_expired(shmlock_zone_t *zone,
    int max_count, int *freed);

/*
 * Live keys, at most max_count (0 = all), written to buf as a sequence of
 * (uint32_t length, bytes).  *count gets the number of keys, *used the bytes
 * written; SHMLOCK_AGAIN with *used = bytes needed when buf is too small.
 */
SHMLOCK_API int shmlock_dict_get_keys(shmlock_zone_t *zone, int max_count,
    char *buf, size_t buf_size, int *count, size_t *used);

/*
 * One step of a walk over the live keys (dict:scan): from cursor (0
 * starts), whole hash buckets of one shard under its mutex, until count
 * keys or count buckets are behind (count < 1: 1), keys written to buf as
 * by get_keys (*keys of them, *used bytes).  *next: the cursor of the next
 * step, 0 when the walk is done (a cursor beyond the zone ends it too).
 * A key live for the whole walk comes in exactly one step, whatever else
 * changes meanwhile.  A step moves the cursor one bucket on at least (and
 * count buckets unless it returned count keys or more, or its shard
 * ended), so a walk ends after shards x buckets steps at most, however
 * the keys change.  SHMLOCK_AGAIN: the next bucket's keys need *used bytes, more
 * than buf_size; nothing was returned (*next = cursor).
 */
SHMLOCK_API int shmlock_dict_scan(shmlock_zone_t *zone, uint64_t cursor,
    int count, char *buf, size_t buf_size, uint64_t *next, int *keys,
    size_t *used);

SHMLOCK_API size_t shmlock_dict_capacity(shmlock_zone_t *zone);
SHMLOCK_API size_t shmlock_dict_free_space(shmlock_zone_t *zone);

/*
 * Lists, as ngx.shared.DICT's lpush/rpush/lpop/rpop/llen.  A list is an
 * entry of type SHMLOCK_TLIST; its elements are numbers or strings
 * (else SHMLOCK_BAD_VALUE).  A push onto an absent or expired key makes a
 * new list that never expires; onto a live list it keeps the list's
 * expiry; onto another live value SHMLOCK_NOT_A_LIST.  A push may free
 * expired entries for room but never evicts a live one (SHMLOCK_NO_MEMORY,
 * as ngx.shared.DICT).  *len gets the list's new length.  A pop of an
 * absent or expired key answers SHMLOCK_OK with out->type SHMLOCK_TNIL; a
 * pop of the last element removes the key; on SHMLOCK_AGAIN (a string
 * longer than buf_size, out->len holds its length) nothing was popped.
 * llen: 0 for an absent or expired key.  Lists take the zone's memory
 * like other values, are evicted like set() values, and are replaced by
 * set/replace/incr like any value.
 */
enum {
    SHMLOCK_LEFT = 0,
    SHMLOCK_RIGHT = 1
};

SHMLOCK_API int shmlock_dict_push(shmlock_zone_t *zone, int side,
    const char *key, size_t key_len, const shmlock_value_t *val,
    uint32_t *len);
SHMLOCK_API int shmlock_dict_pop(shmlock_zone_t *zone, int side,
    const char *key, size_t key_len, shmlock_value_t *out, char *buf,
    size_t buf_size);
SHMLOCK_API int shmlock_dict_llen(shmlock_zone_t *zone, const char *key,
    size_t key_len, uint32_t *len);

/* Walks every structure; on SHMLOCK_CORRUPT, msg says what is broken. */
SHMLOCK_API int shmlock_dict_verify(shmlock_zone_t *zone, char *msg,
    size_t msg_size);

/*
 * The figures of one shard (0 .. shards - 1), or of the whole zone summed
 * (shard -1); another shard number: SHMLOCK_BAD_SHARDS.  capacity: bytes
 * (of the zone file; of a shard, its share); free_space: bytes of free
 * chunks; entries: live (unexpired) entries, counted by a walk of each
 * shard under its mutex.  The counters, kept in the zone for its whole
 * life by every process that uses it: evictions (live entries evicted
 * to make room), expired (expired entries freed: by stores, which
 * free some as they go and more when they need room, or by
 * flush_expired), spins and sleeps (mutex acquisitions that waited
 * without sleeping, and that slept on the futex), takeovers (a dead
 * holder's mutex taken over) and recoveries (the shard repaired after a
 * takeover).  slots: the lock slots (shmlock_slot_*); slots_used: those
 * that are a key's (held or free: a free one is reclaimed when room is
 * needed).  Each shard is read under its own mutex.
 */
typedef struct {
    uint64_t  capacity;
    uint64_t  free_space;
    uint64_t  entries;
    uint64_t  evictions;
    uint64_t  expired;
    uint64_t  spins;
    uint64_t  sleeps;
    uint64_t  takeovers;
    uint64_t  recoveries;
    uint64_t  slots;        /* lock slots (shmlock_slot_*): how many */
    uint64_t  slots_used;   /* of them, keys' slots (held or free) */
} shmlock_stats_t;

SHMLOCK_API int shmlock_dict_stats(shmlock_zone_t *zone, int shard,
    shmlock_stats_t *out);


/* ---- time, hashing, key wait words (used by the lock layer) ---- */

SHMLOCK_API int64_t shmlock_now_ms(void);
SHMLOCK_API int64_t shmlock_now_us(void);
SHMLOCK_API uint32_t shmlock_hash(const char *key, size_t len);

/*
 * Per-key wake-up: a fixed array of 32-bit sequence words in the zone,
 * indexed by key hash, each with a count of its sleepers.  A waiter
 * announces itself first (wait_begin: counted as a sleeper, returns the
 * word), re-checks its condition, then wait_end sleeps while the word
 * still holds that value (timeout_us > 0; SHMLOCK_TIMEOUT when it ran out)
 * and uncounts itself; wake_waiters bumps the word and wakes only when a
 * waiter is counted, so an uncontended release costs one load.  Either the
 * releaser sees the waiter counted, or the waiter's re-check sees the
 * release.  Spurious wake-ups are possible.
 *
 * all = 0 wakes one sleeper (a release: one waiter can take the key, the
 * others would only wake to find it taken), or every sleeper when
 * sleepers of another key share the word; all = 1 wakes every sleeper (a
 * handoff to one given waiter).  A waiter woken (wait_end answered
 * SHMLOCK_OK) that leaves without the key, its deadline passed, must call
 * wake_waiters(all = 0) to pass the wake-up on; shmlock_slot_release
 * wakes one.
 */
SHMLOCK_API uint32_t shmlock_wait_begin(shmlock_zone_t *zone, uint32_t hash);
SHMLOCK_API int shmlock_wait_end(shmlock_zone_t *zone, uint32_t hash,
    uint32_t seq, int64_t timeout_us);
SHMLOCK_API void shmlock_wake_waiters(shmlock_zone_t *zone, uint32_t hash,
    int all);
/*
 * The waiters counted on the key's word at this moment, for inspection
 * only (keys whose hashes share a word count together; a waiter is counted
 * from wait_begin to the end of wait_end).  Changes nothing.
 */
SHMLOCK_API uint32_t shmlock_wait_count(shmlock_zone_t *zone, uint32_t hash);


/* ---- lock slots (issue 22): a lock pair in one 16-byte CAS each way ---- */

/*
 * Each shard of a zone (layout 11) ends with a floor of 64-byte lock
 * slots, memory for locks only (src/slot.h draws it): one slot per key,
 * made at the key's first acquire and kept after its release, so that a
 * pair is one compare-and-swap each way, without the shard's mutex;
 * keys past the floor's room spill into the shard's memory (two 64-byte
 * chunks each, taken as a `set` takes room, evicting `set` entries) and
 * cost the shard's mutex.  Slots are not dictionary entries: the
 * dictionary calls do not see them, nor they the dictionary's keys.  The
 * lock (shmlock_lock_*, below) keeps its locks here.
 *
 * A slot's state is two words, changed together by one 16-byte CAS:
 * owner (0: free; else the holder: its pid << 32 | an id of the caller's
 * that tells its waiters (lock objects, coroutines) apart, e.g. a
 * counter) and stamp:
 *
 *   stamp >> SHMLOCK_SLOT_EXPIRY_SHIFT   the expiry, zone clock ms
 *                                        (2^40 - 1: never)
 *   stamp & SHMLOCK_SLOT_MARKED          a waiter is queued: the fast
 *                                        paths leave the slot to the
 *                                        caller's slow path
 *   stamp & 0xfffff                      a serial, moved on by every
 *                                        change but a mark's
 *
 * Beside the state, each slot keeps a hint of its holder's process: pid
 * | (low 32 bits of its start time) << 32, as shmlock_proc_start counts
 * it, so that a waiter tells a dead holder from its pid reused
 * (shmlock_slot_alive).  A ticket's process is the hint when it names
 * the owner's pid, else 0 (unknown: only the pid can be asked).
 *
 * A ticket names one state of one slot: an acquire hands it out, a
 * release gives it back.  A ticket releases or extends only while the
 * slot is still in exactly its state, so a holder whose lock expired and
 * was taken touches nothing.  Without a 16-byte CAS on this CPU each
 * call takes the shard's mutex (same answers).  A crash at any
 * instruction leaves every slot in its old or its new state.
 *
 * exptime_ms: the lock's time to live (ms, > 0), or 0 for never; now_ms:
 * the caller's reading of the zone clock (CLOCK_MONOTONIC, ms), or 0 to
 * read it here: inside nginx, its cached ngx_current_msec is that clock
 * and saves a clock read per lock (a stale reading shortens the lock's
 * life by the staleness, as ngx.shared.DICT's cached time does).
 */
typedef struct {
    uint32_t  slot;     /* the slot: its index in its shard (src/ticket.h) */
    uint32_t  hash;     /* shmlock_hash of the key */
    uint64_t  owner;
    uint64_t  stamp;
    uint64_t  process;  /* the holder's process, 0: not known */
} shmlock_ticket_t;

enum {
    SHMLOCK_SLOT_EXPIRY_SHIFT = 24,
    SHMLOCK_SLOT_MARKED = 4194304     /* 1 << 22 */
};

/*
 * Takes key for the owner (this process's pid << 32 | id; id: the
 * caller's, a 32-bit number that tells its waiters apart, so that a Lua
 * number carries it): SHMLOCK_OK (t: our ticket); SHMLOCK_EXISTS: held
 * (live) by another, or marked (t: the slot's state, to look at or swap
 * from); SHMLOCK_NO_MEMORY: no slot left in the key's shard (free slots
 * are reclaimed first: every one is held); SHMLOCK_BAD_KEY;
 * SHMLOCK_BAD_VALUE: exptime_ms < 0.  An expired lock is taken at once.
 */
SHMLOCK_API int shmlock_slot_acquire(shmlock_zone_t *zone, const char *key,
    size_t key_len, uint32_t id, int64_t exptime_ms, int64_t now_ms,
    shmlock_ticket_t *t);
/*
 * shmlock_slot_acquire, t's slot tried first: t (in) is a ticket this
 * zone handed out before, e.g. for the key a lock object took last (any
 * bytes are safe: a slot that does not hold key as a lock's key, free,
 * is passed over, a holder group's record or head among them whatever
 * its bytes; keys of up to 32 bytes); the same answers, t (out) as
 * there.  A hint that names key's slot saves hashing the key and finding
 * its shard.
 */
SHMLOCK_API int shmlock_slot_acquire_hint(shmlock_zone_t *zone,
    const char *key, size_t key_len, uint32_t id, int64_t exptime_ms,
    int64_t now_ms, shmlock_ticket_t *t);
/*
 * Releases the lock of ticket t and wakes one sleeper of its key
 * (shmlock_wake_waiters): SHMLOCK_OK; SHMLOCK_CHANGED: still t's but
 * marked (the caller hands it over, or clears the mark, by swap);
 * SHMLOCK_NOT_FOUND: not t's any more (expired and taken, released).
 * A lock that expired but is still in t's state (nobody took it) is
 * released: SHMLOCK_OK.  Refused (SHMLOCK_DESTROYED, SHMLOCK_REMOVED)
 * once the zone is destroyed or its file removed (looked at as by every
 * call, at most every SHMLOCK_WATCH_MS): the holder learns that its lock
 * is no longer the name's.
 */
SHMLOCK_API int shmlock_slot_release(shmlock_zone_t *zone,
    const shmlock_ticket_t *t);
/* A new expiry for t's lock (t follows): SHMLOCK_OK, SHMLOCK_CHANGED
 * (marked), SHMLOCK_NOT_FOUND (not t's). */
SHMLOCK_API int shmlock_slot_extend(shmlock_zone_t *zone,
    shmlock_ticket_t *t, int64_t exptime_ms, int64_t now_ms);
/* The state of key's slot: SHMLOCK_OK (t; owner 0: free),
 * SHMLOCK_NOT_FOUND (no slot: free).  Writes nothing. */
SHMLOCK_API int shmlock_slot_look(shmlock_zone_t *zone, const char *key,
    size_t key_len, shmlock_ticket_t *t);
/*
 * From the state `seen` (a look's or a refused acquire's ticket) to
 * owner of process (0: the caller's; a handoff names the waiter's),
 * marked (SHMLOCK_SLOT_MARKED or 0) and exptime_ms (SHMLOCK_KEEP_TTL:
 * seen's expiry): a dead holder's takeover, a handoff, a mark set or
 * cleared (the mark alone changing keeps the holder's ticket valid).
 * SHMLOCK_OK (t: the new state); SHMLOCK_CHANGED: the slot is no longer
 * in state seen; SHMLOCK_BAD_VALUE: owner 0 (a swap never frees: release
 * does), or a new owner not of process's pid.  The same owner as seen's
 * keeps the slot's process hint (t: seen's), but for a hint not of the
 * owner's pid (a handoff whose releaser died between its swap and its
 * hint write): a process of the owner's pid (the owner's own) writes
 * it, t names it.  Wakes nobody: a handoff wakes the key's sleepers
 * itself (shmlock_wake_waiters, all = 1).
 */
SHMLOCK_API int shmlock_slot_swap(shmlock_zone_t *zone,
    const shmlock_ticket_t *seen, uint64_t owner, uint64_t process,
    unsigned marked, int64_t exptime_ms, int64_t now_ms,
    shmlock_ticket_t *t);
/*
 * Marks: the waiter a marked lock goes to.  A slot has a mark record of
 * its own, written under the shard's mutex (a crash halfway through drops
 * the mark: recovery clears the flag), then SHMLOCK_SLOT_MARKED is set in
 * its state; the holder's release then answers SHMLOCK_CHANGED, and the
 * holder reads the mark and hands over (swap to the waiter's owner,
 * process and exptime) or drops it (swap, marked 0).
 */
typedef struct {
    uint64_t  owner;        /* the waiter: pid << 32 | id */
    uint64_t  process;      /* its process (0 on mark: the caller's) */
    int64_t   exptime_ms;   /* the time to live it asks for on handoff */
    int64_t   since_ms;     /* when it began to wait (zone clock) */
    int64_t   until_ms;     /* its deadline (zone clock) */
} shmlock_mark_t;

/* Marks the lock in state `seen` (held; marked already: the mark is
 * replaced) with m: SHMLOCK_OK (t: the marked state); SHMLOCK_CHANGED
 * (the slot left state seen); SHMLOCK_BAD_VALUE (m->owner not of
 * m->process's pid, seen not held). */
SHMLOCK_API int shmlock_slot_mark(shmlock_zone_t *zone,
    const shmlock_ticket_t *seen, const shmlock_mark_t *m,
    shmlock_ticket_t *t);
/* The mark of the marked state t (a look's): SHMLOCK_OK (m);
 * SHMLOCK_CHANGED: the slot is in another state now (look again).  A
 * mark being rewritten is waited for (the shard's mutex, which its
 * writer holds); a writer that died there is taken over, its half-written
 * mark dropped (SHMLOCK_CHANGED).  Writes nothing else. */
SHMLOCK_API int shmlock_slot_read_mark(shmlock_zone_t *zone,
    const shmlock_ticket_t *t, shmlock_mark_t *m);
/*
 * A walk over the zone's slots (a lock listing): from cursor (0 starts),
 * at most max of the slots that are a key's (held or free: owner 0), in
 * slot order, into out; *count of them; *next: the cursor to go on from,
 * 0 when the walk is done.  Each slot is read whole, without the mutex
 * (a slot that changes while read is left out of this step).  kind: the
 * slot's, kept in the slot beside the key (never read from the key's
 * bytes: a lock's key may have any bytes):
 *
 *   SHMLOCK_SLOT_LOCK       a lock's key (shmlock_slot_*): its holder,
 *                           or a head counting the key's shared holds
 *                           (shmlock_group_*, below)
 *   SHMLOCK_SLOT_SHARED     one shared hold of the key (a record)
 *   SHMLOCK_SLOT_PERMIT     one semaphore permit of the key (a record)
 *   SHMLOCK_SLOT_SEMAPHORE  a semaphore's head, counting its permits
 *
 * key and key_len are the user's key (a record's index is in index): a
 * key of up to 32 bytes (28 for a record) is given whole; of a longer
 * one, its first 24 bytes (20 for a record; shown < key_len): slots keep
 * no more of it.  max < 1: SHMLOCK_BAD_VALUE.  Writes nothing.
 */
enum {
    SHMLOCK_SLOT_LOCK = 0,
    SHMLOCK_SLOT_SHARED = 1,
    SHMLOCK_SLOT_PERMIT = 2,
    SHMLOCK_SLOT_SEMAPHORE = 3
};

typedef struct {
    shmlock_ticket_t  ticket;
    uint32_t          key_len;      /* the user's key's length */
    uint32_t          shown;        /* bytes of the key in key[] */
    char              key[32];
    uint32_t          kind;         /* SHMLOCK_SLOT_* */
    uint32_t          index;        /* a record's index in its group */
} shmlock_slot_info_t;

SHMLOCK_API int shmlock_slot_scan(shmlock_zone_t *zone, uint64_t cursor,
    shmlock_slot_info_t *out, int max, int *count, uint64_t *next);
/* 1 if t's holder may be alive: its process runs (by pid and start time
 * when t->process is known, else by pid alone); 0 if it is gone, or t
 * names no holder.  Reads /proc: for a waiter's occasional check. */
SHMLOCK_API int shmlock_slot_alive(const shmlock_ticket_t *t);



/* ---- holder groups (issue 25): semaphores and shared holds ---- */

/*
 * A group is the holders of one key counted together, in the lock slots
 * (src/group.h draws it): a semaphore's permits (kind SHMLOCK_SEMAPHORE:
 * at most `permits` holders, the caller's limit, checked when it
 * acquires; every holder counts against every caller's limit) or the
 * shared (reader) holds of a lock key (kind SHMLOCK_SHARED: no limit
 * but the slots of the key's shard, none while the key's exclusive slot
 * lock, shmlock_slot_*, is held).
 * A semaphore's key and a lock's key of the same name are distinct; a
 * key's shared holds and its exclusive lock are one slot, so that each
 * finds the other held.
 *
 * Each holder has a record slot of its own: its owner (pid << 32 | id),
 * its process and its lease (exptime_ms; 0: never); the group's head slot
 * counts them.  Every call takes the key's shard mutex and reads the
 * clock itself (leases are judged on one fresh clock).  A crash at any
 * instruction leaves the count exact or one too high, never too low (a
 * full group is counted again before an acquirer is refused).
 *
 * Records and heads appear in shmlock_slot_scan, each with its kind: a
 * head's owner has its top 16 bits set (a pid field of at least
 * 0xffff0000: no process's) and counts its holders in bits 24-47; a
 * semaphore's head is a slot of its own (SHMLOCK_SLOT_SEMAPHORE), a
 * shared holds' head is the key's own lock slot (SHMLOCK_SLOT_LOCK).
 * shmlock_slot_alive answers 1 for a head (its holders are judged by
 * shmlock_group_reclaim).  A group holds as many holders as its key's
 * shard has slots for (a record each, and the head): past that an
 * acquire answers SHMLOCK_NO_MEMORY at once.
 *
 * An exclusive locker waiting for shared holders marks the key's slot
 * (shmlock_slot_mark): new shared holds are then refused until the mark's
 * deadline (until_ms) passes, and the last shared holder's release hands
 * the key to the marked waiter (swapped to its owner, process and
 * exptime_ms, every sleeper of the key woken), as a handoff.  A
 * semaphore's waiter whose turn is next marks its head (the state a
 * refused acquire answers) the same way: nobody else is let in until the
 * mark's deadline, and the marked waiter's acquire drops the mark (the
 * head stays through the last release while the mark lasts).
 */
enum {
    SHMLOCK_SEMAPHORE = 0,
    SHMLOCK_SHARED = 1,
    SHMLOCK_GROUP_MAX = 16777215  /* the most a head counts (2^24 - 1):
                                     more than a shard has slots for */
};

/*
 * A hold of key for this process (owner: its pid << 32 | id), if fewer
 * than permits (1 .. SHMLOCK_GROUP_MAX; shared: 0, no limit) are held:
 * SHMLOCK_OK (t: the holder's ticket; t->hash: shmlock_hash(key));
 * SHMLOCK_EXISTS: full, or (shared) the key held exclusive or marked for
 * an exclusive waiter (t: the state of the key's head, to look at: its
 * owner is the exclusive holder, or a head counting its holders);
 * SHMLOCK_NO_MEMORY: no slot left in the key's shard for the hold (free
 * slots are reclaimed first), answered at once; SHMLOCK_BAD_KEY
 * (empty, or longer than SHMLOCK_KEY_MAX - 4); SHMLOCK_BAD_VALUE
 * (permits, exptime_ms < 0, kind).  Expired holders do not count (a full
 * group is swept first); dead ones are dropped by shmlock_group_reclaim.
 */
SHMLOCK_API int shmlock_group_acquire(shmlock_zone_t *zone, int kind,
    const char *key, size_t key_len, uint32_t id, uint32_t permits,
    int64_t exptime_ms, shmlock_ticket_t *t);
/*
 * Gives back t's hold and wakes a sleeper of the key (every sleeper when
 * the last shared holder handed the key to a marked waiter): SHMLOCK_OK;
 * SHMLOCK_NOT_FOUND: the lease had run out (the hold is gone, whether
 * someone took its place or not).  Refused once the zone is known dead
 * (as shmlock_slot_release).
 */
SHMLOCK_API int shmlock_group_release(shmlock_zone_t *zone, int kind,
    const char *key, size_t key_len, const shmlock_ticket_t *t);
/* A new lease for t's hold (t follows): SHMLOCK_OK; SHMLOCK_NOT_FOUND
 * (its lease had run out, or it was released); SHMLOCK_BAD_VALUE. */
SHMLOCK_API int shmlock_group_extend(shmlock_zone_t *zone, int kind,
    const char *key, size_t key_len, shmlock_ticket_t *t,
    int64_t exptime_ms);
/*
 * Drops the key's holders whose lease ran out or whose process is gone
 * (shmlock_slot_alive; for shared holds also a dead exclusive holder of
 * the key, unless marked), wakes the key's sleepers if it dropped any;
 * *count: the holders left.  Reads /proc once per holder, without the
 * mutex: a waiter's check, and an exact count.
 */
SHMLOCK_API int shmlock_group_reclaim(shmlock_zone_t *zone, int kind,
    const char *key, size_t key_len, uint32_t *count);
/*
 * The key's holders with a lease running (alive or not), at most max of
 * them into out (tickets: owner, process, stamp); *count: how many there
 * are (SHMLOCK_AGAIN when more than max).  Writes nothing.
 */
SHMLOCK_API int shmlock_group_holders(shmlock_zone_t *zone, int kind,
    const char *key, size_t key_len, shmlock_ticket_t *out, int max,
    int *count);
/*
 * The state of the key's head (t: to look at, and to read its mark with
 * shmlock_slot_read_mark: a semaphore's queued waiter whose turn is next,
 * a shared holds' exclusive waiter): SHMLOCK_OK; SHMLOCK_NOT_FOUND (no
 * head: no holder, no mark).  Writes nothing.
 */
SHMLOCK_API int shmlock_group_head(shmlock_zone_t *zone, int kind,
    const char *key, size_t key_len, shmlock_ticket_t *t);

/* ---- the lock (issue 33): each step of its algorithm in one call ---- */

/*
 * A zone's exclusive lock, over its lock slots: the acquire with its
 * ticket as a hint, owner ids drawn here, a look at a busy key (a dead
 * holder's lock taken over, an expired one taken, a handoff to us found,
 * a starving waiter's mark placed), the release that hands a marked lock
 * to its waiter, the extend that keeps a mark, the withdrawal of a mark,
 * and outside nginx the whole wait, on the key's wait word (a futex).
 * docs/design.md ("The lock") and docs/lock.md ("Fairness") tell the
 * algorithm; the caller decides only how to wait inside nginx.
 *
 * A shmlock_lock_t is the caller's record of one lock object's
 * acquisition: zeroed, then zone set (a reference the caller keeps
 * open).  tk is the lock's ticket while held, else the last one (a hint
 * for the next acquire: any value is safe); after SHMLOCK_EXISTS, the
 * holder's state.  Not shared between threads.
 *
 * Owners of this process that nginx aborted (inside nginx, a queued
 * waiter's Lua thread ended without running any of its code) are known
 * to the caller only: with SHMLOCK_LOOK_ASK, a call whose decision
 * depends on whether an owner id of this process is gone answers
 * SHMLOCK_ASK, having changed nothing, with the id in `ask`; the caller
 * puts it in gone[] or alive[] and calls again.  Without the flag every
 * owner of this process counts as alive.
 *
 * `dead`: set (to the dead holder's pid) when a call took a dead holder's
 * lock over or handed it to the next waiter, for the caller to report
 * (dead_to: 1 handed on, 2 an aborted waiter's); the caller clears it.
 */
typedef struct {
    shmlock_zone_t   *zone;
    shmlock_ticket_t  tk;
    uint32_t          id;       /* the acquisition's owner id */
    int32_t           pid;      /* the process that acquired */
    int32_t           held;     /* 1 from the call that made the lock ours
                                   to the one that found it gone */
    uint32_t          marked;   /* the last look: our mark is on the key */
    uint32_t          waited;   /* a wait placed our mark (withdrawn at its
                                   end unless the lock reached us) */
    uint32_t          ask;      /* SHMLOCK_ASK: the owner id asked about */
    uint32_t          gone[2];  /* owner ids of this process known gone */
    uint32_t          alive[2]; /* and known alive (0: none) */
    uint32_t          dead;     /* a dead holder's pid (see above) */
    uint32_t          dead_to;
    /* the library's own, zeroed with the rest: the slot tk.slot names, as
     * the acquire and release last found it in the zone object of serial
     * slot_zone (their fast paths skip the ticket's decoding then) */
    uint64_t          slot_zone;
    void             *slot_at;
    uint32_t          slot_tk;
    uint32_t          slot_pad;
} shmlock_lock_t;

/* a look's how (shmlock_lock_look); flags: */
enum {
    SHMLOCK_LOOK_CHECK = 1,     /* ask whether the holder's process lives
                                   (a /proc read) */
    SHMLOCK_LOOK_ASK = 2,       /* owners of this process may be gone */
    SHMLOCK_LOOK_HERE = 4,      /* a wait: stop (SHMLOCK_BUSY) while the
                                   key is held by this process */
    SHMLOCK_LOOK_SHARED = 8     /* a shared waiter's (shmlock_lock_here) */
};

typedef struct {
    int64_t   exptime_ms;   /* the lock's time to live (0: never) */
    int64_t   since_ms;     /* a starving waiter: when its wait began (zone
                               clock), 0: not starving (no mark) */
    int64_t   till_ms;      /* its deadline: its mark is stale from then */
    int64_t   ask_ms;       /* the time to live its mark asks for, if not
                               exptime_ms (a queued waiter inside nginx:
                               it accepts a handoff by an extend) */
    int32_t   flags;        /* SHMLOCK_LOOK_* */
    int32_t   pad;
} shmlock_look_t;

/* a wait outside nginx (shmlock_lock_wait) */
typedef struct {
    int64_t   exptime_ms;
    int64_t   start_us;     /* when the wait began (shmlock_now_us) */
    int64_t   timeout_us;   /* it ends at start_us + timeout_us */
    double    step;         /* resty.lock's steps, in seconds: the longest */
    double    ratio;        /* sleep between looks no release cut short */
    double    max_step;
    int32_t   flags;        /* SHMLOCK_LOOK_ASK, SHMLOCK_LOOK_HERE */
    int32_t   pad;
} shmlock_wait_t;

/*
 * One try for key, for a fresh owner id (l->id, l->pid set): l->tk's slot
 * first (the hint), then the key's own.  SHMLOCK_OK: held, l->tk ours;
 * SHMLOCK_EXISTS: held by someone (l->tk: its state); SHMLOCK_NO_MEMORY,
 * SHMLOCK_BAD_KEY, SHMLOCK_BAD_VALUE (exptime_ms < 0), a zone's refusal.
 */
SHMLOCK_API int shmlock_lock_acquire(shmlock_lock_t *l, const char *key,
    size_t key_len, int64_t exptime_ms, int64_t now_ms);
/* Another try of a waiter, its owner id kept (a lock handed to it is not
 * taken here: a look finds it): as shmlock_lock_acquire. */
SHMLOCK_API int shmlock_lock_retry(shmlock_lock_t *l, const char *key,
    size_t key_len, int64_t exptime_ms, int64_t now_ms);
/*
 * One look at key, after an acquire (the same id) found it held:
 * SHMLOCK_OK: ours now (a free key, an expired one, a dead holder's, a
 * handoff to us); SHMLOCK_EXISTS: busy (l->marked: our mark is on it);
 * SHMLOCK_ASK; a zone's error.
 */
SHMLOCK_API int shmlock_lock_look(shmlock_lock_t *l, const char *key,
    size_t key_len, const shmlock_look_t *how);
/*
 * Releases the lock of l->tk, handing it to a marked waiter still waiting
 * (or dropping a stale mark): SHMLOCK_OK; SHMLOCK_NOT_FOUND: it had
 * expired and was taken (or reclaimed): nothing touched; SHMLOCK_ASK
 * (flags SHMLOCK_LOOK_ASK); a zone's error (the lock may still be ours).
 */
SHMLOCK_API int shmlock_lock_release(shmlock_lock_t *l, int flags);
/*
 * A new time to live for the lock of l->tk (0: never), keeping a waiter's
 * mark on it; l->tk follows.  SHMLOCK_OK; SHMLOCK_NOT_FOUND: no longer
 * ours; a zone's error.
 */
SHMLOCK_API int shmlock_lock_extend(shmlock_lock_t *l, int64_t exptime_ms);
/*
 * A starving waiter giving up: its mark removed, unless the lock reached
 * it.  SHMLOCK_OK: the lock is ours after all (l->tk); SHMLOCK_EXISTS:
 * not ours (a mark it failed to remove is stale from its deadline on).
 */
SHMLOCK_API int shmlock_lock_withdraw(shmlock_lock_t *l, const char *key,
    size_t key_len);
/*
 * Whether key is ours (l's owner, unexpired): 1 or 0.  _here: whether a
 * wait for key could only end by a release of this very process (which
 * cannot come while it blocks): key held exclusive by it, or a shared
 * hold of it among the key's readers (for a shared waiter, shared 1:
 * only while a writer's mark keeps new readers out): 1 or 0.
 */
SHMLOCK_API int shmlock_lock_holds(shmlock_lock_t *l, const char *key,
    size_t key_len);
SHMLOCK_API int shmlock_lock_here(shmlock_zone_t *zone, const char *key,
    size_t key_len, int shared);
/*
 * The wait outside nginx (or where an nginx phase cannot yield), after an
 * acquire found key held: asleep on the key's wait word (woken by the
 * release, or by the handoff on a word of its own once marked), a look
 * after each wake-up and at least every step (resty.lock's steps, at most
 * 0.1 s: a holder that dies is noticed), starving after 2 ms: marked, so
 * that the next release hands the lock over.  SHMLOCK_OK: ours (*elapsed_us
 * since w->start_us); SHMLOCK_TIMEOUT; SHMLOCK_BUSY (SHMLOCK_LOOK_HERE:
 * held by this process); SHMLOCK_ASK (call again with the answer and the
 * same w); a zone's error.
 */
SHMLOCK_API int shmlock_lock_wait(shmlock_lock_t *l, const char *key,
    size_t key_len, const shmlock_wait_t *w, int64_t *elapsed_us);
/* Whether the lock of l->tk is still ours, unexpired, by its ticket (no
 * key: a floor slot read at once, a spilled one under its mutex): 1 or 0. */
SHMLOCK_API int shmlock_lock_owned(shmlock_lock_t *l);

/* ---- shared holds (issue 25, 33): a lock's readers, one call a step ---- */

/*
 * A lock's shared (reader) holds, on a lock object's record as the
 * exclusive lock's (shmlock_lock_t: its zone, the hold's ticket, its
 * owner id, held), the key given with each call: the holder groups of
 * kind SHMLOCK_SHARED (shmlock_group_*), whose head is the key's own
 * lock slot, so that an exclusive holder keeps readers out and readers
 * keep it out; a writer's mark keeps new readers out, the last reader
 * out hands the key to the writer.  src/shmlock_shared.c tells the rest.
 *
 * _acquire: a fresh owner id, one try (SHMLOCK_OK held, l->tk the
 * record's ticket; SHMLOCK_EXISTS: held exclusive, or marked for a
 * writer; SHMLOCK_NO_MEMORY; a zone's error); _retry: the same id;
 * _look: with SHMLOCK_LOOK_CHECK, dead holders dropped and a dead
 * writer's mark cleared first, then a try (SHMLOCK_ASK as for the lock);
 * _release: the hold given back (SHMLOCK_NOT_FOUND: its lease had run
 * out); _extend; _owned: 1 while it is one of key's holders; _wait: the
 * wait outside nginx, as shmlock_lock_wait's (SHMLOCK_LOOK_HERE: stop,
 * SHMLOCK_BUSY, while a hold of this process keeps it waiting).
 */
SHMLOCK_API int shmlock_shared_acquire(shmlock_lock_t *l, const char *key,
    size_t key_len, int64_t exptime_ms);
SHMLOCK_API int shmlock_shared_retry(shmlock_lock_t *l, const char *key,
    size_t key_len, int64_t exptime_ms);
SHMLOCK_API int shmlock_shared_look(shmlock_lock_t *l, const char *key,
    size_t key_len, int64_t exptime_ms, int flags);
SHMLOCK_API int shmlock_shared_release(shmlock_lock_t *l, const char *key,
    size_t key_len);
SHMLOCK_API int shmlock_shared_extend(shmlock_lock_t *l, const char *key,
    size_t key_len, int64_t exptime_ms);
SHMLOCK_API int shmlock_shared_owned(shmlock_lock_t *l, const char *key,
    size_t key_len);
SHMLOCK_API int shmlock_shared_wait(shmlock_lock_t *l, const char *key,
    size_t key_len, const shmlock_wait_t *w, int64_t *elapsed_us);


/* ---- the semaphore's steps outside nginx (issue 25, 33) ---- */

/*
 * A permit of key, on a lock object's record (shmlock_lock_t), the key
 * given with each call: _acquire, a fresh owner id and one try (a record
 * of the key's group of kind SHMLOCK_SEMAPHORE while fewer than permits
 * are held: SHMLOCK_OK, l->tk the permit's ticket; SHMLOCK_EXISTS: full;
 * SHMLOCK_NO_MEMORY); _retry, the same id; _wait, the wait outside nginx
 * (woken by a release, dead holders dropped after every sleep no release
 * cut short; SHMLOCK_LOOK_HERE: stop, SHMLOCK_BUSY, when the key's permits
 * are all held by this process); _here: 1 if they are.  The permit is
 * given back by shmlock_group_release.  src/shmlock_sem.c.
 */
SHMLOCK_API int shmlock_sem_acquire(shmlock_lock_t *l, const char *key,
    size_t key_len, uint32_t permits, int64_t exptime_ms);
SHMLOCK_API int shmlock_sem_retry(shmlock_lock_t *l, const char *key,
    size_t key_len, uint32_t permits, int64_t exptime_ms);
SHMLOCK_API int shmlock_sem_wait(shmlock_lock_t *l, const char *key,
    size_t key_len, uint32_t permits, const shmlock_wait_t *w,
    int64_t *elapsed_us);
SHMLOCK_API int shmlock_sem_here(shmlock_zone_t *zone, const char *key,
    size_t key_len, uint32_t permits);


/* ---- generation words: change counters for the zone's users ---- */

/*
 * A zone has SHMLOCK_GEN_WORDS 32-bit counters that no dictionary call
 * touches; a user indexes them by key hash.  shmlock_zone_gens returns
 * their address in this process's mapping (valid while the zone handle is
 * open), so that a reader can check a word with one load and no call:
 * the cache's per-process copies do, comparing the word with the value
 * they saw when they were filled.  shmlock_zone_gen_add adds delta to
 * word i (modulo SHMLOCK_GEN_WORDS) atomically and returns the new value,
 * sequentially consistent: a writer bumps a word after its change; delta
 * 0 is a plain atomic read (sequentially consistent, no write), ordered
 * before the caller's later reads of the zone.
 */
SHMLOCK_API volatile uint32_t *shmlock_zone_gens(shmlock_zone_t *zone);
SHMLOCK_API uint32_t shmlock_zone_gen_add(shmlock_zone_t *zone, uint32_t i,
    uint32_t delta);


/* ---- processes ---- */

SHMLOCK_API int shmlock_self_pid(void);
/*
 * Where this process's pid is kept once the library has computed it, for
 * a caller that asks at every call (one load): 0 in a child, however it
 * was made (fork, a raw fork or clone system call, _Fork), until it calls
 * shmlock_self_pid() or takes a token.  A value kept with the pid it was
 * made in is the child's only if the word holds that pid.
 */
SHMLOCK_API const volatile int32_t *shmlock_self_pid_word(void);
/* Start time of a process in clock ticks since boot (0 if unknown). */
SHMLOCK_API uint64_t shmlock_proc_start(int pid);
/*
 * 1 if the process pid is running and (if start != 0) started at start; a
 * process of another user counts as running.
 */
SHMLOCK_API int shmlock_proc_alive(int pid, uint64_t start);
/*
 * Lock owner tokens are "<pid>:<start>:<serial>" (start:
 * shmlock_proc_start of the pid; serial: 16 hex digits).  A caller takes
 * serials in blocks of 4096: this writes the 13 high hex digits of a fresh
 * block at dst (the caller counts the 3 low ones) and returns the pid of
 * this process.  Blocks come from one counter per process, shared by all
 * its Lua VMs and threads, so that a token is never handed out twice on
 * the host.
 */
SHMLOCK_API int shmlock_token_block(char *dst);
/*
 * Owner ids for the lock slots (shmlock_slot_acquire's id): the first of
 * SHMLOCK_OWNER_IDS fresh ids, never 0, from the counter of the token
 * serials (shared by every Lua VM and thread of the process, starting
 * at random): the low 32 bits of a block's serials.  An owner is the
 * pid with an id, so ids only tell apart the waiters of one process;
 * they repeat after 2^32 of them.
 */
enum { SHMLOCK_OWNER_IDS = 4096 };
SHMLOCK_API uint32_t shmlock_owner_ids(void);

/*
 * ngx.shared.DICT (lua-nginx-module's lua_shared_dict zones), from inside
 * nginx only: a compare-and-delete and a compare-and-replace of a number,
 * under the dict's own mutex (shmlock_ngx_dict.c: how it reads nginx's private structures, and
 * why it never trusts them unchecked).  zone: the dict's ngx_shm_zone_t,
 * as ngx_http_lua_ffi_shdict_udata_to_zone returns it.
 *
 * shmlock_ngx_dict_probe: whether this process may use delete_if on the
 * zone.  The caller has just added key through lua-nginx-module (a number
 * value, user flags flags, an expiry expires_in_ms from now, exactly 8
 * bytes of value): 0 if the entry is found where and as expected; -1 and
 * *why (a static string) otherwise.  The caller then deletes the entry
 * with delete_if (it must answer 1) and looks it up through
 * lua-nginx-module (it must be gone) before any other use.
 *
 * shmlock_ngx_dict_delete_if: deletes key if it holds the number value
 * with user flags flags and has not expired (by nginx's cached clock, as
 * lua-nginx-module's get): 1 deleted, 0 not (absent, expired, another
 * value or type), -1 the zone did not pass the checks (nothing changed).
 */
SHMLOCK_API int shmlock_ngx_dict_probe(void *zone, const char *key,
    size_t key_len, double value, int flags, int64_t expires_in_ms,
    const char **why);
SHMLOCK_API int shmlock_ngx_dict_delete_if(void *zone, const char *key,
    size_t key_len, double value, int flags);
/*
 * shmlock_ngx_dict_replace_if: if key holds the number value with user
 * flags flags, unexpired, gives it the number new_value, the flags
 * new_flags and an expiry exptime_ms from now (0 or less: never), in
 * place, as lua-nginx-module's replace: 1 replaced, 0 not, -1 the zone
 * did not pass the checks (nothing changed).
 */
SHMLOCK_API int shmlock_ngx_dict_replace_if(void *zone, const char *key,
    size_t key_len, double value, int flags, double new_value,
    int new_flags, int64_t exptime_ms);


#endif /* SHMLOCK_H */
