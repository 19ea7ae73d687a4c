/*
 * cuda/burst_cuda_fwd_sm90.cu - the forward step on Hopper's warpgroup tensor cores (wgmma,
 * sm_90a only: cuda/meson.build compiles this file for that one target, and the backend chooses
 * it only on a compute capability 9.0 device whose binary holds it; BURST_CUDA_WGMMA=0 turns it
 * off). Same contract as burst_mma_fwd in burst_cuda_fwd.cu: fp16 / bf16, one instance per
 * head-dim class, the lse merge fused, key tiles outside the block's range skipped (a tile one
 * warpgroup of the block does not see is computed fully masked), rows with no allowed key left
 * bit-for-bit unchanged (written 0 / -inf with s.o_out: burst_final_row). The softmax needs
 * scale > 0, which plan creation guarantees.
 *
 * A block is persistent (one per multiprocessor; it takes work items of BR query rows of a head
 * from a counter of the step, so that the blocks stay busy to the end whatever the items cost)
 * and warp-specialized: warpgroup 0 is the producer, warpgroups 1 .. NC the consumers, each of
 * 64 query rows (NC = BURST_CUDA_WG_FWD_WGS(D), BR = 64 NC rows). One producer thread takes the
 * items and moves every tile with the tensor memory accelerator (burst_cuda_tma.cuh): an item's
 * first K and V tile, its Q tile once the previous item's last S has read it, then its other
 * K and V tiles of BC keys (BURST_CUDA_WG_FWD_BC) into NS = 3 stages of shared memory, each K
 * and V completing on an mbarrier of its own, a stage refilled once every consumer warp has
 * arrived on its `freed` barrier; so the next item's loads run under the last products and the
 * row writes of the one before. The producer keeps a few registers per thread and gives the
 * rest to the consumers (setmaxnreg). The consumers never meet at a block barrier, so their
 * products and softmaxes drift apart and fill each other's gaps; from class 128 up the two
 * consumers also take turns to issue their products (two named barriers), which keeps one's
 * softmax under the other's products. Per key tile j a consumer
 *   1. issues S_j = Q K_j^T (d / 16 wgmma, A = its Q rows and B = K_j from shared memory),
 *   2. issues O += P_{j-1} V_{j-1} for the previous tile (BC / 16 wgmma, A = P in registers),
 *   3. waits for S_j only, and runs the online softmax on it (in log2 units, fp32) while the
 *      tensor cores still work on step 2,
 *   4. waits for step 2, frees the stage of tile j - 1, rescales O where a row of the warp
 *      moved its maximum and packs P_j to the input dtype,
 * so the softmax of one tile overlaps the P V product of the one before. The running maximum
 * lags by up to 8 (log2 units: burst_max_lag), so most tiles skip the rescaling.
 * Layouts, descriptors and ordering: burst_cuda_wgmma.cuh.
 */
#include <limits.h>

#include "burst_cuda_tma.cuh"
#include "burst_cuda_wg_fwd.cuh"

#define WG_NS 3
#define WG_BAR_TURN 4 /* named barriers 4, 5: consumer warpgroup wc's turn to issue */

template <int D, int BC, int NC> constexpr size_t burst_wg_fwd_smem()
{
    /* Q (64 NC rows), NS stages of K and V (panel tiles), and 1 KiB to align the panels on
     * 1024 bytes */
    return (size_t)(64 * NC + WG_NS * 2 * BC) * burst_wg_panels<D>() * 128 + 1024;
}

/* The tensor maps of a step's Q, K and V views (burst_tma_map_view). */
struct burst_wg_maps {
    struct burst_tma_map q, k, v;
};

/* The forward's barriers: Q landed; Q free again (every consumer warp has its last S of the
 * item); K, V of a stage landed; a stage free again; an item index published in slot 0 / 1
 * (item, by the producer) and read by every consumer warp (taken). */
struct burst_wg_fwd_bars {
    uint64_t q, qfree, k[WG_NS], v[WG_NS], freed[WG_NS], item[2], taken[2];
};

/* A position in the ring of K / V stages: the stage and the parity of its round. */
struct burst_wg_stage {
    int st, ph;
    __device__ __forceinline__ void next()
    {
        if (++st == WG_NS) {
            st = 0;
            ph ^= 1;
        }
    }
};

