#!/bin/sh
# tests/burstrun_test.sh BURSTRUN shm|tcp results|faults|mpi  (suite 'net')
#
#   results  burstrun -n 4 --check over the provider passes and names the fabric; --json has
#            rank_mode, fabric, hosts, overlap; rank processes give bitwise the results of
#            --threads (--deterministic --hash: FNV-1a of O, lse, dQ, dK, dV) for G = 2, 3, 4, 8;
#            head groups (--workspace 1) pass the check and equal the unsplit job bitwise;
#            bad --workspace values are usage errors; the default job with --json is the default
#            job; an inference job (--prefill, --decode) passes its check over the provider;
#            --pingpong reports fi_pingpong's columns over the provider; --bind-to core |
#            numa reports each rank's CPUs, and the rank processes run there (/proc; under
#            taskset -c 0: CPU 0 for every rank); bad values are usage errors
#   faults   a rank SIGKILLed before its backward, one 100 ms into its forward, and Ctrl-C
#            (SIGINT to burstrun): burstrun exits non-zero within the timeout naming the rank,
#            and no rank process or /dev/shm entry is left behind (the listening rendezvous
#            socket lives in burstrun itself, gone with it); then a rank that kills itself at
#            each ring step of the forward and of the backward (--test-kill-step); burstrun
#            itself SIGKILLed once its ranks have joined and at several points while they join
#            (BURST_FAULT join: a rank that joins late), and its stdout closed by the reader
#            (reported, exit 3)
#   mpi      --hosts / --hostfile through Open MPI's mpirun on this host: bitwise the results of
#            --threads, --check passes, a rank killed at a ring step is named (exit 3), bad
#            --hosts values are usage errors; --bind-to and --mpirun-args reach mpirun, and
#            BURST_* / FI_* variables travel with the job
# Exit 77 (SKIP) when the provider, mpirun or burstrun's MPI support is unavailable.
# BURST_TEST_TIME_SCALE (default 1; sanitizer builds set 3) multiplies the time limits: the
# jobs' compute counts against them and instrumented code runs several times slower.
set -u
BR=$1
PROV=$2
WHAT=$3
. "$(dirname "$0")/burstrun_lib.sh"
test_init burstrun_test
SMALL="--seq 256 --heads 2 --kv-heads 1 --head-dim 32 --warmup 0 --iters 1 --seed $SEED"

# Leftovers of the rank processes whose pids burstrun --verbose printed in file $2: a process
# still running, or a /dev/shm entry of the shm provider ("<pid>:...") made since the job
# started ($TMP/stamp, touched before each job). Other jobs may run on the host meanwhile, so
# only these pids count; and only new entries: an older one with the same name belongs to an
# earlier process that had the same pid (pids are reused).
check_leftovers() {
    pids=$(rank_pids "$2")
    [ -n "$pids" ] || { cat "$2"; fail "$1: burstrun --verbose printed no pids"; }
    for p in $pids; do
        if rank_alive $p; then
            fail "$1: rank process $p is still running"
        fi
        for f in $(find /dev/shm -maxdepth 1 -name "$p:*" -newer "$TMP/stamp" 2>/dev/null); do
            fail "$1: $f left behind"
        done
    done
}

# wait_gone PIDS: until none of these rank processes runs, at most 10 s (times the scale): a
# rank that had unlinked its segment but not yet re-armed its death signal when the launcher
# died leaves through its own exit path, which a loaded machine runs slowly
wait_gone() {
    for _i in $(seq $((100 * ${BURST_TEST_TIME_SCALE:-1}))); do
        _alive=0
        for _p in $1; do
            rank_alive $_p && _alive=1
        done
        [ $_alive = 0 ] && return
        sleep 0.1
    done
}

need_fabric "$BR" "$PROV" $SMALL

