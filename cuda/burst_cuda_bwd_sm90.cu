/*
 * cuda/burst_cuda_bwd_sm90.cu - the backward step on Hopper's warpgroup tensor cores (wgmma,
 * sm_90a only, like burst_cuda_fwd_sm90.cu; chosen with it, BURST_CUDA_WGMMA=0 turns both off).
 * Same contract and the same two kernels as burst_cuda_bwd.cu (each output element has one
 * writer, no float atomics: the deterministic backward), and one more for plans that are not
 * deterministic: the dK/dV kernel with dQ added by float atomics (DQ below), which saves the dQ
 * kernel's recomputation of S and dP (7 matrix products per tile pair -> 5). These kernels serve
 * the classes up to BURST_CUDA_WG_BWD_MAX; the wider ones run burst_cuda_bwd_sm90_wide.cu.
 *   - dK/dV: a block owns 128 keys of a kv head (2 warpgroups x 64) and loops over the heads of
 *     its group and the query tiles (BURST_CUDA_WG_DKDV_BQ rows) that may see its keys. Per tile:
 *     S^T = K Q^T and dP^T = V dO^T
 *     (A = its K / V rows, B = the Q / dO tile, both from shared memory), P^T from the saved lse,
 *     dS^T = P^T (dP^T - D), then dV += P^T dO and dK += dS^T Q (A = P^T / dS^T in registers,
 *     B = the dO / Q tile read transposed);
 *   - dK/dV/dQ (DQ): the dK/dV kernel that also adds dQ (below);
 *   - dQ: a block owns 128 query rows of a head (2 warpgroups x 64) and loops over 64-key tiles:
 *     S = Q K^T, dP = dO V^T, dS = P (dP - D), dQ += dS K (K read transposed).
 * The streamed tiles go through 3 cp.async stages, one tile ahead, and each tile's elementwise
 * work overlaps the previous tile's register-A products, as in the forward (whose comment
 * explains the stage rule). P and dS are rounded to the input dtype as A operands, as in the
 * sm_80 kernels (tests/harness.h bounds this).
 */
#include <limits.h>

#include "burst_cuda_wgmma.cuh"

#define WB_NS 3    /* stages of the streamed tiles */
#define WB_ROWS 64 /* rows of a streamed tile */

/* ---- dQ --------------------------------------------------------------------------------------- */

template <int D> constexpr size_t burst_wg_dq_smem()
{
    return (size_t)(2 * 128 + WB_NS * 2 * WB_ROWS) * burst_wg_panels<D>() * 128 + 1024;
}

template <typename T, int D>
__global__ void __launch_bounds__(256, 1) burst_wg_dq(struct burst_cuda_step s)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BR = 128, BC = WB_ROWS, NT = 256;
    constexpr int QBYTES = BR * burst_wg_panels<D>() * 128,
                  KBYTES = BC * burst_wg_panels<D>() * 128;
    constexpr uint32_t DSTAGE = 2 * KBYTES >> 4;
    extern __shared__ __align__(1024) unsigned char smraw[];
    __shared__ int s_rng[2][2];
    unsigned char *sq = smraw + ((1024u - (burst_smem_addr(smraw) & 1023u)) & 1023u);
    unsigned char *sdo = sq + QBYTES, *skv = sdo + QBYTES;
    const int wg = burst_wg_index(), warp = (threadIdx.x >> 5) & 3;
    const int lane = threadIdx.x & 31;
    const int64_t tiles = (s.nq + BR - 1) / BR;
    const int64_t t = tiles - 1 - blockIdx.x % tiles;
    const int64_t h = blockIdx.x / tiles % s.hq, b = blockIdx.x / tiles / s.hq;
    const int64_t g = h / s.group, i0 = t * BR;
    const float sl2 = s.scale * BURST_LOG2E;

    int64_t kmin, kmax, unused; /* uniform, as in the forward */
    burst_dkeys(s, i0, &kmin, &unused);
    burst_dkeys(s, min(i0 + BR, s.nq) - 1, &unused, &kmax);
    if (kmin >= kmax)
        return;

    const int rq = lane >> 2, cq = 2 * (lane & 3);
    int kb[2], ke[2];
    float l2[2], dl[2];
