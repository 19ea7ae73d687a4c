/*
 * cuda/burst_cuda.h - the CUDA backend's private interface between its host C code and its
 * kernels (compiled by nvcc; every kernel entry point below has C linkage).
 *
 * Files (one concept each):
 *   burst_cuda_backend.c  the ops table: instance, device memory, argument checks, dispatch, and
 *                         the ONE place where cudaError_t becomes burst_status_t (with the
 *                         native message from cudaGetErrorString)
 *   burst_cuda_probe.c    device capabilities -> kernel variant and tile sizes (burstrun --probe)
 *   burst_cuda_elem.cu    copy with dtype conversion and strides, fill, accumulate, D = rowsum
 *   burst_cuda_fwd.cu     forward step kernels (tensor-core mma.sync path at every head dim, by
 *                         head-dim class: fp16 / bf16, and fp32 as 3xTF32; a SIMT
 *                         fp32-arithmetic path for the rest)
 *   burst_cuda_mma.cuh, burst_cuda_tf32.cuh  the mma.sync kernels' building blocks and operand
 *                         traits: 16-bit operands, and fp32 operands split into two tf32 halves
 *   burst_cuda_fwd_sm90.cu, burst_cuda_bwd_sm90.cu  the forward and the backward (dK/dV and
 *                         dQ kernels; dQ inside the dK/dV kernel by TMA reductions when the plan
 *                         is not deterministic) on Hopper's warpgroup tensor cores (wgmma),
 *                         compiled for sm_90a only and present when BURST_CUDA_SM90A is defined
 *                         (nvcc_archs holds 90a); building blocks in burst_cuda_wgmma.cuh and
 *                         burst_cuda_tma.cuh
 *   burst_cuda_bwd_sm90_wide.cu  the Hopper backward of the wide classes (192, 256): the two
 *                         warpgroups of a block split dK and dV by tensor, dQ by float atomics
 *   burst_cuda_bwd.cu     backward step kernels (dK/dV kernel and dQ kernel; the dK/dV kernel
 *                         adds dQ by float atomics where the plan is not deterministic: every
 *                         16-bit class, fp32 classes 64, 128, 192 and 256)
 *   burst_cuda_decode.cu  one decode step over a paged key/value cache (op decode_step): split-K
 *                         flash-decoding on mma.sync in one kernel, whose last block per row
 *                         chunk combines the splits into the running (O, lse) or the output
 *   burst_cuda_scratch.c  per-thread device scratch of an instance (the decode step's splits)
 *   burst_cuda_peer.c     device-to-device copies between the ranks of one process (the ring's
 *                         device-resident transfers: events, a copy stream per device, peer access)
 *   burst_cuda_ipc.c      the same between rank processes of one host: CUDA IPC handles of the
 *                         memory and of an interprocess event, a cache of opened mappings
 *
 * Streams: every op runs on the calling thread's per-thread default stream (cudaStreamPerThread),
 * so ranks that are threads of one process overlap on one GPU; sync() waits for that stream only.
 * Kernel launchers return the cudaError_t of the launch (as int, so that this header stays plain
 * C); the backend converts it.
 */
#ifndef BURST_CUDA_H
#define BURST_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "posmap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dtypes as the kernels see them (same values as burst_dtype_t's FP32 / FP16 / BF16 order). */
enum burst_cuda_dtype {
    BURST_CUDA_F32 = 0,
    BURST_CUDA_F16 = 1,
    BURST_CUDA_BF16 = 2,
};

/* A [B, n, H, d] view in device memory: element strides, stride[3] == 1. */
struct burst_cuda_view {
    const void *data;
    int dtype; /* enum burst_cuda_dtype */
    int64_t shape[4];
    int64_t stride[4];
};

/*
 * Head-dim classes: the tensor-core kernels are compiled for head dims 32, 64, 96, 128, 192 and
 * 256 only, and a call runs the class of its d (the smallest class >= d). The class's columns
 * past d are zero in shared memory (the loads zero-fill them) and never read from or written to
 * the caller's tensors; they cost arithmetic, not memory traffic. Every d the API accepts
 * (a multiple of 8 in [8, 256]) has a class.
 */
