#!/usr/bin/env bash
# Checks that the C core's #includes run only downwards: src/README.md
# lists the files of src/ (and of src/lua/, the C module, as lua/NAME) in
# layer order, lowest first, one numbered item
# per layer ("3. `sys.h`, `sys.c` — ..."); a file may include files of
# lower layers, and a .c its own .h.  Fails on an upward or sideways
# include, and on a file of src/ the list does not name.

set -euo pipefail

cd "$(dirname "$0")/.."

declare -A rank
while IFS= read -r line; do
    n=${line%%.*}
    rest=${line#*.}
    while [[ $rest =~ \`([A-Za-z0-9_/]+\.[ch])\` ]]; do
        rank[${BASH_REMATCH[1]}]=$n
        rest=${rest#*"${BASH_REMATCH[0]}"}
    done
done < <(grep -E '^[0-9]+\. ' src/README.md)

status=0
for path in src/*.c src/*.h src/lua/*.c src/lua/*.h; do
    file=${path#src/}
    dir=${file%/*}
    [ "$dir" = "$file" ] && dir=
    if [ -z "${rank[$file]:-}" ]; then
        echo "check-layers: $path is not in src/README.md's layer list" >&2
        status=1
        continue
    fi
    while IFS= read -r inc; do
        # (src/lua/'s includes: its own files, or ../ the core's)
        if [ -n "$dir" ]; then
            case $inc in
                ../*) inc=${inc#../} ;;
                *) inc=$dir/$inc ;;
            esac
        fi
        if [ -z "${rank[$inc]:-}" ]; then
            echo "check-layers: $path includes $inc, not in the layer list" >&2
            status=1
        elif [ "${rank[$inc]}" -gt "${rank[$file]}" ]; then
            echo "check-layers: $path (layer ${rank[$file]}) includes $inc" \
                 "(layer ${rank[$inc]}): an upward include" >&2
            status=1
        elif [ "${rank[$inc]}" -eq "${rank[$file]}" ] \
             && [ "$inc" != "${file%.c}.h" ]; then
            echo "check-layers: $path includes $inc of its own layer" >&2
            status=1
        fi
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$path")
done

if [ "$status" -eq 0 ]; then
    echo "check-layers: ${#rank[@]} files of src/, every #include downwards"
fi
exit "$status"
