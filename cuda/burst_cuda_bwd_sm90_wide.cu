/*
 * cuda/burst_cuda_bwd_sm90_wide.cu - the backward step of the wide head-dim classes (192, 256) on
 * Hopper's warpgroup tensor cores (wgmma, sm_90a only, like burst_cuda_bwd_sm90.cu, which
 * launches it). Same contract as the other backward kernels.
 *
 * At these widths a warpgroup cannot hold dK and dV of its 64 keys in registers (64 x 256 x 2
 * fp32 values over 128 threads: 256 registers each), so the two consumer warpgroups of a block
 * split the work by tensor instead of by keys. A block owns 64 keys of a kv head and loops over
 * the heads of its group and the 64-row query tiles that may see its keys. It is warp-specialized
 * like the kernel of the narrower classes (burst_cuda_wb.cuh): a producer warpgroup loads K and V
 * once and each tile's Q and dO by TMA into two mbarrier stages and computes the tiles' row
 * scalars; per tile the consumers compute
 *   - S^T = K Q^T and dP^T = V dO^T (64 keys x 64 queries), each warpgroup 32 of the queries
 *     (A = the K / V tile, B = its query rows, both from shared memory);
 *   - P^T and dS^T = P^T (dP^T - D) from the saved lse and D, rounded to the input dtype and stored
 *     transposed to shared memory as [query][key] tiles (two buffers, one per tile in turn), where
 *     both warpgroups read them after a barrier of the two;
 *   - warpgroup 0: dV += P^T dO, warpgroup 1: dK += dS^T Q, each over all D columns (A = the P^T /
 *     dS^T tile read MN-major, B = the dO / Q tile read MN-major);
 *   - plans that are not deterministic: dQ += tau dS K in 64-column chunks (alternating between the
 *     warpgroups; A = the dS tile read K-major, B = the K tile read MN-major), so that no dQ kernel
 *     recomputes S and dP. The consumers stage the tile's tau dQ in shared memory and producer
 *     warp 2 adds it to s.dq by tensor reductions (cp.reduce.async.bulk.tensor, as the narrower
 *     classes' kernel does), off the consumers' path: class 192 in a staging tile of its own;
 *     class 256, whose shared memory holds no such tile, in the tile's stage once the products
 *     have read it (each warpgroup's chunks in the Q or dO tile its own product read, so that
 *     neither waits for the other), and warp 2 frees the stage once the reductions have read it.
 *     Deterministic plans run the sm_80 dQ kernel (burst_cuda_bwd.cu) after this one.
 * The warpgroups meet once per tile, at the barrier after which both halves of P^T and dS^T are
 * stored; a consumer does not overlap one tile's products with the next tile's scores (at
 * D = 256 the registers that would take make the compiler spill accumulators and serialise the
 * products). A pair of a plan that is not deterministic costs the five products of the textbook
 * backward. P and dS are rounded to the input dtype as A operands, as in the other
 * kernels (tests/harness.h bounds this).
 */
#include <limits.h>

#include "burst_cuda_tma.cuh"
#include "burst_cuda_wb.cuh"
#include "burst_cuda_wgmma.cuh"

#define WW_NS 2           /* stages of the streamed Q / dO tiles */
#define WW_BC 64          /* keys of a block */
#define WW_BQ 64          /* query rows of a streamed tile */
#define WW_BAR_PAIR 3     /* named barrier of the two consumer warpgroups (P^T and dS^T stored) */
#define WW_BAR_DQ_EMPTY 4 /* class 192: the dQ staging tile free (the consumers and warp 2) */
#define WW_BAR_DQ_FULL 5  /* the dQ staging tile written (class 256: 5 + its stage) */

/* Whether the DQ kernel of class D stages dQ in its Q / dO stage (else: in a tile of its own). */
template <int D> __host__ __device__ constexpr bool burst_ww_instage()
{
    return D == 256;
}

