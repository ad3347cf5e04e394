#!/usr/bin/env bash
# Checks the rockspec: `luarocks make` into a throw-away tree, then, from a
# directory outside the checkout and with only `luarocks path` to find
# things, requires every installed module and uses a zone through the
# installed libshmlock.so, which must export no test hook (shmlock_test_*:
# those are the test build's, libshmlock-test.so).  Then the installed
# command, `shmlock`, on PATH through `luarocks path --bin`, and also with
# no LUA_PATH at all (it finds its tree next to itself), from the tree of
# every Lua (a LuaJIT program, whatever Lua the library was installed
# for), and its man page; without LuaJIT it says what to install.
#
# The first install is the README's plain `luarocks make`, for whichever Lua
# luarocks picks (LuaJIT counts as 5.1); the LuaJIT checks run on a 5.1 tree
# (made with --lua-version=5.1 when luarocks picks another Lua).  Then, for
# each Lua 5.x installed here, `luarocks --lua-version=5.X make` into a tree
# of its own, and under that Lua, with only `luarocks path`: the installed C
# module is the one loaded, every dictionary method, the cache and the lock
# work (spec/every_lua/dict.lua, cache.lua, lock.lua).

set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD
rockspec=$(ls lua-resty-shmlock-*.rockspec | sort -V | tail -n 1)

work=$(mktemp -d "${TMPDIR:-/tmp}/shmlock-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
tree=$work/tree
mkdir -p "$work/elsewhere" "$work/zones"

picked=$(luarocks config lua_version)
luarocks make --tree "$tree" "$rockspec" >"$work/log" 2>&1 \
    || { cat "$work/log"; echo "test-install: luarocks make failed" >&2; exit 1; }
echo "test-install: luarocks make (Lua $picked): ok"
if [ "$picked" != 5.1 ]; then
    tree=$work/tree-5.1
    luarocks --lua-version=5.1 make --tree "$tree" "$rockspec" \
        >"$work/log" 2>&1 \
        || { cat "$work/log"; echo "test-install: luarocks --lua-version=5.1" \
             "make failed" >&2; exit 1; }
fi

# each Lua 5.x: its own tree, its installed C module, the dictionary
for lua in $(cd /usr/bin && ls lua5.[1-4] 2>/dev/null); do
    v=${lua#lua}
    vtree=$work/tree-puc-$v
    luarocks --lua-version="$v" make --tree "$vtree" "$rockspec" \
        >"$work/log-$v" 2>&1 \
        || { cat "$work/log-$v"; echo "test-install: luarocks" \
             "--lua-version=$v make failed" >&2; exit 1; }
    mkdir -p "$work/zones-$v"
    for script in dict.lua cache.lua lock.lua; do
        out=$(
            eval "$(luarocks --lua-version="$v" --tree "$vtree" path)"
            cd "$work/elsewhere"
            env -u SHMLOCK_LIB -u SHMLOCK_CORE "$lua" -e "
                local core = require 'resty.shmlock.internal.core'
                assert(core.name == 'capi', core.name)
                local maps = io.open('/proc/self/maps'):read('*a')
                assert(maps:find('$vtree/lib/lua/$v/resty/shmlock/core.so',
                                 1, true), 'not the installed core.so')
                arg = { [-1] = '$lua', [0] = '$root/spec/every_lua/$script',
                        '$work/zones-$v' }
                dofile('$root/spec/every_lua/$script')" 2>&1
        ) || true
        # (lock.lua notes a part it skips: the fork, without luaposix)
        case $out in
        ok | "ok (no fork: "*) ;;
        *) echo "$out"; echo "test-install: $lua: the installed" \
               "modules fail spec/every_lua/$script" >&2; exit 1 ;;
        esac
    done
    echo "test-install: $lua: luarocks --lua-version=$v make; the installed" \
         "C module runs every dictionary method, the cache and the lock"

    # the installed command is a LuaJIT program whatever Lua the tree is
    # for: it finds its modules in share/lua/$v, with no LUA_PATH
    out=$(cd "$work/elsewhere" && env -u LUA_PATH -u LUA_CPATH -u SHMLOCK_LIB \
          SHMLOCK_DIR="$work/zones-$v" "$vtree/bin/shmlock" run cli_check k \
          -- echo ran 2>&1) || true
    if [ "$out" != ran ]; then
        echo "$out"
        echo "test-install: $vtree/bin/shmlock run (a Lua $v tree) fails" >&2
        exit 1
    fi
    echo "test-install: $lua: the tree's shmlock runs (under LuaJIT)"
done

# without LuaJIT, the command says what to install
nolj=$work/no-luajit
mkdir -p "$nolj"
ln -s "$(command -v sh)" "$nolj/sh"
status=0
out=$(env -i PATH="$nolj" "$tree/bin/shmlock" ls 2>&1) || status=$?
case "$status $out" in
"127 shmlock: needs LuaJIT, and found no 'luajit' on PATH: install it"*) ;;
*) echo "$out"
   echo "test-install: shmlock without LuaJIT on PATH: exit $status," \
        "not 127 and what to install" >&2
   exit 1 ;;
esac
echo "test-install: without LuaJIT, shmlock says what to install"

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
check "--help" "usage: shmlock [--dir D] [--group G] [--json] COMMAND [ARGS]" \
    "$(shmlock --help | head -n 1)"
check "--version" "shmlock $(luajit -e 'io.write(require "resty.shmlock.version")')" \
    "$(shmlock --version)"
# the manual page: in the rock's directory, and it renders without a
# warning
man_page=$(luarocks --lua-version=5.1 --tree "$tree" show --rock-dir \
           lua-resty-shmlock)/share/man/man1/shmlock.1
check "man page" "$man_page" "$(find "$tree" -name shmlock.1)"
check "man page renders" "" "$(groff -man -ww -z "$man_page" 2>&1)"
check "man page's name" "shmlock - look at shmlock zones, and run a command under a lock of one" \
    "$(MANWIDTH=200 man -l "$man_page" 2>/dev/null | sed -n '/^NAME/{n;s/^ *//;p;}')"
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

# make install (no luarocks): the command and its manual page where man
# finds them under the prefix
prefix=$work/prefix
make -C "$root" --no-print-directory install PREFIX="$prefix" \
    >"$work/make-install.log" 2>&1 \
    || { cat "$work/make-install.log"; echo "test-install: make install" \
         "failed" >&2; exit 1; }
check "make install: shmlock --version" "$(shmlock --version)" \
    "$(env -u LUA_PATH -u LUA_CPATH "$prefix/bin/shmlock" --version)"
check "make install: man -M PREFIX/share/man shmlock" "SHMLOCK(1)" \
    "$(MANWIDTH=80 man -M "$prefix/share/man" shmlock 2>/dev/null \
       | awk 'NR == 1 { print $1 }')"
echo "test-install: make install puts shmlock and shmlock(1) under PREFIX"
