/*
 * tests/test_hetero.c - heterogeneous rings: shards sized by weight or measured speed, the
 * layouts generalised to uneven shards, and ranks on different backends in one ring.
 *
 * 'unit' (no argument): every case on the cpu backend (explicit per-rank contexts where a case
 * names backends):
 *   - the rounding rule of burst_layout_weighted_lens on hand-computed examples and its errors;
 *   - uneven layouts: for random lengths, every layout's positions are a permutation of 0..N-1,
 *     increasing within a rank, and the plan reports the same; equal lengths give the even
 *     layout; zigzag keeps causal work proportional to the shard (the point of sizing by speed);
 *   - the shared harness (fresh random inputs, poisoned outputs, fp64 reference): weight vectors
 *     on natural / zigzag / striped, causal and windows, GQA, fp16 / bf16, both backward
 *     patterns, input-dtype accumulators, the two-level ring, explicit uneven lengths;
 *   - measure_speed: every rank agrees on the measured shards, which follow round 2's speeds
 *     (runtime/speed.h; round 1's with BURST_SPEED_ROUNDS=1); a rerun of a deterministic case
 *     is bitwise equal; each allocation of the measurement failing in turn fails every rank,
 *     none waiting;
 *   - handshake: a rank with other weights, or the only one measuring, fails every rank with
 *     BURST_ERR_PLAN_MISMATCH naming the rank and the field; a caller built against API 0.1 (no
 *     weight fields) is served without reading past its struct.
 * 'mixed' (suite vulkan): the same harness cases with ranks alternating cpu and vulkan contexts
 * in one in-process ring (exit 77 where Vulkan is missing), bitwise reruns in deterministic mode.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "context_internal.h"
#include "fault.h"
#include "harness_table.h"

static const double w_a[] = {1, 2, 3, 4};
static const double w_b[] = {3, 1};
static const double w_c[] = {1, 1, 5};
static const double w_d[] = {2.5, 1, 1, 1, 0.5, 3};
static const int64_t lens_zz[] = {2, 9, 5};
static const int64_t lens_str[] = {7, 3, 12, 1};

HARNESS_TABLE_BEGIN
/* uneven shards on one backend; 'mixed' runs them again with backends set */
static struct harness_case cases[] = {
    {CASE("w_natural_full", 4, 60), .shard_weights = w_a},
    {CASE("w_natural_causal_ring", 2, 50), .shard_weights = w_b, .causal = 1, .bwd = RING},
    {CASE("w_zigzag_causal", 4, 64), .shard_weights = w_a, .causal = 1, .layout = ZZ},
    {CASE("w_zigzag_causal_ring_odd", 3, 45), .shard_weights = w_c, .causal = 1, .layout = ZZ,
     .bwd = RING},
    {CASE("w_striped_causal", 4, 64), .shard_weights = w_a, .causal = 1, .layout = STR},
    {CASE("w_striped_causal_ring_gqa4", 6, 72), .shard_weights = w_d, .q_heads = 4, .kv_heads = 1,
     .causal = 1, .layout = STR, .bwd = RING},
    {CASE("w_zigzag_window_bf16_wire_input", 6, 90), .shard_weights = w_d, .q_heads = 4,
     .kv_heads = 2, .dtype = BF16, .causal = 1, .window_left = 20, .layout = ZZ, .wire = WIN},
    {CASE("w_zigzag_fp16_ring", 2, 40), .shard_weights = w_b, .dtype = F16, .causal = 1,
     .layout = ZZ, .bwd = RING},
    {CASE("w_striped_window_two_sided", 3, 48), .shard_weights = w_c, .window_left = 5,
     .window_right = 3, .layout = STR},
    {CASE("w_l2_zigzag_causal_ring", 4, 64), .shard_weights = w_a, .ranks_per_node = 2, .causal = 1,
     .layout = ZZ, .bwd = RING},
    {CASE("lens_zigzag_uneven_causal", 3, 16), .shard_lens = lens_zz, .causal = 1, .layout = ZZ},
    {CASE("lens_striped_uneven_causal_ring", 4, 23), .shard_lens = lens_str, .causal = 1,
     .layout = STR, .bwd = RING},
    {CASE("w_deterministic_striped_ring", 4, 64), .shard_weights = w_a, .causal = 1, .layout = STR,
     .bwd = RING, .deterministic = 1},
    {CASE("w_deterministic_zigzag_fp16", 3, 48), .shard_weights = w_c, .dtype = F16, .causal = 1,
     .layout = ZZ, .deterministic = 1},
};
HARNESS_TABLE_END
#define NCASES (sizeof cases / sizeof *cases)

