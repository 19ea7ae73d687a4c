/*
 * cuda/burst_cuda_bwd.cu - the backward step: a dK/dV kernel (one block per key tile of a kv
 * head, looping over the heads of its group and the query tiles that may see it) followed by a
 * dQ kernel (one block per query tile, looping over key tiles). Each output element has one
 * writer, which adds its sum to the fp32 accumulator: no float atomics, a deterministic backward.
 * For plans that are not deterministic the dK/dV kernel also adds dQ with float atomics (its DQ
 * form: every 16-bit class, fp32 classes 64, 128, 192 and 256) and no dQ kernel runs.
 *
 * Two variants of each kernel, chosen like the forward's:
 *   - tensor cores (sm_80+, one instance per head-dim class as in the forward, written over the
 *     operand traits burst_tc<T, D>): warps of 16 rows (dK/dV: 8 warps over 128 keys, or 4 over
 *     64, BURST_CUDA_MMA_DKDV_KEYS; dQ: 4 warps over 64 queries), TC::BWD_ROWS-row tiles of the
 *     streamed operand in shared memory (cp.async, double buffered), TC::DKDV_SPLIT dK/dV blocks
 *     per key tile, each accumulating D / DKDV_SPLIT columns, S, dP, dV, dK, dQ as mma.sync
 *     products with fp32 accumulators. fp16/bf16 (burst_cuda_mma.cuh): m16n8k16, 64-row tiles
 *     (32 above D = 128), 2 column blocks above D = 128, P and dS rounded to the input dtype as
 *     the A operand of the dV / dK / dQ products (tests/harness.h bounds this). fp32
 *     (burst_cuda_tf32.cuh): 3xTF32 on m16n8k8, BURST_CUDA_TF32_* tiles, dQ, dK, dV summed tile
 *     by tile in fresh accumulators. The dK/dV kernel of 16-bit classes above 128 and fp32
 *     classes above 32 is burst_mma_kv2 instead, where its shared memory fits: one block per 64
 *     keys (8 warps; fp32 above 128: 32 keys, 4 warps) over the whole d, each phase of a step
 *     (S^T and dP^T; dV and dK; dQ) in its own layout of two-dimensional warp tiles, P^T and dS^T
 *     passing through shared memory;
 *   - SIMT fp32 (burst_cuda_simt.cuh) for everything else.
 */
#include "burst_cuda_tf32.cuh"

/* The backward's two score-side products for one warp's 16 rows: s = A1 B1^T and p = A2 B2^T,
 * A1, A2 rows [row0, row0 + 16) of tiles a1, a2 and B1, B2 the NB rows of tiles b1, b2, over the
 * class's D columns; fp32 keeps TC::mma2's small terms apart and adds them at the end. */
