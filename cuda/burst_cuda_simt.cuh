/*
 * cuda/burst_cuda_simt.cuh - the SIMT (fp32 arithmetic) attention kernels: every dtype, every
 * head dim d that is a multiple of 8 up to 256, every mask. Used for fp32 inputs, for head dims
 * without a tensor-core path, and as the backward of every case.
 *
 * Shape of the work (the "lane = key / lane = column" scheme):
 *   - a block has 4 warps; a warp owns R rows (query rows in the forward and the dQ kernel, key
 *     rows in the dK/dV kernel) and keeps their fp32 accumulators in registers, lane l holding
 *     columns l, l + 32, ... of each row;
 *   - the opposite operand streams through shared memory (fp32, rows padded to D + 1 floats so
 *     that lane-per-row reads are free of bank conflicts) in tiles of 32 rows, one per lane:
 *     a lane computes the score (and dP) of "its" streamed row against the warp's R rows;
 *   - probabilities go through a per-warp shared buffer to the accumulation, where lanes own
 *     columns again.
 * Every reduction runs in a fixed order (butterfly shuffles, ascending loops), and every output
 * element has exactly one writer, so results are bitwise reproducible.
 * D is the head-dim bucket (64, 128, 256) the kernel is instantiated for; the runtime d <= D.
 */
#ifndef BURST_CUDA_SIMT_CUH
#define BURST_CUDA_SIMT_CUH

#include "burst_cuda_common.cuh"

#define BURST_SIMT_WARPS 4
#define BURST_SIMT_TILE 32

template <int D> struct burst_simt_cfg {
    static constexpr int R = D > 128 ? 4 : 8; /* rows per warp */
    static constexpr int ROWS = BURST_SIMT_WARPS * R;
    static constexpr int LD = D + 1;   /* padded shared row */
    static constexpr int CPL = D / 32; /* columns per lane */
};

__device__ __forceinline__ float burst_warp_max(float x)
{
    for (int m = 16; m; m >>= 1)
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, m));
    return x;
}

__device__ __forceinline__ float burst_warp_sum(float x)
{
    for (int m = 16; m; m >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, m);
    return x;
}

/* Load `rows` rows [r0, r0 + rows) of head h of view v into shared memory (ld floats apart,
 * converted to fp32, times mul); rows past `valid` are zero. */
template <typename T>
__device__ __forceinline__ void burst_simt_load(float *sh, int ld, const struct burst_cuda_view &v,
                                                int64_t b, int64_t r0, int rows, int64_t valid,
                                                int64_t h, int d, float mul)
{
    const T *base = (const T *)v.data;
    for (int e = threadIdx.x; e < rows * d; e += blockDim.x) {
        int r = e / d, c = e % d;
        float x = 0.0f;
        if (r0 + r < valid)
            x = burst_to_f<T>(base[burst_off(v, b, r0 + r, h) + c]) * mul;
        sh[r * ld + c] = x;
    }
}

/* Union of the key intervals of query rows [i0, i0 + rows) (block-wide; every thread calls). */
__device__ __forceinline__ void burst_block_range(int64_t lo, int64_t hi, int64_t *mn, int64_t *mx)
{
    __shared__ unsigned long long s_lo, s_hi;
    if (threadIdx.x == 0) {
        s_lo = ~0ull;
        s_hi = 0;
    }
    __syncthreads();
    if (lo < hi) {
        atomicMin(&s_lo, (unsigned long long)lo); /* integer: order-independent */
        atomicMax(&s_hi, (unsigned long long)hi);
    }
    __syncthreads();
    *mn = (int64_t)s_lo;
    *mx = (int64_t)s_hi;
    __syncthreads();
}

/* ---- forward ---------------------------------------------------------------------------------- */

