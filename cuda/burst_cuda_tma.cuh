/*
 * cuda/burst_cuda_tma.cuh - Hopper (sm_90a) asynchronous tile movement for the warp-specialized
 * kernels: shared-memory barriers (mbarrier) with transaction counts, tensor-memory-accelerator
 * (TMA) loads of [B, n, H, d] views into the 128-byte swizzled panel tiles of
 * burst_cuda_wgmma.cuh, TMA reductions of fp32 tiles from shared into global memory, named
 * barriers of some of a block's warps, and the register reallocation between a producer
 * warpgroup and its consumers.
 *
 * A TMA load is described by a tensor map (CUtensorMap, 128 bytes, made on the host by
 * burst_tma_map_view and passed to the kernel as a __grid_constant__ parameter): the view as a
 * 4-dimensional tensor (d and the head, row and batch dimensions by stride), and a box of
 * 64 columns x ROWS rows (one head, one batch), written to shared memory with the 128-byte
 * swizzle (16-byte chunk c of row r at chunk c ^ (r & 7), from a 1024-byte aligned address):
 * exactly one panel of a panel tile. Rows and columns outside the view (past n, past d) arrive
 * as zeros and are never read from global memory, so the class's padding never touches the
 * caller's tensors. A load completes on an mbarrier: the waiter sees the bytes, with no proxy
 * fence, once the barrier's phase completes. A TMA reduction goes the other way through a map
 * of the fp32 dQ accumulator (burst_tma_map_dq): a [rows][32] swizzled panel added into it,
 * elements outside it not written.
 *
 * Phases: a barrier initialised for N arrivals completes its k-th phase (k = 0, 1, ...) when N
 * arrivals and every expected transaction byte of that phase have come; a waiter of the k-th
 * phase waits for parity k & 1.
 */
#ifndef BURST_CUDA_TMA_CUH
#define BURST_CUDA_TMA_CUH

#include <cuda.h>
#include <cudaTypedefs.h>

#include "burst_cuda_mma.cuh"

/* ---- mbarrier -------------------------------------------------------------------------------- */

__device__ __forceinline__ void burst_mbar_init(uint64_t *bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(burst_smem_addr(bar)), "r"(count)
                 : "memory");
}
/* After the barriers' initialisation, before the block barrier that publishes it. */
__device__ __forceinline__ void burst_mbar_init_fence()
{
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
/* One arrival that also announces `bytes` of transactions for the current phase. */
__device__ __forceinline__ void burst_mbar_expect(uint64_t *bar, unsigned bytes)
{
    asm volatile(
        "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(burst_smem_addr(bar)),
        "r"(bytes)
        : "memory");
}
__device__ __forceinline__ void burst_mbar_arrive(uint64_t *bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(burst_smem_addr(bar))
                 : "memory");
}
/* Wait until the phase of parity `parity` has completed. */
__device__ __forceinline__ void burst_mbar_wait(uint64_t *bar, unsigned parity)
{
    unsigned done;
    do
        asm volatile("{\n.reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(burst_smem_addr(bar)), "r"(parity)
                     : "memory");
    while (!done);
}

/* ---- TMA ------------------------------------------------------------------------------------- */

/* A tensor map of a [B, n, H, d] view and where a box's coordinates go in it: its dimensions
 * are the column, then the head, row and batch dimensions ordered by stride (so that each
 * stride holds the one before it, however the caller lays the view out: [B, n, H, d],
 * [B, H, n, d], [n, B, H, d], ...), at[0], at[1], at[2] (1 .. 3) those of the head, the row and
 * the batch. */
struct burst_tma_map {
    CUtensorMap map;
    int at[3];
};

/* Load the box at (col, h, row, b) of map m into shared memory at dst (1024-byte aligned),
 * completing its bytes (the whole box, zeros included) on bar. */
__device__ __forceinline__ void burst_tma_load(void *dst, const struct burst_tma_map &m,
                                               uint64_t *bar, int col, int h, int row, int b)
{
    const int c1 = m.at[0] == 1 ? h : m.at[1] == 1 ? row : b;
    const int c2 = m.at[0] == 2 ? h : m.at[1] == 2 ? row : b;
    const int c3 = m.at[0] == 3 ? h : m.at[1] == 3 ? row : b;
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(burst_smem_addr(dst)),
                 "l"((uint64_t)&m.map), "r"(col), "r"(c1), "r"(c2), "r"(c3),
                 "r"(burst_smem_addr(bar))
                 : "memory");
}
__device__ __forceinline__ void burst_tma_prefetch_map(const CUtensorMap *map)
{
    asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)map) : "memory");
}

/* ---- TMA reductions and bulk groups ----------------------------------------------------------- */

/* Add a box of fp32 values from shared memory at src (1024-byte aligned, 128-byte swizzled
 * rows of 32 values: burst_tma_map_dq) to the tensor of map m at column col, head h, row `row`
 * and batch b, element by element atomically, in the thread's current bulk group; elements
 * outside the tensor (rows past n, columns past d) are not written. The source is read through
 * the async proxy: its writers fence (burst_fence_proxy_async) first. */
