/*
 * cuda/burst_cuda_wb.cuh - the producer side of the warp-specialized Hopper dK/dV kernels
 * (burst_cuda_bwd_sm90.cu, classes up to 128; burst_cuda_bwd_sm90_wide.cu, classes 192 and 256):
 * a block owns BC keys of a kv head and visits the query tiles (BQ rows) of its group's heads
 * that may see them (burst_wb_block finds both); warp 0 of its producer warpgroup loads K and V
 * once and each tile's Q and dO by TMA into NS mbarrier stages, warps 1 and 3 compute each
 * tile's row scalars (lse, D, allowed keys) into its stage. sm_90a only.
 */
#ifndef BURST_CUDA_WB_CUH
#define BURST_CUDA_WB_CUH

#include <limits.h>

#include "burst_cuda_tma.cuh"
#include "burst_cuda_wgmma.cuh"

#define WB_NS_MAX 3 /* the most stages a kernel streams its query tiles through */

/* The tensor maps of a backward step's Q, dO, K and V views (burst_tma_map_view) and, with DQ,
 * of its dQ accumulator (burst_tma_map_dq). */
struct burst_wb_maps {
    struct burst_tma_map q, o, k, v, dq;
};

/* The dK/dV kernel's barriers: K and V landed; a stage's Q, dO and row scalars landed; a stage
 * free again. */
struct burst_wb_bars {
    uint64_t kv, full[WB_NS_MAX], freed[WB_NS_MAX];
};

/* The query tiles a dK/dV block visits: tile it is query tile burst_dtile_at(it % ntq, rot, ntq)
 * (BQ rows from ifirst) of head g group + it / ntq. The quotient comes from a float reciprocal
 * (exact to one for it < 2^24), corrected, instead of an integer division. */
struct burst_wb_qtiles {
    int64_t h0, ifirst;
    int ntq, bq, rot;
    float rntq;
    __device__ __forceinline__ void at(int it, int64_t *h, int64_t *i0) const
    {
        int hh = __float2int_rz((float)it * rntq), r = it - hh * ntq;
        if (r < 0) {
            hh--;
            r += ntq;
        } else if (r >= ntq) {
            hh++;
            r -= ntq;
        }
        *h = h0 + hh;
        *i0 = ifirst + (int64_t)burst_dtile_at(r, rot, ntq) * bq;
    }
};

/* Where a dK/dV block's tiles are in shared memory. */
struct burst_wb_tiles {
    unsigned char *sk, *sv, *sqo; /* K, V; stage st: Q at sqo + st 2 QBYTES, then dO */
    unsigned char *sds;           /* the kernel's P^T / dS^T tiles (its layout) */
    struct burst_wg_qrow *rows;   /* stage st: rows + st BQ */
    float *sdq;                   /* DQ: the kernel's dQ staging tiles, if any (its layout) */
    int *full;                    /* stage st: its tile sees all of the block's keys */
};

/* A dK/dV block's work, the same for every thread: its keys (BC from *j0 of kv head *g, batch
 * *b, from blockIdx.x), its query tiles and their count over the group's heads (*total); the
 * barriers initialised for NS stages (a stage freed by FREED arrivals: every consumer thread's,
 * and one more where a producer warp also uses the stage) and the block synchronised. False,
 * with the keys' final dK and dV written as zero where the call writes them
 * (burst_final_kv_empty), when no query sees the keys: the block has nothing more to do. */
template <int BQ, int BC, int NS, int FREED = 256>
__device__ __forceinline__ bool burst_wb_block(const struct burst_cuda_step &s,
                                               struct burst_wb_bars &bar, int64_t *b, int64_t *g,
                                               int64_t *j0, struct burst_wb_qtiles *qt, int *total)
{
    static_assert(NS <= WB_NS_MAX, "the barriers of NS stages");
    const int64_t tiles = (s.nk + BC - 1) / BC;
    *g = blockIdx.x / tiles % s.hkv;
    *b = blockIdx.x / tiles / s.hkv;
    *j0 = blockIdx.x % tiles * BC;
    /* the block's queries, uniform: first key's first query to last key's end */
    int64_t imin, imax, unused;
    burst_dqueries(s, *j0, &imin, &unused);
    burst_dqueries(s, min(*j0 + BC, s.nk) - 1, &unused, &imax);
    if (imin >= imax) { /* no query sees these keys */
        burst_final_kv_empty(s, *b, *g, *j0, min(*j0 + (int64_t)BC, s.nk));
        return false;
    }
    qt->h0 = *g * s.group;
    qt->ifirst = imin / BQ * BQ;
    qt->ntq = (int)((imax - qt->ifirst + BQ - 1) / BQ);
    qt->bq = BQ;
    qt->rot = burst_dtile_rot(*j0, qt->ifirst, BQ, qt->ntq);
    qt->rntq = 1.0f / (float)qt->ntq;
    *total = qt->ntq * (int)s.group;
    if (threadIdx.x == 0) {
        burst_mbar_init(&bar.kv, 1);
        for (int st = 0; st < NS; st++) {
            burst_mbar_init(&bar.full[st], 33); /* the loads' arrival, a row warp's lanes' */
            burst_mbar_init(&bar.freed[st], FREED);
        }
        burst_mbar_init_fence();
    }
    __syncthreads();
    return true;
}

