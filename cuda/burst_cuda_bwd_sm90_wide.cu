/*
 * cuda/burst_cuda_bwd_sm90_wide.cu - the backward step of the wide head-dim classes (192, 256) on
 * Hopper's warpgroup tensor cores (wgmma, sm_90a only, like burst_cuda_bwd_sm90.cu, which
 * launches it). Same contract as the other backward kernels.
 *
 * At these widths a warpgroup cannot hold dK and dV of its 64 keys in registers (64 x 256 x 2
 * fp32 values over 128 threads: 256 registers each), so the two warpgroups of a block split the
 * work by tensor instead of by keys. A block owns 64 keys of a kv head and loops over the heads of
 * its group and the 64-row query tiles that may see its keys; per tile:
 *   - S^T = K Q^T and dP^T = V dO^T (64 keys x 64 queries), the warpgroups taking 32 queries each
 *     (A = the K / V tile, B = their query rows, both from shared memory);
 *   - P^T and dS^T = P^T (dP^T - D) from the saved lse and D, rounded to the input dtype and stored
 *     transposed to shared memory as [query][key] tiles, where both warpgroups read them;
 *   - warpgroup 0: dV += P^T dO, warpgroup 1: dK += dS^T Q, each over all D columns (A = the P^T /
 *     dS^T tile read MN-major, B = the dO / Q tile read MN-major);
 *   - plans that are not deterministic: dQ += tau dS K in 64-column chunks (alternating between the
 *     warpgroups; A = the dS tile read K-major, B = the K tile read MN-major), added to s.dq with
 *     16-byte float atomics straight from the accumulators (burst_dq_red), so that no dQ kernel
 *     recomputes S and dP. Deterministic plans run the sm_80 dQ kernel (burst_cuda_bwd.cu) after
 *     this one.
 * A pair of a plan that is not deterministic thus costs the five products of the textbook
 * backward. The streamed Q / dO tiles are
 * double-buffered: tile it + 1 is copied while tile it is computed (the copy is issued after the
 * barrier that ends every product of tile it - 1, which read that buffer). P and dS are rounded
 * to the input dtype as A operands, as in the other kernels (tests/harness.h bounds this).
 */
#include <limits.h>

#include "burst_cuda_wgmma.cuh"

#define WW_NS 2  /* buffers of the streamed Q / dO tiles */
#define WW_BC 64 /* keys of a block */
#define WW_BQ 64 /* query rows of a streamed tile */

/* K and V, WW_NS stages of Q and dO, the P^T and dS^T tiles, the row scalars. No alignment slack:
 * the shared memory is declared __align__(1024) and the kernel traps otherwise (at D = 256 the
 * slack would not fit 227 KiB beside the toolchain's 1 KiB padding of the static part). */
template <int D> constexpr size_t burst_ww_smem()
{
    return (size_t)(2 * WW_BC + WW_NS * 2 * WW_BQ) * burst_wg_panels<D>() * 128 + 2 * WW_BQ * 128 +
           WW_NS * WW_BQ * sizeof(struct burst_wg_qrow);
}

