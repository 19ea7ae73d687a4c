/*
 * tests/test_merge.c - merge properties through the backend ops directly (ALGORITHM.md section 6,
 * invariant 3), on burst_cpu_backend_ops:
 *   - partials of three key blocks merged in all six orders agree to rounding (1e-6 of the
 *     tensor scale: a few fp32 merges of ~1 ulp each), and with one step over the concatenated
 *     block and the fp64 cross-attention reference (1e-5);
 *   - merging an empty partial (block fully masked for every row, by causality or by a window)
 *     leaves o_acc / lse_acc bit-identical, also on fresh accumulators (0, -inf);
 *   - rows fully masked within a block give O = 0, lse = -inf and, in the backward with that
 *     -inf lse, zero dQ rows and zero dK/dV rows for unattended keys; nothing is NaN or Inf.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "harness.h"

enum {
    B = 2,
    HQ = 4,
    HKV = 2,
    D = 40,
    NQ = 13,
    NK = 20,
    QPOS0 = 100
};

static void *be;

static int setup(void **state)
{
    (void)state;
    struct burst_context_params cp = burst_context_params_default();
    if (burst_cpu_backend_ops.core.create(&cp, &be) != BURST_OK) {
        fprintf(stderr, "cpu backend: %s\n", burst_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    burst_cpu_backend_ops.core.destroy(be);
    return 0;
}

/* A block of rows: dtype storage plus the exact values as doubles. */
struct rows {
    int64_t n, pos0;
    int heads;
    burst_dtype_t dt;
    void *x;   /* [B, n, heads, D] dtype */
    double *r; /* same, fp64 */
};

static struct rows rows_make(uint64_t *st, burst_dtype_t dt, int64_t n, int heads, int64_t pos0,
                             double amp)
{
    struct rows b = {n, pos0, heads, dt, NULL, NULL};
    const size_t cnt = (size_t)(B * n * heads * D);
    b.x = malloc(cnt * 4 + 4);
    b.r = malloc(cnt * sizeof(double) + 8);
    assert_true(b.x && b.r);
    for (size_t i = 0; i < cnt; i++) {
        b.r[i] = harness_round(dt, harness_rng_uniform(st, -amp, amp));
        harness_store(dt, b.x, i, b.r[i]);
    }
    return b;
}

static void rows_free(struct rows *b)
{
    free(b->x);
    free(b->r);
}

static struct burst_tensor rows_tensor(const struct rows *b)
{
    return burst_tensor_contiguous(b->x, b->dt, B, b->n, b->heads, D);
}

static struct burst_posmap rows_posmap(const struct rows *b)
{
    struct burst_posmap m;
    memset(&m, 0, sizeof m);
    m.nruns = 1;
    m.run[0].local0 = 0;
    m.run[0].len = b->n;
    m.run[0].global0 = b->pos0;
    m.run[0].stride = 1;
    return m;
}

static const float tau = 0.2f;

static void fwd(const struct rows *q, const struct rows *k, const struct rows *v,
                struct burst_mask mask, float *o_acc, float *lse_acc)
{
    struct burst_tensor qt = rows_tensor(q), kt = rows_tensor(k), vt = rows_tensor(v);
    struct burst_fwd_args a = {.q = &qt,
                               .k = &kt,
                               .v = &vt,
                               .qpos = rows_posmap(q),
                               .kpos = rows_posmap(k),
                               .mask = mask,
                               .scale = tau,
                               .o_acc = o_acc,
                               .lse_acc = lse_acc};
    assert_int_equal(burst_cpu_backend_ops.attn.fwd_step(be, &a), BURST_OK);
}

static void acc_init(float *o, float *lse)
{
    for (int i = 0; i < B * NQ * HQ * D; i++)
        o[i] = 0.0f;
    for (int i = 0; i < B * HQ * NQ; i++)
        lse[i] = -INFINITY;
}

