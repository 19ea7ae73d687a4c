#!/bin/sh
# tests/burstrun_cli.sh BURSTRUN WHAT  (suite 'unit'; ranks as threads, no provider needed)
#
#   cancel   problems whose gradients cancel exactly (a one-key window: dQ = dK = 0) or nearly,
#            in every dtype and layout, on 1 to 3 ranks: --check passes (the error of a
#            gradient is measured against the size of its terms, not its rounding noise)
# BURST_TEST_TIME_SCALE (default 1; sanitizer builds set 3) multiplies the time limits.
set -u
BR=$1
WHAT=$2
TMP=$(mktemp -d "${TMPDIR:-/tmp}/burstrun_cli.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
FAILS=0
SEED=${BURST_TEST_SEED:-$(date +%s)}
echo "seed $SEED (BURST_TEST_SEED)"
SMALL="--warmup 0 --iters 1 --seed $SEED"

fail() {
    echo "FAIL: $*"
    FAILS=$((FAILS + 1))
}

# expect RC NAME ARGS...: burstrun ARGS exits RC (output in $TMP/out)
expect() {
    want=$1
    name=$2
    shift 2
    "$BR" "$@" >"$TMP/out" 2>&1
    rc=$?
    if [ "$rc" != "$want" ]; then
        fail "$name: exit $rc, expected $want: burstrun $*"
        tail -n 5 "$TMP/out"
    fi
}

case_cancel() {
    for dt in fp32 fp16 bf16; do
        for lay in natural zigzag striped; do
            for g in 1 2 3; do
                expect 0 "cancel $dt $lay G=$g" --threads -n $g --seq 96 --heads 2 --kv-heads 1 \
                    --head-dim 32 --dtype $dt --layout $lay --window 0,0 --check $SMALL
            done
        done
        expect 0 "cancel $dt causal" --threads -n 2 --seq 128 --heads 2 --head-dim 16 \
            --dtype $dt --causal --window 0,0 --check $SMALL
        expect 0 "near-cancel $dt" --threads -n 2 --seq 128 --heads 2 --head-dim 16 \
            --dtype $dt --window 1,0 --check $SMALL
    done
}

case "$WHAT" in
cancel) case_cancel ;;
*)
    echo "unknown case $WHAT"
    exit 1
    ;;
esac
[ "$FAILS" = 0 ] || {
    echo "$FAILS failure(s)"
    exit 1
}
echo "ok"
