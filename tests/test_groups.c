/*
 * tests/test_groups.c - head groups (plan.workspace_limit, burst/plan.h): a call whose ring runs
 * once per group of heads must compute what the unsplit call computes.
 *
 * For each case, the same inputs (same case name, so the same seed) run unsplit (limit
 * UINT64_MAX), split as the limit asks, and split into one K/V head per group (limit 1). Every
 * split run must:
 *   - pass the fp64 reference within the harness's tolerances (harness.h; outputs poisoned first,
 *     padding between heads must stay poison);
 *   - equal the unsplit run bitwise (heads never mix, and each head's arithmetic is the same;
 *     the cases are deterministic);
 *   - give the number of groups the limit implies, scratch within the limit (unless the limit is
 *     below one head per group), and scratch_bytes of the larger call equal to
 *     burst_plan_workspace_bytes (at most that on one rank, where a kernel may write the
 *     outputs itself);
 *   - send the same bytes, in `groups` times the messages.
 * Faults in a later group end every rank's call (BURST_ERR_TRANSPORT where the truncated message
 * lands, BURST_ERR_PEER_FAILED elsewhere), leave the earlier groups' heads written and the heads
 * of the groups after the failing one untouched (plan.h). Ranks passing different limits fail the handshake
 * naming the field; a caller built against API 0.2 (no workspace_limit) gets the default.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "harness.h"

#define CASE(nm)                                                                                   \
    .name = nm, .ranks = 3, .batch = 2, .seq_len = 3 * 40, .q_heads = 6, .kv_heads = 3,            \
    .head_dim = 16, .dtype = BURST_DTYPE_FP32, .causal = 1, .window_left = -1, .window_right = -1, \
    .layout = BURST_LAYOUT_ZIGZAG, .deterministic = 1

static struct harness_problem *run_case(const struct harness_case *c, uint64_t limit)
{
    struct harness_case k = *c;
    k.workspace_limit = limit;
    struct harness_problem *p = harness_problem_create(&k);
    assert_non_null(p);
    if (harness_problem_run(p) != 0) {
        harness_problem_print(p, NULL, "FAIL");
        fail_msg("%s (limit %llu): run failed", c->name, (unsigned long long)limit);
    }
    struct harness_err err[H_NTENSORS];
    int ok = harness_problem_compare(p, err);
    if (!ok || getenv("BURST_TEST_VERBOSE"))
        harness_problem_print(p, err, ok ? "PASS" : "FAIL");
    assert_true(ok);
    return p;
}

static uint64_t larger(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

/* Run c unsplit, at `frac` of the unsplit workspace (expecting `mid_groups` groups) and at one
 * head per group; check everything the header lists. */