/* Panel p (32 columns of d as [WW_BQ][32] fp32, 128-byte rows with their 16-byte chunks swizzled
 * by row % 8: the boxes of burst_tma_map_dq) of the dQ staging tile of stage st: class 192's own
 * tile; at class 256 the stage itself, chunk c (panels 2 c, 2 c + 1, computed by warpgroup c % 2)
 * in the tile that warpgroup's product read (0: dO, 1: Q). */
template <int D>
__device__ __forceinline__ float *burst_ww_dq_panel(const struct burst_wb_tiles &t, int st, int p)
{
    if constexpr (burst_ww_instage<D>()) {
        constexpr int QBYTES = WW_BQ * burst_wg_panels<D>() * 128, PBYTES = WW_BQ * 32 * 4;
        static_assert(4 * PBYTES == QBYTES && WW_NS == 2,
                      "a Q or dO tile holds two 64-column fp32 chunks; barriers FULL + stage");
        const int c = p >> 1;
        return (float *)(t.sqo + st * 2 * QBYTES + (c & 1 ? 0 : QBYTES) + (c >> 1) * 2 * PBYTES +
                         (p & 1) * PBYTES);
    } else {
        return t.sdq + p * WW_BQ * 32;
    }
}

/* K and V, WW_NS stages of Q and dO, two buffers of the P^T and dS^T tiles, with DQ at class
 * 192 the fp32 dQ staging tile (WW_BQ rows x D columns, in the panels of burst_ww_dq_panel),
 * then the stages' row scalars. No alignment slack: the shared memory is declared
 * __align__(1024) and the kernel traps otherwise (at D = 256, and at 192 with the staging tile,
 * the kernel takes all of 227 KiB with the toolchain's 1 KiB padding of the static part). */
template <int D, bool DQ> constexpr size_t burst_ww_smem()
{
    return (size_t)(2 * WW_BC + WW_NS * 2 * WW_BQ) * burst_wg_panels<D>() * 128 +
           2 * 2 * WW_BQ * 128 + (DQ && !burst_ww_instage<D>() ? WW_BQ * D * 4 : 0) +
           WW_NS * WW_BQ * sizeof(struct burst_wg_qrow);
}

/* Producer warp 2 (DQ): once the consumers have staged query tile it's tau dQ, lane 0 adds it
 * to s.dq with one tensor reduction per 32 columns of d (rows past nq and columns past d are not
 * written) and frees the staging tile (class 256: the tile's stage) once the reductions have read
 * it. Class 256 alternates two FULL barriers by stage: the consumers' next arrival on one needs
 * the stage reloaded, which needs this warp past its wait on it. */
template <int D>
__device__ __forceinline__ void
burst_ww_store_dq(const struct burst_cuda_step &s, const struct burst_wb_maps &maps,
                  const struct burst_wb_tiles &t, struct burst_wb_bars &bar,
                  const struct burst_wb_qtiles &qt, int64_t b, int total)
{
    constexpr bool INSTAGE = burst_ww_instage<D>();
    const int lane = threadIdx.x & 31, panels = (int)(s.d + 31) / 32;
    if (lane == 0)
        burst_tma_prefetch_map(&maps.dq.map);
    __syncwarp(); /* converged for the aligned barrier instruction */
    if constexpr (!INSTAGE)
        burst_named_arrive(WW_BAR_DQ_EMPTY, 288); /* the staging tile starts free */
    for (int it = 0; it < total; it++) {
        const int st = it % WW_NS;
        burst_named_sync(WW_BAR_DQ_FULL + (INSTAGE ? st : 0), 288);
        int64_t h, i0;
        qt.at(it, &h, &i0);
        if (lane == 0)
            for (int p = 0; p < panels; p++)
                burst_tma_add(maps.dq, burst_ww_dq_panel<D>(t, st, p), 32 * p, (int)h, (int)i0,
                              (int)b);
        burst_bulk_commit();
        burst_bulk_wait_read<0>(); /* the reductions have read the staging tile */
        __syncwarp();              /* converged for the aligned barrier instruction */
        if constexpr (INSTAGE) {
            if (lane == 0)
                burst_mbar_arrive(&bar.freed[st]); /* its dQ read: the stage may be reloaded */
            __syncwarp();                          /* converged for the next tile's barrier */
        } else if (it + 1 < total) {
            burst_named_arrive(WW_BAR_DQ_EMPTY, 288); /* for tile it + 1 */
        }
    }
    burst_bulk_wait<0>(); /* the additions done before the block ends */
}

