#!/usr/bin/env bash
# .ci/check_words.sh [DIR] - the project's files speak of the product alone: no tracked text file
# of DIR (default: this checkout) cites a numbered ticket of a tracker (the word, then a hash sign
# and a number; a number in parentheses after a hash sign; a hash sign and two or more digits
# after a space), narrates the sittings in which it was written, or points at folders outside
# the repository that belong to the developers' own tooling.
# Prints each hit as FILE:LINE: TEXT and exits 1 on any. The patterns are assembled from pieces,
# so that this file does not match them itself; tests/words_check.sh builds its samples the same
# way.
set -uo pipefail
dir=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$dir" || exit 2
hash='#'
sit='sess''ion'
up='\.\.'
patterns=(
    "(issue|ticket|bug|PR|pull request|merge request)[[:space:]]*${hash}[0-9]+"
    "\\(${hash}[0-9]+\\)"
    "(^|[[:space:]])${hash}[0-9]{2,}([^[:alnum:]]|\$)"
    "\\bwork(ing)?[[:space:]-]+${sit}s?\\b"
    "\\b(this|that|the last|a previous|the next)[[:space:]]+${sit}\\b"
    "${up}/sha""red/"
    "(^|[^[:alnum:]_])\\.dev""ice/"
)
args=()
for p in "${patterns[@]}"; do
    args+=(-e "$p")
done
git ls-files -z -- . | xargs -0 -r grep -nIiE "${args[@]}" -- | grep . && {
    echo "check_words: the lines above speak of how the work was done, not of the product" >&2
    exit 1
}
exit 0