T0=$(now_ms)
case "$WHAT" in
results)
    # (1) a checked job: table and JSON
    touch "$TMP/stamp"
    "$BR" -n 4 --check --causal --seq 512 --fabric "$PROV" --seed "$SEED" --verbose \
        >"$TMP/table" 2>&1 || fail "burstrun -n 4 --check --fabric $PROV exited $?"
    cat "$TMP/table"
    check_leftovers "results" "$TMP/table"
    grep -q "4 rank processes on 1 host, fabric $PROV" "$TMP/table" || fail "table does not name fabric $PROV"
    grep -q "^result   PASS" "$TMP/table" || fail "table: check did not pass"
    "$BR" -n 4 --check --causal --seq 512 --fabric "$PROV" --seed "$SEED" --json >"$TMP/json" 2>"$TMP/json.err" ||
        fail "burstrun --json exited $?"
    cat "$TMP/json"
    for key in '"rank_mode": "processes"' "\"fabric\": \"$PROV\"" '"hosts": 1' '"overlap": {"fwd": ' \
        '"fwd_step_ms": {"compute": ' '"per_rank": [' '"check": "pass"'; do
        grep -qF "$key" "$TMP/json" || fail "--json lacks $key"
    done
    [ "$(head -c 1 "$TMP/json")" = "{" ] && [ "$(wc -l <"$TMP/json")" -eq 1 ] ||
        fail "--json stdout is not one JSON object"
    # (2) processes == threads, bitwise
    for g in "2 --layout natural" "3 --layout striped --bwd ring" "4 --causal" "8 --causal --window 40,-1"; do
        set -- $g
        n=$1
        shift
        h1=$("$BR" -n $n "$@" $SMALL --deterministic --hash --json --threads | grep -o '"output_hash": "[0-9a-f]*"')
        h2=$("$BR" -n $n "$@" $SMALL --deterministic --hash --json --fabric "$PROV" | grep -o '"output_hash": "[0-9a-f]*"')
        echo "G=$n $*: threads $h1, processes ($PROV) $h2"
        [ -n "$h1" ] && [ "$h1" = "$h2" ] || fail "G=$n $*: threads and processes differ"
    done
    # (3) head groups (--workspace 1: one K/V head per group) over the provider: the check
    # passes, the JSON says 4 groups, the hash equals the unsplit job's; bad values are refused
    W="-n 2 --causal --seq 2048 --heads 4 --head-dim 32 --fabric $PROV --seed $SEED --json"
    "$BR" $W --workspace 1 --check --iters 1 --warmup 0 >"$TMP/ws" 2>&1 ||
        fail "--workspace 1 --check exited $?"
    grep -qF '"head_groups": 4' "$TMP/ws" || fail "--workspace 1: not 4 head groups"
    grep -qF '"check": "pass"' "$TMP/ws" || fail "--workspace 1: check did not pass"
    h1=$("$BR" $W --workspace 1 --deterministic --hash --iters 1 --warmup 0 | grep -o '"output_hash": "[0-9a-f]*"')
    h2=$("$BR" $W --workspace unlimited --deterministic --hash --iters 1 --warmup 0 | grep -o '"output_hash": "[0-9a-f]*"')
    echo "head groups: 4 groups $h1, unsplit $h2"
    [ -n "$h1" ] && [ "$h1" = "$h2" ] || fail "--workspace 1 and unlimited differ"
    for bad in 0 lots -5; do
        "$BR" $W --workspace "$bad" >/dev/null 2>"$TMP/err"
        [ $? -eq 2 ] && grep -q -- "--workspace: '$bad'" "$TMP/err" || fail "--workspace $bad is not a usage error naming it"
    done
    # (4) the default job is the same with or without the output flags (--json, --seed):
    # four ranks, 2048 causal tokens, checked
    if [ "$PROV" = shm ]; then
        "$BR" --json --seed "$SEED" >"$TMP/dj" 2>"$TMP/err" || fail "burstrun --json exited $?"
        for key in '"default_job": true' '"ranks": 4' '"seq": 2048' '"causal": true' \
            '"check": "pass"' '"schema_version": '; do
            grep -qF "$key" "$TMP/dj" || fail "the default job with --json lacks $key"
        done
    fi
    # (5) an inference job over the provider: prefill into the sharded key/value cache, then
    # decode steps of two tokens for two sequences, every row checked
    rc=0
    "$BR" -n 3 --heads 4 --kv-heads 1 --head-dim 32 --prefill 200 --decode 20 --batch 2 --spec 2 \
        --check --fabric "$PROV" --seed "$SEED" >"$TMP/kv" 2>&1 || rc=$?
    [ $rc -eq 0 ] || { cat "$TMP/kv"; fail "inference job over $PROV exited $rc"; }
    grep -q "^check     pass: 80 rows" "$TMP/kv" || fail "inference job over $PROV: $(tail -n 4 "$TMP/kv")"
    # (6) --pingpong: fi_pingpong's columns, one row per size from 64 B to 4 MiB, over the
    # provider; --json: the metadata and 9 rows; refused with --threads and -n 3
    IF=
    [ "$PROV" = tcp ] && IF="--iface 127.0.0.1"
    rc=0
    "$BR" --pingpong --fabric "$PROV" $IF --iters 20 >"$TMP/pp" 2>&1 || rc=$?
    [ $rc -eq 0 ] || { cat "$TMP/pp"; fail "--pingpong exited $rc"; }
    grep -q "^bytes *#sent *#ack *total *time *MB/sec *usec/xfer *Mxfers/sec$" "$TMP/pp" ||
        fail "--pingpong: no fi_pingpong header: $(cat "$TMP/pp")"
    [ "$(grep -cE '^[0-9]+[km]? +20 +=20 +[0-9]+[kmg]? +[0-9.]+s +[0-9.]+ +[0-9.]+ +[0-9.]+$' "$TMP/pp")" = 9 ] ||
        fail "--pingpong: not 9 rows of 20 round trips: $(cat "$TMP/pp")"
    grep -q "fabric $PROV" "$TMP/pp" || fail "--pingpong: fabric $PROV not named"
    "$BR" --pingpong --fabric "$PROV" $IF --iters 10 --json >"$TMP/ppj" 2>"$TMP/err" ||
        fail "--pingpong --json exited $?"
    python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
