/*
 * cuda/burst_cuda_fwd_fp8.cu - the fp8 forward step on Hopper's warpgroup tensor cores (sm_90a
 * only, like burst_cuda_fwd_sm90.cu): S = Q8 K8^T and O += P8 V8 as wgmma m64nNk32 products of
 * e4m3 operands with fp32 accumulators, on the quantized operands of runtime/fp8.h (their
 * layouts, scales and the column order of V^T are described there).
 *
 * The kernel has the shape of the 16-bit Hopper forward (burst_cuda_fwd_sm90.cu, whose comment
 * describes it): persistent blocks taking items of BR query rows from a counter, a producer
 * warpgroup moving Q, K and V^T tiles with the tensor memory accelerator into NS stages, BR / 64
 * consumer warpgroups of 64 rows (three at class 64, two above: BURST_CUDA_F8_BR), and per key
 * tile the next S issued before the softmax of this one. What differs:
 *   - tiles are bytes: a [rows][D] e4m3 tile is W / 128 panels of 128-byte rows, W = max(D,
 *     128) (the 16-bit layout of half the width; at class 64 one panel whose second half is
 *     zeros, never read), and each k32 slice of a product is 32 bytes of a row, so S takes D / 32
 *     instructions;
 *   - V arrives transposed, a [D][128 keys] panel tile read K-major (e4m3 products take no
 *     transposed operand), and P goes into P V from the registers of S with no exchange: the
 *     keys of each group of 32 are stored in the order of the accumulator's columns;
 *   - key tiles are 128 keys, one K scale each: the softmax's factor is tau log2(e) s_q s_k per
 *     tile (s_q of the warpgroup's 64 rows), so the scales cost nothing per element, except
 *     under soft-capping, whose scores are scaled first; at class 256 S, the softmax and P V
 *     run over each half of a tile in turn (burst_f8_hb);
 *   - the consumers issue their products as soon as each is ready, with no turns;
 *   - the softmax carries its maximum 8 lower, so that P <= 256 (runtime/fp8.h), packed to
 *     e4m3 for P V, and O is multiplied by s_v before the merge.
 * Head-dim classes 64 (d <= 64), 128 (d <= 128) and 256 (d <= 256): Q and K rows of dp bytes
 * are read as rows of the class's width, the tensor maps filling the columns past dp (and the
 * V^T rows past d) with zeros.
 */
#include <cuda_fp8.h>
#include <limits.h>

#include "burst_cuda_tma.cuh"
#include "burst_cuda_wg_fwd.cuh"

#define F8_BC BURST_CUDA_F8_BC /* keys per tile: one K scale (BURST_FP8_KEYS) */
#define F8_QROWS 64            /* BURST_FP8_QROWS */
#define F8_NCMAX 3             /* the most consumer warpgroups of any class */

/* Query rows per item of class D, and its consumer warpgroups of 64 rows. */
template <int D> __host__ __device__ constexpr int burst_f8_br()
{
    return BURST_CUDA_F8_BR(D);
}
template <int D> __host__ __device__ constexpr int burst_f8_nc()
{
    return burst_f8_br<D>() / 64;
}

/* Bytes per Q and K row in shared memory: the class's width, at least one 128-byte panel (the
 * class 64 rows are a panel's first half, the tensor maps filling the rest with zeros, which
 * the products never read). */
template <int D> __host__ __device__ constexpr int burst_f8_w()
{
    return D < 128 ? 128 : D;
}

/* Stages (BURST_CUDA_F8_STAGES): four at class 64, three at 128 and 256 (96, 96 and 192 KiB, Q
 * apart: 225 KiB in all at 256, within the 227 KiB a block may have). */
template <int D> __host__ __device__ constexpr int burst_f8_ns()
{
    return BURST_CUDA_F8_STAGES(D);
}

/* One stage: a K tile [128][W] and a V^T tile [D][128]. */
template <int D> __host__ __device__ constexpr int burst_f8_kbytes()
{
    return F8_BC * burst_f8_w<D>();
}
template <int D> __host__ __device__ constexpr int burst_f8_stage_bytes()
{
    return burst_f8_kbytes<D>() + D * F8_BC;
}