template <typename TC, int D, int NB>
__device__ __forceinline__ void burst_tc_scores2(float (&s)[NB / 8][4], float (&p)[NB / 8][4],
                                                 const typename TC::E *a1, const typename TC::E *a2,
                                                 int row0, const typename TC::E *b1,
                                                 const typename TC::E *b2, int lane)
{
    float ss[NB / 8][4], sp[NB / 8][4]; /* small terms */
#pragma unroll
    for (int n = 0; n < NB / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            s[n][e] = p[n][e] = ss[n][e] = sp[n][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        typename TC::A x1, x2;
        TC::lda(x1, a1, row0, kk * 16, lane);
        TC::lda(x2, a2, row0, kk * 16, lane);
#pragma unroll
        for (int n2 = 0; n2 < NB / 16; n2++) {
            typename TC::B y1, y2;
            TC::ldb(y1, b1, n2 * 16, kk * 16, lane);
            TC::ldb(y2, b2, n2 * 16, kk * 16, lane);
            TC::mma2(s[2 * n2], ss[2 * n2], x1, y1, 0);
            TC::mma2(s[2 * n2 + 1], ss[2 * n2 + 1], x1, y1, 1);
            TC::mma2(p[2 * n2], sp[2 * n2], x2, y2, 0);
            TC::mma2(p[2 * n2 + 1], sp[2 * n2 + 1], x2, y2, 1);
        }
    }
    burst_tc_add_small<TC, NB / 8>(s, ss);
    burst_tc_add_small<TC, NB / 8>(p, sp);
}

/* ---- tensor cores: dQ ---------------------------------------------------------------------------- */

template <typename T, int D>
__device__ __forceinline__ void burst_mma_dq_body(const struct burst_cuda_step &s)
{
    using TC = burst_tc<T, D>;
    using E = typename TC::E;
    constexpr int W = TC::W, KR = TC::BWD_ROWS;
    extern __shared__ __align__(16) unsigned char smraw[];
    E *sq = (E *)smraw, *sdo = sq + MMA_BR * W, *sk = sdo + MMA_BR * W, *sv = sk + 2 * KR * W;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t tiles = (s.nq + MMA_BR - 1) / MMA_BR;
    const int64_t t = tiles - 1 - blockIdx.x % tiles;
    const int64_t h = blockIdx.x / tiles % s.hq, b = blockIdx.x / tiles / s.hq;
    const int64_t g = h / s.group, i0 = t * MMA_BR;
    const float sl2 = s.scale * BURST_LOG2E;

    int64_t lo = 0, hi = 0;
    if (threadIdx.x < MMA_BR && i0 + threadIdx.x < s.nq)
        burst_dkeys(s, i0 + threadIdx.x, &lo, &hi);
    int64_t kmin, kmax;
    burst_block_range(lo, hi, &kmin, &kmax);
    if (kmin >= kmax)
        return;

    const int rq = lane >> 2, cq = 2 * (lane & 3);
    int64_t kb[2], ke[2];
    float l2[2], dl[2];
#pragma unroll
    for (int u = 0; u < 2; u++) {
        const struct burst_brow r = burst_brow_at(s, b, h, i0 + warp * 16 + rq + 8 * u);
        kb[u] = r.kb, ke[u] = r.ke, l2[u] = r.l2, dl[u] = r.dl;
    }
    /* the warp's rows: union [ub, ue) of their key ranges, intersection [wb, we) (local
     * indices: the backend sends nk < 2^31 only) */
    int ub = ke[0] > kb[0] ? (int)kb[0] : INT_MAX, ue = ke[0] > kb[0] ? (int)ke[0] : 0;
    if (ke[1] > kb[1]) {
        ub = ub < (int)kb[1] ? ub : (int)kb[1];
        ue = ue > (int)ke[1] ? ue : (int)ke[1];
    }
    int wb = (int)(kb[0] > kb[1] ? kb[0] : kb[1]), we = (int)(ke[0] < ke[1] ? ke[0] : ke[1]);
    for (int m = 1; m < 32; m <<= 1) {
        ub = min(ub, __shfl_xor_sync(0xffffffffu, ub, m));
        ue = max(ue, __shfl_xor_sync(0xffffffffu, ue, m));
        wb = max(wb, __shfl_xor_sync(0xffffffffu, wb, m));
        we = min(we, __shfl_xor_sync(0xffffffffu, we, m));
    }

    const int64_t jfirst = kmin / KR * KR;
    burst_tc_load<TC, D, MMA_BR>(sq, s.q, b, i0, s.nq, h);
    burst_tc_load<TC, D, MMA_BR>(sdo, s.dout, b, i0, s.nq, h);
    burst_tc_load<TC, D, KR>(sk, s.k, b, jfirst, s.nk, g);
    burst_tc_load<TC, D, KR>(sv, s.v, b, jfirst, s.nk, g);
    burst_cp_commit();

    float dq[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++)
        dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;

    int stage = 0;
    for (int64_t j0 = jfirst; j0 < kmax; j0 += KR, stage ^= 1) {
        if (j0 + KR < kmax) {
            burst_tc_load<TC, D, KR>(sk + (stage ^ 1) * KR * W, s.k, b, j0 + KR, s.nk, g);
            burst_tc_load<TC, D, KR>(sv + (stage ^ 1) * KR * W, s.v, b, j0 + KR, s.nk, g);
            burst_cp_commit();
            burst_cp_wait<1>();
        } else {
            burst_cp_wait<0>();
        }
        __syncthreads();
        const E *kt = sk + stage * KR * W, *vt = sv + stage * KR * W;
        if (ue > j0 && ub < j0 + KR) {
            float sc[KR / 8][4], dp[KR / 8][4];
            burst_tc_scores2<TC, D, KR>(sc, dp, sq, sdo, warp * 16, kt, vt, lane);
            /* dS = P (dP - D), P = 2^(S tau log2e - lse log2e) on allowed pairs; the mask in a
             * branch of its own, where some row of the warp does not see the whole tile */
            if (s.cap_in != 0.0f) /* soft-capping: a branch of its own, the same for the block */
#pragma unroll
                for (int n = 0; n < KR / 8; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        sc[n][e] = burst_dcap_score(s, sc[n][e]);
#pragma unroll
            for (int n = 0; n < KR / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    sc[n][e] = burst_ex2(fmaf(sc[n][e], sl2, -l2[e >> 1]));
            if (!(j0 >= wb && j0 + KR <= we))
#pragma unroll
                for (int n = 0; n < KR / 8; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int j = (int)j0 + n * 8 + cq + (e & 1);
                        if (!(j >= (int)kb[e >> 1] && j < (int)ke[e >> 1]))
                            sc[n][e] = 0.0f;
                    }
            if (s.cap_in != 0.0f) /* times the cap's derivative, found from P */
#pragma unroll
                for (int n = 0; n < KR / 8; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        sc[n][e] *=
                            (dp[n][e] - dl[e >> 1]) * burst_dcap_slope(s, sc[n][e], l2[e >> 1]);
            else
#pragma unroll
                for (int n = 0; n < KR / 8; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        sc[n][e] *= dp[n][e] - dl[e >> 1];
            /* dQ += dS K: dS from the C tiles as A, K across its rows */
            if (TC::FRESH) {
                typename TC::A af[KR / 16];
#pragma unroll
                for (int kk = 0; kk < KR / 16; kk++)
                    TC::cta(af[kk], sc[2 * kk], sc[2 * kk + 1]);
                burst_tc_acc_fresh<TC, KR / 16, D / 16>(dq, af, kt, 0, lane);
            } else {
#pragma unroll
                for (int kk = 0; kk < KR / 16; kk++) {
                    typename TC::A af;
                    TC::cta(af, sc[2 * kk], sc[2 * kk + 1]);
#pragma unroll
                    for (int n2 = 0; n2 < D / 16; n2++) {
                        typename TC::B bf;
                        TC::ldbt(bf, kt, kk * 16, n2 * 16, lane);
                        TC::mma(dq[2 * n2], af, bf, 0);
                        TC::mma(dq[2 * n2 + 1], af, bf, 1);
                    }
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int u = 0; u < 2; u++) {
        const int64_t i = i0 + warp * 16 + rq + 8 * u;
        if (i >= s.nq)
            continue;
        float *row = s.dq + ((b * s.nq + i) * s.hq + h) * s.d;
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            if (n * 8 >= s.d) /* the class's columns past d */
                break;
            float2 *p2 = (float2 *)(row + n * 8 + cq), x = *p2;
            x.x = fmaf(s.scale, dq[n][2 * u], x.x);
            x.y = fmaf(s.scale, dq[n][2 * u + 1], x.y);
            *p2 = x;
        }
    }
}

template <typename T, int D> __host__ __device__ constexpr size_t burst_mma_dq_smem()
{
    using TC = burst_tc<T, D>;
    return (size_t)(2 * MMA_BR + 4 * TC::BWD_ROWS) * TC::W * sizeof(typename TC::E);
}

/* The kernel: the body where its shared memory fits this compilation pass's devices
 * (burst_arch_unfit). */
template <typename T, int D>
__global__ void __launch_bounds__(128, 1) burst_mma_dq(struct burst_cuda_step s)
{
    BURST_UNFIT_KERNEL((burst_mma_dq_smem<T, D>()), (burst_mma_dq_body<T, D>(s)));
}

/* ---- tensor cores: dK and dV ------------------------------------------------------------------ */

/* Per-row scalars of one query tile, in shared memory beside its Q / dO stage. */
struct burst_qrows {
    float l2[MMA_BR], dl[MMA_BR];
    int kb[MMA_BR], ke[MMA_BR];
};

/* The scalars of query row i0 + threadIdx.x (< QR) of head h as read from global memory
 * (burst_qrows_load), then stored to the shared burst_qrows (burst_qrows_put): lse,
 * D = rowsum(dO * O), the allowed keys [kb, ke); a row past nq sees no key (lse -inf: P = 0).
 * burst_mma_dkdv holds them in registers while the step before computes, so that the loads'
 * latency hides behind it; burst_mma_kv2, whose step has no such room, stores them at once. */
struct burst_qrow_ld {
    float lse, dl;
    int kb, ke;
};
template <int QR>
__device__ __forceinline__ struct burst_qrow_ld burst_qrows_load(const struct burst_cuda_step &s,
                                                                 int64_t b, int64_t h, int64_t i0)
{
    struct burst_qrow_ld x = {-CUDART_INF_F, 0.0f, 0, 0};
    const int64_t i = i0 + threadIdx.x;
    if (threadIdx.x < QR && i < s.nq) {
        int64_t kb, ke;
        burst_dkeys(s, i, &kb, &ke);
        x.kb = (int)kb;
        x.ke = (int)ke;
        x.lse = s.lse[(b * s.hq + h) * s.nq + i];
        x.dl = s.delta[(b * s.hq + h) * s.nq + i];
    }
    return x;
}
/* ... and into r, one row per thread below QR, lse in log2 units (as burst_brow_at) */
template <int QR>
__device__ __forceinline__ void burst_qrows_put(struct burst_qrows *r,
                                                const struct burst_qrow_ld &x)
{
    if (threadIdx.x >= QR)
        return;
    r->l2[threadIdx.x] = burst_lse_l2(x.lse);
    r->dl[threadIdx.x] = x.dl;
    r->kb[threadIdx.x] = x.kb;
    r->ke[threadIdx.x] = x.ke;
}

/* One thread's dK, dV of key row j, columns col and col + 1 (< d), into the fp32 accumulators
 * (dK scaled by tau) or, where s.dk_out is set, the final outputs (burst_final_kv_pair). */
__device__ __forceinline__ void burst_kv_out_pair(const struct burst_cuda_step &s, int64_t b,
                                                  int64_t j, int64_t g, int col, float dk0,
                                                  float dk1, float dv0, float dv1)
{
    if (s.dk_out.data) {
        burst_final_kv_pair(s, b, j, g, col, dk0, dk1, dv0, dv1);
        return;
    }
    const int64_t off = ((b * s.nk + j) * s.hkv + g) * s.d + col;
    if (s.dk) {
        float2 *p2 = (float2 *)(s.dk + off), x = *p2;
        x.x = fmaf(s.scale, dk0, x.x);
        x.y = fmaf(s.scale, dk1, x.y);
        *p2 = x;
    }
    if (s.dv) {
        float2 *p2 = (float2 *)(s.dv + off), x = *p2;
        x.x += dv0;
        x.y += dv1;
        *p2 = x;
    }
}

/* The steps of a dK/dV block: ntq query tiles of QR rows from ifirst per head of the group, total
 * = ntq * group steps (head hh, tile r), r fastest; ntq * group < 2^31 (Q's nq x hq rows fit
 * device memory). Step r visits tile burst_dtile_at(r, rot, ntq). */
struct burst_kv_steps {
    int64_t ifirst;
    int ntq, total, rot;
    /* the first query row of step tile r */
    __device__ __forceinline__ int64_t row0(int r, int qr) const
    {
        return ifirst + (int64_t)burst_dtile_at(r, rot, ntq) * qr;
    }
};

/* The steps of the block of keys [j0, j0 + KB) of K/V head g (every thread of the block calls
 * it): false where no query sees those keys, after their final outputs are written (by the block
 * that `writes`). */
template <int KB, int QR>
__device__ __forceinline__ bool burst_kv_steps_of(const struct burst_cuda_step &s, int64_t b,
                                                  int64_t g, int64_t j0, bool writes,
                                                  struct burst_kv_steps *ks)
{
    int64_t lo = 0, hi = 0;
    if (threadIdx.x < KB && j0 + threadIdx.x < s.nk)
        burst_dqueries(s, j0 + threadIdx.x, &lo, &hi);
    int64_t imin, imax;
    burst_block_range(lo, hi, &imin, &imax);
    if (imin >= imax) {
        if (writes)
            burst_final_kv_empty(s, b, g, j0, min(j0 + (int64_t)KB, s.nk));
        return false;
    }
    ks->ifirst = imin / QR * QR;
    ks->ntq = (int)((imax - ks->ifirst + QR - 1) / QR);
    ks->total = ks->ntq * (int)s.group;
    ks->rot = burst_dtile_rot(j0, ks->ifirst, QR, ks->ntq);
    return true;
}

/* Issue the cp.async loads of query tile r of head hh of the group into stage st of the Q and dO
 * tiles (of traits TC, class D, by the block's NT threads) and the loads of its row scalars,
 * returned for burst_qrows_put once the stage's previous row scalars are read. */
template <typename TC, int D, int QR, int NT>
__device__ __forceinline__ struct burst_qrow_ld
burst_kv_issue(typename TC::E *sq, typename TC::E *sdo, const struct burst_cuda_step &s, int64_t b,
               int64_t g, const struct burst_kv_steps &ks, int hh, int r, int st)
{
    const int64_t h = g * s.group + hh, i0 = ks.row0(r, QR);
    burst_tc_load<TC, D, QR, NT>(sq + st * QR * TC::W, s.q, b, i0, s.nq, h);
    burst_tc_load<TC, D, QR, NT>(sdo + st * QR * TC::W, s.dout, b, i0, s.nq, h);
    burst_cp_commit();
    return burst_qrows_load<QR>(s, b, h, i0);
}

/* Elements of a [KB keys][QR queries] tile laid out as a tile of class QR (16-bit: swizzled;
 * fp32: padded rows): dS^T (the DQ form of burst_mma_dkdv; burst_mma_kv2) and P^T
 * (burst_mma_kv2) */
template <typename T, int KB, int QR> __host__ __device__ constexpr int burst_mma_ds_elems()
{
    return KB * burst_tc<T, QR>::W;
}

/* dQ += tau dS K for query tile i0 of head h, from the block's dS^T tile sds and K tile sk of KB
 * keys (the DQ forms of the 16-bit burst_mma_dkdv and of burst_mma_kv2 where K2::DQ_OK): of the
 * NW warps (KB / 16 in burst_mma_dkdv), warp w takes query rows 16 (w % RW) (RW = QR / 16 warps
 * per column group) and the columns [c0 + cg DW, + DW) of its column group cg = w / RW, in
 * 32-column chunks of 16 accumulators (16 columns where DW is not a multiple of 32), each added
 * to s.dq by float atomics straight from them (burst_dq_red). A = dS, read from the [key][query]
 * tile by ldact (ldmatrix.trans for 16-bit operands); B = K across its rows. */
template <typename TC, int D, int QR, int DH, int KB, int NW = KB / 16>
__device__ __forceinline__ void burst_mma_dq_add(const struct burst_cuda_step &s,
                                                 const typename TC::E *sds,
                                                 const typename TC::E *sk, int64_t b, int64_t h,
                                                 int64_t i0, int c0, int warp, int lane)
{
    constexpr int RW = QR / 16, DW = DH / (NW / RW);
    static_assert(NW % RW == 0, "whole column groups");
    static_assert(DW % 16 == 0, "whole 16-column B fragments");
    const int m0 = 16 * (warp % RW), cw = c0 + (warp / RW) * DW;
    typename TC::A af[KB / 16];
#pragma unroll
    for (int kk = 0; kk < KB / 16; kk++)
        burst_tc<typename TC::E, QR>::ldact(af[kk], sds, kk * 16, m0, lane);
    const struct burst_dq_rows rows = burst_dq_at(s, b, h, i0 + m0 + (lane >> 2), lane);
    constexpr int CN = DW % 32 == 0 ? 4 : 2; /* n8 tiles of a chunk */
#pragma unroll
    for (int c = 0; c < DW; c += 8 * CN) {
        float q[CN][4];
#pragma unroll
        for (int n = 0; n < CN; n++)
            q[n][0] = q[n][1] = q[n][2] = q[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KB / 16; kk++)
#pragma unroll
            for (int n2 = 0; n2 < CN / 2; n2++) {
                typename TC::B bf;
                TC::ldbt(bf, sk, kk * 16, cw + c + n2 * 16, lane);
                TC::mma(q[2 * n2], af[kk], bf, 0);
                TC::mma(q[2 * n2 + 1], af[kk], bf, 1);
            }
#pragma unroll
        for (int n = 0; n < CN; n++)
            burst_dq_red(s, rows, cw + c + n * 8, q[n]);
    }
}

/* A block of KB / 16 warps (16 keys each) accumulates D / DKDV_SPLIT columns of dK and dV of KB
 * keys (DKDV_SPLIT blocks per key tile, blockIdx.y, each computing S^T and dP^T over the whole d:
 * the accumulators of the widest classes would not fit the registers of one). DQ (16-bit
 * classes, plans that are not deterministic): the block also adds dQ = tau dS K for its columns
 * with float atomics (burst_mma_dq_add, dS^T through shared memory), and no dQ kernel recomputes
 * S and dP. */
template <typename T, int D, bool DQ, int KB>
__device__ __forceinline__ void burst_mma_dkdv_body(const struct burst_cuda_step &s)
{
    using TC = burst_tc<T, D>;
    using E = typename TC::E;
    constexpr int W = TC::W, DH = D / TC::DKDV_SPLIT, QR = TC::BWD_ROWS, NT = KB * 2;
    static_assert(!DQ || !TC::FRESH, "the fused dQ is for 16-bit operands");
    static_assert(QR <= MMA_BR, "burst_qrows holds the rows of a query tile");
    extern __shared__ __align__(16) unsigned char smraw[];
    E *sk = (E *)smraw, *sv = sk + KB * W, *sq = sv + KB * W, *sdo = sq + 2 * QR * W;
    E *sds = sdo + 2 * QR * W; /* DQ: dS^T */
    struct burst_qrows *rows =
        (struct burst_qrows *)(sds + (DQ ? burst_mma_ds_elems<T, KB, QR>() : 0));
    const int c0 = (int)blockIdx.y * DH; /* this block's columns of dK, dV: [c0, c0 + DH) */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t tiles = (s.nk + KB - 1) / KB;
    const int64_t t = blockIdx.x % tiles, g = blockIdx.x / tiles % s.hkv;
    const int64_t b = blockIdx.x / tiles / s.hkv, j0 = t * KB;
    const float sl2 = s.scale * BURST_LOG2E;

    struct burst_kv_steps steps;
    if (!burst_kv_steps_of<KB, QR>(s, b, g, j0, blockIdx.y == 0, &steps))
        return;
    const int ntq = steps.ntq, total = steps.total;
    auto issue = [&](int hh, int r, int st) {
        return burst_kv_issue<TC, D, QR, NT>(sq, sdo, s, b, g, steps, hh, r, st);
    };

    burst_tc_load<TC, D, KB, NT>(sk, s.k, b, j0, s.nk, g);
    burst_tc_load<TC, D, KB, NT>(sv, s.v, b, j0, s.nk, g);
    burst_qrows_put<QR>(&rows[0], issue(0, 0, 0));

    float dk[DH / 8][4], dv[DH / 8][4];
#pragma unroll
    for (int n = 0; n < DH / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            dk[n][e] = dv[n][e] = 0.0f;
    const int rq = lane >> 2, cq = 2 * (lane & 3);
    const int key0 = (int)j0 + warp * 16 + rq; /* this thread's keys: key0, key0 + 8 */

    int hc = 0, rc = 0; /* tile it: query tile rc of head hc of the group */
    for (int it = 0; it < total; it++) {
        const int st = it & 1;
        const int hn = rc + 1 == ntq ? hc + 1 : hc, rn = rc + 1 == ntq ? 0 : rc + 1; /* it + 1 */
        struct burst_qrow_ld next = {};
        if (it + 1 < total) {
            next = issue(hn, rn, st ^ 1);
            burst_cp_wait<1>();
        } else {
            burst_cp_wait<0>();
        }
        __syncthreads();
        const E *qt = sq + st * QR * W, *ot = sdo + st * QR * W;
        const struct burst_qrows *rw = &rows[st];
        float sc[QR / 8][4], dp[QR / 8][4];
        /* S^T = K Q^T and dP^T = V dO^T for the warp's 16 keys x QR queries */
        burst_tc_scores2<TC, D, QR>(sc, dp, sk, sv, warp * 16, qt, ot, lane);
        /* P^T and dS^T; column = query row of the tile. The mask in a branch of its own, where
         * some query of the tile does not see all of the warp's 16 keys */
        int qb = 0, qe = INT_MAX;
#pragma unroll
        for (int q = lane; q < QR; q += 32) {
            qb = max(qb, rw->kb[q]);
            qe = min(qe, rw->ke[q]);
        }
        for (int m = 1; m < 32; m <<= 1) {
            qb = max(qb, __shfl_xor_sync(0xffffffffu, qb, m));
            qe = min(qe, __shfl_xor_sync(0xffffffffu, qe, m));
        }
        if (s.cap_in != 0.0f) /* soft-capping: a branch of its own, the same for the block */
#pragma unroll
            for (int n = 0; n < QR / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    sc[n][e] = burst_dcap_score(s, sc[n][e]);
#pragma unroll
        for (int n = 0; n < QR / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                sc[n][e] = burst_ex2(fmaf(sc[n][e], sl2, -rw->l2[n * 8 + cq + (e & 1)]));
        if (!(key0 - rq >= qb && key0 - rq + 16 <= qe))
#pragma unroll
            for (int n = 0; n < QR / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int qi = n * 8 + cq + (e & 1), key = key0 + 8 * (e >> 1);
                    if (!(key >= rw->kb[qi] && key < rw->ke[qi]))
                        sc[n][e] = 0.0f;
                }
        if (s.cap_in != 0.0f) /* times the cap's derivative, found from P */
#pragma unroll
            for (int n = 0; n < QR / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int qi = n * 8 + cq + (e & 1);
                    dp[n][e] = sc[n][e] * (dp[n][e] - rw->dl[qi]) *
                               burst_dcap_slope(s, sc[n][e], rw->l2[qi]);
                }
        else
#pragma unroll
            for (int n = 0; n < QR / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    dp[n][e] = sc[n][e] * (dp[n][e] - rw->dl[n * 8 + cq + (e & 1)]);
        if constexpr (DQ) /* dS^T -> sds, rounded to T as the A operands are */
#pragma unroll
            for (int n = 0; n < QR / 8; n++)
#pragma unroll
                for (int u = 0; u < 2; u++)
                    *(unsigned *)(sds + burst_swz<QR>(warp * 16 + rq + 8 * u, n * 8 + cq)) =
                        burst_mma<T>::pack(dp[n][2 * u], dp[n][2 * u + 1]);
        /* dV += P^T dO and dK += dS^T Q: A from the C tiles, B across the tiles' rows */
        if (TC::FRESH) {
            typename TC::A af[QR / 16];
#pragma unroll
            for (int kk = 0; kk < QR / 16; kk++)
                TC::cta(af[kk], sc[2 * kk], sc[2 * kk + 1]);
            burst_tc_acc_fresh<TC, QR / 16, DH / 16>(dv, af, ot, c0, lane);
#pragma unroll
            for (int kk = 0; kk < QR / 16; kk++)
                TC::cta(af[kk], dp[2 * kk], dp[2 * kk + 1]);
            burst_tc_acc_fresh<TC, QR / 16, DH / 16>(dk, af, qt, c0, lane);
        } else {
#pragma unroll
            for (int kk = 0; kk < QR / 16; kk++) {
                typename TC::A pa, da;
                TC::cta(pa, sc[2 * kk], sc[2 * kk + 1]);
                TC::cta(da, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
                for (int n2 = 0; n2 < DH / 16; n2++) {
                    typename TC::B bo, bq;
                    TC::ldbt(bo, ot, kk * 16, c0 + n2 * 16, lane);
                    TC::ldbt(bq, qt, kk * 16, c0 + n2 * 16, lane);
                    TC::mma(dv[2 * n2], pa, bo, 0);
                    TC::mma(dv[2 * n2 + 1], pa, bo, 1);
                    TC::mma(dk[2 * n2], da, bq, 0);
                    TC::mma(dk[2 * n2 + 1], da, bq, 1);
                }
            }
        }
        if constexpr (DQ) {
            __syncthreads(); /* every warp's keys of dS^T */
            burst_mma_dq_add<TC, D, QR, DH, KB>(s, sds, sk, b, g * s.group + hc, steps.row0(rc, QR),
                                                c0, warp, lane);
        }
        if (it + 1 < total) /* stage st ^ 1's rows were last read in step it - 1 */
            burst_qrows_put<QR>(&rows[st ^ 1], next);
        __syncthreads();
        hc = hn;
        rc = rn;
    }
#pragma unroll
    for (int u = 0; u < 2; u++) {
        const int64_t j = key0 + 8 * u;
        if (j >= s.nk)
            continue;
#pragma unroll
        for (int n = 0; n < DH / 8; n++) {
            if (c0 + n * 8 >= s.d) /* the class's columns past d are not the caller's */
                break;
            burst_kv_out_pair(s, b, j, g, c0 + n * 8 + cq, dk[n][2 * u], dk[n][2 * u + 1],
                              dv[n][2 * u], dv[n][2 * u + 1]);
        }
    }
}

/* ---- tensor cores: dK and dV in two-dimensional warp tiles --------------------------------- */

/*
 * Tiles of the dK/dV kernel burst_mma_kv2 (fp16 / bf16 above D = 128, fp32 above 32): a block
 * of NW = KB / 8 warps holds KB keys (BURST_CUDA_MMA_KV2_KEYS, BURST_CUDA_TF32_KV2_KEYS) and
 * streams query tiles of QR rows (BURST_CUDA_MMA_KV2_ROWS, BURST_CUDA_TF32_KV2_ROWS). Each phase
 * of a step lays the warps out over its own product:
 *   - S^T = K Q^T and dP^T = V dO^T (KB x QR): SK x SQ warps of MS keys x NS queries;
 *   - dV += P^T dO and dK += dS^T Q (KB x D): VK x VC warps of MV keys x DV columns, P^T and dS^T
 *     read back from shared memory, where the first phase left them (rounded to T for 16-bit
 *     operands, fp32 for fp32);
 *   - dQ += dS K (QR x D, the DQ form): burst_mma_dq_add's layout, where its column groups are
 *     whole 16-column fragments (DQ_OK).
 * So no block recomputes another's scores (burst_mma_dkdv splits the wide classes' columns over
 * blocks, each computing S^T and dP^T whole), and every fragment read from shared memory feeds
 * two or more row or column tiles of its product.
 */
template <typename T, int D> struct burst_kv2 {
    static constexpr bool F32 = std::is_same<T, float>::value;
    static constexpr int KB = F32 ? BURST_CUDA_TF32_KV2_KEYS(D) : BURST_CUDA_MMA_KV2_KEYS;
    static constexpr int NW = KB / 8; /* 8 warps, 4 for fp32's 32-key blocks */
    static constexpr int QR = F32 ? BURST_CUDA_TF32_KV2_ROWS : BURST_CUDA_MMA_KV2_ROWS(D);
    static constexpr int SK = NW / 2, SQ = NW / SK, MS = KB / SK, NS = QR / SQ;
    /* 32-key warp tiles where the columns fall in whole 16-column fragments, else 16 keys */
    static constexpr int VK = D % 64 == 0 ? KB / 32 : KB / 16, VC = NW / VK, MV = KB / VK;
    static constexpr int DV = D / VC;
    static constexpr bool DQ_OK = D / (NW / (QR / 16)) % 16 == 0;
    static_assert(MS % 16 == 0 && NS % 16 == 0 && MV % 16 == 0 && DV % 16 == 0, "whole tiles");
    static_assert(!F32 || DQ_OK == BURST_CUDA_TF32_KV2_DQ(D), "the probe reads the same rule");
};

/* c[m][n] = rows [a0 + 16 m, + 16) of tile a times rows [b0 + 8 n, + 8) of tile b, transposed
 * (C = A B^T over the class's D columns; both [rows][D] tiles of traits TC; fp32 adds
 * TC::mma2's small terms at the end). */
template <typename TC, int D, int MM, int NN>
__device__ __forceinline__ void burst_tc_abt(float (&c)[MM / 16][NN / 8][4],
                                             const typename TC::E *a, int a0,
                                             const typename TC::E *b, int b0, int lane)
{
    float cs[MM / 16][NN / 8][4]; /* small terms (none for 16-bit operands) */
#pragma unroll
    for (int m = 0; m < MM / 16; m++)
#pragma unroll
        for (int n = 0; n < NN / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                c[m][n][e] = cs[m][n][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        typename TC::A x[MM / 16];
#pragma unroll
        for (int m = 0; m < MM / 16; m++)
            TC::lda(x[m], a, a0 + 16 * m, kk * 16, lane);
#pragma unroll
        for (int n2 = 0; n2 < NN / 16; n2++) {
            typename TC::B y;
            TC::ldb(y, b, b0 + 16 * n2, kk * 16, lane);
#pragma unroll
            for (int m = 0; m < MM / 16; m++) {
                TC::mma2(c[m][2 * n2], cs[m][2 * n2], x[m], y, 0);
                TC::mma2(c[m][2 * n2 + 1], cs[m][2 * n2 + 1], x[m], y, 1);
            }
        }
    }
#pragma unroll
    for (int m = 0; m < MM / 16; m++)
        burst_tc_add_small<TC, NN / 8>(c[m], cs[m]);
}

/* acc[m][n] += rows [a0 + 16 m, + 16) of the [keys][queries] tile a (class QR) times columns
 * [c0 + 8 n, + 8) of the [queries][D] tile b (C = A B, k = the query). fp32 (TC::FRESH): the
 * step's sum in fresh accumulators, 16 columns at a time, added to acc in ordinary fp32. */
template <typename T, int D, int QR, int MM, int NN>
__device__ __forceinline__ void burst_tc_ab(float (&acc)[MM / 16][NN / 8][4],
                                            const typename burst_tc<T, D>::E *a, int a0,
                                            const typename burst_tc<T, D>::E *b, int c0, int lane)
{
    using TC = burst_tc<T, D>;
    using TQ = burst_tc<T, QR>;
    if constexpr (TC::FRESH) {
        typename TC::A x[QR / 16][MM / 16];
#pragma unroll
        for (int kk = 0; kk < QR / 16; kk++)
#pragma unroll
            for (int m = 0; m < MM / 16; m++)
                TQ::ldac(x[kk][m], a, a0 + 16 * m, kk * 16, lane);
        burst_tc_acc_fresh_by<TC, QR / 16, NN / 16, MM / 16>(
            [&](int kk, int m) -> const typename TC::A & { return x[kk][m]; },
            [&](int m) -> float(&)[NN / 8][4] { return acc[m]; }, b, c0, lane);
    } else {
#pragma unroll
        for (int kk = 0; kk < QR / 16; kk++) {
            typename TC::A x[MM / 16];
#pragma unroll
            for (int m = 0; m < MM / 16; m++)
                TQ::ldac(x[m], a, a0 + 16 * m, kk * 16, lane);
#pragma unroll
            for (int n2 = 0; n2 < NN / 16; n2++) {
                typename TC::B y;
                TC::ldbt(y, b, kk * 16, c0 + 16 * n2, lane);
#pragma unroll
                for (int m = 0; m < MM / 16; m++) {
                    TC::mma(acc[m][2 * n2], x[m], y, 0);
                    TC::mma(acc[m][2 * n2 + 1], x[m], y, 1);
                }
            }
        }
    }
}

/* The C tiles c (MM keys from k0 x NN queries from q0) into the [KB][QR] tile t of class QR
 * (TQ::st2: each lane's pairs of adjacent queries). */
template <typename TQ, int MM, int NN>
__device__ __forceinline__ void
burst_tc_store_t(typename TQ::E *t, const float (&c)[MM / 16][NN / 8][4], int k0, int q0, int lane)
{
    const int rq = lane >> 2, cq = 2 * (lane & 3);
#pragma unroll
    for (int m = 0; m < MM / 16; m++)
#pragma unroll
        for (int n = 0; n < NN / 8; n++)
#pragma unroll
            for (int u = 0; u < 2; u++)
                TQ::st2(t, k0 + 16 * m + rq + 8 * u, q0 + 8 * n + cq, c[m][n][2 * u],
                        c[m][n][2 * u + 1]);
}

/* P^T and dS^T of one warp's MS keys x NS queries (scores sc, dP^T dp) of the step whose row
 * scalars are rw: P = 2^(S tau log2e - lse log2e) on allowed pairs, else 0 (the mask in a branch
 * of its own, where some query of the warp's does not see all of its keys); dS = P (dP - D),
 * times the cap's derivative where soft-capping. P replaces sc, dS replaces dp. */
template <int MS, int NS>
__device__ __forceinline__ void
burst_kv2_softmax(const struct burst_cuda_step &s, const struct burst_qrows *rw,
                  float (&sc)[MS / 16][NS / 8][4], float (&dp)[MS / 16][NS / 8][4], int key0,
                  int q0, int lane)
{
    const float sl2 = s.scale * BURST_LOG2E;
    const int rq = lane >> 2, cq = 2 * (lane & 3);
    int qb = 0, qe = INT_MAX;
    if (lane < NS) {
        qb = rw->kb[q0 + lane];
        qe = rw->ke[q0 + lane];
    }
    for (int m = 1; m < 32; m <<= 1) {
        qb = max(qb, __shfl_xor_sync(0xffffffffu, qb, m));
        qe = min(qe, __shfl_xor_sync(0xffffffffu, qe, m));
    }
    const bool cap = s.cap_in != 0.0f, whole = key0 >= qb && key0 + MS <= qe;
#pragma unroll
    for (int m = 0; m < MS / 16; m++)
#pragma unroll
        for (int n = 0; n < NS / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int qi = q0 + n * 8 + cq + (e & 1), key = key0 + 16 * m + rq + 8 * (e >> 1);
                float x = sc[m][n][e];
                if (cap) /* soft-capping: a branch of its own, the same for the block */
                    x = burst_dcap_score(s, x);
                float p = burst_ex2(fmaf(x, sl2, -rw->l2[qi]));
                if (!whole && !(key >= rw->kb[qi] && key < rw->ke[qi]))
                    p = 0.0f;
                float ds = p * (dp[m][n][e] - rw->dl[qi]);
                if (cap) /* times the cap's derivative, found from P */
                    ds *= burst_dcap_slope(s, p, rw->l2[qi]);
                sc[m][n][e] = p;
                dp[m][n][e] = ds;
            }
}

/* dK and dV of KB keys of K/V head g (one block per key tile, burst_kv2's tiles): per step, a
 * query tile of QR rows of one head of the group, Q and dO double buffered by cp.async; two
 * barriers per step (after the tile lands, after P^T and dS^T are stored). DQ (plans that are not
 * deterministic): the block also adds dQ = tau dS K with float atomics (burst_mma_dq_add), and no
 * dQ kernel recomputes S and dP. */
template <typename T, int D, bool DQ>
__device__ __forceinline__ void burst_mma_kv2_body(const struct burst_cuda_step &s)
{
    using TC = burst_tc<T, D>;
    using TQ = burst_tc<T, burst_kv2<T, D>::QR>;
    using E = typename TC::E;
    using K2 = burst_kv2<T, D>;
    constexpr int W = TC::W, KB = K2::KB, QR = K2::QR, NT = 32 * K2::NW;
    static_assert(!DQ || K2::DQ_OK, "dQ in whole 16-column fragments");
    static_assert(QR <= MMA_BR, "burst_qrows holds the rows of a query tile");
    extern __shared__ __align__(16) unsigned char smraw[];
    E *sk = (E *)smraw, *sv = sk + KB * W, *sq = sv + KB * W, *sdo = sq + 2 * QR * W;
    E *sp = sdo + 2 * QR * W, *sds = sp + burst_mma_ds_elems<T, KB, QR>(); /* P^T, dS^T */
    struct burst_qrows *rows = (struct burst_qrows *)(sds + burst_mma_ds_elems<T, KB, QR>());
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t tiles = (s.nk + KB - 1) / KB;
    const int64_t t = blockIdx.x % tiles, g = blockIdx.x / tiles % s.hkv;
    const int64_t b = blockIdx.x / tiles / s.hkv, j0 = t * KB;

    struct burst_kv_steps steps;
    if (!burst_kv_steps_of<KB, QR>(s, b, g, j0, true, &steps))
        return;
    const int ntq = steps.ntq, total = steps.total;
    auto issue = [&](int hh, int r, int st) {
        return burst_kv_issue<TC, D, QR, NT>(sq, sdo, s, b, g, steps, hh, r, st);
    };

    burst_tc_load<TC, D, KB, NT>(sk, s.k, b, j0, s.nk, g);
    burst_tc_load<TC, D, KB, NT>(sv, s.v, b, j0, s.nk, g);
    burst_qrows_put<QR>(&rows[0], issue(0, 0, 0));

    /* this warp's tiles: S^T / dP^T keys [ks, + MS) x queries [qs, + NS); dK / dV keys
     * [kv, + MV) x columns [cv, + DV) (block-local) */
    const int ks = (warp % K2::SK) * K2::MS, qs = (warp / K2::SK) * K2::NS;
    const int kv = (warp % K2::VK) * K2::MV, cv = (warp / K2::VK) * K2::DV;
    float dk[K2::MV / 16][K2::DV / 8][4], dv[K2::MV / 16][K2::DV / 8][4];
#pragma unroll
    for (int m = 0; m < K2::MV / 16; m++)
#pragma unroll
        for (int n = 0; n < K2::DV / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                dk[m][n][e] = dv[m][n][e] = 0.0f;

    int hc = 0, rc = 0; /* step it: query tile rc of head hc of the group */
    for (int it = 0; it < total; it++) {
        const int st = it & 1;
        burst_cp_wait<0>();
        __syncthreads(); /* stage st landed; every warp is done with step it - 1 */
        const int hn = rc + 1 == ntq ? hc + 1 : hc, rn = rc + 1 == ntq ? 0 : rc + 1;
        if (it + 1 < total) /* every warp passed the barrier above: step it - 1 is done */
            burst_qrows_put<QR>(&rows[st ^ 1], issue(hn, rn, st ^ 1));
        const E *qt = sq + st * QR * W, *ot = sdo + st * QR * W;
        {
            float sc[K2::MS / 16][K2::NS / 8][4], dp[K2::MS / 16][K2::NS / 8][4];
            burst_tc_abt<TC, D, K2::MS, K2::NS>(sc, sk, ks, qt, qs, lane);
            burst_tc_abt<TC, D, K2::MS, K2::NS>(dp, sv, ks, ot, qs, lane);
            burst_kv2_softmax<K2::MS, K2::NS>(s, &rows[st], sc, dp, (int)j0 + ks, qs, lane);
            burst_tc_store_t<TQ, K2::MS, K2::NS>(sp, sc, ks, qs, lane);
            burst_tc_store_t<TQ, K2::MS, K2::NS>(sds, dp, ks, qs, lane);
        }
        __syncthreads(); /* P^T and dS^T of every warp */
        burst_tc_ab<T, D, QR, K2::MV, K2::DV>(dv, sp, kv, ot, cv, lane);
        burst_tc_ab<T, D, QR, K2::MV, K2::DV>(dk, sds, kv, qt, cv, lane);
        if constexpr (DQ)
            burst_mma_dq_add<TC, D, QR, D, KB, K2::NW>(s, sds, sk, b, g * s.group + hc,
                                                       steps.row0(rc, QR), 0, warp, lane);
        hc = hn;
        rc = rn;
    }
    const int rq = lane >> 2, cq = 2 * (lane & 3);
#pragma unroll
    for (int m = 0; m < K2::MV / 16; m++)
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int64_t j = j0 + kv + 16 * m + rq + 8 * u;
            if (j >= s.nk)
                continue;
#pragma unroll
            for (int n = 0; n < K2::DV / 8; n++) {
                if (cv + n * 8 >= s.d) /* the class's columns past d are not the caller's */
                    break;
                burst_kv_out_pair(s, b, j, g, cv + n * 8 + cq, dk[m][n][2 * u], dk[m][n][2 * u + 1],
                                  dv[m][n][2 * u], dv[m][n][2 * u + 1]);
            }
        }
}

template <typename T, int D> __host__ __device__ constexpr size_t burst_mma_kv2_smem()
{
    using K2 = burst_kv2<T, D>;
    using E = typename burst_tc<T, D>::E;
    return ((size_t)(2 * K2::KB + 4 * K2::QR) * burst_tc<T, D>::W +
            2 * burst_mma_ds_elems<T, K2::KB, K2::QR>()) *
               sizeof(E) +
           2 * sizeof(struct burst_qrows);
}

/* The kernel: the body where its shared memory fits this compilation pass's devices
 * (burst_arch_unfit). */
template <typename T, int D, bool DQ>
__global__ void __launch_bounds__(32 * burst_kv2<T, D>::NW, 1)
    burst_mma_kv2(struct burst_cuda_step s)
{
    BURST_UNFIT_KERNEL((burst_mma_kv2_smem<T, D>()), (burst_mma_kv2_body<T, D, DQ>(s)));
}

template <typename T, int D, bool DQ, int KB>
__host__ __device__ constexpr size_t burst_mma_dkdv_smem()
{
    using TC = burst_tc<T, D>;
    return (size_t)(2 * KB + 4 * TC::BWD_ROWS) * TC::W * sizeof(typename TC::E) +
           (DQ ? burst_mma_ds_elems<T, KB, TC::BWD_ROWS>() * sizeof(T) : 0) +
           2 * sizeof(struct burst_qrows);
}

/* The kernel: the body where its shared memory fits this compilation pass's devices
 * (burst_arch_unfit). */
template <typename T, int D, bool DQ, int KB>
__global__ void __launch_bounds__(KB * 2, 1) burst_mma_dkdv(struct burst_cuda_step s)
{
    BURST_UNFIT_KERNEL((burst_mma_dkdv_smem<T, D, DQ, KB>()),
                       (burst_mma_dkdv_body<T, D, DQ, KB>(s)));
}

/* The dK/dV kernel of class D: burst_mma_kv2 (fp16 / bf16 above 128: BURST_CUDA_MMA_KV2; fp32:
 * BURST_CUDA_TF32_KV2), else burst_mma_dkdv. */
template <typename T, int D> constexpr bool burst_mma_is_kv2()
{
    return burst_tc<T, D>::FRESH ? BURST_CUDA_TF32_KV2(D) : BURST_CUDA_MMA_KV2(D);
}

/* Has class D a dK/dV kernel that adds dQ itself by float atomics (DQ, plans that are not
 * deterministic)? fp16 / bf16: always; fp32: burst_mma_kv2's, where its dQ column groups are
 * whole fragments. */
template <typename T, int D> constexpr bool burst_mma_has_dq()
{
    if constexpr (burst_mma_is_kv2<T, D>())
        return burst_kv2<T, D>::DQ_OK;
    else
        return !burst_tc<T, D>::FRESH;
}

/* Does the large dK/dV kernel of class D (burst_mma_kv2, else burst_mma_dkdv's DQ form) fit a
 * device of `optin` bytes of shared memory per block? */
template <typename T, int D> static bool burst_mma_big_fits(size_t optin)
{
    if constexpr (burst_mma_is_kv2<T, D>())
        return burst_mma_kv2_smem<T, D>() <= optin;
    else if constexpr (burst_mma_has_dq<T, D>())
        return burst_mma_dkdv_smem<T, D, true, BURST_CUDA_MMA_DKDV_KEYS(D, true)>() <= optin;
    else
        return true;
}

/* Set by burst_bwd_mma_attr where the large dK/dV kernel of class D does not fit a device's opt-in
 * shared memory: on 99 KiB devices such as sm_86 / sm_89, 16-bit classes 96 to 192 (class 256
 * does not fit the mma.sync kernels at all); fp32 classes only under limits between those of
 * real devices (BURST_CUDA_MAX_SHARED), as where the fp32 mma.sync kernels fit at all on 99, 163
 * and 227 KiB devices, so does kv2. That class then runs burst_mma_dkdv without dQ and the
 * separate dQ kernel on every device of the process (in a process that also drives a larger
 * device, `burstrun --probe` reports that device's own choice). */
template <typename T, int D> static int burst_mma_big_unfit = 0;

/* The dK/dV kernel with dQ inside or not: burst_mma_dkdv in blocks of BURST_CUDA_MMA_DKDV_KEYS
 * keys, or burst_mma_kv2 (KV2). */
template <typename T, int D, bool DQ, bool KV2 = false>
static cudaError_t burst_mma_dkdv_launch(const struct burst_cuda_step *s)
{
    if constexpr (KV2) {
        using K2 = burst_kv2<T, D>;
        const int64_t blocks = s->batch * s->hkv * ((s->nk + K2::KB - 1) / K2::KB);
        burst_mma_kv2<T, D, DQ>
            <<<(unsigned)blocks, 32 * K2::NW, burst_mma_kv2_smem<T, D>(), cudaStreamPerThread>>>(
                *s);
    } else {
        constexpr int KB = BURST_CUDA_MMA_DKDV_KEYS(D, DQ);
        const int64_t blocks = s->batch * s->hkv * ((s->nk + KB - 1) / KB);
        const dim3 grid((unsigned)blocks, burst_tc<T, D>::DKDV_SPLIT);
        burst_mma_dkdv<T, D, DQ, KB>
            <<<grid, 2 * KB, burst_mma_dkdv_smem<T, D, DQ, KB>(), cudaStreamPerThread>>>(*s);
    }
    return cudaGetLastError();
}

template <typename T, int D> static int burst_bwd_mma_run(const struct burst_cuda_step *s)
{
    const bool kv = s->dk || s->dv || s->dk_out.data;
    const bool big = !burst_mma_big_unfit<T, D>;
    const bool fused = burst_mma_has_dq<T, D>() && big && s->dq && s->dq_atomic && kv;
    if (kv) {
        cudaError_t e;
        if constexpr (burst_mma_is_kv2<T, D>()) {
            if (!big)
                e = burst_mma_dkdv_launch<T, D, false>(s);
            else if constexpr (burst_mma_has_dq<T, D>())
                e = fused ? burst_mma_dkdv_launch<T, D, true, true>(s)
                          : burst_mma_dkdv_launch<T, D, false, true>(s);
            else
                e = burst_mma_dkdv_launch<T, D, false, true>(s);
        } else if constexpr (burst_mma_has_dq<T, D>()) {
            e = fused ? burst_mma_dkdv_launch<T, D, true>(s)
                      : burst_mma_dkdv_launch<T, D, false>(s);
        } else {
            e = burst_mma_dkdv_launch<T, D, false>(s);
        }
        if (e != cudaSuccess || fused)
            return e;
    }
    if (s->dq) {
        int64_t blocks = s->batch * s->hq * ((s->nq + MMA_BR - 1) / MMA_BR);
        burst_mma_dq<T, D>
            <<<(unsigned)blocks, 128, burst_mma_dq_smem<T, D>(), cudaStreamPerThread>>>(*s);
    }
    return cudaGetLastError();
}

template <typename T, int D> static int burst_dq_mma_run(const struct burst_cuda_step *s)
{
    int64_t blocks = s->batch * s->hq * ((s->nq + MMA_BR - 1) / MMA_BR);
    burst_mma_dq<T, D>
        <<<(unsigned)blocks, 128, burst_mma_dq_smem<T, D>(), cudaStreamPerThread>>>(*s);
    return cudaGetLastError();
}

template <typename T> static int burst_dq_mma(const struct burst_cuda_step *s)
{
    return burst_by_class(s->d, [&](auto c) { return burst_dq_mma_run<T, decltype(c)::value>(s); });
}

extern "C" int burst_cuda_launch_dq_mma(const struct burst_cuda_step *s)
{
    return s->q.dtype == BURST_CUDA_F16 ? burst_dq_mma<__half>(s) : burst_dq_mma<__nv_bfloat16>(s);
}

template <typename T> static int burst_bwd_mma(const struct burst_cuda_step *s)
{
    return burst_by_class(s->d,
                          [&](auto c) { return burst_bwd_mma_run<T, decltype(c)::value>(s); });
}

/* The large dK/dV kernel of class D: burst_mma_kv2 (both forms where it has DQ), else
 * burst_mma_dkdv's DQ form */
template <typename T, int D> static cudaError_t burst_bwd_mma_attr_big()
{
    if constexpr (burst_mma_is_kv2<T, D>()) {
        constexpr size_t smem = burst_mma_kv2_smem<T, D>();
        cudaError_t e = burst_smem_limit(burst_mma_kv2<T, D, false>, smem);
        if constexpr (burst_mma_has_dq<T, D>())
            if (e == cudaSuccess)
                e = burst_smem_limit(burst_mma_kv2<T, D, true>, smem);
        return e;
    } else if constexpr (burst_mma_has_dq<T, D>()) {
        constexpr int KQ = BURST_CUDA_MMA_DKDV_KEYS(D, true);
        return burst_smem_limit(burst_mma_dkdv<T, D, true, KQ>,
                                burst_mma_dkdv_smem<T, D, true, KQ>());
    } else {
        return cudaSuccess;
    }
}

template <typename T, int D> static cudaError_t burst_bwd_mma_attr()
{
    constexpr int KB = BURST_CUDA_MMA_DKDV_KEYS(D, false);
    cudaError_t e =
        burst_smem_limit(burst_mma_dkdv<T, D, false, KB>, burst_mma_dkdv_smem<T, D, false, KB>());
    size_t optin = 0;
    if (e == cudaSuccess)
        e = burst_device_optin(&optin);
    if (e == cudaSuccess && !burst_mma_big_fits<T, D>(optin))
        burst_mma_big_unfit<T, D> = 1;
    else if (e == cudaSuccess)
        e = burst_bwd_mma_attr_big<T, D>();
    if (e == cudaSuccess)
        e = burst_smem_limit(burst_mma_dq<T, D>, burst_mma_dq_smem<T, D>());
    return e;
}

template <typename T> static cudaError_t burst_bwd_mma_attr_all()
{
    return burst_each_class([](auto c) { return burst_bwd_mma_attr<T, decltype(c)::value>(); });
}

template <typename T, int D> static int burst_bwd_run(const struct burst_cuda_step *s)
{
    using C = burst_simt_cfg<D>;
    if (s->dk || s->dv) {
        int64_t blocks = s->batch * s->hkv * ((s->nk + C::ROWS - 1) / C::ROWS);
        burst_simt_dkdv<T, D>
            <<<(unsigned)blocks, 128, burst_simt_dkdv_smem<D>(), cudaStreamPerThread>>>(*s);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess)
            return e;
    }
    if (s->dq) {
        int64_t blocks = s->batch * s->hq * ((s->nq + C::ROWS - 1) / C::ROWS);
        burst_simt_dq<T, D>
            <<<(unsigned)blocks, 128, burst_simt_dq_smem<D>(), cudaStreamPerThread>>>(*s);
    }
    return cudaGetLastError();
}

template <typename T> static int burst_bwd_dims(const struct burst_cuda_step *s)
{
    if (s->d <= 64)
        return burst_bwd_run<T, 64>(s);
    if (s->d <= 128)
        return burst_bwd_run<T, 128>(s);
    return burst_bwd_run<T, 256>(s);
}

extern "C" int burst_cuda_launch_bwd(const struct burst_cuda_step *s, int kind, int num_sms)
{
    (void)num_sms;
#ifdef BURST_CUDA_SM90A
    if (kind == BURST_CUDA_FWD_WGMMA) {
        const int e = burst_cuda_launch_bwd_sm90(s);
        if (e != BURST_CUDA_NO_TMA) /* else views no tensor map describes: mma.sync */
            return e;
        kind = BURST_CUDA_FWD_MMA;
    }
#endif
    if (kind == BURST_CUDA_FWD_MMA) /* fp32: 3xTF32 */
        return s->q.dtype == BURST_CUDA_F16    ? burst_bwd_mma<__half>(s)
               : s->q.dtype == BURST_CUDA_BF16 ? burst_bwd_mma<__nv_bfloat16>(s)
                                               : burst_bwd_mma<float>(s);
    switch (s->q.dtype) {
    case BURST_CUDA_F16: return burst_bwd_dims<__half>(s);
    case BURST_CUDA_BF16: return burst_bwd_dims<__nv_bfloat16>(s);
    default: return burst_bwd_dims<float>(s);
    }
}

template <typename T, int D> static cudaError_t burst_bwd_attr()
{
    cudaError_t e =
        cudaFuncSetAttribute(burst_simt_dkdv<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)burst_simt_dkdv_smem<D>());
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(burst_simt_dq<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)burst_simt_dq_smem<D>());
    return e;
}

template <typename T> static cudaError_t burst_bwd_attr_all()
{
    cudaError_t e = burst_bwd_attr<T, 64>();
    if (e == cudaSuccess)
        e = burst_bwd_attr<T, 128>();
    if (e == cudaSuccess)
        e = burst_bwd_attr<T, 256>();
    return e;
}

template <typename T, int D> static size_t burst_mma_bwd_smem1()
{
    /* without the large dK/dV kernel, which runs only where it fits (burst_mma_big_unfit) */
    constexpr int KB = BURST_CUDA_MMA_DKDV_KEYS(D, false);
    const size_t a = burst_mma_dq_smem<T, D>(), b = burst_mma_dkdv_smem<T, D, false, KB>();
    return a > b ? a : b;
}

extern "C" size_t burst_cuda_mma_bwd_smem(int d, int dtype)
{
    return burst_by_class(d, [&](auto c) {
        constexpr int D = decltype(c)::value;
        return dtype == BURST_CUDA_F32 ? burst_mma_bwd_smem1<float, D>()
                                       : burst_mma_bwd_smem1<__half, D>();
    });
}

extern "C" int burst_cuda_mma_big_fits(int d, int dtype, size_t optin)
{
    return burst_by_class(d, [&](auto c) {
        constexpr int D = decltype(c)::value;
        return (int)(dtype == BURST_CUDA_F32 ? burst_mma_big_fits<float, D>(optin)
                                             : burst_mma_big_fits<__half, D>(optin));
    });
}

extern "C" int burst_cuda_bwd_init(void)
{
    cudaError_t e = burst_bwd_attr_all<float>();
    if (e == cudaSuccess)
        e = burst_bwd_attr_all<__half>();
    if (e == cudaSuccess)
        e = burst_bwd_attr_all<__nv_bfloat16>();
    if (e == cudaSuccess)
        e = burst_bwd_mma_attr_all<__half>();
    if (e == cudaSuccess)
        e = burst_bwd_mma_attr_all<__nv_bfloat16>();
    if (e == cudaSuccess)
        e = burst_bwd_mma_attr_all<float>();
    return e;
}