rows = d["pingpong"]
assert d["schema_version"] and len(rows) == 9 and rows[0]["bytes"] == 64, d
assert rows[-1]["bytes"] == 4 << 20 and all(r["sent"] == 10 and r["time_s"] > 0 for r in rows), rows' \
        "$TMP/ppj" || fail "--pingpong --json: $(cat "$TMP/ppj")"
    for bad in "--threads" "-n 3"; do
        "$BR" --pingpong $bad >/dev/null 2>"$TMP/err"
        [ $? -eq 2 ] && grep -q -- "--pingpong" "$TMP/err" || fail "--pingpong $bad is not a usage error"
    done
    # (7) --bind-to: every rank's CPUs reported, the check passes; under taskset -c 0 every
    # rank gets CPU 0 alone (burstrun's own CPUs are split); bad values and --threads refused
    for how in core numa; do
        rc=0
        "$BR" -n 2 --check $SMALL --fabric "$PROV" --bind-to $how >"$TMP/out" 2>&1 || rc=$?
        [ $rc -eq 0 ] || { cat "$TMP/out"; fail "--bind-to $how exited $rc"; }
        for r in 0 1; do
            grep -q "^burstrun: --bind-to $how: rank $r: .*cpus [0-9]" "$TMP/out" ||
                fail "--bind-to $how: no report of rank $r"
        done
        grep -q "^result   PASS" "$TMP/out" || fail "--bind-to $how: check did not pass"
    done
    # the rank processes run where the report says: each one's Cpus_allowed_list (/proc), read
    # while a slow rank keeps the job running (read again for up to 2 s: a process the kernel
    # keeps on one CPU for a moment, e.g. just forked, shows that CPU alone)
    BURST_FAULT=slow:rank=1,ms=200 "$BR" -n 2 $SMALL --iters 8 --fabric "$PROV" --bind-to core \
        --verbose >"$TMP/bind" 2>&1 &
    bpid=$!
    seen=0
    for i in $(seq 100); do
        pids=$(rank_pids "$TMP/bind")
        if [ -n "$pids" ]; then
            r=0
            for p in $pids; do
                want=$(sed -n "s/^burstrun: --bind-to core: rank $r: cpus //p" "$TMP/bind")
                for k in $(seq 40); do
                    got=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "/proc/$p/status" 2>/dev/null)
                    [ -z "$got" ] || [ "$got" = "$want" ] && break
                    sleep 0.05
                done
                [ -n "$got" ] && { [ "$got" = "$want" ] || fail "rank $r runs on $got, reported $want"; seen=$((seen + 1)); }
                r=$((r + 1))
            done
            break
        fi
        sleep 0.05
    done
    wait $bpid || fail "--bind-to core with a slow rank exited $?"
    [ $seen = 2 ] || fail "--bind-to core: read the CPUs of $seen rank processes, not 2: $(cat "$TMP/bind")"
    if command -v taskset >/dev/null; then
        taskset -c 0 "$BR" -n 3 $SMALL --fabric "$PROV" --bind-to core >"$TMP/out" 2>&1 ||
            fail "taskset -c 0 --bind-to core exited $?"
        [ "$(grep -c '^burstrun: --bind-to core: rank [0-2]: cpus 0$' "$TMP/out")" = 3 ] ||
            { cat "$TMP/out"; fail "taskset -c 0 --bind-to core: not every rank on CPU 0"; }
    fi
    "$BR" -n 2 $SMALL --bind-to socket >/dev/null 2>"$TMP/err"
    [ $? -eq 2 ] && grep -q -- "--bind-to: 'socket'" "$TMP/err" || fail "--bind-to socket is not a usage error naming it"
    "$BR" -n 2 $SMALL --threads --bind-to core >/dev/null 2>"$TMP/err"
    [ $? -eq 2 ] && grep -q -- "--threads" "$TMP/err" || fail "--threads --bind-to core is not a usage error"
    "$BR" -n 2 $SMALL --mpirun-args "--display-map" >/dev/null 2>"$TMP/err"
    [ $? -eq 2 ] && grep -q -- "--mpirun-args" "$TMP/err" || fail "--mpirun-args without --hosts is not a usage error"
    ;;