static inline int burst_cuda_dclass(int64_t d)
{
    return d <= 32 ? 32 : d <= 64 ? 64 : d <= 96 ? 96 : d <= 128 ? 128 : d <= 192 ? 192 : 256;
}
/* The widest class of the Hopper backward whose warpgroups each own 64 keys of dK and dV
 * (burst_cuda_bwd_sm90.cu); wider classes run burst_cuda_bwd_sm90_wide.cu, whose deterministic
 * plans take dQ from the sm_80 kernel. */
#define BURST_CUDA_WG_BWD_MAX 128
/* The Hopper forward for class D: consumer warpgroups of 64 query rows each (3 where the head
 * dim leaves their registers room for 128-key score tiles, else 2) and key rows per tile (as
 * many as 3 stages of K and V beside the Q tile fit in shared memory, 128 at most). */
#define BURST_CUDA_WG_FWD_WGS(D) ((D) <= 64 ? 3 : 2)
#define BURST_CUDA_WG_FWD_BC(D) ((D) <= 128 ? 128 : (D) <= 192 ? 64 : 48)
/* The fp8 forward (burst_cuda_fwd_fp8.cu): its head-dim class of d (64, 128 or 256), query rows
 * per item of class D (consumer warpgroups of 64: three at class 64, as the 16-bit forward, whose
 * P and O leave them the registers; two above), key rows per tile (one K scale each,
 * BURST_FP8_KEYS) and stages of K and V^T tiles. */
#define BURST_CUDA_F8_CLASS(d) ((d) <= 64 ? 64 : (d) <= 128 ? 128 : 256)
#define BURST_CUDA_F8_BR(D) ((D) <= 64 ? 192 : 128)
#define BURST_CUDA_F8_BC 128
#define BURST_CUDA_F8_STAGES(D) ((D) <= 64 ? 4 : 3)

/* Kernel variant of a step, chosen by the backend (burst_cuda_kind). */
enum burst_cuda_fwd_kind {
    BURST_CUDA_FWD_SIMT = 0,  /* any dtype, any d (multiple of 8, <= 256), fp32 arithmetic */
    BURST_CUDA_FWD_MMA = 1,   /* every class: mma.sync + cp.async; fp16/bf16 m16n8k16 through
                                 ldmatrix, fp32 as 3xTF32 m16n8k8 (burst_cuda_tf32.cuh) */
    BURST_CUDA_FWD_WGMMA = 2, /* the same cases on compute capability 9.0: wgmma (sm_90a); for
                                 the backward where BURST_CUDA_WGMMA is not "fwd" (its dQ on
                                 mma.sync above BURST_CUDA_WG_BWD_MAX) */
};

/* The e4m3 operands of an fp8 forward step in device memory (runtime/fp8.h): Q and K rows of dp
 * bytes, V^T [B, hkv, d, np], and their scales. */
struct burst_cuda_f8 {
    const void *q, *k, *vt;
    const float *qs, *ks, *vs;
    int64_t np;
};

