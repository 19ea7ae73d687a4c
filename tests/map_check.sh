#!/usr/bin/env bash
# tests/map_check.sh CHECK [SOURCE] - .ci/check_map.sh on a scratch repository: files the map
# (docs/ARCHITECTURE.md) names pass, as does a header whose .c is named; a source file, a header
# without a named .c and a script it does not name are each refused and named; a fuzz corpus is
# not asked for. Then the check on SOURCE (this checkout) where it is a git checkout.
# Exit 77 (SKIP) without git (a machine that got the sources as an archive).
set -u
command -v git >/dev/null || { echo "SKIP: git not found (the check reads git ls-files)"; exit 77; }
CHECK=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
. "$(dirname "$0")/ci_check_lib.sh"

good=('docs/ARCHITECTURE.md=`a.c` (with a.h), `b.sh`, `k.comp`' 'a.c=int a;' 'a.h=int a;' \
    'b.sh=true' 'k.comp=void main() {}' 'README.md=not asked for')
repo "${good[@]}"
mkdir -p "$TMP/r/tests/fuzz/fuzz_x" && echo x >"$TMP/r/tests/fuzz/fuzz_x/seed1.c" &&
    git -C "$TMP/r" add -A
"$CHECK" "$TMP/r" >"$TMP/out" 2>&1 || fail "a named tree refused: $(cat "$TMP/out")"

for bad in 'c.c=int c;' 'd.h=int d;' 'e.py=pass' 'sub/f.cu=int f;'; do
    repo "${good[@]}" "$bad"
    "$CHECK" "$TMP/r" >"$TMP/out" 2>&1 && fail "not refused: ${bad%%=*}"
    grep -qx -- "${bad%%=*}" "$TMP/out" || fail "not named: ${bad%%=*}: $(cat "$TMP/out")"
done
[ $fails = 0 ] && echo "check_map: named files pass, each file the map lacks is refused and named"

if [ -n "${2:-}" ] && git -C "$2" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    "$CHECK" "$2" || fail "docs/ARCHITECTURE.md does not name the files above"
fi
exit $((fails > 0))