/* P^T in sc and dS^T in dp (in place; column = query row wc HQ + 8 n + cq (+ 1) of the tile in
 * stage st) for this thread's keys key0, key0 + 8. */
template <int HQ>
__device__ __forceinline__ void burst_ww_dsoft(const struct burst_cuda_step &s,
                                               const struct burst_wb_tiles &t, int st, int wc,
                                               int key0, float *sc, float *dp)
{
    const struct burst_wg_qrow *rw = t.rows + st * WW_BQ + wc * HQ;
    const int cq = 2 * (threadIdx.x & 3);
    const float sl2 = s.scale * BURST_LOG2E;
    unsigned ok = ~0u; /* the mask as bits 4 n + e, all set where the tile sees all keys */
    if (!t.full[st]) {
        ok = 0;
#pragma unroll
        for (int n = 0; n < HQ / 8; n++)
#pragma unroll
            for (int c = 0; c < 2; c++) {
                const int2 kr = *(const int2 *)&rw[n * 8 + cq + c].kb; /* kb, ke */
#pragma unroll
                for (int u = 0; u < 2; u++)
                    if (key0 + 8 * u >= kr.x && key0 + 8 * u < kr.y)
                        ok |= 1u << (4 * n + 2 * u + c);
            }
    }
    const bool cap = s.cap_in != 0.0f;
#pragma unroll
    for (int n = 0; n < HQ / 8; n++)
#pragma unroll
        for (int c = 0; c < 2; c++) {
            const float2 r = *(const float2 *)&rw[n * 8 + cq + c]; /* l2, dl */
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const int e = 2 * u + c;
                float x = sc[4 * n + e], slope = 1.0f;
                if (cap) { /* soft-capped scores, dS times the cap's derivative 1 - tanh^2 */
                    x = burst_dcap_score(s, x);
                    const float th = burst_dcap_tanh(s, x);
                    slope = fmaf(-th, th, 1.0f);
                }
                const float p = ok >> (4 * n + e) & 1 ? burst_ex2(fmaf(x, sl2, -r.x)) : 0.0f;
                sc[4 * n + e] = p;
                dp[4 * n + e] = p * (dp[4 * n + e] - r.y) * slope;
            }
        }
}

/* This thread's rows of the accumulator (warpgroup 0: dV, 1: dK times tau), keys key0 and
 * key0 + 8, added to the fp32 accumulators or written final (s.dk_out) in the dtype. */
template <int D>
__device__ __forceinline__ void burst_ww_store(const struct burst_cuda_step &s, int wc, int64_t b,
                                               int64_t g, int64_t key0, const float *acc)
{
    const int cq = 2 * (threadIdx.x & 3);
#pragma unroll
    for (int u = 0; u < 2; u++) {
        const int64_t j = key0 + 8 * u;
        if (j >= s.nk)
            continue;
        if (s.dk_out.data) {
#pragma unroll
            for (int n = 0; n < D / 8; n++) {
                if (n * 8 >= s.d) /* the class's columns past d are not the caller's */
                    break;
                const float x = acc[4 * n + 2 * u], y = acc[4 * n + 2 * u + 1];
                if (wc == 0) /* the values an fp32 accumulator starting at 0 would hold */
                    burst_final_pair(s.dv_out, b, j, g, n * 8 + cq, 0.0f + x, 0.0f + y);
                else
                    burst_final_pair(s.dk_out, b, j, g, n * 8 + cq, fmaf(s.scale, x, 0.0f),
                                     fmaf(s.scale, y, 0.0f));
            }
            continue;
        }
        float *dst = wc == 0 ? s.dv : s.dk;
        if (!dst)
            continue;
        dst += ((b * s.nk + j) * s.hkv + g) * s.d;
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            if (n * 8 >= s.d)
                break;
            float2 *p2 = (float2 *)(dst + n * 8 + cq), x = *p2;
            x.x = wc == 0 ? x.x + acc[4 * n + 2 * u] : fmaf(s.scale, acc[4 * n + 2 * u], x.x);
            x.y =
                wc == 0 ? x.y + acc[4 * n + 2 * u + 1] : fmaf(s.scale, acc[4 * n + 2 * u + 1], x.y);
            *p2 = x;
        }
    }
}

