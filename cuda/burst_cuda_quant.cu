/*
 * cuda/burst_cuda_quant.cu - the quantizers of the fp8 forward (runtime/fp8.h: scales, layouts
 * and the column order of V^T): fp16 / bf16 views to e4m3 with fp32 scales, bit for bit what the
 * host quantizers of runtime/fp8.c write (the scale amax / 448 and the factor 448 / amax in
 * IEEE fp32 division, x times the factor, e4m3 rounded to nearest even and saturating).
 *   - burst_f8_rows: Q or K, one block per (row block, head, batch), a warp per row: the block's
 *     largest magnitude, its scale, then its rows as e4m3 of pitch dp (zeros past d);
 *   - V in three kernels: each 128-key block's largest magnitude into the head's slot of the
 *     scales with an integer atomic max of the (non-negative) float's bits; the transposed
 *     write, one block per 128 keys through a [d][128] byte tile in shared memory; the slots'
 *     maxima to scales.
 */
#include <cfloat>
#include <cuda_fp8.h>

#include "burst_cuda_common.cuh"

#define QT 256 /* threads per block: 8 warps */

/* The largest of every thread's a, in every thread of the block. */
__device__ float burst_f8_block_max(float a)
{
    __shared__ float part[QT / 32];
    for (int o = 16; o > 0; o >>= 1)
        a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = a;
    __syncthreads();
    a = part[0];
#pragma unroll
    for (int w = 1; w < QT / 32; w++)
        a = fmaxf(a, part[w]);
    __syncthreads();
    return a;
}

/* A block's scale and the factor of its values (runtime/fp8.h). */
__device__ __forceinline__ float burst_f8_scale(float amax)
{
    return amax > 0.0f ? __fdiv_rn(amax, 448.0f) : 1.0f;
}
__device__ __forceinline__ float burst_f8_inv(float amax)
{
    return amax > 0.0f ? fminf(__fdiv_rn(448.0f, amax), FLT_MAX) : 1.0f;
}

__device__ __forceinline__ unsigned char burst_f8_byte(float x, float inv)
{
    return (unsigned char)__nv_cvt_float_to_fp8(__fmul_rn(x, inv), __NV_SATFINITE, __NV_E4M3);
}

/* Rows [R t, R t + R) of head h, batch b of v (blockIdx = t, h, b): a warp per row, its lanes
 * along the row; the block's scale, then its e4m3 rows. */
template <typename T>
__global__ void burst_f8_rows(struct burst_cuda_view v, unsigned char *dst, float *scales, int R,
                              int dp)
{
    const int64_t t = blockIdx.x, h = blockIdx.y, b = blockIdx.z, n = v.shape[1], H = v.shape[2];
    const int d = (int)v.shape[3], warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t i0 = t * R;
    const int rows = (int)min((int64_t)R, n - i0);
    const T *src = (const T *)v.data + burst_off(v, b, i0, h);
    float a = 0.0f;
    for (int r = warp; r < rows; r += QT / 32)
        for (int c = lane; c < d; c += 32)
            a = fmaxf(a, fabsf(burst_to_f<T>(src[r * v.stride[1] + c])));
    const float amax = burst_f8_block_max(a), inv = burst_f8_inv(amax);
    if (threadIdx.x == 0)
        scales[(b * H + h) * gridDim.x + t] = burst_f8_scale(amax);
    unsigned char *out = dst + ((b * n + i0) * H + h) * dp;
    for (int r = warp; r < rows; r += QT / 32)
        for (int c = lane; c < dp; c += 32)
            out[(int64_t)r * H * dp + c] =
                c < d ? burst_f8_byte(burst_to_f<T>(src[r * v.stride[1] + c]), inv) : 0;
}

/* The largest |v| of keys [128 t, 128 t + 128) of head h, batch b, into vmax[b H + h]. */
template <typename T> __global__ void burst_f8_vmax(struct burst_cuda_view v, unsigned *vmax)
{
    const int64_t t = blockIdx.x, h = blockIdx.y, b = blockIdx.z, n = v.shape[1];
    const int d = (int)v.shape[3], warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int keys = (int)min((int64_t)128, n - t * 128);
    const T *src = (const T *)v.data + burst_off(v, b, t * 128, h);
    float a = 0.0f;
    for (int k = warp; k < keys; k += QT / 32)
        for (int c = lane; c < d; c += 32)
            a = fmaxf(a, fabsf(burst_to_f<T>(src[k * v.stride[1] + c])));
    a = burst_f8_block_max(a);
    if (threadIdx.x == 0)
        atomicMax(&vmax[b * v.shape[2] + h], __float_as_uint(a));
}

/* The column of key c (< 32) in its group of V^T (burst_fp8_vt_col). */
__device__ __forceinline__ int burst_f8_col(int c)
{
    const int j = c >> 3, t = (c >> 1) & 3, e = c & 1;
    return j < 2 ? 4 * t + 2 * j + e : 16 + 4 * t + 2 * (j - 2) + e;
}