/* fp64 cross attention of q against the union of key blocks (positions from pos0). */
static void xref_fwd(const struct rows *q, const struct rows *const *k, const struct rows *const *v,
                     int nblk, struct burst_mask mask, double *o, double *lse)
{
    for (int64_t b = 0; b < B; b++)
        for (int h = 0; h < HQ; h++)
            for (int64_t i = 0; i < q->n; i++) {
                const double *qi = q->r + ((b * q->n + i) * HQ + h) * D;
                double m = -INFINITY, s[256];
                int ns = 0;
                for (int t = 0; t < nblk; t++)
                    for (int64_t j = 0; j < k[t]->n; j++, ns++) {
                        s[ns] = -INFINITY;
                        if (!burst_mask_allows(mask, q->pos0 + i, k[t]->pos0 + j))
                            continue;
                        const double *kj = k[t]->r + ((b * k[t]->n + j) * HKV + h / 2) * D;
                        double dot = 0;
                        for (int c = 0; c < D; c++)
                            dot += qi[c] * kj[c];
                        s[ns] = (double)tau * dot;
                        if (s[ns] > m)
                            m = s[ns];
                    }
                double *oi = o + ((b * q->n + i) * HQ + h) * D;
                for (int c = 0; c < D; c++)
                    oi[c] = 0;
                if (m == -INFINITY) {
                    lse[(b * HQ + h) * q->n + i] = -INFINITY;
                    continue;
                }
                double sum = 0;
                for (int j = 0; j < ns; j++)
                    sum += exp(s[j] - m); /* exp(-inf) = 0 for masked keys */
                const double l = m + log(sum);
                lse[(b * HQ + h) * q->n + i] = l;
                ns = 0;
                for (int t = 0; t < nblk; t++)
                    for (int64_t j = 0; j < k[t]->n; j++, ns++) {
                        const double *vj = v[t]->r + ((b * v[t]->n + j) * HKV + h / 2) * D;
                        const double p = exp(s[ns] - l);
                        for (int c = 0; c < D; c++)
                            oi[c] += p * vj[c];
                    }
            }
}

static double scale_of(const float *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i]) && fabs(x[i]) > s)
            s = fabs(x[i]);
    return s;
}

/* max |x - y| / (|y| + S) over finite elements; -inf must match exactly */
static double rel_diff_f(const float *x, const float *y, size_t n)
{
    double S = scale_of(y, n), worst = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i]) || !isfinite(y[i])) {
            if (!(isinf(y[i]) && x[i] == y[i]))
                return INFINITY;
            continue;
        }
        double e = fabs((double)x[i] - y[i]) / (fabs(y[i]) + S);
        if (e > worst)
            worst = e;
    }
    return worst;
}

static double rel_diff_d(const float *x, const double *y, size_t n)
{
    double S = 0, worst = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(y[i]) && fabs(y[i]) > S)
            S = fabs(y[i]);
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i]) || !isfinite(y[i])) {
            if (!(isinf(y[i]) && (double)x[i] == y[i]))
                return INFINITY;
            continue;
        }
        double e = fabs(x[i] - y[i]) / (fabs(y[i]) + S);
        if (e > worst)
            worst = e;
    }
    return worst;
}

static const struct burst_mask full = {.left = BURST_POS_INF, .right = BURST_POS_INF};
static const struct burst_mask causal = {.left = BURST_POS_INF, .right = 0};
static const struct burst_mask window30 = {.left = 30, .right = BURST_POS_INF};