faults)
    TO=$((20 * ${BURST_TEST_TIME_SCALE:-1}))
    # (3) a rank killed just before its backward, while the others are in theirs, and one killed
    # 100 ms into its forward (a long job there, which the kill cuts short: the forward must
    # outlast the delay on a fast machine)
    for k in "2 bwd 1 0 2048" "1 fwd 0 100 4096"; do
        set -- $k
        t=$(now_ms)
        touch "$TMP/stamp"
        "$BR" -n 4 --seq $5 --iters 2 --fabric "$PROV" --timeout $TO --seed "$SEED" \
            --test-kill-rank $1 --test-kill-phase $2 --test-kill-iter $3 --test-kill-delay $4 \
            --verbose >"$TMP/out" 2>"$TMP/err"
        rc=$?
        dt=$(($(now_ms) - t))
        cat "$TMP/err"
        echo "rank $1 killed in the $2 of iteration $3 (+$4 ms): exit $rc after $dt ms"
        [ $rc -eq 3 ] || fail "kill rank $1 ($2): exit status $rc, expected 3"
        grep -q "^burstrun: rank $1 (pid [0-9]*) was killed by signal 9 (SIGKILL)" "$TMP/err" ||
            fail "kill rank $1 ($2): the message does not name rank $1 and SIGKILL"
        [ $dt -lt $((TO * 1000)) ] || fail "kill rank $1 ($2): took $dt ms (timeout ${TO} s)"
        check_leftovers "kill rank $1 ($2)" "$TMP/err"
    done
    # (4) a rank that kills itself at exactly ring step s of its forward / backward (-1: after
    # the last step), every step of both phases of a 4-rank ring
    for ph in fwd bwd; do
        for s in 0 1 2 3 -1; do
            t=$(now_ms)
            touch "$TMP/stamp"
            "$BR" -n 4 --seq 512 --causal --iters 1 --warmup 0 --fabric "$PROV" --timeout $TO \
                --seed "$SEED" --test-kill-rank 1 --test-kill-phase $ph --test-kill-step $s \
                --verbose >"$TMP/out" 2>"$TMP/err"
            rc=$?
            dt=$(($(now_ms) - t))
            echo "rank 1 killed at $ph step $s: exit $rc after $dt ms"
            [ $rc -eq 3 ] || { cat "$TMP/err"; fail "kill at $ph step $s: exit status $rc, expected 3"; }
            grep -q "^burstrun: rank 1 (pid [0-9]*) was killed by signal 9 (SIGKILL)" "$TMP/err" ||
                fail "kill at $ph step $s: the message does not name rank 1 and SIGKILL"
            [ $dt -lt $((TO * 1000)) ] || fail "kill at $ph step $s: took $dt ms (timeout ${TO} s)"
            check_leftovers "kill at $ph step $s" "$TMP/err"
        done
    done
    # Ctrl-C: SIGINT to burstrun alone (its ranks run in their own process group)
    touch "$TMP/stamp"
    "$BR" -n 4 --seq 8192 --iters 50 --fabric "$PROV" --timeout $TO --seed "$SEED" --verbose \
        >"$TMP/out" 2>"$TMP/err" &
    pid=$!
    sleep 1.5
    t=$(now_ms)
    kill -INT $pid
    wait $pid
    rc=$?
    dt=$(($(now_ms) - t))
    cat "$TMP/err"
    echo "SIGINT: exit $rc after $dt ms"
    [ $rc -eq 130 ] || fail "SIGINT: exit status $rc, expected 130"
    grep -q "interrupted by SIGINT" "$TMP/err" || fail "SIGINT: no message"
    [ $dt -lt $((10000 * ${BURST_TEST_TIME_SCALE:-1})) ] || fail "SIGINT: took $dt ms"
    check_leftovers "SIGINT" "$TMP/err"
    # burstrun itself SIGKILLed once its ranks have joined (they die with it: PR_SET_PDEATHSIG;
    # each unlinked its segment on joining), and a reader of its stdout that goes away (SIGPIPE
    # ignored: reported, exit 3): no rank process or /dev/shm segment stays behind
    touch "$TMP/stamp"
    rm -f "$TMP/err" # the wait below must not read the last job's pid line
    "$BR" -n 4 --seq 8192 --iters 500 --fabric "$PROV" --timeout $TO --seed "$SEED" --verbose \
        >"$TMP/out" 2>"$TMP/err" &
    pid=$!
    wait_rank_pids "$TMP/err" 600 # the rank processes are started (--verbose names them)
    sleep $((2 * ${BURST_TEST_TIME_SCALE:-1})) # and have joined: each unlinks its segment then
    rp=$(rank_pids "$TMP/err")
    for i in $(seq $((100 * ${BURST_TEST_TIME_SCALE:-1}))); do
        left=0
        for p in $rp; do
            [ -n "$(find /dev/shm -maxdepth 1 -name "$p:*" 2>/dev/null)" ] && left=1
        done
        [ $left = 0 ] && break
        sleep 0.1
    done
    kill -KILL $pid
    wait $pid
    wait_gone "$rp" # the kernel delivers the ranks' death signals
    check_leftovers "SIGKILL of burstrun" "$TMP/err"
    # burstrun SIGKILLed while its ranks join, at several points: as they start, as soon as
    # their shm segments exist, and 1 s later (rank 2 joins 3 s late: join fault, the others
    # wait for it with their segments made). A joining rank outlives the launcher, sees the
    # rendezvous close and leaves through the path that removes its segment.
    sc=${BURST_TEST_TIME_SCALE:-1}
    for at in start made late; do
        touch "$TMP/stamp"
        rm -f "$TMP/err" # the wait below must not read the last job's pid line
        BURST_FAULT="join:rank=2,ms=$((3000 * sc))" "$BR" -n 3 $SMALL --fabric "$PROV" \
            --timeout $TO --verbose >"$TMP/out" 2>"$TMP/err" &
        pid=$!
        # the whole list of pids written (up to 60 s: a loaded machine starts processes slowly)
        wait_rank_pids "$TMP/err" $((600 * sc))
        rp=$(rank_pids "$TMP/err")
        if [ $at != start ] && [ "$PROV" = shm ]; then
            made=0
            for i in $(seq $((100 * sc))); do
                for p in $rp; do
                    [ -n "$(find /dev/shm -maxdepth 1 -name "$p:*" -newer "$TMP/stamp" \
                        2>/dev/null)" ] && made=$((made + 1))
                done
                [ $made -ge 3 ] && break
                made=0
                sleep 0.05
            done
            [ $made -ge 3 ] || fail "kill in the join ($at): the ranks made no shm segments"
            [ $at = late ] && sleep 1
        fi
        kill -KILL $pid
        wait $pid
        wait_gone "$rp" # rank 2 leaves after its delay
        check_leftovers "SIGKILL of burstrun in the join ($at)" "$TMP/err"
    done
    touch "$TMP/stamp"
    { "$BR" -n 4 $SMALL --fabric "$PROV" --timeout $TO --verbose 2>"$TMP/err"; echo $? >"$TMP/rc"; } |
        true
    rc=$(cat "$TMP/rc")
    [ "$rc" = 3 ] || fail "stdout closed: exit $rc, expected 3"
    grep -q "writing to stdout failed" "$TMP/err" || fail "stdout closed: not reported"
    check_leftovers "stdout closed" "$TMP/err"
    ;;
