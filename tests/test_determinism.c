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

#include "harness_table.h"

static void check_reruns(const struct harness_case *c)
{
    struct harness_problem *p = harness_problem_create(c);
    assert_non_null(p);
    assert_int_equal(harness_problem_run(p), 0);
    struct harness_err err[H_NTENSORS];
    if (!harness_problem_compare(p, err)) {
        harness_problem_print(p, err, "FAIL");
        fail_msg("%s: wrong result", c->name);
    }
    struct harness_outputs *first = harness_outputs_save(p);
    assert_non_null(first);
    for (int run = 1; run < 3; run++) {
        assert_int_equal(harness_problem_run(p), 0);
        const int t = harness_outputs_diff(first, p);
        if (t >= 0) {
            harness_problem_print(p, NULL, "FAIL");
            fail_msg("%s: run %d: %s differs bitwise from run 0", c->name, run,
                     harness_tensor_name((enum harness_tensor)t));
        }
    }
    harness_outputs_free(first);
    harness_problem_destroy(p);
}

/* deterministic, four query heads on two key/value heads */
#define DCASE(nm, G, n) CASE(nm, G, n), .q_heads = 4, .deterministic = 1

HARNESS_TABLE_BEGIN
static const struct harness_case cases[] = {
    {DCASE("det_g1", 1, 150), .causal = 1},
    {DCASE("det_burst_zigzag", 4, 200), .causal = 1, .layout = BURST_LAYOUT_ZIGZAG},
    {DCASE("det_ring_striped_bf16_wire_input", 3, 150), .dtype = BURST_DTYPE_BF16,
     .layout = BURST_LAYOUT_STRIPED, .bwd = BURST_BWD_RING, .wire = BURST_WIRE_INPUT,
     .window_left = 20, .window_right = 7},
    {DCASE("det_fp16_gqa_natural", 8, 130), .q_heads = 8, .kv_heads = 1, .dtype = BURST_DTYPE_FP16,
     .causal = 1},
    {DCASE("det_batch2_ring", 2, 220), .batch = 2, .bwd = BURST_BWD_RING, .head_dim = 64},
};
HARNESS_TABLE_END

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
