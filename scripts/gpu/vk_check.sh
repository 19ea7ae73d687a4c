#!/bin/bash
# scripts/gpu/vk_check.sh [SRC] - build burst with the Vulkan backend alone on a GPU machine, run the
# Vulkan tests on the GPU (test_vulkan on the default path, with the cooperative-matrix forward's
# softmax through shared memory (BURST_VK_CMQ=0) and on the scalar kernels (BURST_VK_RT=0
# BURST_VK_COOPMAT=0); test_attention on the default path), then, with
# BURST_BENCH_VK="<burstbench_vk.py arguments>", the benchmark beside PyTorch SDPA (several
# argument sets separated by ';' run one after the other). Builds SRC (default: this checkout)
# into /tmp/burst-vk-build; logs and CSV go to $OUT (or /tmp/out); a short summary is printed
# last (BURST_BENCH_VK_VARIANTS, below: kernel times under several settings). Run from the repo root
# on a machine with a Vulkan GPU driver, glslang, meson, ninja and cmocka, e.g.:
#   BURST_BENCH_VK='--seq 16384 --heads 32 --head-dim 128 --dtype fp32 --paths tiled,scalar \
#       --fwd-only --warmup 2 --iters 5' bash scripts/gpu/vk_check.sh
STEP_TIMEOUT=${STEP_TIMEOUT:-300} # a hung kernel ends its step, not the command
source "$(dirname "$0")/check_lib.sh" "$@"
b=/tmp/burst-vk-build
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt" 2>&1
if [ ! -d "$b" ]; then
    step setup meson setup "$b" "$src" -Dvulkan=enabled -Dcuda=disabled -Dfabric=disabled \
        -Dresearch_settings=true \
        -Dmpi=disabled -Dwerror=false || { tail -n 30 "$out/setup.log"; exit 1; }
fi
step build ninja -C "$b" tools/burstrun tests/test_vulkan tests/test_attention ||
    { tail -n 30 "$out/build.log"; exit 1; }
if [ "${BURST_BENCH_VK_TESTS:-1}" = 1 ]; then
    export BURST_TEST_BACKEND=vulkan
    step test_vulkan "$b/tests/test_vulkan"
    BURST_VK_CMQ=0 step test_vulkan_cmq0 "$b/tests/test_vulkan"
    # the *_cmq kernels' other code paths: loads in flight, two-chunk softmax steps on fresh
    # accumulators (and bf16 K / V converted in the kernel's loads instead of once a call); the
    # rule's smallest tiles with each step's S after the softmax before it (no PIPE)
    BURST_VK_CMQ_PREFETCH=1,1,1 BURST_VK_CMQ_FWD=2,0 BURST_VK_CMQ_BF16=2 \
        step test_vulkan_cmq_alt "$b/tests/test_vulkan"
    BURST_VK_CMQ_TILE=32,16 BURST_VK_CMQ_BWD_TILE=32,16,32,16 BURST_VK_CMQ_FWD=1,1,0 \
        step test_vulkan_cmq_small "$b/tests/test_vulkan"
    # the rule's 192-row forward tile and its tile with loading subgroups, which the tests'
    # small calls would not take; loaders on the smallest tile (a tile turned over every 16
    # keys: the most waits between loaders and compute subgroups), converting bf16 K / V in
    # their loads
    BURST_VK_CMQ_TILE=192,64 step test_vulkan_cmq_rows192 "$b/tests/test_vulkan"
    BURST_VK_CMQ_TILE=160,32,2 step test_vulkan_cmq_loaders "$b/tests/test_vulkan"
    BURST_VK_CMQ_TILE=32,16,1 BURST_VK_CMQ_FWD=1,1,0 BURST_VK_CMQ_BF16=2 \
        step test_vulkan_cmq_loaders_small "$b/tests/test_vulkan"
    BURST_VK_RT=0 BURST_VK_COOPMAT=0 step test_vulkan_scalar "$b/tests/test_vulkan"
    step test_attention "$b/tests/test_attention"
    unset BURST_TEST_BACKEND
    "$b/tools/burstrun" --probe >"$out/probe.txt" 2>&1
fi
if [ -n "${BURST_BENCH_VK:-}" ]; then
    IFS=';' read -ra sets <<<"$BURST_BENCH_VK"
    n=0
    for a in "${sets[@]}"; do
        n=$((n + 1))
        (cd "$out" && PYTHONUNBUFFERED=1 python3 "$src/tools/burstbench_vk.py" --burstrun \
            "$b/tools/burstrun" $a --csv "burstbench_vk_$n.csv") >"$out/bench_$n.log" 2>&1
        summary+=("bench $n rc=$?")
    done
fi
# BURST_BENCH_VK_VARIANTS="A=1 B=2;C=3" (with BURST_BENCH_VK_VARIANT_ARGS, burstrun arguments): one
# profiled burstrun per ';'-separated set of environment settings, the fastest dispatch of
# each kernel printed per set (kernel tiles and switches compared in one command)
if [ -n "${BURST_BENCH_VK_VARIANTS:-}" ]; then
    IFS=';' read -ra vars <<<"$BURST_BENCH_VK_VARIANTS"
    for v in "${vars[@]}"; do
        env $v BURST_VK_PROFILE=1 BURST_LOG=warn,vulkan=info "$b/tools/burstrun" --threads -n 1 --backend vulkan \
            ${BURST_BENCH_VK_VARIANT_ARGS:-} >"$out/variant.log" 2>&1
        echo "== variant [$v] rc=$?: $(sed -n 's/^.*vulkan: profile: *\([a-z_]*\) .*fastest \([0-9.]*\) ms.*/\1 \2/p' \
            "$out/variant.log" | grep -v "copy\|fill\|cm_layout" | tr '\n' ' ')"
        grep -h "Register Count" "$out/variant.log" | grep "cmq" | sed 's/Binary Size.*Local Memory Size=/local /; s/ Shared Memory.*//' | cut -c1-170
    done
fi
cat "$out/gpu.txt"
grep -h "PASSED\|FAILED" "$out"/test_*.log 2>/dev/null
for n in $(seq 1 "${n:-0}"); do
    echo "== bench $n: ${sets[$((n - 1))]}"
    sed -n '/^B=1/,$p' "$out/bench_$n.log"
    grep -h "check at" "$out/bench_$n.log"
done
printf '%s\n' "${summary[@]}"
