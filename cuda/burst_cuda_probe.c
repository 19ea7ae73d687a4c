/*
 * cuda/burst_cuda_probe.c - what the cuda backend would run on each device: compute capability,
 * multiprocessors, shared memory per block (default and opt-in) and per multiprocessor,
 * registers, L2 -> the kernel variant and tiles of every head-dim class (burst_probe(),
 * burstrun --probe [--json]).
 *
 * The rule, per head-dim class (burst_cuda_dclass: 32, 64, 96, 128, 192, 256) for fp16 / bf16:
 *   - wgmma (sm_90a path): compute capability 9.0, a build holding sm_90a code (nvcc_archs has
 *     90a), every class's shared memory within the opt-in limit, BURST_CUDA_WGMMA not 0. The
 *     forward runs BURST_CUDA_WG_FWD_WGS(D) warpgroups x 64 query rows against
 *     BURST_CUDA_WG_FWD_BC(D) key rows per tile in 3 stages filled by TMA; the backward
 *     (BURST_CUDA_WGMMA=fwd keeps the sm_80 one) dK/dV per 128 keys x BURST_CUDA_WG_DKDV_BQ(D)
 *     query rows (above BURST_CUDA_WG_BWD_MAX: 64 keys, the warpgroups splitting dK from dV),
 *     which also adds dQ (staged in shared memory, by TMA tensor reductions) unless the plan is
 *     deterministic (or BURST_CUDA_DQ_ATOMIC=0), else dQ per 128 query rows x 64-key tiles
 *     (above BURST_CUDA_WG_BWD_MAX: the sm_80 dQ kernel);
 *   - mma.sync (sm_80 path, the A100 code): sm_80+ and the class's shared memory within the
 *     opt-in limit. Forward: 4 warps, BURST_CUDA_MMA_FWD_BR(D) query x BURST_CUDA_MMA_FWD_BC(D)
 *     key rows, K/V double buffered; backward dK/dV per 64 keys (BURST_CUDA_MMA_DKDV_SPLIT(D)
 *     blocks splitting the columns) x BURST_CUDA_MMA_BWD_ROWS(D) query rows (fp16 / bf16 above
 *     128: burst_mma_kv2, one block of 8 warps x BURST_CUDA_MMA_KV2_ROWS(D) query rows, where it
 *     fits), which also adds dQ with float atomics for plans that are not deterministic (then
 *     per BURST_CUDA_MMA_DKDV_KEYS(D, 1) keys up to 128, where that fits), else dQ per 64 query
 *     rows x as many keys;
 *   - fp32 runs the mma.sync kernels with 3xTF32 operands (burst_cuda_tf32.cuh; tiles
 *     BURST_CUDA_TF32_*) where the class's fp32 tiles fit the opt-in shared memory; its dK/dV
 *     kernel above D = 32 is burst_mma_kv2 (BURST_CUDA_TF32_KV2_KEYS(D) keys x
 *     BURST_CUDA_TF32_KV2_ROWS query rows, where it fits), adding dQ with float atomics at
 *     classes 64, 128, 192 and 256 for plans that are not deterministic;
 *   - SIMT (fp32 arithmetic, the last resort): rows not 16-byte aligned, a device below sm_80
 *     (which the backend refuses), BURST_CUDA_KERNEL=simt, or fp32 with BURST_CUDA_FP32=simt.
 * Deterministic plans never use float atomics (bitwise-identical reruns). The fp8 forward (plan
 * fp8_forward) runs where the wgmma path does and tensor maps are on (BURST_CUDA_TMA not 0), in
 * its own classes (BURST_CUDA_F8_CLASS: 64, 128, 256) of BURST_CUDA_F8_BR(D) x BURST_CUDA_F8_BC
 * tiles in BURST_CUDA_F8_STAGES(D) stages.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "backend.h"
#include "burst_cuda.h"
#include "error.h"
#include "settings.h"

/* A cuda setting's value (runtime/settings.h); its default where malformed, which the create
 * has refused before it reads any (burst_cuda_create). */
static long burst_cuda_setting(enum burst_setting_id id)
{
    long v;
    if (burst_setting_get("cuda create", id, &v, NULL) != BURST_OK) {
        burst_error_clear();
        return burst_settings[id].dflt;
    }
    return v;
}