template <typename T, int D>
__global__ void __launch_bounds__(128) burst_simt_fwd(struct burst_cuda_step s)
{
    using C = burst_simt_cfg<D>;
    extern __shared__ float sm[];
    float *sk = sm, *sv = sk + 32 * C::LD, *sq = sv + 32 * C::LD, *sp = sq + C::ROWS * D;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, d = (int)s.d;
    const int64_t tiles = (s.nq + C::ROWS - 1) / C::ROWS;
    const int64_t t = tiles - 1 - blockIdx.x % tiles; /* heaviest (causal) tiles first */
    const int64_t h = blockIdx.x / tiles % s.hq, b = blockIdx.x / tiles / s.hq;
    const int64_t g = h / s.group, i0 = t * C::ROWS;

    /* this thread's row (threads < ROWS) gives the block's key range */
    int64_t lo = 0, hi = 0;
    if (threadIdx.x < C::ROWS && i0 + threadIdx.x < s.nq)
        burst_dkeys(s, i0 + threadIdx.x, &lo, &hi);
    int64_t kmin, kmax;
    burst_block_range(lo, hi, &kmin, &kmax);
    if (kmin >= kmax)
        return;

    const float sl2 = s.scale * BURST_LOG2E;
    burst_simt_load<T>(sq, D, s.q, b, i0, C::ROWS, s.nq, h, d, sl2);
    int64_t kb[C::R], ke[C::R];
    float m[C::R], l[C::R], o[C::R][C::CPL];
#pragma unroll
    for (int r = 0; r < C::R; r++) {
        int64_t i = i0 + warp * C::R + r;
        kb[r] = ke[r] = 0;
        if (i < s.nq)
            burst_dkeys(s, i, &kb[r], &ke[r]);
        m[r] = -CUDART_INF_F;
        l[r] = 0.0f;
#pragma unroll
        for (int u = 0; u < C::CPL; u++)
            o[r][u] = 0.0f;
    }

    for (int64_t j0 = kmin / 32 * 32; j0 < kmax; j0 += 32) {
        __syncthreads();
        burst_simt_load<T>(sk, C::LD, s.k, b, j0, 32, s.nk, g, d, 1.0f);
        burst_simt_load<T>(sv, C::LD, s.v, b, j0, 32, s.nk, g, d, 1.0f);
        __syncthreads();
        const int64_t j = j0 + lane;
        int any = 0;
#pragma unroll
        for (int r = 0; r < C::R; r++)
            any |= j >= kb[r] && j < ke[r];
        if (!__any_sync(0xffffffffu, any))
            continue; /* fully masked for this warp's rows */
        float sc[C::R];
#pragma unroll
        for (int r = 0; r < C::R; r++)
            sc[r] = 0.0f;
        for (int c = 0; c < d; c += 8) {
#pragma unroll
            for (int cc = 0; cc < 8; cc++) {
                float kv = sk[lane * C::LD + c + cc];
#pragma unroll
                for (int r = 0; r < C::R; r++)
                    sc[r] = fmaf(sq[(warp * C::R + r) * D + c + cc], kv, sc[r]);
            }
        }
        if (s.cap_in != 0.0f) /* soft-capping of tau log2(e) q.k (q is loaded scaled) */
#pragma unroll
            for (int r = 0; r < C::R; r++)
                sc[r] = sl2 * burst_dcap_score(s, sc[r] * (1.0f / sl2));
        float alpha[C::R];
#pragma unroll
        for (int r = 0; r < C::R; r++) {
            float x = (j >= kb[r] && j < ke[r]) ? sc[r] : -CUDART_INF_F;
            float mnew = fmaxf(m[r], burst_warp_max(x));
            float muse = mnew == -CUDART_INF_F ? 0.0f : mnew;
            alpha[r] = exp2f(m[r] - muse);
            float p = exp2f(x - muse);
            l[r] = fmaf(l[r], alpha[r], burst_warp_sum(p));
            m[r] = mnew;
            sp[(warp * C::R + r) * 32 + lane] = p;
        }
        __syncwarp();
#pragma unroll
        for (int u = 0; u < C::CPL; u++) {
            const int c = lane + 32 * u;
            float acc[C::R];
#pragma unroll
            for (int r = 0; r < C::R; r++)
                acc[r] = 0.0f;
            if (c < d) {
                for (int jj = 0; jj < 32; jj++) {
                    float vv = sv[jj * C::LD + c];
#pragma unroll
                    for (int r = 0; r < C::R; r++)
                        acc[r] = fmaf(sp[(warp * C::R + r) * 32 + jj], vv, acc[r]);
                }
            }
#pragma unroll
            for (int r = 0; r < C::R; r++)
                o[r][u] = fmaf(o[r][u], alpha[r], acc[r]);
        }
        __syncwarp();
    }

    /* fused log-sum-exp merge into (o_acc, lse_acc); rows with no allowed key are untouched */
#pragma unroll
    for (int r = 0; r < C::R; r++) {
        const int64_t i = i0 + warp * C::R + r;
        if (i >= s.nq || l[r] == 0.0f)
            continue;
        float *lse = s.lse_acc + (b * s.hq + h) * s.nq + i;
        double lr = ((double)m[r] + log2((double)l[r])) * 0.69314718055994530942;
        double lo_ = (double)*lse, ln, co, cn;
        if (lo_ == -(double)CUDART_INF) {
            ln = lr;
            co = 0.0;
            cn = 1.0 / (double)l[r];
        } else {
            ln = fmax(lo_, lr) + log1p(exp(-fabs(lo_ - lr)));
            co = exp(lo_ - ln);
            cn = exp(lr - ln) / (double)l[r];
        }
        float *orow = s.o_acc + ((b * s.nq + i) * s.hq + h) * s.d;
#pragma unroll
        for (int u = 0; u < C::CPL; u++) {
            const int c = lane + 32 * u;
            if (c < d)
                orow[c] =
                    co == 0.0 ? (float)cn * o[r][u] : fmaf((float)co, orow[c], (float)cn * o[r][u]);
        }
        __syncwarp();
        if (lane == 0)
            *lse = (float)ln;
    }
}