mpi)
    # (5) --hosts / --hostfile: ranks started by Open MPI's mpirun on this host, bootstrapped
    # through MPI; rank 0 reports. Loopback-only MCA settings for a sandbox; root allowed (CI).
    command -v mpirun >/dev/null || { echo "SKIP: mpirun (Open MPI) not found"; exit 77; }
    export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo \
        OMPI_MCA_oob_tcp_if_include=lo OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    FAB="--fabric $PROV"
    [ "$PROV" = tcp ] && FAB="$FAB --iface 127.0.0.1"
    "$BR" --hosts localhost:1 $SMALL $FAB >"$TMP/probe" 2>&1
    rc=$?
    if [ $rc -eq 2 ] && grep -q "built without MPI" "$TMP/probe"; then
        echo "SKIP: burstrun built without MPI"
        exit 77
    fi
    [ $rc -eq 0 ] || { cat "$TMP/probe"; fail "--hosts localhost:1 exited $rc"; }
    h1=$("$BR" -n 4 --causal $SMALL --deterministic --hash --json --threads | grep -o '"output_hash": "[0-9a-f]*"')
    h2=$("$BR" --hosts localhost:2,127.0.0.1:2 --causal $SMALL $FAB --deterministic --hash --json \
        2>"$TMP/err" | tee "$TMP/json" | grep -o '"output_hash": "[0-9a-f]*"')
    echo "--hosts localhost:2,127.0.0.1:2: threads $h1, mpirun ($PROV) $h2"
    [ -n "$h1" ] && [ "$h1" = "$h2" ] || { cat "$TMP/err"; fail "--hosts: threads and mpirun ranks differ"; }
    grep -qF '"ranks": 4' "$TMP/json" || fail "--hosts: JSON does not say 4 ranks"
    printf 'localhost slots=3 # three ranks\n' >"$TMP/hostfile"
    "$BR" --hostfile "$TMP/hostfile" --check --causal --seq 384 $FAB >"$TMP/table" 2>&1 ||
        { cat "$TMP/table"; fail "--hostfile --check exited $?"; }
    grep -q "^result   PASS" "$TMP/table" || fail "--hostfile: check did not pass"
    grep -q "3 rank processes" "$TMP/table" || fail "--hostfile: not 3 ranks"
    t=$(now_ms)
    "$BR" --hosts localhost:4 --seq 512 --iters 1 --warmup 0 $FAB --timeout 20 --seed "$SEED" \
        --test-kill-rank 1 --test-kill-phase bwd --test-kill-step 1 >"$TMP/out" 2>"$TMP/err"
    rc=$?
    dt=$(($(now_ms) - t))
    echo "--hosts, rank 1 killed at backward step 1: exit $rc after $dt ms"
    [ $rc -eq 3 ] || { cat "$TMP/err"; fail "--hosts kill: exit status $rc, expected 3"; }
    grep -q "^burstrun: rank 1 failed" "$TMP/err" || fail "--hosts kill: the message does not name rank 1"
    # --bind-to and --mpirun-args go to mpirun (its --report-bindings names each rank's
    # binding); the BURST_* and FI_* variables set here travel with the job (-x)
    BURST_FAB_SPIN_US=21 FI_LOG_LEVEL=warn "$BR" --hosts localhost:2 $SMALL $FAB --bind-to core \
        --mpirun-args "--report-bindings  --tag-output" --verbose >"$TMP/out" 2>&1 ||
        { cat "$TMP/out"; fail "--hosts --bind-to core --mpirun-args exited $?"; }
    grep -q "mpirun .*--bind-to core --report-bindings --report-bindings --tag-output" "$TMP/out" ||
        fail "--bind-to / --mpirun-args not on mpirun's command line"
    grep -q "rank 1 bound to" "$TMP/out" || fail "--hosts --bind-to core: mpirun reports no binding"
    grep -q -- "-x BURST_FAB_SPIN_US .*-x FI_LOG_LEVEL\|-x FI_LOG_LEVEL .*-x BURST_FAB_SPIN_US" "$TMP/out" ||
        fail "BURST_* / FI_* variables do not travel with the mpirun job"
    "$BR" --hosts "localhost:0" $SMALL >/dev/null 2>"$TMP/err"
    [ $? -eq 2 ] && grep -q -- "--hosts" "$TMP/err" || fail "--hosts localhost:0 is not a usage error"
    ;;
*)
    echo "unknown case $WHAT"
    exit 2
    ;;
esac
echo "$PROV $WHAT: $([ $FAILS -eq 0 ] && echo ok || echo "$FAILS FAILED") in $(($(now_ms) - T0)) ms"
[ $FAILS -eq 0 ]