template <int D> constexpr size_t burst_f8_smem()
{
    /* Q, NS stages, and 1 KiB to align on 1024 bytes */
    return (size_t)burst_f8_br<D>() * burst_f8_w<D>() +
           (size_t)burst_f8_ns<D>() * burst_f8_stage_bytes<D>() + 1024;
}
/* the barriers hold four stages; dynamic and static shared memory within a block's 227 KiB */
static_assert(burst_f8_ns<64>() <= 4 && burst_f8_ns<128>() <= 4 && burst_f8_ns<256>() <= 4,
              "burst_f8_bars has four stages");
static_assert(burst_f8_smem<256>() + 512 <= 232448 && burst_f8_smem<128>() + 512 <= 232448 &&
                  burst_f8_smem<64>() + 512 <= 232448,
              "a block's shared memory");

/* ---- e4m3 products --------------------------------------------------------------------------- */

template <int N>
__device__ __forceinline__ void burst_f8_ss(float *d, uint64_t da, uint64_t db, int acc);
template <int N>
__device__ __forceinline__ void burst_f8_rs(float *d, const unsigned *a, uint64_t db);

/* acc = A B^T (+ acc where acc != 0), A and B both from shared memory, N = 64 or 128 keys:
 * REGS / ACCS its accumulators, IA, IB, IP the operand numbers of the descriptors and of acc. */
#define BURST_F8_SS(NN, REGS, ACCS, IA, IB, IP)                                                    \
    template <>                                                                                    \
    __device__ __forceinline__ void burst_f8_ss<NN>(float *d, uint64_t da, uint64_t db, int acc)   \
    {                                                                                              \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IP ", 0;\n"                              \
                     "wgmma.mma_async.sync.aligned.m64n" #NN "k32.f32.e4m3.e4m3 " REGS ", %" IA    \
                     ", %" IB ", p, 1, 1;\n}\n"                                                    \
                     : ACCS(d)                                                                     \
                     : "l"(da), "l"(db), "r"(acc));                                                \
    }
BURST_F8_SS(64, BURST_WG_R32, BURST_WG_A32, "32", "33", "34")
BURST_F8_SS(128, BURST_WG_R64, BURST_WG_A64, "64", "65", "66")

/* acc += A B with A (P) in registers, N = the head-dim class: REGS / ACCS its accumulators, A0..A3
 * and IB the operand numbers of A's four registers and of B's descriptor. */
#define BURST_F8_RS(NN, REGS, ACCS, A0, A1, A2, A3, IB)                                            \
    template <>                                                                                    \
    __device__ __forceinline__ void burst_f8_rs<NN>(float *d, const unsigned *a, uint64_t db)      \
    {                                                                                              \
        asm volatile("wgmma.mma_async.sync.aligned.m64n" #NN "k32.f32.e4m3.e4m3 " REGS ", {%" A0   \
                     ", %" A1 ", %" A2 ", %" A3 "}, %" IB ", 1, 1, 1;\n"                           \
                     : ACCS(d)                                                                     \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));                       \
    }
BURST_F8_RS(64, BURST_WG_R32, BURST_WG_A32, "32", "33", "34", "35", "36")
BURST_F8_RS(128, BURST_WG_R64, BURST_WG_A64, "64", "65", "66", "67", "68")
BURST_F8_RS(256, BURST_WG_R128, BURST_WG_A128, "128", "129", "130", "131", "132")

/* Keys per softmax step of class D: the whole 128-key tile, or at class 256 each half of it, so
 * that S and P (HB / 2 + HB / 8 registers a thread) beside O (D / 2) leave ptxas the registers to
 * keep the products asynchronous (with whole tiles it serialises every wgmma at class 256). */
template <int D> __host__ __device__ constexpr int burst_f8_hb()
{
    return D > 128 ? 64 : F8_BC;
}

/* Issue acc = A B^T (one commit group) over D bytes: A = the warpgroup's 64 rows of the Q tile
 * (128 rows a panel), B = N rows of a K tile from db (panels of 128 rows); slice kk is panel
 * kk / 4, byte 32 (kk % 4). */
