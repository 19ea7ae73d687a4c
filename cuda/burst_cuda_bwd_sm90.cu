/*
 * cuda/burst_cuda_bwd_sm90.cu - the backward step on Hopper's warpgroup tensor cores (wgmma,
 * sm_90a only, like burst_cuda_fwd_sm90.cu; chosen with it, BURST_CUDA_WGMMA=0 turns both off).
 * Same contract and the same two kernels as burst_cuda_bwd.cu (each output element has one
 * writer, no float atomics: the deterministic backward), and one more for plans that are not
 * deterministic: the dK/dV kernel that also adds dQ, by reductions whose order varies (DQ
 * below), which saves the dQ kernel's recomputation of S and dP (7 matrix products per tile pair
 * -> 5). These kernels serve the classes up to BURST_CUDA_WG_BWD_MAX; the wider ones run
 * burst_cuda_bwd_sm90_wide.cu.
 *   - dK/dV: a block owns 128 keys of a kv head and loops over the heads of its group and the
 *     query tiles (BURST_CUDA_WG_DKDV_BQ rows) that may see its keys. It is warp-specialized
 *     like the forward: a producer warpgroup moves the Q and dO tiles by TMA into mbarrier
 *     stages and computes their row scalars, two consumer warpgroups of 64 keys each compute,
 *     per tile: S^T = K Q^T and dP^T = V dO^T (A = its K / V rows, B = the Q / dO tile, both
 *     from shared memory), P^T from the saved lse, dS^T = P^T (dP^T - D), then dV += P^T dO and
 *     dK += dS^T Q (A = P^T / dS^T, B = the dO / Q tile read transposed);
 *   - dK/dV/dQ (DQ): the dK/dV kernel that also adds dQ (burst_wg_dkdv's comment);
 *   - dQ: a block owns 128 query rows of a head (2 consumer warpgroups x 64) and loops over
 *     64-key tiles: S = Q K^T, dP = dO V^T, dS = P (dP - D), dQ += dS K (K read transposed). A
 *     producer thread loads its key tiles by TMA into 3 mbarrier stages.
 * In each, a tile's elementwise work overlaps the previous tile's P / dS products, as in the
 * forward. P and dS are rounded to the input dtype as A operands, as in the sm_80 kernels
 * (tests/harness.h bounds this).
 */
#include <limits.h>

#include "burst_cuda_tma.cuh"
#include "burst_cuda_wb.cuh"
#include "burst_cuda_wgmma.cuh"

#define WB_NS 3    /* stages of the streamed tiles (at most WB_NS_MAX) */
#define WB_ROWS 64 /* rows of a streamed tile */

/* ---- dQ --------------------------------------------------------------------------------------- */

/* Q and dO (128 rows each), WB_NS stages of K and V tiles (WB_ROWS rows). No alignment slack: the
 * shared memory is declared __align__(1024) and the kernel traps otherwise. */
template <int D> constexpr size_t burst_wg_dq_smem()
{
    return (size_t)(2 * 128 + WB_NS * 2 * WB_ROWS) * burst_wg_panels<D>() * 128;
}

/* The dQ kernel's tensor maps: Q and dO with 128-row boxes, K and V with WB_ROWS-row ones. */
struct burst_wq_maps {
    struct burst_tma_map q, o, k, v;
};

/* Its barriers: Q and dO landed; a stage's K and V landed; a stage free again. */
struct burst_wq_bars {
    uint64_t qo, full[WB_NS], freed[WB_NS];
};

/* Producer thread: Q and dO of head h from row i0 once, then the nt key tiles from jfirst (K and
 * V of kv head g) into the stages, each stage once the consumers have freed its previous tile. */
template <int D>
__device__ __forceinline__ void burst_wq_load(const struct burst_wq_maps &maps, unsigned char *sq,
                                              unsigned char *sdo, unsigned char *skv,
                                              struct burst_wq_bars &bar, int b, int h, int g,
                                              int i0, int jfirst, int nt)
{
    constexpr int P = burst_wg_panels<D>(), BC = WB_ROWS;
    constexpr int QBYTES = 128 * P * 128, KBYTES = BC * P * 128;
    burst_tma_prefetch_map(&maps.q.map);
    burst_tma_prefetch_map(&maps.o.map);
    burst_tma_prefetch_map(&maps.k.map);
    burst_tma_prefetch_map(&maps.v.map);
    burst_mbar_expect(&bar.qo, 2 * QBYTES);
#pragma unroll
    for (int pn = 0; pn < P; pn++) {
        burst_tma_load(sq + pn * 128 * 128, maps.q, &bar.qo, 64 * pn, h, i0, b);
        burst_tma_load(sdo + pn * 128 * 128, maps.o, &bar.qo, 64 * pn, h, i0, b);
    }
    for (int j = 0, st = 0; j < nt; j++, st = st == WB_NS - 1 ? 0 : st + 1) {
        if (j >= WB_NS) /* the stage's tile j - NS is done with */
            burst_mbar_wait(&bar.freed[st], (j / WB_NS + 1) & 1);
        unsigned char *dst = skv + st * 2 * KBYTES;
        burst_mbar_expect(&bar.full[st], 2 * KBYTES);
#pragma unroll
        for (int pn = 0; pn < P; pn++) {
            burst_tma_load(dst + pn * BC * 128, maps.k, &bar.full[st], 64 * pn, g, jfirst + j * BC,
                           b);
            burst_tma_load(dst + KBYTES + pn * BC * 128, maps.v, &bar.full[st], 64 * pn, g,
                           jfirst + j * BC, b);
        }
    }
}

