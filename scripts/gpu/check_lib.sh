# scripts/gpu/check_lib.sh - what the GPU check scripts share (device_check.sh, ring_check.sh,
# hetero_check.sh source it with their arguments: source "$(dirname "$0")/check_lib.sh" "$@").
# Sets:
#   src      the checkout to build: the script's first argument, else this checkout
#   out      where logs go: $OUT or /tmp/out; created
#   summary  one line per step, printed by the script at its end
#   step NAME CMD...  runs CMD with its output in $out/NAME.log (killed after STEP_TIMEOUT
#            seconds when the script sets it: a hung kernel ends there), adds
#            "NAME rc=... seconds" to summary and returns CMD's status
set -uo pipefail
src=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
out=${OUT:-/tmp/out}
mkdir -p "$out"
summary=()
step() { # name command...
    local name=$1
    shift
    local t0=$SECONDS
    if [ -n "${STEP_TIMEOUT:-}" ]; then
        timeout "$STEP_TIMEOUT" "$@" >"$out/$name.log" 2>&1
    else
        "$@" >"$out/$name.log" 2>&1
    fi
    local rc=$?
    summary+=("$(printf '%-28s rc=%-3d %4ds' "$name" $rc $((SECONDS - t0)))")
    return $rc
}