int burst_cuda_mma_usable(const struct burst_cuda_caps *caps)
{
    if (burst_cuda_setting(BURST_SET_CUDA_KERNEL) == 0) /* "simt" */
        return 0;
    return caps->cc_major >= 8;
}

static const int burst_cuda_classes[] = {32, 64, 96, 128, 192, 256};
#define BURST_CUDA_NCLASSES ((int)(sizeof burst_cuda_classes / sizeof *burst_cuda_classes))

/* Largest shared memory of the Hopper kernels over every class (0 when the build has no sm_90a
 * code). */
static size_t burst_cuda_wg_smem_max(void)
{
    size_t m = 0;
#ifdef BURST_CUDA_SM90A
    for (int i = 0; i < BURST_CUDA_NCLASSES; i++) {
        const int d = burst_cuda_classes[i];
        size_t x = burst_cuda_sm90_smem(d);
        if (burst_cuda_sm90_bwd_smem(d) > x)
            x = burst_cuda_sm90_bwd_smem(d);
        m = x > m ? x : m;
    }
#endif
    return m;
}

int burst_cuda_wgmma_usable(const struct burst_cuda_caps *caps)
{
    const size_t need = burst_cuda_wg_smem_max();
    if (need == 0 || burst_cuda_setting(BURST_SET_CUDA_WGMMA) == 0) /* "0" */
        return 0;
    return burst_cuda_mma_usable(caps) && caps->cc_major == 9 && caps->cc_minor == 0 &&
           caps->smem_block_optin >= need;
}

int burst_cuda_fp8_usable(const struct burst_cuda_caps *caps, int wg, int tma)
{
#ifdef BURST_CUDA_SM90A
    return wg && tma && caps->smem_block_optin >= burst_cuda_fp8_smem();
#else
    (void)caps, (void)wg, (void)tma;
    return 0;
#endif
}

size_t burst_cuda_optin(size_t device)
{
    const long cap = burst_cuda_setting(BURST_SET_CUDA_MAX_SHARED);
    return cap > 0 && (size_t)cap < device ? (size_t)cap : device;
}

int burst_cuda_dq_atomic_env(void)
{
    return burst_cuda_setting(BURST_SET_CUDA_DQ_ATOMIC) != 0;
}

int burst_cuda_tma_env(void)
{
    return burst_cuda_setting(BURST_SET_CUDA_TMA) != 0;
}

int burst_cuda_tf32_env(void)
{
    long v;
    if (burst_setting_get("cuda create", BURST_SET_CUDA_FP32, &v, NULL) != BURST_OK) {
        burst_error_clear(); /* the create names it (burst_settings_load) */
        return -1;
    }
    return v == 0 ? 0 : 1; /* "simt", else unset */
}

int burst_cuda_class_kind(const struct burst_cuda_caps *caps, int mma, int wg, int64_t d, int bwd)
{
    if (wg)
        return BURST_CUDA_FWD_WGMMA;
    if (mma && caps->smem_block_optin >= burst_cuda_mma_smem((int)d, BURST_CUDA_BF16))
        return BURST_CUDA_FWD_MMA;
    return BURST_CUDA_FWD_SIMT;
}

int burst_cuda_f32_kind(const struct burst_cuda_caps *caps, int mma, int tf32, int64_t d)
{
    if (mma && tf32 && caps->smem_block_optin >= burst_cuda_mma_smem((int)d, BURST_CUDA_F32))
        return BURST_CUDA_FWD_MMA;
    return BURST_CUDA_FWD_SIMT;
}

static const char *burst_cuda_kind_name(int kind)
{
    return kind == BURST_CUDA_FWD_WGMMA ? "wgmma" : kind == BURST_CUDA_FWD_MMA ? "mma" : "simt";
}

#ifdef BURST_CUDA_SM90A
/* Does a setup of Hopper kernels (burst_cuda_sm90_init, burst_cuda_fp8_init) succeed on device i,
 * as a context's creation runs it before it chooses them? The probe reports them only then. */
static int burst_cuda_probe_init(int i, int (*init)(void))
{
    int prev = 0, ok = 0;
    if (cudaGetDevice(&prev) == cudaSuccess && cudaSetDevice(i) == cudaSuccess)
        ok = init() == cudaSuccess;
    (void)cudaGetLastError();
    cudaSetDevice(prev); /* the caller's current device stays */
    return ok;
}
#endif

