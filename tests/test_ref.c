/*
 * tests/test_ref.c - the fp64 reference checks itself, so that the other tests can trust it:
 * gradients against central finite differences of f = sum(O * dO), ref_forward_rows against
 * ref_forward, softmax weights summing to one, GQA head mapping, and the mask convention.
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
    ref_backward(p, q, k, v, dout, dq, dk, dv);
    double *xs[3] = {q, k, v}, *gs[3] = {dq, dk, dv};
    const size_t ns[3] = {nq, nkv, nkv};
    const double h = 1e-5;
    for (int t = 0; t < 3; t++)
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
}

static void test_grad_full(void **state)
{
    (void)state;
    struct ref_problem p = {2, 5, 2, 2, 8, 0.4, 0, -1, -1};
    check_grad(&p, harness_seed() + 1);
}

static void test_grad_causal_window_gqa(void **state)
{
    (void)state;
    struct ref_problem p = {1, 7, 4, 2, 8, 0.35, 1, 2, -1};
    check_grad(&p, harness_seed() + 2);
    struct ref_problem p2 = {1, 6, 4, 1, 8, 0.35, 0, 1, 2};
    check_grad(&p2, harness_seed() + 3);
}

static void test_rows_and_weights(void **state)
{
    (void)state;
    struct ref_problem p = {2, 9, 4, 2, 16, 0.25, 1, 3, -1};
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
        cmocka_unit_test(test_rows_and_weights),
    };
    return cmocka_run_group_tests_name("ref", tests, NULL, NULL);
}
