/*
 * cuda/burst_cuda_elem.cu - elementwise kernels: strided copy with dtype conversion, fill,
 * accumulate, and D = rowsum(dO * O) of the backward.
 */
#include "burst_cuda_common.cuh"

/* One thread per element of a [B, n, H, d] view; grid-stride. */
__global__ void burst_cuda_copy_kernel(struct burst_cuda_view dst, struct burst_cuda_view src,
                                       int64_t total)
{
    const int64_t d = src.shape[3], h = src.shape[2], n = src.shape[1];
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = e % d, r = e / d;
        int64_t hh = r % h, i = r / h % n, b = r / h / n;
        float x = burst_ld(src.data, src.dtype, burst_off(src, b, i, hh) + c);
        burst_st((void *)dst.data, dst.dtype, burst_off(dst, b, i, hh) + c, x);
    }
}

/* Same dtype, both views contiguous in d: 16-bit or 32-bit words, no conversion. */
template <typename T>
__global__ void burst_cuda_copy_same(struct burst_cuda_view dst, struct burst_cuda_view src,
                                     int64_t total)
{
    const int64_t d = src.shape[3], h = src.shape[2], n = src.shape[1];
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = e % d, r = e / d;
        int64_t hh = r % h, i = r / h % n, b = r / h / n;
        ((T *)dst.data)[burst_off(dst, b, i, hh) + c] =
            ((const T *)src.data)[burst_off(src, b, i, hh) + c];
    }
}

/* Four elements at a time: rows of d % 4 == 0 elements whose starts are 4-element aligned in both
 * views (burst_cuda_vec4_ok), the row coordinates computed once per 4 elements in 32-bit
 * arithmetic (fewer than 2^31 elements). The per-element kernel above spends most of its time in
 * 64-bit divisions: on an H200 it moved ~1 TB/s casting the fp32 O of a 16K x 32 x 128 call. */
template <typename T> struct burst_vec4; /* 4 elements as one 16- or 8-byte word */
template <> struct burst_vec4<float> {
    using W = float4;
};
template <> struct burst_vec4<__half> {
    using W = uint2;
};
template <> struct burst_vec4<__nv_bfloat16> {
    using W = uint2;
};

/* One element from TS to TD: rounded to nearest even through fp32; the same type is copied bit
 * for bit (NaN payloads kept, as the per-element same-dtype kernel does). */
template <typename TS, typename TD> struct burst_cvt {
    static __device__ __forceinline__ TD run(TS x)
    {
        return burst_from_f<TD>(burst_to_f<TS>(x));
    }
};
template <typename T> struct burst_cvt<T, T> {
    static __device__ __forceinline__ T run(T x)
    {
        return x;
    }
};

template <typename TS, typename TD>
__global__ void burst_cuda_copy_vec4(struct burst_cuda_view dst, struct burst_cuda_view src, int q,
                                     int h, int n, int total4)
{
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total4; e += gridDim.x * blockDim.x) {
        const int r = e / q, c = (e - r * q) * 4;
        const int hh = r % h, i = r / h % n, b = r / h / n;
        union {
            typename burst_vec4<TS>::W w;
            TS x[4];
        } in;
        union {
            typename burst_vec4<TD>::W w;
            TD x[4];
        } out;
        in.w = *(const typename burst_vec4<TS>::W *)((const TS *)src.data +
                                                     burst_off(src, b, i, hh) + c);
#pragma unroll
        for (int k = 0; k < 4; k++)
            out.x[k] = burst_cvt<TS, TD>::run(in.x[k]);
        *(typename burst_vec4<TD>::W *)((TD *)dst.data + burst_off(dst, b, i, hh) + c) = out.w;
    }
}

static int burst_cuda_vec4_ok(const struct burst_cuda_view *v)
{
    const size_t es = v->dtype == BURST_CUDA_F32 ? 4 : 2;
    if (((uintptr_t)v->data % (4 * es)) != 0 || v->shape[3] % 4 != 0)
        return 0;
    for (int k = 0; k < 3; k++)
        if (v->stride[k] % 4 != 0)
            return 0;
    return 1;
}

template <typename TS, typename TD>
static void burst_cuda_vec4_run(const struct burst_cuda_view *dst,
                                const struct burst_cuda_view *src, int64_t total)
{
    const int total4 = (int)(total / 4);
    burst_cuda_copy_vec4<TS, TD>
        <<<(unsigned)((total4 + 255) / 256 < 65536 ? (total4 + 255) / 256 : 65536), 256, 0,
           cudaStreamPerThread>>>(*dst, *src, (int)(src->shape[3] / 4), (int)src->shape[2],
                                  (int)src->shape[1], total4);
}