static void test_case(void **state)
{
    const struct harness_case *c = *state;
    struct harness_problem *p = harness_problem_create(c);
    assert_non_null(p);
    assert_int_equal(harness_problem_run(p), 0);
    struct harness_err err[H_NTENSORS];
    int ok = harness_problem_compare(p, err);
    harness_problem_print(p, err, ok ? "ok" : "FAIL");
    for (int r = 0; r < c->ranks; r++) /* the plan's lengths and positions are the harness's */
        assert_true(harness_problem_record(p, r)->positions_ok);
    assert_true(ok);
    if (c->deterministic) { /* a rerun is bitwise equal, on any mix of backends */
        struct harness_outputs *first = harness_outputs_save(p);
        assert_non_null(first);
        assert_int_equal(harness_problem_run(p), 0);
        const int t = harness_outputs_diff(first, p);
        harness_outputs_free(first);
        if (t >= 0)
            fail_msg("%s: rerun differs in %s", c->name,
                     harness_tensor_name((enum harness_tensor)t));
    }
    harness_problem_destroy(p);
}

/* ---- the rounding rule ---- */

static void expect_lens(burst_layout_t layout, int64_t n, int g, const double *w,
                        const int64_t *want)
{
    int64_t got[8];
    assert_int_equal(burst_layout_weighted_lens(layout, n, g, w, got), BURST_OK);
    for (int i = 0; i < g; i++)
        if (got[i] != want[i])
            fail_msg("layout %d N=%lld rank %d: %lld tokens, expected %lld", (int)layout,
                     (long long)n, i, (long long)got[i], (long long)want[i]);
}

static void test_rounding(void **state)
{
    (void)state;
    const double eq3[] = {1, 1, 1}, tilt[] = {1, 1e6}, w123[] = {1, 2, 3};
    expect_lens(NAT, 10, 3, eq3, (const int64_t[]){4, 3, 3}); /* ties to the lower rank */
    expect_lens(NAT, 10, 2, tilt, (const int64_t[]){1, 9});   /* at least one token */
    expect_lens(ZZ, 10, 2, tilt, (const int64_t[]){2, 8});    /* zigzag: at least two */
    expect_lens(STR, 60, 3, w123, (const int64_t[]){10, 20, 30});
    expect_lens(NAT, 61, 3, w123, (const int64_t[]){10, 20, 31}); /* quotas 10.17 20.33 30.5 */
    expect_lens(NAT, 7, 4, w_a, (const int64_t[]){1, 1, 2, 3});   /* 0.7 1.4 2.1 2.8: min first */
    const double zero[] = {1, 0}, inf[] = {1, 1.0 / 0.0};
    int64_t out[2] = {-7, -7};
    assert_int_equal(burst_layout_weighted_lens(NAT, 10, 2, zero, out), BURST_ERR_INVALID_ARG);
    assert_true(harness_contains(burst_last_error(), "shard_weights[1] = 0"));
    assert_int_equal(burst_layout_weighted_lens(NAT, 10, 2, inf, out), BURST_ERR_INVALID_ARG);
    assert_true(harness_contains(burst_last_error(), "shard_weights[1]"));
    assert_int_equal(burst_layout_weighted_lens(ZZ, 3, 2, eq3, out), BURST_ERR_INVALID_ARG);
    assert_true(harness_contains(burst_last_error(), "seq_len = 3"));
    assert_int_equal(out[0], -7); /* untouched on error */
}

/* ---- uneven layouts ---- */

