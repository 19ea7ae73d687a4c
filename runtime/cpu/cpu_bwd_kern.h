/*
 * runtime/cpu/cpu_bwd_kern.h - the backward work items (TEMPLATE, compiled once per variant in an
 * object of its own, cpu_items.h; cpu_bwd.c runs them).
 *
 * The unit of work is a pair (Q tile of BR rows of head h, K tile J of BC rows of kv head g):
 *   St  = K Qt                   (Qt pre-scaled by tau log2 e; log2 units, key-major)
 *                                (soft-capped: St = c tanh(St / c), and dSt below gets the
 *                                factor 1 - (St / c)^2; one test per tile)
 *   Pt  = 2^(St - lse log2 e)    (masked entries -> 0)
 *   dPt = V dOt
 *   dSt = tau Pt (dPt - D)
 *   dV[J] += Pt dO,  dK[J] += dSt Q,  dQ[tile] += dSt^T K   (added straight into the outputs)
 * A Q tile's K tiles run from its first allowed key in steps of BC, each clipped to the end of
 * a document and halved on a causal diagonal (burst_cpu_ktile_next). Every output element receives its contributions in one fixed
 * order: dQ rows over those K tiles in increasing order; dK/dV rows over (head of the group,
 * Q tile) in increasing order. A key row's dK/dV term from one Q tile is a sum over the tile's
 * rows that does not depend on which K tile holds the key (rows without the key add exact
 * zeros), so bwd_item_kv may take K tiles on the fixed grid of BC. The three schedules below
 * keep that order and compute a pair with the same code, so their results are bitwise
 * identical and independent of the thread count:
 *   bwd_item_group  (b, g): every pair of the group, dQ, dK and dV at once
 *   bwd_item_kv     (b, g, J): the Q tiles of K tile J = [J BC, (J + 1) BC), dK and dV only
 *   bwd_item_q      (b, h, Q tile): the pairs of one Q tile, dQ only
 * In the avx512bf16 and avx512amx variants with bf16 Q, K, V and dO all five products run on
 * bf16 dot products (cpu_tile_dpbf16.h): St and dPt from the inputs' own bits, the dV, dK and dQ
 * products with Pt and dSt rounded to bf16 and fp32 accumulation.
 */
#include "cpu_simd.h"
#include "cpu_tile.h"

#undef bwd_dp
#undef bwd_load_q
#undef bwd_load_k
#undef bwd_pair
#undef bwd_capped_ds
#define bwd_capped_ds KFN(bwd_capped_ds)
#undef bwd_grads_dp
#define bwd_grads_dp KFN(bwd_grads_dp)
#undef bwd_product
#undef bwd_prefetch_k
#undef bwd_pair_live
#undef bwd_item_group
#undef bwd_item_kv
#undef bwd_item_q
#define bwd_dp KFN(bwd_dp)
#define bwd_load_q KFN(bwd_load_q)
#define bwd_load_k KFN(bwd_load_k)
#define bwd_pair KFN(bwd_pair)
#define bwd_product KFN(bwd_product)
#define bwd_prefetch_k KFN(bwd_prefetch_k)
#define bwd_pair_live KFN(bwd_pair_live)
#define bwd_item_group KFN(burst_cpu_bwd_group)
#define bwd_item_kv KFN(burst_cpu_bwd_kv)
#define bwd_item_q KFN(burst_cpu_bwd_q)

/* Are the products taken on bf16 dot products (avx512bf16 or avx512amx, bf16 Q, K, V, dO)? */
KATTR int bwd_dp(const struct burst_bwd_args *a)
{
#ifdef BURST_CPU_DPBF16
    return a->q->dtype == BURST_DTYPE_BF16 && a->k->dtype == BURST_DTYPE_BF16 &&
           a->v->dtype == BURST_DTYPE_BF16 && a->dout->dtype == BURST_DTYPE_BF16;
#else
    (void)a;
    return 0;
#endif
}

/* Q side of tile t of head h: Qt (scaled), Q, dOt, dO, lse2, D; when bwd_dp, Q and dO as bf16
 * pairs along d (qp, dop) and of adjacent rows (qv, dov) instead. Intervals already in sc. */
