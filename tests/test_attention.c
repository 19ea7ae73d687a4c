/*
 * tests/test_attention.c - distributed forward and backward against the fp64 reference
 * (ALGORITHM.md section 6, invariants 1, 2 and 5).
 *
 * 'unit': a table of small cases (N tens to a couple of hundred), each covering one axis or an
 * interaction that has broken peer implementations: G in {1,2,3,4,7,8}; causal or not; the
 * three layouts; left / right / two-sided windows (including windows that stop the ring early);
 * GQA ratios 1, 4, 8; head dims 8..256; fp32, fp16, bf16; batch > 1; uneven shards (N mod G != 0
 * and explicit shard_lens); burst and ring backward (and auto); fp32 and input-dtype
 * accumulators on the wire; padded (strided) tensors; large scores; one token per rank; the
 * two-level ring (ranks_per_node L: G = 4 with L = 2, 4; G = 6 with L = 2, 3; G = 8 with
 * L = 1, 2, 4; windows that stop the ring mid-round).
 * Structural axes are exercised mostly in fp32, whose tolerance (1e-5) catches a single missing
 * or doubled key; the half dtypes check the dtype paths against the bound derived in harness.h.
 *
 * 'slow' (argument --slow): the cartesian product of G x layout x causal x window x pattern x
 * dtype, cycling head dim, GQA ratio, batch, wire precision and (every other case) the
 * two-level split L through the cases.
 *
 * '--every K [FIRST]': every K-th case of the table only, from case FIRST (default 0): for a
 * forced data path whose combination with the others runs the whole table elsewhere.
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

static const int64_t lens_a[] = {5, 17, 1, 9};
static const int64_t lens_b[] = {10, 3, 20, 7};
static const int64_t lens_c[] = {1, 1, 30};

HARNESS_TABLE_BEGIN
static const struct harness_case unit_cases[] = {
    /* G, layouts, causal */
    {CASE("g1_full", 1, 40)},
    {CASE("g1_causal_window", 1, 33), .causal = 1, .window_left = 6},
    {CASE("g2_causal_zigzag", 2, 64), .causal = 1, .layout = ZZ},
    {CASE("g3_uneven_natural_causal", 3, 50), .causal = 1},
    {CASE("g4_striped_causal_ring", 4, 64), .causal = 1, .layout = STR, .bwd = RING},
    {CASE("g7_zigzag_uneven_causal", 7, 100), .causal = 1, .layout = ZZ},
    {CASE("g7_zigzag_full_ring", 7, 70), .layout = ZZ, .bwd = RING},
    {CASE("g8_striped_full", 8, 72), .layout = STR},
    {CASE("g8_natural_causal_ring", 8, 80), .causal = 1, .bwd = RING},
    {CASE("g4_striped_uneven_causal", 4, 38), .causal = 1, .layout = STR},
    {CASE("g8_one_token_per_rank", 8, 9), .causal = 1},
    {CASE("g7_striped_one_token", 7, 7), .layout = STR, .bwd = RING},
    {CASE("g4_zigzag_two_tokens", 4, 8), .causal = 1, .layout = ZZ, .bwd = RING},
    /* sliding windows */
    {CASE("win_left_natural_stops_early", 4, 96), .window_left = 10},
    {CASE("win_left_causal_zigzag", 4, 96), .causal = 1, .window_left = 7, .layout = ZZ},
    {CASE("win_left_causal_natural_ring", 7, 91), .causal = 1, .window_left = 12, .bwd = RING},
    {CASE("win_right_striped", 3, 60), .window_right = 5, .layout = STR},
    {CASE("win_right_natural_ring", 4, 64), .window_right = 20, .bwd = RING},
    {CASE("win_both_natural_ring", 4, 80), .window_left = 6, .window_right = 9, .bwd = RING},
    {CASE("win_both_striped", 4, 70), .window_left = 5, .window_right = 3, .layout = STR},
    {CASE("win_both_zigzag", 3, 66), .window_left = 4, .window_right = 13, .layout = ZZ},
    {CASE("win_zero_width", 3, 30), .window_left = 0, .window_right = 0, .bwd = RING},
    {CASE("win_causal_striped_ring", 8, 96), .causal = 1, .window_left = 9, .layout = STR,
     .bwd = RING},
    /* GQA */
    {CASE("gqa4_causal_zigzag", 4, 64), .q_heads = 8, .kv_heads = 2, .causal = 1, .layout = ZZ},
    {CASE("gqa4_ring_wire_input", 3, 48), .q_heads = 4, .kv_heads = 1, .bwd = RING, .wire = WIN},
    {CASE("gqa8_ring_striped", 3, 45), .q_heads = 8, .kv_heads = 1, .layout = STR, .bwd = RING},
    {CASE("gqa8_burst_window", 2, 40), .q_heads = 8, .kv_heads = 1, .window_left = 5,
     .window_right = 5},
    {CASE("gqa4_auto", 4, 48), .q_heads = 8, .kv_heads = 2, .causal = 1, .bwd = AUTO},
    {CASE("mha_auto", 3, 48), .causal = 1, .layout = ZZ, .bwd = AUTO},
    /* head dims */
    {CASE("d8", 2, 32), .head_dim = 8, .causal = 1, .layout = ZZ},
    {CASE("d24_striped", 3, 36), .head_dim = 24, .causal = 1, .layout = STR},
    {CASE("d64_natural_ring", 4, 64), .head_dim = 64, .causal = 1, .bwd = RING},
    {CASE("d128", 2, 48), .head_dim = 128, .causal = 1, .layout = ZZ},
    {CASE("d256_zigzag", 2, 32), .q_heads = 1, .kv_heads = 1, .head_dim = 256, .causal = 1,
     .layout = ZZ},
    {CASE("d256_ring_gqa", 2, 24), .q_heads = 2, .kv_heads = 1, .head_dim = 256, .bwd = RING},
    {CASE("d40_window", 3, 42), .head_dim = 40, .window_left = 8, .window_right = 2},
    /* fp16 / bf16, both patterns and wire precisions */
    {CASE("fp16_zigzag_causal", 4, 64), .q_heads = 4, .kv_heads = 2, .head_dim = 64, .dtype = F16,
     .causal = 1, .layout = ZZ},
    {CASE("fp16_ring_wire_input", 4, 64), .head_dim = 64, .dtype = F16, .bwd = RING, .wire = WIN},
    {CASE("fp16_burst_wire_input", 7, 77), .dtype = F16, .causal = 1, .layout = STR, .wire = WIN},
    {CASE("fp16_d256", 2, 32), .q_heads = 1, .kv_heads = 1, .head_dim = 256, .dtype = F16},
    {CASE("bf16_burst_wire_input_striped", 4, 64), .dtype = BF16, .causal = 1, .layout = STR,
     .wire = WIN},
    {CASE("bf16_ring_window", 3, 60), .dtype = BF16, .window_left = 9, .window_right = 4,
     .bwd = RING},
    {CASE("bf16_ring_wire_input_zigzag", 8, 96), .dtype = BF16, .causal = 1, .layout = ZZ,
     .bwd = RING, .wire = WIN},
    {CASE("bf16_gqa8_d128", 8, 64), .q_heads = 8, .kv_heads = 1, .head_dim = 128, .dtype = BF16,
     .causal = 1},
    {CASE("bf16_d8_g1", 1, 20), .head_dim = 8, .dtype = BF16, .causal = 1},
    /* several cpu tiles at d > 128 (the bf16 dot products' narrower query tiles), and d = 80 */
    {CASE("bf16_d256_tiles", 1, 112), .q_heads = 2, .kv_heads = 1, .head_dim = 256, .dtype = BF16,
     .causal = 1},
    {CASE("bf16_d80_window", 2, 100), .head_dim = 80, .dtype = BF16, .window_left = 30,
     .window_right = 5},
    /* batch > 1, explicit and uneven shards, strides */
    {CASE("batch3_zigzag_causal", 3, 30), .batch = 3, .causal = 1, .layout = ZZ},
    {CASE("batch2_striped_window_ring", 4, 44), .batch = 2, .window_left = 7, .layout = STR,
     .bwd = RING},
    {CASE("batch2_fp16_natural_uneven", 3, 31), .batch = 2, .dtype = F16, .causal = 1},
    {CASE("lens_explicit_causal", 4, 32), .shard_lens = lens_a, .causal = 1},
    {CASE("lens_explicit_window_ring", 4, 40), .shard_lens = lens_b, .window_left = 4,
     .window_right = 2, .bwd = RING},
    {CASE("lens_explicit_bf16_wire_input", 3, 32), .shard_lens = lens_c, .dtype = BF16, .causal = 1,
     .wire = WIN},
    {CASE("pad_fp16_batch2", 3, 36), .batch = 2, .pad = 8, .dtype = F16, .layout = ZZ, .causal = 1},
    {CASE("pad_fp32_ring_gqa", 4, 40), .pad = 16, .q_heads = 4, .kv_heads = 1, .bwd = RING,
     .layout = STR},
    {CASE("pad_bf16_window", 2, 30), .pad = 8, .dtype = BF16, .window_left = 3, .window_right = 3,
     .bwd = RING},
    /* local lengths above the cpu kernel's tiles (96 query / 48 key rows), not multiples */
    {CASE("tiles_g1_causal_window", 1, 203), .causal = 1, .window_left = 70},
    {CASE("tiles_g2_zigzag_causal", 2, 230), .causal = 1, .layout = ZZ},
    {CASE("tiles_g3_ring_window", 3, 300), .head_dim = 64, .window_left = 50, .window_right = 20,
     .bwd = RING},
    {CASE("tiles_g2_striped_ring_causal", 2, 201), .causal = 1, .layout = STR, .bwd = RING},
    {CASE("tiles_bf16_gqa4", 2, 200), .q_heads = 4, .kv_heads = 1, .dtype = BF16, .causal = 1},
    /* numerics: large scores (softmax must subtract its max), explicit scale, determinism */
    /* scores up to ~+-150 (exp overflows fp32 past 88 without the max subtraction) */
    {CASE("large_scores", 4, 64), .softmax_scale = 1.0f, .amp = 4.0, .grid = 4, .causal = 1,
     .layout = ZZ},
    {CASE("large_scores_ring_bf16", 3, 48), .softmax_scale = 1.0f, .amp = 4.0, .grid = 4,
     .dtype = BF16, .bwd = RING},
    {CASE("large_scores_striped_fp16_window", 4, 64), .softmax_scale = 1.0f, .amp = 4.0, .grid = 4,
     .dtype = F16, .layout = STR, .window_left = 20, .window_right = 3},
    {CASE("tiny_scale", 2, 40), .softmax_scale = 1e-3f},
    {CASE("deterministic_flag", 4, 64), .deterministic = 1, .causal = 1, .layout = STR,
     .bwd = RING},
    /* two-level ring (ranks_per_node = L; ALGORITHM.md section 4): node splits of G = 4, 6, 8,
     * both patterns and wire precisions, windows that stop the ring before a round ends */
    {CASE("l2_g4_full", 4, 64), .ranks_per_node = 2},
    {CASE("l2_g4_causal_zigzag_ring", 4, 64), .ranks_per_node = 2, .causal = 1, .layout = ZZ,
     .bwd = RING},
    {CASE("l4_g4_is_flat_causal_striped", 4, 48), .ranks_per_node = 4, .causal = 1, .layout = STR},
    {CASE("l2_g4_win_left_causal_2steps", 4, 64), .ranks_per_node = 2, .causal = 1,
     .window_left = 10},
    {CASE("l2_g4_win_left_ring_2steps", 4, 64), .ranks_per_node = 2, .window_left = 10,
     .bwd = RING},
    {CASE("l2_g4_lens_explicit_window", 4, 32), .ranks_per_node = 2, .shard_lens = lens_a,
     .window_left = 6, .window_right = 2, .bwd = RING},
    {CASE("l2_g6_causal_striped", 6, 60), .ranks_per_node = 2, .causal = 1, .layout = STR},
    {CASE("l2_g6_full_natural_ring_bf16", 6, 62), .ranks_per_node = 2, .dtype = BF16, .bwd = RING},
    {CASE("l2_g6_win_left_causal_3steps_wire_input", 6, 60), .ranks_per_node = 2, .causal = 1,
     .window_left = 12, .wire = WIN},
    {CASE("l2_g6_gqa4_causal_ring", 6, 60), .ranks_per_node = 2, .q_heads = 8, .kv_heads = 2,
     .causal = 1, .bwd = RING},
    {CASE("l3_g6_causal_zigzag_ring_wire_input", 6, 72), .ranks_per_node = 3, .causal = 1,
     .layout = ZZ, .bwd = RING, .wire = WIN},
    {CASE("l3_g6_full_striped_bf16", 6, 54), .ranks_per_node = 3, .dtype = BF16, .layout = STR},
    {CASE("l3_g6_win_left_2steps", 6, 60), .ranks_per_node = 3, .window_left = 5},
    {CASE("l3_g6_win_left_causal_2steps_ring", 6, 60), .ranks_per_node = 3, .causal = 1,
     .window_left = 5, .bwd = RING},
    {CASE("l4_g8_causal_natural", 8, 80), .ranks_per_node = 4, .causal = 1},
    {CASE("l4_g8_win_left_3steps", 8, 96), .ranks_per_node = 4, .window_left = 20},
    {CASE("l4_g8_win_left_causal_3steps_ring", 8, 96), .ranks_per_node = 4, .causal = 1,
     .window_left = 20, .bwd = RING},
    {CASE("l4_g8_win_left_5steps_bf16_wire_input", 8, 96), .ranks_per_node = 4, .dtype = BF16,
     .window_left = 50, .causal = 1, .wire = WIN},
    {CASE("l4_g8_gqa8_causal_zigzag", 8, 96), .ranks_per_node = 4, .q_heads = 8, .kv_heads = 1,
     .causal = 1, .layout = ZZ},
    {CASE("l2_g8_win_both_zigzag_bf16_wire_input", 8, 96), .ranks_per_node = 2, .dtype = BF16,
     .window_left = 5, .window_right = 7, .layout = ZZ, .wire = WIN},
    {CASE("l2_g8_causal_striped_ring", 8, 72), .ranks_per_node = 2, .causal = 1, .layout = STR,
     .bwd = RING},
    {CASE("l1_g8_causal_zigzag", 8, 96), .ranks_per_node = 1, .causal = 1, .layout = ZZ},
    {CASE("l1_g8_win_left_ring_bf16_wire_input", 8, 96), .ranks_per_node = 1, .dtype = BF16,
     .window_left = 20, .bwd = RING, .wire = WIN},
};
HARNESS_TABLE_END

