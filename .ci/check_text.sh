#!/usr/bin/env bash
# .ci/check_text.sh [DIR] - the project's files speak of the product: none names a path outside
# the repository, an issue or pull-request number, or narrates the work ("this issue", "this
# session"). Checks every file git tracks in DIR (default: this checkout) but this check's own
# files; prints each hit and exits 1 on any.
# Tested by tests/text_check.sh (legitimate uses of the same words pass).
set -uo pipefail
dir=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$dir" || exit 2
# one extended regular expression per rule, matched without regard to case
rules=(
    '\.\./shared/'                               # files outside the repository
    "\\b(this|the|that|our) issue('s)?\\b"       # narration about a work item
    '\bissues? ?#[0-9]+\b'                       # issue numbers
    '/(issues|pull)/[0-9]+'                      # links to issues or pull requests
    '\b(pr|pull request) ?#[0-9]+\b'             # pull-request numbers
    '\b(this|that|the same|one) session\b'       # narration about a working session
)
mapfile -t files < <(git ls-files | grep -vxE '\.ci/check_text\.sh|tests/text_check\.sh')
status=0
for rule in "${rules[@]}"; do
    if [ ${#files[@]} -gt 0 ] && grep -nIiE -- "$rule" "${files[@]}" 2>/dev/null; then
        status=1
    fi
done
[ $status = 0 ] || echo "check_text: the lines above narrate the work or name what is not the project" >&2
exit $status
