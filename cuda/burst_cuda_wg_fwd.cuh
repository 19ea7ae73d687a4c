/*
 * cuda/burst_cuda_wg_fwd.cuh - what the Hopper forwards share (burst_cuda_fwd_sm90.cu, 16-bit;
 * burst_cuda_fwd_fp8.cu, e4m3): the online softmax of an S tile in the wgmma accumulator layout,
 * the work items of their persistent blocks and the allowed keys of a consumer's rows.
 */
#ifndef BURST_CUDA_WG_FWD_CUH
#define BURST_CUDA_WG_FWD_CUH

#include "burst_cuda_wgmma.cuh"

/* The online softmax of one S tile in place (the accumulator layout of burst_cuda_wgmma.cuh).
 * MASK: the tile is not wholly allowed for the warpgroup, so keys outside each row's [kb, ke)
 * become -inf (lo / hi: those bounds relative to this thread's first column; only tiles on a
 * mask's edge pay for the test). Then the running maximum m (log2 units: the scale sl2 > 0 is
 * applied to the maximum, and fused into the exponent's FMA for each element), P = exp2(S sl2 -
 * m) left in sc, l updated, and alpha = the factor the running O must be multiplied by, as
 * burst_max_lag with a lag of SLACK (exactly 1 where m did not move: burst_any_moved). SHIFT > 0
 * carries the maximum SHIFT lower, so that P <= 2^SHIFT (the fp8 forward's P scale, which needs
 * SLACK = 0; O and l share the factor). The maximum and the sum run as four chains per row,
 * for short dependency chains. */
