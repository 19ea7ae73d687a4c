/*
 * tests/test_traffic.c - bytes on the wire equal ALGORITHM.md section 2 exactly (invariant 6),
 * as counted by the transport and reported by burst_plan_stats / burst_plan_step_traffic.
 *
 * Per rank i, with n_a the length of the travelling block's OWNER a (uneven shards), es the
 * dtype size and ws the wire size of travelling accumulators (4 for BURST_WIRE_FP32, else es),
 * over the S = stats.steps steps of the call (S < G when a window stops the ring early):
 *   forward, step r < S-1: one message of K, V of block a = i - r:   2 B n_a Hkv d es
 *   burst backward, step r < S-1, bundle a = i + r:  Q, dO in dtype, lse and D fp32
 *                                                    = B n_a Hq (2 d es + 2*4)
 *     plus, for r >= 2, the dQ accumulator finished at step r-1 (block i + r - 1): B n Hq d ws;
 *     slot S (final hop) the accumulator of block i + S - 1.
 *   ring backward, step r < S-1, block a = i - r: K, V in dtype = 2 B n_a Hkv d es, plus for
 *     r >= 2 the dK, dV accumulators of block i - r + 1: 2 B n Hkv d ws; slot S: block i - S + 1.
 * Totals (stats.traffic) equal the sums; every byte sent is received by a neighbour. BURST_BWD_AUTO
 * must resolve to the pattern with fewer bytes (burst on a tie).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "schedule.h"

static int wrap(int x, int g)
{
    return ((x % g) + g) % g;
}

static uint64_t fwd_bytes(const struct harness_case *c, const int64_t *n, int a)
{
    return 2ull * (uint64_t)(c->batch * n[a] * c->kv_heads * c->head_dim) *
           burst_dtype_size(c->dtype);
}

static uint64_t read_bytes(const struct harness_case *c, burst_bwd_pattern_t pat, const int64_t *n,
                           int a)
{
    const uint64_t es = burst_dtype_size(c->dtype);
    if (pat == BURST_BWD_RING)
        return 2ull * (uint64_t)(c->batch * n[a] * c->kv_heads * c->head_dim) * es;
    return (uint64_t)(c->batch * n[a] * c->q_heads) * (2ull * (uint64_t)c->head_dim * es + 8ull);
}

static uint64_t acc_bytes(const struct harness_case *c, burst_bwd_pattern_t pat, const int64_t *n,
                          int a)
{
    const uint64_t ws = c->wire == BURST_WIRE_FP32 ? 4 : burst_dtype_size(c->dtype);
    if (pat == BURST_BWD_RING)
        return 2ull * (uint64_t)(c->batch * n[a] * c->kv_heads * c->head_dim) * ws;
    return (uint64_t)(c->batch * n[a] * c->q_heads * c->head_dim) * ws;
}

static void check_traffic(const struct harness_case *c)
{
    char desc[512];
    harness_case_str(c, desc, sizeof desc);
    struct harness_problem *p = harness_problem_create(c);
    assert_non_null(p);
    if (harness_problem_run(p) != 0) {
        harness_problem_print(p, NULL, "FAIL");
        fail_msg("%s: run failed", desc);
    }
    const int G = c->ranks;
    struct burst_shards s;
    assert_int_equal(burst_shards_init(&s, "test", c->layout, c->seq_len, G, c->shard_lens),
                     BURST_OK);
    const struct burst_mask mask = burst_mask_make(c->causal, c->window_left, c->window_right);
    const int S = burst_ring_steps(&s, mask);
    const int64_t *n = s.lens;

    /* AUTO: the smaller of the two patterns summed over all ranks (burst on a tie) */
    uint64_t tot[2] = {0, 0};
    for (int pat = 0; pat < 2; pat++)
        for (int i = 0; i < G; i++)
            for (int r = 0; r < S - 1; r++) {
                int a = pat == BURST_BWD_RING ? wrap(i - r, G) : wrap(i + r, G);
                tot[pat] += read_bytes(c, (burst_bwd_pattern_t)pat, n, a);
            }
    for (int pat = 0; pat < 2; pat++)
        for (int i = 0; i < G; i++)
            for (int r = 1; r < S; r++)
                tot[pat] += acc_bytes(c, (burst_bwd_pattern_t)pat, n,
                                      pat == BURST_BWD_RING ? wrap(i - r, G) : wrap(i + r, G));
    const burst_bwd_pattern_t want_pat = c->bwd != BURST_BWD_AUTO ? c->bwd
                                         : tot[1] < tot[0]        ? BURST_BWD_RING
                                                                  : BURST_BWD_BURST;

    uint64_t sent_all[3] = {0, 0, 0}, recv_all[3] = {0, 0, 0};
    for (int i = 0; i < G; i++) {
        const struct harness_rank_record *rec = harness_problem_record(p, i);
        const burst_bwd_pattern_t pat = rec->bwd_used;
        if (pat != want_pat)
            fail_msg("%s: rank %d uses backward pattern %d, expected %d (burst %llu bytes, ring "
                     "%llu)",
                     desc, i, (int)pat, (int)want_pat, (unsigned long long)tot[0],
                     (unsigned long long)tot[1]);
        for (int ph = BURST_PHASE_FWD; ph <= BURST_PHASE_BWD; ph++) {
            const struct burst_phase_stats *st = &rec->stats[ph];
            if (st->steps != S)
                fail_msg("%s: rank %d phase %d ran %d steps, expected %d", desc, i, ph, st->steps,
                         S);
            assert_non_null(rec->step_traffic[ph]);
            /* per-step times add up to the phase's, and overlap is compute / (compute + wait) */
            const double busy = st->compute_s + st->wait_s;
            if (fabs(rec->step_compute_sum[ph] - st->compute_s) > 1e-9 ||
                fabs(rec->step_wait_sum[ph] - st->wait_s) > 1e-9 ||
                fabs(st->overlap - (busy > 0.0 ? st->compute_s / busy : 1.0)) > 1e-12 ||
                !(st->overlap >= 0.0 && st->overlap <= 1.0))
                fail_msg("%s: rank %d phase %d: step times (%g, %g) do not add up to the phase's "
                         "(%g, %g) or overlap %g is wrong",
                         desc, i, ph, rec->step_compute_sum[ph], rec->step_wait_sum[ph],
                         st->compute_s, st->wait_s, st->overlap);
            uint64_t total = 0;
            for (int r = 0; r <= S; r++) {
                uint64_t want = 0, msgs_min = 0;
                if (ph == BURST_PHASE_FWD) {
                    if (r < S - 1) {
                        want = fwd_bytes(c, n, wrap(i - r, G));
                        msgs_min = 1;
                    }
                } else {
                    const int ring = pat == BURST_BWD_RING;
                    if (r < S - 1)
                        want += read_bytes(c, pat, n, ring ? wrap(i - r, G) : wrap(i + r, G));
                    if (r >= 2 && r < S)
                        want +=
                            acc_bytes(c, pat, n, ring ? wrap(i - r + 1, G) : wrap(i + r - 1, G));
                    if (r == S && S >= 2)
                        want +=
                            acc_bytes(c, pat, n, ring ? wrap(i - S + 1, G) : wrap(i + S - 1, G));
                }
                const struct burst_traffic *t = &rec->step_traffic[ph][r];
                if (t->bytes_sent != want)
                    fail_msg("%s: rank %d %s step %d of %d sent %llu bytes, expected %llu", desc, i,
                             ph == BURST_PHASE_FWD ? "forward" : "backward", r, S,
                             (unsigned long long)t->bytes_sent, (unsigned long long)want);
                if (ph == BURST_PHASE_FWD && t->msgs_sent != msgs_min)
                    fail_msg("%s: rank %d forward step %d posted %llu messages, expected %llu "
                             "(K and V travel as one message)",
                             desc, i, r, (unsigned long long)t->msgs_sent,
                             (unsigned long long)msgs_min);
                total += want;
            }
            if (st->traffic.bytes_sent != total)
                fail_msg("%s: rank %d phase %d total %llu bytes, expected %llu", desc, i, ph,
                         (unsigned long long)st->traffic.bytes_sent, (unsigned long long)total);
            sent_all[ph] += st->traffic.bytes_sent;
            recv_all[ph] += st->traffic.bytes_recv;
        }
    }
    for (int ph = BURST_PHASE_FWD; ph <= BURST_PHASE_BWD; ph++)
        if (sent_all[ph] != recv_all[ph])
            fail_msg("%s: phase %d: %llu bytes sent but %llu received", desc, ph,
                     (unsigned long long)sent_all[ph], (unsigned long long)recv_all[ph]);
    burst_shards_fini(&s);
    harness_problem_destroy(p);
}

