/*
 * tests/test_memory.c - memory per rank is O(n H d) plus the blocks in flight, never n x n:
 * stats.scratch_bytes of the forward and of the backward at local lengths n, 2n and 4n must
 * grow by a factor in [1.6, 2.4] per doubling (linear; a quadratic buffer would give ~4, and
 * the fixed per-call overhead is small at these sizes), and stay below 64 bytes per local
 * element of Q, K, V (n (Hq + 2 Hkv) d), a generous linear budget (fp32 running O and the two
 * travelling buffers of each kind need a few times that, never n-proportional per element).
 *
 * The scratch a plan keeps between calls (burst_plan_trim): a second forward and backward on the
 * same plan allocate nothing (every backend allocation is made to fail, burst_fault_set) and give
 * bitwise the results of the first (reused buffers are zeroed again); after burst_plan_trim the
 * next backward must allocate, fails with BURST_ERR_NO_MEMORY and leaves its outputs untouched
 * (a one-rank forward on a backend with fwd_final allocates nothing).
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

enum {
    KT_Q,
    KT_K,
    KT_V,
    KT_O,
    KT_DO,
    KT_DQ,
    KT_DK,
    KT_DV,
    KT_N
};

/* backend memory <- / -> host (the harness context may be a GPU's) */
static void put(void *dev, const void *host, size_t bytes)
{
    assert_int_equal(burst_context_memcpy(harness_context(), dev, host, bytes), BURST_OK);
}
static void get(void *host, const void *dev, size_t bytes)
{
    assert_int_equal(burst_context_memcpy(harness_context(), host, dev, bytes), BURST_OK);
}

static void test_kept(void **state)
{
    (void)state;
    const int64_t n = 192, hq = 4, hkv = 2, d = 32;
    struct burst_context *ctx = harness_context();
    struct burst_local_world *world = NULL;
    struct burst_comm *comm = NULL;
    struct burst_plan *plan = NULL;
    struct burst_comm_params cp = burst_comm_params_default();
    struct burst_plan_params pp = burst_plan_params_default();
    pp.seq_len = n;
    pp.q_heads = (int)hq;
    pp.kv_heads = (int)hkv;
    pp.head_dim = (int)d;
    pp.causal = 1;
    pp.deterministic = 1; /* bitwise reruns on every backend (the Hopper one adds dQ by atomics
                           * otherwise) */
    cp.rank = 0;
    cp.size = 1;
    assert_int_equal(burst_local_world_create(1, &world), BURST_OK);
    cp.world = world;
    assert_int_equal(burst_comm_create(&cp, &comm), BURST_OK);
    assert_int_equal(burst_plan_create(ctx, comm, &pp, &plan), BURST_OK);

    const int64_t heads[KT_N] = {hq, hkv, hkv, hq, hq, hq, hkv, hkv};
    size_t bytes[KT_N];
    void *t[KT_N], *lse = NULL;
    float *h[KT_N], *first[KT_N];
    float *hl = malloc(sizeof(float) * n * hq), *lse1 = malloc(sizeof(float) * n * hq);
    struct burst_tensor v[KT_N];
    uint64_t rng = harness_seed() ^ 0x6b657074ull;
    for (int i = 0; i < KT_N; i++) {
        const size_t cnt = (size_t)(n * heads[i] * d);
        bytes[i] = cnt * sizeof(float);
        assert_int_equal(burst_context_alloc(ctx, bytes[i], &t[i]), BURST_OK);
        h[i] = malloc(bytes[i]);
        first[i] = malloc(bytes[i]);
        assert_non_null(h[i]);
        assert_non_null(first[i]);
        for (size_t e = 0; e < cnt; e++)
            h[i][e] = (float)harness_rng_uniform(&rng, -1.0, 1.0);
        put(t[i], h[i], bytes[i]);
        v[i] = burst_tensor_contiguous(t[i], BURST_DTYPE_FP32, 1, n, heads[i], d);
    }
    assert_int_equal(burst_context_alloc(ctx, sizeof(float) * n * hq, &lse), BURST_OK);
    assert_non_null(hl);
    assert_non_null(lse1);

    /* the outputs poisoned before each call, so that every element must be written */
    for (int call = 0; call < 2; call++) {
        for (int i = KT_O; i < KT_N; i++)
            if (i != KT_DO) {
                harness_poison(BURST_DTYPE_FP32, h[i], bytes[i] / sizeof(float));
                put(t[i], h[i], bytes[i]);
            }
        if (call == 1) /* nothing may be allocated now */
            assert_int_equal(burst_fault_set("oom:alloc=0,count=1000000"), 0);
        assert_int_equal(burst_attention_forward(plan, &v[KT_Q], &v[KT_K], &v[KT_V], &v[KT_O], lse),
                         BURST_OK);
        assert_int_equal(burst_attention_backward(plan, &v[KT_Q], &v[KT_K], &v[KT_V], &v[KT_O], lse,
                                                  &v[KT_DO], &v[KT_DQ], &v[KT_DK], &v[KT_DV]),
                         BURST_OK);
        for (int i = KT_O; i < KT_N; i++) {
            get(h[i], t[i], bytes[i]);
            if (call == 0)
                memcpy(first[i], h[i], bytes[i]);
            else if (memcmp(first[i], h[i], bytes[i]) != 0)
                fail_msg("tensor %d of the second call differs from the first", i);
        }
        get(call == 0 ? lse1 : hl, lse, sizeof(float) * n * hq);
        if (call == 1)
            assert_memory_equal(lse1, hl, sizeof(float) * n * hq);
    }
    struct burst_phase_stats st;
    assert_int_equal(burst_plan_stats(plan, BURST_PHASE_BWD, &st), BURST_OK);
    assert_true(st.scratch_bytes > 0);

    /* trimmed: the backward needs new scratch (its dQ accumulator), which fails; dQ, dK and dV
     * stay as they were (the one-rank forward of a backend with fwd_final needs none) */
    burst_plan_trim(plan);
    for (int i = KT_DQ; i < KT_N; i++) {
        harness_poison(BURST_DTYPE_FP32, h[i], bytes[i] / sizeof(float));
        put(t[i], h[i], bytes[i]);
    }
    assert_int_equal(burst_attention_backward(plan, &v[KT_Q], &v[KT_K], &v[KT_V], &v[KT_O], lse,
                                              &v[KT_DO], &v[KT_DQ], &v[KT_DK], &v[KT_DV]),
                     BURST_ERR_NO_MEMORY);
    assert_true(harness_contains(burst_last_error(), "scratch"));
    assert_int_equal(burst_fault_set(NULL), 0);
    for (int i = KT_DQ; i < KT_N; i++) {
        get(h[i], t[i], bytes[i]);
        for (size_t e = 0; e < bytes[i] / sizeof(float); e++)
            assert_true(harness_is_poison(BURST_DTYPE_FP32, h[i], e));
    }

    burst_plan_trim(NULL); /* accepted */
    burst_plan_destroy(plan);
    burst_comm_destroy(comm);
    burst_local_world_destroy(world);
    for (int i = 0; i < KT_N; i++) {
        burst_context_free(ctx, t[i]);
        free(h[i]);
        free(first[i]);
    }
    burst_context_free(ctx, lse);
    free(hl);
    free(lse1);
}

int main(void)
{
    printf("seed: BURST_TEST_SEED=%llu\n", (unsigned long long)harness_seed());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_burst),
        cmocka_unit_test(test_ring_bf16),
        cmocka_unit_test(test_kept),
    };
    return cmocka_run_group_tests_name("memory", tests, NULL, NULL);
}
