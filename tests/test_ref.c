/*
 * tests/test_ref.c - the fp64 reference checks itself, so that the other tests can trust it:
 * gradients against central finite differences of f = sum(O * dO), ref_forward_rows against
 * ref_forward, softmax weights summing to one, GQA head mapping, and the mask convention;
 * with packed documents, soft-capping and sinks: their gradients likewise, documents equal to
 * attention over each document alone, and a sink equal to one more key whose value is zero.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "ref.h"

static double *rnd(uint64_t *st, size_t n, double a)
{
    double *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++)
        x[i] = harness_rng_uniform(st, -a, a);
    return x;
}

static double objective(const struct ref_problem *p, const double *q, const double *k,
                        const double *v, const double *dout, double *o, double *lse)
{
    const size_t n = (size_t)(p->batch * p->seq_len * p->q_heads * p->head_dim);
    ref_forward(p, q, k, v, o, lse);
    double f = 0;
    for (size_t i = 0; i < n; i++)
        f += o[i] * dout[i];
    return f;
}

static void check_grad(const struct ref_problem *p, uint64_t seed)
{
    uint64_t st = seed;
    const size_t nq = (size_t)(p->batch * p->seq_len * p->q_heads * p->head_dim);
    const size_t nkv = (size_t)(p->batch * p->seq_len * p->kv_heads * p->head_dim);
    double *q = rnd(&st, nq, 1.5), *k = rnd(&st, nkv, 1.5), *v = rnd(&st, nkv, 1.0);
    double *dout = rnd(&st, nq, 1.0);
    double *dq = malloc(nq * sizeof *dq), *dk = malloc(nkv * sizeof *dk),
           *dv = malloc(nkv * sizeof *dv), *o = malloc(nq * sizeof *o),
           *lse = malloc((size_t)(p->batch * p->q_heads * p->seq_len) * sizeof *lse);
    assert_true(dq && dk && dv && o && lse);
    double *sinks = p->sinks ? rnd(&st, (size_t)p->q_heads, 2.0) : NULL;
    double *dsinks = malloc((size_t)p->q_heads * sizeof *dsinks);
    assert_non_null(dsinks);
    struct ref_problem ps = *p;
    ps.sinks = sinks;
    p = &ps;
    ref_backward_sinks(p, q, k, v, dout, dq, dk, dv, dsinks);
    double *xs[4] = {q, k, v, sinks}, *gs[4] = {dq, dk, dv, dsinks};
    const size_t ns[4] = {nq, nkv, nkv, sinks ? (size_t)p->q_heads : 0};
    const double h = 1e-5;
    for (int t = 0; t < 4; t++)
        for (size_t i = 0; i < ns[t]; i++) {
            const double x0 = xs[t][i];
            xs[t][i] = x0 + h;
            const double fp = objective(p, q, k, v, dout, o, lse);
            xs[t][i] = x0 - h;
            const double fm = objective(p, q, k, v, dout, o, lse);
            xs[t][i] = x0;
            const double fd = (fp - fm) / (2 * h);
            /* central differences: O(h^2) truncation + O(eps/h) cancellation ~ 1e-9 */
            if (fabs(fd - gs[t][i]) > 1e-7 * (1 + fabs(fd)))
                fail_msg("tensor %d element %zu: analytic %.12g vs finite difference %.12g", t, i,
                         gs[t][i], fd);
        }
    free(q), free(k), free(v), free(dout), free(dq), free(dk), free(dv), free(o), free(lse);
    free(sinks), free(dsinks);
}

/* batch x seq_len tokens, q_heads query and kv_heads key/value heads of head_dim, the scale; no
 * mask (the caller sets causal, windows, documents, cap and sinks on the copy). */
static struct ref_problem problem(int64_t batch, int64_t seq_len, int q_heads, int kv_heads,
                                  int head_dim, double scale)
{
    return (struct ref_problem){.batch = batch,
                                .seq_len = seq_len,
                                .q_heads = q_heads,
                                .kv_heads = kv_heads,
                                .head_dim = head_dim,
                                .scale = scale,
                                .window_left = -1,
                                .window_right = -1};
}

static void test_grad_full(void **state)
{
    (void)state;
    struct ref_problem p = problem(2, 5, 2, 2, 8, 0.4);
    check_grad(&p, harness_seed() + 1);
}

static void test_grad_causal_window_gqa(void **state)
{
    (void)state;
    struct ref_problem p = problem(1, 7, 4, 2, 8, 0.35);
    p.window_left = 2;
    p.causal = 1;
    check_grad(&p, harness_seed() + 2);
    struct ref_problem p2 = problem(1, 6, 4, 1, 8, 0.35);
    p2.window_left = 1;
    p2.window_right = 2;
    check_grad(&p2, harness_seed() + 3);
}

static const double sink_marker[1] = {0}; /* check_grad: non-NULL asks for random sinks */

static void test_grad_docs_softcap_sinks(void **state)
{
    (void)state;
    const int64_t docs[4] = {1, 3, 2, 4}; /* lengths 1 and 2 among them */
    struct ref_problem p = problem(2, 10, 4, 2, 8, 0.9);
    p.causal = 1;
    p.doc_lens = docs;
    p.num_docs = 4;
    check_grad(&p, harness_seed() + 5);
    p.causal = 0;
    p.softcap = 1.5; /* scores up to ~|0.9 * 8 * 2.25| = 16: deep in tanh's bend */
    check_grad(&p, harness_seed() + 6);
    p.sinks = sink_marker;
    p.window_left = 1;
    check_grad(&p, harness_seed() + 7);
    struct ref_problem p2 = problem(1, 5, 2, 1, 8, 0.4);
    p2.window_right = 0;
    p2.sinks = sink_marker;
    check_grad(&p2, harness_seed() + 8);
}

