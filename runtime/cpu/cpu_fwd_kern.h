/*
 * runtime/cpu/cpu_fwd_kern.h - the forward work item (TEMPLATE, compiled once per variant in an
 * object of its own, cpu_items.h; cpu_fwd.c runs it).
 *
 * One item = (batch b, query head h, Q tile of BR rows). Q is loaded once, transposed and
 * pre-scaled by tau * log2(e) (Qt[c][i]); K/V tiles of BC rows stream through:
 *   St = K Qt              [BC x BR], scores in log2 units, key-major
 *   soft-capping           St = c tanh(St / c) when the plan has a cap (one test per tile)
 *   mask partial tiles     St = -inf outside each query's key interval
 *   m' = max(m, colmax St), alpha = 2^(m - m'), P = 2^(St - m'), l = alpha l + colsum P
 *   O  = alpha O + P^T V   [BR x d]
 * With bf16 Q, K and V the avx512bf16 and avx512amx variants take St and P^T V on bf16 dot
 * products (cpu_tile_dpbf16.h: P rounded to bf16 for the second, l summed from the fp32 P).
 * (with m' = -inf treated as 0 so fully masked rows stay exactly 0). At the end of the block
 * the tile's (O / l, lse) is merged into (o_acc, lse_acc) with the log-sum-exp rule; rows with
 * no allowed key are not touched. fwd_final (job->o set) writes (O / l, lse) to the caller's o
 * and lse instead, rounded as that merge into fresh accumulators and copy() would round them,
 * and O = 0, lse = -inf for rows with no allowed key.
 */
#include "cpu_simd.h"
#include "cpu_tile.h"

#undef fwd_item
#undef fwd_lanes
#define fwd_item KFN(burst_cpu_fwd_item)
#define fwd_lanes KFN(burst_cpu_fwd_lanes)

const int fwd_lanes = VL; /* the variant's fp32 lanes (burst_cpu_isa_lanes) */

#undef fwd_dp
#undef fwd_final_rows
#undef fwd_load_q
#undef fwd_load_kv
#undef fwd_scores
#undef fwd_pv
#undef fwd_softmax
#define fwd_pv KFN(fwd_pv)
#define fwd_softmax KFN(fwd_softmax)
#define fwd_dp KFN(fwd_dp)
#define fwd_final_rows KFN(fwd_final_rows)
#define fwd_load_q KFN(fwd_load_q)
#define fwd_load_kv KFN(fwd_load_kv)
#define fwd_scores KFN(fwd_scores)

/* Are the products taken on bf16 dot products (avx512bf16 or avx512amx, bf16 Q, K and V)? */
KATTR int fwd_dp(const struct burst_fwd_args *a)
{
#ifdef BURST_CPU_DPBF16
    return a->q->dtype == BURST_DTYPE_BF16 && a->k->dtype == BURST_DTYPE_BF16 &&
           a->v->dtype == BURST_DTYPE_BF16;
#else
    (void)a;
    return 0;
#endif
}

/* The Q tile: Qt = mul Q^T in fp32 (zero columns past rows), or Q's bf16 pairs (dp); sc->o is
 * left holding scratch values. */
KATTR void fwd_load_q(struct burst_cpu_fwd_scratch *sc, const struct burst_tensor *q, int64_t b,
                      int64_t i0, int64_t rows, int64_t h, int64_t d, int64_t BR, float mul, int dp)
{
#ifdef BURST_CPU_DPBF16
    if (dp) {
        pack_q_pairs(sc->qp, q, b, i0, rows, h, BR);
        return;
    }
#endif
    (void)dp;
    /* through sc->o (the caller clears it afterwards) in blocks of 16 rows, so that each
     * block's transposed columns are whole cache lines of Qt: storing a row's d values as
     * they load, one per column, keeps d lines BR floats apart in flight and is several
     * times slower */
    for (int64_t i = 0; i < rows; i += 16) {
        int64_t n = burst_cpu_min64(16, rows - i);
        for (int64_t r = 0; r < n; r++) {
            if (i + r + 16 < rows) /* the next block on its way */
                burst_cpu_prefetch_view(q, b, i0 + i + r + 16, 1, h);
            load_row(sc->o + r * d, burst_cpu_row(q, b, i0 + i + r, h), q->dtype, d, mul);
        }
        for (int64_t c = 0; c < d; c++)
            for (int64_t r = 0; r < n; r++)
                sc->qt[c * BR + i + r] = sc->o[r * d + c];
    }
    for (int64_t c = 0; c < d && rows < BR; c++)
        memset(sc->qt + c * BR + rows, 0, sizeof(float) * (size_t)(BR - rows));
}

