#!/usr/bin/env bash
# tests/words_check.sh CHECK [SOURCE] - .ci/check_words.sh on a scratch repository: ordinary code
# and prose pass (an include, an in-page anchor, a struct member named device, a server's
# sessions); each kind of line the check refuses is refused and named. The refused samples are
# assembled from pieces, as the check's patterns are, so that no file of the project holds one.
# Then the check on SOURCE (this checkout) where it is a git checkout.
# Exit 77 (SKIP) without git (a machine that got the sources as an archive).
set -u
command -v git >/dev/null || { echo "SKIP: git not found (the check reads git ls-files)"; exit 77; }
CHECK=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
. "$(dirname "$0")/ci_check_lib.sh"

h='#'
s='sess''ion'
repo 'a.c=#include <stdio.h> /* ctx.device = 0; the server keeps its sessions */' \
    'docs/MAP.md=See [above](#top); issues a warning; 3 items; C# and F#.'
"$CHECK" "$TMP/r" >"$TMP/out" 2>&1 || fail "ordinary lines refused: $(cat "$TMP/out")"

bads=("see issue ${h}12" "as fixed (${h}123)" "as in ${h}45 above" "PR${h}7 again"
    "written in this ${s}" "one work ${s} later" "read ../sha""red/docs/X.md"
    "source .dev""ice/env.sh first")
for bad in "${bads[@]}"; do
    repo 'README.md=ok line' "docs/MAP.md=first line
then $bad"
    "$CHECK" "$TMP/r" >"$TMP/out" 2>&1 && fail "not refused: $bad"
    grep -q '^docs/MAP.md:2:' "$TMP/out" || fail "the line is not named for: $bad: $(cat "$TMP/out")"
done
if [ $# -ge 2 ] && git -C "$2" rev-parse --git-dir >/dev/null 2>&1; then
    "$CHECK" "$2" >"$TMP/out" 2>&1 || fail "this checkout: $(cat "$TMP/out")"
fi
[ $fails = 0 ] && echo "check_words: ordinary lines pass, ${#bads[@]} kinds of narration refused"
exit $((fails > 0))