/* One attention step as the kernels see it (shared by forward and backward). */
struct burst_cuda_step {
    struct burst_cuda_view q, k, v, dout;
    /* forward with f8.q set: the products take these e4m3 operands (burst_cuda_fwd_fp8.cu); q,
     * k, v then give the shapes and the output dtype only */
    struct burst_cuda_f8 f8;
    struct burst_posmap qpos, kpos;
    struct burst_mask mask; /* mask.docs: the document table in device memory (docs_dev) */
    float scale;
    float softcap; /* > 0: scores soft-capped (burst_fwd_args.softcap); 0 = off */
    /* its constants, set by the backend: 2 log2(e) tau / C, C / tau and 1 / (C log2 e); cap_in = 0
     * without a cap (burst_dcap_score in burst_cuda_common.cuh) */
    float cap_in, cap_out, cap_k;
    int64_t batch, nq, nk, hq, hkv, d, group;
    /* forward: running results; backward: final lse, D and the fp32 accumulators */
    float *o_acc, *lse_acc;
    const float *lse, *delta;
    float *dq, *dk, *dv;
    /* backward: nonzero lets dQ be added with float atomics (a plan that is not deterministic;
     * the Hopper backward then computes dQ inside its dK/dV kernel) */
    int dq_atomic;
    /* burst_cuda_tma_env() at context creation: 0 = the Hopper launchers find no tensor map for
     * any view (BURST_CUDA_NO_TMA), which tests the mma.sync fallback */
    int tma;
    /* forward, the call's only step (backend op fwd_final; the mma and wgmma kernels): data set
     * = write the normalised output here in its dtype (f16 / bf16, rows 4-byte aligned) and the
     * final lse to lse_acc, instead of merging into o_acc / lse_acc */
    struct burst_cuda_view o_out;
    /* backward, the call's only step (backend op bwd_final; the mma and wgmma kernels): data set
     * = write the final dK (scale applied) and dV here in their dtype instead of adding into
     * dk / dv (which are NULL then) */
    struct burst_cuda_view dk_out, dv_out;
    /* forward on Hopper: two counters of the thread's scratch (burst_cuda_scratch_counters),
     * the next work item and the blocks done, zero before the kernel and left at zero */
    unsigned *sched;
};

/* Launchers (asynchronous on cudaStreamPerThread). Return a cudaError_t as int. */
int burst_cuda_launch_fwd(const struct burst_cuda_step *s, int kind, int num_sms);
int burst_cuda_launch_bwd(const struct burst_cuda_step *s, int kind, int num_sms);
int burst_cuda_launch_copy(const struct burst_cuda_view *dst, const struct burst_cuda_view *src);
int burst_cuda_launch_fill(float *dst, int64_t count, float value);
int burst_cuda_launch_accumulate(float *dst, const void *src, int src_dtype, int64_t count);
int burst_cuda_launch_delta(const struct burst_cuda_view *dout, const struct burst_cuda_view *o,
                            float *delta);
/* Raise the dynamic shared-memory limit of the kernels that need it (once per device). */
int burst_cuda_kernels_init(void);
/* The Hopper kernels (burst_cuda_fwd_sm90.cu, burst_cuda_bwd_sm90*.cu; only where
 * BURST_CUDA_SM90A is defined): the launchers, their shared-memory setup (a cudaError_t: fails
 * on a device their sm_90a code cannot run on) and their shared memory for head dim d (its
 * class). burst_cuda_launch_bwd_sm90 hands the wide classes to burst_cuda_launch_bwd_sm90_wide,
 * and burst_cuda_sm90_init sets up both files' kernels. burst_cuda_launch_fwd_sm90 and
 * burst_cuda_launch_bwd_sm90 return BURST_CUDA_NO_TMA, launching nothing, where the driver
 * describes a view by no tensor map (burst_cuda_tma.cuh); burst_cuda_launch_fwd and
 * burst_cuda_launch_bwd then run the mma.sync kernels. */
#define BURST_CUDA_NO_TMA (-1) /* not a cudaError_t */
int burst_cuda_launch_fwd_sm90(const struct burst_cuda_step *s, int num_sms);
int burst_cuda_launch_bwd_sm90(const struct burst_cuda_step *s);
int burst_cuda_launch_bwd_sm90_wide(const struct burst_cuda_step *s);
int burst_cuda_sm90_init(void);
int burst_cuda_sm90_wide_init(void);
size_t burst_cuda_sm90_smem(int d);
size_t burst_cuda_sm90_bwd_smem(int d);
size_t burst_cuda_sm90_wide_smem(int d);
/* The fp8 forward (burst_cuda_fwd_fp8.cu, sm_90a): its launcher (s->f8 set; returns
 * BURST_CUDA_NO_TMA where the driver maps no operand), its shared-memory setup and its largest
 * shared memory over the classes. */