static void order_independence(burst_dtype_t dt, struct burst_mask mask)
{
    uint64_t st = harness_seed() ^ (uint64_t)dt * 7919u ^ (uint64_t)mask.right;
    struct rows q = rows_make(&st, dt, NQ, HQ, QPOS0, 2.0);
    struct rows k[3], v[3];
    for (int t = 0; t < 3; t++) {
        k[t] = rows_make(&st, dt, NK, HKV, 60 + NK * t, 2.0);
        v[t] = rows_make(&st, dt, NK, HKV, 60 + NK * t, 1.0);
    }
    static const int perms[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                    {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    const size_t no = (size_t)B * NQ * HQ * D, nl = (size_t)B * HQ * NQ;
    float *o[6], *lse[6];
    for (int p = 0; p < 6; p++) {
        o[p] = malloc(no * sizeof(float));
        lse[p] = malloc(nl * sizeof(float));
        assert_true(o[p] && lse[p]);
        acc_init(o[p], lse[p]);
        for (int t = 0; t < 3; t++)
            fwd(&q, &k[perms[p][t]], &v[perms[p][t]], mask, o[p], lse[p]);
        /* to rounding: each merge adds ~1 ulp per element; 1e-6 of the scale is ~16 ulps */
        if (p > 0) {
            double eo = rel_diff_f(o[p], o[0], no), el = rel_diff_f(lse[p], lse[0], nl);
            if (!(eo <= 1e-6 && el <= 1e-6))
                fail_msg("%s order %d%d%d vs 012: O differs by %.3g, lse by %.3g (seed %llu)",
                         burst_dtype_name(dt), perms[p][0], perms[p][1], perms[p][2], eo, el,
                         (unsigned long long)harness_seed());
        }
    }
    /* one step over the concatenated block and the fp64 reference */
    struct rows kc = {3 * NK, 60, HKV, dt, malloc((size_t)B * 3 * NK * HKV * D * 4), NULL};
    struct rows vc = {3 * NK, 60, HKV, dt, malloc((size_t)B * 3 * NK * HKV * D * 4), NULL};
    assert_true(kc.x && vc.x);
    const size_t es = burst_dtype_size(dt), row = (size_t)HKV * D * es;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < 3; t++) {
            memcpy((char *)kc.x + ((size_t)b * 3 * NK + (size_t)t * NK) * row,
                   (char *)k[t].x + (size_t)b * NK * row, NK * row);
            memcpy((char *)vc.x + ((size_t)b * 3 * NK + (size_t)t * NK) * row,
                   (char *)v[t].x + (size_t)b * NK * row, NK * row);
        }
    float *oc = malloc(no * sizeof(float)), *lc = malloc(nl * sizeof(float));
    double *orf = malloc(no * sizeof(double)), *lrf = malloc(nl * sizeof(double));
    assert_true(oc && lc && orf && lrf);
    acc_init(oc, lc);
    fwd(&q, &kc, &vc, mask, oc, lc);
    assert_true(rel_diff_f(o[0], oc, no) <= 1e-5 && rel_diff_f(lse[0], lc, nl) <= 1e-5);
    const struct rows *kp[3] = {&k[0], &k[1], &k[2]}, *vp[3] = {&v[0], &v[1], &v[2]};
    xref_fwd(&q, kp, vp, 3, mask, orf, lrf);
    double eo = rel_diff_d(o[0], orf, no), el = rel_diff_d(lse[0], lrf, nl);
    if (!(eo <= 1e-5 && el <= 1e-5))
        fail_msg("merged partials vs fp64 reference: O %.3g, lse %.3g", eo, el);
    for (int p = 0; p < 6; p++)
        free(o[p]), free(lse[p]);
    free(oc), free(lc), free(orf), free(lrf), free(kc.x), free(vc.x);
    for (int t = 0; t < 3; t++)
        rows_free(&k[t]), rows_free(&v[t]);
    rows_free(&q);
}

static void test_order_fp32_full(void **state)
{
    (void)state;
    order_independence(BURST_DTYPE_FP32, full);
}
static void test_order_fp32_causal(void **state)
{
    (void)state;
    order_independence(BURST_DTYPE_FP32, causal);
}
static void test_order_bf16_window(void **state)
{
    (void)state;
    order_independence(BURST_DTYPE_BF16, window30);
}
static void test_order_fp16_full(void **state)
{
    (void)state;
    order_independence(BURST_DTYPE_FP16, full);
}

static void empty_partial(burst_dtype_t dt)
{
    uint64_t st = harness_seed() + 11;
    struct rows q = rows_make(&st, dt, NQ, HQ, QPOS0, 2.0);
    struct rows ka = rows_make(&st, dt, NK, HKV, 85, 2.0), va = rows_make(&st, dt, NK, HKV, 85, 1);
    /* keys after every query (causal: empty) and far before them (window 30: empty) */
    struct rows kf = rows_make(&st, dt, NK, HKV, QPOS0 + NQ, 2.0),
                vf = rows_make(&st, dt, NK, HKV, QPOS0 + NQ, 1.0);
    struct rows kb = rows_make(&st, dt, NK, HKV, 0, 2.0), vb = rows_make(&st, dt, NK, HKV, 0, 1);
    const size_t no = (size_t)B * NQ * HQ * D, nl = (size_t)B * HQ * NQ;
    float *o = malloc(no * 4), *l = malloc(nl * 4), *o2 = malloc(no * 4), *l2 = malloc(nl * 4);
    assert_true(o && l && o2 && l2);
    const struct burst_mask causal_win = {.left = 30, .right = 0};

    /* fresh accumulators stay (0, -inf), bit for bit */
    acc_init(o, l);
    memcpy(o2, o, no * 4);
    memcpy(l2, l, nl * 4);
    fwd(&q, &kf, &vf, causal, o, l);
    fwd(&q, &kb, &vb, window30, o, l);
    assert_memory_equal(o, o2, no * 4);
    assert_memory_equal(l, l2, nl * 4);

    /* after a real partial */
    fwd(&q, &ka, &va, causal_win, o, l);
    memcpy(o2, o, no * 4);
    memcpy(l2, l, nl * 4);
    fwd(&q, &kf, &vf, causal_win, o, l);
    fwd(&q, &kb, &vb, causal_win, o, l);
    fwd(&q, &kf, &vf, causal, o, l);
    assert_memory_equal(o, o2, no * 4);
    assert_memory_equal(l, l2, nl * 4);
    for (size_t i = 0; i < nl; i++)
        assert_true(isfinite(l[i]));
    free(o), free(l), free(o2), free(l2);
    rows_free(&q), rows_free(&ka), rows_free(&va), rows_free(&kf), rows_free(&vf);
    rows_free(&kb), rows_free(&vb);
}

static void test_empty_partial_fp32(void **state)
{
    (void)state;
    empty_partial(BURST_DTYPE_FP32);
}
static void test_empty_partial_bf16(void **state)
{
    (void)state;
    empty_partial(BURST_DTYPE_BF16);
}

/*
 * Queries at 100..112 against keys at 105..124, causal: rows 100..104 see nothing, keys
 * 113..124 are seen by nobody. Forward: O = 0 and lse = -inf on the empty rows. Backward with
 * that lse (and D from that O): dQ of the empty rows, dK/dV of the unseen keys exactly 0,
 * everything finite, the rest equal to the fp64 reference.
 */
static void test_masked_rows(void **state)
{
    (void)state;
    uint64_t st = harness_seed() + 23;
    const burst_dtype_t dt = BURST_DTYPE_FP32;
    struct rows q = rows_make(&st, dt, NQ, HQ, QPOS0, 2.0);
    struct rows k = rows_make(&st, dt, NK, HKV, 105, 2.0), v = rows_make(&st, dt, NK, HKV, 105, 1);
    struct rows dout = rows_make(&st, dt, NQ, HQ, QPOS0, 1.0);
    const size_t no = (size_t)B * NQ * HQ * D, nl = (size_t)B * HQ * NQ,
                 nk = (size_t)B * NK * HKV * D;
    float *o = malloc(no * 4), *l = malloc(nl * 4), *delta = malloc(nl * 4);
    float *dq = calloc(no, 4), *dk = calloc(nk, 4), *dv = calloc(nk, 4);
    double *orf = malloc(no * 8), *lrf = malloc(nl * 8);
    assert_true(o && l && delta && dq && dk && dv && orf && lrf);
    acc_init(o, l);
    fwd(&q, &k, &v, causal, o, l);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < HQ; h++)
            for (int i = 0; i < NQ; i++) {
                const float li = l[(b * HQ + h) * NQ + i];
                if (QPOS0 + i < 105)
                    assert_true(li == -INFINITY);
                else
                    assert_true(isfinite(li));
                for (int c = 0; c < D; c++) {
                    const float oi = o[((b * NQ + i) * HQ + h) * D + c];
                    assert_true(isfinite(oi));
                    if (QPOS0 + i < 105)
                        assert_true(oi == 0.0f);
                }
            }
    const struct rows *kp[1] = {&k}, *vp[1] = {&v};
    xref_fwd(&q, kp, vp, 1, causal, orf, lrf);
    assert_true(rel_diff_d(o, orf, no) <= 1e-5);
    assert_true(rel_diff_d(l, lrf, nl) <= 1e-5);

    /* backward */
    struct burst_tensor ot = burst_tensor_contiguous(o, dt, B, NQ, HQ, D);
    struct burst_tensor dot = rows_tensor(&dout), qt = rows_tensor(&q), kt = rows_tensor(&k),
                        vt = rows_tensor(&v);
    assert_int_equal(burst_cpu_backend_ops.attn.bwd_delta(be, &dot, &ot, delta), BURST_OK);
    struct burst_bwd_args a = {
        &qt, &kt,  &vt, &dot, l,  delta, rows_posmap(&q), rows_posmap(&k), causal,
        tau, 0.0f, dq,  dk,   dv, 0};
    assert_int_equal(burst_cpu_backend_ops.attn.bwd_step(be, &a), BURST_OK);

    /* fp64 gradients of this single-block problem */
    double *gq = calloc(no, 8), *gk = calloc(nk, 8), *gv = calloc(nk, 8);
    assert_true(gq && gk && gv);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < HQ; h++)
            for (int i = 0; i < NQ; i++) {
                const double li = lrf[(b * HQ + h) * NQ + i];
                if (li == -INFINITY)
                    continue;
                const size_t qo = (size_t)((b * NQ + i) * HQ + h) * D;
                double Dl = 0;
                for (int c = 0; c < D; c++)
                    Dl += dout.r[qo + c] * orf[qo + c];
                for (int j = 0; j < NK; j++) {
                    if (!burst_mask_allows(causal, QPOS0 + i, 105 + j))
                        continue;
                    const size_t ko = (size_t)((b * NK + j) * HKV + h / 2) * D;
                    double s = 0, dp = 0;
                    for (int c = 0; c < D; c++) {
                        s += q.r[qo + c] * k.r[ko + c];
                        dp += dout.r[qo + c] * v.r[ko + c];
                    }
                    const double p = exp(tau * s - li), ds = p * (dp - Dl);
                    for (int c = 0; c < D; c++) {
                        gq[qo + c] += tau * ds * k.r[ko + c];
                        gk[ko + c] += tau * ds * q.r[qo + c];
                        gv[ko + c] += p * dout.r[qo + c];
                    }
                }
            }
    for (int b = 0; b < B; b++)
        for (int i = 0; i < NQ; i++)
            for (int h = 0; h < HQ; h++)
                for (int c = 0; c < D; c++) {
                    const float x = dq[((b * NQ + i) * HQ + h) * D + c];
                    assert_true(isfinite(x));
                    if (QPOS0 + i < 105)
                        assert_true(x == 0.0f);
                }
    for (int b = 0; b < B; b++)
        for (int j = 0; j < NK; j++)
            for (int h = 0; h < HKV; h++)
                for (int c = 0; c < D; c++) {
                    const size_t at = (size_t)((b * NK + j) * HKV + h) * D + (size_t)c;
                    assert_true(isfinite(dk[at]) && isfinite(dv[at]));
                    if (105 + j > QPOS0 + NQ - 1)
                        assert_true(dk[at] == 0.0f && dv[at] == 0.0f);
                }
    double e[3] = {rel_diff_d(dq, gq, no), rel_diff_d(dk, gk, nk), rel_diff_d(dv, gv, nk)};
    if (!(e[0] <= 1e-5 && e[1] <= 1e-5 && e[2] <= 1e-5))
        fail_msg("masked-row gradients vs fp64: dQ %.3g dK %.3g dV %.3g", e[0], e[1], e[2]);

    /* a block masked for every row adds nothing, even with -inf lse rows around */
    struct rows kf = rows_make(&st, dt, NK, HKV, QPOS0 + NQ, 2.0),
                vf = rows_make(&st, dt, NK, HKV, QPOS0 + NQ, 1.0);
    float *dk2 = calloc(nk, 4), *dv2 = calloc(nk, 4), *dq2 = malloc(no * 4);
    assert_true(dk2 && dv2 && dq2);
    memcpy(dq2, dq, no * 4);
    struct burst_tensor kft = rows_tensor(&kf), vft = rows_tensor(&vf);
    struct burst_bwd_args a2 = {
        &qt, &kft, &vft, &dot, l,   delta, rows_posmap(&q), rows_posmap(&kf), causal,
        tau, 0.0f, dq2,  dk2,  dv2, 0};
    assert_int_equal(burst_cpu_backend_ops.attn.bwd_step(be, &a2), BURST_OK);
    assert_memory_equal(dq2, dq, no * 4);
    for (size_t i = 0; i < nk; i++)
        assert_true(dk2[i] == 0.0f && dv2[i] == 0.0f);

    free(o), free(l), free(delta), free(dq), free(dk), free(dv), free(orf), free(lrf);
    free(gq), free(gk), free(gv), free(dk2), free(dv2), free(dq2);
    rows_free(&q), rows_free(&k), rows_free(&v), rows_free(&dout), rows_free(&kf), rows_free(&vf);
}