KATTR void bwd_load_q(const struct burst_cpu_bwd_job *job, struct burst_cpu_bwd_scratch *sc,
                      int64_t b, int64_t h, int64_t i0, int64_t rows)
{
    const struct burst_bwd_args *a = job->a;
    const int64_t d = job->dim.d, nq = job->dim.nq, BR = job->br;
    const float qmul = a->scale * 1.4426950408889634f;
    const int dp = bwd_dp(a);
#ifdef BURST_CPU_DPBF16
    if (dp) {
        pack_q_pairs(sc->qp, a->q, b, i0, rows, h, BR);
        pack_q_pairs(sc->dop, a->dout, b, i0, rows, h, BR);
        pack_row_pairs(sc->qv, a->q, b, i0, rows, BR / 2, h);
        pack_row_pairs(sc->dov, a->dout, b, i0, rows, BR / 2, h);
    }
#endif
    /* Q and dO row-major, then transposed a block of 16 rows at a time, so that each block's
     * columns are whole cache lines of Qt and dOt */
    for (int64_t i0b = 0; i0b < rows && !dp; i0b += 16) {
        int64_t n = burst_cpu_min64(16, rows - i0b);
        for (int64_t i = i0b; i < i0b + n; i++) {
            if (i + 16 < rows) { /* the next block on its way */
                burst_cpu_prefetch_view(a->q, b, i0 + i + 16, 1, h);
                burst_cpu_prefetch_view(a->dout, b, i0 + i + 16, 1, h);
            }
            load_row(sc->qn + i * d, burst_cpu_row(a->q, b, i0 + i, h), a->q->dtype, d, 1.0f);
            load_row(sc->don + i * d, burst_cpu_row(a->dout, b, i0 + i, h), a->dout->dtype, d,
                     1.0f);
        }
        for (int64_t c = 0; c < d; c++)
            for (int64_t i = i0b; i < i0b + n; i++) {
                sc->qt[c * BR + i] = sc->qn[i * d + c] * qmul;
                sc->dot[c * BR + i] = sc->don[i * d + c];
            }
    }
    for (int64_t i = 0; i < rows; i++) {
        float lse = a->lse[(b * job->dim.hq + h) * nq + i0 + i];
        /* a row without any key (lse = -inf) gets P = 0 */
        sc->lse2[i] = lse == -(float)INFINITY ? (float)INFINITY : lse * 1.4426950408889634f;
        sc->dlt[i] = a->delta[(b * job->dim.hq + h) * nq + i0 + i];
    }
    for (int64_t i = rows; i < BR; i++) {
        sc->lse2[i] = (float)INFINITY;
        sc->dlt[i] = 0.0f;
    }
    for (int64_t c = 0; c < d && rows < BR && !dp; c++) {
        memset(sc->qt + c * BR + rows, 0, sizeof(float) * (size_t)(BR - rows));
        memset(sc->dot + c * BR + rows, 0, sizeof(float) * (size_t)(BR - rows));
    }
}

/* K side of K tile starting at j0 (cnt rows, zero padded to jn): K and V in fp32; when bwd_dp,
 * K and V as bf16 rows (kh, vh) and K as pairs of adjacent rows (kv) instead. */
KATTR void bwd_load_k(const struct burst_cpu_bwd_job *job, struct burst_cpu_bwd_scratch *sc,
                      int64_t b, int64_t g, int64_t j0, int64_t cnt, int64_t jn)
{
    const struct burst_bwd_args *a = job->a;
    const int64_t d = job->dim.d;
    const int dp = bwd_dp(a);
#ifdef BURST_CPU_DPBF16
    if (dp) {
        load_k_bf16(sc->kh, a->k, b, j0, cnt, jn, g);
        load_k_bf16(sc->vh, a->v, b, j0, cnt, jn, g);
        pack_row_pairs(sc->kv, a->k, b, j0, cnt, jn / 2, g);
        return;
    }
#endif
    (void)dp;
    for (int64_t j = 0; j < cnt; j++) {
        load_row(sc->k + j * d, burst_cpu_row(a->k, b, j0 + j, g), a->k->dtype, d, 1.0f);
        load_row(sc->v + j * d, burst_cpu_row(a->v, b, j0 + j, g), a->v->dtype, d, 1.0f);
    }
    if (jn > cnt) {
        memset(sc->k + cnt * d, 0, sizeof(float) * (size_t)((jn - cnt) * d));
        memset(sc->v + cnt * d, 0, sizeof(float) * (size_t)((jn - cnt) * d));
    }
}

