/*
 * cuda/burst_cuda_decode.cu - one decode step over a paged key/value cache (backend op
 * decode_step, struct burst_decode_args in runtime/backend.h): split-K "flash-decoding".
 *
 * The step reads every key and value of the sequence once and does little arithmetic per byte
 * (4 d flops per key and query row against 4 d bytes of bf16 K and V), so it is bound by memory
 * bandwidth. One kernel on the calling thread's stream, burst_dec_split<T, D>, grid (Hkv,
 * splits, row chunks):
 *
 *   Each block takes one kv head g, one range of keys (a split: whole tiles of BK keys) and one
 *     chunk of 16 query rows of that head's group: the rows are (query i, head h) pairs,
 *     r = i * group + (h - g * group), so the t queries of all the group's heads share every K/V
 *     byte the block reads (t * group <= 16, the usual case, is one chunk: K/V are read once).
 *     K/V tiles stream through shared memory with cp.async, STAGES deep (16-byte copies that L2
 *     evicts first, the next tiles in flight while one computes; the first ones are issued
 *     before the queries are loaded); a tile inside one cache block (every tile when block_len
 *     is a multiple of BK) costs one block-table read, others one per key row, read one tile
 *     ahead. Each of the block's warps takes 16 keys of a tile and runs the forward's
 *     tensor-core step on them (the query fragments kept in registers for 16-bit operands up to
 *     d = 128; burst_tc<T, D> traits: S = Q K^T with the 16 rows as the m16 tile, online softmax
 *     in log2 units, O += P V), keeping its own (m, l, O); at the end the warps are merged in
 *     shared memory and the block writes its rows' normalised partial O and partial lse (log2
 *     units) to the scratch.
 *   The last block of a (kv head, chunk) to finish (a counter per pair, counted after a memory
 *     fence and returned to zero by that block) combines the splits' partials of the chunk's rows
 *     (log-sum-exp weights; the first loads of the partials issued before the weights are
 *     computed, the partials still in L2, which the K/V copies leave first) and either writes
 *     the result in the caller's dtype to o_out / lse_out (a call that sees every key: no
 *     accumulator, no second pass) or merges it into (o_acc, lse_acc) with the fp64 weights of
 *     the forward's fused merge (burst_merge_weights in burst_cuda_mma.cuh): lse in natural log
 *     units, o_acc overwritten where lse_acc is -inf.
 *     Every row of a call with nkeys > 0 sees key 0.
 *
 * Head-dim classes 64, 128 and 256 only (the caller's d <= class: Q and K/V columns past d are
 * zero-filled in shared memory, never read from or written to the caller's memory); the three
 * dtypes (fp32 as 3xTF32, burst_cuda_tf32.cuh). Nine instances of the split kernel in all.
 * Masking by local key index: row (i, h) sees keys j < min(nkeys, tail + i + 1); tiles past the
 * last key any row sees are not read.
 */
#include <limits.h>

#include "burst_cuda_tf32.cuh"

/* ---- configuration by dtype and class ----------------------------------------------------------- */

template <typename T, int D> struct burst_dec_cfg {
    using TC = burst_tc<T, D>;
    using E = typename TC::E;
    static constexpr int W = TC::W;           /* elements per shared-memory tile row */
    static constexpr int CH = 16 / sizeof(E); /* elements per 16-byte copy */
    /* warps per block, each taking 16 keys of a tile: 4, or 2 at D = 256, where 16-bit tiles
     * then take three stages and two blocks per multiprocessor, as at D = 128, for as many bytes
     * in flight */
    static constexpr int NW = D > 128 ? 2 : 4;
    static constexpr int NT = 32 * NW, BK = 16 * NW;
    static constexpr size_t STAGE = (size_t)2 * BK * W * sizeof(E); /* K and V of one tile */
    static constexpr int STAGES = STAGE <= 40 * 1024 ? 3 : 2;
    static constexpr int OLD = D + 4; /* floats per row of the warps' merge buffer */
    /* the query fragments stay in registers for 16-bit operands up to d = 128; otherwise they
     * are read from the query tile for every tile of keys */
    static constexpr bool QREG = sizeof(E) == 2 && D <= 128;
    static constexpr int NQF = QREG ? D / 16 : 1;
    /* splits per round of the combine's loads (a thread's float4 loads in flight together):
     * fewer up to d = 64, whose kernels would otherwise need more registers than the loop */
    static constexpr int ROUND = D > 64 ? 32 : 16;
    static constexpr size_t SMEM = STAGES * STAGE + (size_t)16 * W * sizeof(E);
    /* the loader's threads: one 16-byte column chunk each (NC chunks per row, rounded up to NS),
     * every RS-th row of a tile, RPT rows per thread */
    static constexpr int NC = D / CH, NS = burst_pow2_ceil(NC), RS = NT / NS, RPT = BK / RS;
    static_assert((size_t)NW * 16 * (OLD + 2) * sizeof(float) <= STAGES * STAGE,
                  "the merge buffer fits in the tile stages");
};