/* Masked rows with half inputs: still exactly 0 / -inf. */
static void test_masked_rows_half(void **state)
{
    (void)state;
    for (int dti = 1; dti <= 2; dti++) {
        const burst_dtype_t dt = (burst_dtype_t)dti;
        uint64_t st = harness_seed() + 31 + (uint64_t)dti;
        struct rows q = rows_make(&st, dt, NQ, HQ, QPOS0, 2.0);
        struct rows k = rows_make(&st, dt, NK, HKV, 105, 2.0),
                    v = rows_make(&st, dt, NK, HKV, 105, 1.0);
        const size_t no = (size_t)B * NQ * HQ * D, nl = (size_t)B * HQ * NQ;
        float *o = malloc(no * 4), *l = malloc(nl * 4);
        assert_true(o && l);
        acc_init(o, l);
        fwd(&q, &k, &v, causal, o, l);
        for (int b = 0; b < B; b++)
            for (int h = 0; h < HQ; h++)
                for (int i = 0; i < NQ; i++) {
                    const float li = l[(b * HQ + h) * NQ + i];
                    assert_true(QPOS0 + i < 105 ? li == -INFINITY : isfinite(li));
                    for (int c = 0; c < D; c++) {
                        const float oi = o[((b * NQ + i) * HQ + h) * D + c];
                        assert_true(isfinite(oi) && (QPOS0 + i >= 105 || oi == 0.0f));
                    }
                }
        free(o), free(l);
        rows_free(&q), rows_free(&k), rows_free(&v);
    }
}

