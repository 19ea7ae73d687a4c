/*
 * cuda/burst_cuda_tma.cuh - Hopper (sm_90a) asynchronous tile movement for the warp-specialized
 * kernels: shared-memory barriers (mbarrier) with transaction counts, tensor-memory-accelerator
 * (TMA) loads of [B, n, H, d] views into the 128-byte swizzled panel tiles of
 * burst_cuda_wgmma.cuh, named barriers between warpgroups and the register reallocation between
 * a producer warpgroup and its consumers.
 *
 * A TMA load is described by a tensor map (CUtensorMap, 128 bytes, made on the host by
 * burst_tma_map_view and passed to the kernel as a __grid_constant__ parameter): the view as a
 * 4-dimensional tensor (d, H, n, B), innermost first, and a box of 64 columns x 1 head x ROWS
 * rows x 1 batch, written to shared memory with the 128-byte swizzle (16-byte chunk c of row r at
 * chunk c ^ (r & 7), from a 1024-byte aligned address): exactly one panel of a panel tile. Rows
 * and columns outside the view (past n, past d) arrive as zeros and are never read from global
 * memory, so the class's padding never touches the caller's tensors. A load completes on an
 * mbarrier: the waiter sees the bytes once the barrier's phase completes.
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

/* ---- mbarrier ------------------------------------------------------------------------------------ */

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

/* ---- TMA ------------------------------------------------------------------------------------------ */

/* Load the box at (col, h, row, b) of the tensor map at `map` into shared memory at dst
 * (1024-byte aligned), completing `bytes` (the whole box, zeros included) on bar. */
__device__ __forceinline__ void burst_tma_load(void *dst, const CUtensorMap *map, uint64_t *bar,
                                               int col, int h, int row, int b)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(burst_smem_addr(dst)),
                 "l"((uint64_t)map), "r"(col), "r"(h), "r"(row), "r"(b), "r"(burst_smem_addr(bar))
                 : "memory");
}
__device__ __forceinline__ void burst_tma_prefetch_map(const CUtensorMap *map)
{
    asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)map) : "memory");
}

/* ---- warpgroups ------------------------------------------------------------------------------------ */

/* Wait at named barrier `id` (1 .. 15; 0 is __syncthreads) until n threads have. */
__device__ __forceinline__ void burst_bar_sync(int id, int n)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
/* The registers per thread of this warpgroup (every warp of it executes the same one). */
template <int N> __device__ __forceinline__ void burst_regs_dec()
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void burst_regs_inc()
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

/* ---- tensor maps (host) ------------------------------------------------------------------------------ */

/* The tensor map of view v (fp16 / bf16, d contiguous, data and row strides 16-byte aligned:
 * what the backend's choice of a tensor-core kernel checks) with boxes of 64 columns x `rows`
 * rows (<= 256), 128-byte swizzle, zero fill. cuTensorMapEncodeTiled is a driver function,
 * reached through the runtime once per process (the build links no driver library). Returns a
 * cudaError_t. */
static inline int burst_tma_map_view(CUtensorMap *map, const struct burst_cuda_view *v, int rows)
{
    static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
        void *fn = nullptr;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                             cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess)
            fn = nullptr;
        return (PFN_cuTensorMapEncodeTiled_v12000)fn;
    }();
    if (!encode)
        return cudaErrorNotSupported;
    const cuuint64_t dims[4] = {(cuuint64_t)v->shape[3], (cuuint64_t)v->shape[2],
                                (cuuint64_t)v->shape[1], (cuuint64_t)v->shape[0]};
    const cuuint64_t strides[3] = {(cuuint64_t)v->stride[2] * 2, (cuuint64_t)v->stride[1] * 2,
                                   (cuuint64_t)v->stride[0] * 2}; /* bytes, dims 1..3 */
    const cuuint32_t box[4] = {64, 1, (cuuint32_t)rows, 1}, one[4] = {1, 1, 1, 1};
    const CUresult r =
        encode(map,
               v->dtype == BURST_CUDA_F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                          : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
               4, (void *)v->data, dims, strides, box, one, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

#endif /* BURST_CUDA_TMA_CUH */