/* The producer thread. Items come from the step's counter s.sched[0] (the block's first is
 * blockIdx.x, then gridDim.x + the counter's old value), so that a block that finishes early
 * takes the next item; each index is published to the consumers in slot k % 2 (the terminal
 * one, >= total, too). For an item with keys: its first K / V tile into the stages, its Q
 * tile into sq once the previous item's last S has read it, then its other tiles, each stage
 * once its previous tile is freed by every consumer warp. The last block to finish leaves the
 * counters at zero for the next launch. */
template <int D, int BC, int NC>
__device__ __forceinline__ void
burst_wg_fwd_produce(const struct burst_cuda_step &s, const struct burst_wg_maps &maps,
                     unsigned char *sq, unsigned char *skv, struct burst_wg_fwd_bars &bar,
                     int64_t *slot, int64_t tiles, int64_t total)
{
    constexpr int P = burst_wg_panels<D>(), KBYTES = BC * P * 128, BR = 64 * NC;
    burst_tma_prefetch_map(&maps.q.map);
    burst_tma_prefetch_map(&maps.k.map);
    burst_tma_prefetch_map(&maps.v.map);
    struct burst_wg_stage sg = {0, 0};
    int64_t c = 0; /* tiles loaded */
    int qi = 0;    /* items with keys so far */
    int64_t w = blockIdx.x;
    for (int k = 0;; k++) {
        if (k >= 2) /* every consumer warp has read item k - 2's index */
            burst_mbar_wait(&bar.taken[k & 1], ((k >> 1) - 1) & 1);
        slot[k & 1] = w;
        burst_mbar_arrive(&bar.item[k & 1]);
        if (w >= total)
            break;
        const struct burst_wg_item it = burst_wg_item_at<BC, BR>(s, tiles, w);
        for (int j = 0; j < it.nt; j++, c++, sg.next()) {
            if (c >= WG_NS) /* the stage's tile c - NS is done with */
                burst_mbar_wait(&bar.freed[sg.st], sg.ph ^ 1);
            const int r0 = (int)it.jfirst + j * BC;
            unsigned char *kt = skv + sg.st * 2 * KBYTES;
            burst_mbar_expect(&bar.k[sg.st], KBYTES);
#pragma unroll
            for (int pn = 0; pn < P; pn++)
                burst_tma_load(kt + pn * BC * 128, maps.k, &bar.k[sg.st], 64 * pn, (int)it.g, r0,
                               (int)it.b);
            burst_mbar_expect(&bar.v[sg.st], KBYTES);
#pragma unroll
            for (int pn = 0; pn < P; pn++)
                burst_tma_load(kt + KBYTES + pn * BC * 128, maps.v, &bar.v[sg.st], 64 * pn,
                               (int)it.g, r0, (int)it.b);
            if (j == 0) {   /* Q after the first tile: the stages may already be free */
                if (qi > 0) /* the previous item's last S has read Q */
                    burst_mbar_wait(&bar.qfree, (qi - 1) & 1);
                qi++;
                burst_mbar_expect(&bar.q, BR * P * 128);
#pragma unroll
                for (int pn = 0; pn < P; pn++)
                    burst_tma_load(sq + pn * BR * 128, maps.q, &bar.q, 64 * pn, (int)it.h,
                                   (int)it.i0, (int)it.b);
            }
        }
        w = gridDim.x + (int64_t)atomicAdd(&s.sched[0], 1u);
    }
    __threadfence(); /* this block's last take of the counter before its count as done */
    if (atomicAdd(&s.sched[1], 1u) == gridDim.x - 1) {
        __threadfence(); /* every block has taken its last item: the counters back to zero */
        s.sched[0] = 0;
        s.sched[1] = 0;
    }
}

/* Consumer warpgroup wc of item it (its query rows i0 + 64 wc .. + 63), as the file's comment
 * describes: sg is the stage of its first tile (the producer's order), qi the items with keys
 * before this one; rng: four per-warp slots of [wb, we) in shared memory for this
 * item's parity (two items in flight never share them). Every consumer warp arrives on
 * bar.qfree once its last S of the item is done and on bar.freed of each stage it has read. */