/* Consumer warpgroup wc (0: dV, 1: dK) of the block's total query tiles, as the file's comment
 * describes. */
template <typename T, int D, bool DQ>
__device__ __forceinline__ void
burst_ww_consume(const struct burst_cuda_step &s, const struct burst_wb_tiles &t,
                 struct burst_wb_bars &bar, int wc, int64_t b, int64_t g, int64_t j0, int total)
{
    constexpr int BC = WW_BC, BQ = WW_BQ, PN = burst_wg_panels<D>();
    constexpr int QBYTES = BQ * PN * 128, SBYTES = BQ * 128;
    constexpr int HQ = BQ / 2; /* queries of S^T per warpgroup */
    constexpr uint32_t DSTAGE = 2 * QBYTES >> 4, DSBUF = SBYTES >> 4;
    constexpr bool INSTAGE = DQ && burst_ww_instage<D>();
    const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, rq = lane >> 2;
    const int key0 = (int)j0 + warp * 16 + rq;            /* this thread's keys: key0, key0 + 8 */
    unsigned char *sp = t.sds, *sds = t.sds + 2 * SBYTES; /* two buffers each */

    float acc[D / 2]; /* warpgroup 0: dV, 1: dK; key rows x all D columns */
#pragma unroll
    for (int n = 0; n < D / 2; n++)
        acc[n] = 0.0f;
    float sc[HQ / 2], dp[HQ / 2], q[DQ ? 32 : 1];
    /* descriptors (low words, burst_wg_dlo) */
    const uint32_t dkd = burst_wg_dlo(t.sk, 16), dvd = burst_wg_dlo(t.sv, 16); /* A, K-major */
    const uint32_t dqh = burst_wg_dlo(t.sqo + wc * HQ * 128, 16); /* B: this wg's queries */
    const uint32_t doh = burst_wg_dlo(t.sqo + QBYTES + wc * HQ * 128, 16);
    /* the dV / dK product: A = P^T or dS^T, B = dO or Q, both MN-major */
    const uint32_t dxa = burst_wg_dlo(wc == 0 ? sp : sds, BQ * 128);
    const uint32_t dxb = burst_wg_dlo(t.sqo + (wc == 0 ? QBYTES : 0), BQ * 128);
    const uint32_t dsk = burst_wg_dlo(sds, 16);        /* dS as A of dQ, K-major */
    const uint32_t dkt = burst_wg_dlo(t.sk, BC * 128); /* K as B of dQ, MN-major */
    const int ca = wc, cb = wc + 2; /* this warpgroup's dQ chunks (cb where < PN) */