/* Consumer warpgroup wc: query rows i0 + 64 wc .. + 63 of head h over the nt key tiles from
 * jfirst, as the kernel's comment describes; wb, we: the keys every one of its rows may see. */
template <typename T, int D>
__device__ __forceinline__ void
burst_wq_consume(const struct burst_cuda_step &s, unsigned char *sq, unsigned char *sdo,
                 unsigned char *skv, struct burst_wq_bars &bar, int wc, int64_t b, int64_t h,
                 int64_t i0, int64_t jfirst, int nt, int *rng)
{
    constexpr int BC = WB_ROWS, KBYTES = BC * burst_wg_panels<D>() * 128;
    constexpr uint32_t DSTAGE = 2 * KBYTES >> 4;
    const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const int rq = lane >> 2, cq = 2 * (lane & 3);
    const float sl2 = s.scale * BURST_LOG2E;
    int kb[2], ke[2];
    float l2[2], dl[2];
#pragma unroll
    for (int u = 0; u < 2; u++) {
        const struct burst_brow r = burst_brow_at(s, b, h, i0 + wc * 64 + warp * 16 + rq + 8 * u);
        l2[u] = r.l2;
        dl[u] = r.dl;
        kb[u] = (int)r.kb;
        ke[u] = (int)r.ke;
    }
    atomicMax(&rng[0], max(kb[0], kb[1]));
    atomicMin(&rng[1], min(ke[0], ke[1]));
    burst_named_sync(1 + wc, 128); /* the warpgroup's key range */
    const int wb = rng[0], we = rng[1];

    float dq[D / 2];
#pragma unroll
    for (int n = 0; n < D / 2; n++)
        dq[n] = 0.0f;
    float sc[BC / 2], dp[BC / 2];
    unsigned ds[BC / 16][4];
    const uint32_t dqd = burst_wg_dlo(sq + wc * 64 * 128, 16);
    const uint32_t dod = burst_wg_dlo(sdo + wc * 64 * 128, 16);
    const uint32_t dk0 = burst_wg_dlo(skv, 16);          /* K as B, K-major */
    const uint32_t dv0 = burst_wg_dlo(skv + KBYTES, 16); /* V as B, K-major */
    const uint32_t dkt0 = burst_wg_dlo(skv, BC * 128);   /* K as B, MN-major */

    /* issue S and dP of key tile j (stage st) once it has landed */
    auto tile_begin = [&](int j, int st) {
        burst_mbar_wait(&bar.full[st], (j / WB_NS) & 1);
        burst_wg_fence();
        burst_wg_abt<T, D, BC, 128>(sc, dqd, dk0 + st * DSTAGE);
        burst_wg_abt<T, D, BC, 128>(dp, dod, dv0 + st * DSTAGE);
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
    burst_mbar_wait(&bar.qo, 0);
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
        burst_mbar_arrive(&bar.freed[prev]); /* this thread is done with the stage */
        burst_wg_pack<T, BC>(ds, sc);
        prev = st;
    }
    burst_wg_fence();
    burst_wg_pv<T, D, BC>(dq, ds, dkt0 + prev * DSTAGE);
    burst_wg_wait<0>();
    burst_wg_pin<D / 2>(dq);

#pragma unroll
    for (int u = 0; u < 2; u++) {
        const int64_t i = i0 + wc * 64 + warp * 16 + rq + 8 * u;
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
}

/* The dQ kernel: a block owns 128 query rows of a head h and loops over the 64-key tiles that
 * they may see. Warp-specialized: thread 0 of warpgroup 0 loads Q and dO once and K and V tiles
 * into WB_NS stages by TMA (the warpgroup keeps 24 registers per thread); warpgroups 1 and 2
 * consume, 64 query rows each, per tile S = Q K^T, dP = dO V^T, dS = P (dP - D), then
 * dQ += dS K (K read transposed), the next tile's S and dP issued before that product is
 * waited for. */
template <typename T, int D>
__global__ void __launch_bounds__(384, 1)
    burst_wg_dq(const __grid_constant__ struct burst_cuda_step s,
                const __grid_constant__ struct burst_wq_maps maps)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BR = 128, BC = WB_ROWS, QBYTES = BR * burst_wg_panels<D>() * 128;
    constexpr int PREGS = 24;
    constexpr int LREGS = 65536 / 384 / 8 * 8, CREGS = (3 * LREGS - PREGS) / 2 / 8 * 8;
    static_assert(PREGS + 2 * CREGS <= 3 * LREGS, "the reallocation fits the launch's");
    extern __shared__ __align__(1024) unsigned char smraw[];
    __shared__ struct burst_wq_bars bar;
    __shared__ int s_rng[2][2];
    if (burst_smem_addr(smraw) & 1023u) /* the panels' swizzle pattern repeats at 1024 bytes */
        __trap();
    unsigned char *sq = smraw, *sdo = sq + QBYTES, *skv = sdo + QBYTES;
    const int wg = burst_wg_index();
    const int64_t tiles = (s.nq + BR - 1) / BR;
    const int64_t t = tiles - 1 - blockIdx.x % tiles;
    const int64_t h = blockIdx.x / tiles % s.hq, b = blockIdx.x / tiles / s.hq;
    const int64_t g = h / s.group, i0 = t * BR;

    int64_t kmin, kmax, unused; /* uniform, as in the forward */
    burst_dkeys(s, i0, &kmin, &unused);
    burst_dkeys(s, min(i0 + BR, s.nq) - 1, &unused, &kmax);
    if (kmin >= kmax)
        return;
    const int64_t jfirst = kmin / BC * BC;
    const int nt = (int)((kmax - jfirst + BC - 1) / BC);
    if (threadIdx.x == 0) {
        burst_mbar_init(&bar.qo, 1);
        for (int st = 0; st < WB_NS; st++) {
            burst_mbar_init(&bar.full[st], 1);
            burst_mbar_init(&bar.freed[st], 256); /* every consumer thread's */
        }
        burst_mbar_init_fence();
    }
    if (threadIdx.x < 2) {
        s_rng[threadIdx.x][0] = 0;
        s_rng[threadIdx.x][1] = INT_MAX;
    }
    __syncthreads();

    if (wg == 0) {
        burst_regs_dec<PREGS>();
        if (threadIdx.x == 0)
            burst_wq_load<D>(maps, sq, sdo, skv, bar, (int)b, (int)h, (int)g, (int)i0, (int)jfirst,
                             nt);
        return;
    }
    burst_regs_inc<CREGS>();
    burst_wq_consume<T, D>(s, sq, sdo, skv, bar, wg - 1, b, h, i0, jfirst, nt, s_rng[wg - 1]);
#endif
}

