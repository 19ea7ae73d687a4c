/*
 * cuda/burst_cuda_fwd.cu - the forward step with the log-sum-exp merge fused.
 *
 * Two kernels (burst_cuda_class_kind in burst_cuda_probe.c chooses):
 *   - burst_mma_fwd<T, D>: the tensor cores on sm_80+, one instance per head-dim class D (the
 *     caller's d <= D: the loads zero-fill the columns past d, the stores skip them), with the
 *     operand traits burst_tc<T, D>: fp16 / bf16 (burst_cuda_mma.cuh) and fp32 as 3xTF32
 *     (burst_cuda_tf32.cuh). A block of NW warps owns 16 MR NW query rows (16 MR per warp:
 *     for 16-bit inputs MR = 2 up to D = 128, else 1, where the O accumulators of 32 rows would
 *     not fit the registers; NW = 4, and 8 for fp32 above D = 128, whose K/V tiles of 16 keys
 *     then feed twice the warps); K/V tiles stream through shared memory with cp.async double
 *     buffering (the next tile loads while this one computes). S = Q K^T and O += P V run on
 *     the tensor cores with fp32 accumulation. P is rounded to the 16-bit input dtype for the
 *     P V product (as every FlashAttention kernel does; tests/harness.h states the bound this
 *     adds), and split like every fp32 operand under 3xTF32. The softmax keeps per-row max /
 *     sum in fp32 registers in log2 units.
 *   - burst_simt_fwd<T, D> (burst_cuda_simt.cuh): everything else.
 * Both skip key tiles outside the union of their rows' allowed intervals, skip tiles a warp's
 * rows cannot see, and leave rows with no allowed key bit-for-bit unchanged (with s.o_out, the
 * one-rank final output of fwd_final, they are written 0 / -inf).
 */
#include <limits.h>

#include "burst_cuda_tf32.cuh"

/* ---- the tensor-core kernel ------------------------------------------------------------------- */

/* O += P V for one key tile: P from the S accumulators (C layout = A layout), V across its rows;
 * with TC::FRESH (fp32) the tile's sum goes through fresh accumulators (burst_tc_acc_fresh). */
template <typename TC, int D, int MR, int BC>
__device__ __forceinline__ void burst_fwd_pv(float (&o)[MR][D / 8][4],
                                             const float (&sc)[MR][BC / 8][4],
                                             const typename TC::E *vt, int lane)
{
    static_assert(!TC::FRESH || MR == 1, "fresh accumulators: one m16 row tile per warp");
    if (TC::FRESH) {
        typename TC::A pf[BC / 16];
#pragma unroll
        for (int kk = 0; kk < BC / 16; kk++)
            TC::cta(pf[kk], sc[0][2 * kk], sc[0][2 * kk + 1]);
        burst_tc_acc_fresh<TC, BC / 16, D / 16>(o[0], pf, vt, 0, lane);
    } else {
#pragma unroll
        for (int kk = 0; kk < BC / 16; kk++) {
            typename TC::A pf[MR];
#pragma unroll
            for (int mr = 0; mr < MR; mr++)
                TC::cta(pf[mr], sc[mr][2 * kk], sc[mr][2 * kk + 1]);
#pragma unroll
            for (int n2 = 0; n2 < D / 16; n2++) {
                typename TC::B bf;
                TC::ldbt(bf, vt, kk * 16, n2 * 16, lane);
#pragma unroll
                for (int mr = 0; mr < MR; mr++) {
                    TC::mma(o[mr][2 * n2], pf[mr], bf, 0);
                    TC::mma(o[mr][2 * n2 + 1], pf[mr], bf, 1);
                }
            }
        }
    }
}

/* Query rows of a forward block of class D: FWD_NW warps of FWD_MR m16 row tiles, at most one
 * row per thread (the block finds its rows' key ranges in one pass). */