/* Producer warp 0, one thread: K and V (BC rows) of kv head g from key j0 once, then the total
 * query tiles' Q and dO into the NS stages, each stage once its previous tile is freed. */
template <int D, int BQ, int BC, int NS>
__device__ __forceinline__ void
burst_wb_load(const struct burst_wb_maps &maps, const struct burst_wb_tiles &t,
              struct burst_wb_bars &bar, const struct burst_wb_qtiles &qt, int b, int g, int j0,
              int total)
{
    constexpr int P = burst_wg_panels<D>(), KBYTES = BC * P * 128, QBYTES = BQ * P * 128;
    static_assert(NS <= WB_NS_MAX, "the barriers of NS stages");
    burst_tma_prefetch_map(&maps.q.map);
    burst_tma_prefetch_map(&maps.o.map);
    burst_tma_prefetch_map(&maps.k.map);
    burst_tma_prefetch_map(&maps.v.map);
    burst_mbar_expect(&bar.kv, 2 * KBYTES);
#pragma unroll
    for (int pn = 0; pn < P; pn++) {
        burst_tma_load(t.sk + pn * BC * 128, maps.k, &bar.kv, 64 * pn, g, j0, b);
        burst_tma_load(t.sv + pn * BC * 128, maps.v, &bar.kv, 64 * pn, g, j0, b);
    }
    for (int it = 0, st = 0; it < total; it++, st = st == NS - 1 ? 0 : st + 1) {
        if (it >= NS) /* the stage's tile it - NS is done with */
            burst_mbar_wait(&bar.freed[st], (it / NS + 1) & 1);
        int64_t h, i0;
        qt.at(it, &h, &i0);
        unsigned char *dst = t.sqo + st * 2 * QBYTES;
        burst_mbar_expect(&bar.full[st], 2 * QBYTES);
#pragma unroll
        for (int pn = 0; pn < P; pn++) {
            burst_tma_load(dst + pn * BQ * 128, maps.q, &bar.full[st], 64 * pn, (int)h, (int)i0, b);
            burst_tma_load(dst + QBYTES + pn * BQ * 128, maps.o, &bar.full[st], 64 * pn, (int)h,
                           (int)i0, b);
        }
    }
}

/* Producer warps 1 and 3 (w = 0, 1), every other tile from w: the row scalars of each query
 * tile (lse in log2 units, D, allowed keys; two rows per lane) into its stage, and whether every
 * row sees all BC keys from j0; each lane arrives on the stage's `full` barrier once it has
 * stored its rows. Two warps give each tile's loads two tiles' time. */
template <int BQ, int BC, int NS>
__device__ __forceinline__ void
burst_wb_rows(const struct burst_cuda_step &s, const struct burst_wb_tiles &t,
              struct burst_wb_bars &bar, const struct burst_wb_qtiles &qt, int64_t b, int j0,
              int total, int w)
{
    static_assert(BQ <= 64, "two rows per lane");
    static_assert(NS >= 2, "the stage of tile it + 2");
    const int lane = threadIdx.x & 31;
    for (int it = w, st = w; it < total; it += 2, st = st + 2 >= NS ? st + 2 - NS : st + 2) {
        /* computed before the stage is free, so that their loads overlap the wait */
        int64_t h, i0;
        qt.at(it, &h, &i0);
        struct burst_wg_qrow q[2];
        int kbm = 0, kem = INT_MAX;
#pragma unroll
        for (int u = 0; u < 2; u++) {
            q[u] = burst_wg_row<BQ>(s, b, h, i0, lane + 32 * u);
            kbm = max(kbm, q[u].kb);
            kem = min(kem, q[u].ke);
        }
        kbm = __reduce_max_sync(~0u, kbm);
        kem = __reduce_min_sync(~0u, kem);
        if (it >= NS)
            burst_mbar_wait(&bar.freed[st], (it / NS + 1) & 1);
#pragma unroll
        for (int u = 0; u < 2; u++)
            if (lane + 32 * u < BQ)
                t.rows[st * BQ + lane + 32 * u] = q[u];
        if (lane == 0)
            t.full[st] = kbm <= j0 && kem >= j0 + BC;
        burst_mbar_arrive(&bar.full[st]); /* each lane's stores, released by its own arrival */
    }
}

#endif /* BURST_CUDA_WB_CUH */
