/*
 * cuda/burst_cuda_probe.c - what the cuda backend would run on each device: compute capability,
 * multiprocessors, shared memory per block (default and opt-in) and per multiprocessor,
 * registers, L2 -> kernel variant and tile sizes (burst_probe(), burstrun --probe [--json]).
 *
 * The rule (the only variants the build instantiates):
 *   fp16/bf16, d = 64 or 128, sm_80+ with >= burst_cuda_mma_smem(128) bytes of opt-in shared
 *     memory per block: tensor cores (mma.sync m16n8k16 + ldmatrix + cp.async, 4 warps, K/V or
 *     Q/dO double buffered): forward tiles 128 query (32 per warp; 64 with
 *     BURST_CUDA_FWD_ROWS=16) x 64 key rows; backward dK/dV per 64-key tile x 64-row query tiles,
 *     dQ per 64-row query tile x 64-key tiles;
 *   the same cases on compute capability 9.0 when the build holds sm_90a code (nvcc_archs has
 *     90a) and >= burst_cuda_sm90_smem(128) bytes of shared memory per block: the forward runs
 *     on warpgroup tensor cores (wgmma, burst_cuda_fwd_sm90.cu: 2 warpgroups x 64 query rows,
 *     128 key rows per tile at d = 128 and 64 at d = 64 (BURST_CUDA_WGMMA_BC=64|128 overrides),
 *     3 cp.async stages) and so does the backward (burst_cuda_bwd_sm90.cu: dK/dV per 128 keys x
 *     query tiles of 64 rows, 48 at d = 128, which also adds dQ with float atomics unless the plan
 *     is deterministic (or BURST_CUDA_DQ_ATOMIC=0); else dQ per 128 query rows x 64-key tiles),
 *     both also reported when a context would keep the sm_80 backward (BURST_CUDA_WGMMA=fwd);
 *     BURST_CUDA_WGMMA=0
 *     keeps the sm_80 kernels, BURST_CUDA_WGMMA=fwd the sm_80 backward;
 *   everything else: SIMT fp32, 32 query rows (8 per warp) x 32 key rows (16 rows per block
 *     when d > 128), the same two backward kernels;
 *   deterministic plans never use float atomics (bitwise-identical reruns); only the Hopper
 *   backward uses them otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "backend.h"
#include "burst_cuda.h"

size_t burst_cuda_mma_smem(int d)
{
    /* the largest of the tensor-core kernels: the dK/dV kernel (K, V, two stages of Q, dO and
     * their row scalars) */
    return (size_t)(2 * BURST_CUDA_MMA_BC + 4 * BURST_CUDA_MMA_BR) * (size_t)d * 2 + 2048;
}

int burst_cuda_mma_usable(const struct burst_cuda_caps *caps)
{
    const char *env = getenv("BURST_CUDA_KERNEL");
    if (env && strcmp(env, "simt") == 0)
        return 0;
    return caps->cc_major >= 8 && caps->smem_block_optin >= burst_cuda_mma_smem(128);
}

/* Shared memory of the Hopper forward at d = 128 (0 when the build has no sm_90a code). */
static size_t burst_cuda_wg_smem128(void)
{
#ifdef BURST_CUDA_SM90A
    return burst_cuda_sm90_smem(128);
#else
    return 0;
#endif
}

int burst_cuda_wgmma_usable(const struct burst_cuda_caps *caps)
{
    const char *env = getenv("BURST_CUDA_WGMMA");
    if (burst_cuda_wg_smem128() == 0 || (env && strcmp(env, "0") == 0))
        return 0;
    return burst_cuda_mma_usable(caps) && caps->cc_major == 9 && caps->cc_minor == 0 &&
           caps->smem_block_optin >= burst_cuda_wg_smem128();
}

int burst_cuda_dq_atomic_env(void)
{
    const char *env = getenv("BURST_CUDA_DQ_ATOMIC");
    return !(env && strcmp(env, "0") == 0);
}

int burst_cuda_wgmma_bc(int d)
{
    static int env = -1; /* read once (a benign race: every thread computes the same value) */
    if (env < 0) {
        const char *e = getenv("BURST_CUDA_WGMMA_BC");
        env = e && (atoi(e) == 64 || atoi(e) == 128) ? atoi(e) : 0;
    }
    /* measured on an H200 at N = 16K (docs/BENCHMARKS.md): 64-key tiles win at d = 64 (327 vs
     * 282 TFLOP/s), 128-key tiles tie or win at d = 128 */
    return env ? env : d <= 64 ? 64 : 128;
}

void burst_cuda_probe(const struct burst_context_params *params, struct burst_sb *out, int json);

