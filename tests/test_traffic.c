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
 *
 * Two-level ring (ranks_per_node = L): the blocks a rank holds and forwards come from
 * burst_sched_step2 (runtime/schedule.h). The ring runs burst_ring_steps2 steps, at least the
 * steps the two-level order needs (a window may make that more than the flat ring's). Per step,
 * the bytes posted are the blocks the schedule sends (local send at any step, inter-node send
 * at a round's first step) plus the accumulator it hands on (acc_to; slot S: final_to); forward
 * messages per step = local + inter-node sends of the schedule; steps - 1 block messages per
 * rank. Totals: every rank's bytes equal the flat ring's formula for the same step count when
 * shards are even, and the bytes of all ranks together equal it always.
 *
 * burst_comm_pingpong between two ranks of three: the bytes come back, the time is positive.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness_table.h"
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

/* Case c run (the test fails when it does not run); desc holds its description. */
static struct harness_problem *run_case(const struct harness_case *c, char *desc, size_t len)
{
    harness_case_str(c, desc, len);
    struct harness_problem *p = harness_problem_create(c);
    assert_non_null(p);
    if (harness_problem_run(p) != 0) {
        harness_problem_print(p, NULL, "FAIL");
        fail_msg("%s: run failed", desc);
    }
    return p;
}

static void check_traffic(const struct harness_case *c)
{
    char desc[512];
    struct harness_problem *p = run_case(c, desc, sizeof desc);
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
                !(st->overlap >= 0.0 && st->overlap <= 1.0) ||
                (st->steps_computed > 0 && !(st->compute_s > 0.0)))
                fail_msg("%s: rank %d phase %d: step times (%g, %g) do not add up to the phase's "
                         "(%g, %g), overlap %g is wrong, or kernels took no time",
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

/* Steps the two-level order needs for `pat`: 1 + the last step at which a rank holds a block
 * it needs (burst_block_needed, as burst_ring_steps uses it). */
static int two_level_needed(const struct burst_shards *s, struct burst_mask mask, int L,
                            enum burst_sched_pattern pat)
{
    const int G = s->ranks, burst = pat == BURST_SCHED_BWD_BURST;
    int need = 1;
    for (int i = 0; i < G; i++)
        for (int r = 1; r < G; r++) {
            const int b = burst_sched_block(pat, G, L, i, r);
            if (r + 1 > need && burst_block_needed(s, mask, burst ? b : i, burst ? i : b))
                need = r + 1;
        }
    return need;
}

/* Flat ring formula for rank i over S steps (as in check_traffic). */
static uint64_t flat_total(const struct harness_case *c, const int64_t *n, int G, int i, int ph,
                           burst_bwd_pattern_t pat, int S)
{
    uint64_t total = 0;
    const int ring = pat == BURST_BWD_RING;
    for (int r = 0; r < S - 1; r++)
        total += ph == BURST_PHASE_FWD
                     ? fwd_bytes(c, n, wrap(i - r, G))
                     : read_bytes(c, pat, n, ring ? wrap(i - r, G) : wrap(i + r, G));
    if (ph == BURST_PHASE_BWD)
        for (int r = 1; r < S; r++)
            total += acc_bytes(c, pat, n, ring ? wrap(i - r, G) : wrap(i + r, G));
    return total;
}

static void check_traffic2(const struct harness_case *c)
{
    char desc[512];
    struct harness_problem *p = run_case(c, desc, sizeof desc);
    const int G = c->ranks, L = c->ranks_per_node;
    struct burst_shards s;
    assert_int_equal(burst_shards_init(&s, "test", c->layout, c->seq_len, G, c->shard_lens),
                     BURST_OK);
    const struct burst_mask mask = burst_mask_make(c->causal, c->window_left, c->window_right);
    const int64_t *n = s.lens;
    int even = c->shard_lens == NULL;
    for (int i = 1; i < G; i++)
        even = even && n[i] == n[0];
    struct burst_sched_step *sc = calloc((size_t)G * (size_t)(G + 1), sizeof *sc);
    assert_non_null(sc);

    for (int ph = BURST_PHASE_FWD; ph <= BURST_PHASE_BWD; ph++) {
        const burst_bwd_pattern_t pat = harness_problem_record(p, 0)->bwd_used;
        const enum burst_sched_pattern sp = ph == BURST_PHASE_FWD   ? BURST_SCHED_FWD
                                            : pat == BURST_BWD_RING ? BURST_SCHED_BWD_RING
                                                                    : BURST_SCHED_BWD_BURST;
        const int S = harness_problem_record(p, 0)->stats[ph].steps;
        const int need = two_level_needed(&s, mask, L, sp);
        if (S != burst_ring_steps2(&s, mask, L) || S < need || S > G)
            fail_msg("%s: phase %d ran %d steps; burst_ring_steps2 = %d, the two-level order "
                     "needs %d (of %d)",
                     desc, ph, S, burst_ring_steps2(&s, mask, L), need, G);
        for (int i = 0; i < G; i++)
            for (int r = 0; r < S; r++)
                burst_sched_step2(sp, &s, mask, L, i, r, S, &sc[(size_t)i * (size_t)(G + 1) + r]);
        uint64_t grand = 0, grand_flat = 0, sent_all = 0, recv_all = 0;
        for (int i = 0; i < G; i++) {
            const struct harness_rank_record *rec = harness_problem_record(p, i);
            const struct burst_phase_stats *st = &rec->stats[ph];
            const struct burst_sched_step *me = &sc[(size_t)i * (size_t)(G + 1)];
            if (st->steps != S || rec->bwd_used != pat)
                fail_msg("%s: rank %d phase %d: %d steps, pattern %d; rank 0: %d, %d", desc, i, ph,
                         st->steps, (int)rec->bwd_used, S, (int)pat);
            assert_non_null(rec->step_traffic[ph]);
            uint64_t total = 0, blocks = 0;
            for (int r = 0; r <= S; r++) {
                uint64_t want = 0, msgs = 0;
                if (r < S) {
                    const int nsend = (me[r].send_to >= 0) + (me[r].inter_send_to >= 0);
                    msgs += (uint64_t)nsend;
                    blocks += (uint64_t)nsend;
                    want += (uint64_t)nsend * (ph == BURST_PHASE_FWD
                                                   ? fwd_bytes(c, n, me[r].block)
                                                   : read_bytes(c, pat, n, me[r].block));
                    if (ph == BURST_PHASE_BWD && me[r].acc_to >= 0)
                        want += acc_bytes(c, pat, n, me[r - 1].block);
                } else if (ph == BURST_PHASE_BWD && S >= 2) {
                    want += acc_bytes(c, pat, n, me[S - 1].block);
                }
                const struct burst_traffic *t = &rec->step_traffic[ph][r];
                if (t->bytes_sent != want)
                    fail_msg("%s: rank %d %s step %d of %d (L=%d) sent %llu bytes, expected %llu "
                             "(local send %d, inter send %d, acc_to %d)",
                             desc, i, ph == BURST_PHASE_FWD ? "forward" : "backward", r, S, L,
                             (unsigned long long)t->bytes_sent, (unsigned long long)want,
                             r < S ? me[r].send_to : -1, r < S ? me[r].inter_send_to : -1,
                             r < S ? me[r].acc_to : -1);
                if (ph == BURST_PHASE_FWD && t->msgs_sent != msgs)
                    fail_msg("%s: rank %d forward step %d (L=%d) posted %llu messages, the "
                             "schedule says %llu (local send %d, inter send %d)",
                             desc, i, r, L, (unsigned long long)t->msgs_sent,
                             (unsigned long long)msgs, r < S ? me[r].send_to : -1,
                             r < S ? me[r].inter_send_to : -1);
                total += want;
            }
            if (blocks != (uint64_t)(S - 1))
                fail_msg("%s: rank %d phase %d: %llu block messages in %d steps", desc, i, ph,
                         (unsigned long long)blocks, S);
            if (st->traffic.bytes_sent != total)
                fail_msg("%s: rank %d phase %d total %llu bytes, expected %llu", desc, i, ph,
                         (unsigned long long)st->traffic.bytes_sent, (unsigned long long)total);
            const uint64_t flat = flat_total(c, n, G, i, ph, pat, S);
            if (even && total != flat)
                fail_msg("%s: rank %d phase %d: two-level total %llu bytes, flat ring %llu", desc,
                         i, ph, (unsigned long long)total, (unsigned long long)flat);
            grand += total;
            grand_flat += flat;
            sent_all += st->traffic.bytes_sent;
            recv_all += st->traffic.bytes_recv;
        }
        if (grand != grand_flat || sent_all != recv_all)
            fail_msg("%s: phase %d: all ranks send %llu bytes (flat ring %llu), receive %llu", desc,
                     ph, (unsigned long long)sent_all, (unsigned long long)grand_flat,
                     (unsigned long long)recv_all);
    }
    free(sc);
    burst_shards_fini(&s);
    harness_problem_destroy(p);
}

/* heads of 16 */
#define TCASE(nm, G, n) CASE(nm, G, n), .head_dim = 16

HARNESS_TABLE_BEGIN
static const int64_t lens_a[] = {5, 17, 1, 9};
static const struct harness_case cases[] = {
    {TCASE("mha_fp32_burst_zigzag", 4, 64), .causal = 1, .layout = BURST_LAYOUT_ZIGZAG},
    {TCASE("mha_fp32_ring", 4, 64), .bwd = BURST_BWD_RING},
    {TCASE("gqa_bf16_ring_uneven", 3, 50), .q_heads = 8, .dtype = BURST_DTYPE_BF16,
     .bwd = BURST_BWD_RING},
    {TCASE("fp16_burst_wire_input_striped", 5, 53), .q_heads = 4, .dtype = BURST_DTYPE_FP16,
     .layout = BURST_LAYOUT_STRIPED, .wire = BURST_WIRE_INPUT},
    {TCASE("bf16_ring_wire_input_lens", 4, 32), .shard_lens = lens_a, .dtype = BURST_DTYPE_BF16,
     .bwd = BURST_BWD_RING, .wire = BURST_WIRE_INPUT, .causal = 1},
    {TCASE("bf16_burst_lens", 4, 32), .shard_lens = lens_a, .dtype = BURST_DTYPE_BF16},
    {TCASE("window_stops_early_burst", 8, 128), .window_left = 10},
    {TCASE("window_stops_early_ring", 8, 128), .window_left = 10, .causal = 1,
     .bwd = BURST_BWD_RING},
    {TCASE("window_right_zigzag", 4, 96), .window_right = 5, .layout = BURST_LAYOUT_ZIGZAG,
     .bwd = BURST_BWD_RING, .wire = BURST_WIRE_INPUT},
    {TCASE("g1_no_traffic", 1, 16), .causal = 1},
    {TCASE("g2_batch2_d128", 2, 20), .batch = 2, .head_dim = 128, .dtype = BURST_DTYPE_FP16},
    {TCASE("g7_uneven_burst", 7, 31), .q_heads = 3, .kv_heads = 1},
    /* AUTO: MHA -> burst; GQA 4:1 -> ring; input-dtype wire too */
    {TCASE("auto_mha", 3, 30), .bwd = BURST_BWD_AUTO},
    {TCASE("auto_gqa4", 3, 30), .q_heads = 8, .bwd = BURST_BWD_AUTO},
    {TCASE("auto_mha_bf16_wire_input", 3, 30), .dtype = BURST_DTYPE_BF16, .wire = BURST_WIRE_INPUT,
     .bwd = BURST_BWD_AUTO},
    {TCASE("auto_gqa2_bf16_wire_input", 3, 30), .q_heads = 4, .dtype = BURST_DTYPE_BF16,
     .wire = BURST_WIRE_INPUT, .bwd = BURST_BWD_AUTO},
    {TCASE("auto_gqa2_d8", 4, 40), .q_heads = 4, .head_dim = 8, .bwd = BURST_BWD_AUTO},
    /* two-level ring (check_traffic2) */
    {TCASE("l2_g4_burst_zigzag", 4, 64), .ranks_per_node = 2, .causal = 1,
     .layout = BURST_LAYOUT_ZIGZAG},
    {TCASE("l2_g6_ring_bf16", 6, 60), .ranks_per_node = 2, .dtype = BURST_DTYPE_BF16,
     .bwd = BURST_BWD_RING},
    {TCASE("l3_g6_window_burst", 6, 96), .ranks_per_node = 3, .window_left = 10},
    {TCASE("l4_g8_window_ring_wire_input", 8, 128), .ranks_per_node = 4, .window_left = 10,
     .causal = 1, .bwd = BURST_BWD_RING, .wire = BURST_WIRE_INPUT, .dtype = BURST_DTYPE_BF16},
    {TCASE("l2_g4_lens_burst_bf16", 4, 32), .ranks_per_node = 2, .shard_lens = lens_a,
     .dtype = BURST_DTYPE_BF16},
    {TCASE("l1_g4_ring_gqa", 4, 40), .ranks_per_node = 1, .q_heads = 4, .bwd = BURST_BWD_RING},
    {TCASE("l2_g4_auto_gqa4", 4, 40), .ranks_per_node = 2, .q_heads = 8, .bwd = BURST_BWD_AUTO},
};
HARNESS_TABLE_END

static void test_case(void **state)
{
    const struct harness_case *c = *state;
    if (c->ranks_per_node > 0)
        check_traffic2(c);
    else
        check_traffic(c);
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

/* burst_comm_pingpong between ranks 0 and 2 of three (rank 1 takes no part): rank 2 ends with
 * rank 0's bytes, both report a positive time, 0 bytes work too. */
struct pingpong_arg {
    burst_status_t st[3], st0[3];
    double seconds[3];
    int echoed[3];
};

static void pingpong_rank(int rank, struct burst_comm *comm, void *arg)
{
    struct pingpong_arg *a = arg;
    if (rank == 1)
        return;
    unsigned char buf[1000];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = rank == 0 ? (unsigned char)(i * 7 + 1) : 0;
    a->st[rank] = burst_comm_pingpong(comm, 2 - rank, buf, sizeof(buf), 5, &a->seconds[rank]);
    a->echoed[rank] = 1;
    for (size_t i = 0; i < sizeof(buf); i++)
        a->echoed[rank] &= buf[i] == (unsigned char)(i * 7 + 1);
    double s0;
    a->st0[rank] = burst_comm_pingpong(comm, 2 - rank, NULL, 0, 3, &s0);
}

static void test_pingpong(void **state)
{
    (void)state;
    struct pingpong_arg a = {{BURST_ERR_INTERNAL, 0, BURST_ERR_INTERNAL}, {0}, {0}, {0}};
    assert_int_equal(harness_run_ranks(3, 10000, pingpong_rank, &a), 0);
    for (int r = 0; r <= 2; r += 2) {
        assert_int_equal(a.st[r], BURST_OK);
        assert_int_equal(a.st0[r], BURST_OK);
        assert_true(a.seconds[r] > 0.0);
        assert_true(a.echoed[r]);
    }
}

int main(void)
{
    printf("seed: BURST_TEST_SEED=%llu\n", (unsigned long long)harness_seed());
    const struct CMUnitTest extra[] = {cmocka_unit_test(test_paper_ratio),
                                       cmocka_unit_test(test_pingpong)};
    return harness_run_cases("traffic", cases, sizeof cases / sizeof *cases, test_case, extra, 2);
}