    /* issue S^T and dP^T of tile it (stage st) once it has landed */
    auto scores = [&](int it, int st) {
        burst_mbar_wait(&bar.full[st], (it / WW_NS) & 1);
        burst_wg_fence();
        burst_wg_abt<T, D, HQ, BC, BQ>(sc, dkd, dqh + st * DSTAGE);
        burst_wg_abt<T, D, HQ, BC, BQ>(dp, dvd, doh + st * DSTAGE);
    };
    /* P^T and dS^T of tile it (stage st) into buffer buf, then the pair barrier */
    auto keep = [&](int st, int buf) {
        burst_wg_pin<HQ / 2>(sc);
        burst_wg_pin<HQ / 2>(dp);
        burst_ww_dsoft<HQ>(s, t, st, wc, key0, sc, dp);
        burst_wg_store_t<T, HQ>(sp + buf * SBYTES + wc * HQ * 128, sc);
        burst_wg_store_t<T, HQ>(sds + buf * SBYTES + wc * HQ * 128, dp);
        burst_fence_proxy_async();
        burst_named_sync(WW_BAR_PAIR, 256); /* both halves of P^T and dS^T stored */
    };
    /* dQ chunk c (columns 64 c..) of the tile in buffer buf: issue q = dS K[:, chunk] */
    auto dq_issue = [&](int c, int buf) {
#pragma unroll
        for (int kk = 0; kk < BC / 16; kk++)
            burst_wg_ssop<T, 64, 0, 1>::run(q, burst_wg_dhi(dsk + buf * DSBUF + kk * 2),
                                            burst_wg_dhi(dkt + ((c * BC * 128 + kk * 2048) >> 4)),
                                            kk > 0);
        burst_wg_commit();
    };
    /* tau q into the staging tile of stage st: rows (queries) 16 warp + rq (+ 8), columns
     * 64 c + 8 n + cq (+ 1), element (row r, column x) in panel x / 32 at r * 32 + x % 32 with its
     * 16-byte chunk swizzled by r % 8 */
    auto dq_add = [&](int c, int st) {
        burst_wg_pin<32>(q);
        const int cq = 2 * (lane & 3);
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const int r = warp * 16 + rq + 8 * u, x = c * 64 + n * 8 + cq;
                float *row = burst_ww_dq_panel<D>(t, st, x >> 5) + r * 32;
                *(float2 *)(row + ((((x & 31) >> 2) ^ (r & 7)) << 2) + (x & 3)) =
                    make_float2(s.scale * q[4 * n + 2 * u], s.scale * q[4 * n + 2 * u + 1]);
            }
    };
    /* issue tile it's dV / dK product and first dQ chunk (stage st, buffer buf) */
    auto products = [&](int st, int buf) {
        burst_wg_mn<T, D, BQ>(acc, dxa + buf * DSBUF, dxb + st * DSTAGE);
        if constexpr (DQ)
            dq_issue(ca, buf);
    };
    /* wait for products(st, buf) of stage st, free the stage once the dV / dK product has read
     * it (class 256 with DQ: with producer warp 2, once its reductions have read the dQ staged
     * there), stage the dQ chunks (class 192: once warp 2 has freed the staging tile) and pass
     * them to warp 2 */
    auto finish = [&](int st, int buf) {
        burst_wg_wait<DQ ? 1 : 0>();
        burst_wg_pin<D / 2>(acc);
        burst_mbar_arrive(&bar.freed[st]); /* this thread's product has read the stage */
        if constexpr (DQ) {
            burst_wg_wait<0>();
            if constexpr (!INSTAGE)
                burst_named_sync(WW_BAR_DQ_EMPTY, 288);
            dq_add(ca, st);
            if (PN == 4 || cb < PN) { /* a constant where both warpgroups have a second chunk */
                burst_wg_fence();     /* q was read by the stores */
                dq_issue(cb, buf);
                burst_wg_wait<0>();
                dq_add(cb, st);
            }
            burst_fence_proxy_async(); /* the reductions read it through the async proxy */
            burst_named_arrive(WW_BAR_DQ_FULL + (INSTAGE ? st : 0), 288);
        }
    };

    /* The first tile apart: a wgmma under a branch the compiler cannot prove uniform gets
     * serialised. */
    burst_mbar_wait(&bar.kv, 0);
    scores(0, 0);
    burst_wg_wait<0>();
    keep(0, 0);
    int prev = 0;
    for (int it = 1; it < total; it++) {
        const int st = it & 1, pb = prev; /* stage and buffer: it % 2 */
        burst_wg_fence();
        products(pb, pb);
        finish(pb, pb);
        scores(it, st);
        burst_wg_wait<0>();
        keep(st, st);
        prev = st;
    }
    burst_wg_fence();
    products(prev, prev);
    finish(prev, prev);
    burst_ww_store<D>(s, wc, b, g, key0, acc);
}