/* ---- the split kernel ---------------------------------------------------------------------------- */

/* Key j's cache block (j / block_len) and row in it (j % block_len): shifts where block_len is
 * a power of two (sh = its log2, else -1), the usual case. */
__device__ __forceinline__ int burst_dec_blk(const struct burst_cuda_decode &a, int sh, int j)
{
    return sh >= 0 ? j >> sh : j / a.block_len;
}
__device__ __forceinline__ int burst_dec_row(const struct burst_cuda_decode &a, int sh, int j)
{
    return sh >= 0 ? j & (a.block_len - 1) : j % a.block_len;
}

/* The pool blocks of this thread's rows of the tile of keys [j0, j0 + BK) (burst_dec_load's
 * layout: rows rr + i RS): one table read when the whole tile lies in one cache block (every
 * tile when block_len is a multiple of BK), else one per row below kend. The kernel reads them
 * one tile ahead of the tile's loads, so that no table read is waited for between two tiles. */
template <typename T, int D>
__device__ __forceinline__ void burst_dec_slots(int (&slot)[burst_dec_cfg<T, D>::RPT],
                                                const struct burst_cuda_decode &a, int j0, int kend,
                                                int sh)
{
    using C = burst_dec_cfg<T, D>;
    const int rr = (int)threadIdx.x / C::NS, b0 = burst_dec_blk(a, sh, j0);
    if (burst_dec_blk(a, sh, j0 + C::BK - 1) == b0) {
        const int x = __ldg(a.blocks + b0);
#pragma unroll
        for (int i = 0; i < C::RPT; i++)
            slot[i] = x;
        return;
    }
#pragma unroll
    for (int i = 0; i < C::RPT; i++) {
        const int j = j0 + rr + i * C::RS;
        slot[i] = j < kend ? __ldg(a.blocks + burst_dec_blk(a, sh, j)) : 0;
    }
}

/* cp.async the K and V rows of tile keys [j0, j0 + BK) of kv head g into sk, sv; keys at or past
 * kend and the class's columns past d are zero-filled (nothing outside the caller's rows is
 * read). slot: burst_dec_slots of the tile. Thread layout as burst_tc_load: one 16-byte column
 * chunk per thread, every RS-th row. */
template <typename T, int D>
__device__ __forceinline__ void
burst_dec_load(typename burst_dec_cfg<T, D>::E *sk, typename burst_dec_cfg<T, D>::E *sv,
               const struct burst_cuda_decode &a, int j0,
               const int (&slot)[burst_dec_cfg<T, D>::RPT], int kend, int sh, int g, uint64_t pol)
{
    using C = burst_dec_cfg<T, D>;
    using E = typename C::E;
    static_assert(C::NS <= C::NT && C::BK % C::RS == 0, "a pass covers whole rows");
    const int ch = (int)threadIdx.x % C::NS, rr = (int)threadIdx.x / C::NS;
    if (ch >= C::NC)
        return;
    const E *kp = (const E *)a.k_pool, *vp = (const E *)a.v_pool;
    const bool col = ch * C::CH < a.d;
    const int64_t row = (int64_t)a.hkv * a.d; /* elements between two keys of a block */
    const int64_t head = (int64_t)g * a.d + ch * C::CH;
#pragma unroll
    for (int i = 0; i < C::RPT; i++) {
        const int r = rr + i * C::RS, j = j0 + r;
        const bool ok = col && j < kend;
        const int64_t off = ((int64_t)slot[i] * a.block_len + burst_dec_row(a, sh, j)) * row + head;
        burst_cp16_hint(sk + C::TC::off(r, ch * C::CH), ok ? kp + off : kp, ok ? 16 : 0, pol);
        burst_cp16_hint(sv + C::TC::off(r, ch * C::CH), ok ? vp + off : vp, ok ? 16 : 0, pol);
    }
}