template <int D> static size_t burst_simt_fwd_smem()
{
    using C = burst_simt_cfg<D>;
    return sizeof(float) * (size_t)(2 * 32 * C::LD + C::ROWS * D + C::ROWS * 32);
}

/* ---- backward: dK and dV --------------------------------------------------------------------- */

template <typename T, int D>
__global__ void __launch_bounds__(128) burst_simt_dkdv(struct burst_cuda_step s)
{
    using C = burst_simt_cfg<D>;
    extern __shared__ float sm[];
    float *sk = sm, *sv = sk + C::ROWS * D, *sq = sv + C::ROWS * D, *sdo = sq + 32 * C::LD;
    float *sp = sdo + 32 * C::LD, *sds = sp + C::ROWS * 32, *slse = sds + C::ROWS * 32;
    float *sdl = slse + 32;
    long long *skb = (long long *)(sdl + 32), *ske = skb + 32;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, d = (int)s.d;
    const int64_t tiles = (s.nk + C::ROWS - 1) / C::ROWS;
    const int64_t t = blockIdx.x % tiles, g = blockIdx.x / tiles % s.hkv;
    const int64_t b = blockIdx.x / tiles / s.hkv, j0 = t * C::ROWS;
    const float sl2 = s.scale * BURST_LOG2E;

    int64_t lo = 0, hi = 0;
    if (threadIdx.x < C::ROWS && j0 + threadIdx.x < s.nk)
        burst_dqueries(s, j0 + threadIdx.x, &lo, &hi);
    int64_t imin, imax;
    burst_block_range(lo, hi, &imin, &imax);
    if (imin >= imax)
        return;

    burst_simt_load<T>(sk, D, s.k, b, j0, C::ROWS, s.nk, g, d, 1.0f);
    burst_simt_load<T>(sv, D, s.v, b, j0, C::ROWS, s.nk, g, d, 1.0f);
    float dk[C::R][C::CPL], dv[C::R][C::CPL];
#pragma unroll
    for (int r = 0; r < C::R; r++)
#pragma unroll
        for (int u = 0; u < C::CPL; u++)
            dk[r][u] = dv[r][u] = 0.0f;

    for (int64_t hh = 0; hh < s.group; hh++) {
        const int64_t h = g * s.group + hh;
        for (int64_t i0 = imin / 32 * 32; i0 < imax; i0 += 32) {
            __syncthreads();
            burst_simt_load<T>(sq, C::LD, s.q, b, i0, 32, s.nq, h, d, 1.0f);
            burst_simt_load<T>(sdo, C::LD, s.dout, b, i0, 32, s.nq, h, d, 1.0f);
            if (threadIdx.x < 32) {
                const struct burst_brow r = burst_brow_at(s, b, h, i0 + threadIdx.x);
                skb[threadIdx.x] = r.kb;
                ske[threadIdx.x] = r.ke;
                slse[threadIdx.x] = r.l2;
                sdl[threadIdx.x] = r.dl;
            }
            __syncthreads();
            /* lane = query row i0 + lane */
            const int64_t kbl = skb[lane], kel = ske[lane];
            int any = 0;
#pragma unroll
            for (int r = 0; r < C::R; r++) {
                const int64_t j = j0 + warp * C::R + r;
                any |= j >= kbl && j < kel;
            }
            if (!__any_sync(0xffffffffu, any))
                continue;
            float sc[C::R], dp[C::R];
#pragma unroll
            for (int r = 0; r < C::R; r++)
                sc[r] = dp[r] = 0.0f;
            for (int c = 0; c < d; c += 8) {
#pragma unroll
                for (int cc = 0; cc < 8; cc++) {
                    float qv = sq[lane * C::LD + c + cc], ov = sdo[lane * C::LD + c + cc];
#pragma unroll
                    for (int r = 0; r < C::R; r++) {
                        sc[r] = fmaf(qv, sk[(warp * C::R + r) * D + c + cc], sc[r]);
                        dp[r] = fmaf(ov, sv[(warp * C::R + r) * D + c + cc], dp[r]);
                    }
                }
            }
#pragma unroll
            for (int r = 0; r < C::R; r++) {
                const int64_t j = j0 + warp * C::R + r;
                float x = sc[r], slope = 1.0f;
                if (s.cap_in != 0.0f) { /* soft-capping, and its derivative 1 - tanh^2 */
                    x = burst_dcap_score(s, x);
                    const float t = burst_dcap_tanh(s, x);
                    slope = fmaf(-t, t, 1.0f);
                }
                float p = (j >= kbl && j < kel) ? exp2f(x * sl2 - slse[lane]) : 0.0f;
                sp[(warp * C::R + r) * 32 + lane] = p;
                sds[(warp * C::R + r) * 32 + lane] = p * (dp[r] - sdl[lane]) * slope;
            }
            __syncwarp();
#pragma unroll
            for (int u = 0; u < C::CPL; u++) {
                const int c = lane + 32 * u;
                if (c >= d)
                    continue;
                for (int ii = 0; ii < 32; ii++) {
                    float ov = sdo[ii * C::LD + c], qv = sq[ii * C::LD + c];
#pragma unroll
                    for (int r = 0; r < C::R; r++) {
                        dv[r][u] = fmaf(sp[(warp * C::R + r) * 32 + ii], ov, dv[r][u]);
                        dk[r][u] = fmaf(sds[(warp * C::R + r) * 32 + ii], qv, dk[r][u]);
                    }
                }
            }
            __syncwarp();
        }
    }
#pragma unroll
    for (int r = 0; r < C::R; r++) {
        const int64_t j = j0 + warp * C::R + r;
        if (j >= s.nk)
            continue;
        const int64_t off = ((b * s.nk + j) * s.hkv + g) * s.d;
#pragma unroll
        for (int u = 0; u < C::CPL; u++) {
            const int c = lane + 32 * u;
            if (c >= d)
                continue;
            if (s.dk)
                s.dk[off + c] += s.scale * dk[r][u];
            if (s.dv)
                s.dv[off + c] += dv[r][u];
        }
    }
}