template <int D, int N>
__device__ __forceinline__ void burst_f8_abt(float *acc, uint32_t da, uint32_t db)
{
#pragma unroll
    for (int kk = 0; kk < D / 32; kk++) {
        const uint32_t off = ((kk >> 2) * 128 * 128 + (kk & 3) * 32) >> 4;
        burst_f8_ss<N>(acc, burst_wg_dhi(da + off), burst_wg_dhi(db + off), kk > 0);
    }
    burst_wg_commit();
}

/* Issue acc += P V (one commit group) over N keys: P in registers (burst_f8_pack), B = D rows of a
 * V^T tile (one panel of 128 keys, K-major) from key byte db; slice kk is byte 32 kk from there. */
template <int D, int N>
__device__ __forceinline__ void burst_f8_pv(float *acc, unsigned (*p)[4], uint32_t db)
{
#pragma unroll
    for (int kk = 0; kk < N / 32; kk++)
        burst_f8_rs<D>(acc, p[kk], burst_wg_dhi(db + (kk * 32 >> 4)));
    burst_wg_commit();
}

/* Four fp32 values as e4m3 bytes, the first in the lowest (round to nearest even,
 * saturating). */
__device__ __forceinline__ unsigned burst_f8x4(float a, float b, float c, float d)
{
    const unsigned lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
    const unsigned hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
    return lo | hi << 16;
}

/* P (the accumulator layout of burst_cuda_wgmma.cuh) -> A fragments of the k32 products: per 32
 * keys, register 0 holds row g's keys 2t, 2t + 1, 8 + 2t, 9 + 2t (which V^T stores at columns
 * 4t .. 4t + 3), register 1 the same of row g + 8, registers 2 and 3 the keys 16 higher (at
 * columns 16 + 4t ..). */
template <int N> __device__ __forceinline__ void burst_f8_pack(unsigned (*p)[4], const float *sc)
{
#pragma unroll
    for (int kk = 0; kk < N / 32; kk++) {
        const float *x = sc + 16 * kk;
        p[kk][0] = burst_f8x4(x[0], x[1], x[4], x[5]);
        p[kk][1] = burst_f8x4(x[2], x[3], x[6], x[7]);
        p[kk][2] = burst_f8x4(x[8], x[9], x[12], x[13]);
        p[kk][3] = burst_f8x4(x[10], x[11], x[14], x[15]);
    }
}

/* ---- the kernel ------------------------------------------------------------------------------ */

/* The tensor maps of the step's e4m3 Q, K and V^T, and where the scales are. */
struct burst_f8_maps {
    struct burst_tma_map q, k, vt;
    const float *qs, *ks, *vs;
    int qblocks, kblocks;
};

struct burst_f8_bars {
    uint64_t q, qfree, k[4], v[4], freed[4], item[2], taken[2];
};

template <int D> struct burst_f8_stage {
    int st, ph;
    __device__ __forceinline__ void next()
    {
        if (++st == burst_f8_ns<D>()) {
            st = 0;
            ph ^= 1;
        }
    }
};

/* The producer thread (as burst_wg_fwd_produce): items from the step's counter, each item's
 * first K / V^T tile, its Q once the previous item's last S has read Q, then its other tiles. */