/* ---- dK and dV -------------------------------------------------------------------------------- */

/* Query rows per streamed tile of the dK/dV kernel (BURST_CUDA_WG_DKDV_BQ): 48 above d = 64,
 * where 64 leaves too few registers at d = 128 (dK, dV, S^T, dP^T and dQ^T live at once). */
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

/* With DQ, whether the consumers keep P^T and dS^T in registers as the A operands of dV and dK
 * (classes up to 96, whose registers hold them beside the dQ^T accumulator; class 128's would
 * serialise its wgmma): then only dS^T goes to shared memory, for the other warpgroup's dQ^T.
 * Above, both are stored and dV and dK read them from shared memory. */
template <int D> __host__ __device__ constexpr bool burst_wg_dkdv_rs()
{
    return D <= 96;
}

/* [BQ][128] 16-bit tiles of a DQ block: dS^T, double-buffered, and P^T where it is not kept in
 * registers (burst_wg_dkdv_rs) */
template <int D> __host__ __device__ constexpr int burst_wg_dkdv_stiles()
{
    return burst_wg_dkdv_rs<D>() ? 2 : 3;
}

/* fp32 elements of a dQ staging tile: BQ query rows x burst_wg_dq_width, in panels of 32 columns
 * ([BQ][32], 128-byte swizzled rows: the boxes of burst_tma_map_dq) */
template <int D> __host__ __device__ constexpr int burst_wg_dq_tile()
{
    return burst_wg_dkdv_bq<D>() * burst_wg_dq_width<D>();
}

/* K and V (128 rows each), WB_NS stages of Q and dO tiles (BQ rows); with DQ two or three more
 * [BQ][128] tiles (burst_wg_dkdv_stiles), and two fp32 dQ staging tiles (burst_wg_dq_tile,
 * 1024-byte aligned as the panel tiles before them); then the stages' row scalars. No alignment
 * slack: the kernel's shared memory is declared
 * __align__(1024) (the toolchain pads the static part to 1 KiB; the kernel traps otherwise). */