template <typename TS>
static void burst_cuda_vec4_to(const struct burst_cuda_view *dst, const struct burst_cuda_view *src,
                               int64_t total)
{
    switch (dst->dtype) {
    case BURST_CUDA_F16: burst_cuda_vec4_run<TS, __half>(dst, src, total); break;
    case BURST_CUDA_BF16: burst_cuda_vec4_run<TS, __nv_bfloat16>(dst, src, total); break;
    default: burst_cuda_vec4_run<TS, float>(dst, src, total);
    }
}

static unsigned burst_cuda_grid(int64_t total, int threads)
{
    int64_t g = (total + threads - 1) / threads;
    return (unsigned)(g > 65536 ? 65536 : g < 1 ? 1 : g);
}

extern "C" int burst_cuda_launch_copy(const struct burst_cuda_view *dst,
                                      const struct burst_cuda_view *src)
{
    int64_t total = src->shape[0] * src->shape[1] * src->shape[2] * src->shape[3];
    if (total <= 0)
        return cudaSuccess;
    unsigned g = burst_cuda_grid(total, 256);
    /* total < 2^31: the 32-bit grid-stride index (< total / 4 + 2^24) cannot overflow */
    if (total < INT32_MAX && burst_cuda_vec4_ok(dst) && burst_cuda_vec4_ok(src)) {
        switch (src->dtype) {
        case BURST_CUDA_F16: burst_cuda_vec4_to<__half>(dst, src, total); break;
        case BURST_CUDA_BF16: burst_cuda_vec4_to<__nv_bfloat16>(dst, src, total); break;
        default: burst_cuda_vec4_to<float>(dst, src, total);
        }
        return cudaGetLastError();
    }
    if (dst->dtype == src->dtype && src->dtype == BURST_CUDA_F32)
        burst_cuda_copy_same<float><<<g, 256, 0, cudaStreamPerThread>>>(*dst, *src, total);
    else if (dst->dtype == src->dtype)
        burst_cuda_copy_same<uint16_t><<<g, 256, 0, cudaStreamPerThread>>>(*dst, *src, total);
    else
        burst_cuda_copy_kernel<<<g, 256, 0, cudaStreamPerThread>>>(*dst, *src, total);
    return cudaGetLastError();
}

__global__ void burst_cuda_fill_kernel(float *dst, int64_t count, float value)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = value;
}

extern "C" int burst_cuda_launch_fill(float *dst, int64_t count, float value)
{
    if (count <= 0)
        return cudaSuccess;
    burst_cuda_fill_kernel<<<burst_cuda_grid(count, 256), 256, 0, cudaStreamPerThread>>>(dst, count,
                                                                                         value);
    return cudaGetLastError();
}

__global__ void burst_cuda_acc_kernel(float *dst, const void *src, int dtype, int64_t count)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] += burst_ld(src, dtype, i);
}

extern "C" int burst_cuda_launch_accumulate(float *dst, const void *src, int src_dtype,
                                            int64_t count)
{
    if (count <= 0)
        return cudaSuccess;
    burst_cuda_acc_kernel<<<burst_cuda_grid(count, 256), 256, 0, cudaStreamPerThread>>>(
        dst, src, src_dtype, count);
    return cudaGetLastError();
}

/* One warp per (b, i, h) row: delta[b, h, i] = sum_c dout * o, accumulated in fp64 (as the cpu
 * backend does) and reduced across the warp in a fixed order. */
__global__ void burst_cuda_delta_kernel(struct burst_cuda_view dout, struct burst_cuda_view o,
                                        float *delta, int64_t rows)
{
    const int64_t d = o.shape[3], h = o.shape[2], n = o.shape[1];
    const int lane = threadIdx.x & 31;
    for (int64_t r = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5; r < rows;
         r += ((int64_t)gridDim.x * blockDim.x) >> 5) {
        int64_t hh = r % h, i = r / h % n, b = r / h / n;
        int64_t od = burst_off(dout, b, i, hh), oo = burst_off(o, b, i, hh);
        double acc = 0.0;
        for (int64_t c = lane; c < d; c += 32)
            acc += (double)burst_ld(dout.data, dout.dtype, od + c) *
                   (double)burst_ld(o.data, o.dtype, oo + c);
        for (int m = 16; m; m >>= 1)
            acc += __shfl_xor_sync(0xffffffffu, acc, m);
        if (lane == 0)
            delta[(b * h + hh) * n + i] = (float)acc;
    }
}

extern "C" int burst_cuda_launch_delta(const struct burst_cuda_view *dout,
                                       const struct burst_cuda_view *o, float *delta)
{
    int64_t rows = o->shape[0] * o->shape[1] * o->shape[2];
    if (rows <= 0 || o->shape[3] <= 0)
        return cudaSuccess;
    burst_cuda_delta_kernel<<<burst_cuda_grid(rows * 32, 256), 256, 0, cudaStreamPerThread>>>(
        *dout, *o, delta, rows);
    return cudaGetLastError();
}