/* Columns [ra, rb) of C [jn x BR] = A B^T of a K-side tile A (jn x d) and a Q-side tile B
 * (BR x d): on bf16 dot products of ah and bp, times mul, when dp; else in fp32 from af and the
 * transposed bt, whose scale is already in bt (mul is then unused). */
KATTR void bwd_product(int dp, int64_t jn, int64_t BR, int64_t ra, int64_t rb, int64_t d,
                       const uint16_t *ah, const uint32_t *bp, const float *af, const float *bt,
                       float *c, float mul)
{
#ifdef BURST_CPU_DPBF16
    if (dp) {
        gemm_dp(jn, rb - ra, d / 2, (const uint32_t *)(const void *)ah, d / 2, 1, bp + ra, BR,
                c + ra, BR, BURST_CPU_STORE, mul, NULL);
        return;
    }
#endif
    (void)dp, (void)ah, (void)bp, (void)mul;
    gemm(jn, rb - ra, d, af, d, 1, bt + ra, BR, c + ra, BR, BURST_CPU_STORE, NULL);
}

#ifdef BURST_CPU_DPBF16
/* dV += Pt dO, dK += dSt Q, dQ += dSt^T K (outputs NULL when not wanted; ldkv and ldq their row
 * strides) on bf16 dot products, with Pt (sc->s) and dSt (sc->ds) rounded to bf16: the
 * reductions over the tile's rows run over (rows + 1) / 2 pairs (the odd padding row has P = 0,
 * dS = 0 and zero Q, dO), those over its keys over (cnt + 1) / 2 (padding keys alike). */
KATTR void bwd_grads_dp(struct burst_cpu_bwd_scratch *sc, int64_t BR, int64_t d, int64_t rows,
                        int64_t cnt, int64_t jn, float *dv, float *dk, float *dq, int64_t ldkv,
                        int64_t ldq)
{
    const int64_t r2 = (rows + 1) / 2, c2 = (cnt + 1) / 2;
    if (dv) {
        round_rows(sc->ph, sc->s, jn, BR);
        gemm_dp(cnt, d, r2, (const uint32_t *)(const void *)sc->ph, BR / 2, 1, sc->dov, d, dv, ldkv,
                BURST_CPU_ADD, 1.0f, NULL);
    }
    if (dk) {
        round_rows(sc->dsh, sc->ds, jn, BR);
        gemm_dp(cnt, d, r2, (const uint32_t *)(const void *)sc->dsh, BR / 2, 1, sc->qv, d, dk, ldkv,
                BURST_CPU_ADD, 1.0f, NULL);
    }
    if (dq) {
        pack_col_pairs(sc->dsp, sc->ds, jn / 2, BR);
        gemm_dp(rows, d, c2, sc->dsp, 1, BR, sc->kv, d, dq, ldq, BURST_CPU_ADD, 1.0f, NULL);
    }
}
#endif

/* Soft-capped scores: from the capped, masked St (log2 units, in sc->s) and dPt (sc->ds),
 * Pt = 2^(St - lse2) in place of St and dSt = tau Pt (dPt - D) (1 - t^2) with t = St / cap the
 * tanh of the cap (the derivative of cap tanh(s / cap)). Masked entries (St = -inf) clamp t to
 * -1: factor 0 and Pt 0, never NaN. */
KATTR void bwd_capped_ds(struct burst_cpu_bwd_scratch *sc, int64_t jn, int64_t BR, int64_t ra,
                         int64_t rb, float cap, float scale)
{
    vf tau = vf_set1(scale), rc = vf_set1(1.0f / cap), one = vf_set1(1.0f);
    for (int64_t j = 0; j < jn; j++) {
        float *s = sc->s + j * BR, *ds = sc->ds + j * BR;
        for (int64_t i = ra; i < rb; i += VL) {
            vf st = vf_load(s + i);
            vf t = vf_max(vf_set1(-1.0f), vf_mul(st, rc));
            vf p = vf_exp2(vf_sub(st, vf_load(sc->lse2 + i)));
            vf x = vf_sub(vf_load(ds + i), vf_load(sc->dlt + i));
            vf_store(s + i, p);
            vf_store(ds + i, vf_mul(vf_mul(vf_mul(p, x), tau), vf_sub(one, vf_mul(t, t))));
        }
    }
}