/* Documents: the packed result equals each document run alone; a sink equals one more key
 * (a score of the sink's value, a zero value vector) in front of every row. */
static void test_docs_and_sinks_meaning(void **state)
{
    (void)state;
    enum {
        N = 9,
        H = 2,
        D = 8
    };
    const int64_t docs[3] = {4, 1, 4};
    struct ref_problem p = problem(1, N, H, H, D, 0.5);
    p.causal = 1;
    p.doc_lens = docs;
    p.num_docs = 3;
    uint64_t st = harness_seed() + 9;
    double *q = rnd(&st, N * H * D, 2), *k = rnd(&st, N * H * D, 2), *v = rnd(&st, N * H * D, 1);
    double o[N * H * D], lse[H * N], o1[N * H * D], lse1[H * N];
    ref_forward(&p, q, k, v, o, lse);
    int64_t start = 0;
    for (int t = 0; t < 3; t++) {
        struct ref_problem pd = p;
        pd.seq_len = docs[t];
        pd.doc_lens = NULL;
        pd.num_docs = 0;
        ref_forward(&pd, q + start * H * D, k + start * H * D, v + start * H * D, o1, lse1);
        for (int64_t i = 0; i < docs[t] * H * D; i++)
            assert_true(fabs(o1[i] - o[start * H * D + i]) < 1e-12);
        for (int h = 0; h < H; h++)
            for (int64_t i = 0; i < docs[t]; i++)
                assert_true(fabs(lse1[h * docs[t] + i] - lse[h * N + start + i]) < 1e-12);
        start += docs[t];
    }
    const double sinks[H] = {0.7, -1.3};
    struct ref_problem ps = problem(1, N, H, H, D, 0.5);
    ps.sinks = sinks;
    ref_forward(&ps, q, k, v, o, lse);
    for (int h = 0; h < H; h++)
        for (int64_t i = 0; i < N; i++) {
            /* softmax over {sink, scores}: compare against a direct sum */
            double s[N], m = sinks[h];
            for (int64_t j = 0; j < N; j++) {
                double dot = 0;
                for (int c = 0; c < D; c++)
                    dot += q[(i * H + h) * D + c] * k[(j * H + h) * D + c];
                s[j] = 0.5 * dot;
                m = s[j] > m ? s[j] : m;
            }
            double sum = exp(sinks[h] - m);
            for (int64_t j = 0; j < N; j++)
                sum += exp(s[j] - m);
            assert_true(fabs(lse[h * N + i] - (m + log(sum))) < 1e-12);
            for (int c = 0; c < D; c++) {
                double acc = 0;
                for (int64_t j = 0; j < N; j++)
                    acc += exp(s[j] - m) / sum * v[(j * H + h) * D + c];
                assert_true(fabs(o[(i * H + h) * D + c] - acc) < 1e-12);
            }
        }
    free(q), free(k), free(v);
}

static void test_rows_and_weights(void **state)
{
    (void)state;
    struct ref_problem p = problem(2, 9, 4, 2, 16, 0.25);
    p.window_left = 3;
    p.causal = 1;
    uint64_t st = harness_seed() + 4;
    const size_t nq = 2 * 9 * 4 * 16, nkv = 2 * 9 * 2 * 16;
    double *q = rnd(&st, nq, 2), *k = rnd(&st, nkv, 2), *v = malloc(nkv * sizeof *v);
    double *o = malloc(nq * sizeof *o), *lse = malloc(2 * 4 * 9 * sizeof *lse);
    double *orow = malloc(2 * 3 * 4 * 16 * sizeof *orow), *lrow = malloc(2 * 4 * 3 * sizeof *lrow);
    assert_true(v && o && lse && orow && lrow);
    for (size_t i = 0; i < nkv; i++)
        v[i] = 1.0; /* weights sum to one: every output element is exactly 1 */
    ref_forward(&p, q, k, v, o, lse);
    for (size_t i = 0; i < nq; i++)
        assert_true(fabs(o[i] - 1.0) < 1e-12);
    const int64_t rows[3] = {8, 0, 4};
    ref_forward_rows(&p, q, k, v, rows, 3, orow, lrow);
    for (int b = 0; b < 2; b++)
        for (int r = 0; r < 3; r++)
            for (int h = 0; h < 4; h++) {
                assert_true(lrow[(b * 4 + h) * 3 + r] == lse[(b * 4 + h) * 9 + rows[r]]);
                /* row 0 under causal attends only key 0: lse = its score */
                if (rows[r] == 0) {
                    double s = 0;
                    for (int c = 0; c < 16; c++)
                        s += q[((b * 9 + 0) * 4 + h) * 16 + c] *
                             k[((b * 9 + 0) * 2 + h / 2) * 16 + c];
                    assert_true(fabs(lrow[(b * 4 + h) * 3 + r] - 0.25 * s) < 1e-12);
                }
            }
    free(q), free(k), free(v), free(o), free(lse), free(orow), free(lrow);
}

int main(void)
{
    printf("seed: BURST_TEST_SEED=%llu\n", (unsigned long long)harness_seed());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grad_full),
        cmocka_unit_test(test_grad_causal_window_gqa),
        cmocka_unit_test(test_grad_docs_softcap_sinks),
        cmocka_unit_test(test_docs_and_sinks_meaning),
        cmocka_unit_test(test_rows_and_weights),
    };
    return cmocka_run_group_tests_name("ref", tests, NULL, NULL);
}