int burst_cuda_launch_fwd_fp8(const struct burst_cuda_step *s, int num_sms);
int burst_cuda_fp8_init(void);
size_t burst_cuda_fp8_smem(void);
/* The fp8 quantizers (burst_cuda_quant.cu, every target): rows of src in blocks of
 * rows_per_scale to e4m3 rows of pitch dp at dst with a scale per block; v transposed to
 * vt [B, H, d, np] with a scale per head (runtime/fp8.h has the layouts). */
int burst_cuda_launch_fp8_rows(const struct burst_cuda_view *src, int rows_per_scale, void *dst,
                               float *scales);
int burst_cuda_launch_fp8_vt(const struct burst_cuda_view *v, void *vt, float *vscale, int64_t np);
/* The sm_80 dQ kernel alone (burst_cuda_bwd.cu), for the deterministic plans of the Hopper
 * backward's wide classes. */
int burst_cuda_launch_dq_mma(const struct burst_cuda_step *s);

/*
 * One decode step as the kernels see it (burst_cuda_decode.cu; the backend checks the arguments
 * and fills the plan fields with burst_cuda_decode_plan). Rows of the step are (query i, head h)
 * pairs; key j of the sequence is row j % block_len of pool block blocks[j / block_len].
 */
struct burst_cuda_decode {
    const void *q;                  /* [1, t, hq, d] in dtype, element strides below */
    int64_t q_stride_i, q_stride_h; /* q's stride[1], stride[2] */
    const void *k_pool, *v_pool; /* [pool blocks, block_len, hkv, d] contiguous, 16-byte aligned */
    const int32_t *blocks;       /* block table, device memory */
    int dtype;                   /* enum burst_cuda_dtype */
    int t, hq, hkv, group, d;
    int block_len, nkeys, tail; /* nkeys + 64 < 2^31 (checked by the backend) */
    float scale;
    float cap_in, cap_out; /* soft-cap constants as burst_cuda_step's; cap_in = 0: off */
    float *o_acc;          /* [1, t, hq, d] fp32 running output (when o_out is NULL) */
    float *lse_acc;        /* [1, hq, t] fp32 running lse (natural log) */
    /* the result written instead of merged (o_out not NULL): o_out [1, t, hq, d] in dtype with
     * element strides below, lse_out [1, hq, t] natural log (NULL: not written) */
    void *o_out;
    int64_t o_stride_i, o_stride_h;
    float *lse_out;
    /* the plan (burst_cuda_decode_plan): key splits, keys per split (whole tiles), chunks of 16
     * rows per kv head */
    int nsplit, split_keys, chunks;
    /* scratch of burst_cuda_decode_scratch_bytes: partial O [t * hq][nsplit][d] and partial
     * lse [t * hq][nsplit] (log2 units) of every split */
    float *o_part, *lse_part;
    unsigned *arrived; /* [hkv * chunks] zero-filled counters (burst_cuda_scratch_counters) */
};
/* Queries per decode step the kernels take (more: the backend declines, the engine falls back). */
#define BURST_CUDA_DECODE_TMAX 64
/* The decode kernels: one per dtype (fp16, bf16, fp32) and head-dim class (64, 128, 256). */
#define BURST_CUDA_DECODE_KERNELS 9
/* Choose the splits of a decode step for a device of num_sms multiprocessors (one wave of equal
 * blocks of the step's kernel, per_sm[kernel] of them resident per multiprocessor: the table of
 * burst_cuda_decode_init); -1 when the kernel cannot run it: its shared memory exceeds
 * smem_optin, or more kv heads or row chunks than a grid holds (the backend declines). */
int burst_cuda_decode_plan(struct burst_cuda_decode *a, int num_sms, size_t smem_optin,
                           const int per_sm[BURST_CUDA_DECODE_KERNELS]);
