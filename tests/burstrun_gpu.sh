#!/bin/sh
# tests/burstrun_gpu.sh BURSTRUN  (suite 'gpu': the ring on GPUs through burstrun)
#
# cuda ranks as threads of one process move their blocks device to device ("transfers":
# "device"), pass --check, and give bitwise the results of the same ring staged through host
# memory (BURST_DEVICE_DIRECT=0, --deterministic --hash); on a machine with 2+ GPUs the same with
# one rank per GPU (--device 0,1: peer copies over NVLink / PCIe), bitwise equal to the one-GPU
# ring; cuda rank processes (staged over shm) pass --check; a message dropped on the device ring
# (BURST_FAULT) makes every rank fail within the timeout instead of hanging; a cuda rank process
# killed in the middle of the backward stops the job naming the rank.
# Exit 77 (SKIP) without a usable CUDA device.
set -u
BR=$1
. "$(dirname "$0")/burstrun_lib.sh"
test_init burstrun_gpu
JOB="--backend cuda --seq 1536 --heads 4 --kv-heads 2 --head-dim 128 --dtype bf16 --causal
     --layout zigzag --warmup 0 --iters 1 --seed $SEED"

if ! "$BR" --threads -n 1 $JOB >"$TMP/probe" 2>&1; then
    echo "SKIP: no usable cuda device:"
    tail -n 3 "$TMP/probe"
    exit 77
fi
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')

# dropped NAME COMMAND...: a job with a dropped message fails (not 0), within 60 s (124: hung)
dropped() {
    name=$1
    shift
    t0=$(date +%s)
    timeout 120 "$@" >"$TMP/$name" 2>"$TMP/$name.err"
    rc=$?
    t1=$(date +%s)
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "$name: burstrun exited $rc (0: no error; 124: hung)"
    [ $((t1 - t0)) -le 60 ] || fail "$name: took $((t1 - t0)) s"
    echo "$name: exit $rc after $((t1 - t0)) s: $(tail -n 1 "$TMP/$name.err")"
}

# field NAME FILE: a JSON string field's value
field() { grep -o "\"$1\": \"[^\"]*\"" "$2" | head -n 1 | sed 's/.*: "\(.*\)"/\1/'; }

# ring NAME ARGS...: run with --check --json --deterministic --hash; check passes
ring() {
    name=$1
    shift
    if ! "$BR" "$@" $JOB --check --json --deterministic --hash >"$TMP/$name" 2>"$TMP/$name.err"; then
        fail "$name: burstrun $* failed: $(tail -n 3 "$TMP/$name.err")"
        return
    fi
    [ "$(field check "$TMP/$name")" = pass ] || fail "$name: --check did not pass"
    echo "$name: check $(field check "$TMP/$name"), transfers $(field transfers "$TMP/$name"), hash $(field output_hash "$TMP/$name")"
}

for bwd in burst ring; do
    ring dev_$bwd --threads -n 3 --bwd $bwd
    [ "$(field transfers "$TMP/dev_$bwd")" = device ] || fail "dev_$bwd: transfers is not device"
    BURST_DEVICE_DIRECT=0 ring staged_$bwd --threads -n 3 --bwd $bwd
    [ "$(field transfers "$TMP/staged_$bwd")" = staged ] || fail "staged_$bwd: transfers is not staged"
    [ "$(field output_hash "$TMP/dev_$bwd")" = "$(field output_hash "$TMP/staged_$bwd")" ] ||
        fail "$bwd: device-to-device and staged rings differ"
    if [ "$NGPU" -ge 2 ]; then
        ring gpus_$bwd --threads -n 3 --device 0,1 --bwd $bwd
        [ "$(field transfers "$TMP/gpus_$bwd")" = device ] || fail "gpus_$bwd: transfers is not device"
        [ "$(field output_hash "$TMP/dev_$bwd")" = "$(field output_hash "$TMP/gpus_$bwd")" ] ||
            fail "$bwd: the ring over $NGPU GPUs differs from the one-GPU ring"
    fi
done
if "$BR" --help 2>&1 | grep -q -- "--fabric"; then
    # rank processes: device to device through CUDA IPC, bitwise the staged ring's and the
    # threads' results
    ring thr2 --threads -n 2
    ring procs -n 2 --fabric shm
    [ "$(field transfers "$TMP/procs")" = device ] || fail "procs: transfers is not device"
    BURST_DEVICE_DIRECT=0 ring procs_staged -n 2 --fabric shm
    [ "$(field transfers "$TMP/procs_staged")" = staged ] || fail "procs_staged: transfers is not staged"
    [ "$(field output_hash "$TMP/procs")" = "$(field output_hash "$TMP/procs_staged")" ] ||
        fail "procs: the IPC and the staged rings differ"
    [ "$(field output_hash "$TMP/procs")" = "$(field output_hash "$TMP/thr2")" ] ||
        fail "procs: rank processes and rank threads differ"
    if [ "$NGPU" -ge 2 ]; then
        ring procs_gpus -n 2 --device 0,1 --fabric shm
        [ "$(field transfers "$TMP/procs_gpus")" = device ] || fail "procs_gpus: transfers is not device"
        [ "$(field output_hash "$TMP/procs")" = "$(field output_hash "$TMP/procs_gpus")" ] ||
            fail "procs_gpus: the ring over 2 GPUs differs from the one-GPU ring"
    fi
    # a dropped device message between processes: every rank fails within the timeout
    dropped pdrop env BURST_FAULT="drop:rank=0,phase=bwd,step=0" "$BR" -n 2 $JOB --timeout 5
    # a cuda rank process killed at backward step 1: the job stops, naming it
    "$BR" -n 2 $JOB --timeout 20 --test-kill-rank 1 --test-kill-phase bwd --test-kill-step 1 \
        >"$TMP/kill" 2>"$TMP/kill.err"
    rc=$?
    [ $rc -ne 0 ] || fail "kill: burstrun exited 0 after a rank was killed"
    grep -q "rank 1" "$TMP/kill.err" || fail "kill: the message does not name rank 1: $(tail -n 2 "$TMP/kill.err")"
    echo "kill: exit $rc, $(grep -m 1 'rank 1' "$TMP/kill.err")"
fi
# a dropped device-to-device message: every rank fails within the timeout (5 s), nobody hangs
dropped drop env BURST_FAULT="drop:rank=0,phase=fwd,step=0" BURST_TIMEOUT_MS=5000 "$BR" --threads \
    -n 2 $JOB

[ $FAILS -eq 0 ] && echo "PASS" && exit 0
echo "$FAILS failure(s)"
exit 1