#pragma unroll
    for (int u = 0; u < 2; u++) {
        const struct burst_brow r = burst_brow_at(s, b, h, i0 + wg * 64 + warp * 16 + rq + 8 * u);
        l2[u] = r.l2;
        dl[u] = r.dl;
        kb[u] = (int)r.kb;
        ke[u] = (int)r.ke;
    }
    if (threadIdx.x < 2) {
        s_rng[threadIdx.x][0] = 0;
        s_rng[threadIdx.x][1] = INT_MAX;
    }
    __syncthreads();
    atomicMax(&s_rng[wg][0], max(kb[0], kb[1]));
    atomicMin(&s_rng[wg][1], min(ke[0], ke[1]));
    __syncthreads();
    const int wb = s_rng[wg][0], we = s_rng[wg][1];

    const int64_t jfirst = kmin / BC * BC;
    const int nt = (int)((kmax - jfirst + BC - 1) / BC);
    burst_wg_loader<T, D, BC, NT> lk, lv;
    lk.init(s.k, b, g, s.d);
    lv.init(s.v, b, g, s.d);
    {
        burst_wg_loader<T, D, BR, NT> lq;
        lq.init(s.q, b, h, s.d);
        lq.load(sq, i0, s.nq);
        lq.init(s.dout, b, h, s.d);
        lq.load(sdo, i0, s.nq);
    }
    lk.load(skv, jfirst, s.nk);
    lv.load(skv + KBYTES, jfirst, s.nk);
    burst_cp_commit();

    float dq[D / 2];
#pragma unroll
    for (int n = 0; n < D / 2; n++)
        dq[n] = 0.0f;
    float sc[BC / 2], dp[BC / 2];
    unsigned ds[BC / 16][4];
    const uint32_t dqd = burst_wg_dlo(sq + wg * 64 * 128, 16);
    const uint32_t dod = burst_wg_dlo(sdo + wg * 64 * 128, 16);
    const uint32_t dk0 = burst_wg_dlo(skv, 16);          /* K as B, K-major */
    const uint32_t dv0 = burst_wg_dlo(skv + KBYTES, 16); /* V as B, K-major */
    const uint32_t dkt0 = burst_wg_dlo(skv, BC * 128);   /* K as B, MN-major */

    auto tile_begin = [&](int j, int st) {
        burst_cp_wait<0>();
        burst_fence_proxy_async();
        __syncthreads();
        if (j + 1 < nt) {
            unsigned char *nx = skv + (st == WB_NS - 1 ? 0 : st + 1) * 2 * KBYTES;
            const int64_t r0 = jfirst + (int64_t)(j + 1) * BC;
            lk.load(nx, r0, s.nk);
            lv.load(nx + KBYTES, r0, s.nk);
            burst_cp_commit();
        }
        burst_wg_fence();
        burst_wg_abt<T, D, BC, BR>(sc, dqd, dk0 + st * DSTAGE);
        burst_wg_abt<T, D, BC, BR>(dp, dod, dv0 + st * DSTAGE);
    };
    /* dS = P (dP - D) with P = 2^(S tau log2e - lse log2e) on allowed pairs */
    auto dsoft = [&](int64_t j0) {
        const bool full = j0 >= wb && j0 + BC <= we;
        if (s.cap_in != 0.0f) { /* soft-capped scores, dS times the cap's derivative 1 - tanh^2 */
#pragma unroll
            for (int n = 0; n < BC / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int u = e >> 1, j = (int)j0 + n * 8 + cq + (e & 1);
                    const bool ok = full || (j >= kb[u] && j < ke[u]);
                    const float x = burst_dcap_score(s, sc[4 * n + e]), t = burst_dcap_tanh(s, x);
                    const float p = ok ? burst_ex2(fmaf(x, sl2, -l2[u])) : 0.0f;
                    sc[4 * n + e] = p * (dp[4 * n + e] - dl[u]) * fmaf(-t, t, 1.0f);
                }
            return;
        }
#pragma unroll
        for (int n = 0; n < BC / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int u = e >> 1, j = (int)j0 + n * 8 + cq + (e & 1);
                const bool ok = full || (j >= kb[u] && j < ke[u]);
                const float p = ok ? burst_ex2(fmaf(sc[4 * n + e], sl2, -l2[u])) : 0.0f;
                sc[4 * n + e] = p * (dp[4 * n + e] - dl[u]);
            }
    };
    tile_begin(0, 0);
    burst_wg_wait<0>();
    burst_wg_pin<BC / 2>(sc);
    burst_wg_pin<BC / 2>(dp);
    dsoft(jfirst);
    burst_wg_pack<T, BC>(ds, sc);
    int prev = 0;
    for (int j = 1; j < nt; j++) {
        const int st = prev == WB_NS - 1 ? 0 : prev + 1;
        tile_begin(j, st);
        burst_wg_pv<T, D, BC>(dq, ds, dkt0 + prev * DSTAGE);
        burst_wg_wait<1>(); /* S_j and dP_j done; dQ += dS_{j-1} K_{j-1} may still run */
        burst_wg_pin<BC / 2>(sc);
        burst_wg_pin<BC / 2>(dp);
        dsoft(jfirst + (int64_t)j * BC);
        burst_wg_wait<0>();
        burst_wg_pin<D / 2>(dq);
        burst_wg_pack<T, BC>(ds, sc);
        prev = st;
    }
    burst_wg_fence();
    burst_wg_pv<T, D, BC>(dq, ds, dkt0 + prev * DSTAGE);
    burst_wg_wait<0>();
    burst_wg_pin<D / 2>(dq);