template <typename T, int D, bool DQ>
__global__ void __launch_bounds__(256, 1) burst_ww_bwd(struct burst_cuda_step s)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BC = WW_BC, BQ = WW_BQ, NT = 256, PN = burst_wg_panels<D>();
    constexpr int KBYTES = BC * PN * 128, QBYTES = BQ * PN * 128, SBYTES = BQ * 128;
    constexpr int HQ = BQ / 2; /* queries of S^T per warpgroup */
    constexpr uint32_t DSTAGE = 2 * QBYTES >> 4;
    extern __shared__ __align__(1024) unsigned char smraw[];
    unsigned char *sk = smraw; /* __align__(1024): the panels' swizzle pattern repeats there */
    if (burst_smem_addr(smraw) & 1023u)
        __trap();
    unsigned char *sv = sk + KBYTES, *sqo = sv + KBYTES; /* stage st: Q, then dO */
    unsigned char *sp = sqo + WW_NS * 2 * QBYTES, *sds = sp + SBYTES;
    struct burst_wg_qrow *rows = (struct burst_wg_qrow *)(sds + SBYTES);
    __shared__ int s_full[WW_NS][2]; /* per stage: its tile sees all 64 keys (warps 0, 1) */
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
    const int rot = burst_dtile_rot(j0, ifirst, BQ, ntq);
    auto tile_at = [&](int it, int64_t *h, int64_t *i0) {
        *h = g * s.group + it / ntq;
        *i0 = ifirst + (int64_t)burst_dtile_at(it % ntq, rot, ntq) * BQ;
    };
    /* the row scalars of query tile `it` (threads < BQ: one row each), loaded one tile early */
    auto row_scalars = [&](int it) {
        int64_t h, i0;
        tile_at(it, &h, &i0);
        return burst_wg_row<BQ>(s, b, h, i0, (int)threadIdx.x);
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

    float acc[D / 2]; /* warpgroup 0: dV, 1: dK; key rows x all D columns */
#pragma unroll
    for (int n = 0; n < D / 2; n++)
        acc[n] = 0.0f;
    float sc[HQ / 2], dp[HQ / 2];
    const int rq = lane >> 2, cq = 2 * (lane & 3);
    const int key0 = (int)j0 + warp * 16 + rq; /* this thread's keys: key0, key0 + 8 */
    /* descriptors (low words, burst_wg_dlo) */
    const uint32_t dkd = burst_wg_dlo(sk, 16), dvd = burst_wg_dlo(sv, 16); /* A, K-major */
    const uint32_t dqh = burst_wg_dlo(sqo + wg * HQ * 128, 16); /* B: this wg's queries */
    const uint32_t doh = burst_wg_dlo(sqo + QBYTES + wg * HQ * 128, 16);
    /* the dV / dK product: A = P^T or dS^T, B = dO or Q, both MN-major */
    const uint32_t dxa = burst_wg_dlo(wg == 0 ? sp : sds, BQ * 128);
    const uint32_t dxb = burst_wg_dlo(sqo + (wg == 0 ? QBYTES : 0), BQ * 128);
    const uint32_t dsk = burst_wg_dlo(sds, 16);      /* dS as A of dQ, K-major */
    const uint32_t dkt = burst_wg_dlo(sk, BC * 128); /* K as B of dQ, MN-major */

    auto tile_begin = [&](int it, int st) {
        burst_cp_wait<0>();
        burst_fence_proxy_async();
        __syncthreads();
        if (it + 1 < total) {
            issue(it + 1, st ^ 1, rnext);
            if (it + 2 < total)
                rnext = row_scalars(it + 2);
        }
        burst_wg_fence();
        burst_wg_abt<T, D, HQ, BC, BQ>(sc, dkd, dqh + st * DSTAGE);
        burst_wg_abt<T, D, HQ, BC, BQ>(dp, dvd, doh + st * DSTAGE);
    };
    /* P^T in sc and dS^T in dp; column = query row wg HQ + 8 n + cq (+ 1) of the tile */
    auto dsoft = [&](int st) {
        const struct burst_wg_qrow *rw = rows + st * BQ + wg * HQ;
        unsigned ok = ~0u; /* the mask as bits 4 n + e, all set where the tile sees all keys */
        if (!(s_full[st][0] && s_full[st][1])) {
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
    };
    /* x^T (keys x this warpgroup's queries) -> tile t as [query][key] rows of 64 keys, this
     * warpgroup's HQ query rows from wg HQ */
    auto store_t = [&](const float *x, unsigned char *tile) {
        burst_wg_store_t<T, HQ>(tile + wg * HQ * 128, x);
    };
    /* dQ chunk c (columns 64 c..) of the tile: issue q = dS K[:, chunk] (one commit group) */
    auto dq_issue = [&](float *q, int c) {
#pragma unroll
        for (int kk = 0; kk < BC / 16; kk++)
            burst_wg_ssop<T, 64, 0, 1>::run(q, burst_wg_dhi(dsk + kk * 2),
                                            burst_wg_dhi(dkt + ((c * BC * 128 + kk * 2048) >> 4)),
                                            kk > 0);
        burst_wg_commit();
    };
    /* s.dq += tau q: rows (queries) 16 warp + rq (+ 8) of tile `it`, columns 64 c + 8 n.. */
    auto dq_add = [&](const float *q, int c, int it) {
        int64_t h, i0;
        tile_at(it, &h, &i0);
        const struct burst_dq_rows rows = burst_dq_at(s, b, h, i0 + warp * 16 + rq, lane);
#pragma unroll
        for (int n = 0; n < 8; n++)
            burst_dq_red(s, rows, c * 64 + n * 8, q + 4 * n);
    };
    for (int it = 0; it < total; it++) {
        const int st = it & 1;
        tile_begin(it, st);
        burst_wg_wait<0>();
        burst_wg_pin<HQ / 2>(sc);
        burst_wg_pin<HQ / 2>(dp);
        dsoft(st);
        store_t(sc, sp);
        store_t(dp, sds);
        burst_fence_proxy_async();
        __syncthreads(); /* both halves of P^T and dS^T */
        burst_wg_fence();
        burst_wg_mn<T, D, BQ>(acc, dxa, dxb + st * DSTAGE);
        if constexpr (DQ) {
            float qa[32], qb[32];
            const int ca = wg, cb = wg + 2; /* chunks wg, wg + 2 (PN = 3: one for warpgroup 1) */
            dq_issue(qa, ca);
            if (cb < PN) {
                dq_issue(qb, cb);
                burst_wg_wait<1>();
            } else {
                burst_wg_wait<0>();
            }
            burst_wg_pin<32>(qa);
            dq_add(qa, ca, it);
            if (cb < PN) {
                burst_wg_wait<0>();
                burst_wg_pin<32>(qb);
                dq_add(qb, cb, it);
            }
        }
        burst_wg_wait<0>();
        burst_wg_pin<D / 2>(acc);
    }

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
                if (wg == 0) /* the values an fp32 accumulator starting at 0 would hold */
                    burst_final_pair(s.dv_out, b, j, g, n * 8 + cq, 0.0f + x, 0.0f + y);
                else
                    burst_final_pair(s.dk_out, b, j, g, n * 8 + cq, fmaf(s.scale, x, 0.0f),
                                     fmaf(s.scale, y, 0.0f));
            }
            continue;
        }
        float *dst = wg == 0 ? s.dv : s.dk;
        if (!dst)
            continue;
        dst += ((b * s.nk + j) * s.hkv + g) * s.d;
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            if (n * 8 >= s.d)
                break;
            float2 *p2 = (float2 *)(dst + n * 8 + cq), x = *p2;
            x.x = wg == 0 ? x.x + acc[4 * n + 2 * u] : fmaf(s.scale, acc[4 * n + 2 * u], x.x);
            x.y =
                wg == 0 ? x.y + acc[4 * n + 2 * u + 1] : fmaf(s.scale, acc[4 * n + 2 * u + 1], x.y);
            *p2 = x;
        }
    }
#endif
}

template <typename T, int D> static int burst_ww_run(const struct burst_cuda_step *s)
{
    const bool kv = s->dk || s->dv || s->dk_out.data;
    const bool fused = s->dq && s->dq_atomic && kv;
    if (kv) {
        const int64_t blocks = s->batch * s->hkv * ((s->nk + WW_BC - 1) / WW_BC);
        if (fused)
            burst_ww_bwd<T, D, true>
                <<<(unsigned)blocks, 256, burst_ww_smem<D>(), cudaStreamPerThread>>>(*s);
        else
            burst_ww_bwd<T, D, false>
                <<<(unsigned)blocks, 256, burst_ww_smem<D>(), cudaStreamPerThread>>>(*s);
        const cudaError_t e = cudaGetLastError();
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
    cudaError_t e =
        cudaFuncSetAttribute(burst_ww_bwd<T, D, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)burst_ww_smem<D>());
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(burst_ww_bwd<T, D, true>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)burst_ww_smem<D>());
    return e;
}

extern "C" size_t burst_cuda_sm90_wide_smem(int d)
{
    return burst_cuda_dclass(d) == 192 ? burst_ww_smem<192>() : burst_ww_smem<256>();
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