/* K/V rows [j0, j0 + cnt) in fp32, zero padded to jn rows; when dp, K as bf16 rows and V as
 * pairs of adjacent rows instead. */
KATTR void fwd_load_kv(struct burst_cpu_fwd_scratch *sc, const struct burst_fwd_args *a, int64_t b,
                       int64_t j0, int64_t cnt, int64_t jn, int64_t g, int dp)
{
    const int64_t d = a->k->shape[3];
#ifdef BURST_CPU_DPBF16
    if (dp) {
        load_k_bf16(sc->kh, a->k, b, j0, cnt, jn, g);
        pack_row_pairs(sc->vp, a->v, b, j0, cnt, jn / 2, g);
        return;
    }
#endif
    for (int64_t j = 0; j < cnt; j++) {
        load_row(sc->k + j * d, burst_cpu_row(a->k, b, j0 + j, g), a->k->dtype, d, 1.0f);
        load_row(sc->v + j * d, burst_cpu_row(a->v, b, j0 + j, g), a->v->dtype, d, 1.0f);
    }
    if (jn > cnt) {
        memset(sc->k + cnt * d, 0, sizeof(float) * (size_t)((jn - cnt) * d));
        memset(sc->v + cnt * d, 0, sizeof(float) * (size_t)((jn - cnt) * d));
    }
}

/* St = K Qt [jn x BR], in log2 units (Qt pre-scaled by mul, or mul applied after the bf16 dot
 * products), for the queries [ra, rb) (a multiple of VL of them). */
KATTR void fwd_scores(struct burst_cpu_fwd_scratch *sc, int64_t jn, int64_t d, int64_t BR,
                      int64_t ra, int64_t rb, float mul, int dp)
{
#ifdef BURST_CPU_DPBF16
    if (dp) {
        gemm_dp(jn, rb - ra, d / 2, (const uint32_t *)(const void *)sc->kh, d / 2, 1, sc->qp + ra,
                BR, sc->s + ra, BR, BURST_CPU_STORE, mul, NULL);
        return;
    }
#endif
    (void)mul, (void)dp;
    gemm(jn, rb - ra, d, sc->k, d, 1, sc->qt + ra, BR, sc->s + ra, BR, BURST_CPU_STORE, NULL);
}

/* The online softmax of the tile's scores St [jn x BR]: m, alpha and l per query, and P in place
 * of St, or (dp) P rounded to bf16 pairs of adjacent keys in sc->pp (l sums the fp32 P), for the
 * queries [ra, rb); the others keep m, l and O as they are (they have no key in the tile). */
KATTR void fwd_softmax(struct burst_cpu_fwd_scratch *sc, int64_t jn, int64_t BR, int64_t ra,
                       int64_t rb, int dp)
{
    for (int64_t i = ra; i < rb; i += VL) {
        vf mx = vf_set1(-(float)INFINITY);
        for (int64_t j = 0; j < jn; j++)
            mx = vf_max(mx, vf_load(sc->s + j * BR + i));
        vf mold = vf_load(sc->m + i);
        vf mnew = vf_max(mold, mx);
        vf muse = vf_zero_if_neginf(mnew);
        vf alpha = vf_exp2(vf_sub(mold, muse));
        vf sum = vf_zero();
        for (int64_t j = 0; j < jn; j += 2) { /* jn is a multiple of MR: even */
            float *s = sc->s + j * BR + i;
            vf p0 = vf_exp2(vf_sub(vf_load(s), muse));
            vf p1 = vf_exp2(vf_sub(vf_load(s + BR), muse));
#ifdef BURST_CPU_DPBF16
            if (dp)
                _mm512_storeu_si512((void *)(sc->pp + j / 2 * BR + i), pair_bf16(p0, p1));
#endif
            if (!dp) {
                vf_store(s, p0);
                vf_store(s + BR, p1);
            }
            sum = vf_add(vf_add(sum, p0), p1);
        }
        vf_store(sc->m + i, mnew);
        vf_store(sc->alpha + i, alpha);
        vf_store(sc->l + i, vf_fma(vf_load(sc->l + i), alpha, sum));
    }
}

/* O = alpha O + P^T V over the jn keys of the tile: P in sc->s (key-major), or (dp) its bf16
 * pairs of adjacent keys in sc->pp, multiplied on bf16 dot products; queries [ra, rb). */
