/*
 * tests/test_sinkcap.c - attention sinks and logit soft-capping against the fp64 reference.
 *
 * Cases of the shared harness: soft-capping (caps 5, 30 and 50 with scores large enough to bend
 * tanh: the case's amp), sinks (random per-head logits from the case's seed, whose gradient is
 * compared with ref_backward_sinks), each alone and both together; full, causal and windowed
 * masks; GQA; fp32, bf16 and fp16; rings of 1 to 4 ranks; both backward patterns; head groups.
 * A backend that does not run soft-capping (the plan is refused with BURST_ERR_UNSUPPORTED on
 * every rank) skips the capped cases; sinks live in the engine and run on every backend.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "harness_table.h"

HARNESS_TABLE_BEGIN
/* amp 6 with d = 32 and tau = 1/sqrt(32): scaled scores of magnitude up to ~20 (std ~ 12), far
 * into the bend of tanh for cap 5 and well into it for 30; amp 8: up to ~40 against cap 50. */
static const struct harness_case cases[] = {
    /* soft-capping alone */
    {CASE("cap5_g1_full", 1, 40), .softcap = 5.0f, .amp = 6},
    {CASE("cap30_g2_causal_zigzag", 2, 64), .softcap = 30.0f, .amp = 6, .causal = 1, .layout = ZZ},
    {CASE("cap50_g3_window_ring", 3, 50), .softcap = 50.0f, .amp = 8, .window_left = 9,
     .window_right = 4, .bwd = RING},
    {CASE("cap5_g4_gqa4_causal_striped", 4, 64), .softcap = 5.0f, .amp = 6, .q_heads = 8,
     .kv_heads = 2, .causal = 1, .layout = STR},
    {CASE("cap30_g2_bf16_causal_ring", 2, 48), .softcap = 30.0f, .amp = 6, .dtype = BF16,
     .causal = 1, .bwd = RING},
    {CASE("cap5_g3_bf16_gqa_burst", 3, 45), .softcap = 5.0f, .amp = 6, .dtype = BF16, .q_heads = 4,
     .kv_heads = 1},
    {CASE("cap50_g1_causal_window_d64", 1, 70), .softcap = 50.0f, .amp = 8, .head_dim = 64,
     .causal = 1, .window_left = 20},
    {CASE("cap5_g4_head_groups_ring", 4, 48), .softcap = 5.0f, .amp = 6, .q_heads = 4,
     .kv_heads = 4, .workspace_limit = 1, .bwd = RING},
    /* sinks alone */
    {CASE("sinks_g1_full", 1, 40), .sinks = 1},
    {CASE("sinks_g2_causal_zigzag_ring", 2, 64), .sinks = 1, .causal = 1, .layout = ZZ,
     .bwd = RING},
    {CASE("sinks_g3_window_burst", 3, 50), .sinks = 1, .window_left = 7, .window_right = 3},
    {CASE("sinks_g4_gqa4_causal_striped_ring", 4, 64), .sinks = 1, .q_heads = 8, .kv_heads = 2,
     .causal = 1, .layout = STR, .bwd = RING},
    {CASE("sinks_g2_bf16_causal_batch2", 2, 48), .sinks = 1, .dtype = BF16, .causal = 1,
     .batch = 2},
    {CASE("sinks_g3_bf16_gqa_ring", 3, 45), .sinks = 1, .dtype = BF16, .q_heads = 4, .kv_heads = 1,
     .bwd = RING},
    {CASE("sinks_g4_head_groups_burst", 4, 48), .sinks = 1, .q_heads = 4, .kv_heads = 4,
     .workspace_limit = 1, .causal = 1},
    {CASE("sinks_g4_win_stops_ring_early", 4, 64), .sinks = 1, .window_left = 3, .window_right = 0},
    /* fp16 */
    {CASE("cap30_sinks_g2_fp16_causal_zigzag", 2, 64), .sinks = 1, .softcap = 30.0f, .amp = 6,
     .dtype = F16, .causal = 1, .layout = ZZ},
    /* both */
    {CASE("sinks_cap5_g1_causal", 1, 40), .sinks = 1, .softcap = 5.0f, .amp = 6, .causal = 1},
    {CASE("sinks_cap30_g2_window_ring", 2, 64), .sinks = 1, .softcap = 30.0f, .amp = 6,
     .window_left = 11, .window_right = 5, .bwd = RING},
    {CASE("sinks_cap50_g3_gqa_zigzag_bf16", 3, 60), .sinks = 1, .softcap = 50.0f, .amp = 8,
     .dtype = BF16, .q_heads = 4, .kv_heads = 2, .causal = 1, .layout = ZZ},
    {CASE("sinks_cap5_g4_head_groups_ring_batch2", 4, 48), .sinks = 1, .softcap = 5.0f, .amp = 6,
     .q_heads = 4, .kv_heads = 2, .workspace_limit = 1, .batch = 2, .bwd = RING},
};
HARNESS_TABLE_END

static void test_case(void **state)
{
    const struct harness_case *c = *state;
    struct harness_problem *p = harness_problem_create(c);
    assert_non_null(p);
    const int ran = harness_problem_run(p) == 0;
    /* a backend without soft-capping refuses the plan on every rank: skip, not fail */
    int refused = !ran && c->softcap > 0.0f;
    for (int r = 0; refused && r < c->ranks; r++)
        refused = harness_problem_record(p, r)->st_plan == BURST_ERR_UNSUPPORTED &&
                  harness_contains(harness_problem_record(p, r)->msg, "softcap");
    if (refused) {
        harness_problem_destroy(p);
        printf("%s: the backend does not run soft-capping: skipped\n", c->name);
        skip();
    }
    assert_true(harness_problem_verdict(p, ran, !ran));
}

int main(void)
{
    printf("seed: BURST_TEST_SEED=%llu\n", (unsigned long long)harness_seed());
    return harness_run_cases("sinkcap", cases, sizeof cases / sizeof *cases, test_case, NULL, 0);
}
