#!/usr/bin/env bash
# A user's spec (spec/user/shmlock_user.lua, docs/testing.md) under busted
# as its users run it: Debian's /usr/bin/busted as installed (it starts
# under `lua`, Lua 5.2 here), from a directory of the user's with no
# .busted, each case twice in a row (the second run must pass too: the
# spec's zone directory is its own, resty.shmlock.testing):
#
#   1. from the checkout, LUA_PATH='<checkout>/lua/?.lua;;' (after `make`);
#      under busted's Lua and under LuaJIT (`luajit /usr/bin/busted`);
#   2. after `luarocks make` for busted's Lua into the system tree
#      (/usr/local), with nothing set.  The install goes to a tmpfs mounted
#      over /usr/local in a mount namespace of its own (unshare -m, root
#      only; skipped otherwise), so the machine's /usr/local never changes.
#
#   3. the README's per-Lua block (Installation: `luarocks --lua-version=5.X
#      make --local`, `eval "$(luarocks --lua-version=5.X path)"`, the Lua
#      and busted started as it says), run as written by bash -e in a clean
#      copy of the checkout with a throw-away HOME (so ~/.luarocks is the
#      work directory's) and the spec as my_spec.lua: every `installed` line
#      printed, every busted run green.
#
# Every case must pass, under PUC Lua as under LuaJIT (the lock included:
# docs/every-lua.md).

set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD
busted=/usr/bin/busted
blua=$(readlink -f "$(command -v lua)")     # busted's Lua, e.g. lua5.2
bver=$("$blua" -e 'io.write((_VERSION:gsub("Lua ", "")))')

work=$(mktemp -d "${TMPDIR:-/tmp}/shmlock-busted.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/user"
cp spec/user/shmlock_user.lua "$work/user/"

failures=0
fail() { echo "test-busted: FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { echo "test-busted: ok: $*"; }

# runs the spec twice with "$@" before it: both must pass, with $1 pending
twice() {
    local what=$1 pending=$2
    shift 2
    local run out
    for run in 1 2; do
        if out=$(cd "$work/user" && "$@" shmlock_user.lua 2>&1) \
           && printf '%s\n' "$out" | grep -q \
                "successes / 0 failures / 0 errors / $pending pending"; then
            pass "$what, run $run: $(printf '%s\n' "$out" | grep successes)"
        else
            printf '%s\n' "$out"
            fail "$what, run $run"
        fi
    done
}

# 1. from the checkout
export LUA_PATH="$root/lua/?.lua;;"
twice "busted (Lua $bver) from the checkout" 0 "$busted"
twice "luajit busted from the checkout" 0 luajit "$busted" --ignore-lua
unset LUA_PATH

# 2. luarocks make for busted's Lua, into /usr/local, nothing set
if [ "$(id -u)" != 0 ] || ! unshare -m true 2>/dev/null; then
    echo "test-busted: skipped: luarocks make into /usr/local needs root" \
         "and unshare -m"
else
    src=$work/src
    mkdir -p "$src"
    tar -C "$root" -cf - --exclude=./.git --exclude=./build \
        --exclude=./build-asan --exclude=./build-test --exclude='*.so' \
        --exclude='*.o' . | tar -C "$src" -xf -
    if unshare -m bash -c '
        set -e
        mount --make-rprivate /
        mount -t tmpfs shmlock-test /usr/local
        export HOME='"$work"'/home
        mkdir -p "$HOME"
        cd '"$src"' && luarocks --lua-version='"$bver"' make >'"$work"'/make.log 2>&1
        cd '"$work"'/user
        env -u LUA_PATH -u LUA_CPATH -u SHMLOCK_LIB -u SHMLOCK_CORE \
            '"$busted"' shmlock_user.lua > '"$work"'/run1.log 2>&1 || true
        env -u LUA_PATH -u LUA_CPATH -u SHMLOCK_LIB -u SHMLOCK_CORE \
            '"$busted"' shmlock_user.lua > '"$work"'/run2.log 2>&1 || true
    '; then
        for run in 1 2; do
            if grep -q "successes / 0 failures / 0 errors / 0 pending" \
                    "$work/run$run.log"; then
                pass "busted (Lua $bver) after luarocks make, nothing set," \
                     "run $run: $(grep successes "$work/run$run.log")"
            else
                cat "$work/run$run.log"
                fail "busted after luarocks make, run $run"
            fi
        done
    else
        cat "$work/make.log" 2>/dev/null || true
        fail "luarocks --lua-version=$bver make into /usr/local"
    fi
fi

# 3. the README's per-Lua block, as written
block=$(awk '
    /^Installation$/ { inst = 1 }
    inst && /^```sh$/ { code = ""; sh = 1; next }
    sh && /^```$/ { sh = 0; if (code ~ /\/usr\/bin\/busted/) { printf "%s", code; exit } next }
    sh { code = code $0 "\n" }
' README.md)
if [ -z "$block" ]; then
    fail "README.md: no sh block with /usr/bin/busted in Installation"
else
    src3=$work/src3
    mkdir -p "$src3" "$work/home3"
    tar -C "$root" -cf - --exclude=./.git --exclude=./build \
        --exclude=./build-asan --exclude=./build-test --exclude='*.so' \
        --exclude='*.o' --exclude=./demo/out --exclude=./.busted . \
        | tar -C "$src3" -xf -
    cp spec/user/shmlock_user.lua "$src3/my_spec.lua"
    printf 'set -e\n%s' "$block" >"$work/readme-block.sh"
    status=0
    (cd "$src3" && env -u LUA_PATH -u LUA_CPATH -u SHMLOCK_LIB \
        -u SHMLOCK_CORE HOME="$work/home3" bash "$work/readme-block.sh") \
        >"$work/readme-block.log" 2>&1 || status=$?
    want_installed=$(grep -c 'print("installed")' "$work/readme-block.sh")
    want_busted=$(grep -c '/usr/bin/busted' "$work/readme-block.sh")
    got_installed=$(grep -c '^installed$' "$work/readme-block.log" || true)
    got_busted=$(grep -c 'successes / 0 failures / 0 errors / 0 pending' \
                 "$work/readme-block.log" || true)
    if [ "$status" = 0 ] && [ "$got_installed" = "$want_installed" ] \
       && [ "$got_busted" = "$want_busted" ]; then
        pass "the README's per-Lua block: $got_installed installs, $got_busted" \
             "busted runs"
    else
        cat "$work/readme-block.log"
        fail "the README's per-Lua block (exit $status; installed" \
             "$got_installed of $want_installed, busted $got_busted of" \
             "$want_busted)"
    fi
fi

if [ "$failures" -ne 0 ]; then
    echo "test-busted: $failures check(s) failed" >&2
    exit 1
fi
echo "test-busted: every check passed"