#pragma unroll
    for (int u = 0; u < 2; u++) {
        const int64_t i = i0 + wg * 64 + warp * 16 + rq + 8 * u;
        if (i >= s.nq)
            continue;
        float *row = s.dq + ((b * s.nq + i) * s.hq + h) * s.d;
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            if (n * 8 >= s.d) /* the class's columns past d */
                break;
            float2 *p2 = (float2 *)(row + n * 8 + cq), x = *p2;
            x.x = fmaf(s.scale, dq[4 * n + 2 * u], x.x);
            x.y = fmaf(s.scale, dq[4 * n + 2 * u + 1], x.y);
            *p2 = x;
        }
    }
#endif
}

/* ---- dK and dV -------------------------------------------------------------------------------- */

/* Query rows per streamed tile of the dK/dV kernel (BURST_CUDA_WG_DKDV_BQ): 48 above d = 64,
 * where 64 made the kernel spill at d = 128 (dK, dV, S^T, dP^T and the previous tile's P^T,
 * dS^T live at once: 255 registers and ~230 bytes of local memory per thread). */
template <int D> __host__ __device__ constexpr int burst_wg_dkdv_bq()
{
    return BURST_CUDA_WG_DKDV_BQ(D);
}

/* Rows of dQ^T (d) a DQ block computes: its D columns in whole 64-column panels (the panels'
 * columns past the class are zero in shared memory: classes 32 and 96 compute 64 and 128). */
template <int D> __host__ __device__ constexpr int burst_wg_dq_width()
{
    return (D + 63) / 64 * 64;
}

/* fp32 elements per row of the dQ staging tile: burst_wg_dq_width, padded by 16 bytes so that
 * the accumulator stores of a warp (8 d x 4 rows) fall in distinct banks */
template <int D> __host__ __device__ constexpr int burst_wg_dq_stride()
{
    return burst_wg_dq_width<D>() + 4;
}

/* With DQ, three more [BQ][128] tiles: dS (query rows x keys, double-buffered) and P, and the fp32
 * dQ staging tile [BQ][D + 4]. No alignment slack: the kernel's shared memory is declared
 * __align__(1024) (the toolchain pads the static part to 1 KiB; the kernel traps otherwise), and
 * at D = 256 the slack would not fit beside that padding in 227 KiB. */
template <int D, bool DQ> constexpr size_t burst_wg_dkdv_smem()
{
    constexpr int BQ = burst_wg_dkdv_bq<D>();
    return (size_t)(2 * 128 + WB_NS * 2 * BQ) * burst_wg_panels<D>() * 128 +
           (DQ ? 3 * BQ * 128 * 2 : 0) + WB_NS * BQ * sizeof(struct burst_wg_qrow) +
           (DQ ? BQ * burst_wg_dq_stride<D>() * 4 : 0);
}

/* DQ: also dQ += tau dS K of every query tile, added to s.dq with float atomics (plans that are
 * not deterministic: the order of the additions varies; no dQ kernel is launched then). dS and P
 * (rounded to T) go through shared memory, where dK += dS^T Q and dV += P^T dO read them (which
 * frees the registers the dQ^T accumulators need), and the two warpgroups split dQ^T = K^T dS^T:
 * the 64-row halves of 128 rows (classes 96, 128: 64 x BQ each), the halves of the tile's
 * queries at 64 rows (classes 32, 64: 64 x BQ / 2 each). Each warpgroup stores its part to a
 * staging tile of fp32 query rows, from which 4-wide vector atomics add whole rows. */