/* Bytes of scratch a planned step needs (o_part then lse_part, each 16-byte aligned). */
static inline size_t burst_cuda_decode_scratch_bytes(const struct burst_cuda_decode *a)
{
    const size_t slots = (size_t)a->t * (size_t)a->hq * (size_t)a->nsplit;
    return (slots * (size_t)a->d + 3) / 4 * 16 + slots * sizeof(float);
}
/* Launch the step's kernel (asynchronous on cudaStreamPerThread). */
int burst_cuda_launch_decode(const struct burst_cuda_decode *a);
/* Raise the split kernels' dynamic shared-memory limits and record how many blocks of each are
 * resident per multiprocessor in per_sm (once per backend, at create; read by every step's
 * plan). */
int burst_cuda_decode_init(int per_sm[BURST_CUDA_DECODE_KERNELS]);

/* Device facts the kernel choice depends on (filled from cudaGetDeviceProperties). */
struct burst_cuda_caps {
    int cc_major, cc_minor;
    int sms;
    size_t smem_block_optin; /* largest dynamic shared memory a block may ask for */
};

/* The opt-in shared memory per block the kernel choice assumes of a device that allows `device`
 * bytes: at most BURST_CUDA_MAX_SHARED where that is set (tests), else `device`. */
size_t burst_cuda_optin(size_t device);
/* Can this device run the tensor-core kernels (sm_80+, enough shared memory for the widest
 * class)? BURST_CUDA_KERNEL=simt turns them off (kill switch); burst_cuda_probe.c. */
int burst_cuda_mma_usable(const struct burst_cuda_caps *caps);
/* Can this device run the Hopper forward: built with sm_90a, compute capability 9.0, enough
 * shared memory for every class, and neither BURST_CUDA_WGMMA=0 nor BURST_CUDA_KERNEL=simt set? */
int burst_cuda_wgmma_usable(const struct burst_cuda_caps *caps);
/* Can it run the fp8 forward, given the Hopper forward's setup succeeded (wg) and tensor maps are
 * on (tma): enough shared memory for every fp8 class? */
int burst_cuda_fp8_usable(const struct burst_cuda_caps *caps, int wg, int tma);
/* May the tensor-core backward (Hopper; sm_80 for fp16 / bf16, and 3xTF32 at classes 64, 128, 192
 * and 256) add dQ with float atomics when a plan is not deterministic? Yes unless
 * BURST_CUDA_DQ_ATOMIC=0 (then dQ always has its own kernel). */
int burst_cuda_dq_atomic_env(void);
int burst_cuda_tma_env(void);
/* Largest shared memory of the sm_80 tensor-core kernels for head dim d (its class) and inputs of
 * dtype (enum burst_cuda_dtype; fp16 and bf16 share their tiles, fp32 runs 3xTF32). */
size_t burst_cuda_mma_smem(int d, int dtype);
/* Does the large sm_80 dK/dV kernel of head dim d's class and dtype (enum burst_cuda_dtype) fit a
 * device of `optin` bytes of shared memory per block: burst_mma_kv2 (8 warps; fp32 above 128: 4)
 * in two-dimensional tiles where the class has it (BURST_CUDA_MMA_KV2, BURST_CUDA_TF32_KV2), else
 * for fp16 / bf16 the form that adds dQ by float atomics (BURST_CUDA_MMA_DKDV_KEYS keys)? Where it
 * does not, the class runs the 64-key dK/dV kernel without dQ and adds dQ in its own kernel. */
int burst_cuda_mma_big_fits(int d, int dtype, size_t optin);
/* Do fp32 inputs run on the tensor cores (3xTF32)? 1 unless BURST_CUDA_FP32 is set: 0 for
 * "simt", -1 for any other non-empty value (the backend's create refuses it). */
int burst_cuda_tf32_env(void);
/* The kernel variant of fp32 inputs of head dim d: mma.sync with 3xTF32 operands where `tf32`,
 * the device can run mma.sync (`mma`) and the class's shared memory fits, else SIMT. */
int burst_cuda_f32_kind(const struct burst_cuda_caps *caps, int mma, int tf32, int64_t d);
/* The kernel variant (enum burst_cuda_fwd_kind) of the forward (bwd = 0) or the backward of head
 * dim d on this device, for fp16 / bf16: wgmma where `wg` (the Hopper kernels are usable; for
 * the backward: and not turned off by BURST_CUDA_WGMMA=fwd) and the class has Hopper kernels,
 * else mma.sync where the device can run it and the class's shared memory fits, else SIMT. */