/* The chunk's 16 query rows into the swizzled tile sq, plain loads (q may have any strides and
 * alignment); rows past the group's t * group and columns past d are zero. */
template <typename T, int D>
__device__ __forceinline__ void burst_dec_load_q(typename burst_dec_cfg<T, D>::E *sq,
                                                 const struct burst_cuda_decode &a, int g, int z)
{
    using C = burst_dec_cfg<T, D>;
    using E = typename C::E;
    const int rows = a.t * a.group;
    for (int e = threadIdx.x; e < 16 * D; e += C::NT) {
        const int r = e / D, c = e % D, rr = z * 16 + r;
        E x = burst_from_f<E>(0.0f);
        if (rr < rows && c < a.d) {
            const int i = rr / a.group, h = g * a.group + rr % a.group;
            x = ((const E *)a.q)[(int64_t)i * a.q_stride_i + (int64_t)h * a.q_stride_h + c];
        }
        sq[C::TC::off(r, c)] = x;
    }
}

/* O += P V for one warp's 16 keys: P from the S accumulators (C layout = A layout), V rows of
 * the warp's keys (vt: their first row). fp32 (TC::FRESH) sums through fresh accumulators. */
template <typename TC, int D>
__device__ __forceinline__ void burst_dec_pv(float (&o)[D / 8][4], const float (&sc)[2][4],
                                             const typename TC::E *vt, int lane)
{
    typename TC::A pf[1];
    TC::cta(pf[0], sc[0], sc[1]);
    if (TC::FRESH) {
        burst_tc_acc_fresh<TC, 1, D / 16>(o, pf, vt, 0, lane);
    } else {
#pragma unroll
        for (int n2 = 0; n2 < D / 16; n2++) {
            typename TC::B bf;
            TC::ldbt(bf, vt, 0, n2 * 16, lane);
            TC::mma(o[2 * n2], pf[0], bf, 0);
            TC::mma(o[2 * n2 + 1], pf[0], bf, 1);
        }
    }
}

/* One warp's online-softmax step over its 16 keys of a tile (the forward's, one m16 row tile):
 * S = Q K^T, cap, mask, running max m and sum l in log2 units (two rows per lane: rq, rq + 8),
 * O rescaled, O += P V. ke[u]: the row's end of allowed keys; wmin: the warp's smallest. */
template <typename T, int D>
__device__ __forceinline__ void
burst_dec_warp_tile(const struct burst_cuda_decode &a, const typename burst_dec_cfg<T, D>::E *sq,
                    const typename burst_dec_cfg<T, D>::TC::A (&qf)[burst_dec_cfg<T, D>::NQF],
                    const typename burst_dec_cfg<T, D>::E *kt,
                    const typename burst_dec_cfg<T, D>::E *vt, int jw, const int (&ke)[2], int wmin,
                    float (&m)[2], float (&l)[2], float (&o)[D / 8][4], int lane)
{
    using C = burst_dec_cfg<T, D>;
    using TC = typename C::TC;
    const int cq = 2 * (lane & 3);
    const float sl2 = a.scale * BURST_LOG2E;
    float sc[2][4] = {}, ss[2][4] = {}; /* ss: TC::mma2's small terms */
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        typename TC::A qa;
        if constexpr (C::QREG)
            qa = qf[kk];
        else
            TC::lda(qa, sq, 0, kk * 16, lane);
        typename TC::B bf;
        TC::ldb(bf, kt, 0, kk * 16, lane);
        TC::mma2(sc[0], ss[0], qa, bf, 0);
        TC::mma2(sc[1], ss[1], qa, bf, 1);
    }
    burst_tc_add_small<TC, 2>(sc, ss);
    if (a.cap_in != 0.0f) { /* soft-capping: the step's constants, burst_dcap_score */
        struct burst_cuda_step cs;
        cs.cap_in = a.cap_in;
        cs.cap_out = a.cap_out;
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                sc[n][e] = burst_dcap_score(cs, sc[n][e]);
    }
    if (jw + 16 > wmin) /* some row of the warp does not see all 16 keys */
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (jw + n * 8 + cq + (e & 1) >= ke[e >> 1])
                    sc[n][e] = -CUDART_INF_F;
    float alpha[2], muse[2];
