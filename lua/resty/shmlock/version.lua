-- resty.shmlock.version: the version of lua-resty-shmlock, in one place.
--
-- Every public module's _VERSION is this string (resty.shmlock,
-- resty.shmlock.shdict, resty.shmlock.semaphore, resty.shmlock.cache,
-- resty.shmlock.redis, resty.shmlock.redis.semaphore,
-- resty.shmlock.testing), and
-- the rockspec's version (lua-resty-shmlock-<version>-<revision>.rockspec)
-- must be the same: spec/40-modules_spec.lua checks both.

return "0.1.0"
