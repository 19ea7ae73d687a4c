#!/usr/bin/env bash
# tests/text_check.sh CHECK - .ci/check_text.sh on a scratch repository: legitimate uses of its
# words (to issue a copy, a protocol session, a #define, a hex colour, "tissue") pass, and each
# of its rules fails on a line that breaks it.
set -u
CHECK=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}
repo() { # files: name=line ...
    rm -rf "$TMP/r" && mkdir "$TMP/r" && git -C "$TMP/r" init -q || exit 1
    for kv in "$@"; do
        printf '%s\n' "${kv#*=}" >"$TMP/r/${kv%%=*}"
    done
    git -C "$TMP/r" add -A
}

repo 'a.c=/* issue the copies of tile it; Issue acc = A B (one commit group) */' \
    'b.h= * Session: the rank connects, sends HELLO and waits for WELCOME' \
    'c.c=#define ISSUE_DEPTH 2 /* the scheduler issues 2 loads; tissue; colour #123abc */' \
    'd.md=Known issues are listed in the tracker; a device that runs the tests.' \
    'e.sh=# shared/ holds the data; see docs/../README.md'
"$CHECK" "$TMP/r" >"$TMP/out" 2>&1 || fail "legitimate text refused: $(cat "$TMP/out")"

for bad in 'details in ../shared/docs/ALGORITHM.md' "this issue's core needs none" \
    'fixed in issue #31' 'github.com/o/r/issues/12' 'merged in PR #7' 'measured once this session'; do
    repo 'x.md=ok line' "y.c=/* $bad */"
    "$CHECK" "$TMP/r" >"$TMP/out" 2>&1 && fail "not refused: $bad"
    grep -q '^y.c:1:' "$TMP/out" || fail "the hit is not named for: $bad: $(cat "$TMP/out")"
done
[ $fails = 0 ] && echo "check_text: legitimate text passes, every rule refuses its case"
exit $((fails > 0))
