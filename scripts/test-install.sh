#!/usr/bin/env bash
# Checks the rockspec: `luarocks make` into a throw-away tree, then, from a
# directory outside the checkout and with only `luarocks path` to find
# things, requires every installed module and uses a zone through the
# installed libshmlock.so, which must export no test hook (shmlock_test_*:
# those are the test build's, libshmlock-test.so).  Then the installed
# command, `shmlock`, on PATH through `luarocks path --bin`, and also with
# no LUA_PATH at all (it finds its tree next to itself).

set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD
rockspec=$(ls lua-resty-shmlock-*.rockspec | sort -V | tail -n 1)

work=$(mktemp -d "${TMPDIR:-/tmp}/shmlock-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
tree=$work/tree
mkdir -p "$work/elsewhere" "$work/zones"

# LuaJIT is Lua 5.1 to luarocks; Debian's luarocks defaults to 5.2.
luarocks --lua-version=5.1 make --tree "$tree" "$rockspec" >"$work/log" 2>&1 \
    || { cat "$work/log"; echo "test-install: luarocks make failed" >&2; exit 1; }

installed=$(find "$tree" -name libshmlock.so | head -n 1)
[ -n "$installed" ] \
    || { echo "test-install: no libshmlock.so in $tree" >&2; exit 1; }
hooks=$(nm -D --defined-only "$installed" | awk '$3 ~ /^shmlock_test_/ { print $3 }')
if [ -n "$hooks" ]; then
    echo "test-install: $installed exports test hooks:" $hooks >&2
    exit 1
fi

eval "$(luarocks --lua-version=5.1 --tree "$tree" path)"
cd "$work/elsewhere"
out=$(env -u SHMLOCK_LIB SHMLOCK_DIR="$work/zones" TREE="$tree" ROOT="$root" \
      luajit "$root/scripts/lua/check_installed.lua")
echo "test-install: $out"

# the command
eval "$(luarocks --lua-version=5.1 --tree "$tree" path --bin)"
cmd=$(command -v shmlock || true)
case "$cmd" in
    "$tree"/*) ;;
    *) echo "test-install: shmlock is not on PATH from $tree (found: '$cmd')" >&2
       exit 1;;
esac
export SHMLOCK_DIR=$work/zones
unset SHMLOCK_LIB
luajit -e 'local d = assert(require("resty.shmlock.shdict").open("cli_check",
              { size = "64k" }))
           assert(d:set("k", "v"))'
check() {   # check WHAT EXPECTED ACTUAL
    if [ "$2" != "$3" ]; then
        echo "test-install: shmlock $1: expected '$2', got '$3'" >&2
        exit 1
    fi
}
check "--help" "usage: shmlock [--dir D] [--json] COMMAND [ARGS]" \
    "$(shmlock --help | head -n 1)"
check "keys" "k" "$(shmlock keys cli_check)"
check "get (no LUA_PATH)" "v" \
    "$(env -u LUA_PATH -u LUA_CPATH shmlock get cli_check k)"
check "verify" "cli_check: ok" "$(shmlock verify cli_check)"
status=0
shmlock stat no_such_zone 2>/dev/null || status=$?
check "stat of a missing zone: exit status" 3 "$status"
[ ! -e "$work/zones/shmlock.no_such_zone" ] \
    || { echo "test-install: shmlock stat created a zone" >&2; exit 1; }
check "destroy" "destroyed cli_check" "$(shmlock destroy cli_check)"
echo "test-install: shmlock runs from $cmd"