#define F8_TP 132 /* bytes per row of the transposing tile (a multiple of 4 off the banks) */

/* Keys [128 t, 128 t + 128) of head h, batch b (those below np) as columns of V^T [d][np]:
 * warps along keys into a [d][128] byte tile, then along its rows, 4 bytes a lane. */
template <typename T>
__global__ void burst_f8_vt(struct burst_cuda_view v, unsigned char *vt, const unsigned *vmax,
                            int64_t np)
{
    __shared__ __align__(16) unsigned char tile[256 * F8_TP];
    const int64_t t = blockIdx.x, h = blockIdx.y, b = blockIdx.z, n = v.shape[1], H = v.shape[2];
    const int d = (int)v.shape[3], warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t j0 = t * 128;
    const int keys = (int)min((int64_t)128, np - j0),
              real = (int)max((int64_t)0, min((int64_t)128, n - j0));
    const float inv = burst_f8_inv(__uint_as_float(vmax[b * H + h]));
    const T *src = (const T *)v.data + burst_off(v, b, j0, h);
    for (int k = warp; k < keys; k += QT / 32) {
        const int col = (k & ~31) + burst_f8_col(k & 31);
        for (int c = lane; c < d; c += 32)
            tile[c * F8_TP + col] =
                k < real ? burst_f8_byte(burst_to_f<T>(src[k * v.stride[1] + c]), inv) : 0;
    }
    __syncthreads();
    unsigned char *out = vt + ((b * H + h) * d) * np + j0;
    for (int c = warp; c < d; c += QT / 32)
        for (int k = lane * 4; k < keys; k += 128)
            *(unsigned *)(out + c * np + k) = *(const unsigned *)(tile + c * F8_TP + k);
}

/* The heads' maxima (as float bits) to their scales, in place. */
__global__ void burst_f8_vscale(unsigned *vmax, int64_t count)
{
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < count)
        ((float *)vmax)[i] = burst_f8_scale(__uint_as_float(vmax[i]));
}

extern "C" int burst_cuda_launch_fp8_rows(const struct burst_cuda_view *src, int rows_per_scale,
                                          void *dst, float *scales)
{
    const int64_t n = src->shape[1], dp = (src->shape[3] + 15) / 16 * 16;
    if (src->shape[0] == 0 || n == 0 || src->shape[2] == 0)
        return cudaSuccess;
    const dim3 grid((unsigned)((n + rows_per_scale - 1) / rows_per_scale), (unsigned)src->shape[2],
                    (unsigned)src->shape[0]);
    if (src->dtype == BURST_CUDA_F16)
        burst_f8_rows<__half><<<grid, QT, 0, cudaStreamPerThread>>>(
            *src, (unsigned char *)dst, scales, rows_per_scale, (int)dp);
    else
        burst_f8_rows<__nv_bfloat16><<<grid, QT, 0, cudaStreamPerThread>>>(
            *src, (unsigned char *)dst, scales, rows_per_scale, (int)dp);
    return cudaGetLastError();
}

extern "C" int burst_cuda_launch_fp8_vt(const struct burst_cuda_view *v, void *vt, float *vscale,
                                        int64_t np)
{
    const int64_t B = v->shape[0], n = v->shape[1], H = v->shape[2];
    if (B == 0 || H == 0)
        return cudaSuccess;
    cudaError_t e =
        cudaMemsetAsync(vscale, 0, sizeof(float) * (size_t)(B * H), cudaStreamPerThread);
    if (e == cudaSuccess && n > 0) {
        const dim3 gm((unsigned)((n + 127) / 128), (unsigned)H, (unsigned)B);
        const dim3 gt((unsigned)((np + 127) / 128), (unsigned)H, (unsigned)B);
        if (v->dtype == BURST_CUDA_F16) {
            burst_f8_vmax<__half><<<gm, QT, 0, cudaStreamPerThread>>>(*v, (unsigned *)vscale);
            burst_f8_vt<__half><<<gt, QT, 0, cudaStreamPerThread>>>(*v, (unsigned char *)vt,
                                                                    (const unsigned *)vscale, np);
        } else {
            burst_f8_vmax<__nv_bfloat16>
                <<<gm, QT, 0, cudaStreamPerThread>>>(*v, (unsigned *)vscale);
            burst_f8_vt<__nv_bfloat16><<<gt, QT, 0, cudaStreamPerThread>>>(
                *v, (unsigned char *)vt, (const unsigned *)vscale, np);
        }
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) {
        burst_f8_vscale<<<(unsigned)((B * H + 255) / 256), 256, 0, cudaStreamPerThread>>>(
            (unsigned *)vscale, B * H);
        e = cudaGetLastError();
    }
    return e;
}
