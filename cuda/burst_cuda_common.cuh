/*
 * cuda/burst_cuda_common.cuh - device helpers shared by the kernels: element loads/stores in
 * the three dtypes, and the posmap / mask arithmetic of runtime/posmap.h on the device.
 */
#ifndef BURST_CUDA_COMMON_CUH
#define BURST_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math_constants.h>
#include <stdint.h>

#include <type_traits>

#include "burst_cuda.h"

/* ---- head-dim classes (burst_cuda_dclass): the one place a run-time d becomes a compiled class.
 * f is called with std::integral_constant<int, D>; kernels' dispatch code passes a generic lambda
 * and reads the class as decltype(c)::value. ---- */

template <int D> using burst_dc = std::integral_constant<int, D>;

/* f(class of d). */
template <typename F> static auto burst_by_class(int64_t d, F &&f)
{
    switch (burst_cuda_dclass(d)) {
    case 32: return f(burst_dc<32>{});
    case 64: return f(burst_dc<64>{});
    case 96: return f(burst_dc<96>{});
    case 128: return f(burst_dc<128>{});
    case 192: return f(burst_dc<192>{});
    default: return f(burst_dc<256>{});
    }
}

/* f(class) for every class in turn, stopping at the first that does not return cudaSuccess
 * (kernel attribute setup). */
template <typename F> static cudaError_t burst_each_class(F &&f)
{
    cudaError_t e = f(burst_dc<32>{});
    if (e == cudaSuccess)
        e = f(burst_dc<64>{});
    if (e == cudaSuccess)
        e = f(burst_dc<96>{});
    if (e == cudaSuccess)
        e = f(burst_dc<128>{});
    if (e == cudaSuccess)
        e = f(burst_dc<192>{});
    if (e == cudaSuccess)
        e = f(burst_dc<256>{});
    return e;
}

/* The current device's opt-in shared memory per block as the kernel choice sees it
 * (burst_cuda_optin: capped by BURST_CUDA_MAX_SHARED). */
static inline cudaError_t burst_device_optin(size_t *optin)
{
    int dev = 0, v = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    *optin = e == cudaSuccess ? burst_cuda_optin((size_t)v) : 0;
    return e;
}

/* Raise kernel f's dynamic shared-memory limit to `bytes` where the current device allows that
 * much (burst_device_optin); elsewhere leave it: a class whose tiles do not fit the device is
 * never chosen for it (burst_cuda_class_kind, burst_cuda_f32_kind), and asking would fail the
 * backend's setup. */
template <typename K> static cudaError_t burst_smem_limit(K *f, size_t bytes)
{
    size_t optin = 0;
    cudaError_t e = burst_device_optin(&optin);
    if (e != cudaSuccess || bytes > optin)
        return e;
    return cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

/* The most shared memory per block of an sm_8x device (sm_80, sm_87; sm_86, sm_89: 99 KiB). */
constexpr size_t burst_sm8x_smem = 163 * 1024;

/* Does a block of `bytes` of dynamic shared memory exceed every device this compilation pass can
 * run on? Code compiled for sm_8x runs on sm_8x alone (the build embeds no PTX: cuda/meson.build
 * refuses PTX targets). The mma.sync kernels (burst_cuda_fwd.cu, burst_cuda_bwd.cu) wrap their
 * bodies in BURST_UNFIT_KERNEL, so that such an instance compiles to a trap instead of code that
 * would cost compile time for nothing: the host never launches a kernel whose shared memory is
 * above the device's opt-in limit. */
__host__ __device__ constexpr bool burst_arch_unfit(size_t bytes)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    return bytes > burst_sm8x_smem;
#else
    (void)bytes;
    return false;
#endif
}

/* A kernel's body: `body` (a statement depending on the kernel's template arguments) where its
 * `bytes` of shared memory fit this pass's devices, else a trap. */
#define BURST_UNFIT_KERNEL(bytes, body)                                                            \
    do {                                                                                           \
        if constexpr (burst_arch_unfit(bytes))                                                     \
            __trap();                                                                              \
        else                                                                                       \
            body;                                                                                  \
    } while (0)

#define BURST_LOG2E 1.4426950408889634f
#define BURST_LOG2E_D 1.4426950408889634074

__device__ __forceinline__ float burst_ld(const void *p, int dtype, int64_t i)
{
    if (dtype == BURST_CUDA_F32)
        return ((const float *)p)[i];
    if (dtype == BURST_CUDA_F16)
        return __half2float(((const __half *)p)[i]);
    return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
}