#pragma unroll
    for (int u = 0; u < 2; u++) {
        float mx =
            fmaxf(fmaxf(sc[0][2 * u], sc[0][2 * u + 1]), fmaxf(sc[1][2 * u], sc[1][2 * u + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        burst_max_lag(m[u], mx * sl2, &muse[u], &alpha[u]);
        l[u] *= alpha[u];
    }
    if (burst_any_moved<2>(alpha))
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            o[n][0] *= alpha[0];
            o[n][1] *= alpha[0];
            o[n][2] *= alpha[1];
            o[n][3] *= alpha[1];
        }
#pragma unroll
    for (int n = 0; n < 2; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float p = burst_ex2(fmaf(sc[n][e], sl2, -muse[e >> 1]));
            sc[n][e] = p;
            l[e >> 1] += p;
        }
    burst_dec_pv<TC, D>(o, sc, vt, lane);
}

/* The block's end: the warps' (m, l, O) merged in shared memory (cm: reused tile stages), the
 * chunk's rows written to the scratch as normalised O and lse in log2 units (-inf and O = 0 for
 * a row that saw no key here). */
template <typename T, int D>
__device__ __forceinline__ void
burst_dec_block_out(const struct burst_cuda_decode &a, float *cm, const float (&m)[2],
                    const float (&l)[2], const float (&o)[D / 8][4], int g, int z, int split)
{
    using C = burst_dec_cfg<T, D>;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int rq = lane >> 2, cq = 2 * (lane & 3);
    float *so = cm, *sm = cm + C::NW * 16 * C::OLD, *sl = sm + C::NW * 16;
    if ((lane & 3) == 0)
#pragma unroll
        for (int u = 0; u < 2; u++) {
            sm[warp * 16 + rq + 8 * u] = m[u];
            sl[warp * 16 + rq + 8 * u] = l[u];
        }
#pragma unroll
    for (int n = 0; n < D / 8; n++)
#pragma unroll
        for (int u = 0; u < 2; u++)
            *(float2 *)(so + (warp * 16 + rq + 8 * u) * C::OLD + n * 8 + cq) =
                make_float2(o[n][2 * u], o[n][2 * u + 1]);
    __syncthreads();
    const int rows = a.t * a.group;
    for (int e = threadIdx.x; e < 16 * D; e += C::NT) {
        const int r = e / D, c = e % D, rr = z * 16 + r;
        if (rr >= rows || c >= a.d)
            continue;
        float mm = -CUDART_INF_F;
#pragma unroll
        for (int w = 0; w < C::NW; w++)
            mm = fmaxf(mm, sm[w * 16 + r]);
        const int i = rr / a.group, h = g * a.group + rr % a.group;
        const int64_t slot = ((int64_t)i * a.hq + h) * a.nsplit + split;
        float os = 0.0f, ls = 0.0f;
        if (mm != -CUDART_INF_F) {
#pragma unroll
            for (int w = 0; w < C::NW; w++) {
                const float wt = burst_ex2(sm[w * 16 + r] - mm); /* -inf: 0 */
                ls += wt * sl[w * 16 + r];
                os += wt * so[(w * 16 + r) * C::OLD + c];
            }
            os /= ls;
        }
        a.o_part[slot * a.d + c] = os;
        if (c == 0)
            a.lse_part[slot] = mm == -CUDART_INF_F ? -CUDART_INF_F : mm + __log2f(ls);
    }
}

/* ---- the combine, by the last block of a (kv head, row chunk) ------------------------------------ */

/* Whether this block is the last of its (kv head g, chunk z) to finish. Every thread's partials
 * are fenced before the count, and the last block returns the counter to zero for the next call
 * on the stream. */
__device__ __forceinline__ bool burst_dec_last(const struct burst_cuda_decode &a, int g, int z,
                                               int *last)
{
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned *c = a.arrived + (int64_t)g * a.chunks + z;
        *last = atomicAdd(c, 1u) == (unsigned)a.nsplit - 1;
        if (*last) {
            __threadfence(); /* the other blocks' partials are read after this (acquire) */
            *c = 0u;
        }
    }
    __syncthreads();
    return *last != 0;
}

