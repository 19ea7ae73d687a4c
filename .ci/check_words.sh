#!/usr/bin/env bash
# .ci/check_words.sh [DIR] - the project's files speak of the product alone: no tracked text file
# of DIR (default: this checkout) cites an issue or pull-request number ("issue #12", "PR #7",
# "(#123)") or speaks of the work sessions that wrote it. Comments and documents say what the
# code is, not how it came to be.
# Prints each hit as FILE:LINE: TEXT and exits 1 on any. Tested by tests/words_check.sh (which,
# like this file, must spell the patterns out and so is not scanned).
set -uo pipefail
dir=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$dir" || exit 2
patterns=(
    '(issue|ticket|bug|PR|pull request|merge request)[[:space:]]*#[0-9]+' # issue #12, PR #7
    '\(#[0-9]+\)'                                                         # (#123)
    '(^|[[:space:]])#[0-9]{2,}([^[:alnum:]]|$)'                           # see #123
    '\bwork(ing)?[[:space:]-]+sessions?\b'
    '\b(this|that|the last|a previous|the next)[[:space:]]+session\b'
)
args=()
for p in "${patterns[@]}"; do
    args+=(-e "$p")
done
git ls-files -z -- . ':!:.ci/check_words.sh' ':!:tests/words_check.sh' |
    xargs -0 -r grep -nIiE "${args[@]}" -- | grep . && {
    echo "check_words: the lines above speak of how the work was done, not of the product" >&2
    exit 1
}
exit 0