template <typename T, int D> __host__ __device__ constexpr int burst_mma_fwd_rows()
{
    using TC = burst_tc<T, D>;
    static_assert(TC::FWD_MR <= 2, "one row per thread");
    return 16 * TC::FWD_MR * TC::FWD_NW;
}

/* Shared memory of the forward of class D: the block's query rows and two stages of K and V
 * tiles. */
template <typename T, int D> __host__ __device__ constexpr size_t burst_mma_fwd_smem()
{
    using TC = burst_tc<T, D>;
    return (size_t)(burst_mma_fwd_rows<T, D>() + 4 * TC::FWD_BC) * TC::W * sizeof(typename TC::E);
}

/* NW warps of MR m16 row tiles each: a block owns NW * 16 * MR query rows; every K/V fragment
 * loaded from shared memory feeds MR products (MR = 2 halves the shared-memory traffic per
 * flop), and every K/V tile loaded feeds NW warps. */
template <typename T, int D>
__device__ __forceinline__ void burst_mma_fwd_body(const struct burst_cuda_step &s)
{
    using TC = burst_tc<T, D>;
    using E = typename TC::E;
    constexpr int MR = TC::FWD_MR, BC = TC::FWD_BC, NT = 32 * TC::FWD_NW;
    constexpr int BR = burst_mma_fwd_rows<T, D>(), W = TC::W;
    extern __shared__ __align__(16) unsigned char smraw[];
    E *sq = (E *)smraw, *sk = sq + BR * W, *sv = sk + 2 * BC * W;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t tiles = (s.nq + BR - 1) / BR;
    const int64_t t = tiles - 1 - blockIdx.x % tiles;
    const int64_t h = blockIdx.x / tiles % s.hq, b = blockIdx.x / tiles / s.hq;
    const int64_t g = h / s.group, i0 = t * BR;
    const float sl2 = s.scale * BURST_LOG2E;

    int64_t lo = 0, hi = 0;
    if (threadIdx.x < BR && i0 + threadIdx.x < s.nq) /* MR = 1: half the threads */
        burst_dkeys(s, i0 + threadIdx.x, &lo, &hi);
    int64_t kmin, kmax;
    burst_block_range(lo, hi, &kmin, &kmax);
    if (kmin >= kmax) { /* no key for any row of the block */
        burst_final_empty(s, b, h, i0, min(i0 + (int64_t)BR, s.nq), threadIdx.x, blockDim.x);
        return;
    }

    /* this thread's rows in the mma C layout: r = 2 mr + u -> warp rows 16 mr + rq + 8 u */
    const int rq = lane >> 2, cq = 2 * (lane & 3);
    int kb[2 * MR], ke[2 * MR]; /* local indices: the backend sends nk < 2^31 only */
    int wb = 0, we = INT_MAX, ub = INT_MAX, ue = 0;
#pragma unroll
    for (int r = 0; r < 2 * MR; r++) {
        const int64_t i = i0 + warp * 16 * MR + (r >> 1) * 16 + rq + 8 * (r & 1);
        int64_t b64 = 0, e64 = 0;
        if (i < s.nq)
            burst_dkeys(s, i, &b64, &e64);
        kb[r] = (int)b64;
        ke[r] = (int)e64;
        wb = wb > kb[r] ? wb : kb[r];
        we = we < ke[r] ? we : ke[r];
        if (ke[r] > kb[r]) {
            ub = ub < kb[r] ? ub : kb[r];
            ue = ue > ke[r] ? ue : ke[r];
        }
    }
    for (int m = 1; m < 32; m <<= 1) {
        wb = max(wb, __shfl_xor_sync(0xffffffffu, wb, m));
        we = min(we, __shfl_xor_sync(0xffffffffu, we, m));
        ub = min(ub, __shfl_xor_sync(0xffffffffu, ub, m));
        ue = max(ue, __shfl_xor_sync(0xffffffffu, ue, m));
    }

    const int64_t jfirst = kmin / BC * BC;
    burst_tc_load<TC, D, BR, NT>(sq, s.q, b, i0, s.nq, h);
    burst_tc_load<TC, D, BC, NT>(sk, s.k, b, jfirst, s.nk, g);
    burst_tc_load<TC, D, BC, NT>(sv, s.v, b, jfirst, s.nk, g);
    burst_cp_commit();

    float o[MR][D / 8][4];
#pragma unroll
    for (int mr = 0; mr < MR; mr++)
#pragma unroll
        for (int n = 0; n < D / 8; n++)
            o[mr][n][0] = o[mr][n][1] = o[mr][n][2] = o[mr][n][3] = 0.0f;
    float m[2 * MR], l[2 * MR];
#pragma unroll
    for (int r = 0; r < 2 * MR; r++) {
        m[r] = -CUDART_INF_F;
        l[r] = 0.0f;
    }

    int stage = 0;
    for (int64_t j0 = jfirst; j0 < kmax; j0 += BC, stage ^= 1) {
        if (j0 + BC < kmax) {
            burst_tc_load<TC, D, BC, NT>(sk + (stage ^ 1) * BC * W, s.k, b, j0 + BC, s.nk, g);
            burst_tc_load<TC, D, BC, NT>(sv + (stage ^ 1) * BC * W, s.v, b, j0 + BC, s.nk, g);
            burst_cp_commit();
            burst_cp_wait<1>();
        } else {
            burst_cp_wait<0>();
        }
        __syncthreads();
        const E *kt = sk + stage * BC * W, *vt = sv + stage * BC * W;
        if (ue > j0 && ub < j0 + BC) {                  /* some row of this warp sees this tile */
            float sc[MR][BC / 8][4], ss[MR][BC / 8][4]; /* ss: TC::mma2's small terms */
#pragma unroll
            for (int mr = 0; mr < MR; mr++)
#pragma unroll
                for (int n = 0; n < BC / 8; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        sc[mr][n][e] = ss[mr][n][e] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                typename TC::A qa[MR];
#pragma unroll
                for (int mr = 0; mr < MR; mr++)
                    TC::lda(qa[mr], sq, warp * 16 * MR + mr * 16, kk * 16, lane);
#pragma unroll
                for (int n2 = 0; n2 < BC / 16; n2++) {
                    typename TC::B bf;
                    TC::ldb(bf, kt, n2 * 16, kk * 16, lane);
#pragma unroll
                    for (int mr = 0; mr < MR; mr++) {
                        TC::mma2(sc[mr][2 * n2], ss[mr][2 * n2], qa[mr], bf, 0);
                        TC::mma2(sc[mr][2 * n2 + 1], ss[mr][2 * n2 + 1], qa[mr], bf, 1);
                    }
                }
            }
#pragma unroll
            for (int mr = 0; mr < MR; mr++)
                burst_tc_add_small<TC, BC / 8>(sc[mr], ss[mr]);
            if (s.cap_in != 0.0f) /* soft-capping: a branch of its own, the same for the block */
#pragma unroll
                for (int mr = 0; mr < MR; mr++)
#pragma unroll
                    for (int n = 0; n < BC / 8; n++)
#pragma unroll
                        for (int e = 0; e < 4; e++)
                            sc[mr][n][e] = burst_dcap_score(s, sc[mr][n][e]);
            /* the mask, where some row of the warp does not see the whole tile: a branch of its
             * own, so that full tiles (all but the diagonal ones of a causal mask) skip it */
            if (!(j0 >= wb && j0 + BC <= we))
#pragma unroll
                for (int mr = 0; mr < MR; mr++)
#pragma unroll
                    for (int n = 0; n < BC / 8; n++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int r = 2 * mr + (e >> 1);
                            const int j = (int)j0 + n * 8 + cq + (e & 1);
                            if (!(j >= kb[r] && j < ke[r]))
                                sc[mr][n][e] = -CUDART_INF_F;
                        }
            /* row maxima of the raw scores; the scale (> 0) is applied in the exponent's FMA */
            float mx[2 * MR];
#pragma unroll
            for (int r = 0; r < 2 * MR; r++)
                mx[r] = -CUDART_INF_F;
#pragma unroll
            for (int mr = 0; mr < MR; mr++)
#pragma unroll
                for (int n = 0; n < BC / 8; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        mx[2 * mr + (e >> 1)] = fmaxf(mx[2 * mr + (e >> 1)], sc[mr][n][e]);
            float alpha[2 * MR], muse[2 * MR];
#pragma unroll
            for (int r = 0; r < 2 * MR; r++) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                burst_max_lag(m[r], mx[r] * sl2, &muse[r], &alpha[r]);
                l[r] *= alpha[r];
            }
            if (burst_any_moved<2 * MR>(alpha))
#pragma unroll
                for (int mr = 0; mr < MR; mr++)
#pragma unroll
                    for (int n = 0; n < D / 8; n++) {
                        o[mr][n][0] *= alpha[2 * mr];
                        o[mr][n][1] *= alpha[2 * mr];
                        o[mr][n][2] *= alpha[2 * mr + 1];
                        o[mr][n][3] *= alpha[2 * mr + 1];
                    }
#pragma unroll
            for (int mr = 0; mr < MR; mr++)
#pragma unroll
                for (int n = 0; n < BC / 8; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int r = 2 * mr + (e >> 1);
                        float p = burst_ex2(fmaf(sc[mr][n][e], sl2, -muse[r]));
                        sc[mr][n][e] = p;
                        l[r] += p;
                    }
            /* O += P V: P from the S accumulators (C layout = A layout), V across its rows */
            burst_fwd_pv<TC, D, MR, BC>(o, sc, vt, lane);
        }
        __syncthreads(); /* everyone is done with this stage before it is refilled */
    }

    /* row sums across the quad, then the fused merge into (o_acc, lse_acc) */
#pragma unroll
    for (int r = 0; r < 2 * MR; r++) {
        const int mr = r >> 1, u = r & 1;
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        const int64_t i = i0 + warp * 16 * MR + mr * 16 + rq + 8 * u;
        if (i < s.nq)
            burst_merge_row<D>(s, b, h, i, m[r], l[r], &o[mr][0][0], u, cq, lane);
    }
}