static void test_layouts(void **state)
{
    (void)state;
    uint64_t rng = harness_seed() ^ 0x5eedu;
    for (int trial = 0; trial < 300; trial++) {
        const int g = 1 + (int)(harness_rng_next(&rng) % 7);
        const burst_layout_t layout = (burst_layout_t)(trial % 3);
        const int64_t m0 = layout == ZZ ? 2 : 1;
        int64_t lens[8], n = 0;
        for (int i = 0; i < g; i++)
            n += lens[i] = m0 + (int64_t)(harness_rng_next(&rng) % 13);
        int64_t *seen = calloc((size_t)n, sizeof *seen);
        assert_non_null(seen);
        for (int r = 0; r < g; r++) {
            int64_t prev = -1;
            for (int64_t l = 0; l < lens[r]; l++) {
                int64_t pos = -1;
                assert_int_equal(burst_layout_position_lens(layout, n, g, lens, r, l, &pos),
                                 BURST_OK);
                if (pos <= prev || pos >= n)
                    fail_msg("layout %d G=%d rank %d row %lld: position %lld after %lld",
                             (int)layout, g, r, (long long)l, (long long)pos, (long long)prev);
                seen[pos]++;
                prev = pos;
            }
        }
        for (int64_t i = 0; i < n; i++)
            if (seen[i] != 1)
                fail_msg("layout %d G=%d: position %lld held %lld times", (int)layout, g,
                         (long long)i, (long long)seen[i]);
        free(seen);
    }
    /* the even lengths, given explicitly, are the even layout (striped: longer shards first) */
    for (int layout = 1; layout < 3; layout++) {
        const int g = 5;
        const int64_t n = 23;
        int64_t lens[5];
        for (int r = 0; r < g; r++)
            assert_int_equal(burst_layout_shard_len((burst_layout_t)layout, n, g, r, &lens[r]),
                             BURST_OK);
        for (int r = 0; layout == STR && r < g; r++)
            for (int64_t l = 0; l < lens[r]; l++) {
                int64_t a, b;
                burst_layout_position(STR, n, g, r, l, &a);
                burst_layout_position_lens(STR, n, g, lens, r, l, &b);
                assert_int_equal(a, b);
            }
    }
    /* zigzag: causal work (keys at or before each row) stays proportional to the shard */
    const int64_t n = 4000;
    int64_t lens[4];
    assert_int_equal(burst_layout_weighted_lens(ZZ, n, 4, w_a, lens), BURST_OK);
    for (int r = 0; r < 4; r++) {
        double work = 0.0;
        for (int64_t l = 0; l < lens[r]; l++) {
            int64_t pos;
            burst_layout_position_lens(ZZ, n, 4, lens, r, l, &pos);
            work += (double)pos + 1.0;
        }
        double ratio = work / ((double)lens[r] * (double)n / 2.0);
        if (ratio < 0.99 || ratio > 1.01)
            fail_msg("zigzag rank %d: causal work %.0f is %.3f x n_i N / 2", r, work, ratio);
    }
}

/* ---- measured speeds, mismatches, an API 0.1 caller ---- */

#define MG 3
struct mstate {
    int kind; /* 0 measure on all, 1 rank 1 other weights, 2 rank 2 alone measures, 3 API 0.1 */
    burst_status_t st[MG];
    char msg[MG][512];
    int64_t lens[MG][MG];
    double speeds[MG][MG];     /* burst_plan_rank_speed: round 1 */
    double sspeeds[MG][MG];    /* burst_plan_shard_speed: what sized the shards */
    uint64_t setup_sent[MG];   /* bytes the handshake sent (setup phase, slot 0) */
    struct burst_context *ctx; /* the plans' context (NULL: the harness's) */
};

static void mrank(int rank, struct burst_comm *comm, void *arg)
{
    struct mstate *s = arg;
    static const double w1[MG] = {1, 2, 3}, w2[MG] = {1, 3, 2};
    struct burst_plan_params pp = burst_plan_params_default();
    pp.seq_len = 90;
    pp.q_heads = 2;
    pp.kv_heads = 1;
    pp.head_dim = 32;
    pp.causal = 1;
    pp.layout = ZZ;
    if (s->kind == 0 || (s->kind == 2 && rank == 2))
        pp.measure_speed = 1;
    if (s->kind == 1)
        pp.shard_weights = rank == 1 ? w2 : w1;
    if (s->kind == 3) { /* built against 0.1: the newer fields are past its struct's end */
        pp.api_version = ((unsigned)BURST_VERSION_MAJOR << 16) | 1u;
        pp.shard_weights = (const double *)(uintptr_t)8; /* would crash if read */
        pp.measure_speed = 1;
    }
    struct burst_plan *plan = NULL;
    s->st[rank] = burst_plan_create(s->ctx ? s->ctx : harness_context(), comm, &pp, &plan);
    snprintf(s->msg[rank], sizeof s->msg[rank], "%s", burst_last_error());
    struct burst_traffic t = {0};
    if (plan && burst_plan_step_traffic(plan, BURST_PHASE_SETUP, 0, &t) == BURST_OK)
        s->setup_sent[rank] = t.bytes_sent;
    for (int r = 0; plan && r < MG; r++) {
        s->lens[rank][r] = burst_plan_shard_len(plan, r);
        s->speeds[rank][r] = burst_plan_rank_speed(plan, r);
        s->sspeeds[rank][r] = burst_plan_shard_speed(plan, r);
    }
    burst_plan_destroy(plan);
}