int burst_cuda_class_kind(const struct burst_cuda_caps *caps, int mma, int wg, int64_t d, int bwd);

/* Tile sizes of the kernels by head-dim class D (the kernels and the probe read the same rules;
 * query rows x key rows). */
/* sm_80 backward: query rows of a dQ block, and the most rows of a dK/dV block's query tile */
#define BURST_CUDA_MMA_BR 64
/* sm_80 dK/dV kernel up to D = 128 (fp32: at D = 32; and where burst_mma_kv2 does not fit): key
 * rows of a block, 16 per warp. Its form that adds dQ by float atomics (DQ: fp16 / bf16, plans
 * that are not deterministic): 128 keys (8 warps, one block per multiprocessor) at classes 96 and
 * 128, so that each streamed Q / dO tile and each dQ atomic serves 128 keys, 64 at the others;
 * the form without dQ: 64 keys. */
#define BURST_CUDA_MMA_DKDV_KEYS(D, DQ) ((DQ) && (D) > 64 && (D) <= 128 ? 128 : 64)
/* sm_80 dK/dV kernel of fp16 / bf16 above D = 128 (burst_mma_kv2: 8 warps in two-dimensional
 * tiles, where one block holds the whole d instead of BURST_CUDA_MMA_DKDV_SPLIT blocks each
 * computing the scores): key rows of a block */
#define BURST_CUDA_MMA_KV2(D) ((D) > 128)
#define BURST_CUDA_MMA_KV2_KEYS 64
/* ... and rows of its streamed, double-buffered Q / dO tiles: 64 at D = 192 (162 KiB of shared
 * memory, within an A100's 163 KiB per block), 32 at D = 256 (146 KiB; 64 rows would take
 * 210 KiB) */
#define BURST_CUDA_MMA_KV2_ROWS(D) ((D) <= 192 ? 64 : 32)
/* sm_80 forward: query rows of a block, 32 per warp up to D = 128 (each K/V fragment feeds two
 * row tiles), 16 above (where 32 rows of O accumulators would not fit the registers) */
#define BURST_CUDA_MMA_FWD_BR(D) ((D) <= 128 ? 128 : 64)
/* sm_80 forward: key rows of a streamed, double-buffered K / V tile: 64 up to D = 64, 32 above.
 * At D = 96 and 128 a block then takes 64 KiB of shared memory, so that two fit an A100's
 * 164 KiB per multiprocessor (with 64 keys a block would take 96 KiB: one), and at D = 96 the
 * scores of 64 keys beside 32 rows of O accumulators would also spill registers; D = 192:
 * 72 KiB (two on an A100), D = 256: 96 KiB (two on Hopper, one on an A100) */
#define BURST_CUDA_MMA_FWD_BC(D) ((D) <= 64 ? 64 : 32)
/* sm_80 backward: rows of the streamed, double-buffered tiles (K / V of the dQ kernel, Q / dO of
 * the dK/dV kernel burst_mma_dkdv): 64 up to D = 128, 32 above (at D = 256 two stages of 64 rows
 * of the dK/dV kernel would not fit an A100's 163 KiB of shared memory per block) */
#define BURST_CUDA_MMA_BWD_ROWS(D) ((D) > 128 ? 32 : 64)
/* sm_80 backward: blocks per key tile of the 64-key dK/dV kernel (fp16 / bf16 above D = 128 only
 * where BURST_CUDA_MMA_KV2's does not fit), each accumulating D / split columns of dK and dV (and
 * computing S^T, dP^T over the whole d): 1 up to D = 128, 2 above */
#define BURST_CUDA_MMA_DKDV_SPLIT(D) ((D) <= 128 ? 1 : 2)
/* Hopper backward: query rows of the dK/dV kernel's streamed tiles (48 above D = 64, where 64
 * made the kernel spill at D = 128); the wide classes' kernel: 64 keys x 64 query rows */