template <typename T, int D, bool DQ>
__global__ void __launch_bounds__(256, 1) burst_wg_dkdv(struct burst_cuda_step s)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BC = 128, BQ = burst_wg_dkdv_bq<D>(), NT = 256;
    constexpr int DH = D; /* columns of dK, dV */
    static_assert(D <= BURST_CUDA_WG_BWD_MAX, "the wide classes run burst_ww_bwd");
    constexpr int KBYTES = BC * burst_wg_panels<D>() * 128,
                  QBYTES = BQ * burst_wg_panels<D>() * 128;
    constexpr int SBYTES = BQ * BC * 2;
    constexpr int DQW = burst_wg_dq_width<D>(); /* DQ: rows of dQ^T */
    static_assert(!DQ || DQW == 64 || DQW == 128, "the dQ split of DQ: 64 or 128 rows");
    constexpr int NQ = DQW > 64 ? BQ : BQ / 2; /* query columns of a warpgroup's dQ^T */
    constexpr uint32_t DSTAGE = 2 * QBYTES >> 4;
    extern __shared__ __align__(1024) unsigned char smraw[];
    unsigned char *sk = smraw; /* __align__(1024): the panels' swizzle pattern repeats there */
    if (burst_smem_addr(smraw) & 1023u)
        __trap();
    unsigned char *sv = sk + KBYTES, *sqo = sv + KBYTES; /* stage st: Q, then dO */
    unsigned char *sds = sqo + WB_NS * 2 * QBYTES;       /* DQ: dS tiles 0 and 1, then P */
    struct burst_wg_qrow *rows = (struct burst_wg_qrow *)(sds + (DQ ? 3 * SBYTES : 0));
    float *sdq = (float *)(rows + WB_NS * BQ); /* DQ: the dQ staging tile */
    constexpr int DQS = burst_wg_dq_stride<D>();
    __shared__ int s_full[WB_NS][2]; /* per stage: its tile sees all 128 keys (warps 0, 1) */
    static_assert(BQ <= 64, "the row scalars of a tile are in warps 0 and 1");
    const int wg = burst_wg_index(), warp = (threadIdx.x >> 5) & 3;
    const int lane = threadIdx.x & 31;
    const int64_t tiles = (s.nk + BC - 1) / BC;
    const int64_t t = blockIdx.x % tiles, g = blockIdx.x / tiles % s.hkv;
    const int64_t b = blockIdx.x / tiles / s.hkv, j0 = t * BC;
    const float sl2 = s.scale * BURST_LOG2E;

    /* the block's queries, uniform: first key's first query to last key's end */
    int64_t imin, imax, unused;
    burst_dqueries(s, j0, &imin, &unused);
    burst_dqueries(s, min(j0 + BC, s.nk) - 1, &unused, &imax);
    if (imin >= imax) { /* no query sees these keys */
        burst_final_kv_empty(s, b, g, j0, min(j0 + (int64_t)BC, s.nk));
        return;
    }
    const int64_t ifirst = imin / BQ * BQ;
    const int ntq = (int)((imax - ifirst + BQ - 1) / BQ), total = ntq * (int)s.group;
    /* tile `it` is query tile it % ntq of head g group + it / ntq; the quotient from a float
     * reciprocal (exact to one for it < 2^24), corrected, instead of an integer division */
    const float rntq = 1.0f / (float)ntq;
    auto tile_at = [&](int it, int64_t *h, int64_t *i0) {
        int hh = __float2int_rz((float)it * rntq), r = it - hh * ntq;
        if (r < 0) {
            hh--;
            r += ntq;
        } else if (r >= ntq) {
            hh++;
            r -= ntq;
        }
        *h = g * s.group + hh;
        *i0 = ifirst + (int64_t)r * BQ;
    };

    /* The row scalars of query tile `it` (threads < BQ: one row each). Their global loads are
     * issued one tile before the values are stored to shared memory, so that no warp waits on
     * them while the others wait at the next barrier. */
    auto row_scalars = [&](int it) {
        int64_t h, i0;
        tile_at(it, &h, &i0);
        return burst_wg_row<BQ>(s, b, h, i0);
    };
    burst_wg_loader<T, D, BQ, NT> lq, lo;
    /* issue the copies of query tile `it` into stage st and store its row scalars r */
    auto issue = [&](int it, int st, const struct burst_wg_qrow &r) {
        int64_t h, i0;
        tile_at(it, &h, &i0);
        unsigned char *dst = sqo + st * 2 * QBYTES;
        lq.init(s.q, b, h, s.d);
        lq.load(dst, i0, s.nq);
        lo.init(s.dout, b, h, s.d);
        lo.load(dst + QBYTES, i0, s.nq);
        burst_cp_commit();
        if (threadIdx.x < BQ)
            rows[st * BQ + threadIdx.x] = r;
        if (threadIdx.x < 64) { /* warps 0 and 1 hold the rows: is every key allowed? */
            const int kbm = __reduce_max_sync(~0u, r.kb), kem = __reduce_min_sync(~0u, r.ke);
            if (lane == 0)
                s_full[st][warp] = kbm <= j0 && kem >= j0 + BC;
        }
    };
    {
        burst_wg_loader<T, D, BC, NT> lk;
        lk.init(s.k, b, g, s.d);
        lk.load(sk, j0, s.nk);
        lk.init(s.v, b, g, s.d);
        lk.load(sv, j0, s.nk);
    }
    issue(0, 0, row_scalars(0));
    struct burst_wg_qrow rnext = row_scalars(total > 1 ? 1 : 0); /* of the next tile issued */

    float dk[DH / 2], dv[DH / 2];
