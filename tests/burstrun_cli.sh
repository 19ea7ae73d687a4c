#!/bin/sh
# tests/burstrun_cli.sh BURSTRUN WHAT  (suite 'unit'; ranks as threads, no provider needed)
#
#   cancel   problems whose gradients cancel exactly (a one-key window: dQ = dK = 0) or nearly,
#            in every dtype and layout, on 1 to 3 ranks: --check passes (the error of a
#            gradient is measured against the size of its terms, not its rounding noise)
#   sizes    every size flag at its largest value, alone and together, in both rank modes:
#            a usage error (exit 2) naming the flags, at once, before any allocation or rank
#            (products that wrap past 2^64, tensors beyond the library's 2^50 elements, jobs
#            larger than this machine's memory); the largest jobs that fit still start
#   env      every library variable burstrun or its ranks read, malformed, in both rank modes:
#            a usage error (exit 2) naming it before any rank starts; the variables a launcher
#            sets for its ranks (BURST_BOOTSTRAP=mpi, BURST_RENDEZVOUS, BURST_RANK, ...)
#            exported by the user change nothing
#   ranges   numeric flags and variables the ranks receive, at the largest value burstrun takes:
#            the job runs (the library takes it too); one past it: a usage error
#   hostfile --hostfile parsing: special files (a FIFO, /dev/zero, a directory), files past the
#            size limit and with NUL bytes are refused at once naming the file; lines of any
#            length count once; comments, blank and CRLF lines, hosts listed twice and every
#            spelling of slots= / max_slots= give Open MPI's slot counts (a host without slots=
#            has its core count there, unknown here: -n is then required); malformed items name
#            the line
#   errors   a job whose plans differ between ranks fails once: one message naming a rank, in
#            both rank modes (not one per rank); a library warning shows on burstrun's stderr
#            (its level is warn), BURST_LOG=off silences it, BURST_LOG=info adds the context's
#            backend
#   version  -V names the versions and the optional parts burstrun and the library were built with
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

