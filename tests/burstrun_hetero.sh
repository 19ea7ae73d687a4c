#!/bin/sh
# tests/burstrun_hetero.sh BURSTRUN shm|tcp cpu|vulkan|gpu  (heterogeneous rings through burstrun)
#
#   cpu     (suite 'net') shards by --weights and by measured speed (--weights auto) pass
#           --check with rank processes and with --threads; the JSON has the shard lengths
#           (weighted: the documented rounding) and, for auto, rank_speeds and ideal_fwd_ms;
#           processes and threads give bitwise equal results for the same weights
#           (--deterministic --hash); ranks with different --num-threads; a rank process whose
#           weights or head dim differ fails every rank naming the rank and the field (exit 3);
#           --backends cuda,cpu without a usable CUDA device fails naming rank 0 and "cuda";
#           bad --weights / --backends values are usage errors (exit 2)
#   vulkan  (suite 'vulkan') cpu and vulkan (lavapipe) ranks in one ring, as rank processes and
#           as threads, uneven and measured shards: --check passes, and processes equal threads
#           bitwise (--deterministic --hash); an inference job (--prefill, --decode) on a vulkan
#           and a cpu rank process passes its check
#   gpu     (suite 'gpu') cuda and vulkan ranks on one GPU as threads: --check passes with the
#           blocks going device to device through vulkan memory imported by cuda ("transfers":
#           "device"), both orders, both backward patterns, uneven shards; a cuda, vulkan, cpu
#           ring ("device+staged"); bitwise equal to the same job staged (BURST_DEVICE_DIRECT=0)
#           and as rank processes; with the vulkan rank on a second GPU, the same device to
#           device (peer to peer: "device", both orders) and bitwise equal to one GPU and staged
# Exit 77 (SKIP) when the provider (or, for vulkan, a Vulkan device; for gpu, a CUDA device and
# a Vulkan GPU) is unavailable.
set -u
BR=$1
PROV=$2
WHAT=$3
. "$(dirname "$0")/burstrun_lib.sh"
test_init burstrun_hetero
SMALL="--seq 96 --heads 2 --kv-heads 1 --head-dim 32 --warmup 0 --iters 1 --seed $SEED"

# run NAME EXPECTED_RC ARGS...: burstrun's output in $TMP/NAME, its exit status checked
run() {
    name=$1
    want=$2
    shift 2
    "$BR" "$@" >"$TMP/$name" 2>"$TMP/$name.err"
    rc=$?
    if [ "$rc" -ne "$want" ]; then
        fail "$name: burstrun $* exited $rc, expected $want"
        cat "$TMP/$name" "$TMP/$name.err"
    fi
}

# has NAME TEXT: output (stdout + stderr) of run NAME contains TEXT
has() {
    cat "$TMP/$1" "$TMP/$1.err" | grep -qF -- "$2" || {
        fail "$1: output lacks '$2'"
        cat "$TMP/$1" "$TMP/$1.err"
    }
}

# has_fail_once NAME: the plan mismatch is reported once for the job, by burstrun, naming the
# rank that found it first (which rank compares first is a race), not once per rank
has_fail_once() {
    n=$(cat "$TMP/$1" "$TMP/$1.err" | grep -c "burst_plan_create failed")
    cat "$TMP/$1" "$TMP/$1.err" | grep "^burstrun: rank [0-9]" |
        grep -q "rank [0-9]: burst_plan_create failed: plans differ" && [ "$n" = 1 ] || {
        fail "$1: the plans' mismatch is not reported once, naming a rank ($n reports)"
        cat "$TMP/$1" "$TMP/$1.err"
    }
}

# has_rank NAME RANK: the mismatch names rank RANK (not 0) as the one whose plan differs:
# found by another rank ("the plan of rank RANK differs"), or by RANK itself first, against
# rank 0's plan
has_rank() {
    cat "$TMP/$1" "$TMP/$1.err" | grep -qF -e "the plan of rank $2 differs" \
        -e "rank $2: burst_plan_create failed: plans differ between ranks: burst_plan_create: the plan of rank 0 differs from this rank's ($2)" || {
        fail "$1: output does not name rank $2"
        cat "$TMP/$1" "$TMP/$1.err"
    }
}

hash_of() {
    sed -n 's/.*"output_hash": "\([0-9a-f]*\)".*/\1/p' "$TMP/$1"
}

need_fabric "$BR" "$PROV" $SMALL

