#!/bin/bash
# scripts/gpu/stage_check.sh - the staged ring (pinned host buffers between rank processes: the path
# between hosts) on a GPU machine: correctness of pipelined staging, then its speed beside the
# unpipelined staging and the CUDA IPC ring. Builds like scripts/gpu/ring_check.sh (same build folder).
#   check: burstrun --check with BURST_STAGE_CHUNK_BYTES=65536 (every block in chunks) on rank
#          processes (shm) and rank threads, BURST_DEVICE_DIRECT=0, against the fp64 reference,
#          and bitwise (--hash) against the device-to-device ring;
#   bench (unless STAGE_BENCH=0): rank processes on 2 GPUs, bf16, H = 32, d = 128, causal,
#          burst backward, at STAGE_SEQS (default 32768,131072) over each STAGE_FABRICS (default
#          shm,tcp): staged in chunks (BURST_STAGE_CHUNK_BYTES=8388608), staged whole (the
#          default), and (shm) the CUDA IPC ring.
# Prints a table; logs go to $OUT (or /tmp/out). Run from the repo root on a machine with two
# or more NVIDIA GPUs, nvcc, libfabric, meson, ninja and cmocka: bash scripts/gpu/stage_check.sh
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/out}
b=/tmp/burst-ring-build
mkdir -p "$out"
if [ ! -d "$b" ]; then
    meson setup "$b" "$src" -Dvulkan=disabled -Dcuda=enabled -Dwerror=false \
        "-Dnvcc_archs=${BURST_BENCH_ARCHS:-90a}" >"$out/setup.log" 2>&1 || { tail -n 30 "$out/setup.log"; exit 1; }
fi
ninja -C "$b" tools/burstrun >"$out/build.log" 2>&1 || { tail -n 30 "$out/build.log"; exit 1; }
br="$b/tools/burstrun"
j() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
rc=0
for launch in "--fabric shm" "--threads"; do
    small="$launch -n 2 --backend cuda --device 0,1 --seq 2048 --heads 4 --head-dim 128 --dtype bf16 --causal --layout zigzag --deterministic --hash --json --iters 1 --warmup 0 --seed 7"
    ref=$($br $small 2>>"$out/check.log" | j 'd["output_hash"]')
    got=$(BURST_DEVICE_DIRECT=0 BURST_STAGE_CHUNK_BYTES=65536 $br $small --check 2>>"$out/check.log" |
          j 'd["check"]+" "+d["transfers"]+" "+str(d["output_hash"])')
    echo "check $launch: device $ref, chunked staged: $got"
    case "$got" in "pass staged $ref") ;; *) rc=1; echo "  MISMATCH" ;; esac
done
[ "${STAGE_BENCH:-1}" = 0 ] && exit $rc
printf '%-6s %7s %-18s %9s %9s %7s %7s\n' fabric N transfers fwd_ms bwd_ms ovl_f ovl_b
for fab in $(echo "${STAGE_FABRICS:-shm,tcp}" | tr , ' '); do
    for n in $(echo "${STAGE_SEQS:-32768,131072}" | tr , ' '); do
        for mode in chunked whole ipc; do
            [ "$mode" = ipc ] && [ "$fab" != shm ] && continue
            env=(BURST_DEVICE_DIRECT=0)
            [ "$mode" = chunked ] && env+=(BURST_STAGE_CHUNK_BYTES=8388608)
            [ "$mode" = ipc ] && env=()
            line=$(env "${env[@]}" $br --fabric $fab -n 2 --backend cuda --device 0,1 --seq $n \
                --heads 32 --head-dim 128 --dtype bf16 --causal --layout zigzag --bwd burst \
                --iters 3 --warmup 1 --json 2>>"$out/bench.log" |
                j '"%s %.1f %.1f %.3f %.3f" % (d["transfers"], d["fwd_ms"], d["bwd_ms"], d["overlap"]["fwd"], d["overlap"]["bwd"])')
            printf '%-6s %7s %-18s %s\n' "$fab" "$n" "$mode:${line%% *}" "${line#* }"
        done
    done
done | tee "$out/stage.txt"
exit $rc
