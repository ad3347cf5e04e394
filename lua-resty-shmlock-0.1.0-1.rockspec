package = "lua-resty-shmlock"
version = "0.1.0-1"

source = {
   url = "git+https://github.com/lua-resty-shmlock/lua-resty-shmlock.git",
   tag = "v0.1.0",
}

description = {
   summary = "Named shared-memory dictionaries and locks for LuaJIT and OpenResty",
   detailed = [[
A shared-memory dictionary with ngx.shared.DICT's methods (plus cas, cad
and verify) that any process of the same user on the host can open by name:
nginx workers, plain LuaJIT scripts, test runners.  A C core (updates that
a crash leaves old or new, lock-free reads, a pid-owned interprocess mutex
that survives dead holders) behind a LuaJIT FFI binding; on top, a drop-in
resty.lock with owner tokens and wake on release, a stampede-proof cache
and the same lock on Redis.
]],
   homepage = "https://github.com/lua-resty-shmlock/lua-resty-shmlock",
   license = "BSD-2-Clause",
}

supported_platforms = { "linux" }

-- LuaJIT only (the binding is FFI): use `luarocks --lua-version=5.1`.
dependencies = {
   "lua >= 5.1, < 5.2",
}

-- The Makefile builds libshmlock.so with the project's flags and installs
-- it into the rock's lib dir (on package.cpath), and every module under
-- lua/resty/ into the rock's lua dir (on package.path), so new modules are
-- picked up without editing this file.
build = {
   type = "make",
   build_target = "all",
   build_variables = {
      CFLAGS = "$(CFLAGS)",
   },
   install_target = "install",
   install_variables = {
      INST_PREFIX = "$(PREFIX)",
      INST_BINDIR = "$(BINDIR)",
      INST_LIBDIR = "$(LIBDIR)",
      INST_LUADIR = "$(LUADIR)",
      INST_CONFDIR = "$(CONFDIR)",
   },
}
