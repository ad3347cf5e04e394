# lua-resty-shmlock
CC      ?= cc
CFLAGS  ?= -O2 -g
# Warnings are errors in development and CI; a user's build (the rockspec)
# passes WERROR= so that a newer compiler's new warning does not stop it.
WERROR  ?= -Werror
WARN     = -Wall -Wextra $(WERROR) -std=gnu11
PIC      = -fPIC -fvisibility=hidden
HDRS     = $(wildcard src/*.h)

# Two builds of the library.  libshmlock.so is what users load.
# libshmlock-test.so (-DSHMLOCK_TESTING) adds the test hooks of shmlock.h
# (shmlock_test_*) and the crash countdown in every structural write
# (src/crash.c); the specs, the C driver and the sanitizer runs use it.
TESTING   = -DSHMLOCK_TESTING
TEST_ONLY = $(wildcard src/crash.c src/shmlock_test_hooks.c)
SRCS      = $(filter-out $(TEST_ONLY),$(wildcard src/*.c))
TEST_SRCS = $(SRCS) $(TEST_ONLY)
LIB       = libshmlock.so
OBJS      = $(SRCS:src/%.c=build/%.o)
TEST_LIB  = libshmlock-test.so
TEST_OBJS = $(TEST_SRCS:src/%.c=build-test/%.o)

# The C API binding (src/lua/): the core as a Lua C module,
# resty.shmlock.core, for interpreters without LuaJIT's FFI.  One module per
# Lua ABI whose headers are installed (liblua5.X-dev), each linking the core's
# objects in: build/lua5.X/resty/shmlock/core.so, which
# resty.shmlock.internal.core finds from a checkout by _VERSION.  luarocks
# builds one, for its Lua: LUA_INCDIR set, build/rock<LUA_INCDIR>/resty/shmlock/core.so.
LUA_VERSIONS ?= $(patsubst /usr/include/lua%/lua.h,%,\
                  $(wildcard /usr/include/lua5.[1234]/lua.h))
LUA_INCDIR   ?=
BINDING_SRCS  = $(wildcard src/lua/*.c)
BINDING_HDRS  = $(wildcard src/lua/*.h)
LUA_MODS      = $(LUA_VERSIONS:%=build/lua%/resty/shmlock/core.so)
# (one directory per LUA_INCDIR: `luarocks make` for another Lua in the same
# checkout must not find the last Lua's module up to date)
ROCK_DIR      = build/rock$(subst /,_,$(subst _,__,$(LUA_INCDIR)))
ROCK_MOD      = $(if $(LUA_INCDIR),$(ROCK_DIR)/resty/shmlock/core.so)

# The C test driver (ctest/), linked against the test build.
CTEST_SRC = ctest/shmlock_test.c
CTEST_HDRS = ctest/check.h
CTEST     = build/shmlock_test
# The lock slots on their own (src/slot.c: each shard's, the spilled ones
# through a provider the test gives), built from their sources with the
# crash countdown.
SLOT_TEST_SRCS = ctest/slot_test.c src/slot.c src/crash.c
SLOT_TEST      = build/slot_test

# The holder groups on their own (src/group.c: semaphores, shared holds).
GROUP_TEST_SRCS = ctest/group_test.c src/group.c src/slot.c src/crash.c
GROUP_TEST      = build/group_test

# AddressSanitizer + UndefinedBehaviorSanitizer variant of the library and
# the driver.  Any report is fatal (-fno-sanitize-recover), so a test fails.
SAN         = -fsanitize=address,undefined -fno-sanitize-recover=all \
              -fno-omit-frame-pointer
ASAN_CFLAGS = -O1 -g $(SAN)
ASAN_LIB    = libshmlock-asan.so
ASAN_OBJS   = $(TEST_SRCS:src/%.c=build-asan/%.o)
ASAN_CTEST  = build-asan/shmlock_test
ASAN_SLOT_TEST = build-asan/slot_test
ASAN_GROUP_TEST = build-asan/group_test
# luajit is not built with ASan, so the runtime must be preloaded for it to
# come first in the process (see CONTRIBUTING.md, "Testing").
ASAN_RT     = $(shell $(CC) -print-file-name=libasan.so)
ASAN_ENV    = ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 \
              UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

PROVE    = prove
VALGRIND = valgrind -q --error-exitcode=1 --leak-check=full \
           --errors-for-leak-kinds=definite,indirect \
           --show-leak-kinds=definite,indirect

# Where `make install` puts things; luarocks passes its own INST_* dirs.
PREFIX      ?= /usr/local
INST_LIBDIR ?= $(PREFIX)/lib/lua/5.1
INST_LUADIR ?= $(PREFIX)/share/lua/5.1
INST_BINDIR ?= $(PREFIX)/bin
# the manual page, shmlock(1): where man finds it under PREFIX (luarocks
# passes its rock's directory: see the rockspec)
INST_MANDIR ?= $(PREFIX)/share/man/man1

.PHONY: all lib rock clean install deps demo demo-fleet bench soak test test-lua \
        test-nginx test-asan test-nginx-asan test-valgrind test-slots test-groups test-every-lua test-install \
        test-luarocks test-busted check-layers lint

# `make` builds both libraries: the specs run against the test build, and
# must not find one older than the sources.  `make lib`: the library alone.
all: $(LIB) $(TEST_LIB) $(LUA_MODS) $(ROCK_MOD)

lib: $(LIB)

# What luarocks builds (the rockspec's build_target): what `make install`
# installs, the library and the C module for luarocks' Lua, not the test
# build nor every Lua's module (a third of the time, in each of make
# test's luarocks builds).
rock: $(LIB) $(ROCK_MOD)

# the C module for Lua 5.X, against /usr/include/lua5.X
build/lua%/resty/shmlock/core.so: $(BINDING_SRCS) $(BINDING_HDRS) $(HDRS) $(OBJS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(WARN) $(PIC) -I/usr/include/lua$* -shared -o $@ \
	    $(BINDING_SRCS) $(OBJS) $(LDFLAGS) -lm

# the C module for Lua 5.X under ASan and UBSan (make test-every-lua)
build-asan/lua%/resty/shmlock/core.so: $(BINDING_SRCS) $(BINDING_HDRS) $(HDRS) $(ASAN_OBJS)
	@mkdir -p $(@D)
	$(CC) $(ASAN_CFLAGS) $(TESTING) $(WARN) $(PIC) -I/usr/include/lua$* -shared \
	    -o $@ $(BINDING_SRCS) $(ASAN_OBJS) $(LDFLAGS) -lm

# the C module for the Lua luarocks builds for (its LUA_INCDIR)
$(ROCK_DIR)/resty/shmlock/core.so: $(BINDING_SRCS) $(BINDING_HDRS) $(HDRS) $(OBJS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(WARN) $(PIC) -I'$(LUA_INCDIR)' -shared -o $@ \
	    $(BINDING_SRCS) $(OBJS) $(LDFLAGS) -lm

build/%.o: src/%.c $(HDRS)
	@mkdir -p build
	$(CC) $(CFLAGS) $(WARN) $(PIC) -c $< -o $@

$(LIB): $(OBJS)
	$(CC) $(CFLAGS) -shared -o $@ $(OBJS) $(LDFLAGS)

build-test/%.o: src/%.c $(HDRS)
	@mkdir -p build-test
	$(CC) $(CFLAGS) $(TESTING) $(WARN) $(PIC) -c $< -o $@

$(TEST_LIB): $(TEST_OBJS)
	$(CC) $(CFLAGS) -shared -o $@ $(TEST_OBJS) $(LDFLAGS)

build-asan/%.o: src/%.c $(HDRS)
	@mkdir -p build-asan
	$(CC) $(ASAN_CFLAGS) $(TESTING) $(WARN) $(PIC) -c $< -o $@

$(ASAN_LIB): $(ASAN_OBJS)
	$(CC) $(ASAN_CFLAGS) -shared -o $@ $(ASAN_OBJS) $(LDFLAGS)

# $ORIGIN/..: the driver finds the library at the root of the checkout.
$(CTEST): $(CTEST_SRC) $(CTEST_HDRS) $(HDRS) $(TEST_LIB)
	@mkdir -p build
	$(CC) $(CFLAGS) $(TESTING) $(WARN) -Isrc $(CTEST_SRC) -o $@ \
	    -L. -l:$(TEST_LIB) -Wl,-rpath,'$$ORIGIN/..'

$(ASAN_CTEST): $(CTEST_SRC) $(CTEST_HDRS) $(HDRS) $(ASAN_LIB)
	@mkdir -p build-asan
	$(CC) $(ASAN_CFLAGS) $(TESTING) $(WARN) -Isrc $(CTEST_SRC) -o $@ \
	    -L. -l:$(ASAN_LIB) -Wl,-rpath,'$$ORIGIN/..'

$(SLOT_TEST): $(SLOT_TEST_SRCS) $(CTEST_HDRS) $(HDRS)
	@mkdir -p build
	$(CC) $(CFLAGS) $(TESTING) $(WARN) -Isrc $(SLOT_TEST_SRCS) -o $@

$(GROUP_TEST): $(GROUP_TEST_SRCS) $(CTEST_HDRS) $(HDRS)
	@mkdir -p build
	$(CC) $(CFLAGS) $(TESTING) $(WARN) -Isrc $(GROUP_TEST_SRCS) -o $@

$(ASAN_GROUP_TEST): $(GROUP_TEST_SRCS) $(CTEST_HDRS) $(HDRS)
	@mkdir -p build-asan
	$(CC) $(ASAN_CFLAGS) $(TESTING) $(WARN) -Isrc $(GROUP_TEST_SRCS) -o $@

$(ASAN_SLOT_TEST): $(SLOT_TEST_SRCS) $(CTEST_HDRS) $(HDRS)
	@mkdir -p build-asan
	$(CC) $(ASAN_CFLAGS) $(TESTING) $(WARN) -Isrc $(SLOT_TEST_SRCS) -o $@

deps:
	scripts/deps.sh </dev/null

# Benchmarks against resty.lock/ngx.shared.DICT, flock, Redis and C floors,
# and instructions per operation counted by callgrind (bench/run.sh writes
# bench/RESULTS.md and the plots); BENCH_QUICK=1 for a short run.
bench:
	scripts/deps.sh </dev/null
	$(MAKE) --no-print-directory all
	bench/run.sh

# The main job: a cache stampede on an embedded zone, with and without the
# lock, and on a stale key with stale_ttl (demo/stampede.lua; writes its
# data and plot to demo/out/, which git ignores: the checkout stays clean).
demo:
	scripts/deps.sh </dev/null
	$(MAKE) --no-print-directory all
	luajit demo/stampede.lua

# The fleet case: 3 hosts (zone directories) x 8 processes, one cold key,
# the host tier, the lock-factory recipe, the fleet tier (opts.redis) and
# Redis stopped under a stale key, with a redis-server of its own on
# loopback (demo/fleet.lua; writes under $TMPDIR, nothing in the checkout).
demo-fleet:
	scripts/deps.sh </dev/null
	$(MAKE) --no-print-directory all
	luajit demo/fleet.lua

# The soak test (spec/soak.lua): the kill storm mixed with pid reuse after
# a kill inside the mutex, a zone filling up under marked locks, destroy
# and recreate while others lock, several VMs per process, for
# SOAK_SECONDS (300); TAP, through prove.  `make test` runs it for 20 s
# (spec/14-soak_spec.lua, in test-lua and test-asan).
SOAK_SECONDS ?= 300

soak:
	scripts/deps.sh </dev/null
	$(MAKE) --no-print-directory all
	SHMLOCK_LIB='$(CURDIR)/$(TEST_LIB)' SOAK_SECONDS=$(SOAK_SECONDS) \
	    $(PROVE) -v -e luajit spec/soak.lua

# The whole suite, from a fresh Debian machine: packages, the layering of
# src/, build, specs (the short soak among them), nginx tests, then the
# same specs and the C driver under the sanitizers and the C driver under
# valgrind.
test:
	scripts/deps.sh </dev/null
	$(MAKE) --no-print-directory check-layers
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory all
	$(MAKE) --no-print-directory test-lua
	$(MAKE) --no-print-directory test-nginx
	$(MAKE) --no-print-directory test-install
	$(MAKE) --no-print-directory test-luarocks
	$(MAKE) --no-print-directory test-busted
	$(MAKE) --no-print-directory test-asan
	$(MAKE) --no-print-directory test-nginx-asan
	$(MAKE) --no-print-directory test-every-lua EVERY_LUA_SPEC=
	$(MAKE) --no-print-directory test-valgrind

# Every Lua (docs/every-lua.md): spec/60 (run by test-lua too) starts
# lua5.1 ... lua5.4 and LuaJIT on the modules and on one zone at once; then
# every dictionary method, the cache, the lock, the semaphore, shared
# holds, number keys and the bad-argument sweep (every public function and
# every function of the C module, wrong arguments) under each PUC Lua
# through its C module, under valgrind and with the module built with ASan
# and UBSan (the C API binding's memory: any report fails).
ASAN_LUA_MODS = $(LUA_VERSIONS:%=build-asan/lua%/resty/shmlock/core.so)
EVERY_LUA_SCRIPTS = spec/every_lua/dict.lua spec/every_lua/cache.lua \
                    spec/every_lua/lock.lua spec/every_lua/semaphore.lua \
                    spec/every_lua/lock_shared.lua spec/every_lua/keys.lua \
                    spec/every_lua/sweep.lua
# the sweep under valgrind makes one in VALGRIND_SAMPLE of its calls (a
# different one per function; ASan's pass makes them all)
VALGRIND_SAMPLE ?= 3
# the call the bad-argument sweep (sweep.lua) was making when it died
PROGRESS = sh -c 'tail -n 1 "$$0/progress" 2>/dev/null | sed "s/^/last call: /"'
# The ASan pass runs each script with an eager collector (a collection step
# at nearly every allocation; children inherit it), so a check made after
# its object became unreachable fails here, not once in a while: nothing
# may assume when an unreachable object is collected.  The valgrind pass
# keeps the default collector.  (5.4 reads LUA_INIT_5_4 first; its
# setpause/setstepmul are the incremental mode's parameters.)
EAGER_GC = LUA_INIT='collectgarbage("setpause", 5) collectgarbage("setstepmul", 1000)' \
           LUA_INIT_5_4='collectgarbage("incremental", 5, 1000)'
# (that the ASan build is the module loaded, not the checkout's)
ASAN_PROBE = require "resty.shmlock.internal.core"; assert(io.open("/proc/self/maps"):read("*a"):find("build%-asan/lua"), "the ASan module did not load")

# (EVERY_LUA_SPEC= leaves spec/60 out: `make test` ran it in test-lua)
EVERY_LUA_SPEC ?= spec/60-every_lua_spec.lua

test-every-lua: all $(ASAN_LUA_MODS)
	$(if $(EVERY_LUA_SPEC),scripts/busted.sh $(EVERY_LUA_SPEC))
	@set -e; for v in $(LUA_VERSIONS); do \
	    LUA_PATH='$(CURDIR)/lua/?.lua;;' LD_PRELOAD='$(ASAN_RT)' \
	        SHMLOCK_CORE='$(CURDIR)/build-asan/lua'$$v/resty/shmlock/core.so \
	        $(ASAN_ENV) lua$$v -e '$(ASAN_PROBE)'; \
	    for s in $(EVERY_LUA_SCRIPTS); do \
	    dir=$$(mktemp -d /tmp/shmlock-everylua.XXXXXX); \
	    echo "valgrind lua$$v $$s"; \
	    LUA_PATH='$(CURDIR)/lua/?.lua;;' SWEEP_SAMPLE=$(VALGRIND_SAMPLE) \
	        $(VALGRIND) lua$$v $$s "$$dir" \
	        || { $(PROGRESS) "$$dir"; rm -rf "$$dir"; exit 1; }; \
	    echo "asan, eager collector: lua$$v $$s"; mkdir "$$dir/asan"; \
	    LUA_PATH='$(CURDIR)/lua/?.lua;;' LD_PRELOAD='$(ASAN_RT)' \
	        SHMLOCK_CORE='$(CURDIR)/build-asan/lua'$$v/resty/shmlock/core.so \
	        $(ASAN_ENV) $(EAGER_GC) lua$$v $$s "$$dir/asan" \
	        || { $(PROGRESS) "$$dir/asan"; rm -rf "$$dir"; exit 1; }; \
	    rm -rf "$$dir"; \
	    done; \
	done

# luacheck (Debian's lua-check) over the Lua code, as .luacheckrc says
# (bin/shmlock named itself: luacheck reads only *.lua in a directory).
LINT_DIRS = lua spec bench demo scripts/lua bin/shmlock

lint:
	luacheck -q $(LINT_DIRS)

# src/README.md lists src/ in layer order: no #include may go up.
check-layers:
	scripts/check-layers.sh

# scripts/busted.sh runs the specs against $(TEST_LIB) unless SHMLOCK_LIB
# says otherwise.
test-lua: $(LIB) $(TEST_LIB)
	scripts/busted.sh

test-nginx: $(LIB) $(TEST_LIB)
	@if [ -n "$$(find t -name '*.t' 2>/dev/null | head -n 1)" ]; then \
	    echo "$(PROVE) -r t/"; $(PROVE) -r t/; \
	else \
	    echo "test-nginx: no .t files under t/, nothing to prove"; \
	fi

# Under ASan the specs run as in test-lua, but for the soak's self-test (it
# checks the soak's checks, not the library) and spec/07's random
# corruptions: 100 per layout, seeds 301-400, none of test-lua's 1-300 (its
# 99 targeted corruptions all run).
test-asan: $(ASAN_LIB) $(ASAN_CTEST) $(ASAN_SLOT_TEST) $(ASAN_GROUP_TEST)
	@rt='$(ASAN_RT)'; case "$$rt" in /*) ;; *) \
	    echo "test-asan: $(CC) does not know libasan.so" >&2; exit 1;; esac
	$(ASAN_ENV) $(ASAN_CTEST)
	$(ASAN_ENV) SLOT_TEST_ROUNDS=20000 $(ASAN_SLOT_TEST)
	$(ASAN_ENV) GROUP_TEST_ROUNDS=2000 $(ASAN_GROUP_TEST)
	LD_PRELOAD='$(ASAN_RT)' $(ASAN_ENV) SHMLOCK_LIB='$(CURDIR)/$(ASAN_LIB)' \
	    SOAK_SELF_TEST=0 SHMLOCK_CORRUPT_SEED=301 SHMLOCK_CORRUPT_CASES=100 \
	    scripts/busted.sh

# The C that runs only inside nginx (src/shmlock_ngx_dict.c: the drop-in's
# compare-and-delete on a lua_shared_dict) under ASan: nginx with the ASan
# runtime preloaded loads the ASan build (SHMLOCK_LIB, passed to the
# workers by t/lib/ShmTest.pm's env line); a report aborts the worker,
# which the tests' error.log check fails on.
NGINX_ASAN_TESTS = t/39-dict-delete-if.t t/40-dict-probe-fails.t \
                   t/04-fallback.t t/19-mlcache.t \
                   t/12-shared-full.t

test-nginx-asan: $(ASAN_LIB)
	LD_PRELOAD='$(ASAN_RT)' $(ASAN_ENV) SHMLOCK_LIB='$(CURDIR)/$(ASAN_LIB)' \
	    $(PROVE) $(NGINX_ASAN_TESTS)

test-valgrind: $(CTEST) $(SLOT_TEST) $(GROUP_TEST)
	$(VALGRIND) $(CTEST)
	SLOT_TEST_ROUNDS=2000 $(VALGRIND) $(SLOT_TEST)
	GROUP_TEST_ROUNDS=500 $(VALGRIND) $(GROUP_TEST)

# The lock slots alone (ctest/slot_test.c); in test-asan and
# test-valgrind with fewer rounds.
test-slots: $(SLOT_TEST)
	$(SLOT_TEST)

# The holder groups alone (ctest/group_test.c); in test-asan and
# test-valgrind with fewer rounds.
test-groups: $(GROUP_TEST)
	$(GROUP_TEST)

# The rockspec installs and loads, and what it installs has no test hooks.
test-install: $(LIB)
	scripts/test-install.sh

# `luarocks make` and `luarocks install` of the rockspec, as a user types
# them, into a scratch tree (scripts/test-luarocks.sh).
test-luarocks:
	scripts/test-luarocks.sh

# A user's spec under busted as installed: from the checkout and after
# `luarocks make`, each twice (scripts/test-busted.sh, docs/testing.md).
test-busted: all
	scripts/test-busted.sh

install: $(LIB) $(ROCK_MOD)
	install -d '$(INST_LIBDIR)'
	install -m 0755 $(LIB) '$(INST_LIBDIR)/$(LIB)'
	if [ -n '$(ROCK_MOD)' ]; then \
	    install -d '$(INST_LIBDIR)/resty/shmlock' && \
	    install -m 0755 '$(ROCK_MOD)' '$(INST_LIBDIR)/resty/shmlock/core.so'; \
	fi
	cd lua && find resty -name '*.lua' | while read -r f; do \
	    install -d "$(INST_LUADIR)/$$(dirname "$$f")" && \
	    install -m 0644 "$$f" "$(INST_LUADIR)/$$f" || exit 1; \
	done
	install -d '$(INST_BINDIR)'
	install -m 0755 bin/shmlock '$(INST_BINDIR)/shmlock'
	install -d '$(INST_MANDIR)'
	install -m 0644 docs/shmlock.1 '$(INST_MANDIR)/shmlock.1'

clean:
	rm -rf build build-test build-asan $(LIB) $(TEST_LIB) $(ASAN_LIB)