# expect RC NAME ARGS...: burstrun ARGS, with the variables of $PRE, exits RC (output in $TMP/out)
PRE=
expect() {
    want=$1
    name=$2
    shift 2
    env $PRE "$BR" "$@" >"$TMP/out" 2>&1
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

# expect_usage NAME PATTERN ARGS...: exit 2 within 10 s, stderr matching PATTERN
expect_usage() {
    name=$1
    pat=$2
    shift 2
    t0=$(date +%s)
    expect 2 "$name" "$@"
    grep -q -e "$pat" "$TMP/out" || fail "$name: no message matching '$pat': $(head -c 300 "$TMP/out")"
    [ $(($(date +%s) - t0)) -le 10 ] || fail "$name: took more than 10 s"
}

case_sizes() {
    B=1073741824 # largest --batch
    N=1099511627776
    H=1048576
    for mode in --threads ""; do
        m="sizes${mode:- processes}"
        expect_usage "$m wrap" "2^50 elements" $mode -n 1 --layout natural --seq 4096 \
            --batch $B --heads $H --head-dim 8 --fwd-only $SMALL
        expect_usage "$m all max" "--batch $B x --seq $N" $mode -n 1 --seq $N --batch $B \
            --heads $H --head-dim 256 --fwd-only $SMALL
        for f in "--batch $B" "--seq $N" "--heads $H" "--head-dim 256 --heads 65536"; do
            expect_usage "$m $f x rest" "machine\|2^50" $mode -n 2 --seq 1048576 --batch 4096 \
                --heads 8 --head-dim 64 $f --fwd-only $SMALL
        done
        expect_usage "$m kv heads" "--kv-heads" $mode -n 1 --seq $N --heads $H --kv-heads 1 \
            --head-dim 8 --fwd-only $SMALL
        expect_usage "$m memory" "more than the" $mode -n 2 --seq 1048576 --batch 1024 \
            --heads 64 --head-dim 128 --fwd-only $SMALL
    done
    expect 0 "sizes long thin job" --threads -n 1 --seq 65536 --heads 1 --head-dim 8 \
        --window 0,0 --fwd-only $SMALL
}

JOB="-n 2 --seq 128 --heads 2 --head-dim 16 --check $SMALL"

case_env() {
    for mode in --threads ""; do
        m="env${mode:- processes}"
        for var in BURST_TIMEOUT_MS BURST_NUM_THREADS; do
            for bad in abc 12x 0 -5 99999999999999999999; do
                env "$var=$bad" "$BR" $mode $JOB >"$TMP/out" 2>&1
                rc=$?
                [ $rc = 2 ] || fail "$m $var=$bad: exit $rc, expected 2"
                grep -q "$var" "$TMP/out" || fail "$m $var=$bad: not named: $(head -c 300 "$TMP/out")"
                ! grep -q '^\[rank' "$TMP/out" || fail "$m $var=$bad: a rank started"
            done
        done
        env BURST_FABRIC=carrierpigeon "$BR" $mode $JOB >"$TMP/out" 2>&1
        [ $? = 2 ] && grep -q BURST_FABRIC "$TMP/out" || fail "$m BURST_FABRIC=carrierpigeon"
        for bad in BURST_LOG=verbose BURST_LOG=warn,gpu=info BURST_LOG_FILE=log-%x; do
            env "$bad" "$BR" $mode $JOB >"$TMP/out" 2>&1
            [ $? = 2 ] && grep -q "${bad%%=*} = " "$TMP/out" ||
                fail "$m $bad: not refused by name: $(head -c 300 "$TMP/out")"
        done
        env BURST_BOOTSTRAP=mpi BURST_RENDEZVOUS=192.0.2.1:1 BURST_RANK=7 BURST_SIZE=9 \
            BURST_JOB_KEY=00 BURST_TIMEOUT_MS= BURST_NUM_THREADS= "$BR" $mode $JOB \
            >"$TMP/out" 2>&1
        [ $? = 0 ] || fail "$m: exported launcher variables broke the job: $(tail -n 3 "$TMP/out")"
    done
}

case_ranges() {
    max=86400 # BURST_COMM_TIMEOUT_MAX_MS / 1000
    expect 0 "ranges --timeout $max" -n 2 --timeout $max $JOB
    expect_usage "ranges --timeout $((max + 1))" "--timeout" -n 2 --timeout $((max + 1)) $JOB
    PRE=BURST_TIMEOUT_MS=${max}000
    expect 0 "ranges BURST_TIMEOUT_MS max" --threads $JOB
    expect 0 "ranges BURST_TIMEOUT_MS max, processes" $JOB
    PRE=BURST_TIMEOUT_MS=$((max * 1000 + 1))
    expect_usage "ranges BURST_TIMEOUT_MS max + 1" "BURST_TIMEOUT_MS" $JOB
    PRE=BURST_NUM_THREADS=4096
    expect 0 "ranges BURST_NUM_THREADS 4096" --threads -n 1 --seq 64 --heads 1 --head-dim 8 $SMALL
    PRE=BURST_NUM_THREADS=4097
    expect_usage "ranges BURST_NUM_THREADS 4097" "BURST_NUM_THREADS" $JOB
    PRE=
}

# slots F COUNT: --hostfile F gives COUNT slots (burstrun names them when -n asks for more)
slots() {
    timeout 10 "$BR" --hostfile "$1" -n 65536 >"$TMP/out" 2>&1
    grep -q "gives only $2 slots" "$TMP/out" || fail "hostfile $3: expected $2 slots: $(head -c 300 "$TMP/out")"
}

# refused F PATTERN NAME: --hostfile F is a usage error matching PATTERN within 10 s
refused() {
    timeout 10 "$BR" --hostfile "$1" >"$TMP/out" 2>&1
    rc=$?
    [ $rc = 2 ] || fail "hostfile $3: exit $rc, expected 2"
    grep -q -e "$2" "$TMP/out" || fail "hostfile $3: no message matching '$2': $(head -c 300 "$TMP/out")"
}

case_hostfile() {
    H=$TMP/hosts
    mkfifo "$TMP/fifo" && refused "$TMP/fifo" "not a regular file" fifo
    refused /dev/zero "not a regular file" /dev/zero
    refused "$TMP" "not a regular file" directory
    refused "$TMP/none" "No such file" missing
    truncate -s 1048577 "$H" && refused "$H" "at most" "past the size limit"
    printf 'a\0b\n' >"$H" && refused "$H" "NUL" "NUL byte"
    printf '' >"$H" && refused "$H" "no hosts" empty
    awk 'BEGIN { s = ""; for (i = 0; i < 5000; i++) s = s "h"; print s " slots=3" }' >"$H"
    slots "$H" 3 "5000-byte line"
    awk 'BEGIN { s = ""; for (i = 0; i < 5000; i++) s = s " "; print "h" s "slots=2 # " s }' >"$H"
    slots "$H" 2 "5000 blanks"
    printf 'a slots=2\r\nb slots=1\r\n# c slots=9\n\n   \nb slots = 3 max_slots=4\nd slots= 1 # x\ne slots =2\n' >"$H"
    slots "$H" 9 "mixed"
    printf 'a slots=2\nb\n' >"$H" && refused "$H" "give -n" "a host without slots= (its cores)"
    printf 'a slots=65536\nb slots=1\n' >"$H" && refused "$H" "more than 65536" "too many slots"
    for bad in "a slots=x" "a slots=0" "a slots" "a slots=" "a foo" "a slots=2x" \
        "a max_slots=-1" "a slots=99999999999999999999"; do
        printf 'ok\n%s\n' "$bad" >"$H" && refused "$H" ":2: " "'$bad'"
    done
}

case_errors() {
    for mode in --threads ""; do
        m="errors${mode:- processes}"
        expect 3 "$m mismatch" $mode -n 3 --seq 64 --heads 1 --head-dim 8 $SMALL \
            --test-mismatch 1:head_dim
        n=$(grep -c "burst_plan_create failed" "$TMP/out")
        [ "$n" = 1 ] || fail "$m: the failure printed $n times: $(head -c 600 "$TMP/out")"
        grep -q "rank [0-9]: burst_plan_create failed: plans differ" "$TMP/out" ||
            fail "$m: no rank named: $(head -c 300 "$TMP/out")"
        PRE=BURST_NO_SUCH_SETTING_X=1
        expect 0 "$m warning" $mode -n 2 --seq 16 --heads 1 --head-dim 8 $SMALL
        grep -q "warn runtime.*BURST_NO_SUCH_SETTING_X" "$TMP/out" ||
            fail "$m: no warning: $(head -c 300 "$TMP/out")"
        PRE="BURST_NO_SUCH_SETTING_X=1 BURST_LOG=off"
        expect 0 "$m silenced" $mode -n 2 --seq 16 --heads 1 --head-dim 8 $SMALL
        ! grep -q "\[burst\]" "$TMP/out" || fail "$m: BURST_LOG=off printed: $(head -c 300 "$TMP/out")"
        PRE=BURST_LOG=info
        expect 0 "$m info" $mode -n 2 --seq 16 --heads 1 --head-dim 8 $SMALL
        grep -q "info runtime.*context on backend cpu" "$TMP/out" ||
            fail "$m: BURST_LOG=info: no context message: $(head -c 300 "$TMP/out")"
        PRE=
    done
}

case_version() {
    for v in -V --version; do
        expect 0 "version $v" $v
        grep -q "^burstrun [0-9.]* (library [0-9.]*)$" "$TMP/out" ||
            fail "$v: no versions: $(head -c 300 "$TMP/out")"
        feats=$(sed -n 's/^library features: //p' "$TMP/out")
        case " $feats " in
        " cpu "*) ;;
        *) fail "$v: the library's features do not start with cpu: '$feats'" ;;
        esac
        for f in $feats; do
            case $f in
            cpu | vulkan | cuda | fabric | research-settings) ;;
            *) fail "$v: unknown feature '$f'" ;;
            esac
        done
        grep -q "^burstrun features: " "$TMP/out" || fail "$v: no burstrun features"
    done
}

case "$WHAT" in
cancel) case_cancel ;;
sizes) case_sizes ;;
env) case_env ;;
ranges) case_ranges ;;
hostfile) case_hostfile ;;
errors) case_errors ;;
version) case_version ;;
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