static void check_groups(const struct harness_case *c, double frac, int mid_groups)
{
    struct harness_problem *one = run_case(c, UINT64_MAX);
    const struct harness_rank_record *r1 = harness_problem_record(one, 0);
    assert_int_equal(r1->head_groups, 1);
    uint64_t ws1 = 0;
    for (int r = 0; r < c->ranks; r++)
        ws1 = larger(ws1, harness_problem_record(one, r)->workspace);
    const uint64_t limits[2] = {(uint64_t)((double)ws1 * frac), 1};
    const int want[2] = {mid_groups, c->kv_heads};
    for (int l = 0; l < 2; l++) {
        struct harness_problem *p = run_case(c, limits[l]);
        for (int r = 0; r < c->ranks; r++) {
            const struct harness_rank_record *x = harness_problem_record(p, r),
                                             *y = harness_problem_record(one, r);
            printf("%s limit %llu rank %d: %d groups, workspace %llu (unsplit %llu), fwd %llu bwd "
                   "%llu bytes, msgs %llu (unsplit %llu)\n",
                   c->name, (unsigned long long)limits[l], r, x->head_groups,
                   (unsigned long long)x->workspace, (unsigned long long)y->workspace,
                   (unsigned long long)x->stats[BURST_PHASE_FWD].scratch_bytes,
                   (unsigned long long)x->stats[BURST_PHASE_BWD].scratch_bytes,
                   (unsigned long long)x->stats[BURST_PHASE_BWD].traffic.msgs_sent,
                   (unsigned long long)y->stats[BURST_PHASE_BWD].traffic.msgs_sent);
            assert_int_equal(x->head_groups, want[l]);
            /* the plan's bytes are what the calls allocate; on one rank a kernel that
             * writes the outputs itself (fwd_final / bwd_final) needs less (plan.h) */
            const uint64_t used = larger(x->stats[BURST_PHASE_FWD].scratch_bytes,
                                         x->stats[BURST_PHASE_BWD].scratch_bytes);
            if (c->ranks > 1)
                assert_int_equal(used, x->workspace);
            else
                assert_true(used <= x->workspace && used > 0);
            if (x->head_groups < c->kv_heads)
                assert_true(x->workspace <= limits[l]);
            assert_true(x->workspace < y->workspace || c->ranks == 1);
            for (int ph = BURST_PHASE_FWD; ph <= BURST_PHASE_BWD; ph++) {
                const struct burst_traffic *tx = &x->stats[ph].traffic, *ty = &y->stats[ph].traffic;
                assert_int_equal(tx->bytes_sent, ty->bytes_sent);
                assert_int_equal(tx->bytes_recv, ty->bytes_recv);
                assert_int_equal(tx->msgs_sent, (uint64_t)x->head_groups * ty->msgs_sent);
            }
        }
        for (int t = 0; t < H_NTENSORS; t++) {
            size_t b1, b2;
            const void *a = harness_problem_output(one, (enum harness_tensor)t, &b1);
            const void *b = harness_problem_output(p, (enum harness_tensor)t, &b2);
            assert_int_equal(b1, b2);
            assert_memory_equal(a, b, b1);
        }
        harness_problem_destroy(p);
    }
    harness_problem_destroy(one);
}

/* GQA with 3 K/V heads (groups of 2 + 1 at 70 %), B = 2 (the lse rows of a group are strided),
 * padding between heads (strided views), causal zigzag, burst backward. */
static void test_burst_gqa(void **state)
{
    (void)state;
    struct harness_case c = {CASE("groups_burst_gqa")};
    c.pad = 4;
    check_groups(&c, 0.7, 2);
}

/* The ring backward in bf16 with accumulators in bf16 on the wire, a window, natural layout, on
 * a two-level ring of 2 x 2 ranks (4 buffers per call). */
static void test_ring_bf16_two_level(void **state)
{
    (void)state;
    struct harness_case c = {CASE("groups_ring_bf16")};
    c.ranks = 4;
    c.ranks_per_node = 2;
    c.batch = 1;
    c.seq_len = 4 * 48;
    c.q_heads = c.kv_heads = 4;
    c.dtype = BURST_DTYPE_BF16;
    c.bwd = BURST_BWD_RING;
    c.wire = BURST_WIRE_INPUT;
    c.causal = 0;
    c.window_left = 50;
    c.window_right = 20;
    c.layout = BURST_LAYOUT_NATURAL;
    check_groups(&c, 0.6, 2);
}

/* One rank: no ring, no blocks; the accumulators alone shrink. */
static void test_one_rank(void **state)
{
    (void)state;
    struct harness_case c = {CASE("groups_one_rank")};
    c.ranks = 1;
    c.seq_len = 64;
    c.q_heads = c.kv_heads = 4;
    check_groups(&c, 0.6, 2);
}

/* Natural-order output t of p: is every element of heads [h0, h1) poison / written? */
static int heads_state(const struct harness_problem *p, enum harness_tensor t, int heads, int h0,
                       int h1, int poison)
{
    size_t bytes;
    const void *x = harness_problem_output(p, t, &bytes);
    const burst_dtype_t dt = BURST_DTYPE_FP32; /* the fault case's dtype, and lse's */
    const size_t count = bytes / burst_dtype_size(dt), d = 16;
    const size_t per_head = t == H_LSE ? count / 2 / (size_t)heads : d; /* lse: [B, Hq, N] */
    for (size_t i = 0; i < count; i++) {
        int h = (int)((i / per_head) % (size_t)heads);
        if (h >= h0 && h < h1 && harness_is_poison(dt, x, i) != poison)
            return 0;
    }
    return 1;
}