#pragma unroll
    for (int n = 0; n < DH / 2; n++)
        dk[n] = dv[n] = 0.0f;
    float sc[BQ / 2], dp[BQ / 2], dqa[DQ ? NQ / 2 : 1];
    unsigned pa[DQ ? 1 : BQ / 16][4], da[DQ ? 1 : BQ / 16][4];
    const int rq = lane >> 2, cq = 2 * (lane & 3);
    const int key0 = (int)j0 + wg * 64 + warp * 16 + rq; /* this thread's keys: key0, key0 + 8 */
    /* descriptors (low words, burst_wg_dlo) */
    const uint32_t dkd = burst_wg_dlo(sk + wg * 64 * 128, 16);
    const uint32_t dvd = burst_wg_dlo(sv + wg * 64 * 128, 16);
    const uint32_t dq0 = burst_wg_dlo(sqo, 16);          /* Q as B, K-major */
    const uint32_t do0 = burst_wg_dlo(sqo + QBYTES, 16); /* dO as B, K-major */
    /* Q and dO as B, MN-major */
    const uint32_t dqt0 = burst_wg_dlo(sqo, BQ * 128);
    const uint32_t dot0 = burst_wg_dlo(sqo + QBYTES, BQ * 128);
    /* DQ: dS^T as A of dK (MN-major: this warpgroup's 64 keys are panel wg of a dS tile), K^T as
     * A of dQ^T (MN-major: the 64 d of panel dm), dS^T as B of dQ^T (K-major, query
     * rows n0..) */
    const int dm = DQW > 64 ? wg : 0, n0 = DQW > 64 ? 0 : wg * NQ;
    const uint32_t dsa0 = burst_wg_dlo(sds + wg * BQ * 128, BQ * 128);
    const uint32_t dkt = burst_wg_dlo(sk + dm * BC * 128, BC * 128);
    const uint32_t dsb0 = burst_wg_dlo(sds + n0 * 128, 16);
    const uint32_t dpa = dsa0 + 2 * (SBYTES >> 4); /* P^T as A of dV, like dS^T */
    constexpr uint32_t DSBUF = SBYTES >> 4;

    auto tile_begin = [&](int it, int st) {
        burst_cp_wait<0>();
        burst_fence_proxy_async();
        __syncthreads();
        if (it + 1 < total) {
            issue(it + 1, st == WB_NS - 1 ? 0 : st + 1, rnext);
            if (it + 2 < total)
                rnext = row_scalars(it + 2);
        }
        burst_wg_fence();
        burst_wg_abt<T, D, BQ, BC>(sc, dkd, dq0 + st * DSTAGE);
        burst_wg_abt<T, D, BQ, BC>(dp, dvd, do0 + st * DSTAGE);
    };
    /* P^T and dS^T; column = query row of the tile */
    auto dsoft = [&](int st) {
        const struct burst_wg_qrow *rw = rows + st * BQ;
        /* the mask as bits (4 n + e), all set where the tile sees all 128 keys; computed before
         * lse and D are read, so that the key ranges and lse, D are not live together */
        unsigned ok = ~0u;
        if (!(s_full[st][0] && s_full[st][1])) {
            ok = 0;
#pragma unroll
            for (int n = 0; n < BQ / 8; n++)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    const int2 kr = *(const int2 *)&rw[n * 8 + cq + c].kb; /* kb, ke */
#pragma unroll
                    for (int u = 0; u < 2; u++)
                        if (key0 + 8 * u >= kr.x && key0 + 8 * u < kr.y)
                            ok |= 1u << (4 * n + 2 * u + c);
                }
        }
        if (s.cap_in != 0.0f) { /* soft-capped scores, dS times the cap's derivative 1 - tanh^2 */
#pragma unroll
            for (int n = 0; n < BQ / 8; n++)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    const float2 r = *(const float2 *)&rw[n * 8 + cq + c]; /* l2, dl */
#pragma unroll
                    for (int u = 0; u < 2; u++) {
                        const int e = 2 * u + c;
                        const float x = burst_dcap_score(s, sc[4 * n + e]),
                                    t = burst_dcap_tanh(s, x);
                        const float p =
                            ok >> (4 * n + e) & 1 ? burst_ex2(fmaf(x, sl2, -r.x)) : 0.0f;
                        sc[4 * n + e] = p;
                        dp[4 * n + e] = p * (dp[4 * n + e] - r.y) * fmaf(-t, t, 1.0f);
                    }
                }
            return;
        }