#define BURST_CUDA_WG_DKDV_BQ(D) ((D) > BURST_CUDA_WG_BWD_MAX ? 64 : (D) > 64 ? 48 : 64)
/* fp32 inputs on the sm_80 kernels (3xTF32, burst_cuda_tf32.cuh), so that the fp32 tiles fit
 * shared memory and the split operands the registers. Forward: key rows per double-buffered tile
 * and warps per block (16 query rows each). Up to D = 128, 4 warps (99 KiB at D = 128: two
 * blocks per Hopper multiprocessor); above, 8 warps share each K / V tile of 16 keys (147 KiB at
 * D = 192, within an A100's 163 KiB per block; 195 KiB at 256, as the class's dK/dV kernels:
 * Hopper only). */
#define BURST_CUDA_TF32_FWD_BC(D) ((D) <= 64 ? 64 : (D) <= 128 ? 32 : 16)
#define BURST_CUDA_TF32_FWD_WARPS(D) ((D) <= 128 ? 4 : 8)
/* fp32 dK/dV in burst_mma_kv2's two-dimensional tiles above D = 32 (D = 32 keeps the 64-key
 * kernel): 32-row Q / dO tiles; 64 keys in 8 warps up to D = 128 (152 KiB of shared memory at
 * 128, within an A100's 163 KiB per block), 32 keys in 4 warps above (158 KiB at D = 192;
 * 206 KiB at 256, which only Hopper's 227 KiB hold). The rows and column blocks below are those
 * of burst_mma_dkdv, which runs at D = 32 and where kv2's tiles do not fit. */
#define BURST_CUDA_TF32_KV2(D) ((D) > 32)
#define BURST_CUDA_TF32_KV2_KEYS(D) ((D) <= 128 ? 64 : 32)
#define BURST_CUDA_TF32_KV2_ROWS 32
/* ... and adds dQ by float atomics (plans that are not deterministic) where its dQ column groups
 * are whole 16-column fragments: every class but 96 */
#define BURST_CUDA_TF32_KV2_DQ(D) (BURST_CUDA_TF32_KV2(D) && (D) != 96)
/* fp32 backward: rows of the streamed tiles (burst_mma_dkdv, burst_mma_dq) and dK/dV column
 * blocks of burst_mma_dkdv (64 columns each above D = 64, 48 at D = 96). */
#define BURST_CUDA_TF32_BWD_ROWS(D) ((D) <= 128 ? 32 : 16)
#define BURST_CUDA_TF32_DKDV_SPLIT(D) ((D) <= 64 ? 1 : (D) == 96 ? 2 : (D) / 64)
#define BURST_CUDA_SIMT_BR 32
#define BURST_CUDA_SIMT_BC(d) ((d) <= 128 ? 32 : 16)
#define BURST_CUDA_SIMT_WARPS 4

/* ---- host C code only (burst_cuda_backend.c, burst_cuda_peer.c) ---- */
#ifndef __CUDACC__
#include <pthread.h>

#include "burst/status.h"

struct burst_cuda_scratch;

struct burst_cuda_backend {
    int device;
    struct burst_cuda_caps caps;
    int mma;       /* tensor-core forward usable */
    int wgmma;     /* Hopper forward usable (and its shared-memory limits raised) */
    int wgmma_bwd; /* ... and the Hopper backward (unless BURST_CUDA_WGMMA=fwd) */
    int dq_atomic; /* burst_cuda_dq_atomic_env(): plans that allow it may add dQ with atomics */
    int tma;       /* burst_cuda_tma_env() */
    int fp8;       /* the fp8 forward is set up (Hopper, wgmma and tensor maps usable) */
    int tf32;      /* burst_cuda_tf32_env(): fp32 inputs on the tensor cores (3xTF32) */
    int decode;    /* the decode step's kernels are set up (burst_cuda_decode_init) */
    int decode_per_sm[BURST_CUDA_DECODE_KERNELS]; /* their resident blocks per multiprocessor */
    char name[256];
    unsigned char uuid[16];             /* cudaDeviceProp.uuid (share_device) */
    struct burst_cuda_share *share;     /* imported memory of other backends: burst_cuda_share.c */
    pthread_mutex_t scratch_lock;       /* guards the list below (burst_cuda_scratch.c) */
    struct burst_cuda_scratch *scratch; /* per-thread device scratch */
};

