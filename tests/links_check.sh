#!/usr/bin/env bash
# tests/links_check.sh CHECK - .ci/check_links.sh on a scratch repository: links to tracked files
# and folders (with or without an anchor), web links and in-page anchors pass; a link to a file
# that is not tracked, and one that leaves the repository, are each refused and named, also
# when Markdown files without links follow.
# Exit 77 (SKIP) without git (a machine that got the sources as an archive).
set -u
command -v git >/dev/null || { echo "SKIP: git not found (the check reads git ls-files)"; exit 77; }
CHECK=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
. "$(dirname "$0")/ci_check_lib.sh"

repo 'README.md=See [the map](docs/MAP.md#layers), [docs](docs), [site](https://example.org/x).' \
    'docs/MAP.md=Back to [README](../README.md); [above](#top); mail [us](mailto:a@b.c).'
"$CHECK" "$TMP/r" >"$TMP/out" 2>&1 || fail "good links refused: $(cat "$TMP/out")"

for bad in '[gone](docs/NOTES.md)' '[outside](../../elsewhere/ALGORITHM.md)'; do
    repo 'README.md=ok line' "docs/MAP.md=first line
then $bad"
    "$CHECK" "$TMP/r" >"$TMP/out" 2>&1 && fail "not refused: $bad"
    grep -q '^docs/MAP.md:2: ' "$TMP/out" || fail "the link is not named for: $bad: $(cat "$TMP/out")"
done
# a broken link is refused whatever comes after it: here a last Markdown file without links
repo 'README.md=See [gone](docs/NOTES.md).' 'docs/MAP.md=no links here'
"$CHECK" "$TMP/r" >"$TMP/out" 2>&1 && fail "not refused when the last file has no links"
grep -q '^README.md:1: docs/NOTES.md$' "$TMP/out" ||
    fail "the link is not named when the last file has no links: $(cat "$TMP/out")"
[ $fails = 0 ] && echo "check_links: good links pass, a missing target and one outside are refused"
exit $((fails > 0))
