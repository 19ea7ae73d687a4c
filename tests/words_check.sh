#!/usr/bin/env bash
# tests/words_check.sh CHECK [SOURCE] - .ci/check_words.sh on a scratch repository: ordinary code
# and prose pass (#include, an anchor, "no longer read"); a line citing an issue or pull request
# or a work session is refused and named. Then the
# check on SOURCE (this checkout) where it is a git checkout.
# Exit 77 (SKIP) without git (a machine that got the sources as an archive).
set -u
command -v git >/dev/null || { echo "SKIP: git not found (the check reads git ls-files)"; exit 77; }
CHECK=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
. "$(dirname "$0")/ci_check_lib.sh"

repo 'a.c=#include <stdio.h>
struct p q = {.device = NULL}; /* ctx->device, p.device: the buffer is no longer read */' \
    'docs/MAP.md=# Layers
Section 2 of the paper; step #1 of 4; see [the map](MAP.md#layers).'
"$CHECK" "$TMP/r" >"$TMP/out" 2>&1 || fail "good lines refused: $(cat "$TMP/out")"

for bad in 'fixed by issue #12' 'see PR #7' 'the merge (#123)' 'as discussed in #456' \
    'written in a work session' 'this session measured it'; do
    repo 'a.c=int x;' "docs/MAP.md=first line
then $bad"
    "$CHECK" "$TMP/r" >"$TMP/out" 2>&1 && fail "not refused: $bad"
    grep -q '^docs/MAP.md:2:' "$TMP/out" || fail "the line is not named for: $bad: $(cat "$TMP/out")"
done
[ $fails = 0 ] && echo "check_words: product lines pass, each line about the work is refused"

if [ -n "${2:-}" ] && git -C "$2" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    "$CHECK" "$2" || fail "this checkout has lines about the work (above)"
fi
exit $((fails > 0))