/* Device scratch of at least `bytes` for the calling thread's ops, *p_ptr (device memory of the
 * instance): one buffer per thread, reused by that thread's later calls (its stream orders them),
 * grown when a call needs more (after the thread's stream has drained). A new buffer is filled
 * with 0xff bytes (NaN): kernels must write every element they read. A thread that ends must
 * have synchronised its stream (sync()) first. burst_cuda_scratch.c */
burst_status_t burst_cuda_scratch_get(struct burst_cuda_backend *cb, size_t bytes, void **p_ptr);
/* The calling thread's arrival counters, at least n of them, *p_ctr: kept apart from the scratch
 * above and grown like it, but filled with zeros, and every kernel that counts on one returns it
 * to zero before it ends (the decode step's last block of each row chunk, burst_cuda_decode.cu;
 * the Hopper forward's last block, burst_cuda_fwd_sm90.cu). */
burst_status_t burst_cuda_scratch_counters(struct burst_cuda_backend *cb, size_t n,
                                           unsigned **p_ctr);
/* Free every thread's scratch (the instance's end; no op in flight). */
void burst_cuda_scratch_fini(struct burst_cuda_backend *cb);

/* cudaError_t (as int) -> burst status with the native message; BURST_OK for cudaSuccess. */
burst_status_t burst_cuda_status(int err, const char *what);
/* Make the instance's device current for the calling thread. */
burst_status_t burst_cuda_enter(const struct burst_cuda_backend *cb, const char *what);
/* A new event (a cudaEvent_t; timing off unless `timing`) recorded after the work the calling
 * thread has queued on its stream (cudaStreamPerThread); *ev_p NULL on failure. `what` names the
 * caller in messages. burst_cuda_backend.c */
burst_status_t burst_cuda_event_here(const struct burst_cuda_backend *cb, int timing,
                                     const char *what, void **ev_p);

struct burst_tp_devops;
extern const struct burst_tp_devops burst_cuda_devcopy; /* burst_cuda_peer.c */
/* The copy stream of the instance's device (a cudaStream_t; created once, never blocking on the
 * legacy default stream), made current. burst_cuda_peer.c */
burst_status_t burst_cuda_copy_stream(const struct burst_cuda_backend *cb, void **stream_p);
/* Device copies between rank processes of one host: CUDA IPC (transport.h, the ipc_ members of
 * struct burst_tp_devops). burst_cuda_ipc.c */
/* Device memory of another backend of this process (vulkan) imported for the copy engine:
 * transport.h, share_device / share_import / share_reach. burst_cuda_share.c */
struct burst_tp_dev;
burst_status_t burst_cuda_share_init(struct burst_cuda_backend *cb);
void burst_cuda_share_fini(struct burst_cuda_backend *cb);
burst_status_t burst_cuda_share_device(void *be, unsigned char uuid[16]);
burst_status_t burst_cuda_share_import(void *be, const struct burst_tp_dev *owner, const void *buf,
                                       size_t len, void **ptr_p);
int burst_cuda_share_reach(void *be, const unsigned char uuid[16]);
burst_status_t burst_cuda_ipc_export(void *be, const void *buf, unsigned char *desc, void **mark_p);
burst_status_t burst_cuda_ipc_import(void *be, void *dst, const unsigned char *desc, size_t len,
                                     void *after, void **done_p);
burst_status_t burst_cuda_ipc_test(void *be, void *done, int *complete);
void burst_cuda_ipc_finish(void *be, void *done);
/* Close the mappings opened on `device` (no copy from them in flight); at the instance's end. */
void burst_cuda_ipc_close(int device);
#endif

#ifdef __cplusplus
}
#endif

#endif /* BURST_CUDA_H */