/* Row rr of chunks of kv head g: its query i and head h. */
__device__ __forceinline__ void burst_dec_row(const struct burst_cuda_decode &a, int g, int rr,
                                              int *i, int *h)
{
    *i = rr / a.group;
    *h = g * a.group + rr % a.group;
}

/* Per row of the chunk (a warp each): the largest split lse mx, and the coefficients of the
 * result: O = cn * sum_s 2^(lse_s - mx) O_s (+ co * o_acc when merging). The row's lse is
 * written here (lse_out, or lse_acc merged by burst_merge_weights: fp64, natural log). A row
 * with no key anywhere: mx = -inf; merged rows stay untouched, written rows get O = 0, -inf. */
template <int NW>
__device__ __forceinline__ void burst_dec_coeffs(const struct burst_cuda_decode &a, const float *sw,
                                                 float *rm, float *rco, float *rcn, int g, int z,
                                                 int nr)
{
    const int ns = a.nsplit, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int r = warp; r < nr; r += NW) {
        float mx = -CUDART_INF_F, sum = 0.0f;
        for (int s = lane; s < ns; s += 32)
            mx = fmaxf(mx, sw[r * ns + s]);
        for (int k = 1; k < 32; k <<= 1)
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, k));
        if (mx != -CUDART_INF_F)
            for (int s = lane; s < ns; s += 32)
                sum += burst_ex2(sw[r * ns + s] - mx);
        for (int k = 1; k < 32; k <<= 1)
            sum += __shfl_xor_sync(0xffffffffu, sum, k);
        if (lane != 0)
            continue;
        int i, h;
        burst_dec_row(a, g, z * 16 + r, &i, &h);
        const int64_t li = (int64_t)h * a.t + i;
        double co = a.o_out ? 0.0 : 1.0, cn = 0.0;
        if (mx != -CUDART_INF_F) {
            double ln;
            burst_merge_weights(a.o_out ? -(double)CUDART_INF : (double)a.lse_acc[li], mx, sum, &ln,
                                &co, &cn);
            if (!a.o_out)
                a.lse_acc[li] = (float)ln;
            else if (a.lse_out)
                a.lse_out[li] = (float)ln;
        } else if (a.o_out && a.lse_out) {
            a.lse_out[li] = -CUDART_INF_F;
        }
        rm[r] = mx;
        rco[r] = (float)co;
        rcn[r] = (float)cn;
    }
}

/* The partials of splits [s0, s0 + R) of one row (op: its split 0, at the thread's four columns)
 * from L2 (other blocks wrote them); zeros past the last split. */