static void check_fault(const char *spec, int bwd)
{
    struct harness_case c = {CASE("groups_fault")};
    c.workspace_limit = 1; /* 3 groups: one K/V head and 2 query heads each */
    struct harness_problem *p = harness_problem_create(&c);
    assert_non_null(p);
    assert_int_equal(burst_fault_set(spec), 0);
    double t0 = harness_now_ms();
    int rc = harness_problem_run(p);
    double dt = harness_now_ms() - t0;
    burst_fault_set(NULL);
    harness_problem_print(p, NULL, spec);
    assert_int_equal(rc, -1);
    int transport = 0;
    for (int r = 0; r < c.ranks; r++) {
        const struct harness_rank_record *x = harness_problem_record(p, r);
        burst_status_t st = bwd ? x->st_bwd : x->st_fwd;
        printf("  rank %d: %s %s\n", r, burst_status_str(st), x->msg);
        assert_int_equal(x->head_groups, 3);
        assert_true(st == BURST_ERR_TRANSPORT || st == BURST_ERR_PEER_FAILED);
        transport += st == BURST_ERR_TRANSPORT;
        if (bwd)
            assert_int_equal(x->st_fwd, BURST_OK);
    }
    assert_true(transport > 0);
    assert_true(dt < 10000); /* told, not timed out */
    /* group 1 failed: the heads of group 0 are written on every rank, those of group 2 on none
     * (no rank can finish it without the failed rank's blocks); a rank that did not take part
     * in the failed exchange may have finished group 1 */
    static const enum harness_tensor fwd_t[] = {H_O, H_LSE}, bwd_t[] = {H_DQ, H_DK, H_DV};
    const enum harness_tensor *ts = bwd ? bwd_t : fwd_t;
    for (int i = 0; i < (bwd ? 3 : 2); i++) {
        int heads = ts[i] == H_DK || ts[i] == H_DV ? c.kv_heads : c.q_heads;
        int per_group = heads / 3;
        assert_true(heads_state(p, ts[i], heads, 0, per_group, 0));
        assert_true(heads_state(p, ts[i], heads, 2 * per_group, heads, 1));
    }
    harness_problem_destroy(p);
}

static void test_fault_later_group(void **state)
{
    (void)state;
    check_fault("truncate:rank=1,phase=fwd,step=1,group=1", 0);
    check_fault("truncate:rank=2,phase=bwd,step=1,group=1", 1);
}

/* Ranks disagreeing on the limit; an API 0.2 caller. */
struct handshake {
    burst_status_t st[2];
    char msg[2][512];
    int groups[2];
    int api_0_2;
};

static void handshake_rank(int rank, struct burst_comm *comm, void *arg)
{
    struct handshake *h = arg;
    struct burst_plan_params pp = burst_plan_params_default();
    pp.seq_len = 64;
    pp.q_heads = pp.kv_heads = 4;
    pp.head_dim = 16;
    pp.workspace_limit = h->api_0_2 ? 1 : rank == 1 ? 1 : 0;
    if (h->api_0_2)
        pp.api_version = (BURST_API_VERSION & 0xffff0000u) | 2;
    struct burst_plan *plan = NULL;
    h->st[rank] = burst_plan_create(harness_context(), comm, &pp, &plan);
    snprintf(h->msg[rank], sizeof(h->msg[rank]), "%s", burst_last_error());
    h->groups[rank] = burst_plan_head_groups(plan);
    burst_plan_destroy(plan);
}