__device__ __forceinline__ void burst_tma_add(const struct burst_tma_map &m, const void *src,
                                              int col, int h, int row, int b)
{
    const int c1 = m.at[0] == 1 ? h : m.at[1] == 1 ? row : b;
    const int c2 = m.at[0] == 2 ? h : m.at[1] == 2 ? row : b;
    const int c3 = m.at[0] == 3 ? h : m.at[1] == 3 ? row : b;
    asm volatile("cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group"
                 " [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"((uint64_t)&m.map),
                 "r"(burst_smem_addr(src)), "r"(col), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}
/* Close the thread's current bulk group. */
__device__ __forceinline__ void burst_bulk_commit()
{
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
/* Wait until at most N of the thread's bulk groups still read their sources. */
template <int N> __device__ __forceinline__ void burst_bulk_wait_read()
{
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
/* Wait until at most N of the thread's bulk groups are still incomplete. */
template <int N> __device__ __forceinline__ void burst_bulk_wait()
{
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

/* ---- named barriers -------------------------------------------------------------------------- */

/* Named barrier `id` of n threads (a multiple of 32): wait for all n, or arrive without waiting. */
__device__ __forceinline__ void burst_named_sync(int id, int n)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void burst_named_arrive(int id, int n)
{
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

/* ---- warpgroups ------------------------------------------------------------------------------ */

/* The registers per thread of this warpgroup (every warp of it executes the same one). */
template <int N> __device__ __forceinline__ void burst_regs_dec()
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void burst_regs_inc()
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

/* ---- tensor maps (host) ---------------------------------------------------------------------- */

/* cuTensorMapEncodeTiled, a driver function, reached through the runtime once per process (the
 * build links no driver library); NULL where the driver offers none. */
static inline PFN_cuTensorMapEncodeTiled_v12000 burst_tma_encoder()
{
    static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
        void *fn = nullptr;
        cudaDriverEntryPointQueryResult q;
#if CUDART_VERSION >= 12050
        const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                               cudaEnableDefault, &q);
#else
        const cudaError_t e =
            cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &q);
#endif
        if (e != cudaSuccess || q != cudaDriverEntryPointSuccess)
            fn = nullptr;
        return (PFN_cuTensorMapEncodeTiled_v12000)fn;
    }();
    return encode;
}

/* The tensor map of view v (fp16 / bf16, d contiguous, data and strides 16-byte aligned: what
 * the backend's choice of a tensor-core kernel checks) with boxes of 64 columns x `rows` rows
 * (<= 256), 128-byte swizzle, zero fill. A dimension of extent 1 is placed last, whatever its
 * stride. Returns cudaSuccess, or BURST_CUDA_NO_TMA where the driver offers no encoder
 * (burst_tma_encoder) or refuses the view. */
static inline int burst_tma_map_view(struct burst_tma_map *m, const struct burst_cuda_view *v,
                                     int rows)
{
    const PFN_cuTensorMapEncodeTiled_v12000 encode = burst_tma_encoder();
    if (!encode)
        return BURST_CUDA_NO_TMA;
    /* head, row, batch: extents and strides (elements); extent 1 takes a stride past the rest */
    const int64_t ext[3] = {v->shape[2], v->shape[1], v->shape[0]};
    int64_t str[3] = {v->stride[2], v->stride[1], v->stride[0]}, span = v->shape[3];
    for (int k = 0; k < 3; k++)
        if (ext[k] > 1 && str[k] * ext[k] > span)
            span = str[k] * ext[k];
    for (int k = 0; k < 3; k++)
        if (ext[k] == 1)
            str[k] = span;
    int ord[3] = {0, 1, 2}; /* by stride, stable */
    for (int i = 1; i < 3; i++)
        for (int j = i; j > 0 && str[ord[j]] < str[ord[j - 1]]; j--) {
            const int t = ord[j];
            ord[j] = ord[j - 1];
            ord[j - 1] = t;
        }
    cuuint64_t dims[4] = {(cuuint64_t)v->shape[3]}, strides[3];
    cuuint32_t box[4] = {64}, one[4] = {1, 1, 1, 1};
    for (int k = 0; k < 3; k++) {
        dims[1 + k] = (cuuint64_t)ext[ord[k]];
        strides[k] = (cuuint64_t)str[ord[k]] * 2; /* bytes */
        box[1 + k] = ord[k] == 1 ? (cuuint32_t)rows : 1;
        m->at[ord[k]] = 1 + k;
    }
    const CUresult r =
        encode(&m->map,
               v->dtype == BURST_CUDA_F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                          : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
               4, (void *)v->data, dims, strides, box, one, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? cudaSuccess : BURST_CUDA_NO_TMA;
}

/* The tensor map of the contiguous fp32 accumulator dq [batch, nq, hq, d] (16-byte aligned, d a
 * multiple of 4) with boxes of 32 columns x `rows` rows (<= 256) of one head and batch, 128-byte
 * swizzle: the destination of burst_tma_add, whose source is one 1024-byte aligned [rows][32]
 * panel per box. Returns cudaSuccess, or BURST_CUDA_NO_TMA where the driver offers no encoder or
 * refuses it. */
static inline int burst_tma_map_dq(struct burst_tma_map *m, float *dq, int64_t batch, int64_t nq,
                                   int64_t hq, int64_t d, int rows)
{
    const PFN_cuTensorMapEncodeTiled_v12000 encode = burst_tma_encoder();
    if (!encode)
        return BURST_CUDA_NO_TMA;
    const cuuint64_t dims[4] = {(cuuint64_t)d, (cuuint64_t)hq, (cuuint64_t)nq, (cuuint64_t)batch};
    const cuuint64_t strides[3] = {(cuuint64_t)(d * 4), (cuuint64_t)(hq * d * 4),
                                   (cuuint64_t)(nq * hq * d * 4)};
    const cuuint32_t box[4] = {32, 1, (cuuint32_t)rows, 1}, one[4] = {1, 1, 1, 1};
    m->at[0] = 1; /* head, row, batch */
    m->at[1] = 2;
    m->at[2] = 3;
    const CUresult r =
        encode(&m->map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, (void *)dq, dims, strides, box, one,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? cudaSuccess : BURST_CUDA_NO_TMA;
}

#endif /* BURST_CUDA_TMA_CUH */