template <int D>
__device__ __forceinline__ void
burst_f8_produce(const struct burst_cuda_step &s, const struct burst_f8_maps &maps,
                 unsigned char *sq, unsigned char *skv, struct burst_f8_bars &bar, int64_t *slot,
                 int64_t tiles, int64_t total)
{
    constexpr int P = burst_f8_w<D>() / 128, KBYTES = burst_f8_kbytes<D>(), BR = burst_f8_br<D>();
    burst_tma_prefetch_map(&maps.q.map);
    burst_tma_prefetch_map(&maps.k.map);
    burst_tma_prefetch_map(&maps.vt.map);
    struct burst_f8_stage<D> sg = {
        0, 0
    };
    int64_t c = 0;
    int qi = 0;
    int64_t w = blockIdx.x;
    for (int k = 0;; k++) {
        if (k >= 2)
            burst_mbar_wait(&bar.taken[k & 1], ((k >> 1) - 1) & 1);
        slot[k & 1] = w;
        burst_mbar_arrive(&bar.item[k & 1]);
        if (w >= total)
            break;
        const struct burst_wg_item it = burst_wg_item_at<F8_BC, BR>(s, tiles, w);
        for (int j = 0; j < it.nt; j++, c++, sg.next()) {
            if (c >= burst_f8_ns<D>())
                burst_mbar_wait(&bar.freed[sg.st], sg.ph ^ 1);
            const int r0 = (int)it.jfirst + j * F8_BC;
            unsigned char *kt = skv + sg.st * burst_f8_stage_bytes<D>();
            burst_mbar_expect(&bar.k[sg.st], KBYTES);
#pragma unroll
            for (int pn = 0; pn < P; pn++)
                burst_tma_load(kt + pn * F8_BC * 128, maps.k, &bar.k[sg.st], 128 * pn, (int)it.g,
                               r0, (int)it.b);
            burst_mbar_expect(&bar.v[sg.st], D * F8_BC);
            burst_tma_load(kt + KBYTES, maps.vt, &bar.v[sg.st], r0, (int)it.g, 0, (int)it.b);
            if (j == 0) {
                if (qi > 0)
                    burst_mbar_wait(&bar.qfree, (qi - 1) & 1);
                qi++;
                burst_mbar_expect(&bar.q, BR * burst_f8_w<D>());
#pragma unroll
                for (int pn = 0; pn < P; pn++)
                    burst_tma_load(sq + pn * BR * 128, maps.q, &bar.q, 128 * pn, (int)it.h,
                                   (int)it.i0, (int)it.b);
            }
        }
        w = gridDim.x + (int64_t)atomicAdd(&s.sched[0], 1u);
    }
    __threadfence();
    if (atomicAdd(&s.sched[1], 1u) == gridDim.x - 1) {
        __threadfence();
        s.sched[0] = 0;
        s.sched[1] = 0;
    }
}

/* The softmax factor of N keys of K scale sk for this warpgroup: sl2 (tau log2 e) s_q s_k; under
 * soft-capping the scores are scaled to q.k units first and the factor is sl2 alone. */
template <int N>
__device__ __forceinline__ float burst_f8_factor(const struct burst_cuda_step &s, float *sc,
                                                 float sk, float sq, float sl2)
{
    if (s.cap_in == 0.0f)
        return sl2 * sq * sk;
#pragma unroll
    for (int n = 0; n < N / 2; n++)
        sc[n] *= sq * sk;
    return sl2;
}

