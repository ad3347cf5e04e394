/*
 * shm_zone: the file behind a zone.  A zone named N lives in
 * <dir>/shmlock.N (dir: $SHMLOCK_DIR, else /dev/shm, a tmpfs).
 *
 * Creation never exposes a half-built zone: the creator builds it in a
 * hidden temporary file and publishes it with link(2), which fails with
 * EEXIST if another process published first; the loser then attaches to the
 * winner's zone.  Files are created 0600, opened with O_NOFOLLOW, and must
 * be regular files owned by the caller.
 */

#ifndef SHM_ZONE_H
#define SHM_ZONE_H

#include "shmlock.h"
#include "zone.h"

/* shards: 0 = the default for the size; ignored when attaching. */
int shm_zone_open(const char *dir, const char *name, size_t name_len,
    uint64_t size, uint32_t shards, shmlock_zone_t **out, int *err);
/* Drops one reference; the last one unmaps the zone. */
void shm_zone_close(shmlock_zone_t *z);
int shm_zone_destroy(const char *dir, const char *name, size_t name_len,
    int *err);
int shm_zone_name_ok(const char *name, size_t len);

#endif /* SHM_ZONE_H */