template <int D, bool DQ> constexpr size_t burst_wg_dkdv_smem()
{
    constexpr int BQ = burst_wg_dkdv_bq<D>();
    return (size_t)(2 * 128 + WB_NS * 2 * BQ) * burst_wg_panels<D>() * 128 +
           (DQ ? burst_wg_dkdv_stiles<D>() * BQ * 128 * 2 + 2 * burst_wg_dq_tile<D>() * 4 : 0) +
           WB_NS * BQ * sizeof(struct burst_wg_qrow);
}

/* Named barriers of the dK/dV kernel (0 is __syncthreads; 1 + wg are burst_wg_bar's in the other
 * kernels): both consumer warpgroups (the dS exchange); dQ staging tile k free (EMPTY + k) and
 * full (FULL + k), k = 0, 1 (the consumers and the dQ warp). */
#define WB_BAR_PAIR 3
#define WB_BAR_DQ_EMPTY 4
#define WB_BAR_DQ_FULL 6

/* Producer warp 2 (DQ): once the consumers have staged query tile it's tau dQ (fp32) in staging
 * tile it & 1, lane 0 adds it to s.dq with one tensor reduction per 32 columns of d
 * (cp.reduce.async.bulk.tensor .add: rows past nq and columns past d are not written); each
 * staging tile is freed once its reductions have read it, which they do while the consumers
 * fill the other one. */
template <int D, int BQ>
__device__ __forceinline__ void
burst_wb_store_dq(const struct burst_cuda_step &s, const struct burst_wb_maps &maps,
                  const struct burst_wb_tiles &t, const struct burst_wb_qtiles &qt, int64_t b,
                  int total)
{
    const int lane = threadIdx.x & 31, panels = (int)(s.d + 31) / 32;
    if (lane == 0)
        burst_tma_prefetch_map(&maps.dq.map);
    __syncwarp();                             /* converged for the aligned barrier instruction */
    burst_named_arrive(WB_BAR_DQ_EMPTY, 288); /* both staging tiles start free */
    if (total > 1)
        burst_named_arrive(WB_BAR_DQ_EMPTY + 1, 288);
    for (int it = 0; it < total; it++) {
        const int k = it & 1;
        burst_named_sync(WB_BAR_DQ_FULL + k, 288);
        int64_t h, i0;
        qt.at(it, &h, &i0);
        const float *src = t.sdq + k * burst_wg_dq_tile<D>();
        if (lane == 0)
            for (int p = 0; p < panels; p++)
                burst_tma_add(maps.dq, src + p * BQ * 32, 32 * p, (int)h, (int)i0, (int)b);
        burst_bulk_commit();
        burst_bulk_wait_read<1>(); /* tile it - 1's reductions have read staging tile k ^ 1 */
        __syncwarp();              /* converged for the aligned barrier instructions */
        if (it >= 1 && it + 1 < total)
            burst_named_arrive(WB_BAR_DQ_EMPTY + (k ^ 1), 288); /* for tile it + 1 */
    }
    burst_bulk_wait<0>(); /* the additions done before the block ends */
}

/* P^T and dS^T of the tile in stage st in place (sc: S^T -> P^T, dp: dP^T -> dS^T; column =
 * query row of the tile) for this thread's keys key0, key0 + 8. */