static int burst_cuda_probe_sm90(int i)
{
#ifdef BURST_CUDA_SM90A
    return burst_cuda_probe_init(i, burst_cuda_sm90_init);
#else
    (void)i;
    return 0;
#endif
}

/* The fp8 forward on device i, as the backend offers it (burst_cuda_fp8_usable, then its
 * setup). */
static int burst_cuda_probe_fp8(int i, const struct burst_cuda_caps *caps, int wg)
{
#ifdef BURST_CUDA_SM90A
    return burst_cuda_fp8_usable(caps, wg, burst_cuda_tma_env()) &&
           burst_cuda_probe_init(i, burst_cuda_fp8_init);
#else
    (void)i, (void)caps, (void)wg;
    return 0;
#endif
}

/* The fp8 forward's kernel and tiles per class (plan fp8_forward): JSON member or text line. */
static void burst_cuda_probe_f8(struct burst_sb *out, int ok, int json)
{
    static const int dcs[3] = {64, 128, 256};
    if (!ok) {
        burst_sb_printf(out, json ? ", \"fp8_forward\": null"
                                  : "    fp8 forward (plan fp8_forward): not offered (needs sm_90a "
                                    "kernels, the wgmma path and tensor maps)\n");
        return;
    }
    burst_sb_printf(out, json ? ", \"fp8_forward\": {\"kernel\": \"wgmma e4m3\", \"classes\": ["
                              : "    fp8 forward (plan fp8_forward): wgmma e4m3;");
    for (int c = 0; c < 3; c++) {
        const int dc = dcs[c], lo = c ? dcs[c - 1] + 8 : 8;
        if (json)
            burst_sb_printf(out,
                            "%s{\"head_dims\": [%d, %d], \"br\": %d, \"bc\": %d, \"stages\": "
                            "%d}",
                            c ? ", " : "", lo, dc, BURST_CUDA_F8_BR(dc), BURST_CUDA_F8_BC,
                            BURST_CUDA_F8_STAGES(dc));
        else
            burst_sb_printf(out, "%s class %d (d %d..%d) %dx%d tiles, %d stages", c ? "," : "", dc,
                            lo, dc, BURST_CUDA_F8_BR(dc), BURST_CUDA_F8_BC,
                            BURST_CUDA_F8_STAGES(dc));
    }
    burst_sb_printf(out, json ? "]}" : "\n");
}

/* The fp32 kernels of class dc: 3xTF32 on mma.sync or SIMT, forward tile, backward dK/dV keys x
 * query rows in `split` column blocks, dQ by float atomics inside dK/dV (plans that are not
 * deterministic) or not. */
struct burst_cuda_f32_tiles {
    const char *name;
    int br, bc, kv, qr, split, atom;
};

static struct burst_cuda_f32_tiles burst_cuda_probe_f32(const struct burst_cuda_caps *caps, int mma,
                                                        int dc)
{
    struct burst_cuda_f32_tiles t = {"simt",
                                     BURST_CUDA_SIMT_BR,
                                     BURST_CUDA_SIMT_BC(dc),
                                     BURST_CUDA_SIMT_BR,
                                     BURST_CUDA_SIMT_BC(dc),
                                     1,
                                     0};
    if (burst_cuda_f32_kind(caps, mma, burst_cuda_tf32_env() > 0, dc) != BURST_CUDA_FWD_MMA)
        return t;
    t.name = "mma 3xtf32", t.br = 16 * BURST_CUDA_TF32_FWD_WARPS(dc);
    t.bc = BURST_CUDA_TF32_FWD_BC(dc);
    /* dK/dV: burst_mma_kv2, whole columns, where the class has it and it fits */
    if (BURST_CUDA_TF32_KV2(dc) &&
        burst_cuda_mma_big_fits(dc, BURST_CUDA_F32, caps->smem_block_optin)) {
        t.kv = BURST_CUDA_TF32_KV2_KEYS(dc), t.qr = BURST_CUDA_TF32_KV2_ROWS;
        t.atom = BURST_CUDA_TF32_KV2_DQ(dc) && burst_cuda_dq_atomic_env();
    } else {
        t.kv = 64, t.qr = BURST_CUDA_TF32_BWD_ROWS(dc), t.split = BURST_CUDA_TF32_DKDV_SPLIT(dc);
    }
    return t;
}