KATTR void fwd_pv(struct burst_cpu_fwd_scratch *sc, int64_t jn, int64_t d, int64_t BR, int64_t ra,
                  int64_t rb, int dp)
{
#ifdef BURST_CPU_DPBF16
    if (dp) {
        gemm_dp(rb - ra, d, jn / 2, sc->pp + ra, 1, BR, sc->vp, d, sc->o + ra * d, d,
                BURST_CPU_SCALE, 1.0f, sc->alpha + ra);
        return;
    }
#endif
    (void)dp;
    gemm(rb - ra, d, jn, sc->s + ra, 1, BR, sc->v, d, sc->o + ra * d, d, BURST_CPU_SCALE,
         sc->alpha + ra);
}

/* fwd_final: rows [i0, i0 + rows) of head h written to the caller's o (its dtype, any strides)
 * and lse: O / l and m + log2 l, rounded as fwd_step into fresh accumulators (0, -inf) and
 * copy() round them; O = 0 and lse = -inf where a row has no key (sc NULL: none has). */
KATTR void fwd_final_rows(const struct burst_cpu_fwd_job *job,
                          const struct burst_cpu_fwd_scratch *sc, int64_t b, int64_t h, int64_t i0,
                          int64_t rows)
{
    const int64_t d = job->dim.d, nq = job->dim.nq;
    const struct burst_tensor *o = job->o;
    float *lse_row = job->lse + (b * job->dim.hq + h) * nq + i0;
    float tmp[64]; /* a chunk of a half-precision row, in fp32 */
    for (int64_t i = 0; i < rows; i++) {
        void *orow = (void *)burst_cpu_row(o, b, i0 + i, h);
        if (!sc || sc->l[i] == 0.0f) { /* as the accumulators' fill leaves it */
            memset(orow, 0, (size_t)d * (o->dtype == BURST_DTYPE_FP32 ? 4 : 2));
            lse_row[i] = -(float)INFINITY;
            continue;
        }
        const float *ot = sc->o + i * d;
        vf cn = vf_set1((float)(1.0 / (double)sc->l[i]));
        if (o->dtype == BURST_DTYPE_FP32) {
            for (int64_t c = 0; c < d; c += VL) /* d is a multiple of VL (burst_cpu_call_isa) */
                vf_store((float *)orow + c, vf_mul(cn, vf_load(ot + c)));
        } else {
            for (int64_t c0 = 0; c0 < d; c0 += 64) {
                const int64_t n = burst_cpu_min64(64, d - c0);
                for (int64_t c = 0; c < n; c += VL)
                    vf_store(tmp + c, vf_mul(cn, vf_load(ot + c0 + c)));
                uint16_t *h16 = (uint16_t *)orow + c0;
                for (int64_t c = 0; c < n; c++)
                    h16[c] = o->dtype == BURST_DTYPE_FP16 ? burst_cpu_f32_to_f16(tmp[c])
                                                          : burst_cpu_f32_to_bf16(tmp[c]);
            }
        }
        lse_row[i] = (float)(((double)sc->m[i] + log2((double)sc->l[i])) * 0.69314718055994530942);
    }
}