/* ---- slow sweep ---- */

/* Every other case on a two-level ring: L cycles through the proper divisors of G (0 = flat). */
static int two_level_split(int G, int idx)
{
    if (idx % 2 == 0 || G == 1)
        return 0;
    int divs[8], n = 0;
    for (int L = 1; L < G && n < 8; L++)
        if (G % L == 0)
            divs[n++] = L;
    return divs[(idx / 2) % n];
}

static void test_sweep(void **state)
{
    (void)state;
    static const int Gs[] = {1, 2, 3, 4, 7, 8};
    static const int64_t wins[][2] = {{-1, -1}, {16, -1}, {-1, 8}, {5, 7}};
    static const int dims[] = {8, 24, 64, 128, 256, 40};
    static const int heads[][2] = {{2, 2}, {4, 1}, {8, 1}, {8, 2}, {1, 1}};
    static const burst_dtype_t dts[] = {F32, F16, BF16};
    int total = 0, failed = 0, idx = 0;
    for (size_t gi = 0; gi < sizeof Gs / sizeof *Gs; gi++)
        for (int layout = 0; layout < 3; layout++)
            for (int causal = 0; causal < 2; causal++)
                for (size_t wi = 0; wi < sizeof wins / sizeof *wins; wi++)
                    for (int bwd = 0; bwd < 2; bwd++)
                        for (size_t ti = 0; ti < 3; ti++, idx++) {
                            const int G = Gs[gi];
                            const int d = dims[idx % 6];
                            const int *hh = heads[(idx / 6) % 5];
                            /* keep the fp64 reference cheap at large d */
                            int64_t per = d >= 128 ? 6 : d >= 64 ? 12 : 24;
                            int64_t N = G * per + (idx % 3 == 0 ? 0 : 1 + idx % (G + 1));
                            if (layout == ZZ && N < 2 * G)
                                N = 2 * G;
                            char name[64];
                            snprintf(name, sizeof name, "sweep%d", idx);
                            struct harness_case c = {
                                .name = name,
                                .ranks = G,
                                .batch = 1 + idx % 2,
                                .seq_len = N,
                                .q_heads = hh[0],
                                .kv_heads = hh[1],
                                .head_dim = d,
                                .dtype = dts[ti],
                                .causal = causal,
                                .window_left = wins[wi][0],
                                .window_right = wins[wi][1],
                                .layout = (burst_layout_t)layout,
                                .bwd = (burst_bwd_pattern_t)bwd,
                                .wire = (idx / 3) % 2 ? BURST_WIRE_INPUT : BURST_WIRE_FP32,
                                .pad = idx % 7 == 0 ? 8 : 0,
                                .ranks_per_node = two_level_split(G, idx),
                            };
                            total++;
                            if (!harness_check_case(&c, 0))
                                failed++;
                        }
    printf("sweep: %d of %d cases failed\n", failed, total);
    assert_int_equal(failed, 0);
}

int main(int argc, char **argv)
{
    printf("seed: BURST_TEST_SEED=%llu\n", (unsigned long long)harness_seed());
    if (argc > 1 && strcmp(argv[1], "--slow") == 0) {
        const struct CMUnitTest slow[] = {cmocka_unit_test(test_sweep)};
        return cmocka_run_group_tests_name("attention_sweep", slow, NULL, NULL);
    }
    const size_t n = sizeof unit_cases / sizeof *unit_cases;
    if (argc > 2 && strcmp(argv[1], "--every") == 0) {
        const int k = atoi(argv[2]), first = argc > 3 ? atoi(argv[3]) : 0;
        static struct harness_case some[sizeof unit_cases / sizeof *unit_cases];
        size_t m = 0;
        for (size_t i = first > 0 ? (size_t)first : 0; k > 0 && i < n; i += (size_t)k)
            some[m++] = unit_cases[i];
        if (m == 0) {
            fprintf(stderr, "test_attention: --every '%s' is not a positive count\n", argv[2]);
            return 2;
        }
        return harness_run_cases("attention", some, m, harness_case_test, NULL, 0);
    }
    return harness_run_cases("attention", unit_cases, n, harness_case_test, NULL, 0);
}