#define CASE(nm, G, n)                                                                             \
    .name = (nm), .ranks = (G), .batch = 1, .seq_len = (n), .q_heads = 2, .kv_heads = 2,           \
    .head_dim = 16, .dtype = BURST_DTYPE_FP32, .window_left = -1, .window_right = -1

#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Woverride-init"
#endif
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Winitializer-overrides"
#endif
static const int64_t lens_a[] = {5, 17, 1, 9};
static const struct harness_case cases[] = {
    {CASE("mha_fp32_burst_zigzag", 4, 64), .causal = 1, .layout = BURST_LAYOUT_ZIGZAG},
    {CASE("mha_fp32_ring", 4, 64), .bwd = BURST_BWD_RING},
    {CASE("gqa_bf16_ring_uneven", 3, 50), .q_heads = 8, .dtype = BURST_DTYPE_BF16,
     .bwd = BURST_BWD_RING},
    {CASE("fp16_burst_wire_input_striped", 5, 53), .q_heads = 4, .dtype = BURST_DTYPE_FP16,
     .layout = BURST_LAYOUT_STRIPED, .wire = BURST_WIRE_INPUT},
    {CASE("bf16_ring_wire_input_lens", 4, 32), .shard_lens = lens_a, .dtype = BURST_DTYPE_BF16,
     .bwd = BURST_BWD_RING, .wire = BURST_WIRE_INPUT, .causal = 1},
    {CASE("bf16_burst_lens", 4, 32), .shard_lens = lens_a, .dtype = BURST_DTYPE_BF16},
    {CASE("window_stops_early_burst", 8, 128), .window_left = 10},
    {CASE("window_stops_early_ring", 8, 128), .window_left = 10, .causal = 1,
     .bwd = BURST_BWD_RING},
    {CASE("window_right_zigzag", 4, 96), .window_right = 5, .layout = BURST_LAYOUT_ZIGZAG,
     .bwd = BURST_BWD_RING, .wire = BURST_WIRE_INPUT},
    {CASE("g1_no_traffic", 1, 16), .causal = 1},
    {CASE("g2_batch2_d128", 2, 20), .batch = 2, .head_dim = 128, .dtype = BURST_DTYPE_FP16},
    {CASE("g7_uneven_burst", 7, 31), .q_heads = 3, .kv_heads = 1},
    /* AUTO: MHA -> burst; GQA 4:1 -> ring; input-dtype wire too */
    {CASE("auto_mha", 3, 30), .bwd = BURST_BWD_AUTO},
    {CASE("auto_gqa4", 3, 30), .q_heads = 8, .bwd = BURST_BWD_AUTO},
    {CASE("auto_mha_bf16_wire_input", 3, 30), .dtype = BURST_DTYPE_BF16, .wire = BURST_WIRE_INPUT,
     .bwd = BURST_BWD_AUTO},
    {CASE("auto_gqa2_bf16_wire_input", 3, 30), .q_heads = 4, .dtype = BURST_DTYPE_BF16,
     .wire = BURST_WIRE_INPUT, .bwd = BURST_BWD_AUTO},
    {CASE("auto_gqa2_d8", 4, 40), .q_heads = 4, .head_dim = 8, .bwd = BURST_BWD_AUTO},
};
#if defined(__clang__)
#pragma clang diagnostic pop
#endif
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

