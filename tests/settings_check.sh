#!/usr/bin/env bash
# tests/settings_check.sh BURSTRUN SRCDIR - the table of BURST_* settings (runtime/settings.c)
# against the code and the README:
#   - every BURST_* variable the library or burstrun reads or sets (a string literal that is
#     the whole name, or NAME=) is a row of the table;
#   - only runtime/settings.c calls getenv on a BURST_* name: the library and tools/ alike (the
#     tools read settings through burst_setting_long / burst_setting_string; burstrun may still
#     set variables for its ranks);
#   - README.md's settings table lists exactly the table's names;
#   - burstrun --info --json prints every row; a BURST_* variable the table lacks draws a
#     warning naming it (the logger's, which burstrun shows from level warn); a malformed value
#     is refused naming it.
set -u
BR=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
SRC=$2
fails=0
fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}

json=$("$BR" --info --json) || fail "burstrun --info --json failed"
table=$(printf '%s' "$json" | python3 -c '
import json, sys
for s in json.load(sys.stdin)["settings"]:
    print(s["name"])' | sort -u)
[ "$(printf '%s\n' "$table" | wc -l)" -ge 40 ] || fail "the table has too few rows: $table"

cd "$SRC" || exit 1
code=$(ls runtime/*.[ch] runtime/*/*.[ch] transport/*.[ch] cuda/*.c cuda/*.h cuda/*.cu \
    cuda/*.cuh tools/*.[ch] 2>/dev/null)
# names read or set: "BURST_X" as a whole literal, or "BURST_X=..." (a rank's environment)
# (not BURST_API_VERSION, a macro that messages name; not the BURST_TEST_ / BURST_BENCH_ prefixes)
used=$(grep -ohE '"BURST_[A-Z0-9_]*[A-Z0-9]("|=)' $code | tr -d '"=' | grep -vx BURST_API_VERSION |
    sort -u)
for name in $used; do
    printf '%s\n' "$table" | grep -qx "$name" || fail "$name is read or set in the code but is not in the settings table (runtime/settings.c)"
done
raw=$(grep -nE 'getenv\("BURST_' $code | grep -vE '^runtime/settings\.c:')
[ -z "$raw" ] || fail "getenv of a BURST_* name outside runtime/settings.c: $raw"

readme=$(sed -n '/^## Environment variables/,/^## /p' README.md | grep -E '^\| `BURST_' |
    cut -d'|' -f2 | grep -oE 'BURST_[A-Z0-9_]+' | sort -u)
if [ "$readme" != "$table" ]; then
    fail "README.md's settings table and the registry differ:"
    diff <(printf '%s\n' "$readme") <(printf '%s\n' "$table") | sed 's/^/    /'
fi

out=$(BURST_NO_SUCH_SETTING=1 "$BR" --threads -n 1 --seq 16 --heads 1 --head-dim 8 2>&1)
printf '%s' "$out" | grep -q 'warn runtime: BURST_NO_SUCH_SETTING' ||
    fail "no warning about an unknown BURST_* variable: $out"
out=$(BURST_TEST_WHATEVER=1 BURST_BENCH_WHATEVER=1 "$BR" --threads -n 1 --seq 16 --heads 1 \
    --head-dim 8 2>&1)
! printf '%s' "$out" | grep -q 'warn runtime: BURST_' || fail "a warning about a tests' variable: $out"
out=$(BURST_STEP_SYNC=yes "$BR" --threads -n 1 --seq 16 --heads 1 --head-dim 8 2>&1)
[ $? = 2 ] && printf '%s' "$out" | grep -q 'BURST_STEP_SYNC = "yes"' ||
    fail "a malformed setting not refused by name: $out"

[ $fails = 0 ] && echo "settings: $(printf '%s\n' "$table" | wc -l) rows, code and README agree"
exit $((fails > 0))