/* Consumer warpgroup wc of item it (burst_wg_fwd_consume with e4m3 products and scales). */
template <int D>
__device__ __forceinline__ void
burst_f8_consume(const struct burst_cuda_step &s, const struct burst_f8_maps &maps,
                 unsigned char *sq, unsigned char *skv, struct burst_f8_bars &bar, int (*rng)[2],
                 int wc, const struct burst_wg_item &it, struct burst_f8_stage<D> &sg, int qi)
{
    const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, nt = it.nt;
    const int64_t b = it.b, h = it.h;
    const float sl2 = s.scale * BURST_LOG2E;
    /* the Q scale of the warpgroup's rows (the last block's where they are all past nq) */
    const float sqs = maps.qs[(b * s.hq + h) * maps.qblocks +
                              min((it.i0 + wc * 64) / F8_QROWS, maps.qblocks - 1)];
    const int64_t kbase = (b * s.hkv + it.g) * maps.kblocks;
    /* this thread's two rows (accumulator layout): r = 16 warp + rq + 8 u of its warpgroup */
    const int rq = lane >> 2, cq = 2 * (lane & 3);
    int kb[2], ke[2], wb, we;
    burst_wg_rows(s, (int64_t)it.i0 + wc * 64 + warp * 16 + rq, rng, wc, kb, ke, &wb, &we);

    /* the item's key tiles in steps of HB keys: step u is half u % NH of tile u / NH (its K
     * rows, its V^T keys), the tile's stage freed after its last step's P V */
    constexpr int HB = burst_f8_hb<D>(), NH = F8_BC / HB;
    const int ns = nt * NH;
    float o[D / 2];
#pragma unroll
    for (int n = 0; n < D / 2; n++)
        o[n] = 0.0f;
    float m[2] = {-CUDART_INF_F, -CUDART_INF_F}, l[2] = {0.0f, 0.0f}, alpha[2];
    float sc[HB / 2];
    unsigned p[HB / 32][4];
    const uint32_t dq = burst_wg_dlo(sq + wc * 64 * 128, 16);
    const uint32_t dk0 = burst_wg_dlo(skv, 16);
    const uint32_t dv0 = burst_wg_dlo(skv + burst_f8_kbytes<D>(), 16);
    constexpr uint32_t DSTAGE = burst_f8_stage_bytes<D>() >> 4;
    constexpr uint32_t DKH = HB * 128 >> 4, DVH = HB >> 4; /* a step's K rows, V^T keys */
    auto qdone = [&]() {
        if (lane == 0)
            burst_mbar_arrive(&bar.qfree);
    };
    burst_mbar_wait(&bar.q, qi & 1);
    burst_mbar_wait(&bar.k[sg.st], sg.ph);
    burst_wg_fence();
    burst_f8_abt<D, HB>(sc, dq, dk0 + sg.st * DSTAGE);
    burst_wg_wait<0>();
    if (ns == 1)
        qdone();
    burst_wg_pin<HB / 2>(sc);
    float f = burst_f8_factor<HB>(s, sc, maps.ks[kbase + it.jfirst / F8_BC], sqs, sl2);
    burst_wg_softmax_at<HB, 8, 0>(sc, (int)it.jfirst, wb, we, kb, ke, cq, f, s, m, l, alpha);
    burst_f8_pack<HB>(p, sc);
    struct burst_f8_stage<D> prev = sg;
    int hprev = 0, hc = 1; /* halves of the previous and this step */
    if (hc == NH) {
        hc = 0;
        sg.next();
    }
    for (int u = 1; u < ns; u++) {
        const int j0 = (int)(it.jfirst + (int64_t)u * HB);
        const float sk = maps.ks[kbase + j0 / F8_BC]; /* its latency under the waits */
        if (hc == 0)
            burst_mbar_wait(&bar.k[sg.st], sg.ph);
        burst_mbar_wait(&bar.v[prev.st], prev.ph);
        burst_wg_fence();
        burst_f8_abt<D, HB>(sc, dq, dk0 + sg.st * DSTAGE + hc * DKH);
        burst_f8_pv<D, HB>(o, p, dv0 + prev.st * DSTAGE + hprev * DVH);
        burst_wg_wait<1>();
        if (u == ns - 1)
            qdone();
        burst_wg_pin<HB / 2>(sc);
        f = burst_f8_factor<HB>(s, sc, sk, sqs, sl2);
        burst_wg_softmax_at<HB, 8, 0>(sc, j0, wb, we, kb, ke, cq, f, s, m, l, alpha);
        burst_wg_wait<0>();
        if (hprev == NH - 1 && lane == 0)
            burst_mbar_arrive(&bar.freed[prev.st]);
        burst_wg_pin<D / 2>(o);
        if (burst_any_moved<2>(alpha))
#pragma unroll
            for (int n = 0; n < D / 2; n++)
                o[n] *= alpha[(n >> 1) & 1];
        burst_f8_pack<HB>(p, sc);
        prev = sg;
        hprev = hc;
        if (++hc == NH) {
            hc = 0;
            sg.next();
        }
    }
    burst_mbar_wait(&bar.v[prev.st], prev.ph);
    burst_wg_fence();
    burst_f8_pv<D, HB>(o, p, dv0 + prev.st * DSTAGE + hprev * DVH);
    burst_wg_wait<0>();
    if (lane == 0) /* the item's last step is its last tile's last half */
        burst_mbar_arrive(&bar.freed[prev.st]);
    burst_wg_pin<D / 2>(o);
    const float sv = maps.vs[b * s.hkv + it.g];
#pragma unroll
    for (int n = 0; n < D / 2; n++)
        o[n] *= sv;
#pragma unroll
    for (int u = 0; u < 2; u++) {
        l[u] += __shfl_xor_sync(0xffffffffu, l[u], 1);
        l[u] += __shfl_xor_sync(0xffffffffu, l[u], 2);
        const int64_t i = (int64_t)it.i0 + wc * 64 + warp * 16 + rq + 8 * u;
        if (i < s.nq)
            burst_merge_row<D>(s, b, h, i, m[u], l[u], o, u, cq, lane);
    }
}