/* The kernel: the body where its shared memory fits this compilation pass's devices (fp32 class
 * 256 runs on Hopper only: burst_arch_unfit). */
template <typename T, int D>
__global__ void __launch_bounds__(32 * burst_tc<T, D>::FWD_NW, burst_tc<T, D>::FWD_NW == 4 ? 2 : 1)
    burst_mma_fwd(struct burst_cuda_step s)
{
    BURST_UNFIT_KERNEL((burst_mma_fwd_smem<T, D>()), (burst_mma_fwd_body<T, D>(s)));
}

/* ---- dispatch ---------------------------------------------------------------------------------- */

template <typename T, int D> static int burst_fwd_simt_run(const struct burst_cuda_step *s)
{
    using C = burst_simt_cfg<D>;
    int64_t blocks = s->batch * s->hq * ((s->nq + C::ROWS - 1) / C::ROWS);
    burst_simt_fwd<T, D>
        <<<(unsigned)blocks, 128, burst_simt_fwd_smem<D>(), cudaStreamPerThread>>>(*s);
    return cudaGetLastError();
}

template <typename T> static int burst_fwd_simt(const struct burst_cuda_step *s)
{
    if (s->d <= 64)
        return burst_fwd_simt_run<T, 64>(s);
    if (s->d <= 128)
        return burst_fwd_simt_run<T, 128>(s);
    return burst_fwd_simt_run<T, 256>(s);
}

