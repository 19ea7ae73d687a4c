# tests/burstrun_lib.sh - sourced by the burstrun test scripts (tests/burstrun_*.sh):
#     . "$(dirname "$0")/burstrun_lib.sh"
# A scratch folder, the seed, failure counting, a clock, and burstrun's rank processes as
# `burstrun --verbose` names them.

# test_init NAME: $TMP, a fresh folder removed at exit; FAILS=0; SEED, BURST_TEST_SEED or the
# clock, printed so that a failure reproduces
test_init() {
    TMP=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX") || exit 1
    trap 'rm -rf "$TMP"' EXIT
    FAILS=0
    SEED=${BURST_TEST_SEED:-$(date +%s)}
    echo "seed $SEED (BURST_TEST_SEED)"
}

# fail TEXT: print a failure and count it
fail() {
    echo "FAIL: $*"
    FAILS=$((FAILS + 1))
}

# now_ms: milliseconds since the epoch
now_ms() {
    echo $(($(date +%s%N) / 1000000))
}

# rank_pids FILE: the pids of the rank processes that burstrun --verbose named in FILE (its
# stderr); empty while it has not named them
rank_pids() {
    sed -n 's/^.*burstrun: [0-9]* rank processes (pids \([0-9 ]*\)).*/\1/p' "$1"
}

# wait_rank_pids FILE TENTHS: wait up to TENTHS tenths of a second for burstrun --verbose to
# name its rank processes in FILE; status 0 once it has
wait_rank_pids() {
    _i=0
    while [ $_i -lt "$2" ]; do
        grep -q "rank processes (pids [0-9 ]*)" "$1" 2>/dev/null && return 0
        sleep 0.1
        _i=$((_i + 1))
    done
    return 1
}

# rank_alive PID: PID is a running rank process of burstrun
rank_alive() {
    tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q -- "--rank-worker"
}

# need_fabric BURSTRUN PROVIDER ARGS...: a one-rank job over the provider; exit 77 (SKIP) when
# burstrun refuses the provider as unavailable (exit 2), 1 when the job fails otherwise
need_fabric() {
    _br=$1
    _prov=$2
    shift 2
    "$_br" -n 1 --fabric "$_prov" "$@" >"$TMP/probe" 2>&1
    _rc=$?
    if [ $_rc -eq 2 ]; then
        echo "SKIP: fabric $_prov unavailable: $(tail -n 1 "$TMP/probe")"
        exit 77
    elif [ $_rc -ne 0 ]; then
        cat "$TMP/probe"
        echo "FAIL: one-rank probe exited $_rc"
        exit 1
    fi
}