static void run_m(struct mstate *s, int kind, struct burst_context *ctx)
{
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->ctx = ctx;
    assert_int_equal(harness_run_ranks(MG, 30000, mrank, s), 0);
    for (int r = 0; r < MG; r++)
        printf("kind %d rank %d: %s lens %lld %lld %lld speeds %.3g %.3g %.3g %s\n", kind, r,
               burst_status_str(s->st[r]), (long long)s->lens[r][0], (long long)s->lens[r][1],
               (long long)s->lens[r][2], s->speeds[r][0], s->speeds[r][1], s->speeds[r][2],
               s->msg[r]);
}

/* Every rank of run s agrees on lens and both rounds' speeds, and the lens are the rounding
 * rule's for the shard speeds (the ones that sized them), as weights relative to the fastest. */
static void check_measured(const struct mstate *s)
{
    double top = 0.0, w[MG];
    for (int i = 0; i < MG; i++)
        top = s->sspeeds[0][i] > top ? s->sspeeds[0][i] : top;
    for (int i = 0; i < MG; i++)
        w[i] = s->sspeeds[0][i] / top;
    int64_t want[MG];
    assert_int_equal(burst_layout_weighted_lens(ZZ, 90, MG, w, want), BURST_OK);
    for (int r = 0; r < MG; r++) {
        assert_int_equal(s->st[r], BURST_OK);
        int64_t sum = 0;
        for (int i = 0; i < MG; i++) {
            assert_true(s->speeds[r][i] > 0.0 && s->sspeeds[r][i] > 0.0);
            assert_true(s->lens[r][i] >= 2);
            assert_true(s->lens[r][i] == s->lens[0][i] && s->speeds[r][i] == s->speeds[0][i] &&
                        s->sspeeds[r][i] == s->sspeeds[0][i]);
            assert_int_equal(s->lens[r][i], want[i]);
            sum += s->lens[r][i];
        }
        assert_int_equal(sum, 90);
        assert_true(s->setup_sent[r] > 0); /* the handshake's count survives the late shards */
    }
}

static void test_measure(void **state)
{
    (void)state;
    struct mstate s;
    run_m(&s, 0, NULL); /* two rounds (runtime/speed.h): round 2 on each rank's round-1 shard */
    check_measured(&s);
    setenv("BURST_SPEED_ROUNDS", "1", 1);          /* round 1 alone: its speeds size the shards */
    struct burst_context one = *harness_context(); /* settings are read at context create */
    assert_int_equal(burst_settings_load("test", BURST_SCOPE_CONTEXT, &one.set), BURST_OK);
    run_m(&s, 0, &one);
    unsetenv("BURST_SPEED_ROUNDS");
    check_measured(&s);
    for (int i = 0; i < MG; i++)
        assert_true(s.sspeeds[0][i] == s.speeds[0][i]);
    run_m(&s, 3, NULL);
    for (int r = 0; r < MG; r++) {
        assert_int_equal(s.st[r], BURST_OK);
        assert_int_equal(s.lens[r][r], 30); /* even: weights and measuring never read */
        assert_true(s.speeds[r][r] == 0.0 && s.sspeeds[r][r] == 0.0);
    }
}