void burst_cuda_probe(const struct burst_context_params *params, struct burst_sb *out, int json)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count <= 0) {
        const char *why = e != cudaSuccess ? cudaGetErrorString(e) : "no cuda device";
        if (json) {
            burst_sb_printf(out, "{\"backend\": \"cuda\", \"available\": false, \"reason\": ");
            burst_sb_json_str(out, why);
            burst_sb_printf(out, ", \"devices\": []}");
        } else {
            burst_sb_printf(out, "  unavailable: %s\n", why);
        }
        return;
    }
    int rt = 0, drv = 0;
    cudaRuntimeGetVersion(&rt);
    cudaDriverGetVersion(&drv);
    if (json)
        burst_sb_printf(out,
                        "{\"backend\": \"cuda\", \"available\": true, \"runtime\": %d, "
                        "\"driver\": %d, \"devices\": [",
                        rt, drv);
    else
        burst_sb_printf(out, "  cuda runtime %d, driver %d, %d device(s)\n", rt, drv, count);
    for (int i = 0; i < count; i++) {
        struct cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess)
            continue;
        struct burst_cuda_caps caps = {p.major, p.minor, p.multiProcessorCount,
                                       p.sharedMemPerBlockOptin};
        int usable = p.major >= 8, mma = usable && burst_cuda_mma_usable(&caps);
        int wg = mma && burst_cuda_wgmma_usable(&caps);
        const char *wenv = getenv("BURST_CUDA_WGMMA");
        int wg_bwd = wg && !(wenv && strcmp(wenv, "fwd") == 0);
        const char *fwd = wg    ? "wgmma m64nNk16 + cp.async, 3 stages (sm_90a path)"
                          : mma ? "mma.sync m16n8k16 + ldmatrix + cp.async (sm_80 path)"
                                : "simt";
        if (json) {
            burst_sb_printf(out, "%s{\"index\": %d, \"name\": ", i ? ", " : "", i);
            burst_sb_json_str(out, p.name);
            burst_sb_printf(
                out,
                ", \"compute_capability\": \"%d.%d\", \"usable\": %s, \"sms\": %d, "
                "\"smem_per_block\": %zu, \"smem_per_block_optin\": %zu, \"smem_per_sm\": %zu, "
                "\"regs_per_block\": %d, \"regs_per_sm\": %d, \"l2_bytes\": %d, "
                "\"memory_bytes\": %zu, \"dtypes\": [\"fp32\", \"fp16\", \"bf16\"], \"tiles\": "
                "{\"variant\": \"%s\", \"fwd_wgmma\": {\"usable\": %s, \"br\": 128, "
                "\"bc_d64\": %d, \"bc_d128\": %d, \"warpgroups\": 2, \"stages\": 3, "
                "\"smem_d128\": %zu}, "
                "\"bwd_wgmma\": {\"usable\": %s, \"kv_rows\": 128, \"q_rows_d64\": 64, "
                "\"q_rows_d128\": 48, \"dq_rows\": 128, \"dq_kv_rows\": 64, "
                "\"dq_atomic\": %s}, "
                "\"fwd_mma\": {\"br\": %d, \"bc\": %d, \"warps\": %d, "
                "\"stages\": 2, \"head_dims\": [64, 128], \"smem_d128\": %zu}, \"fwd_simt\": "
                "{\"br\": %d, \"bc\": 32, \"warps\": %d}, \"bwd_mma\": {\"kv_rows\": 64, "
                "\"q_rows\": 64}, \"bwd_simt\": {\"kv_rows\": [%d, %d], \"q_rows\": [%d, %d]}, "
                "\"deterministic_plans\": \"no atomics\"}}",
                p.major, p.minor, usable ? "true" : "false", p.multiProcessorCount,
                p.sharedMemPerBlock, p.sharedMemPerBlockOptin, p.sharedMemPerMultiprocessor,
                p.regsPerBlock, p.regsPerMultiprocessor, p.l2CacheSize, p.totalGlobalMem,
                wg ? "wgmma" : mma ? "mma" : "simt", wg ? "true" : "false", burst_cuda_wgmma_bc(64),
                burst_cuda_wgmma_bc(128), burst_cuda_wg_smem128(), wg_bwd ? "true" : "false",
                wg_bwd && burst_cuda_dq_atomic_env() ? "true" : "false",
                2 * BURST_CUDA_MMA_BR, BURST_CUDA_MMA_BC,
                BURST_CUDA_MMA_WARPS, burst_cuda_mma_smem(128), BURST_CUDA_SIMT_BR,
                BURST_CUDA_SIMT_WARPS, 32, 16, 32, 16);
        } else {
            burst_sb_printf(out,
                            "  device %d: %s, compute capability %d.%d%s, %d SMs, shared memory "
                            "%zu B/block (%zu opt-in), %zu B/SM, %d registers/SM, L2 %d B, "
                            "memory %.1f GiB\n"
                            "    forward and backward: %s; forward tiles %dx%d (d = 128), %dx%d "
                            "(d = 64; fp16/bf16), else simt %dx32; backward dK/dV + dQ kernels%s\n",
                            i, p.name, p.major, p.minor, usable ? "" : " (unusable: needs 8.0+)",
                            p.multiProcessorCount, p.sharedMemPerBlock, p.sharedMemPerBlockOptin,
                            p.sharedMemPerMultiprocessor, p.regsPerMultiprocessor, p.l2CacheSize,
                            (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), fwd,
                            wg ? 128 : 2 * BURST_CUDA_MMA_BR,
                            wg ? burst_cuda_wgmma_bc(128) : BURST_CUDA_MMA_BC,
                            wg ? 128 : 2 * BURST_CUDA_MMA_BR,
                            wg ? burst_cuda_wgmma_bc(64) : BURST_CUDA_MMA_BC, BURST_CUDA_SIMT_BR,
                            wg_bwd && burst_cuda_dq_atomic_env()
                                ? " (one Hopper kernel with dQ by float atomics unless the plan "
                                  "is deterministic)"
                                : ", no float atomics");
        }
    }
    if (json)
        burst_sb_printf(out, "]}");
    (void)params;
}
