rockspec_format = "3.0"
package = "lua-resty-shmlock"
version = "0.1.0-1"

source = {
   url = "git+https://github.com/lua-resty-shmlock/lua-resty-shmlock.git",
   tag = "v0.1.0",
}

description = {
   summary = "Named shared-memory dictionaries and locks for LuaJIT, OpenResty and Lua 5.1-5.4",
   detailed = [[
A shared-memory dictionary with ngx.shared.DICT's methods (plus cas, cad
and verify) that any process of the same user on the host can open by name:
nginx workers, plain LuaJIT scripts, test runners.  A C core (updates that
a crash leaves old or new, lock-free reads, a pid-owned interprocess mutex
that survives dead holders) behind a LuaJIT FFI binding and a Lua C module
for PUC Lua 5.1 to 5.4 (docs/every-lua.md); on top, a drop-in
resty.lock with owner tokens and wake on release, a stampede-proof cache
(resty.shmlock.cache, which needs lua-resty-lrucache) and the same lock on
Redis.  `luarocks make` builds both for whichever Lua luarocks picks.
]],
   homepage = "https://github.com/lua-resty-shmlock/lua-resty-shmlock",
   issues_url = "https://github.com/lua-resty-shmlock/lua-resty-shmlock/issues",
   license = "BSD-2-Clause",
   labels = { "openresty", "luajit", "ffi", "shared-memory", "lock", "cache", "redis" },
}

supported_platforms = { "linux" }

-- Two bindings are built: libshmlock.so (LuaJIT's FFI) and the C module
-- resty.shmlock.core against the headers of luarocks' Lua (LUA_INCDIR), so
-- `luarocks make` works whatever Lua version luarocks picks.
--
-- Not declared, on purpose: lua-resty-lrucache, which only
-- resty.shmlock.cache needs (the dictionary and the locks do not).  LuaRocks
-- has no optional dependencies, and it does not see the copies OpenResty
-- bundles or Debian's lua-resty-lrucache package installs under
-- /usr/share/lua/5.1: declaring it would make every install download a
-- second copy from luarocks.org, and fail where there is no network.  The
-- cache names it in its error when it is missing; the README says how to
-- install it.
dependencies = {
   "lua >= 5.1, < 5.5",
}

-- The Makefile builds libshmlock.so and installs it into the rock's lib dir
-- (on package.cpath), and every module under lua/resty/ into the rock's lua
-- dir (on package.path), so new modules are picked up without editing this
-- file.  WERROR is emptied: -Werror is for development and CI builds, never
-- for a user's build with a compiler newer than ours.
build = {
   type = "make",
   build_target = "rock",
   build_variables = {
      CFLAGS = "$(CFLAGS)",
      WERROR = "",
      LUA_INCDIR = "$(LUA_INCDIR)",
   },
   install_target = "install",
   install_variables = {
      WERROR = "",
      LUA_INCDIR = "$(LUA_INCDIR)",
      INST_PREFIX = "$(PREFIX)",
      INST_BINDIR = "$(BINDIR)",
      INST_LIBDIR = "$(LIBDIR)",
      INST_LUADIR = "$(LUADIR)",
      INST_CONFDIR = "$(CONFDIR)",
      -- shmlock(1) stays in the rock's directory (LuaRocks deploys no
      -- manual pages): man -l "$(luarocks show --rock-dir
      -- lua-resty-shmlock)/share/man/man1/shmlock.1"
      INST_MANDIR = "$(PREFIX)/share/man/man1",
   },
   -- The command, on PATH as `shmlock` (it finds the modules and the
   -- library of its tree next to itself: bin/shmlock).
   install = { bin = { shmlock = "bin/shmlock" } },
}

-- Commands are installed as they are: LuaRocks would otherwise wrap a Lua
-- script to run under the interpreter of the install (lua5.1 or lua5.4: no
-- FFI).  bin/shmlock starts as a shell script that finds LuaJIT (or says
-- what to install) and runs itself with it, whatever Lua the library was
-- installed for.
deploy = {
   wrap_bin_scripts = false,
}
