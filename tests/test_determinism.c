/*
 * tests/test_determinism.c - deterministic mode (ALGORITHM.md section 6, invariant 7): with
 * params.deterministic = 1 two runs of the same problem give bitwise-identical O, lse, dQ, dK
 * and dV, for both backward patterns, every layout, the half dtypes and input-dtype wires.
 * (Every run also passes the reference comparison.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static void check_reruns(const struct harness_case *c)
{
    static const char *names[H_NTENSORS] = {"O", "lse", "dQ", "dK", "dV"};
    struct harness_problem *p = harness_problem_create(c);
    assert_non_null(p);
    void *first[H_NTENSORS];
    size_t bytes[H_NTENSORS];
    assert_int_equal(harness_problem_run(p), 0);
    struct harness_err err[H_NTENSORS];
    if (!harness_problem_compare(p, err)) {
        harness_problem_print(p, err, "FAIL");
        fail_msg("%s: wrong result", c->name);
    }
    for (int t = 0; t < H_NTENSORS; t++) {
        const void *x = harness_problem_output(p, (enum harness_tensor)t, &bytes[t]);
        first[t] = malloc(bytes[t]);
        assert_non_null(first[t]);
        memcpy(first[t], x, bytes[t]);
    }
    for (int run = 1; run < 3; run++) {
        assert_int_equal(harness_problem_run(p), 0);
        for (int t = 0; t < H_NTENSORS; t++) {
            size_t b;
            const void *x = harness_problem_output(p, (enum harness_tensor)t, &b);
            if (b != bytes[t] || memcmp(x, first[t], b) != 0) {
                harness_problem_print(p, NULL, "FAIL");
                fail_msg("%s: run %d: %s differs bitwise from run 0", c->name, run, names[t]);
            }
        }
    }
    for (int t = 0; t < H_NTENSORS; t++)
        free(first[t]);
    harness_problem_destroy(p);
}

#define CASE(nm, G, n)                                                                             \
    .name = (nm), .ranks = (G), .batch = 1, .seq_len = (n), .q_heads = 4, .kv_heads = 2,           \
    .head_dim = 32, .dtype = BURST_DTYPE_FP32, .window_left = -1, .window_right = -1,              \
    .deterministic = 1

#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Woverride-init"
#endif
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Winitializer-overrides"
#endif
static const struct harness_case cases[] = {
    {CASE("det_g1", 1, 150), .causal = 1},
    {CASE("det_burst_zigzag", 4, 200), .causal = 1, .layout = BURST_LAYOUT_ZIGZAG},
    {CASE("det_ring_striped_bf16_wire_input", 3, 150), .dtype = BURST_DTYPE_BF16,
     .layout = BURST_LAYOUT_STRIPED, .bwd = BURST_BWD_RING, .wire = BURST_WIRE_INPUT,
     .window_left = 20, .window_right = 7},
    {CASE("det_fp16_gqa_natural", 8, 130), .q_heads = 8, .kv_heads = 1, .dtype = BURST_DTYPE_FP16,
     .causal = 1},
    {CASE("det_batch2_ring", 2, 220), .batch = 2, .bwd = BURST_BWD_RING, .head_dim = 64},
};
#if defined(__clang__)
#pragma clang diagnostic pop
#endif
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

static void test_case(void **state)
{
    check_reruns(*state);
}

int main(void)
{
    printf("seed: BURST_TEST_SEED=%llu\n", (unsigned long long)harness_seed());
    return harness_run_cases("determinism", cases, sizeof cases / sizeof *cases, test_case, NULL,
                             0);
}