template <typename T, int D> static int burst_fwd_mma_run(const struct burst_cuda_step *s)
{
    constexpr int BR = burst_mma_fwd_rows<T, D>();
    int64_t blocks = s->batch * s->hq * ((s->nq + BR - 1) / BR);
    burst_mma_fwd<T, D><<<(unsigned)blocks, 32 * burst_tc<T, D>::FWD_NW, burst_mma_fwd_smem<T, D>(),
                          cudaStreamPerThread>>>(*s);
    return cudaGetLastError();
}

template <typename T> static int burst_fwd_mma(const struct burst_cuda_step *s)
{
    return burst_by_class(s->d,
                          [&](auto c) { return burst_fwd_mma_run<T, decltype(c)::value>(s); });
}

extern "C" int burst_cuda_launch_fwd(const struct burst_cuda_step *s, int kind, int num_sms)
{
    (void)num_sms;
#ifdef BURST_CUDA_SM90A
    if (kind == BURST_CUDA_FWD_WGMMA) {
        const int e = burst_cuda_launch_fwd_sm90(s, num_sms);
        if (e != BURST_CUDA_NO_TMA) /* else views no tensor map describes: mma.sync */
            return e;
        kind = BURST_CUDA_FWD_MMA;
    }
#endif
    if (kind == BURST_CUDA_FWD_MMA) /* fp32: 3xTF32 */
        return s->q.dtype == BURST_CUDA_F16    ? burst_fwd_mma<__half>(s)
               : s->q.dtype == BURST_CUDA_BF16 ? burst_fwd_mma<__nv_bfloat16>(s)
                                               : burst_fwd_mma<float>(s);
    switch (s->q.dtype) {
    case BURST_CUDA_F16: return burst_fwd_simt<__half>(s);
    case BURST_CUDA_BF16: return burst_fwd_simt<__nv_bfloat16>(s);
    default: return burst_fwd_simt<float>(s);
    }
}