KATTR void bwd_pair(const struct burst_cpu_bwd_job *job, struct burst_cpu_bwd_scratch *sc,
                    const struct burst_cpu_rows *r, int64_t b, int64_t h, int64_t i0, int64_t rows,
                    int64_t j0, int64_t cnt, int want_dq, int want_dkv)
{
    const struct burst_bwd_args *a = job->a;
    const int64_t d = job->dim.d, BR = job->br;
    const int64_t hq = job->dim.hq, hkv = job->dim.hkv, g = h / job->dim.group;
    const int64_t jn = (cnt + BURST_CPU_MR - 1) / BURST_CPU_MR * BURST_CPU_MR;
    /* every row allows every key, and no padding key to mask */
    const int full = cnt == jn && j0 >= r->kbmax && j0 + cnt <= r->kemin;
    const int want_ds = want_dq || (want_dkv && a->dk);

    const int dp = bwd_dp(a);
    const float cap = a->softcap * 1.4426950408889634f; /* in the log2 units of St */
    /* the rows with a key in the tile, whole vectors of them (as in the forward): the others
     * add nothing to any gradient (dp: their P and dS are set to 0, and the products over the
     * tile's rows take every row) */
    int64_t ra, rb;
    burst_cpu_row_span(sc->kb, sc->ke, rows, j0, j0 + cnt, VL, BR, &ra, &rb);
    const int64_t rr = burst_cpu_min64(rb, rows) - ra; /* real rows of the run */
    bwd_product(dp, jn, BR, ra, rb, d, sc->kh, sc->qp, sc->k, sc->qt, sc->s,
                a->scale * 1.4426950408889634f);
    if (cap > 0.0f)
        cap_tile(sc->s, BR, ra, rb, jn, cap);
    if (!full)
        mask_tile(sc->s, BR, ra, rb, cnt, jn, j0, sc->kb, sc->ke, sc->kbf, sc->kef);
    if (cap > 0.0f && want_ds) {
        bwd_product(dp, jn, BR, ra, rb, d, sc->vh, sc->dop, sc->v, sc->dot, sc->ds, 1.0f);
        bwd_capped_ds(sc, jn, BR, ra, rb, cap, a->scale);
    } else {
        for (int64_t j = 0; j < jn; j++) {
            float *s = sc->s + j * BR;
            for (int64_t i = ra; i < rb; i += VL)
                vf_store(s + i, vf_exp2(vf_sub(vf_load(s + i), vf_load(sc->lse2 + i))));
        }
    }
    if (want_ds && !(cap > 0.0f)) {
        bwd_product(dp, jn, BR, ra, rb, d, sc->vh, sc->dop, sc->v, sc->dot, sc->ds, 1.0f);
        vf tau = vf_set1(a->scale);
        for (int64_t j = 0; j < jn; j++) {
            float *p = sc->s + j * BR, *ds = sc->ds + j * BR;
            for (int64_t i = ra; i < rb; i += VL) {
                vf x = vf_sub(vf_load(ds + i), vf_load(sc->dlt + i));
                vf_store(ds + i, vf_mul(vf_mul(vf_load(p + i), x), tau));
            }
        }
    }
    float *dv = want_dkv && a->dv ? a->dv + ((b * job->dim.nk + j0) * hkv + g) * d : NULL;
    float *dk = want_dkv && a->dk ? a->dk + ((b * job->dim.nk + j0) * hkv + g) * d : NULL;
    float *dq = want_dq ? a->dq + ((b * job->dim.nq + i0) * hq + h) * d : NULL;
#ifdef BURST_CPU_DPBF16
    if (dp) {
        for (int64_t j = 0; j < jn && (ra > 0 || rb < BR); j++) {
            float *rows_of[2] = {sc->s + j * BR, want_ds ? sc->ds + j * BR : NULL};
            for (int k = 0; k < 2 && rows_of[k]; k++) {
                memset(rows_of[k], 0, sizeof(float) * (size_t)ra);
                memset(rows_of[k] + rb, 0, sizeof(float) * (size_t)(BR - rb));
            }
        }
        bwd_grads_dp(sc, BR, d, rows, cnt, jn, dv, dk, dq, hkv * d, hq * d);
        return;
    }
#endif
    if (dv)
        gemm(cnt, d, rr, sc->s + ra, BR, 1, sc->don + ra * d, d, dv, hkv * d, BURST_CPU_ADD, NULL);
    if (dk)
        gemm(cnt, d, rr, sc->ds + ra, BR, 1, sc->qn + ra * d, d, dk, hkv * d, BURST_CPU_ADD, NULL);
    if (dq)
        gemm(rr, d, cnt, sc->ds + ra, 1, BR, sc->k, d, dq + ra * hq * d, hq * d, BURST_CPU_ADD,
             NULL);
}