case "$WHAT" in
cpu)
    for layout in natural zigzag striped; do
        run "w_$layout" 0 -n 3 --fabric "$PROV" $SMALL --causal --layout "$layout" \
            --weights 1,2,3 --check --json
        has "w_$layout" '"check": "pass"'
        has "w_$layout" '"weights": "given"'
        has "w_$layout" '"shard_lens": [16, 32, 48]'
    done
    # quotas 96 * (1, 1, 5) / 7 = 13.71, 13.71, 68.57: floors 13, 13, 68, the two tokens left
    # to the largest remainders (ranks 0 and 1)
    run w_round 0 -n 3 --fabric "$PROV" $SMALL --layout zigzag --weights 1,1,5 --check --json
    has w_round '"shard_lens": [14, 14, 68]'
    run w_bwd_ring 0 -n 4 --fabric "$PROV" $SMALL --causal --layout striped --bwd ring \
        --weights 4,1,2,1 --check --json
    has w_bwd_ring '"check": "pass"'
    run auto 0 -n 3 --fabric "$PROV" $SMALL --causal --weights auto --num-threads 2,1,1 \
        --check --json
    has auto '"check": "pass"'
    has auto '"weights": "auto"'
    has auto '"rank_speeds": ['
    has auto '"ideal_fwd_ms": '
    run auto_threads 0 -n 3 --threads $SMALL --causal --weights auto --check --json
    has auto_threads '"rank_speeds": ['
    has auto_threads '"check": "pass"'
    # the same weighted job as processes and as threads: bitwise equal
    run det_p 0 -n 4 --fabric "$PROV" $SMALL --causal --weights 3,1,1,2 --deterministic --hash \
        --json
    run det_t 0 -n 4 --threads $SMALL --causal --weights 3,1,1,2 --deterministic --hash \
        --num-threads 1,2 --json
    [ -n "$(hash_of det_p)" ] && [ "$(hash_of det_p)" = "$(hash_of det_t)" ] ||
        fail "processes and threads differ: $(hash_of det_p) vs $(hash_of det_t)"
    # one rank process with other weights or another head dim: reported once, naming the rank
    # and the field
    run mm_weights 3 -n 3 --fabric "$PROV" $SMALL --weights 1,2,3 --test-mismatch 1:weights
    has_fail_once mm_weights
    has mm_weights "field shard_weights"
    has_rank mm_weights 1
    run mm_head_dim 3 -n 3 --fabric "$PROV" $SMALL --test-mismatch 2:head_dim
    has_fail_once mm_head_dim
    has mm_head_dim "field head_dim"
    has_rank mm_head_dim 2
    # a backend missing on one rank (no GPU here, or a build without cuda)
    if ! "$BR" --threads -n 1 --backend cuda $SMALL >"$TMP/cuda" 2>&1; then
        want=3 # no device: a runtime error; a build without cuda: a usage error
        grep -q "not a backend of this build" "$TMP/cuda" && want=2
        for mode in "--fabric $PROV" --threads; do
            run nocuda "$want" -n 2 $mode $SMALL --backends cuda,cpu
            has nocuda 'rank 0: backend "cuda" (--backends cuda,cpu)'
        done
    fi
    run bad_w_count 2 -n 3 --threads $SMALL --weights 1,2
    has bad_w_count "--weights has 2 entries for -n 3"
    run bad_w_value 2 -n 2 --threads $SMALL --weights 1,-2
    has bad_w_value "entry 1 is '-2'"
    run bad_backends 2 -n 2 --threads $SMALL --backends cpu,gpu
    has bad_backends "entry 1 is 'gpu'"
    run long_backends 2 -n 2 --threads $SMALL --backends cpu,cpu,cpu
    has long_backends "--backends has 3 entries for -n 2"
    run both_backend 2 -n 2 --threads $SMALL --backend cpu --backends cpu
    has both_backend "exclude each other"
    ;;
vulkan)
    if ! "$BR" --threads -n 1 --backend vulkan $SMALL >"$TMP/vk" 2>&1; then
        echo "SKIP: no Vulkan device: $(tail -n 1 "$TMP/vk")"
        exit 77
    fi
    for mode in "--fabric $PROV" --threads; do
        run mixed 0 -n 3 $mode $SMALL --causal --layout zigzag --backends cpu,vulkan \
            --weights 3,1,2 --check --json
        has mixed '"backend": "cpu,vulkan,cpu"'
        has mixed '"check": "pass"'
        run mixed_auto 0 -n 2 $mode $SMALL --causal --layout striped --bwd ring \
            --backends vulkan,cpu --weights auto --check --json
        has mixed_auto '"check": "pass"'
        has mixed_auto '"rank_speeds": ['
    done
    run vk_p 0 -n 4 --fabric "$PROV" $SMALL --causal --backends cpu,vulkan --weights 2,1,2,1 \
        --deterministic --hash --json
    run vk_t 0 -n 4 --threads $SMALL --causal --backends cpu,vulkan --weights 2,1,2,1 \
        --deterministic --hash --json
    [ -n "$(hash_of vk_p)" ] && [ "$(hash_of vk_p)" = "$(hash_of vk_t)" ] ||
        fail "cpu+vulkan: processes and threads differ: $(hash_of vk_p) vs $(hash_of vk_t)"
    run vk_kv 0 -n 2 --fabric "$PROV" --backends vulkan,cpu --heads 4 --kv-heads 2 \
        --head-dim 32 --prefill 100 --decode 6 --spec 2 --check --json --seed "$SEED"
    has vk_kv '"backend": "vulkan,cpu"'
    has vk_kv '"check": "pass"'
    ;;
