#!/bin/bash
# scripts/gpu/hetero_check.sh [SRC] - build burst with the cuda and vulkan backends on a GPU machine,
# check heterogeneous rings (cuda, vulkan and cpu ranks), then benchmark shards sized by speed
# (tools/burstbench_hetero.py) with the blocks between the cuda and the vulkan rank going device
# to device through shared memory, and the same staged through the host (BURST_DEVICE_DIRECT=0).
#
# Builds SRC (default: this checkout) into /tmp/burst-hetero-build (BURST_BENCH_ARCHS, default 90a),
# runs test_staging, test_hetero mixed (cpu + vulkan ranks on the GPU) and tests/burstrun_hetero.sh
# gpu (cuda + vulkan ranks), then, with BURST_BENCH_HETERO="<burstbench_hetero.py arguments>",
# the benchmark both ways (BURST_BENCH_HETERO_STAGED=0: shared only) and one verbose burstrun per way
# (BURST_BENCH_VERBOSE_HETERO="<burstrun arguments>": per-rank compute / wait). Logs and CSV
# go to $OUT (or /tmp/out); a short summary is printed last. Run from the repo root on a machine
# with an NVIDIA GPU, its Vulkan driver, nvcc, meson, ninja and cmocka, e.g.:
#   BURST_BENCH_HETERO='-n 2 --backends cuda,vulkan --threads --seq 32768 --heads 8 \
#       --head-dim 128 --dtype fp16 --causal --fwd-only' bash scripts/gpu/hetero_check.sh
source "$(dirname "$0")/check_lib.sh" "$@"
b=/tmp/burst-hetero-build
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt" 2>&1
if [ ! -d "$b" ]; then
    step setup meson setup "$b" "$src" -Dvulkan=enabled -Dcuda=enabled -Dmpi=disabled \
        -Dwerror=false "-Dnvcc_archs=${BURST_BENCH_ARCHS:-90a}" || { tail -n 30 "$out/setup.log"; exit 1; }
fi
step build ninja -C "$b" tools/burstrun tests/test_staging tests/test_hetero ||
    { tail -n 30 "$out/build.log"; exit 1; }
BR=$b/tools/burstrun
if [ "${BURST_BENCH_HETERO_TESTS:-1}" = 1 ]; then
    step test_staging "$b/tests/test_staging"
    step hetero_mixed "$b/tests/test_hetero" mixed
    step burstrun_hetero_gpu sh "$src/tests/burstrun_hetero.sh" "$BR" shm gpu
    tail -n 5 "$out/burstrun_hetero_gpu.log"
fi
if [ -n "${BURST_BENCH_HETERO:-}" ]; then
    (cd "$out" && python3 "$src/tools/burstbench_hetero.py" --burstrun "$BR" \
        $BURST_BENCH_HETERO --csv burstbench_hetero_shared.csv) >"$out/bench_shared.log" 2>&1
    summary+=("bench shared rc=$?")
    if [ "${BURST_BENCH_HETERO_STAGED:-1}" = 1 ]; then
        (cd "$out" && BURST_DEVICE_DIRECT=0 python3 "$src/tools/burstbench_hetero.py" \
            --burstrun "$BR" $BURST_BENCH_HETERO --csv burstbench_hetero_staged.csv) \
            >"$out/bench_staged.log" 2>&1
        summary+=("bench staged rc=$?")
    fi
    if [ -n "${BURST_BENCH_VERBOSE_HETERO:-}" ]; then
        BURST_VK_PROFILE=1 BURST_LOG=warn,vulkan=info "$BR" $BURST_BENCH_VERBOSE_HETERO --verbose >"$out/verbose_shared.log" 2>&1
        [ "${BURST_BENCH_HETERO_STAGED:-1}" = 1 ] && BURST_DEVICE_DIRECT=0 "$BR" $BURST_BENCH_VERBOSE_HETERO \
            --verbose >"$out/verbose_staged.log" 2>&1
        for w in shared staged; do
            [ -f "$out/verbose_$w.log" ] || continue
            echo "== verbose $w"
            grep -E "^ *rank [0-9]|^forward|^backward|^phase|profile:|transfers" \
                "$out/verbose_$w.log" | tail -n 12
        done
    fi
    for w in shared staged; do
        [ -f "$out/bench_$w.log" ] || continue
        echo "== bench $w"
        grep -v '^\$\|^{' "$out/bench_$w.log" | tail -n 12
    done
fi
for f in test_staging hetero_mixed; do
    [ -f "$out/$f.log" ] && { echo "== $f"; grep -E "FAILED|PASSED|error" "$out/$f.log" | tail -n 4; }
done
echo "== $(tr '\n' ' ' <"$out/gpu.txt")"
printf '%s\n' "${summary[@]}"