/* Start loading K tile at j0 (and its dK/dV rows when with_dkv) while the current one runs. */
KATTR void bwd_prefetch_k(const struct burst_cpu_bwd_job *job, int64_t b, int64_t g, int64_t j0,
                          int64_t kmax, int with_dkv)
{
    const struct burst_bwd_args *a = job->a;
    if (j0 >= kmax)
        return;
    int64_t n = burst_cpu_min64(BURST_CPU_BWD_BC, job->dim.nk - j0), d = job->dim.d;
    int64_t hkv = job->dim.hkv;
    burst_cpu_prefetch_view(a->k, b, j0, n, g);
    burst_cpu_prefetch_view(a->v, b, j0, n, g);
    if (with_dkv && a->dk)
        burst_cpu_prefetch(a->dk + (b * job->dim.nk * hkv + g) * d, 4, hkv * d, j0, n, d, 1);
    if (with_dkv && a->dv)
        burst_cpu_prefetch(a->dv + (b * job->dim.nk * hkv + g) * d, 4, hkv * d, j0, n, d, 1);
}

/* Is pair (tile with summary r, K tile [j0, j0 + cnt)) non-empty? */
KATTR int bwd_pair_live(const struct burst_cpu_bwd_scratch *sc, const struct burst_cpu_rows *r,
                        int64_t rows, int64_t j0, int64_t cnt)
{
    if (r->kmin >= r->kmax || j0 >= r->kmax || j0 + cnt <= r->kmin)
        return 0;
    if (j0 >= r->kbmax && j0 + cnt <= r->kemin)
        return 1;
    return burst_cpu_any_allowed(sc->kb, sc->ke, rows, j0, j0 + cnt);
}

KENTRY void bwd_item_group(void *ctx, int64_t item, void *scratch)
{
    const struct burst_cpu_bwd_job *job = ctx;
    const struct burst_bwd_args *a = job->a;
    const int64_t BR = job->br, BC = BURST_CPU_BWD_BC;
    int64_t g = item % job->dim.hkv, b = item / job->dim.hkv;
    struct burst_cpu_bwd_scratch sc = burst_cpu_bwd_layout(scratch, job->dim.d, BR);
    for (int64_t hh = 0; hh < job->dim.group; hh++) {
        int64_t h = g * job->dim.group + hh;
        for (int64_t t = 0; t < job->nqt; t++) {
            int64_t i0 = t * BR, rows = burst_cpu_min64(BR, job->dim.nq - i0);
            struct burst_cpu_rows r = burst_cpu_intervals(&a->qpos, &a->kpos, a->mask, job->dim.nk,
                                                          i0, rows, BR, sc.kb, sc.ke);
            if (r.kmin >= r.kmax)
                continue;
            bwd_load_q(job, &sc, b, h, i0, rows);
            for (int64_t j0 = r.kmin, j1; j0 < r.kmax; j0 = j1) {
                j1 = burst_cpu_ktile_next(&a->kpos, a->mask, sc.kb, sc.ke, rows, j0, BC, r.kmax,
                                          BURST_CPU_MR, VL, !bwd_dp(a));
                int64_t cnt = j1 - j0;
                if (!bwd_pair_live(&sc, &r, rows, j0, cnt))
                    continue;
                bwd_load_k(job, &sc, b, g, j0, cnt,
                           (cnt + BURST_CPU_MR - 1) / BURST_CPU_MR * BURST_CPU_MR);
                bwd_prefetch_k(job, b, g, j1, r.kmax, 1);
                bwd_pair(job, &sc, &r, b, h, i0, rows, j0, cnt, a->dq != NULL, 1);
            }
        }
    }
}