template <typename T> __device__ __forceinline__ float burst_to_f(T x);
template <> __device__ __forceinline__ float burst_to_f<float>(float x)
{
    return x;
}
template <> __device__ __forceinline__ float burst_to_f<__half>(__half x)
{
    return __half2float(x);
}
template <> __device__ __forceinline__ float burst_to_f<__nv_bfloat16>(__nv_bfloat16 x)
{
    return __bfloat162float(x);
}

/* fp32 -> T, rounded to nearest even (the inverse of burst_to_f). */
template <typename T> __device__ __forceinline__ T burst_from_f(float x);
template <> __device__ __forceinline__ float burst_from_f<float>(float x)
{
    return x;
}
template <> __device__ __forceinline__ __half burst_from_f<__half>(float x)
{
    return __float2half_rn(x);
}
template <> __device__ __forceinline__ __nv_bfloat16 burst_from_f<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}

__device__ __forceinline__ void burst_st(void *p, int dtype, int64_t i, float x)
{
    if (dtype == BURST_CUDA_F32)
        ((float *)p)[i] = x;
    else if (dtype == BURST_CUDA_F16)
        ((__half *)p)[i] = __float2half_rn(x);
    else
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(x);
}

/* Element offset of [b, i, h, 0] of a view. */
__device__ __forceinline__ int64_t burst_off(const struct burst_cuda_view &v, int64_t b, int64_t i,
                                             int64_t h)
{
    return b * v.stride[0] + i * v.stride[1] + h * v.stride[2];
}

/* ---- posmap.h on the device ---- */

__device__ __forceinline__ int64_t burst_dpos(const struct burst_posmap &m, int64_t i)
{
    int r = (m.nruns > 1 && i >= m.run[1].local0) ? 1 : 0;
    return m.run[r].global0 + (i - m.run[r].local0) * m.run[r].stride;
}

__device__ __forceinline__ int64_t burst_dcount_le(const struct burst_posmap &m, int64_t x)
{
    int64_t n = 0;
    for (int r = 0; r < m.nruns; r++) {
        if (x < m.run[r].global0)
            break;
        int64_t c = (x - m.run[r].global0) / m.run[r].stride + 1;
        n += c < m.run[r].len ? c : m.run[r].len;
    }
    return n;
}

/* The document of global position p, [*db, *de): a binary search of the step's document table
 * (device memory here); the whole line without documents. */
__device__ __forceinline__ void burst_ddoc(const struct burst_cuda_step &s, int64_t p, int64_t *db,
                                           int64_t *de)
{
    if (!s.mask.docs || s.mask.ndocs <= 1) {
        *db = -BURST_POS_INF;
        *de = BURST_POS_INF;
        return;
    }
    int64_t lo = 0, hi = s.mask.ndocs; /* docs[lo] <= p < docs[hi] */
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (s.mask.docs[mid] <= p)
            lo = mid;
        else
            hi = mid;
    }
    *db = s.mask.docs[lo];
    *de = s.mask.docs[hi];
}

/* Allowed local key interval [*kb, *ke) of local query row i, clamped to [0, nk]. */
__device__ __forceinline__ void burst_dkeys(const struct burst_cuda_step &s, int64_t i, int64_t *kb,
                                            int64_t *ke)
{
    int64_t p = burst_dpos(s.qpos, i), db, de;
    burst_ddoc(s, p, &db, &de);
    int64_t lo = s.mask.left >= BURST_POS_INF ? -BURST_POS_INF : p - s.mask.left;
    int64_t hi = s.mask.right >= BURST_POS_INF ? BURST_POS_INF : p + s.mask.right;
    lo = lo > db ? lo : db;
    hi = hi < de - 1 ? hi : de - 1;
    int64_t b = burst_dcount_le(s.kpos, lo - 1), e = burst_dcount_le(s.kpos, hi);
    b = b < 0 ? 0 : b;
    e = e > s.nk ? s.nk : e;
    if (e < b)
        e = b;
    *kb = b;
    *ke = e;
}

/* The backward's scalars of local query row i of head h: lse in log2 units (+inf for a row with no
 * key: P = 0), D = rowsum(dO * O) and the allowed keys [kb, ke); a row at or past nq sees no key
 * (+inf, 0, [0, 0)). lse goes to log2 units in double: one rounding instead of two. */
