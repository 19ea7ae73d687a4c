/*
 * tests/test_memory.c - memory per rank is O(n H d) plus the blocks in flight, never n x n:
 * stats.scratch_bytes of the forward and of the backward at local lengths n, 2n and 4n must
 * grow by a factor in [1.6, 2.4] per doubling (linear; a quadratic buffer would give ~4, and
 * the fixed per-call overhead is small at these sizes), and stay below 64 bytes per local
 * element of Q, K, V (n (Hq + 2 Hkv) d), a generous linear budget (fp32 running O and the two
 * travelling buffers of each kind need a few times that, never n-proportional per element).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>

#include "harness.h"

static void scratch_at(const struct harness_case *base, int64_t n, uint64_t out[2])
{
    struct harness_case c = *base;
    c.seq_len = n * c.ranks;
    struct harness_problem *p = harness_problem_create(&c);
    assert_non_null(p);
    if (harness_problem_run(p) != 0) {
        harness_problem_print(p, NULL, "FAIL");
        fail_msg("%s n=%lld: run failed", c.name, (long long)n);
    }
    out[0] = out[1] = 0;
    for (int r = 0; r < c.ranks; r++) {
        const struct harness_rank_record *rec = harness_problem_record(p, r);
        if (rec->stats[BURST_PHASE_FWD].scratch_bytes > out[0])
            out[0] = rec->stats[BURST_PHASE_FWD].scratch_bytes;
        if (rec->stats[BURST_PHASE_BWD].scratch_bytes > out[1])
            out[1] = rec->stats[BURST_PHASE_BWD].scratch_bytes;
    }
    harness_problem_destroy(p);
}

static void check_linear(const struct harness_case *c)
{
    static const int64_t ns[3] = {512, 1024, 2048};
    uint64_t s[3][2];
    for (int i = 0; i < 3; i++) {
        scratch_at(c, ns[i], s[i]);
        printf("%s: n=%lld scratch fwd %llu bwd %llu bytes\n", c->name, (long long)ns[i],
               (unsigned long long)s[i][0], (unsigned long long)s[i][1]);
    }
    for (int ph = 0; ph < 2; ph++) {
        for (int i = 0; i < 3; i++) {
            const double elems = (double)ns[i] * (c->q_heads + 2 * c->kv_heads) * c->head_dim;
            if (s[i][ph] == 0 || (double)s[i][ph] > 64.0 * elems)
                fail_msg("%s %s n=%lld: scratch %llu bytes outside (0, %.0f]", c->name,
                         ph ? "backward" : "forward", (long long)ns[i],
                         (unsigned long long)s[i][ph], 64.0 * elems);
        }
        for (int i = 1; i < 3; i++) {
            const double ratio = (double)s[i][ph] / (double)s[i - 1][ph];
            if (ratio < 1.6 || ratio > 2.4)
                fail_msg("%s %s: scratch grows by %.3f from n=%lld to n=%lld (expected ~2)",
                         c->name, ph ? "backward" : "forward", ratio, (long long)ns[i - 1],
                         (long long)ns[i]);
        }
    }
}

#define CASE(nm)                                                                                   \
    .name = (nm), .ranks = 2, .batch = 1, .q_heads = 2, .kv_heads = 1, .head_dim = 16,             \
    .dtype = BURST_DTYPE_FP32, .window_left = -1, .window_right = -1

static void test_burst(void **state)
{
    (void)state;
    struct harness_case c = {CASE("memory_burst")};
    c.causal = 1;
    c.layout = BURST_LAYOUT_ZIGZAG;
    check_linear(&c);
}

static void test_ring_bf16(void **state)
{
    (void)state;
    struct harness_case c = {CASE("memory_ring_bf16")};
    c.dtype = BURST_DTYPE_BF16;
    c.bwd = BURST_BWD_RING;
    c.causal = 1;
    check_linear(&c);
}

int main(void)
{
    printf("seed: BURST_TEST_SEED=%llu\n", (unsigned long long)harness_seed());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_burst),
        cmocka_unit_test(test_ring_bf16),
    };
    return cmocka_run_group_tests_name("memory", tests, NULL, NULL);
}