/* The kernel: a block owns 64 keys of kv head g. Warpgroup 0 produces (warp 0 loads K and V once
 * and the Q and dO tiles into WW_NS stages by TMA, warps 1 and 3 compute the row scalars of every
 * other tile, warp 2 adds the staged dQ of each tile to s.dq with DQ) and keeps
 * PREGS registers per thread; warpgroups 1 and 2 consume (dV and dK). */
template <typename T, int D, bool DQ>
__global__ void __launch_bounds__(384, 1)
    burst_ww_bwd(const __grid_constant__ struct burst_cuda_step s,
                 const __grid_constant__ struct burst_wb_maps maps)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BC = WW_BC, BQ = WW_BQ, PN = burst_wg_panels<D>();
    constexpr int KBYTES = BC * PN * 128, QBYTES = BQ * PN * 128;
    /* registers per thread: the producer PREGS, each consumer CREGS (232 at D = 256, where its
     * accumulators need them, 224 at 192, where 40 would make the row warps spill) */
    constexpr int PREGS = D > 192 ? 40 : 56;
    constexpr int LREGS = 65536 / 384 / 8 * 8, CREGS = (3 * LREGS - PREGS) / 2 / 8 * 8;
    static_assert(PREGS + 2 * CREGS <= 3 * LREGS, "the reallocation fits the launch's");
    extern __shared__ __align__(1024) unsigned char smraw[];
    __shared__ struct burst_wb_bars bar;
    __shared__ int s_full[WW_NS];
    if (burst_smem_addr(smraw) & 1023u) /* the panels' swizzle pattern repeats at 1024 bytes */
        __trap();
    struct burst_wb_tiles tl;
    tl.sk = smraw;
    tl.sv = tl.sk + KBYTES;
    tl.sqo = tl.sv + KBYTES;
    constexpr bool INSTAGE = DQ && burst_ww_instage<D>(); /* dQ staged in the Q / dO stage */
    constexpr bool OWNTILE = DQ && !INSTAGE;              /* a dQ staging tile of its own */
    tl.sds = tl.sqo + WW_NS * 2 * QBYTES; /* P^T buffers 0, 1, then dS^T buffers 0, 1 */
    static_assert((2 * KBYTES + WW_NS * 2 * QBYTES + 4 * BQ * 128) % 1024 == 0,
                  "the dQ staging panels start on 1024-byte boundaries (their swizzle)");
    tl.sdq = OWNTILE ? (float *)(tl.sds + 4 * BQ * 128) : nullptr;
    tl.rows = (struct burst_wg_qrow *)(tl.sds + 4 * BQ * 128 + (OWNTILE ? BQ * D * 4 : 0));
    tl.full = s_full;
    const int wg = burst_wg_index();
    int64_t b, g, j0;
    struct burst_wb_qtiles qt;
    int total;
    /* a stage is freed by every consumer thread and, at class 256 with DQ, by warp 2 */
    constexpr int FREED = INSTAGE ? 257 : 256;
    if (!burst_wb_block<BQ, BC, WW_NS, FREED>(s, bar, &b, &g, &j0, &qt, &total))
        return;

    if (wg == 0) {
        burst_regs_dec<PREGS>();
        const int warp = threadIdx.x >> 5;
        if (warp == 0) {
            if (threadIdx.x == 0)
                burst_wb_load<D, BQ, BC, WW_NS>(maps, tl, bar, qt, (int)b, (int)g, (int)j0, total);
        } else if (warp & 1) {
            burst_wb_rows<BQ, BC, WW_NS>(s, tl, bar, qt, b, (int)j0, total, warp >> 1);
        } else if constexpr (DQ) {
            burst_ww_store_dq<D>(s, maps, tl, bar, qt, b, total);
        }
        return;
    }
    burst_regs_inc<CREGS>();
    burst_ww_consume<T, D, DQ>(s, tl, bar, wg - 1, b, g, j0, total);
