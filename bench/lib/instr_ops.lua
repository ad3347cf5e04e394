-- instr_ops: the operations whose instructions bench/instructions.lua
-- counts (section 10), with issue 22's targets, and the counts before that
-- issue's work, for bench/report.lua.

local _M = {}

-- { id, what, target, at most } (no target: counted, not judged)
_M.OPS = {
    { "lock_reused", "`lock`+`unlock`, reused object", 250, 300 },
    { "lock_new", "`new`+`lock`+`unlock`", 300, 350 },
    { "trylock_held", "`trylock` of a held key (fails)" },
    { "set_number", "`set` of a number over a number", 250, 320 },
    { "get_number", "`get` of a number", 200, 240 },
    { "get_number_ttl", "`get` of a number with a ttl", 200, 240 },
    { "cache_hit", "cache `get`, an L1 hit" },
    -- (the fleet tier's at most: 1.3 x cache_hit, checked by spec/36)
    { "cache_hit_fleet", "cache `get`, an L1 hit, with `opts.redis`" },
}

-- callgrind's counts on main at 93188d7, the start of issue 22's work
-- (bench/instructions.lua with the fixed seed; bench/README.md)
_M.BEFORE_AT = "93188d7"
_M.BEFORE = {
    lock_reused = 1159, lock_new = 1212, trylock_held = 4364,
    set_number = 536, get_number = 274, get_number_ttl = 303,
}

return _M
