#!/usr/bin/env bash
# Runs the busted specs (spec/*_spec.lua, settings in .busted) under LuaJIT,
# from the root of the checkout.  Debian's /usr/bin/busted starts with
# `#!/usr/bin/env lua` (lua5.x), so it is run by luajit explicitly;
# --ignore-lua keeps it from re-executing itself per the `lua` setting in
# .busted (which is there for people who type a bare `busted`).
#
# Extra arguments go to busted, e.g. scripts/busted.sh spec/01-zone_spec.lua
# The environment passes through: SHMLOCK_LIB picks the library to test
# (make test-asan), LD_PRELOAD and the sanitizer options reach the spec
# processes and every process they spawn.  Without SHMLOCK_LIB the specs
# run against the test build, libshmlock-test.so (the crash specs need its
# hooks), which must be there and newer than every source of it (src/lua/,
# the Lua C module, is not: it is built per Lua into build/lua5.X/).

set -euo pipefail

cd "$(dirname "$0")/.."

LUAJIT=${LUAJIT:-luajit}
BUSTED=${BUSTED:-/usr/bin/busted}

# busted itself errors out when there is nothing to run.  On a developer's
# machine that is reported and passes; in CI a suite without specs is a
# broken checkout, not a success.
if [ $# -eq 0 ] && [ -z "$(find spec -name '*_spec.lua' 2>/dev/null | head -n 1)" ]; then
    echo "busted: no *_spec.lua files under spec/: 0 successes, nothing run"
    if [ "${CI:-}" = "true" ]; then
        echo "busted: CI=true and no specs: failing" >&2
        exit 1
    fi
    exit 0
fi

if [ -z "${SHMLOCK_LIB:-}" ]; then
    SHMLOCK_LIB=$PWD/libshmlock-test.so
    if [ ! -f "$SHMLOCK_LIB" ]; then
        echo "busted: $SHMLOCK_LIB is not built: run make" >&2
        exit 1
    fi
    stale=$(find src -path src/lua -prune -o -newer "$SHMLOCK_LIB" -name '*.[ch]' -print | head -n 1)
    if [ -n "$stale" ]; then
        echo "busted: $stale is newer than $SHMLOCK_LIB: run make" >&2
        exit 1
    fi
    export SHMLOCK_LIB
fi

echo "busted under $("$LUAJIT" -v | head -n 1)${SHMLOCK_LIB:+, SHMLOCK_LIB=$SHMLOCK_LIB}"
exec "$LUAJIT" "$BUSTED" --ignore-lua "$@"
