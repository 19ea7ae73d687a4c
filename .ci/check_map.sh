#!/usr/bin/env bash
# .ci/check_map.sh [DIR] - docs/ARCHITECTURE.md names every file of the code where it lives: each
# tracked source, header, shader and script of DIR (default: this checkout) appears on that page
# by its file name; a header X.h also counts as named when X.c beside it is. Build files, data,
# documents and fuzz corpora are not asked for. Prints each file the page lacks and exits 1 on
# any. Tested by tests/map_check.sh.
set -uo pipefail
dir=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$dir" || exit 2
map=docs/ARCHITECTURE.md
[ -f "$map" ] || { echo "check_map: $map not found" >&2; exit 2; }
status=0
while IFS= read -r f; do
    case "$f" in
    tests/fuzz/*/*) continue ;; # a target's seed corpus
    esac
    b=${f##*/}
    grep -qF -- "$b" "$map" && continue
    case "$b" in
    *.h) grep -qF -- "${b%.h}.c" "$map" && [ -n "$(git ls-files -- "${f%.h}.c")" ] && continue ;;
    esac
    echo "$f"
    status=1
done < <(git ls-files -- '*.c' '*.h' '*.cu' '*.cuh' '*.comp' '*.glsl' '*.sh' '*.py' '*.in' \
    '*.ini' '.ci/*')
[ $status = 0 ] || echo "check_map: docs/ARCHITECTURE.md does not name the files above" >&2
exit $status