static void test_case(void **state)
{
    check_traffic(*state);
}

/* The section 2 example: MHA, d = 128, one dtype (fp32 accumulators off): burst sends 386
 * elements per row-head against ring's 512 (24.6% fewer). */
static void test_paper_ratio(void **state)
{
    (void)state;
    struct harness_case c = {CASE("paper", 2, 4), .wire = BURST_WIRE_INPUT};
    c.head_dim = 128;
    c.q_heads = c.kv_heads = 1;
    const int64_t n[2] = {1, 1};
    /* fp32 everywhere: lse and D are 4 bytes = one element */
    uint64_t burst = read_bytes(&c, BURST_BWD_BURST, n, 0) + acc_bytes(&c, BURST_BWD_BURST, n, 0);
    uint64_t ring = read_bytes(&c, BURST_BWD_RING, n, 0) + acc_bytes(&c, BURST_BWD_RING, n, 0);
    assert_int_equal(burst, 386 * 4);
    assert_int_equal(ring, 512 * 4);
}

int main(void)
{
    printf("seed: BURST_TEST_SEED=%llu\n", (unsigned long long)harness_seed());
    enum {
        NCASES = sizeof cases / sizeof *cases
    };
    struct CMUnitTest tests[NCASES + 1];
    for (size_t i = 0; i < NCASES; i++) {
        struct CMUnitTest t = {cases[i].name, test_case, NULL, NULL, (void *)&cases[i]};
        tests[i] = t;
    }
    struct CMUnitTest t = {"paper_ratio", test_paper_ratio, NULL, NULL, NULL};
    tests[NCASES] = t;
    return _cmocka_run_group_tests("traffic", tests, NCASES + 1, NULL, NULL);
}