static void expect_mismatch(int kind, const char *field, int bad)
{
    struct mstate s;
    run_m(&s, kind, NULL);
    char rk[32];
    snprintf(rk, sizeof rk, "rank %d", bad);
    for (int r = 0; r < MG; r++) {
        if (s.st[r] != BURST_ERR_PLAN_MISMATCH)
            fail_msg("rank %d: %s, expected BURST_ERR_PLAN_MISMATCH: %s", r,
                     burst_status_str(s.st[r]), s.msg[r]);
        if (!harness_contains(s.msg[r], field) ||
            !(harness_contains(s.msg[r], rk) || (r == bad && harness_contains(s.msg[r], "rank 0"))))
            fail_msg("rank %d: \"%s\" names neither field %s nor %s", r, s.msg[r], field, rk);
    }
}

static void test_mismatch_weights(void **state)
{
    (void)state;
    expect_mismatch(1, "shard_weights", 1);
}

static void test_mismatch_measure(void **state)
{
    (void)state;
    expect_mismatch(2, "measure_speed", 2);
}

/* Every backend allocation of a measured plan (both rounds' step buffers on every rank) fails
 * in turn: every rank returns an error within the run's timeout (no rank waits for a peer
 * that failed), the failing one BURST_ERR_NO_MEMORY naming the allocation. */
static void test_measure_oom(void **state)
{
    (void)state;
    int failed_runs = 0;
    for (int n = 0; n < 100; n++) {
        char spec[64];
        snprintf(spec, sizeof spec, "oom:alloc=%d", n);
        assert_int_equal(burst_fault_set(spec), 0);
        struct mstate s;
        double t0 = harness_now_ms();
        run_m(&s, 0, NULL);
        double dt = harness_now_ms() - t0;
        burst_fault_set(NULL);
        int ok = 0, oom = 0;
        for (int r = 0; r < MG; r++) {
            ok += s.st[r] == BURST_OK;
            if (s.st[r] != BURST_OK && s.st[r] != BURST_ERR_NO_MEMORY &&
                s.st[r] != BURST_ERR_PEER_FAILED && s.st[r] != BURST_ERR_COMM_FAILED)
                fail_msg("alloc %d, rank %d: %s: %s", n, r, burst_status_str(s.st[r]), s.msg[r]);
            if (s.st[r] == BURST_ERR_NO_MEMORY) {
                oom++;
                if (!harness_contains(s.msg[r], "allocate"))
                    fail_msg("alloc %d, rank %d: \"%s\" does not say what failed", n, r, s.msg[r]);
            }
        }
        if (ok == MG)
            break; /* allocation n was not needed: every earlier one was tried */
        if (ok != 0 || oom == 0)
            fail_msg("alloc %d: %d ranks succeeded, %d out of memory: a partial plan", n, ok, oom);
        assert_true(dt < 10000); /* told, not timed out */
        failed_runs++;
    }
    /* five step buffers a round on each rank */
    if (failed_runs < 2 * 5 * MG)
        fail_msg("only %d allocations of a measured plan failed in turn", failed_runs);
}

/* burst_context_device_memory: what burstrun asks to place a rank's tensors (cuda: yes) */
static void test_device_memory(void **state)
{
    (void)state;
    assert_int_equal(burst_context_device_memory(NULL), 0);
    assert_int_equal(burst_context_device_memory(harness_backend_context("cpu")), 0);
}

int main(int argc, char **argv)
{
    printf("seed: BURST_TEST_SEED=%llu\n", (unsigned long long)harness_seed());
    if (argc > 1 && strcmp(argv[1], "mixed") == 0) {
        /* every case again with cpu and vulkan ranks alternating (and the other way round) */
        for (size_t i = 0; i < NCASES; i++)
            cases[i].backends = i % 2 ? "vulkan,cpu" : "cpu,vulkan";
        return harness_run_cases("hetero_mixed", cases, NCASES, test_case, NULL, 0);
    }
    const struct CMUnitTest extra[] = {
        cmocka_unit_test(test_rounding),         cmocka_unit_test(test_layouts),
        cmocka_unit_test(test_measure),          cmocka_unit_test(test_mismatch_weights),
        cmocka_unit_test(test_mismatch_measure), cmocka_unit_test(test_measure_oom),
        cmocka_unit_test(test_device_memory),
    };
    /* one case through the per-rank context list (a cpu context other than the shared one) */
    cases[0].backends = "cpu,cpu";
    return harness_run_cases("hetero", cases, NCASES, test_case, extra,
                             sizeof extra / sizeof *extra);
}