template <int D> static size_t burst_simt_dkdv_smem()
{
    using C = burst_simt_cfg<D>;
    return sizeof(float) * (size_t)(2 * C::ROWS * D + 2 * 32 * C::LD + 2 * C::ROWS * 32 + 64) +
           2 * 32 * sizeof(long long);
}

/* ---- backward: dQ ------------------------------------------------------------------------------ */

template <typename T, int D>
__global__ void __launch_bounds__(128) burst_simt_dq(struct burst_cuda_step s)
{
    using C = burst_simt_cfg<D>;
    extern __shared__ float sm[];
    float *sk = sm, *sv = sk + 32 * C::LD, *sq = sv + 32 * C::LD, *sdo = sq + C::ROWS * D;
    float *sds = sdo + C::ROWS * D;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, d = (int)s.d;
    const int64_t tiles = (s.nq + C::ROWS - 1) / C::ROWS;
    const int64_t t = tiles - 1 - blockIdx.x % tiles;
    const int64_t h = blockIdx.x / tiles % s.hq, b = blockIdx.x / tiles / s.hq;
    const int64_t g = h / s.group, i0 = t * C::ROWS;
    const float sl2 = s.scale * BURST_LOG2E;

    int64_t lo = 0, hi = 0;
    if (threadIdx.x < C::ROWS && i0 + threadIdx.x < s.nq)
        burst_dkeys(s, i0 + threadIdx.x, &lo, &hi);
    int64_t kmin, kmax;
    burst_block_range(lo, hi, &kmin, &kmax);
    if (kmin >= kmax)
        return;

    burst_simt_load<T>(sq, D, s.q, b, i0, C::ROWS, s.nq, h, d, 1.0f);
    burst_simt_load<T>(sdo, D, s.dout, b, i0, C::ROWS, s.nq, h, d, 1.0f);
    int64_t kb[C::R], ke[C::R];
    float l2[C::R], dl[C::R], dq[C::R][C::CPL];
#pragma unroll
    for (int r = 0; r < C::R; r++) {
        const struct burst_brow x = burst_brow_at(s, b, h, i0 + warp * C::R + r);
        kb[r] = x.kb, ke[r] = x.ke, l2[r] = x.l2, dl[r] = x.dl;
#pragma unroll
        for (int u = 0; u < C::CPL; u++)
            dq[r][u] = 0.0f;
    }

    for (int64_t j0 = kmin / 32 * 32; j0 < kmax; j0 += 32) {
        __syncthreads();
        burst_simt_load<T>(sk, C::LD, s.k, b, j0, 32, s.nk, g, d, 1.0f);
        burst_simt_load<T>(sv, C::LD, s.v, b, j0, 32, s.nk, g, d, 1.0f);
        __syncthreads();
        const int64_t j = j0 + lane;
        int any = 0;
#pragma unroll
        for (int r = 0; r < C::R; r++)
            any |= j >= kb[r] && j < ke[r];
        if (!__any_sync(0xffffffffu, any))
            continue;
        float sc[C::R], dp[C::R];
#pragma unroll
        for (int r = 0; r < C::R; r++)
            sc[r] = dp[r] = 0.0f;
        for (int c = 0; c < d; c += 8) {
#pragma unroll
            for (int cc = 0; cc < 8; cc++) {
                float kv = sk[lane * C::LD + c + cc], vv = sv[lane * C::LD + c + cc];
#pragma unroll
                for (int r = 0; r < C::R; r++) {
                    sc[r] = fmaf(sq[(warp * C::R + r) * D + c + cc], kv, sc[r]);
                    dp[r] = fmaf(sdo[(warp * C::R + r) * D + c + cc], vv, dp[r]);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < C::R; r++) {
            float x = sc[r], slope = 1.0f;
            if (s.cap_in != 0.0f) { /* soft-capping, and its derivative 1 - tanh^2 */
                x = burst_dcap_score(s, x);
                const float t = burst_dcap_tanh(s, x);
                slope = fmaf(-t, t, 1.0f);
            }
            float p = (j >= kb[r] && j < ke[r]) ? exp2f(x * sl2 - l2[r]) : 0.0f;
            sds[(warp * C::R + r) * 32 + lane] = p * (dp[r] - dl[r]) * slope;
        }
        __syncwarp();
#pragma unroll
        for (int u = 0; u < C::CPL; u++) {
            const int c = lane + 32 * u;
            if (c >= d)
                continue;
            for (int jj = 0; jj < 32; jj++) {
                float kv = sk[jj * C::LD + c];
#pragma unroll
                for (int r = 0; r < C::R; r++)
                    dq[r][u] = fmaf(sds[(warp * C::R + r) * 32 + jj], kv, dq[r][u]);
            }
        }
        __syncwarp();
    }
#pragma unroll
    for (int r = 0; r < C::R; r++) {
        const int64_t i = i0 + warp * C::R + r;
        if (i >= s.nq)
            continue;
        float *row = s.dq + ((b * s.nq + i) * s.hq + h) * s.d;
#pragma unroll
        for (int u = 0; u < C::CPL; u++) {
            const int c = lane + 32 * u;
            if (c < d)
                row[c] += s.scale * dq[r][u];
        }
    }
}

template <int D> static size_t burst_simt_dq_smem()
{
    using C = burst_simt_cfg<D>;
    return sizeof(float) * (size_t)(2 * 32 * C::LD + 2 * C::ROWS * D + C::ROWS * 32);
}

#endif /* BURST_CUDA_SIMT_CUH */
