-- instr_ops: the operations whose instructions bench/instructions.lua
-- counts (section 10), with issue 22's targets, and the counts before that
-- issue's work, for bench/report.lua.

local _M = {}

-- { id, what, target, at most, lua = the interpreter (LuaJIT if absent),
--   op = what the child runs (the id if absent) } (no target: counted,
-- not judged).  Every key is a variable, read from a table in the loop,
-- as a handler's is: LuaJIT constant-folds a literal key (issue 33).
-- Issue 33's targets: the reused pair at most 250 under LuaJIT, 1,500
-- under Lua 5.4 and 2,000 under 5.1; get and set at most 1,300 under 5.4;
-- no LuaJIT figure worse than before it (the set of a number: 256).
_M.OPS = {
    { "lock_reused", "`lock`+`unlock`, reused object", 250, 250 },
    { "lock_new", "`new`+`lock`+`unlock`", 300, 350 },
    { "trylock_held", "`trylock` of a held key (fails)" },
    { "set_number", "`set` of a number over a number", 250, 256 },
    { "get_number", "`get` of a number", 200, 240 },
    { "get_number_ttl", "`get` of a number with a ttl", 200, 240 },
    { "cache_hit", "cache `get`, an L1 hit" },
    -- (the fleet tier's at most: 1.3 x cache_hit, checked by spec/36)
    { "cache_hit_fleet", "cache `get`, an L1 hit, with `opts.redis`" },
    { "lock_reused_lua54", "`lock`+`unlock`, reused object, Lua 5.4", 1500,
      1500, lua = "lua5.4", op = "lock_reused" },
    { "lock_new_lua54", "`new`+`lock`+`unlock`, Lua 5.4", lua = "lua5.4",
      op = "lock_new" },
    { "set_number_lua54", "`set` of a number over a number, Lua 5.4", 1300,
      1300, lua = "lua5.4", op = "set_number" },
    { "get_number_lua54", "`get` of a number, Lua 5.4", 1300, 1300,
      lua = "lua5.4", op = "get_number" },
    { "lock_reused_lua51", "`lock`+`unlock`, reused object, Lua 5.1", 2000,
      2000, lua = "lua5.1", op = "lock_reused" },
    { "get_number_lua51", "`get` of a number, Lua 5.1", lua = "lua5.1",
      op = "get_number" },
    -- the reference of both (issue 34: at most 1.3 x this, report.lua)
    { "cache_hit_unchecked", "an L1 hit without coherence (the reference)" },
}

-- callgrind's counts on main at a3ea271, the start of issue 33's work
-- (this file's operations, the key in a variable, the median of 3 seeds;
-- issue 22's "before", at 93188d7 with a literal key, is in
-- bench/README.md)
_M.BEFORE_AT = "a3ea271"
_M.BEFORE = {
    lock_reused = 301, lock_new = 338, set_number = 256, get_number = 209,
    lock_reused_lua54 = 13062, lock_new_lua54 = 22233,
    set_number_lua54 = 6180, get_number_lua54 = 4725,
    lock_reused_lua51 = 18642, get_number_lua51 = 6100,
}

return _M