template <int BQ>
__device__ __forceinline__ void burst_wb_dsoft(const struct burst_cuda_step &s,
                                               const struct burst_wb_tiles &t, int st, int key0,
                                               float *sc, float *dp)
{
    const struct burst_wg_qrow *rw = t.rows + st * BQ;
    const int cq = 2 * (threadIdx.x & 3);
    const float sl2 = s.scale * BURST_LOG2E;
    /* the mask as bits (4 n + e), all set where the tile sees all 128 keys; computed before
     * lse and D are read, so that the key ranges and lse, D are not live together */
    unsigned ok = ~0u;
    if (!t.full[st]) {
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
                    const float x = burst_dcap_score(s, sc[4 * n + e]), th = burst_dcap_tanh(s, x);
                    const float p = ok >> (4 * n + e) & 1 ? burst_ex2(fmaf(x, sl2, -r.x)) : 0.0f;
                    sc[4 * n + e] = p;
                    dp[4 * n + e] = p * (dp[4 * n + e] - r.y) * fmaf(-th, th, 1.0f);
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
}

/* DQ: this thread's tau dQ^T accumulators (d = dm 64 + 16 warp + rq (+ 8), queries
 * n0 + 8 n + cq (+ 1)) into staging tile k once the dQ warp has freed it, then hand the tile to
 * that warp. Column d of query row r is in panel d / 32, 16-byte chunk (d % 32 / 4) ^ (r % 8):
 * a warp's stores (4 rows x 2 chunks per store) meet 32 distinct banks. */
template <int D, int BQ, int NQ>
__device__ __forceinline__ void burst_wb_stage_dq(float *sdq, int k, int dm, int n0, float scale,
                                                  const float *dqa)
{
    const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
    const int rq = lane >> 2, cq = 2 * (lane & 3);
    const int d0 = dm * 64 + warp * 16 + rq; /* and d0 + 8: the same panel, the next chunk */
    burst_named_sync(WB_BAR_DQ_EMPTY + k, 288);
    float *panel = sdq + k * burst_wg_dq_tile<D>() + (d0 >> 5) * BQ * 32;
    const int chunk = (d0 & 31) >> 2, e = d0 & 3;
#pragma unroll
    for (int n = 0; n < NQ / 8; n++)
#pragma unroll
        for (int c = 0; c < 2; c++) {
            const int r = n0 + n * 8 + cq + c;
            float *row = panel + r * 32 + e;
            row[(chunk ^ (r & 7)) << 2] = scale * dqa[4 * n + c];
            row[((chunk + 2) ^ (r & 7)) << 2] = scale * dqa[4 * n + 2 + c];
        }
    burst_fence_proxy_async(); /* the bulk reductions read the tile through the async proxy */
    burst_named_arrive(WB_BAR_DQ_FULL + k, 288);
}

/* This thread's dK (times tau) and dV rows, keys key0 and key0 + 8, added to the fp32
 * accumulators or written final (s.dk_out) in the dtype. */
template <int D>
__device__ __forceinline__ void burst_wb_store_kv(const struct burst_cuda_step &s, int64_t b,
                                                  int64_t g, int64_t key0, const float *dk,
                                                  const float *dv)
{
    const int cq = 2 * (threadIdx.x & 3);
#pragma unroll
    for (int u = 0; u < 2; u++) {
        const int64_t j = key0 + 8 * u;
        if (j >= s.nk)
            continue;
        const int64_t off = ((b * s.nk + j) * s.hkv + g) * s.d;
        if (s.dk_out.data) {
#pragma unroll
            for (int n = 0; n < D / 8; n++)
                if (n * 8 < s.d) /* the class's columns past d are not the caller's */
                    burst_final_kv_pair(s, b, j, g, n * 8 + cq, dk[4 * n + 2 * u],
                                        dk[4 * n + 2 * u + 1], dv[4 * n + 2 * u],
                                        dv[4 * n + 2 * u + 1]);
            continue;
        }
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
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
}

/* Consumer warpgroup wc: keys j0 + 64 wc .. + 63 of kv head g over the block's total query
 * tiles, as the kernel's comment describes. */
template <typename T, int D, bool DQ>
__device__ __forceinline__ void
burst_wb_consume(const struct burst_cuda_step &s, const struct burst_wb_tiles &t,
                 struct burst_wb_bars &bar, int wc, int64_t b, int64_t g, int64_t j0, int total)
{
    constexpr int BQ = burst_wg_dkdv_bq<D>(), QBYTES = BQ * burst_wg_panels<D>() * 128;
    constexpr int DQW = burst_wg_dq_width<D>(); /* DQ: rows of dQ^T */
    static_assert(!DQ || DQW == 64 || DQW == 128, "the dQ split of DQ: 64 or 128 rows");
    constexpr int NQ = DQW > 64 ? BQ : BQ / 2;        /* query columns of a warpgroup's dQ^T */
    constexpr int SBYTES = BQ * 128 * 2;              /* DQ: a dS or P tile */
    constexpr bool RS = !DQ || burst_wg_dkdv_rs<D>(); /* P^T, dS^T as register operands */
    constexpr uint32_t DSTAGE = 2 * QBYTES >> 4, DSBUF = SBYTES >> 4;
    const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const int key0 = (int)j0 + wc * 64 + warp * 16 + (lane >> 2); /* and key0 + 8 */

    float dk[D / 2], dv[D / 2];
#pragma unroll
    for (int n = 0; n < D / 2; n++)
        dk[n] = dv[n] = 0.0f;
    float sc[BQ / 2], dp[BQ / 2], dqa[DQ ? NQ / 2 : 1];
    unsigned pa[RS ? BQ / 16 : 1][4], da[RS ? BQ / 16 : 1][4];
    /* descriptors (low words, burst_wg_dlo): K, V rows of this warpgroup as A; Q, dO as B,
     * K-major (S^T, dP^T) and MN-major (dK, dV) */
    const uint32_t dkd = burst_wg_dlo(t.sk + wc * 64 * 128, 16);
    const uint32_t dvd = burst_wg_dlo(t.sv + wc * 64 * 128, 16);
    const uint32_t dq0 = burst_wg_dlo(t.sqo, 16), do0 = burst_wg_dlo(t.sqo + QBYTES, 16);
    const uint32_t dqt0 = burst_wg_dlo(t.sqo, BQ * 128);
    const uint32_t dot0 = burst_wg_dlo(t.sqo + QBYTES, BQ * 128);
    /* DQ: dS^T as A of dK (MN-major: this warpgroup's 64 keys are panel wc of a dS tile; not
     * with RS), K^T as A of dQ^T (MN-major: the 64 d of panel dm), dS^T as B of dQ^T (K-major,
     * query rows n0..); P^T as A of dV, like dS^T (not with RS) */
    const int dm = DQW > 64 ? wc : 0, n0 = DQW > 64 ? 0 : wc * NQ;
    const uint32_t dsa0 = burst_wg_dlo(t.sds + wc * BQ * 128, BQ * 128);
    const uint32_t dkt = burst_wg_dlo(t.sk + dm * 128 * 128, 128 * 128);
    const uint32_t dsb0 = burst_wg_dlo(t.sds + n0 * 128, 16);
    const uint32_t dpa = dsa0 + 2 * DSBUF;

    /* Issue the products of the tile in stage `st` (dS tile `buf` with DQ): with DQ first
     * dQ^T = K^T dS^T, then dV += P^T dO and dK += dS^T Q (one commit group each) */
    auto products = [&](int st, int buf) {
        if constexpr (DQ)
            burst_wg_atbt<T, NQ, BQ>(dqa, dkt, dsb0 + buf * DSBUF);
        if constexpr (RS) {
            burst_wg_pv<T, D, BQ>(dv, pa, dot0 + st * DSTAGE);
            burst_wg_pv<T, D, BQ>(dk, da, dqt0 + st * DSTAGE);
        } else {
            burst_wg_mn<T, D, BQ>(dv, dpa, dot0 + st * DSTAGE);
            burst_wg_mn<T, D, BQ>(dk, dsa0 + buf * DSBUF, dqt0 + st * DSTAGE);
        }
    };
    /* with DQ stage the previous tile's dQ (staging tiles 0 and 1 in turn: dqk) as soon as its
     * product is done, while dV and dK still run; then wait for those and free the tile's
     * stage (prev) */
    int dqk = 0;
    auto finish = [&](int prev) {
        if constexpr (DQ) {
            burst_wg_wait<2>();
            burst_wg_pin<NQ / 2>(dqa);
            burst_wb_stage_dq<D, BQ, NQ>(t.sdq, dqk, dm, n0, s.scale, dqa);
            dqk ^= 1;
        }
        burst_wg_wait<0>();
        burst_wg_pin<D / 2>(dv);
        burst_wg_pin<D / 2>(dk);
        burst_mbar_arrive(&bar.freed[prev]); /* this thread is done with the stage */
    };
    /* issue S^T and dP^T of the tile in stage st once it has landed */
    auto scores = [&](int it, int st) {
        burst_mbar_wait(&bar.full[st], (it / WB_NS) & 1);
        burst_wg_fence();
        burst_wg_abt<T, D, BQ, 128>(sc, dkd, dq0 + st * DSTAGE);
        burst_wg_abt<T, D, BQ, 128>(dp, dvd, do0 + st * DSTAGE);
    };
    /* keep P^T and dS^T for the products: packed in registers (RS) or in shared memory, and with
     * DQ dS^T in dS tile buf, where the other warpgroup's dQ^T reads it after the pair barrier
     * (P is this warpgroup's alone) */
    auto keep = [&](int buf) {
        if constexpr (RS) {
            burst_wg_pack<T, BQ>(pa, sc);
            burst_wg_pack<T, BQ>(da, dp);
        }
        if constexpr (DQ) {
            /* [query row][key] tiles of BQ rows, this warpgroup's key panel */
            unsigned char *panel = t.sds + wc * BQ * 128;
            if constexpr (!RS)
                burst_wg_store_t<T, BQ>(panel + 2 * SBYTES, sc);
            burst_wg_store_t<T, BQ>(panel + buf * SBYTES, dp);
            burst_fence_proxy_async();
            burst_named_sync(WB_BAR_PAIR, 256); /* both halves of dS^T written */
        }
    };
    /* The first tile apart: a wgmma under a branch the compiler cannot prove uniform (it > 0
     * inside the loop) gets serialised. */
    burst_mbar_wait(&bar.kv, 0);
    scores(0, 0);
    burst_wg_wait<0>();
    burst_wg_pin<BQ / 2>(sc);
    burst_wg_pin<BQ / 2>(dp);
    burst_wb_dsoft<BQ>(s, t, 0, key0, sc, dp);
    keep(0);
    int prev = 0, pb = 0; /* the previous tile's stage and dS tile */
    for (int it = 1, st = 1 % WB_NS; it < total; it++, st = st == WB_NS - 1 ? 0 : st + 1) {
        scores(it, st);
        products(prev, pb);
        burst_wg_wait<DQ ? 3 : 2>(); /* S^T, dP^T done; the previous products may run */
        burst_wg_pin<BQ / 2>(sc);
        burst_wg_pin<BQ / 2>(dp);
        burst_wb_dsoft<BQ>(s, t, st, key0, sc, dp);
        finish(prev);
        /* the other warpgroup read dS tile pb ^ 1 (two tiles old) before the last pair barrier */
        pb ^= 1;
        keep(pb);
        prev = st;
    }
    burst_wg_fence();
    products(prev, pb);
    finish(prev);
    burst_wb_store_kv<D>(s, b, g, key0, dk, dv);
}

/* The dK/dV kernel: a block owns 128 keys of a kv head g and visits the query tiles (BQ rows) of
 * the heads of its group that may see them. Warp-specialized, like the forward: warpgroup 0
 * produces (warp 0 loads K and V once and the Q and dO tiles into WB_NS stages by TMA, warps 1 and
 * 3 compute the row scalars of every other tile, warp 2 adds the staged dQ of each tile to s.dq
 * with DQ) and keeps PREGS registers per thread; warpgroups 1 and 2 consume, 64 keys each. Per tile
 * a consumer issues S^T = K Q^T and dP^T = V dO^T, then the previous tile's (dQ^T = K^T dS^T,)
 * dV += P^T dO and dK += dS^T Q, computes P^T and dS^T while those run, stages the previous
 * tile's dQ once its product is done, waits for the others, frees the previous stage, and keeps
 * this tile's P^T, dS^T packed in registers (above class 96 with DQ: in shared memory) and with
 * DQ stores dS^T to shared memory, where the other warpgroup's dQ^T reads it after the pair
 * barrier. */
template <typename T, int D, bool DQ>
__global__ void __launch_bounds__(384, 1)
    burst_wg_dkdv(const __grid_constant__ struct burst_cuda_step s,
                  const __grid_constant__ struct burst_wb_maps maps)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BC = 128, BQ = burst_wg_dkdv_bq<D>(), P = burst_wg_panels<D>();
    static_assert(D <= BURST_CUDA_WG_BWD_MAX, "the wide classes run burst_ww_bwd");
    constexpr int KBYTES = BC * P * 128, QBYTES = BQ * P * 128, SBYTES = BQ * BC * 2;
    constexpr int ST = burst_wg_dkdv_stiles<D>();
    static_assert(BQ % 8 == 0 && (2 * KBYTES + WB_NS * 2 * QBYTES + ST * SBYTES) % 1024 == 0,
                  "the dQ staging panels start on 1024-byte boundaries (their swizzle)");
    /* registers per thread: the producer keeps PREGS, the consumers share the rest (CREGS each:
     * 232 at PREGS = 40, 224 at 56). 56 keep the row scalars' code out of local memory but
     * leave the consumers of class 128 too few; 40 spill a little there, in the producer. */
    constexpr int PREGS = D > 96 ? 40 : 56;
    constexpr int LREGS = 65536 / 384 / 8 * 8, CREGS = (3 * LREGS - PREGS) / 2 / 8 * 8;
    static_assert(PREGS + 2 * CREGS <= 3 * LREGS, "the reallocation fits the launch's");
    extern __shared__ __align__(1024) unsigned char smraw[];
    __shared__ struct burst_wb_bars bar;
    __shared__ int s_full[WB_NS];
    if (burst_smem_addr(smraw) & 1023u) /* the panels' swizzle pattern repeats at 1024 bytes */
        __trap();
    struct burst_wb_tiles tl;
    tl.sk = smraw;
    tl.sv = tl.sk + KBYTES;
    tl.sqo = tl.sv + KBYTES;
    tl.sds = tl.sqo + WB_NS * 2 * QBYTES;
    tl.sdq = DQ ? (float *)(tl.sds + ST * SBYTES) : nullptr;
    tl.rows =
        (struct burst_wg_qrow *)(tl.sds + (DQ ? ST * SBYTES + 2 * burst_wg_dq_tile<D>() * 4 : 0));
    tl.full = s_full;
    const int wg = burst_wg_index();
    int64_t b, g, j0;
    struct burst_wb_qtiles qt;
    int total;
    if (!burst_wb_block<BQ, BC, WB_NS>(s, bar, &b, &g, &j0, &qt, &total))
        return;

    if (wg == 0) {
        burst_regs_dec<PREGS>();
        const int warp = threadIdx.x >> 5;
        if (warp == 0) {
            if (threadIdx.x == 0)
                burst_wb_load<D, BQ, BC, WB_NS>(maps, tl, bar, qt, (int)b, (int)g, (int)j0, total);
        } else if (warp & 1) {
            burst_wb_rows<BQ, BC, WB_NS>(s, tl, bar, qt, b, (int)j0, total, warp >> 1);
        } else if (DQ && warp == 2) {
            burst_wb_store_dq<D, BQ>(s, maps, tl, qt, b, total);
        }
        return;
    }
    burst_regs_inc<CREGS>();
    burst_wb_consume<T, D, DQ>(s, tl, bar, wg - 1, b, g, j0, total);
#endif
}

/* ---- dispatch ---------------------------------------------------------------------------------- */

/* The dK/dV kernel's tensor maps (Q and dO with BQ-row boxes, K and V with 128-row ones) and,
 * where *fused, the dQ accumulator's; without that one *fused is cleared (dQ by burst_wg_dq). */
template <int D>
static int burst_wb_maps_make(const struct burst_cuda_step *s, struct burst_wb_maps *m, bool *fused)
{
    constexpr int BQ = burst_wg_dkdv_bq<D>();
    int e = burst_tma_map_view(&m->q, &s->q, BQ);
    if (e == cudaSuccess)
        e = burst_tma_map_view(&m->o, &s->dout, BQ);
    if (e == cudaSuccess)
        e = burst_tma_map_view(&m->k, &s->k, 128);
    if (e == cudaSuccess)
        e = burst_tma_map_view(&m->v, &s->v, 128);
    if (e == cudaSuccess && *fused &&
        burst_tma_map_dq(&m->dq, s->dq, s->batch, s->nq, s->hq, s->d, BQ) != cudaSuccess)
        *fused = false;
    return e;
}

/* The dQ kernel's tensor maps (Q and dO with 128-row boxes, K and V with WB_ROWS-row ones). */
static int burst_wq_maps_make(const struct burst_cuda_step *s, struct burst_wq_maps *m)
{
    int e = burst_tma_map_view(&m->q, &s->q, 128);
    if (e == cudaSuccess)
        e = burst_tma_map_view(&m->o, &s->dout, 128);
    if (e == cudaSuccess)
        e = burst_tma_map_view(&m->k, &s->k, WB_ROWS);
    if (e == cudaSuccess)
        e = burst_tma_map_view(&m->v, &s->v, WB_ROWS);
    return e;
}

template <typename T, int D> static int burst_wg_bwd_run(const struct burst_cuda_step *s)
{
    if constexpr (D > BURST_CUDA_WG_BWD_MAX) {
        return burst_cuda_launch_bwd_sm90_wide(s);
    } else {
        const bool kv = s->dk || s->dv || s->dk_out.data;
        bool fused = s->dq && s->dq_atomic && kv;
        if (!s->tma)
            return BURST_CUDA_NO_TMA;
        /* every map first: a view the driver refuses launches nothing (the caller runs mma.sync) */
        struct burst_wb_maps maps = {};
        struct burst_wq_maps qmaps = {};
        int e = kv ? burst_wb_maps_make<D>(s, &maps, &fused) : cudaSuccess;
        if (e == cudaSuccess && s->dq && !fused)
            e = burst_wq_maps_make(s, &qmaps);
        if (e != cudaSuccess) /* BURST_CUDA_NO_TMA */
            return e;
        if (kv) {
            const int64_t blocks = s->batch * s->hkv * ((s->nk + 127) / 128);
            if (fused)
                burst_wg_dkdv<T, D, true>
                    <<<(unsigned)blocks, 384, burst_wg_dkdv_smem<D, true>(), cudaStreamPerThread>>>(
                        *s, maps);
            else
                burst_wg_dkdv<T, D, false><<<(unsigned)blocks, 384, burst_wg_dkdv_smem<D, false>(),
                                             cudaStreamPerThread>>>(*s, maps);
            e = cudaGetLastError();
            if (e != cudaSuccess || fused)
                return e;
        }
        if (s->dq) {
            const int64_t blocks = s->batch * s->hq * ((s->nq + 127) / 128);
            burst_wg_dq<T, D>
                <<<(unsigned)blocks, 384, burst_wg_dq_smem<D>(), cudaStreamPerThread>>>(*s, qmaps);
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
        static_assert(burst_wg_dkdv_smem<D, true>() + 1024 <= 232448,
                      "the dK/dV kernel, with its static 1 KiB, fits Hopper's 227 KiB per block");
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