template <int BC, bool MASK, int SHIFT, int SLACK>
__device__ __forceinline__ void burst_wg_softmax(float *sc, const int *lo, const int *hi, float sl2,
                                                 float *m, float *l, float *alpha)
{
    float mc[2][4]; /* four chains of maxima per row */
#pragma unroll
    for (int u = 0; u < 2; u++)
#pragma unroll
        for (int k = 0; k < 4; k++)
            mc[u][k] = -CUDART_INF_F;
#pragma unroll
    for (int n = 0; n < BC / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int u = e >> 1, col = n * 8 + (e & 1);
            if (MASK && !(col >= lo[u] && col < hi[u]))
                sc[4 * n + e] = -CUDART_INF_F;
            mc[u][2 * (n & 1) + (e & 1)] = fmaxf(mc[u][2 * (n & 1) + (e & 1)], sc[4 * n + e]);
        }
    float muse[2];
#pragma unroll
    for (int u = 0; u < 2; u++) {
        float mx = fmaxf(fmaxf(mc[u][0], mc[u][1]), fmaxf(mc[u][2], mc[u][3]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        float top = mx * sl2;
        if constexpr (SHIFT != 0)
            top -= (float)SHIFT;
        burst_max_lag<SLACK>(m[u], top, &muse[u], &alpha[u]);
        l[u] *= alpha[u];
    }
    float ls[2][4] = {};
#pragma unroll
    for (int n = 0; n < BC / 2; n++) {
        const float x = burst_ex2(fmaf(sc[n], sl2, -muse[(n >> 1) & 1]));
        sc[n] = x;
        ls[(n >> 1) & 1][(n >> 2) & 3] += x;
    }
#pragma unroll
    for (int u = 0; u < 2; u++)
        l[u] += (ls[u][0] + ls[u][1]) + (ls[u][2] + ls[u][3]);
}

/* Softmax of the tile at key j0 (its scores soft-capped first when the step has a cap): masked only
 * where the warpgroup's rows do not all see it. */
template <int BC, int SHIFT, int SLACK>
__device__ __forceinline__ void
burst_wg_softmax_at(float *sc, int j0, int wb, int we, const int *kb, const int *ke, int cq,
                    float sl2, const struct burst_cuda_step &s, float *m, float *l, float *alpha)
{
    if (s.cap_in != 0.0f) /* soft-capping: the same branch for the whole block */
#pragma unroll
        for (int n = 0; n < BC / 2; n++)
            sc[n] = burst_dcap_score(s, sc[n]);
    if (j0 >= wb && j0 + BC <= we) {
        burst_wg_softmax<BC, false, SHIFT, SLACK>(sc, kb, ke, sl2, m, l, alpha);
    } else {
        const int lo[2] = {kb[0] - j0 - cq, kb[1] - j0 - cq};
        const int hi[2] = {ke[0] - j0 - cq, ke[1] - j0 - cq};
        burst_wg_softmax<BC, true, SHIFT, SLACK>(sc, lo, hi, sl2, m, l, alpha);
    }
}

/* One work item of a block: BR = 64 NC query rows from i0 of head h (kv head g), batch b, and
 * their nt key tiles of BC from jfirst; nt = 0 where no row has a key. Item w of a step's
 * batch x hq x tiles: the tiles of a head run backwards (the heaviest causal tiles first).
 * Computed alike by every thread from the parameters, so the compiler can see the tile loop is
 * uniform (a wgmma under a branch it cannot prove uniform gets serialised). Both position maps
 * increase and the mask is a band, so every row's interval lies in [start of the first row's,
 * end of the last row's); tiles a warpgroup does not see are computed anyway, fully masked:
 * those of the later warpgroups' rows on a causal diagonal, one or two tiles. */
struct burst_wg_item { /* 32-bit: the TMA coordinates are, and the backend sends nk < 2^31 */
    int b, h, g, i0, jfirst, nt;
};
template <int BC, int BR>
__device__ __forceinline__ struct burst_wg_item burst_wg_item_at(const struct burst_cuda_step &s,
                                                                 int64_t tiles, int64_t w)
{
    struct burst_wg_item it;
    it.i0 = (int)((tiles - 1 - w % tiles) * BR);
    it.h = (int)(w / tiles % s.hq);
    it.b = (int)(w / tiles / s.hq);
    it.g = it.h / (int)s.group;
    int64_t kmin, kmax, unused;
    burst_dkeys(s, it.i0, &kmin, &unused);
    burst_dkeys(s, min((int64_t)it.i0 + BR, s.nq) - 1, &unused, &kmax);
    it.jfirst = (int)(kmin / BC * BC);
    it.nt = kmin < kmax ? (int)((kmax - it.jfirst + BC - 1) / BC) : 0;
    return it;
}

/* The allowed keys of this thread's two rows r0 and r0 + 8 (accumulator layout) of a consumer
 * warpgroup wc, as local indices [kb[u], ke[u]) (the backend sends nk < 2^31 only; rows past nq
 * get none), and [wb, we): the keys every row of the warpgroup sees, met through rng (four
 * per-warp slots in shared memory) and the warpgroup's barrier. */
__device__ __forceinline__ void burst_wg_rows(const struct burst_cuda_step &s, int64_t r0,
                                              int (*rng)[2], int wc, int *kb, int *ke, int *wb,
                                              int *we)
{
    const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
#pragma unroll
    for (int u = 0; u < 2; u++) {
        const int64_t i = r0 + 8 * u;
        int64_t b64 = 0, e64 = 0;
        if (i < s.nq)
            burst_dkeys(s, i, &b64, &e64);
        kb[u] = (int)b64;
        ke[u] = (int)e64;
    }
    const int wmax = __reduce_max_sync(0xffffffffu, max(kb[0], kb[1]));
    const int wmin = __reduce_min_sync(0xffffffffu, min(ke[0], ke[1]));
    if (lane == 0) {
        rng[warp][0] = wmax;
        rng[warp][1] = wmin;
    }
    burst_wg_bar(wc);
    *wb = max(max(rng[0][0], rng[1][0]), max(rng[2][0], rng[3][0]));
    *we = min(min(rng[0][1], rng[1][1]), min(rng[2][1], rng[3][1]));
}

#endif /* BURST_CUDA_WG_FWD_CUH */