/* One class's kernels and tiles: JSON object or a text line. */
static void burst_cuda_probe_class(struct burst_sb *out, const struct burst_cuda_caps *caps,
                                   int mma, int wg, int wg_bwd, int dc, int first, int json)
{
    const struct burst_cuda_f32_tiles f = burst_cuda_probe_f32(caps, mma, dc);
    const int fk = burst_cuda_class_kind(caps, mma, wg, dc, 0);
    const int bk = burst_cuda_class_kind(caps, mma, wg_bwd, dc, 1);
    const int lo = dc == 32 ? 8 : dc == 192 ? 136 : dc == 256 ? 200 : dc - 24;
    int fbr = BURST_CUDA_SIMT_BR, fbc = BURST_CUDA_SIMT_BC(dc), fst = 1;
    if (fk == BURST_CUDA_FWD_WGMMA)
        fbr = 64 * BURST_CUDA_WG_FWD_WGS(dc), fbc = BURST_CUDA_WG_FWD_BC(dc), fst = 3;
    else if (fk == BURST_CUDA_FWD_MMA)
        fbr = BURST_CUDA_MMA_FWD_BR(dc), fbc = BURST_CUDA_MMA_FWD_BC(dc), fst = 2;
    int kv = BURST_CUDA_SIMT_BR, qr = BURST_CUDA_SIMT_BC(dc), dqr = BURST_CUDA_SIMT_BR;
    int dqk = BURST_CUDA_SIMT_BC(dc), split = 1, atom = 0;
    const char *dqn = burst_cuda_kind_name(bk);
    if (bk == BURST_CUDA_FWD_WGMMA) {
        atom = burst_cuda_dq_atomic_env();
        kv = 128, qr = BURST_CUDA_WG_DKDV_BQ(dc), dqr = 128, dqk = 64;
        if (dc > BURST_CUDA_WG_BWD_MAX) /* 64 keys; the deterministic dQ kernel on mma.sync */
            kv = 64, dqr = BURST_CUDA_MMA_BR, dqk = BURST_CUDA_MMA_BWD_ROWS(dc), dqn = "mma";
    } else if (bk == BURST_CUDA_FWD_MMA) {
        /* above 128 the 8-warp kernel, whole columns, where it fits (also without dQ) */
        const int fits = burst_cuda_mma_big_fits(dc, BURST_CUDA_F16, caps->smem_block_optin);
        const int two = BURST_CUDA_MMA_KV2(dc) && fits;
        atom = burst_cuda_dq_atomic_env() && fits;
        kv = two ? BURST_CUDA_MMA_KV2_KEYS : BURST_CUDA_MMA_DKDV_KEYS(dc, atom);
        qr = two ? BURST_CUDA_MMA_KV2_ROWS(dc) : BURST_CUDA_MMA_BWD_ROWS(dc);
        dqr = BURST_CUDA_MMA_BR, dqk = BURST_CUDA_MMA_BWD_ROWS(dc);
        split = two ? 1 : BURST_CUDA_MMA_DKDV_SPLIT(dc);
    }
    if (json) {
        burst_sb_printf(out,
                        "%s{\"head_dims\": [%d, %d], \"fwd\": {\"kernel\": \"%s\", \"br\": %d, "
                        "\"bc\": %d, \"stages\": %d}, \"bwd\": {\"kernel\": \"%s\", "
                        "\"kv_rows\": %d, \"q_rows\": %d, \"column_blocks\": %d, \"dq_kernel\": "
                        "\"%s\", \"dq_rows\": %d, \"dq_kv_rows\": %d, \"dq_atomic\": %s}, "
                        "\"fp32\": {\"kernel\": \"%s\", \"fwd_br\": %d, \"fwd_bc\": %d, "
                        "\"kv_rows\": %d, \"bwd_rows\": %d, \"column_blocks\": %d, "
                        "\"dq_atomic\": %s}}",
                        first ? "" : ", ", lo, dc, burst_cuda_kind_name(fk), fbr, fbc, fst,
                        burst_cuda_kind_name(bk), kv, qr, split, dqn, dqr, dqk,
                        atom ? "true" : "false", f.name, f.br, f.bc, f.kv, f.qr, f.split,
                        f.atom ? "true" : "false");
        return;
    }
    burst_sb_printf(out,
                    "    class %3d (d %3d..%3d): forward %-5s %3dx%-3d %d stage%s; backward dK/dV "
                    "%-5s %dx%d in %d column block%s, dQ %s %dx%d%s\n"
                    "              fp32: %s, forward %dx%d, backward dK/dV %dx%d in %d column "
                    "block%s%s\n",
                    dc, lo, dc, burst_cuda_kind_name(fk), fbr, fbc, fst, fst > 1 ? "s" : "",
                    burst_cuda_kind_name(bk), kv, qr, split, split > 1 ? "s" : "", dqn, dqr, dqk,
                    atom ? " (inside dK/dV by float atomics unless deterministic)" : "", f.name,
                    f.br, f.bc, f.kv, f.qr, f.split, f.split > 1 ? "s" : "",
                    f.atom ? ", dQ inside by float atomics unless deterministic" : "");
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
                                       burst_cuda_optin(p.sharedMemPerBlockOptin)};
        int usable = p.major >= 8, mma = usable && burst_cuda_mma_usable(&caps);
        int wg = mma && burst_cuda_wgmma_usable(&caps) && burst_cuda_probe_sm90(i);
        int wg_bwd = wg && burst_cuda_setting(BURST_SET_CUDA_WGMMA) != 2; /* "fwd" */
        if (json) {
            burst_sb_printf(out, "%s{\"index\": %d, \"name\": ", i ? ", " : "", i);
            burst_sb_json_str(out, p.name);
            burst_sb_printf(
                out,
                ", \"compute_capability\": \"%d.%d\", \"usable\": %s, \"sms\": %d, "
                "\"smem_per_block\": %zu, \"smem_per_block_optin\": %zu, \"smem_per_sm\": %zu, "
                "\"regs_per_block\": %d, \"regs_per_sm\": %d, \"l2_bytes\": %d, "
                "\"memory_bytes\": %zu, \"dtypes\": [\"fp32\", \"fp16\", \"bf16\"], "
                "\"deterministic_plans\": \"no atomics\", "
                "\"classes\": [",
                p.major, p.minor, usable ? "true" : "false", p.multiProcessorCount,
                p.sharedMemPerBlock, p.sharedMemPerBlockOptin, p.sharedMemPerMultiprocessor,
                p.regsPerBlock, p.regsPerMultiprocessor, p.l2CacheSize, p.totalGlobalMem);
            for (int c = 0; c < BURST_CUDA_NCLASSES; c++)
                burst_cuda_probe_class(out, &caps, mma, wg, wg_bwd, burst_cuda_classes[c], c == 0,
                                       1);
            burst_sb_printf(out, "]");
            burst_cuda_probe_f8(out, burst_cuda_probe_fp8(i, &caps, wg), 1);
            burst_sb_printf(out, "}");
        } else {
            burst_sb_printf(out,
                            "  device %d: %s, compute capability %d.%d%s, %d SMs, shared memory "
                            "%zu B/block (%zu opt-in), %zu B/SM, %d registers/SM, L2 %d B, "
                            "memory %.1f GiB\n"
                            "    by head-dim class (query x key rows; fp32 as 3xTF32 on mma.sync "
                            "unless BURST_CUDA_FP32=simt); deterministic plans use no float "
                            "atomics\n",
                            i, p.name, p.major, p.minor, usable ? "" : " (unusable: needs 8.0+)",
                            p.multiProcessorCount, p.sharedMemPerBlock, p.sharedMemPerBlockOptin,
                            p.sharedMemPerMultiprocessor, p.regsPerMultiprocessor, p.l2CacheSize,
                            (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
            for (int c = 0; c < BURST_CUDA_NCLASSES; c++)
                burst_cuda_probe_class(out, &caps, mma, wg, wg_bwd, burst_cuda_classes[c], c == 0,
                                       0);
            burst_cuda_probe_f8(out, burst_cuda_probe_fp8(i, &caps, wg), 0);
        }
    }
    if (json)
        burst_sb_printf(out, "]}");
    (void)params;
}