#pragma unroll
        for (int n = 0; n < BQ / 8; n++)
#pragma unroll
            for (int c = 0; c < 2; c++) {
                const float2 r = *(const float2 *)&rw[n * 8 + cq + c]; /* l2, dl */
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    const int e = 2 * u + c;
                    const float p =
                        ok >> (4 * n + e) & 1 ? burst_ex2(fmaf(sc[4 * n + e], sl2, -r.x)) : 0.0f;
                    sc[4 * n + e] = p;
                    dp[4 * n + e] = p * (dp[4 * n + e] - r.y);
                }
            }
    };
    /* DQ: x^T (P^T in sc or dS^T in dp) -> tile `buf` (2: P), [query row][key] panels, in T:
     * per 16 queries one stmatrix of the four 8 x 8 blocks (queries 8 n.., keys 16 warp + 8 u..)
     * in burst_wg_pack's order; lane 8 m + i gives query row 8 (2 kk + m / 2) + i, 16-byte chunk
     * 2 warp + m % 2 of this warpgroup's key panel, swizzled */
    auto store_t = [&](const float *x, int buf) {
        const int m = lane >> 3, i = lane & 7;
        unsigned char *t = sds + buf * SBYTES + wg * BQ * 128 + (m >> 1) * 8 * 128 + i * 128 +
                           (((warp * 2 + (m & 1)) ^ i) << 4);
#pragma unroll
        for (int kk = 0; kk < BQ / 16; kk++) {
            unsigned r[4];
#pragma unroll
            for (int k = 0; k < 4; k++)
                r[k] = burst_mma<T>::pack(x[8 * kk + 2 * k], x[8 * kk + 2 * k + 1]);
            burst_stmatrix_t4(t + kk * 16 * 128, r);
        }
    };
    /* DQ: s.dq += tau dQ^T of query tile `it`. This thread's accumulators (d = dm 64 +
     * 16 warp + rq (+ 8), queries n0 + 8 n + cq (+ 1)) go to the staging tile; after the warpgroup's
     * barrier, each thread adds 4 consecutive d of rows n0 + tw / 16 + 8 k with one vector float
     * atomic (rows past nq and the class's columns past d are not added). The next tile's stores
     * come after the block barrier of tile_begin, so no thread still reads the staging tile then. */
    const int tw = threadIdx.x & 127;
    auto red_dq = [&](int it) {
        float *srow = sdq + n0 * DQS + dm * 64 + warp * 16 + rq;
#pragma unroll
        for (int n = 0; n < NQ / 8; n++)
#pragma unroll
            for (int c = 0; c < 2; c++) {
                float *x = srow + (n * 8 + cq + c) * DQS;
                x[0] = s.scale * dqa[4 * n + c];
                x[8] = s.scale * dqa[4 * n + 2 + c];
            }
        burst_wg_bar(wg);
        int64_t h, i0;
        tile_at(it, &h, &i0);
        const int r = n0 + (tw >> 4), c4 = dm * 64 + (tw & 15) * 4;
        float *dst = s.dq + ((b * s.nq + i0 + r) * s.hq + h) * s.d + c4;
        const int64_t step8 = 8 * s.hq * s.d;
#pragma unroll
        for (int k = 0; k < NQ / 8; k++)
            if (i0 + r + 8 * k < s.nq && c4 < s.d) /* d, a multiple of 8: whole float4s */
                atomicAdd((float4 *)(dst + k * step8),
                          *(const float4 *)&sdq[(r + 8 * k) * DQS + c4]);
    };
    /* Issue the products of the tile in stage `st` (dS tile `buf` with DQ): dV += P^T dO and
     * dK += dS^T Q (one commit group each), with DQ also dQ^T = K^T dS^T (a third) */
    auto prev_products = [&](int st, int buf) {
        if constexpr (DQ) {
            burst_wg_mn<T, DH, BQ>(dv, dpa, dot0 + st * DSTAGE);
            burst_wg_mn<T, DH, BQ>(dk, dsa0 + buf * DSBUF, dqt0 + st * DSTAGE);
            burst_wg_atbt<T, NQ, BQ>(dqa, dkt, dsb0 + buf * DSBUF);
        } else {
            burst_wg_pv<T, DH, BQ>(dv, pa, dot0 + st * DSTAGE);
            burst_wg_pv<T, DH, BQ>(dk, da, dqt0 + st * DSTAGE);
        }
    };
    tile_begin(0, 0);
    burst_wg_wait<0>();
    burst_wg_pin<BQ / 2>(sc);
    burst_wg_pin<BQ / 2>(dp);
    dsoft(0);
    if constexpr (DQ) {
        store_t(sc, 2);
        store_t(dp, 0);
        burst_fence_proxy_async(); /* published by the next barrier */
    } else {
        burst_wg_pack<T, BQ>(pa, sc);
        burst_wg_pack<T, BQ>(da, dp);
    }
    int prev = 0, pb = 0; /* the previous tile's stage and dS tile */
    for (int it = 1; it < total; it++) {
        const int st = prev == WB_NS - 1 ? 0 : prev + 1;
        tile_begin(it, st);
        prev_products(prev, pb);
        burst_wg_wait<DQ ? 3 : 2>(); /* S^T, dP^T done; the previous tile's products may run */
        burst_wg_pin<BQ / 2>(sc);
        burst_wg_pin<BQ / 2>(dp);
        dsoft(st);
        burst_wg_wait<0>();
        burst_wg_pin<DH / 2>(dv);
        burst_wg_pin<DH / 2>(dk);
        if constexpr (DQ) {
            burst_wg_pin<NQ / 2>(dqa);
            red_dq(it - 1);
            /* the other warpgroup may still read dS tile pb; it finished with pb ^ 1 (two tiles
             * old) before the last barrier. P is this warpgroup's alone. */
            pb ^= 1;
            store_t(sc, 2);
            store_t(dp, pb);
            burst_fence_proxy_async();
        } else {
            burst_wg_pack<T, BQ>(pa, sc);
            burst_wg_pack<T, BQ>(da, dp);
        }
        prev = st;
    }
    if constexpr (DQ)
        __syncthreads(); /* the last dS tile, written by both warpgroups */
    burst_wg_fence();
    prev_products(prev, pb);
    burst_wg_wait<0>();
    burst_wg_pin<DH / 2>(dv);
    burst_wg_pin<DH / 2>(dk);
    if constexpr (DQ) {
        burst_wg_pin<NQ / 2>(dqa);
        red_dq(total - 1);
    }