/* A NaN in one query row must come out as NaN in that row (not as "fully masked": O = 0,
 * lse = -inf), and must not leak into the other rows. */
static void test_nan_propagates(void **state)
{
    (void)state;
    uint64_t st = harness_seed() ^ 0x4e414eu;
    struct rows q = rows_make(&st, BURST_DTYPE_FP32, NQ, HQ, 100, 1.0);
    struct rows k = rows_make(&st, BURST_DTYPE_FP32, NQ, HKV, 0, 1.0);
    struct rows v = rows_make(&st, BURST_DTYPE_FP32, NQ, HKV, 0, 1.0);
    ((float *)q.x)[(size_t)(3 * HQ) * D] = NAN; /* batch 0, row 3, head 0, element 0 */
    float *o = malloc(sizeof(float) * B * NQ * HQ * D), *lse = malloc(sizeof(float) * B * HQ * NQ);
    assert_true(o && lse);
    acc_init(o, lse);
    fwd(&q, &k, &v, full, o, lse);
    for (int64_t i = 0; i < NQ; i++)
        for (int h = 0; h < HQ; h++) {
            int poisoned = i == 3 && h == 0;
            float l = lse[(size_t)h * NQ + (size_t)i], x = o[((size_t)i * HQ + (size_t)h) * D];
            assert_int_equal(isnan(l) != 0, poisoned);
            assert_int_equal(isnan(x) != 0, poisoned);
        }
    free(o);
    free(lse);
    rows_free(&q);
    rows_free(&k);
    rows_free(&v);
}

int main(void)
{
    printf("seed: BURST_TEST_SEED=%llu\n", (unsigned long long)harness_seed());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_fp32_full),    cmocka_unit_test(test_order_fp32_causal),
        cmocka_unit_test(test_order_bf16_window),  cmocka_unit_test(test_order_fp16_full),
        cmocka_unit_test(test_empty_partial_fp32), cmocka_unit_test(test_empty_partial_bf16),
        cmocka_unit_test(test_masked_rows),        cmocka_unit_test(test_masked_rows_half),
        cmocka_unit_test(test_nan_propagates),
    };
    return cmocka_run_group_tests_name("merge", tests, setup, teardown);
}