KENTRY void bwd_item_kv(void *ctx, int64_t item, void *scratch)
{
    const struct burst_cpu_bwd_job *job = ctx;
    const struct burst_bwd_args *a = job->a;
    const int64_t BR = job->br, BC = BURST_CPU_BWD_BC;
    int64_t jt = item % job->nkt, g = item / job->nkt % job->dim.hkv;
    int64_t b = item / job->nkt / job->dim.hkv;
    int64_t j0 = jt * BC, cnt = burst_cpu_min64(BC, job->dim.nk - j0);
    struct burst_cpu_bwd_scratch sc = burst_cpu_bwd_layout(scratch, job->dim.d, BR);
    int loaded = 0;
    for (int64_t hh = 0; hh < job->dim.group; hh++) {
        int64_t h = g * job->dim.group + hh;
        for (int64_t t = 0; t < job->nqt; t++) {
            int64_t i0 = t * BR, rows = burst_cpu_min64(BR, job->dim.nq - i0);
            struct burst_cpu_rows r = burst_cpu_intervals(&a->qpos, &a->kpos, a->mask, job->dim.nk,
                                                          i0, rows, BR, sc.kb, sc.ke);
            if (!bwd_pair_live(&sc, &r, rows, j0, cnt))
                continue;
            if (!loaded) {
                bwd_load_k(job, &sc, b, g, j0, cnt,
                           (cnt + BURST_CPU_MR - 1) / BURST_CPU_MR * BURST_CPU_MR);
                loaded = 1;
            }
            bwd_load_q(job, &sc, b, h, i0, rows);
            bwd_pair(job, &sc, &r, b, h, i0, rows, j0, cnt, 0, 1);
        }
    }
}

KENTRY void bwd_item_q(void *ctx, int64_t item, void *scratch)
{
    const struct burst_cpu_bwd_job *job = ctx;
    const struct burst_bwd_args *a = job->a;
    const int64_t BR = job->br, BC = BURST_CPU_BWD_BC;
    int64_t t = job->nqt - 1 - item % job->nqt; /* heaviest (causal) first */
    int64_t h = item / job->nqt % job->dim.hq, b = item / job->nqt / job->dim.hq;
    int64_t g = h / job->dim.group;
    int64_t i0 = t * BR, rows = burst_cpu_min64(BR, job->dim.nq - i0);
    struct burst_cpu_bwd_scratch sc = burst_cpu_bwd_layout(scratch, job->dim.d, BR);
    struct burst_cpu_rows r =
        burst_cpu_intervals(&a->qpos, &a->kpos, a->mask, job->dim.nk, i0, rows, BR, sc.kb, sc.ke);
    if (r.kmin >= r.kmax)
        return;
    bwd_load_q(job, &sc, b, h, i0, rows);
    for (int64_t j0 = r.kmin, j1; j0 < r.kmax; j0 = j1) {
        j1 = burst_cpu_ktile_next(&a->kpos, a->mask, sc.kb, sc.ke, rows, j0, BC, r.kmax,
                                  BURST_CPU_MR, VL, !bwd_dp(a));
        int64_t cnt = j1 - j0;
        if (!bwd_pair_live(&sc, &r, rows, j0, cnt))
            continue;
        bwd_load_k(job, &sc, b, g, j0, cnt, (cnt + BURST_CPU_MR - 1) / BURST_CPU_MR * BURST_CPU_MR);
        bwd_prefetch_k(job, b, g, j1, r.kmax, 0);
        bwd_pair(job, &sc, &r, b, h, i0, rows, j0, cnt, 1, 0);
    }
}