gpu)
    if ! "$BR" --threads -n 1 --backend cuda $SMALL >"$TMP/cu" 2>&1; then
        echo "SKIP: no CUDA device: $(tail -n 1 "$TMP/cu")"
        exit 77
    fi
    "$BR" --probe --json >"$TMP/probe_all" 2>&1
    if ! grep -q '"type": "\(discrete\|integrated\)' "$TMP/probe_all"; then
        echo "SKIP: no Vulkan GPU"
        exit 77
    fi
    GPU="--seq 2048 --heads 4 --kv-heads 2 --head-dim 128 --dtype fp16 --warmup 0 --iters 1 \
--seed $SEED"
    for bk in cuda,vulkan vulkan,cuda; do
        run "sh_zz_$bk" 0 -n 2 --threads $GPU --causal --layout zigzag --backends "$bk" \
            --weights 3,1 --check --json
        has "sh_zz_$bk" '"check": "pass"'
        has "sh_zz_$bk" '"transfers": "device"'
        run "sh_ring_$bk" 0 -n 2 --threads $GPU --layout striped --bwd ring --backends "$bk" \
            --check --json
        has "sh_ring_$bk" '"check": "pass"'
        has "sh_ring_$bk" '"transfers": "device"'
    done
    run sh_three 0 -n 3 --threads $GPU --causal --backends cuda,vulkan,cpu --check --json
    has sh_three '"check": "pass"'
    has sh_three '"transfers": "device+staged"'
    # the same bytes whichever way they travel: shared, staged, rank processes
    DET="-n 2 $GPU --causal --layout zigzag --backends cuda,vulkan --weights 2,1 --deterministic \
--hash --json"
    run det_shared 0 --threads $DET
    has det_shared '"transfers": "device"'
    BURST_DEVICE_DIRECT=0
    export BURST_DEVICE_DIRECT
    run det_staged 0 --threads $DET
    unset BURST_DEVICE_DIRECT
    has det_staged '"transfers": "staged"'
    run det_procs 0 --fabric "$PROV" $DET
    for other in det_staged det_procs; do
        [ -n "$(hash_of det_shared)" ] && [ "$(hash_of det_shared)" = "$(hash_of $other)" ] ||
            fail "cuda+vulkan: shared and $other differ: $(hash_of det_shared) vs $(hash_of $other)"
    done
    if "$BR" --threads -n 1 --backend cuda --device 1 $SMALL >/dev/null 2>&1; then
        # the cuda rank imports the vulkan rank's memory on the other GPU and copies peer to
        # peer (NVLink or PCIe; GPUs that cannot reach each other would stage)
        for bk in cuda,vulkan vulkan,cuda; do
            run "two_gpus_$bk" 0 -n 2 --threads $GPU --causal --backends "$bk" --device 0,1 \
                --weights 3,1 --check --json
            has "two_gpus_$bk" '"check": "pass"'
            has "two_gpus_$bk" '"transfers": "device"'
        done
        run two_det 0 --threads $DET --device 0,1
        has two_det '"transfers": "device"'
        BURST_DEVICE_DIRECT=0
        export BURST_DEVICE_DIRECT
        run two_det_staged 0 --threads $DET --device 0,1
        unset BURST_DEVICE_DIRECT
        has two_det_staged '"transfers": "staged"'
        for other in two_det two_det_staged; do
            [ -n "$(hash_of det_shared)" ] && [ "$(hash_of det_shared)" = "$(hash_of $other)" ] ||
                fail "cuda+vulkan: shared and $other differ: $(hash_of det_shared) vs $(hash_of $other)"
        done
        echo "two GPUs: cuda,vulkan and vulkan,cuda on devices 0,1 ran (peer to peer checked)"
    else
        echo "one CUDA device: the two-GPU cases did not run"
    fi
    ;;
*)
    echo "usage: $0 BURSTRUN shm|tcp cpu|vulkan|gpu"
    exit 2
    ;;
esac

[ "$FAILS" -eq 0 ] || {
    echo "$FAILS failure(s)"
    exit 1
}
echo "all passed"
