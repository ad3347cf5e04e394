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
env -u SHMLOCK_LIB SHMLOCK_DIR="$work/zones" TREE="$tree" ROOT="$root" luajit - <<'LUA'
local tree, root = os.getenv("TREE"), os.getenv("ROOT")

local function inside(path, dir)
    return path and path:sub(1, #dir + 1) == dir .. "/"
end

-- every module the checkout has is installed, and loads from the tree
local modules = {}
local find = io.popen("cd '" .. root .. "/lua' && find resty -name '*.lua'")
for f in find:lines() do
    modules[#modules + 1] = f:gsub("%.lua$", ""):gsub("/", ".")
end
find:close()
assert(#modules >= 2, "no modules found in the checkout")

for _, name in ipairs(modules) do
    local path = package.searchpath(name, package.path)
    assert(inside(path, tree), name .. " is not in the tree: " .. tostring(path))
end
local lib = package.searchpath("libshmlock", package.cpath)
assert(inside(lib, tree), "libshmlock.so not in the tree: " .. tostring(lib))

for _, name in ipairs(modules) do
    require(name)
end

local shdict = require "resty.shmlock.shdict"
local dict = assert(shdict.open("install_check", { size = "64k" }))
assert(dict:set("k", "v"))
assert(dict:get("k") == "v")
assert(dict:verify())
assert(shdict.destroy("install_check"))
print("test-install: " .. #modules .. " modules and libshmlock.so load from "
      .. tree)
LUA

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
