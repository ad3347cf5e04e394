-- resty.shmlock.internal.codes (internal): the C core's numbers that the
-- Lua modules use, each defined once, named as in src/shmlock.h without
-- the SHMLOCK_ prefix.  Modules copy them into locals when they load, so
-- the hot paths compare against constants.  Messages for the status codes
-- come from the core itself (resty.shmlock.errors).

return {
    -- status codes
    OK = 0,
    NOT_FOUND = 1,
    EXISTS = 2,
    CHANGED = 5,
    SYSTEM = 9,
    CORRUPT = 10,
    AGAIN = 12,
    TIMEOUT = 13,

    -- value types (Lua's type tags, as ngx.shared.DICT's)
    TNIL = 0,
    TBOOLEAN = 1,
    TNUMBER = 3,
    TSTRING = 4,

    -- store operations (a bit set)
    OP_SET = 0,
    OP_ADD = 1,
    OP_REPLACE = 2,
    OP_SAFE = 4,

    KEEP_TTL = -1,          -- cas: keep the entry's current expiry
    KEY_MAX = 65535,        -- bytes of a key
}
