#!/bin/bash
# scripts/gpu/device_check.sh [SRC] - build and check the CUDA backend on a GPU machine, then benchmark.
#
# Builds SRC (default: this checkout) into /tmp/burst-cuda-build with only the GPU's own targets
# (BURST_BENCH_ARCHS, default 90a), runs the cuda tests, compute-sanitizer memcheck and racecheck
# on small cases (every head-dim class on both code paths), and (BURST_BENCH_CUDA=1)
# tools/burstbench_cuda.py. Logs go to $OUT (or /tmp/out); a short table is printed last. Run it
# from the repo root on a machine with an NVIDIA GPU, nvcc, meson, ninja and cmocka:
#   bash scripts/gpu/device_check.sh
STEP_TIMEOUT=${BURST_BENCH_STEP_TIMEOUT:-300} # a hung kernel ends there
source "$(dirname "$0")/check_lib.sh" "$@"
b=/tmp/burst-cuda-build
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt" 2>&1
step setup meson setup "$b" "$src" -Dvulkan=disabled -Dfabric=disabled -Dmpi=disabled \
    -Dcuda=enabled "-Dnvcc_archs=${BURST_BENCH_ARCHS:-90a}" \
    -Dnvcc_args=-lineinfo
step build ninja -C "$b"
step probe "$b/tools/burstrun" --probe
step test_fallback "$b/tests/test_cuda" fallback
BURST_TEST_BACKEND=cuda step test_cuda "$b/tests/test_cuda"
# on Hopper with sm_90a built (BURST_BENCH_ARCHS=90a) the default run above takes the wgmma kernels:
# check the sm_80 kernels and the wgmma forward with the sm_80 backward
BURST_TEST_BACKEND=cuda BURST_CUDA_WGMMA=0 step test_cuda_sm80 "$b/tests/test_cuda"
BURST_TEST_BACKEND=cuda BURST_CUDA_WGMMA=fwd step test_cuda_wgfwd "$b/tests/test_cuda"
# the default plans are not deterministic, so the Hopper backward adds dQ with atomics inside the
# dK/dV kernel; check the separate dQ kernel on every case too
BURST_TEST_BACKEND=cuda BURST_CUDA_DQ_ATOMIC=0 step test_cuda_dqsplit "$b/tests/test_cuda"
# the kernels of a device with 99 KiB of shared memory per block (sm_86 / sm_89): the 64-key dK/dV
# kernel and the separate dQ kernel where the others do not fit, SIMT for the classes they miss
BURST_TEST_BACKEND=cuda BURST_CUDA_MAX_SHARED=101376 step test_cuda_99k "$b/tests/test_cuda" kernels
# ...and of 150 KiB: the fp32 classes 128 and 192 on the 64-key dK/dV kernel and the dQ kernel
BURST_TEST_BACKEND=cuda BURST_CUDA_MAX_SHARED=153600 step test_cuda_150k "$b/tests/test_cuda" kernels
# fp32 runs 3xTF32 on the tensor cores by default: check the SIMT fp32 kernels too
BURST_TEST_BACKEND=cuda BURST_CUDA_FP32=simt step test_cuda_simt32 "$b/tests/test_cuda"
if [ "${BURST_BENCH_RING_TESTS:-0}" = 1 ]; then
    BURST_TEST_BACKEND=cuda step test_attention_cuda "$b/tests/test_attention"