#endif
}

template <typename T, int D> static int burst_ww_run(const struct burst_cuda_step *s)
{
    const bool kv = s->dk || s->dv || s->dk_out.data;
    bool fused = s->dq && s->dq_atomic && kv;
    if (kv) {
        if (!s->tma)
            return BURST_CUDA_NO_TMA;
        struct burst_wb_maps maps = {};
        int e = burst_tma_map_view(&maps.q, &s->q, WW_BQ);
        if (e == cudaSuccess)
            e = burst_tma_map_view(&maps.o, &s->dout, WW_BQ);
        if (e == cudaSuccess)
            e = burst_tma_map_view(&maps.k, &s->k, WW_BC);
        if (e == cudaSuccess)
            e = burst_tma_map_view(&maps.v, &s->v, WW_BC);
        if (e != cudaSuccess) /* BURST_CUDA_NO_TMA: the caller runs mma.sync */
            return e;
        /* a dQ accumulator no tensor map describes: dQ by the dQ kernel */
        if (fused &&
            burst_tma_map_dq(&maps.dq, s->dq, s->batch, s->nq, s->hq, s->d, WW_BQ) != cudaSuccess)
            fused = false;
        const int64_t blocks = s->batch * s->hkv * ((s->nk + WW_BC - 1) / WW_BC);
        if (fused)
            burst_ww_bwd<T, D, true>
                <<<(unsigned)blocks, 384, burst_ww_smem<D, true>(), cudaStreamPerThread>>>(*s,
                                                                                           maps);
        else
            burst_ww_bwd<T, D, false>
                <<<(unsigned)blocks, 384, burst_ww_smem<D, false>(), cudaStreamPerThread>>>(*s,
                                                                                            maps);
        e = cudaGetLastError();
        if (e != cudaSuccess)
            return e;
    }
    if (s->dq && !fused)
        return burst_cuda_launch_dq_mma(s);
    return cudaSuccess;
}

template <typename T> static int burst_ww_dims(const struct burst_cuda_step *s)
{
    return burst_cuda_dclass(s->d) == 192 ? burst_ww_run<T, 192>(s) : burst_ww_run<T, 256>(s);
}

extern "C" int burst_cuda_launch_bwd_sm90_wide(const struct burst_cuda_step *s)
{
    return s->q.dtype == BURST_CUDA_F16 ? burst_ww_dims<__half>(s)
                                        : burst_ww_dims<__nv_bfloat16>(s);
}

template <typename T, int D> static cudaError_t burst_ww_attr()
{
    static_assert(burst_ww_smem<D, true>() + 1024 <= 232448 &&
                      burst_ww_smem<D, false>() + 1024 <= 232448,
                  "the kernel, with its static 1 KiB, fits Hopper's 227 KiB per block");
    cudaError_t e =
        cudaFuncSetAttribute(burst_ww_bwd<T, D, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)burst_ww_smem<D, false>());
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(burst_ww_bwd<T, D, true>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)burst_ww_smem<D, true>());
    return e;
}

extern "C" size_t burst_cuda_sm90_wide_smem(int d)
{
    return burst_cuda_dclass(d) == 192 ? burst_ww_smem<192, true>() : burst_ww_smem<256, true>();
}

extern "C" int burst_cuda_sm90_wide_init(void)
{
    cudaError_t e = burst_ww_attr<__half, 192>();
    if (e == cudaSuccess)
        e = burst_ww_attr<__half, 256>();
    if (e == cudaSuccess)
        e = burst_ww_attr<__nv_bfloat16, 192>();
    if (e == cudaSuccess)
        e = burst_ww_attr<__nv_bfloat16, 256>();
    return e;
}
