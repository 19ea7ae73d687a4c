#!/usr/bin/env bash
# .ci/check_links.sh [DIR] - every relative link of the project's Markdown files, [text](path) or
# [text](path#anchor), names a file or folder that git tracks in DIR (default: this checkout), so
# that a clone's documentation is whole: no link leaves the repository or points at a file that
# is not there. Web links (scheme://), mail links and in-page anchors (#...) are not checked.
# Prints each broken link as FILE:LINE: PATH and exits 1 on any. Tested by tests/links_check.sh.
set -uo pipefail
dir=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$dir" || exit 2
tracked=$(mktemp)
trap 'rm -f "$tracked"' EXIT
# the tracked files and every folder above them
git ls-files | awk -F/ '{ p = ""; for (i = 1; i <= NF; i++) { p = p (i > 1 ? "/" : "") $i; print p } }' |
    sort -u >"$tracked"
status=0
# every broken link, one line each (the loop's own exit status does not count: a file without
# links ends its grep with 1)
broken=$(while IFS= read -r md; do
    base=$(dirname "$md")
    # each link target on each line: the part between "](" and the next ")"
    grep -no '](\([^)( ]*\))' "$md" | while IFS= read -r hit; do
        line=${hit%%:*}
        target=${hit#*](}
        target=${target%)}
        target=${target%%#*}
        case "$target" in '' | *://* | mailto:*) continue ;; esac
        path=$(realpath -m --relative-to=. "$base/$target")
        if [[ "$path" == ../* || "$path" == .. ]] || ! grep -qxF -- "$path" "$tracked"; then
            echo "$md:$line: $target"
        fi
    done
done < <(git ls-files '*.md'))
if [ -n "$broken" ]; then
    printf '%s\n' "$broken"
    status=1
fi
[ $status = 0 ] || echo "check_links: the links above name no file of this repository" >&2
exit $status