fi
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ "${BURST_BENCH_SANITIZE:-1}" = 1 ] && [ -x "$cs" ]; then
    export BURST_TEST_BACKEND=cuda
    BURST_TEST_FILTER='*d64*' step memcheck "$cs" --tool memcheck --error-exitcode 9 \
        "$b/tests/test_cuda"
    # every head-dim class, on both code paths
    BURST_TEST_FILTER='cls_*' step memcheck_cls "$cs" --tool memcheck --error-exitcode 9 \
        "$b/tests/test_cuda"
    BURST_CUDA_WGMMA=0 BURST_TEST_FILTER='cls_*' step memcheck_cls_sm80 "$cs" --tool memcheck \
        --error-exitcode 9 "$b/tests/test_cuda"
    BURST_TEST_FILTER='cls_*' step racecheck_cls "$cs" --tool racecheck --error-exitcode 9 \
        "$b/tests/test_cuda"
    BURST_CUDA_WGMMA=0 BURST_TEST_FILTER='cls_*' step racecheck_cls_sm80 "$cs" --tool racecheck \
        --error-exitcode 9 "$b/tests/test_cuda"
    # fp32 on the tensor cores (3xTF32), every class
    BURST_TEST_FILTER='tf32_*' step memcheck_tf32 "$cs" --tool memcheck --error-exitcode 9 \
        "$b/tests/test_cuda"
    BURST_TEST_FILTER='tf32_*' step racecheck_tf32 "$cs" --tool racecheck --error-exitcode 9 \
        "$b/tests/test_cuda"
    BURST_TEST_FILTER='mma_bf16_d64_gqa8' step racecheck "$cs" --tool racecheck \
        --error-exitcode 9 "$b/tests/test_cuda"
    BURST_CUDA_FP32=simt BURST_TEST_FILTER='full_fp32_d64' step racecheck_simt "$cs" \
        --tool racecheck --error-exitcode 9 "$b/tests/test_cuda"
    BURST_TEST_FILTER='long_bf16_d128_causal' step racecheck_long "$cs" --tool racecheck \
        --error-exitcode 9 "$b/tests/test_cuda"
    unset BURST_TEST_BACKEND
fi
if [ "${BURST_BENCH_CUDA:-0}" = 1 ]; then
    step bench python3 "$src/tools/burstbench_cuda.py" --exe "$b/tools/burstbench_cuda" \
        --csv "$out/burstbench_cuda.csv" --svg "$out/burstbench_cuda.svg" ${BURST_BENCH_ARGS:-}
    tail -n 40 "$out/bench.log"
fi
if [ -n "${BURST_BENCH_CUDA2:-}" ]; then # a second sweep, printed only
    python3 "$src/tools/burstbench_cuda.py" --exe "$b/tools/burstbench_cuda" \
        --csv /tmp/bench2.csv --svg /tmp/bench2.svg $BURST_BENCH_CUDA2 2>&1 | tail -n 20
fi
if [ -n "${BURST_BENCH_SM80:-}" ]; then # the sm_80 kernels on the same GPU, for comparison
    BURST_CUDA_WGMMA=0 "$b/tools/burstbench_cuda" --csv /tmp/sm80.csv $BURST_BENCH_SM80
fi
if [ -n "${BURST_BENCH_WGFWD:-}" ]; then # the wgmma forward with the sm_80 backward
    BURST_CUDA_WGMMA=fwd "$b/tools/burstbench_cuda" --csv /tmp/wgfwd.csv $BURST_BENCH_WGFWD
fi
if [ -n "${BURST_BENCH_DQSPLIT:-}" ]; then # the backward with the separate dQ kernel
    BURST_CUDA_DQ_ATOMIC=0 "$b/tools/burstbench_cuda" --csv /tmp/dqsplit.csv $BURST_BENCH_DQSPLIT
fi
for f in test_cuda test_cuda_sm80 test_cuda_wgfwd test_cuda_dqsplit test_cuda_simt32 memcheck \
    memcheck_cls memcheck_cls_sm80 memcheck_tf32 racecheck racecheck_simt racecheck_long \
    racecheck_cls racecheck_cls_sm80 racecheck_tf32 test_attention_cuda; do
    [ -f "$out/$f.log" ] && { echo "== $f (tail)"; grep -E "FAIL|ERROR|PASSED|FAILED|error|hazard" "$out/$f.log" | tail -n 12; }
done
echo "== $(cat "$out/gpu.txt")"
printf '%s\n' "${summary[@]}"