#pragma unroll
    for (int u = 0; u < 2; u++) {
        const int64_t j = key0 + 8 * u;
        if (j >= s.nk)
            continue;
        const int64_t off = ((b * s.nk + j) * s.hkv + g) * s.d;
        if (s.dk_out.data) {
#pragma unroll
            for (int n = 0; n < DH / 8; n++)
                if (n * 8 < s.d) /* the class's columns past d are not the caller's */
                    burst_final_kv_pair(s, b, j, g, n * 8 + cq, dk[4 * n + 2 * u],
                                        dk[4 * n + 2 * u + 1], dv[4 * n + 2 * u],
                                        dv[4 * n + 2 * u + 1]);
            continue;
        }
#pragma unroll
        for (int n = 0; n < DH / 8; n++) {
            if (n * 8 >= s.d)
                break;
            if (s.dk) {
                float2 *p2 = (float2 *)(s.dk + off + n * 8 + cq), x = *p2;
                x.x = fmaf(s.scale, dk[4 * n + 2 * u], x.x);
                x.y = fmaf(s.scale, dk[4 * n + 2 * u + 1], x.y);
                *p2 = x;
            }
            if (s.dv) {
                float2 *p2 = (float2 *)(s.dv + off + n * 8 + cq), x = *p2;
                x.x += dv[4 * n + 2 * u];
                x.y += dv[4 * n + 2 * u + 1];
                *p2 = x;
            }
        }
    }
