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
#   report   the header first (versions, features, devices, seed), then one row per point of a
#            sweep (--seq a:b:x2 / a:b:+S / lists, --dtype and --head-dim lists); --csv rows;
#            --json's metadata (schema_version, timestamp, host, commit, features, devices),
#            min / median / max times, a sweep's "results", an "error" member with the exit
#            code on a usage error and a failed job; -V lists the features; --probe lists the
#            transports (libfabric, interfaces, MPI); the progress line shows with --threads
#            and --json on a terminal; bad sweep values,
#            --csv paths and a sweep with --hosts are usage errors naming them
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

# json_get FILE EXPR: the Python expression EXPR over the JSON object of FILE (as d)
json_get() {
    python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print($2)" "$1" 2>&1
}

case_report() {
    T="--threads -n 2 --heads 1 --head-dim 8 $SMALL"
    expect 0 "report sweep" $T --seq 64:256:x2 --head-dim 8,16 --dtype fp32,bf16 --check \
        --csv "$TMP/s.csv"
    head -n 1 "$TMP/out" | grep -q '^# burstrun .*features: cpu' ||
        fail "report: the header is not first: $(head -n 2 "$TMP/out")"
    grep -q '^# host .*seed' "$TMP/out" || fail "report: no host / seed line"
    grep -q '^# cpu: device 0' "$TMP/out" || fail "report: no device line"
    rows=$(grep -cE '^ +[0-9]+ +(fp32|bf16) +(8|16) .* pass$' "$TMP/out")
    [ "$rows" = 12 ] || fail "report: $rows rows for 3 x 2 x 2 points: $(cat "$TMP/out")"
    grep -qE '^ +64 +fp32 +8 ' "$TMP/out" && grep -qE '^ +256 +bf16 +16 ' "$TMP/out" ||
        fail "report: the first or last point is missing"
    [ "$(wc -l <"$TMP/s.csv")" = 13 ] && head -n 1 "$TMP/s.csv" | grep -q '^seq,dtype,head_dim,' ||
        fail "report: --csv has not a header and 12 rows: $(cat "$TMP/s.csv")"
    grep -q '^128,bf16,16,1,1,1,2,threads,' "$TMP/s.csv" || fail "report: --csv lacks 128 bf16 16"
    expect 0 "report +S" $T --seq 64:192:+64 --fwd-only
    [ "$(grep -cE '^ +(64|128|192) +fp32 ' "$TMP/out")" = 3 ] || fail "report: --seq 64:192:+64"
    # --json: one object, the metadata, three results with min <= median <= max
    expect 0 "report json" $T --seq 64,96,128 --json
    cp "$TMP/out" "$TMP/j"
    for key in schema_version timestamp host commit features devices results; do
        [ "$(json_get "$TMP/j" "'$key' in d")" = True ] || fail "report --json lacks $key"
    done
    [ "$(json_get "$TMP/j" "[r['seq'] for r in d['results']]")" = "[64, 96, 128]" ] ||
        fail "report --json results: $(json_get "$TMP/j" "d.get('results')")"
    [ "$(json_get "$TMP/j" "all(r['fwd_ms_min'] <= r['fwd_ms'] <= r['fwd_ms_max'] and \
        r['bwd_ms_min'] <= r['bwd_ms'] <= r['bwd_ms_max'] for r in d['results'])")" = True ] ||
        fail "report --json: times not min <= median <= max"
    [ "$(json_get "$TMP/j" "'cpu' in d['features'] and 'error' not in d")" = True ] ||
        fail "report --json: features / error"
    # errors as one JSON object on stdout: a usage error, a rank out of memory (exit 3), in a
    # single job and in a sweep
    "$BR" $T --seq 0 --json >"$TMP/j" 2>/dev/null
    [ "$(json_get "$TMP/j" "d['error']['exit_code']")" = 2 ] ||
        fail "report --json usage error: $(cat "$TMP/j")"
    for seqs in 64 64,128; do
        BURST_FAULT=oom:alloc=1 "$BR" $T --seq $seqs --json >"$TMP/j" 2>/dev/null
        rc=$?
        [ $rc = 3 ] && [ "$(json_get "$TMP/j" "d['error']['exit_code']")" = 3 ] &&
            json_get "$TMP/j" "d['error']['message']" | grep -q 'out of host memory' ||
            fail "report --json --seq $seqs out of memory: exit $rc: $(cat "$TMP/j")"
    done
    "$BR" -V >"$TMP/out" 2>&1
    grep -q '^features cpu' "$TMP/out" && grep -q '^commit ' "$TMP/out" ||
        fail "report -V: $(cat "$TMP/out")"
    # --probe: the transports after the backends (libfabric, interfaces, MPI)
    expect 0 "report probe" --probe
    grep -q '^transports' "$TMP/out" && grep -q '^  libfabric' "$TMP/out" &&
        grep -q '^  interface lo: 127.0.0.1' "$TMP/out" && grep -q '^  mpi: burstrun built' "$TMP/out" ||
        fail "report --probe: no transports: $(tail -n 8 "$TMP/out")"
    "$BR" --probe --json >"$TMP/j" 2>/dev/null
    [ "$(json_get "$TMP/j" "sorted(d['transports']) == ['interfaces', 'libfabric', 'mpi'] and \
        'usable' in d['transports']['libfabric'] and 'built' in d['transports']['mpi'] and \
        '127.0.0.1' in [i['address'] for i in d['transports']['interfaces']] and \
        len(d['backends']) > 0")" = True ] || fail "report --probe --json: $(cat "$TMP/j")"
    # the progress line on a terminal's stderr, with --json and ranks as threads too (script(1)
    # gives the terminal; a slow rank makes the job last past the line's first 2 s)
    if command -v script >/dev/null; then
        BURST_FAULT=slow:rank=1,ms=150 script -qec "'$BR' --threads -n 2 --seq 64 --heads 1 \
            --head-dim 8 --iters 12 --warmup 0 --fwd-only --json >/dev/null" /dev/null \
            >"$TMP/tty" 2>&1
        tr '\r' '\n' <"$TMP/tty" | grep -q '^.*burstrun: iteration [0-9]*/12' ||
            fail "report: no progress line with --threads --json: $(head -c 300 "$TMP/tty")"
    fi
    # bad values named
    expect_usage "report seq down" "--seq: '4096:1024:x2'" $T --seq 4096:1024:x2
    expect_usage "report seq x1" "--seq: '64:128:x1'" $T --seq 64:128:x1
    expect_usage "report seq many" "more than 64" $T --seq 64:100000:+1
    expect_usage "report seq junk" "--seq: '64,,128'" $T --seq 64,,128
    expect_usage "report dtype" "--dtype: 'fp8'" $T --dtype fp32,fp8
    expect_usage "report head dim" "--head-dim: '12'" $T --head-dim 8,12
    expect_usage "report short point" "--seq 2 is too short" $T --seq 2,64
    expect_usage "report csv dir" "--csv $TMP/none/x.csv" $T --csv "$TMP/none/x.csv"
    expect_usage "report csv empty" "--csv" $T --csv ""
    expect_usage "report hosts sweep" "sweeps" --hosts localhost:2 --seq 64,128 --heads 1 \
        --head-dim 8
    expect_usage "report mpirun args" "--mpirun-args: ' '" --hosts localhost:1 --mpirun-args " "
    expect_usage "report bind-to" "--bind-to: 'socket'" --threads -n 1 --bind-to socket
}

case "$WHAT" in
report) case_report ;;
cancel) case_cancel ;;
sizes) case_sizes ;;
env) case_env ;;
ranges) case_ranges ;;
hostfile) case_hostfile ;;
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