struct burst_brow {
    float l2, dl;
    int64_t kb, ke;
};
/* lse (natural log) in log2 units, +inf for a row with no key */
__device__ __forceinline__ float burst_lse_l2(float lse)
{
    return lse == -CUDART_INF_F ? CUDART_INF_F : (float)((double)lse * BURST_LOG2E_D);
}
__device__ __forceinline__ struct burst_brow burst_brow_at(const struct burst_cuda_step &s,
                                                           int64_t b, int64_t h, int64_t i)
{
    struct burst_brow r = {CUDART_INF_F, 0.0f, 0, 0};
    if (i < s.nq) {
        burst_dkeys(s, i, &r.kb, &r.ke);
        const float lse = s.lse[(b * s.hq + h) * s.nq + i];
        r.l2 = burst_lse_l2(lse);
        r.dl = s.delta[(b * s.hq + h) * s.nq + i];
    }
    return r;
}

/* Allowed local query interval of local key row j: queries whose interval contains j. Because
 * both position maps increase and the mask is a band within documents, this is one interval too:
 * the queries of j's document with position in [kp - right, kp + left]. */
__device__ __forceinline__ void burst_dqueries(const struct burst_cuda_step &s, int64_t j,
                                               int64_t *ib, int64_t *ie)
{
    int64_t p = burst_dpos(s.kpos, j), db, de;
    burst_ddoc(s, p, &db, &de); /* one document holds both ends of an allowed pair */
    int64_t lo = s.mask.right >= BURST_POS_INF ? -BURST_POS_INF : p - s.mask.right;
    int64_t hi = s.mask.left >= BURST_POS_INF ? BURST_POS_INF : p + s.mask.left;
    lo = lo > db ? lo : db;
    hi = hi < de - 1 ? hi : de - 1;
    int64_t b = burst_dcount_le(s.qpos, lo - 1), e = burst_dcount_le(s.qpos, hi);
    b = b < 0 ? 0 : b;
    e = e > s.nq ? s.nq : e;
    if (e < b)
        e = b;
    *ib = b;
    *ie = e;
}

/* The order of a dK/dV block's query tiles (ntq tiles of qr rows from ifirst, per head): the
 * block with keys from j0 starts at the tile of its first key, mod ntq, and wraps, so that the
 * blocks running together add their dQ to different rows (with a full mask they would all start
 * at tile 0 otherwise). burst_dtile_rot gives the first tile, burst_dtile_at the tile of step r
 * (0 <= r < ntq). */
__device__ __forceinline__ int burst_dtile_rot(int64_t j0, int64_t ifirst, int qr, int ntq)
{
    return (int)((j0 > ifirst ? j0 - ifirst : 0) / qr % ntq);
}
__device__ __forceinline__ int burst_dtile_at(int r, int rot, int ntq)
{
    r += rot;
    return r >= ntq ? r - ntq : r;
}

/* ---- logit soft-capping (burst_cuda_step.softcap > 0) ----
 * The kernels hold raw scores r = q.k and apply tau in the exponent, so the cap is applied to r:
 * r' = (C / tau) tanh(r tau / C), whose scaled score tau r' = C tanh(tau r / C). tanh(x) =
 * 1 - 2 / (2^(2 x log2 e) + 1) on the special-function unit: ex2.approx (relative error 2^-22)
 * and rcp.approx (1 ulp), an absolute error of about 1e-7 in tanh, 1e-7 C in the scaled score
 * (fp32 rounding of the score itself is larger wherever |tau r| > C / 100); |x| large saturates to
 * exactly +-1. The constants come from the step (cap_in, cap_out, cap_k, set by the backend), so
 * that the kernels read them from the parameter bank instead of holding them in registers. */
__device__ __forceinline__ float burst_dcap_score(const struct burst_cuda_step &s, float r)
{
    float e, q;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(e) : "f"(r * s.cap_in));
    asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(q) : "f"(e + 1.0f));
    return s.cap_out * fmaf(-2.0f, q, 1.0f);
}

/* tanh(tau r / C) of a capped r' = burst_dcap_score(s, r): r' tau / C. */
__device__ __forceinline__ float burst_dcap_tanh(const struct burst_cuda_step &s, float rc)
{
    return rc * (s.cap_in * (0.5f * 0.69314718055994531f));
}

/* d(tau r') / d(tau r) = 1 - tanh^2 from a backward's P = 2^(tau r' log2 e - l2) and its row's l2
 * (lse log2 e): tanh = (log2 P + l2) / (C log2 e), clamped to [-1, 1] so that P = 0 (a masked or
 * underflowed pair, whose dS is 0 whatever the slope) gives a finite slope. */
__device__ __forceinline__ float burst_dcap_slope(const struct burst_cuda_step &s, float p,
                                                  float l2)
{
    float lg;
    asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(lg) : "f"(p));
    const float t = fminf(fmaxf((lg + l2) * s.cap_k, -1.0f), 1.0f);
    return fmaf(-t, t, 1.0f);
}

#endif /* BURST_CUDA_COMMON_CUH */