template <int R>
__device__ __forceinline__ void burst_dec_round(float4 (&x)[R], const float *op, int d, int s0,
                                                int ns)
{
#pragma unroll
    for (int j = 0; j < R; j++)
        x[j] = s0 + j < ns ? __ldcg((const float4 *)(op + (int64_t)(s0 + j) * d))
                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

/* acc += sum_j 2^(lse_(s0 + j) - mx) x[j] (lw: the row's split lse); a split with no key for the
 * row has weight 0: selected away, not multiplied. */
template <int R>
__device__ __forceinline__ void burst_dec_accum(float (&acc)[4], const float4 (&x)[R],
                                                const float *lw, int s0, int ns, float mx)
{
#pragma unroll
    for (int j = 0; j < R; j++) {
        const float w = s0 + j < ns ? burst_ex2(lw[s0 + j] - mx) : 0.0f;
        if (w != 0.0f) {
            acc[0] = fmaf(w, x[j].x, acc[0]);
            acc[1] = fmaf(w, x[j].y, acc[1]);
            acc[2] = fmaf(w, x[j].z, acc[2]);
            acc[3] = fmaf(w, x[j].w, acc[3]);
        }
    }
}

/* Row (query i, head h)'s partial O of split 0 at column c. */
__device__ __forceinline__ const float *burst_dec_part(const struct burst_cuda_decode &a, int i,
                                                       int h, int c)
{
    return a.o_part + ((int64_t)i * a.hq + h) * a.nsplit * a.d + c;
}

/* The last block's work: the nr rows of chunk z of kv head g, each summed over the splits'
 * partials, four columns per thread (the first round of a thread's loads issued before the
 * rows' weights are computed), then written to o_out in T or merged into o_acc. sw: shared
 * memory of 16 * nsplit + 48 floats (burst_dec_plan_run keeps nsplit within the tile stages). */
template <typename T, int D>
__device__ void burst_dec_combine(const struct burst_cuda_decode &a, float *sw, int g, int z)
{
    using C = burst_dec_cfg<T, D>;
    const int ns = a.nsplit, nr = min(16, a.t * a.group - z * 16), nq = a.d / 4;
    float *rm = sw + 16 * ns, *rco = rm + 16, *rcn = rco + 16;
    float4 x[C::ROUND];
    if ((int)threadIdx.x < nr * nq) { /* this thread's first item, as the sums below take it */
        int i, h;
        burst_dec_row(a, g, z * 16 + (int)threadIdx.x / nq, &i, &h);
        burst_dec_round(x, burst_dec_part(a, i, h, (int)threadIdx.x % nq * 4), a.d, 0, ns);
    }
    for (int e = threadIdx.x; e < nr * ns; e += C::NT) {
        int i, h;
        burst_dec_row(a, g, z * 16 + e / ns, &i, &h);
        sw[e] = __ldcg(a.lse_part + ((int64_t)i * a.hq + h) * ns + e % ns);
    }
    __syncthreads();
    burst_dec_coeffs<C::NW>(a, sw, rm, rco, rcn, g, z, nr);
    __syncthreads();
    for (int e = threadIdx.x; e < nr * nq; e += C::NT) {
        const int r = e / nq, c = e % nq * 4;
        const float mx = rm[r];
        if (mx == -CUDART_INF_F && !a.o_out)
            continue; /* no key: the running row stays */
        int i, h;
        burst_dec_row(a, g, z * 16 + r, &i, &h);
        const float *op = burst_dec_part(a, i, h, c);
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int s0 = 0; mx != -CUDART_INF_F && s0 < ns; s0 += C::ROUND) {
            if (e != (int)threadIdx.x || s0 != 0)
                burst_dec_round(x, op, a.d, s0, ns);
            burst_dec_accum(acc, x, sw + r * ns, s0, ns, mx);
        }
        if (a.o_out) {
            T *out = (T *)a.o_out + (int64_t)i * a.o_stride_i + (int64_t)h * a.o_stride_h + c;
#pragma unroll
            for (int k = 0; k < 4; k++)
                out[k] = burst_from_f<T>(rcn[r] * acc[k]);
        } else {
            float *orow = a.o_acc + ((int64_t)i * a.hq + h) * a.d + c;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float v = rcn[r] * acc[k];
                if (rco[r] != 0.0f)
                    v = fmaf(rco[r], orow[k], v);
                orow[k] = v;
            }
        }
    }
}

