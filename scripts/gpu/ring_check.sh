#!/bin/bash
# scripts/gpu/ring_check.sh [SRC] - build burst on a GPU machine, check the GPU ring, then benchmark it
# beside PyTorch's context_parallel (tools/burstbench_ring.py).
#
# Builds SRC (default: this checkout) into /tmp/burst-ring-build (cuda for BURST_BENCH_ARCHS, default
# 90a; libfabric and MPI where installed), runs the gpu suite's ring tests
# (test_attention / test_determinism / test_groups / test_traffic on cuda ranks that are threads:
# device-to-device blocks, head groups, the device step timeline;
# tests/burstrun_gpu.sh: one rank per GPU, staged vs device bitwise, faults), then, with
# BURST_BENCH_RING="<burstbench_ring.py arguments>", the benchmark. Logs and CSV/SVG go to $OUT
# (or /tmp/out); a short summary is printed last. Run from the repo root on a machine with two
# or more NVIDIA GPUs, nvcc, meson, ninja and cmocka, e.g.:
#   BURST_BENCH_RING='--seqs 32768 --masks causal' bash scripts/gpu/ring_check.sh
source "$(dirname "$0")/check_lib.sh" "$@"
b=/tmp/burst-ring-build
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt" 2>&1
nvidia-smi topo -m >"$out/topo.txt" 2>&1
if [ ! -d "$b" ]; then
    step setup meson setup "$b" "$src" -Dvulkan=disabled -Dcuda=enabled -Dwerror=false \
        "-Dnvcc_archs=${BURST_BENCH_ARCHS:-90a}" || { cat "$out/setup.log" | tail -n 30; exit 1; }
fi
step build ninja -C "$b" tools/burstrun tests/test_attention tests/test_determinism \
    tests/test_staging tests/test_groups tests/test_traffic || { tail -n 30 "$out/build.log"; exit 1; }
if [ "${BURST_BENCH_RING_TESTS:-1}" = 1 ]; then
    step test_staging "$b/tests/test_staging"
    BURST_TEST_BACKEND=cuda step attention_cuda "$b/tests/test_attention"
    BURST_TEST_BACKEND=cuda step determinism_cuda "$b/tests/test_determinism"
    BURST_TEST_BACKEND=cuda step groups_cuda "$b/tests/test_groups"
    BURST_TEST_BACKEND=cuda step traffic_cuda "$b/tests/test_traffic"
    step burstrun_gpu sh "$src/tests/burstrun_gpu.sh" "$b/tools/burstrun"
    tail -n 25 "$out/burstrun_gpu.log"
fi
if [ -n "${BURST_BENCH_RING:-}" ]; then
    (cd "$out" && python3 "$src/tools/burstbench_ring.py" --burstrun "$b/tools/burstrun" \
        $BURST_BENCH_RING) >"$out/bench_ring.log" 2>&1
    summary+=("bench_ring rc=$?")
    grep -v '^\$\|^{' "$out/bench_ring.log" | tail -n 40
fi
for f in attention_cuda determinism_cuda groups_cuda traffic_cuda test_staging; do
    [ -f "$out/$f.log" ] && { echo "== $f"; grep -E "FAILED|PASSED|error" "$out/$f.log" | tail -n 6; }
done
echo "== $(cat "$out/gpu.txt" | tr '\n' ' ')"
printf '%s\n' "${summary[@]}"
