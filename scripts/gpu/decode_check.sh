#!/bin/bash
# scripts/gpu/decode_check.sh [SRC] - build and check the cuda decode step (backend op decode_step
# over a paged key/value cache) on a GPU machine, then time it beside PyTorch SDPA.
#
# Builds SRC (default: this checkout) into /tmp/burst-decode-build for the GPU's own target
# (BURST_BENCH_ARCHS, default: the compute capability nvidia-smi reports, e.g. 90), runs test_cuda's
# decode cases (test_decode*: fp64 reference, the per-block fwd_step fallback, bad arguments),
# the same under compute-sanitizer memcheck and racecheck (BURST_BENCH_SANITIZE=0 leaves them out),
# then scripts/gpu/decode_torch.py: tools/burstbench_decode (contexts 8K..1M, bf16, d 128, GQA
# 32 / 8, t 1 and 4, block_len 256 and 16; DECODE_BENCH_ARGS adds or overrides flags) beside
# PyTorch SDPA (when torch is installed). Logs and CSV go to $OUT (or /tmp/out); the table is
# printed last. Run from the repo root on a machine with an NVIDIA GPU, nvcc, meson, ninja and
# cmocka:
#   bash scripts/gpu/decode_check.sh
STEP_TIMEOUT=${BURST_BENCH_STEP_TIMEOUT:-900} # a hung kernel ends there
source "$(dirname "$0")/check_lib.sh" "$@"
b=/tmp/burst-decode-build
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader \
    >"$out/gpu.txt" 2>&1
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')
archs=${BURST_BENCH_ARCHS:-${cap:-90}}
rc=0
if [ ! -d "$b" ]; then
    step setup meson setup "$b" "$src" -Dvulkan=disabled -Dfabric=disabled -Dmpi=disabled \
        -Dcuda=enabled "-Dnvcc_archs=$archs" -Dnvcc_args=-lineinfo || rc=1
fi
step build ninja -C "$b" tests/test_cuda tools/burstbench_decode || rc=1
BURST_TEST_BACKEND=cuda BURST_TEST_FILTER='test_decode*' step test_decode "$b/tests/test_cuda" ||
    rc=1
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ "${BURST_BENCH_SANITIZE:-1}" = 1 ] && [ -x "$cs" ]; then
    BURST_TEST_BACKEND=cuda BURST_TEST_FILTER='test_decode' step memcheck_decode "$cs" \
        --tool memcheck --error-exitcode 9 "$b/tests/test_cuda" || rc=1
    BURST_TEST_BACKEND=cuda BURST_TEST_FILTER='test_decode' step racecheck_decode "$cs" \
        --tool racecheck --error-exitcode 9 "$b/tests/test_cuda" || rc=1
fi
step bench python3 "$src/scripts/gpu/decode_torch.py" --exe "$b/tools/burstbench_decode" \
    --csv "$out/decode.csv" ${DECODE_BENCH_ARGS:-} || rc=1
for f in test_decode memcheck_decode racecheck_decode; do
    [ -f "$out/$f.log" ] && { echo "== $f (tail)"; grep -E "FAIL|ERROR|PASSED|FAILED|error|hazard" "$out/$f.log" | tail -n 12; }
done
echo "== $(cat "$out/gpu.txt")"
printf '%s\n' "${summary[@]}"
echo "== bench"
sed -n '/^decode step,/,$p' "$out/bench.log"
exit $rc