KENTRY void fwd_item(void *ctx, int64_t item, void *scratch)
{
    const struct burst_cpu_fwd_job *job = ctx;
    const struct burst_fwd_args *a = job->a;
    const int64_t d = job->dim.d, nq = job->dim.nq, nk = job->dim.nk, hq = job->dim.hq;
    const int dp = fwd_dp(a);
    const int64_t BR = job->br, BC = dp ? BURST_CPU_FWD_BC_DP : BURST_CPU_FWD_BC;

    /* heaviest tiles first (causal): tile index runs backwards */
    int64_t t = job->nqt - 1 - item % job->nqt;
    int64_t h = (item / job->nqt) % hq;
    int64_t b = item / job->nqt / hq;
    int64_t g = h / job->dim.group;
    int64_t i0 = t * BR;
    int64_t rows = burst_cpu_min64(BR, nq - i0);

    struct burst_cpu_fwd_scratch sc = burst_cpu_fwd_layout(scratch, d, BR);
    struct burst_cpu_rows r =
        burst_cpu_intervals(&a->qpos, &a->kpos, a->mask, nk, i0, rows, BR, sc.kb, sc.ke);
    if (r.kmin >= r.kmax) {
        if (job->o)
            fwd_final_rows(job, NULL, b, h, i0, rows);
        return;
    }

    const float qmul = a->scale * 1.4426950408889634f;
    fwd_load_q(&sc, a->q, b, i0, rows, h, d, BR, dp ? 1.0f : qmul, dp);
    memset(sc.o, 0, sizeof(float) * (size_t)(BR * d));
    for (int64_t i = 0; i < BR; i++) {
        sc.m[i] = -(float)INFINITY;
        sc.l[i] = 0.0f;
    }

    for (int64_t j0 = r.kmin, j1; j0 < r.kmax; j0 = j1) {
        j1 = burst_cpu_ktile_next(&a->kpos, a->mask, sc.kb, sc.ke, rows, j0, BC, r.kmax,
                                  BURST_CPU_MR, VL, 1);
        int64_t cnt = j1 - j0;
        int64_t jn = (cnt + BURST_CPU_MR - 1) / BURST_CPU_MR * BURST_CPU_MR;
        /* every row allows every key, and no padding key to mask */
        int full = cnt == jn && j0 >= r.kbmax && j1 <= r.kemin;
        if (!full && !burst_cpu_any_allowed(sc.kb, sc.ke, rows, j0, j1))
            continue;

        fwd_load_kv(&sc, a, b, j0, cnt, jn, g, dp);

        if (j1 < r.kmax) { /* next tile on its way while this one computes */
            int64_t nn = burst_cpu_min64(BC, r.kmax - j1);
            burst_cpu_prefetch_view(a->k, b, j1, nn, g);
            burst_cpu_prefetch_view(a->v, b, j1, nn, g);
        }
        /* the queries with a key in the tile: a run of rows, both ends of the rows' intervals
         * increasing with the row (a document boundary inside the Q tile leaves the rows past
         * it out of the earlier document's key tiles); whole vectors of rows */
        int64_t ra, rb;
        burst_cpu_row_span(sc.kb, sc.ke, rows, j0, j1, VL, BR, &ra, &rb);
        fwd_scores(&sc, jn, d, BR, ra, rb, qmul, dp);
        if (a->softcap > 0.0f)
            cap_tile(sc.s, BR, ra, rb, jn, a->softcap * 1.4426950408889634f);
        if (!full)
            mask_tile(sc.s, BR, ra, rb, cnt, jn, j0, sc.kb, sc.ke, sc.kbf, sc.kef);

        fwd_softmax(&sc, jn, BR, ra, rb, dp);
        fwd_pv(&sc, jn, d, BR, ra, rb, dp);
    }

    if (job->o) {
        fwd_final_rows(job, &sc, b, h, i0, rows);
        return;
    }
    /* fused merge into the running (o_acc, lse_acc) */
    const float *lse_row = a->lse_acc + (b * hq + h) * nq + i0;
    for (int64_t i = 0; i < rows; i++) {
        if (i + 8 < rows) /* a later row of o_acc on its way */
            burst_cpu_prefetch(a->o_acc + ((b * nq + i0 + i + 8) * hq + h) * d, 4, 0, 0, 1, d, 1);
        /* l == 0 exactly when the row has no allowed key in this block (every allowed key
         * contributes 2^0 = 1 at the row maximum): leave the row untouched. A NaN or inf input
         * makes l NaN, which falls through and propagates instead of masquerading as masked. */
        if (sc.l[i] == 0.0f)
            continue;
        double lr = ((double)sc.m[i] + log2((double)sc.l[i])) * 0.69314718055994530942;
        double lo = (double)lse_row[i];
        float *orow = a->o_acc + ((b * nq + i0 + i) * hq + h) * d;
        const float *ot = sc.o + i * d;
        double ln;
        if (lo == -INFINITY) {
            ln = lr;
            vf cn = vf_set1((float)(1.0 / (double)sc.l[i]));
            for (int64_t c = 0; c < d; c += VL)
                vf_store(orow + c, vf_mul(cn, vf_load(ot + c)));
        } else {
            ln = (lo > lr ? lo : lr) + log1p(exp(-fabs(lo - lr)));
            vf co = vf_set1((float)exp(lo - ln));
            vf cn = vf_set1((float)(exp(lr - ln) / (double)sc.l[i]));
            for (int64_t c = 0; c < d; c += VL)
                vf_store(orow + c, vf_fma(co, vf_load(orow + c), vf_mul(cn, vf_load(ot + c))));
        }
        a->lse_acc[(b * hq + h) * nq + i0 + i] = (float)ln;
    }
}