template <typename T, int D, int BC, int NC>
__device__ __forceinline__ void
burst_wg_fwd_consume(const struct burst_cuda_step &s, unsigned char *sq, unsigned char *skv,
                     struct burst_wg_fwd_bars &bar, int (*rng)[2], int wc,
                     const struct burst_wg_item &it, struct burst_wg_stage &sg, int qi)
{
    constexpr int KBYTES = BC * burst_wg_panels<D>() * 128;
    const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, nt = it.nt;
    const int64_t b = it.b, h = it.h;
    const float sl2 = s.scale * BURST_LOG2E;
    /* this thread's two rows (accumulator layout): r = 16 warp + rq + 8 u of its warpgroup */
    const int rq = lane >> 2, cq = 2 * (lane & 3);
    int kb[2], ke[2], wb, we;
    burst_wg_rows(s, (int64_t)it.i0 + wc * 64 + warp * 16 + rq, rng, wc, kb, ke, &wb, &we);

    float o[D / 2];
#pragma unroll
    for (int n = 0; n < D / 2; n++)
        o[n] = 0.0f;
    float m[2] = {-CUDART_INF_F, -CUDART_INF_F}, l[2] = {0.0f, 0.0f}, alpha[2];
    float sc[BC / 2];
    unsigned p[BC / 16][4]; /* P of the previous tile, as A fragments */
    const uint32_t dq = burst_wg_dlo(sq + wc * 64 * 128, 16);
    const uint32_t dk0 = burst_wg_dlo(skv, 16);
    const uint32_t dv0 = burst_wg_dlo(skv + KBYTES, BC * 128);
    constexpr uint32_t DSTAGE = 2 * KBYTES >> 4; /* one stage, in descriptor units */
    /* From class 128 up (two consumers) the consumers take turns to issue their products
     * (warpgroup 0, 1, 0, ..), so that one warpgroup's softmax runs while the tensor cores work
     * on the other's: each waits for its turn before it issues and passes the turn on after
     * (burst_wg_fwd starts and ends the rounds). */
    constexpr bool PP = NC == 2 && D >= 128;
    auto turn = [&]() {
        if constexpr (PP)
            burst_named_sync(WG_BAR_TURN + wc, 256);
    };
    auto pass = [&]() {
        if constexpr (PP)
            burst_named_arrive(WG_BAR_TURN + (wc + 1) % NC, 256);
    };
    /* this warp is done with Q (after the item's last S) */
    auto qdone = [&]() {
        if (lane == 0)
            burst_mbar_arrive(&bar.qfree);
    };
    burst_mbar_wait(&bar.q, qi & 1);
    burst_mbar_wait(&bar.k[sg.st], sg.ph);
    turn();
    burst_wg_fence();
    burst_wg_abt<T, D, BC, 64 * NC>(sc, dq, dk0 + sg.st * DSTAGE);
    pass();
    burst_wg_wait<0>();
    if (nt == 1)
        qdone();
    burst_wg_pin<BC / 2>(sc);
    burst_wg_softmax_at<BC, 0, BURST_MAX_LAG>(sc, (int)it.jfirst, wb, we, kb, ke, cq, sl2, s, m, l,
                                              alpha);
    burst_wg_pack<T, BC>(p, sc);
    struct burst_wg_stage prev = sg; /* stage of the previous tile */
    sg.next();
    for (int j = 1; j < nt; j++, sg.next()) {
        burst_mbar_wait(&bar.k[sg.st], sg.ph);
        burst_mbar_wait(&bar.v[prev.st], prev.ph);
        turn();
        burst_wg_fence();
        burst_wg_abt<T, D, BC, 64 * NC>(sc, dq, dk0 + sg.st * DSTAGE);
        burst_wg_pv<T, D, BC>(o, p, dv0 + prev.st * DSTAGE);
        pass();
        burst_wg_wait<1>(); /* S_j done; P_{j-1} V_{j-1} may still run */
        if (j == nt - 1)
            qdone();
        burst_wg_pin<BC / 2>(sc);
        burst_wg_softmax_at<BC, 0, BURST_MAX_LAG>(sc, (int)(it.jfirst + (int64_t)j * BC), wb, we,
                                                  kb, ke, cq, sl2, s, m, l, alpha);
        burst_wg_wait<0>();
        if (lane == 0) /* this warp is done with the stage of tile j - 1 */
            burst_mbar_arrive(&bar.freed[prev.st]);
        burst_wg_pin<D / 2>(o);
        if (burst_any_moved<2>(alpha))
#pragma unroll
            for (int n = 0; n < D / 2; n++)
                o[n] *= alpha[(n >> 1) & 1];
        burst_wg_pack<T, BC>(p, sc);
        prev = sg;
    }
    burst_mbar_wait(&bar.v[prev.st], prev.ph);
    turn();
    burst_wg_fence();
    burst_wg_pv<T, D, BC>(o, p, dv0 + prev.st * DSTAGE);
    pass();
    burst_wg_wait<0>();
    if (lane == 0)
        burst_mbar_arrive(&bar.freed[prev.st]);
    burst_wg_pin<D / 2>(o);

#pragma unroll
    for (int u = 0; u < 2; u++) {
        l[u] += __shfl_xor_sync(0xffffffffu, l[u], 1);
        l[u] += __shfl_xor_sync(0xffffffffu, l[u], 2);
        const int64_t i = (int64_t)it.i0 + wc * 64 + warp * 16 + rq + 8 * u;
        if (i < s.nq)
            burst_merge_row<D>(s, b, h, i, m[u], l[u], o, u, cq, lane);
    }
}