#endif
}

/* ---- dispatch ---------------------------------------------------------------------------------- */

template <typename T, int D> static int burst_wg_bwd_run(const struct burst_cuda_step *s)
{
    if constexpr (D > BURST_CUDA_WG_BWD_MAX) {
        return burst_cuda_launch_bwd_sm90_wide(s);
    } else {
        const bool kv = s->dk || s->dv || s->dk_out.data;
        const bool fused = s->dq && s->dq_atomic && kv;
        if (kv) {
            const int64_t blocks = s->batch * s->hkv * ((s->nk + 127) / 128);
            if (fused)
                burst_wg_dkdv<T, D, true>
                    <<<(unsigned)blocks, 256, burst_wg_dkdv_smem<D, true>(), cudaStreamPerThread>>>(
                        *s);
            else
                burst_wg_dkdv<T, D, false><<<(unsigned)blocks, 256, burst_wg_dkdv_smem<D, false>(),
                                             cudaStreamPerThread>>>(*s);
            const cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess || fused)
                return e;
        }
        if (s->dq) {
            const int64_t blocks = s->batch * s->hq * ((s->nq + 127) / 128);
            burst_wg_dq<T, D>
                <<<(unsigned)blocks, 256, burst_wg_dq_smem<D>(), cudaStreamPerThread>>>(*s);
        }
        return cudaGetLastError();
    }
}

template <typename T> static int burst_wg_bwd_dims(const struct burst_cuda_step *s)
{
    return burst_by_class(s->d, [&](auto c) { return burst_wg_bwd_run<T, decltype(c)::value>(s); });
}

extern "C" int burst_cuda_launch_bwd_sm90(const struct burst_cuda_step *s)
{
    return s->q.dtype == BURST_CUDA_F16 ? burst_wg_bwd_dims<__half>(s)
                                        : burst_wg_bwd_dims<__nv_bfloat16>(s);
}

template <typename T, int D> static cudaError_t burst_wg_bwd_attr()
{
    if constexpr (D > BURST_CUDA_WG_BWD_MAX) {
        return cudaSuccess; /* burst_cuda_sm90_wide_init */
    } else {
        cudaError_t e = cudaFuncSetAttribute(burst_wg_dkdv<T, D, false>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)burst_wg_dkdv_smem<D, false>());
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(burst_wg_dkdv<T, D, true>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)burst_wg_dkdv_smem<D, true>());
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(burst_wg_dq<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)burst_wg_dq_smem<D>());
        return e;
    }
}

template <typename T> static cudaError_t burst_wg_bwd_attr_all()
{
    return burst_each_class([](auto c) { return burst_wg_bwd_attr<T, decltype(c)::value>(); });
}

template <int D> static size_t burst_wg_bwd_smem1()
{
    if constexpr (D > BURST_CUDA_WG_BWD_MAX) {
        return burst_cuda_sm90_wide_smem(D);
    } else {
        const size_t a = burst_wg_dq_smem<D>(), b = burst_wg_dkdv_smem<D, true>();
        return a > b ? a : b;
    }
}

extern "C" size_t burst_cuda_sm90_bwd_smem(int d)
{
    return burst_by_class(d, [](auto c) { return burst_wg_bwd_smem1<decltype(c)::value>(); });
}

extern "C" int burst_cuda_sm90_bwd_init(void)
{
    cudaError_t e = burst_wg_bwd_attr_all<__half>();
    if (e == cudaSuccess)
        e = burst_wg_bwd_attr_all<__nv_bfloat16>();
    if (e == cudaSuccess)
        e = (cudaError_t)burst_cuda_sm90_wide_init();
    return e;
}
