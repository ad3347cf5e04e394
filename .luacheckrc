-- luacheck configuration (`make lint`, part of `make test`): the library,
-- the specs, the benchmarks, the demo and the test harness, under LuaJIT's globals.
std = "luajit"
codes = true

-- The library finds nginx's `ngx` through rawget(_G, "ngx") only, so it
-- runs the same in plain LuaJIT; it may set no global and read no
-- global beyond LuaJIT's.
files["lua"] = {}

-- busted's globals (describe, it, assert, ...); the specs run a stand-in
-- `ngx` in some places and read the real one in code they send into nginx.
files["spec"] = { std = "+busted", read_globals = { "ngx" } }

-- Code run inside nginx by the benchmarks (which set ngx.status).
files["bench/nginx"] = {
    std = "ngx_lua",
    globals = { ngx = { fields = { "status" }, other_fields = true } },
}
files["bench"] = { read_globals = { "ngx" } }
-- wrk's scripts define wrk's callbacks as globals.
files["bench/nginx/wrk_report.lua"] = { std = "luajit", globals = { "done" } }