/* A block of the forward is persistent: it runs items of the step (burst_wg_item_at) as its
 * producer takes them from the step's counter (burst_wg_fwd_produce), loading the next item's
 * first tiles and Q while the consumers finish the one before and write its rows. */
template <typename T, int D, int BC, int NC>
__global__ void __launch_bounds__(128 * (NC + 1), 1)
    burst_wg_fwd(const __grid_constant__ struct burst_cuda_step s,
                 const __grid_constant__ struct burst_wg_maps maps)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BR = 64 * NC;
    /* registers per thread: a block is launched with LREGS each (65536 over its threads,
     * rounded down to a multiple of 8); the producer keeps PREGS and the consumers share the
     * rest, CREGS each (a multiple of 8). Three consumers get 160 whether the producer keeps 24
     * or 32, and 32 spills less of its item code (152 would serialise their wgmma at class 64).
     * Two consumers get 240 with 24, which classes 96 and 128 use; at 192 and 256 the producer
     * keeps 40, spilling less, for 232 each. */
    constexpr int PREGS = NC == 3 ? 32 : D <= 128 ? 24 : 40;
    constexpr int LREGS = 65536 / (128 * (NC + 1)) / 8 * 8;
    constexpr int CREGS = (LREGS * (NC + 1) - PREGS) / NC / 8 * 8;
    static_assert(PREGS + NC * CREGS <= (NC + 1) * LREGS, "the reallocation fits the launch's");
    constexpr int QBYTES = BR * burst_wg_panels<D>() * 128;
    constexpr bool PP = NC == 2 && D >= 128; /* as burst_wg_fwd_consume */
    extern __shared__ __align__(1024) unsigned char smraw[];
    __shared__ int s_rng[2][NC][4][2]; /* item parity, consumer, warp: [wb, we) */
    __shared__ struct burst_wg_fwd_bars bar;
    __shared__ int64_t s_item[2]; /* the item indices the producer publishes */
    unsigned char *sq = smraw + ((1024u - (burst_smem_addr(smraw) & 1023u)) & 1023u);
    unsigned char *skv = sq + QBYTES; /* stage st: K at st * 2 KBYTES, V KBYTES after it */
    const int wg = burst_wg_index();
    const int64_t tiles = (s.nq + BR - 1) / BR, total = s.batch * s.hq * tiles;
    if (threadIdx.x == 0) {
        burst_mbar_init(&bar.q, 1);
        burst_mbar_init(&bar.qfree, 4 * NC); /* one arrival per consumer warp */
        for (int st = 0; st < WG_NS; st++) {
            burst_mbar_init(&bar.k[st], 1);
            burst_mbar_init(&bar.v[st], 1);
            burst_mbar_init(&bar.freed[st], 4 * NC);
        }
        for (int k = 0; k < 2; k++) {
            burst_mbar_init(&bar.item[k], 1);
            burst_mbar_init(&bar.taken[k], 4 * NC);
        }
        burst_mbar_init_fence();
    }
    __syncthreads();

    if (wg == 0) { /* the producer: one thread issues every load */
        burst_regs_dec<PREGS>();
        if (threadIdx.x == 0)
            burst_wg_fwd_produce<D, BC, NC>(s, maps, sq, skv, bar, s_item, tiles, total);
        return;
    }
    burst_regs_inc<CREGS>();
    const int wc = wg - 1;
    if (PP && wc == NC - 1) /* warpgroup 0 takes the first turn */
        burst_named_arrive(WG_BAR_TURN, 256);
    struct burst_wg_stage sg = {0, 0};
    int qi = 0;
    for (int k = 0;; k++) {
        burst_mbar_wait(&bar.item[k & 1], (k >> 1) & 1);
        const int64_t w = s_item[k & 1];
        __syncwarp();
        if ((threadIdx.x & 31) == 0) /* this warp has read the index */
            burst_mbar_arrive(&bar.taken[k & 1]);
        if (w >= total)
            break;
        const struct burst_wg_item it = burst_wg_item_at<BC, BR>(s, tiles, w);
        if (it.nt == 0) { /* no key for any row of the item: its rows by the consumer threads */
            burst_final_empty(s, it.b, it.h, it.i0, min((int64_t)it.i0 + BR, s.nq),
                              threadIdx.x - 128, 128 * NC);
            continue;
        }
        burst_wg_fwd_consume<T, D, BC, NC>(s, sq, skv, bar, s_rng[qi & 1][wc], wc, it, sg, qi);
        qi++;
    }
    if (PP && wc == 0) /* the last turn passed to warpgroup 0, so no barrier is left pending */
        burst_named_sync(WG_BAR_TURN, 256);
