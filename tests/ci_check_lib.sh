# tests/ci_check_lib.sh - sourced by the tests of CI's checks (tests/links_check.sh,
# tests/map_check.sh, tests/words_check.sh): a scratch folder, failure counting and scratch git repositories.
#     . "$(dirname "$0")/ci_check_lib.sh"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0

# fail TEXT: print a failure and count it
fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}

# repo NAME=TEXT ...: a fresh git repository in $TMP/r (with a docs/ folder) whose files NAME
# (folders made as needed) hold TEXT, added to the index
repo() {
    rm -rf "$TMP/r" && mkdir -p "$TMP/r/docs" && git -C "$TMP/r" init -q || exit 1
    for kv in "$@"; do
        mkdir -p "$(dirname "$TMP/r/${kv%%=*}")" || exit 1
        printf '%s\n' "${kv#*=}" >"$TMP/r/${kv%%=*}"
    done
    git -C "$TMP/r" add -A
}
