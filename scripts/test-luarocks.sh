#!/usr/bin/env bash
# Checks that the README's LuaRocks commands work as a user types them, on
# a clean copy of the checkout (no build products), with Debian's luarocks:
#
#   1. luarocks make (the Lua luarocks picks; the LuaJIT checks need 5.1:
#      --lua-version=5.1 when it picks another)
#   2. luarocks --lua-version=5.1 install lua-resty-shmlock
#      (the rock packed from the copy and served from a local directory:
#      the same download, unpack, build and install as from luarocks.org)
#   2b. the same for Lua 5.4 (when installed): its `shmlock` must run
#   3. luarocks config --scope user lua_version 5.1, then a plain
#      `luarocks make` (the README's one-time setting)
#
# Each installs into a throw-away tree (--tree) with a throw-away HOME, so
# nothing outside the work directory changes.  After each: the build must
# not have compiled with -Werror (a user's compiler may warn where ours does
# not), `luarocks lint` must pass, and from a directory outside the checkout,
# with only `luarocks path` to find things, every module must load and a
# zone, a lock and a cache must work through the installed libshmlock.so;
# and the installed `shmlock` command must run without LUA_PATH.

set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD
rockspec=$(ls lua-resty-shmlock-*.rockspec | sort -V | tail -n 1)
rock=${rockspec%.rockspec}              # lua-resty-shmlock-0.1.0-1
version=${rock#lua-resty-shmlock-}      # 0.1.0-1

work=$(mktemp -d "${TMPDIR:-/tmp}/shmlock-luarocks.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/home" "$work/elsewhere" "$work/zones" "$work/server"
export HOME=$work/home

failures=0
fail() {
    echo "test-luarocks: FAIL: $*" >&2
    failures=$((failures + 1))
}
pass() {
    echo "test-luarocks: ok: $*"
}

# a copy of the checkout as a user's clone has it: no build products
clean_copy() {
    mkdir -p "$1"
    tar -C "$root" -cf - --exclude=./.git --exclude=./build \
        --exclude=./build-asan --exclude='*.so' --exclude='*.o' \
        --exclude=./bench/out --exclude=./demo/out . | tar -C "$1" -xf -
}

if luarocks lint "$rockspec" >"$work/lint.log" 2>&1; then
    pass "luarocks lint $rockspec"
else
    cat "$work/lint.log"
    fail "luarocks lint $rockspec"
fi

# checks one installed tree; $1 names the case, $2 the tree, $3 the log
check_tree() {
    local what=$1 tree=$2 log=$3

    if ! grep -q -- ' -c src/' "$log"; then
        fail "$what: no compile command in the build log (nothing built?)"
    elif grep -q -- '-Werror' "$log"; then
        fail "$what: the build compiled with -Werror (the rockspec passes" \
             "WERROR= ; the Makefile must take it: WERROR ?= -Werror)"
    else
        pass "$what: no -Werror in the build"
    fi

    if (
        eval "$(luarocks --lua-version=5.1 --tree "$tree" path)"
        cd "$work/elsewhere"
        env -u SHMLOCK_LIB SHMLOCK_DIR="$work/zones" TREE="$tree" ROOT="$root" \
            luajit "$root/scripts/lua/check_installed.lua"
    ) >"$log.run" 2>&1; then
        pass "$what: $(tail -n 1 "$log.run")"
    else
        cat "$log.run"
        fail "$what: the installed modules do not work through luarocks path"
    fi

    # the installed command, with no LUA_PATH: it finds its tree itself
    local out status=0
    out=$(cd "$work/elsewhere" && env -u LUA_PATH -u LUA_CPATH -u SHMLOCK_LIB \
          SHMLOCK_DIR="$work/zones" "$tree/bin/shmlock" ls --json 2>&1) \
        || status=$?
    if [ "$status" = 0 ] && [ "$out" = "[]" ]; then
        pass "$what: $tree/bin/shmlock ls --json"
    else
        echo "$out"
        fail "$what: the installed shmlock command (exit $status)"
    fi
}

# 1. luarocks make, in the clone, as the README types it
src=$work/src-make
clean_copy "$src"
tree=$work/tree-make
picked=$(luarocks config lua_version)
pick=()
[ "$picked" = 5.1 ] || pick=(--lua-version=5.1)
if (cd "$src" && luarocks "${pick[@]}" make --tree "$tree") \
        >"$work/make.log" 2>&1; then
    pass "luarocks ${pick[*]} make (luarocks picks Lua $picked)"
    check_tree "make" "$tree" "$work/make.log"
else
    cat "$work/make.log"
    fail "luarocks ${pick[*]} make"
fi

# 2. luarocks --lua-version=5.1 install, from a rock packed from a git copy
#    of the clone (the rockspec's source pointed at it) and a local server
src=$work/src-git
clean_copy "$src"
git -C "$src" init -q
git -C "$src" add -A
git -C "$src" -c user.name=test -c user.email=test@localhost \
    commit -q -m "test-luarocks"
git -C "$src" tag "v${version%-*}"
sed "s|^\(   url = \).*|\1\"git+file://$src\",|" "$src/$rockspec" \
    >"$work/server/$rockspec"
tree=$work/tree-install
if (cd "$work/server" && luarocks pack "$rockspec" \
        && rm "$rockspec" && luarocks-admin make-manifest .) \
        >"$work/pack.log" 2>&1 \
   && luarocks --lua-version=5.1 install --tree "$tree" \
        --only-server="$work/server" lua-resty-shmlock \
        >"$work/install.log" 2>&1; then
    pass "luarocks --lua-version=5.1 install lua-resty-shmlock"
    check_tree "install" "$tree" "$work/install.log"
else
    cat "$work/pack.log" "$work/install.log" 2>/dev/null || true
    fail "luarocks --lua-version=5.1 install lua-resty-shmlock"
fi

# 2b. the same rock installed for Lua 5.4 (when it is here): the library
#     for 5.4, and a `shmlock` on PATH that runs (a LuaJIT program, which
#     finds the 5.4 tree's modules)
if [ -x /usr/bin/lua5.4 ] && [ -f "$work/server/manifest" ]; then
    tree=$work/tree-install-5.4
    if luarocks --lua-version=5.4 install --tree "$tree" \
            --only-server="$work/server" lua-resty-shmlock \
            >"$work/install-5.4.log" 2>&1; then
        pass "luarocks --lua-version=5.4 install lua-resty-shmlock"
        status=0
        out=$(cd "$work/elsewhere" && env -u LUA_PATH -u LUA_CPATH \
              -u SHMLOCK_LIB SHMLOCK_DIR="$work/zones" \
              "$tree/bin/shmlock" ls --json 2>&1) || status=$?
        if [ "$status" = 0 ] && [ "$out" = "[]" ]; then
            pass "install (Lua 5.4): $tree/bin/shmlock ls --json"
        else
            echo "$out"
            fail "install (Lua 5.4): the installed shmlock command" \
                 "(exit $status)"
        fi
    else
        cat "$work/install-5.4.log"
        fail "luarocks --lua-version=5.4 install lua-resty-shmlock"
    fi
fi

# 3. the README's one-time setting, then a plain `luarocks make`
src=$work/src-plain
clean_copy "$src"
tree=$work/tree-plain
if luarocks config --scope user lua_version 5.1 >"$work/config.log" 2>&1 \
   && (cd "$src" && luarocks make --tree "$tree") >"$work/plain.log" 2>&1; then
    pass "luarocks config --scope user lua_version 5.1; luarocks make"
    check_tree "plain make" "$tree" "$work/plain.log"
else
    cat "$work/config.log" "$work/plain.log" 2>/dev/null || true
    fail "luarocks config --scope user lua_version 5.1; luarocks make"
fi

if [ "$failures" -ne 0 ]; then
    echo "test-luarocks: $failures check(s) failed" >&2
    exit 1
fi
echo "test-luarocks: every check passed"