#endif
}

/* ---- dispatch ---------------------------------------------------------------------------------- */

template <typename T, int D>
static int burst_wg_fwd_run(const struct burst_cuda_step *s, int num_sms)
{
    constexpr int BC = BURST_CUDA_WG_FWD_BC(D), NC = BURST_CUDA_WG_FWD_WGS(D);
    if (!s->tma)
        return BURST_CUDA_NO_TMA;
    struct burst_wg_maps maps;
    int e = burst_tma_map_view(&maps.q, &s->q, 64 * NC);
    if (e == cudaSuccess)
        e = burst_tma_map_view(&maps.k, &s->k, BC);
    if (e == cudaSuccess)
        e = burst_tma_map_view(&maps.v, &s->v, BC);
    if (e != cudaSuccess)
        return e;
    const int64_t items = s->batch * s->hq * ((s->nq + 64 * NC - 1) / (64 * NC));
    const int64_t blocks = items < num_sms ? items : num_sms; /* one per multiprocessor */
    burst_wg_fwd<T, D, BC, NC>
        <<<(unsigned)blocks, 128 * (NC + 1), burst_wg_fwd_smem<D, BC, NC>(), cudaStreamPerThread>>>(
            *s, maps);
    return cudaGetLastError();
}

template <typename T> static int burst_wg_fwd_dims(const struct burst_cuda_step *s, int num_sms)
{
    return burst_by_class(
        s->d, [&](auto c) { return burst_wg_fwd_run<T, decltype(c)::value>(s, num_sms); });
}

extern "C" int burst_cuda_launch_fwd_sm90(const struct burst_cuda_step *s, int num_sms)
{
    return s->q.dtype == BURST_CUDA_F16 ? burst_wg_fwd_dims<__half>(s, num_sms)
                                        : burst_wg_fwd_dims<__nv_bfloat16>(s, num_sms);
}

template <typename T, int D> static cudaError_t burst_wg_attr1()
{
    constexpr int BC = BURST_CUDA_WG_FWD_BC(D), NC = BURST_CUDA_WG_FWD_WGS(D);
    return cudaFuncSetAttribute(burst_wg_fwd<T, D, BC, NC>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)burst_wg_fwd_smem<D, BC, NC>());
}

template <typename T> static cudaError_t burst_wg_attr()
{
    return burst_each_class([](auto c) { return burst_wg_attr1<T, decltype(c)::value>(); });
}

extern "C" int burst_cuda_sm90_bwd_init(void);

extern "C" int burst_cuda_sm90_init(void)
{
    cudaError_t e = burst_wg_attr<__half>();
    if (e == cudaSuccess)
        e = burst_wg_attr<__nv_bfloat16>();
    if (e == cudaSuccess)
        e = (cudaError_t)burst_cuda_sm90_bwd_init();
    return e;
}

extern "C" size_t burst_cuda_sm90_smem(int d)
{
    return burst_by_class(d, [](auto c) {
        constexpr int D = decltype(c)::value;
        return burst_wg_fwd_smem<D, BURST_CUDA_WG_FWD_BC(D), BURST_CUDA_WG_FWD_WGS(D)>();
    });
}