template <typename T, int D> static cudaError_t burst_fwd_attr_simt()
{
    return cudaFuncSetAttribute(burst_simt_fwd<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)burst_simt_fwd_smem<D>());
}

template <typename T> static cudaError_t burst_fwd_attr()
{
    cudaError_t e = burst_fwd_attr_simt<T, 64>();
    if (e == cudaSuccess)
        e = burst_fwd_attr_simt<T, 128>();
    if (e == cudaSuccess)
        e = burst_fwd_attr_simt<T, 256>();
    return e;
}

template <typename T, int D> static cudaError_t burst_fwd_attr_mma1()
{
    return burst_smem_limit(burst_mma_fwd<T, D>, burst_mma_fwd_smem<T, D>());
}

template <typename T> static cudaError_t burst_fwd_attr_mma()
{
    return burst_each_class([](auto c) { return burst_fwd_attr_mma1<T, decltype(c)::value>(); });
}

extern "C" int burst_cuda_bwd_init(void);
extern "C" size_t burst_cuda_mma_bwd_smem(int d, int dtype);

extern "C" size_t burst_cuda_mma_smem(int d, int dtype)
{
    const size_t f = burst_by_class(d, [&](auto c) {
        constexpr int D = decltype(c)::value;
        return dtype == BURST_CUDA_F32 ? burst_mma_fwd_smem<float, D>()
                                       : burst_mma_fwd_smem<__half, D>();
    });
    const size_t b = burst_cuda_mma_bwd_smem(d, dtype);
    return f > b ? f : b;
}

extern "C" int burst_cuda_kernels_init(void)
{
    cudaError_t e = burst_fwd_attr<float>();
    if (e == cudaSuccess)
        e = burst_fwd_attr<__half>();
    if (e == cudaSuccess)
        e = burst_fwd_attr<__nv_bfloat16>();
    if (e == cudaSuccess)
        e = burst_fwd_attr_mma<__half>();
    if (e == cudaSuccess)
        e = burst_fwd_attr_mma<__nv_bfloat16>();
    if (e == cudaSuccess)
        e = burst_fwd_attr_mma<float>();
    if (e == cudaSuccess)
        e = (cudaError_t)burst_cuda_bwd_init();
    return e;
}