static void test_handshake(void **state)
{
    (void)state;
    struct handshake h = {0};
    assert_int_equal(harness_run_ranks(2, 20000, handshake_rank, &h), 0);
    for (int r = 0; r < 2; r++) {
        printf("rank %d: %s\n", r, h.msg[r]);
        assert_int_equal(h.st[r], BURST_ERR_PLAN_MISMATCH);
        assert_true(harness_contains(h.msg[r], "workspace_limit"));
    }
    memset(&h, 0, sizeof(h));
    h.api_0_2 = 1; /* workspace_limit = 1 is past the struct such a caller knows: not read */
    assert_int_equal(harness_run_ranks(2, 20000, handshake_rank, &h), 0);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(h.st[r], BURST_OK);
        assert_int_equal(h.groups[r], 1);
    }
}

/* The default limit (plan.h): 1.2 x two blocks + 0.2 x the eight tensors, at least 1 GiB. The
 * issue's sizes on 2 ranks, plans only (nothing is allocated before a call): H = 32, d = 128,
 * bf16, burst backward. */
struct sized {
    int64_t seq;
    int groups[2];
    uint64_t workspace[2];
};

static struct burst_plan_params sized_params(int64_t seq)
{
    struct burst_plan_params pp = burst_plan_params_default();
    pp.seq_len = seq;
    pp.q_heads = pp.kv_heads = 32;
    pp.head_dim = 128;
    pp.dtype = BURST_DTYPE_BF16;
    pp.causal = 1;
    pp.layout = BURST_LAYOUT_ZIGZAG;
    return pp;
}

static void sized_rank(int rank, struct burst_comm *comm, void *arg)
{
    struct sized *z = arg;
    struct burst_plan_params pp = sized_params(z->seq);
    struct burst_plan *plan = NULL;
    if (burst_plan_create(harness_context(), comm, &pp, &plan) == BURST_OK) {
        z->groups[rank] = burst_plan_head_groups(plan);
        z->workspace[rank] = burst_plan_workspace_bytes(plan);
    }
    burst_plan_destroy(plan);
}

static void test_default_limit(void **state)
{
    (void)state;
    static const struct {
        int64_t seq;
        int groups;
    } want[] = {{8192, 1}, {32768, 3}, {131072, 3}, {262144, 3}};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        struct sized z = {.seq = want[i].seq};
        assert_int_equal(harness_run_ranks(2, 20000, sized_rank, &z), 0);
        const uint64_t rows = (uint64_t)want[i].seq / 2, head = rows * 128 * 2; /* one head */
        const uint64_t tensors = 8 * 32 * head, blocks = 2 * rows * 32 * (2 * 128 * 2 + 8);
        const uint64_t floor = (uint64_t)1 << 30, rule = blocks + (blocks + tensors) / 5;
        const uint64_t limit = rule > floor ? rule : floor;
        /* the library's estimate without a communicator equals what the plans report */
        struct burst_plan_params pp = sized_params(z.seq);
        uint64_t est[2] = {0, 0};
        assert_int_equal(burst_plan_workspace_estimate(&pp, 2, est), BURST_OK);
        for (int r = 0; r < 2; r++) {
            assert_int_equal(est[r], z.workspace[r]);
            printf("N = %lld rank %d: %d groups, workspace %llu (limit %llu, tensors %llu)\n",
                   (long long)z.seq, r, z.groups[r], (unsigned long long)z.workspace[r],
                   (unsigned long long)limit, (unsigned long long)tensors);
            assert_int_equal(z.groups[r], want[i].groups);
            assert_true(z.workspace[r] <= limit);
            /* tensors + scratch within 1.2x of tensors + two blocks, where the floor allows */
            if (rule > floor)
                assert_true(5 * (tensors + z.workspace[r]) <= 6 * (tensors + blocks));
        }
    }
}

int main(void)
{
    printf("seed: BURST_TEST_SEED=%llu\n", (unsigned long long)harness_seed());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_burst_gqa), cmocka_unit_test(test_ring_bf16_two_level),
        cmocka_unit_test(test_one_rank),  cmocka_unit_test(test_fault_later_group),
        cmocka_unit_test(test_handshake), cmocka_unit_test(test_default_limit),
    };
    return cmocka_run_group_tests_name("groups", tests, NULL, NULL);
}