template <typename T, int D>
__global__ void __launch_bounds__(burst_dec_cfg<T, D>::NT)
    burst_dec_split(struct burst_cuda_decode a)
{
    using C = burst_dec_cfg<T, D>;
    using E = typename C::E;
    extern __shared__ __align__(16) unsigned char smraw[];
    E *stages = (E *)smraw, *sq = stages + C::STAGES * 2 * C::BK * C::W;
    /* the kv head varies fastest over the grid: blocks that run together read neighbouring
     * heads of the same keys, whole rows of the pool's [block_len, Hkv, d] layout */
    const int g = blockIdx.x, split = blockIdx.y, z = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, rq = lane >> 2;
    const int rows = a.t * a.group;

    /* this lane's rows rq, rq + 8 of the chunk: the end of their allowed keys (rows past the
     * group's are never stored: no mask) */
    int ke[2];
#pragma unroll
    for (int u = 0; u < 2; u++) {
        const int rr = z * 16 + rq + 8 * u;
        ke[u] = rr < rows ? min(a.nkeys, a.tail + rr / a.group + 1) : INT_MAX;
    }
    int wmin = min(ke[0], ke[1]);
    for (int s = 1; s < 32; s <<= 1)
        wmin = min(wmin, __shfl_xor_sync(0xffffffffu, wmin, s));
    /* keys of this split that some row of the chunk sees */
    const int last = min(rows - 1, z * 16 + 15) / a.group;
    const int kend = min(a.nkeys, a.tail + last + 1);
    const int kb = split * a.split_keys;
    const int ke_blk = min(kend, kb + a.split_keys);
    const int ntile = ke_blk > kb ? (ke_blk - kb + C::BK - 1) / C::BK : 0;

    const int bl = a.block_len, sh = (bl & (bl - 1)) == 0 ? __ffs(bl) - 1 : -1;
    const uint64_t pol = burst_l2_evict_first(); /* every key is read once */
    int slot[C::RPT];
#pragma unroll
    for (int s = 0; s < C::STAGES - 1; s++) {
        if (s < ntile) {
            burst_dec_slots<T, D>(slot, a, kb + s * C::BK, ke_blk, sh);
            burst_dec_load<T, D>(stages + s * 2 * C::BK * C::W, stages + (s * 2 + 1) * C::BK * C::W,
                                 a, kb + s * C::BK, slot, ke_blk, sh, g, pol);
        }
        burst_cp_commit();
    }
    burst_dec_load_q<T, D>(sq, a, g, z); /* while the first tiles are in flight */
    typename C::TC::A qf[C::NQF];
    if constexpr (C::QREG) {
        __syncthreads(); /* the query tile is complete */
#pragma unroll
        for (int kk = 0; kk < C::NQF; kk++)
            C::TC::lda(qf[kk], sq, 0, kk * 16, lane);
    }
    /* the table entries of the next tile to load, read one iteration ahead */
    if (C::STAGES - 1 < ntile)
        burst_dec_slots<T, D>(slot, a, kb + (C::STAGES - 1) * C::BK, ke_blk, sh);

    float o[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m[2] = {-CUDART_INF_F, -CUDART_INF_F}, l[2] = {0.0f, 0.0f};

    for (int it = 0; it < ntile; it++) {
        burst_cp_wait<C::STAGES - 2>(); /* tile it has landed (this thread's copies) */
        __syncthreads();                /* ... everyone's; and stage it - 1 is free */
        const int nx = it + C::STAGES - 1, sx = nx % C::STAGES;
        if (nx < ntile) {
            burst_dec_load<T, D>(stages + sx * 2 * C::BK * C::W,
                                 stages + (sx * 2 + 1) * C::BK * C::W, a, kb + nx * C::BK, slot,
                                 ke_blk, sh, g, pol);
            if (nx + 1 < ntile)
                burst_dec_slots<T, D>(slot, a, kb + (nx + 1) * C::BK, ke_blk, sh);
        }
        burst_cp_commit();
        const int st = it % C::STAGES, jw = kb + it * C::BK + warp * 16;
        if (jw < ke_blk) {
            const E *kt = stages + st * 2 * C::BK * C::W + warp * 16 * C::W;
            const E *vt = stages + (st * 2 + 1) * C::BK * C::W + warp * 16 * C::W;
            burst_dec_warp_tile<T, D>(a, sq, qf, kt, vt, jw, ke, wmin, m, l, o, lane);
        }
    }
    burst_cp_wait<0>();
    __syncthreads(); /* the stages become the merge buffer */
#pragma unroll
    for (int u = 0; u < 2; u++) {
        l[u] += __shfl_xor_sync(0xffffffffu, l[u], 1);
        l[u] += __shfl_xor_sync(0xffffffffu, l[u], 2);
    }
    burst_dec_block_out<T, D>(a, (float *)smraw, m, l, o, g, z, split);
    /* the flag in the query tile, unused by now (a static shared variable would move the
     * dynamic tiles off their 128-byte alignment) */
    if (burst_dec_last(a, g, z, (int *)(void *)sq))
        burst_dec_combine<T, D>(a, (float *)smraw, g, z);
}

/* ---- host side --------------------------------------------------------------------------------- */

/* f(integral_constant class) for the decode classes 64, 128, 256. */
template <typename F> static auto burst_dec_by_class(int d, F &&f)
{
    if (d <= 64)
        return f(burst_dc<64>{});
    if (d <= 128)
        return f(burst_dc<128>{});
    return f(burst_dc<256>{});
}

template <typename F> static auto burst_dec_by_type(int dtype, F &&f)
{
    if (dtype == BURST_CUDA_F16)
        return f((__half *)0);
    if (dtype == BURST_CUDA_BF16)
        return f((__nv_bfloat16 *)0);
    return f((float *)0);
}

/* The index of kernel <T, D> in the tables of BURST_CUDA_DECODE_KERNELS entries. */
template <typename T, int D> static constexpr int burst_dec_index()
{
    const int t = std::is_same<T, __half>::value ? 0 : 1 + !std::is_same<T, __nv_bfloat16>::value;
    return 3 * t + (D <= 64 ? 0 : 1 + (D > 128));
}

template <typename T, int D>
static int burst_dec_plan_run(struct burst_cuda_decode *a, int num_sms, size_t smem_optin,
                              const int *per_sm_tab)
{
    using C = burst_dec_cfg<T, D>;
    if (C::SMEM > smem_optin)
        return -1;
    const int per_sm = per_sm_tab[burst_dec_index<T, D>()];
    const int rows = a->t * a->group, chunks = (rows + 15) / 16;
    if (chunks > 65535) /* the grid's z extent */
        return -1;
    const int kmax = a->nkeys < a->tail + a->t ? a->nkeys : a->tail + a->t; /* keys any row sees */
    const int ntiles = (kmax + C::BK - 1) / C::BK;
    /* one full wave of equal blocks: splits * Hkv * chunks ~ SMs * blocks per SM */
    const long target = (long)num_sms * per_sm;
    long splits = (target + (long)a->hkv * chunks - 1) / ((long)a->hkv * chunks);
    /* the combine's weights (16 rows x nsplit floats) fit in the tile stages */
    const long smax = ((long)(C::STAGES * C::STAGE / sizeof(float)) - 48) / 16;
    splits = splits > smax ? smax : splits;
    splits = splits < 1 ? 1 : splits > ntiles ? ntiles : splits;
    const int per = (int)((ntiles + splits - 1) / splits); /* tiles per split */
    a->split_keys = per * C::BK;
    a->nsplit = (ntiles + per - 1) / per;
    if (a->nsplit > 65535) /* the grid's y extent */
        return -1;
    a->chunks = chunks;
    return 0;
}

extern "C" int burst_cuda_decode_plan(struct burst_cuda_decode *a, int num_sms, size_t smem_optin,
                                      const int per_sm[BURST_CUDA_DECODE_KERNELS])
{
    return burst_dec_by_type(a->dtype, [&](auto tp) {
        using T = std::remove_pointer_t<decltype(tp)>;
        return burst_dec_by_class(a->d, [&](auto c) {
            return burst_dec_plan_run<T, decltype(c)::value>(a, num_sms, smem_optin, per_sm);
        });
    });
}

extern "C" int burst_cuda_launch_decode(const struct burst_cuda_decode *a)
{
    int e = burst_dec_by_type(a->dtype, [&](auto tp) {
        using T = std::remove_pointer_t<decltype(tp)>;
        return burst_dec_by_class(a->d, [&](auto c) {
            constexpr int D = decltype(c)::value;
            using C = burst_dec_cfg<T, D>;
            burst_dec_split<T, D>
                <<<dim3((unsigned)a->hkv, (unsigned)a->nsplit, (unsigned)a->chunks), C::NT, C::SMEM,
                   cudaStreamPerThread>>>(*a);
            return (int)cudaGetLastError();
        });
    });
    return e;
}

/* Kernel <T, D>'s shared-memory limit, and its resident blocks per multiprocessor into per_sm
 * (1 where the device cannot say: the plan then sizes a wave as one block per multiprocessor). */
template <typename T, int D> static cudaError_t burst_dec_attr(int *per_sm)
{
    using C = burst_dec_cfg<T, D>;
    int *n = per_sm + burst_dec_index<T, D>();
    *n = 1;
    cudaError_t e = burst_smem_limit(burst_dec_split<T, D>, C::SMEM);
    if (e == cudaSuccess) {
        const cudaError_t q =
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, burst_dec_split<T, D>, C::NT, C::SMEM);
        if (q != cudaSuccess || *n < 1) {
            (void)cudaGetLastError();
            *n = 1;
        }
    }
    return e;
}

extern "C" int burst_cuda_decode_init(int per_sm[BURST_CUDA_DECODE_KERNELS])
{
    cudaError_t e = cudaSuccess;
    auto each = [&](auto tp) {
        using T = std::remove_pointer_t<decltype(tp)>;
        if (e == cudaSuccess)
            e = burst_dec_attr<T, 64>(per_sm);
        if (e == cudaSuccess)
            e = burst_dec_attr<T, 128>(per_sm);
        if (e == cudaSuccess)
            e = burst_dec_attr<T, 256>(per_sm);
        return 0;
    };
    each((__half *)0);
    each((__nv_bfloat16 *)0);
    each((float *)0);
    return (int)e;
}