template <int D>
__global__ void __launch_bounds__(128 * (burst_f8_nc<D>() + 1), 1)
    burst_f8_fwd(const __grid_constant__ struct burst_cuda_step s,
                 const __grid_constant__ struct burst_f8_maps maps)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int NC = burst_f8_nc<D>(), BR = burst_f8_br<D>();
    /* registers: 65536 over the block's threads at launch (168 with two consumers, 128 with
     * three); the producer keeps 24 (40 at class 256, where it spills less, leaving the
     * consumers 232 for O's 128 and a half tile's S and P; 32 beside three consumers, as in the
     * 16-bit forward) and the consumers take the rest */
    constexpr int PREGS = NC == 3 ? 32 : D <= 128 ? 24 : 40;
    constexpr int LREGS = 65536 / (128 * (NC + 1)) / 8 * 8;
    constexpr int CREGS = (LREGS * (NC + 1) - PREGS) / NC / 8 * 8;
    static_assert(PREGS + NC * CREGS <= (NC + 1) * LREGS, "the reallocation fits the launch's");
    static_assert(NC <= F8_NCMAX, "s_rng holds the consumers");
    extern __shared__ __align__(1024) unsigned char smraw[];
    __shared__ int s_rng[2][F8_NCMAX][4][2];
    __shared__ struct burst_f8_bars bar;
    __shared__ int64_t s_item[2];
    unsigned char *sq = smraw + ((1024u - (burst_smem_addr(smraw) & 1023u)) & 1023u);
    unsigned char *skv = sq + BR * burst_f8_w<D>();
    const int wg = burst_wg_index();
    const int64_t tiles = (s.nq + BR - 1) / BR, total = s.batch * s.hq * tiles;
    if (threadIdx.x == 0) {
        burst_mbar_init(&bar.q, 1);
        burst_mbar_init(&bar.qfree, 4 * NC);
        for (int st = 0; st < burst_f8_ns<D>(); st++) {
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
    if (wg == 0) {
        burst_regs_dec<PREGS>();
        if (threadIdx.x == 0)
            burst_f8_produce<D>(s, maps, sq, skv, bar, s_item, tiles, total);
        return;
    }
    burst_regs_inc<CREGS>();
    const int wc = wg - 1;
    struct burst_f8_stage<D> sg = {
        0, 0
    };
    int qi = 0;
    for (int k = 0;; k++) {
        burst_mbar_wait(&bar.item[k & 1], (k >> 1) & 1);
        const int64_t w = s_item[k & 1];
        __syncwarp();
        if ((threadIdx.x & 31) == 0)
            burst_mbar_arrive(&bar.taken[k & 1]);
        if (w >= total)
            break;
        const struct burst_wg_item it = burst_wg_item_at<F8_BC, BR>(s, tiles, w);
        if (it.nt == 0) {
            burst_final_empty(s, it.b, it.h, it.i0, min((int64_t)it.i0 + BR, s.nq),
                              threadIdx.x - 128, 128 * NC);
            continue;
        }
        burst_f8_consume<D>(s, maps, sq, skv, bar, s_rng[qi & 1][wc], wc, it, sg, qi);
        qi++;
    }
#endif
}

/* ---- dispatch -------------------------------------------------------------------------------- */

/* The tensor map of an e4m3 array of dims[0] contiguous bytes by dims[1..3] (byte strides
 * strides[0..2]), boxes of 128 bytes x box1 rows of dimension `rowdim` (1 or 2), 128-byte
 * swizzle, zero fill past the dims; at: burst_tma_load's (h, row, b) to the map's dimensions. */
static int burst_f8_map(struct burst_tma_map *m, const void *data, const cuuint64_t dims[4],
                        const cuuint64_t strides[3], int rowdim, int box1, const int at[3])
{
    const PFN_cuTensorMapEncodeTiled_v12000 encode = burst_tma_encoder();
    if (!encode)
        return BURST_CUDA_NO_TMA;
    cuuint32_t box[4] = {128, 1, 1, 1};
    const cuuint32_t one[4] = {1, 1, 1, 1};
    box[rowdim] = (cuuint32_t)box1;
    for (int k = 0; k < 3; k++)
        m->at[k] = at[k];
    const CUresult r =
        encode(&m->map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, (void *)data, dims, strides, box, one,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? cudaSuccess : BURST_CUDA_NO_TMA;
}

template <int D> static int burst_f8_run(const struct burst_cuda_step *s, int num_sms)
{
    const struct burst_cuda_f8 &f = s->f8;
    const int64_t B = s->batch, d = s->d, dp = (d + 15) / 16 * 16;
    struct burst_f8_maps maps;
    const int rows_at[3] = {1, 2, 3}; /* Q, K: (head, row, batch) */
    const cuuint64_t qd[4] = {(cuuint64_t)dp, (cuuint64_t)s->hq, (cuuint64_t)s->nq, (cuuint64_t)B};
    const cuuint64_t qs[3] = {(cuuint64_t)dp, (cuuint64_t)(s->hq * dp),
                              (cuuint64_t)(s->nq * s->hq * dp)};
    const cuuint64_t kd[4] = {(cuuint64_t)dp, (cuuint64_t)s->hkv, (cuuint64_t)s->nk, (cuuint64_t)B};
    const cuuint64_t ks[3] = {(cuuint64_t)dp, (cuuint64_t)(s->hkv * dp),
                              (cuuint64_t)(s->nk * s->hkv * dp)};
    /* V^T [B, hkv, d, np]: burst_tma_load(.., key, head, 0, b): keys, d rows, head, batch */
    const int vt_at[3] = {2, 1, 3};
    const cuuint64_t vd[4] = {(cuuint64_t)f.np, (cuuint64_t)d, (cuuint64_t)s->hkv, (cuuint64_t)B};
    const cuuint64_t vs[3] = {(cuuint64_t)f.np, (cuuint64_t)(d * f.np),
                              (cuuint64_t)(s->hkv * d * f.np)};
    constexpr int BR = burst_f8_br<D>();
    int e = burst_f8_map(&maps.q, f.q, qd, qs, 2, BR, rows_at);
    if (e == cudaSuccess)
        e = burst_f8_map(&maps.k, f.k, kd, ks, 2, F8_BC, rows_at);
    if (e == cudaSuccess)
        e = burst_f8_map(&maps.vt, f.vt, vd, vs, 1, D, vt_at);
    if (e != cudaSuccess)
        return e;
    maps.qs = f.qs;
    maps.ks = f.ks;
    maps.vs = f.vs;
    maps.qblocks = (int)((s->nq + F8_QROWS - 1) / F8_QROWS);
    maps.kblocks = (int)((s->nk + F8_BC - 1) / F8_BC);
    const int64_t items = B * s->hq * ((s->nq + BR - 1) / BR);
    const int64_t blocks = items < num_sms ? items : num_sms;
    burst_f8_fwd<D><<<(unsigned)blocks, 128 * (burst_f8_nc<D>() + 1), burst_f8_smem<D>(),
                      cudaStreamPerThread>>>(*s, maps);
    return cudaGetLastError();
}

extern "C" int burst_cuda_launch_fwd_fp8(const struct burst_cuda_step *s, int num_sms)
{
    switch (BURST_CUDA_F8_CLASS(s->d)) {
    case 64: return burst_f8_run<64>(s, num_sms);
    case 128: return burst_f8_run<128>(s, num_sms);
    default: return burst_f8_run<256>(s, num_sms);
    }
}

extern "C" size_t burst_cuda_fp8_smem(void)
{
    const size_t a = burst_f8_smem<64>(), b = burst_f8_smem<128>(), c = burst_f8_smem<256>();
    return a > b ? (a > c ? a : c) : (b > c ? b : c);
}

extern "C" int burst_cuda_fp8_init(void)
{
    cudaError_t e = cudaFuncSetAttribute(
        burst_f8_fwd<64>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)burst_f8_smem<64>());
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(burst_f8_fwd<128>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)burst_f8_smem<128>());
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(burst_f8_fwd<256>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)burst_f8_smem<256>());
    return e;
}
