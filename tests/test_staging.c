/*
 * tests/test_staging.c - the ring engine's host staging for device-memory backends
 * (runtime/ring_xfer.h), exercised without a GPU: the cpu backend's ops with device_memory set
 * and counting memcpy / host_alloc ops. A 3- and a 4-rank in-process ring (flat and two-level,
 * both backward patterns) must give bitwise the results of the plain cpu backend, every transfer
 * must have gone through the staging copies, and every staging buffer must be freed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "context_internal.h"
#include "harness.h"

static atomic_long n_memcpy, n_host_alloc, n_host_free;

static burst_status_t fake_memcpy(void *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    atomic_fetch_add(&n_memcpy, 1);
    memcpy(dst, src, bytes);
    return BURST_OK;
}

static void *fake_host_alloc(void *be, size_t bytes)
{
    (void)be;
    atomic_fetch_add(&n_host_alloc, 1);
    return malloc(bytes);
}

static void fake_host_free(void *be, void *p)
{
    (void)be;
    atomic_fetch_add(&n_host_free, 1);
    free(p);
}

static struct burst_backend_ops staged_ops;

enum {
    B = 1,
    N = 96,
    HQ = 4,
    HKV = 2,
    D = 16
};

struct run {
    struct burst_context *ctx;
    int G, local;
    burst_bwd_pattern_t bwd;
    float *q, *k, *v, *dout;       /* global inputs, natural order [B, N, H, D] */
    float *o, *lse, *dq, *dk, *dv; /* global outputs */
    burst_status_t st[8];
};

static struct burst_tensor view(float *base, int heads, int64_t off, int64_t len)
{
    struct burst_tensor t = {
        .data = base + off * heads * D,
        .dtype = BURST_DTYPE_FP32,
        .shape = {B, len, heads, D},
        .stride = {(int64_t)N * heads * D, (int64_t)heads * D, D, 1},
    };
    return t;
}

static void rank_fn(int rank, struct burst_comm *comm, void *arg)
{
    struct run *r = arg;
    struct burst_plan_params pp = burst_plan_params_default();
    pp.batch = B;
    pp.seq_len = N;
    pp.q_heads = HQ;
    pp.kv_heads = HKV;
    pp.head_dim = D;
    pp.causal = 1;
    pp.layout = BURST_LAYOUT_NATURAL;
    pp.bwd_pattern = r->bwd;
    pp.deterministic = 1;
    pp.ranks_per_node = r->local;
    struct burst_plan *plan = NULL;
    burst_status_t st = burst_plan_create(r->ctx, comm, &pp, &plan);
    int64_t off = 0, len = 0;
    burst_layout_shard_offset(BURST_LAYOUT_NATURAL, N, r->G, rank, &off);
    burst_layout_shard_len(BURST_LAYOUT_NATURAL, N, r->G, rank, &len);
    struct burst_tensor q = view(r->q, HQ, off, len), k = view(r->k, HKV, off, len),
                        v = view(r->v, HKV, off, len), dout = view(r->dout, HQ, off, len),
                        o = view(r->o, HQ, off, len), dq = view(r->dq, HQ, off, len),
                        dk = view(r->dk, HKV, off, len), dv = view(r->dv, HKV, off, len);
    float *lse = r->lse + (size_t)B * HQ * off;
    if (st == BURST_OK)
        st = burst_attention_forward(plan, &q, &k, &v, &o, lse);
    if (st == BURST_OK)
        st = burst_attention_backward(plan, &q, &k, &v, &o, lse, &dout, &dq, &dk, &dv);
    burst_plan_destroy(plan);
    r->st[rank] = st;
}

static void run(struct run *r)
{
    size_t nq = (size_t)B * N * HQ * D, nkv = (size_t)B * N * HKV * D;
    r->o = calloc(nq, sizeof(float));
    r->dq = calloc(nq, sizeof(float));
    r->dk = calloc(nkv, sizeof(float));
    r->dv = calloc(nkv, sizeof(float));
    r->lse = calloc((size_t)B * HQ * N, sizeof(float));
    assert_true(r->o && r->dq && r->dk && r->dv && r->lse);
    assert_int_equal(harness_run_ranks(r->G, 20000, rank_fn, r), 0);
    for (int i = 0; i < r->G; i++)
        assert_int_equal(r->st[i], BURST_OK);
}

static void free_outputs(struct run *r)
{
    free(r->o);
    free(r->dq);
    free(r->dk);
    free(r->dv);
    free(r->lse);
}

static void same_as_cpu(int G, int local, burst_bwd_pattern_t bwd)
{
    size_t nq = (size_t)B * N * HQ * D, nkv = (size_t)B * N * HKV * D;
    float *in = malloc(sizeof(float) * (2 * nq + 2 * nkv));
    assert_non_null(in);
    uint64_t s = harness_seed() + (uint64_t)(G * 10 + local);
    for (size_t i = 0; i < 2 * nq + 2 * nkv; i++)
        in[i] = (float)harness_rng_uniform(&s, -2, 2);
    struct run plain = {harness_context(), G,    local, bwd,  in,   in + nq, in + nq + nkv,
                        in + nq + 2 * nkv, NULL, NULL,  NULL, NULL, NULL,    {0}};
    struct run staged = plain;
    struct burst_context fake = *harness_context(); /* same cpu instance, staged ops */
    fake.ops = &staged_ops;
    staged.ctx = &fake;
    run(&plain);
    long c0 = atomic_load(&n_memcpy), a0 = atomic_load(&n_host_alloc);
    run(&staged);
    long copies = atomic_load(&n_memcpy) - c0;
    /* every block hop of both phases was staged: at least 2 copies per rank and step */
    assert_true(copies >= 2L * G * (G - 1));
    assert_true(atomic_load(&n_host_alloc) > a0);
    assert_int_equal(atomic_load(&n_host_alloc), atomic_load(&n_host_free));
    size_t nb[5] = {nq, (size_t)B * HQ * N, nq, nkv, nkv};
    float *a[5] = {plain.o, plain.lse, plain.dq, plain.dk, plain.dv};
    float *b[5] = {staged.o, staged.lse, staged.dq, staged.dk, staged.dv};
    for (int t = 0; t < 5; t++)
        assert_memory_equal(a[t], b[t], nb[t] * sizeof(float));
    print_message("G=%d local=%d bwd=%s: %ld staged copies, bitwise equal\n", G, local,
                  bwd == BURST_BWD_RING ? "ring" : "burst", copies);
    free_outputs(&plain);
    free_outputs(&staged);
    free(in);
}

static void flat3_burst(void **state)
{
    (void)state;
    same_as_cpu(3, 0, BURST_BWD_BURST);
}

static void flat3_ring(void **state)
{
    (void)state;
    same_as_cpu(3, 0, BURST_BWD_RING);
}

static void two_level4(void **state)
{
    (void)state;
    same_as_cpu(4, 2, BURST_BWD_BURST);
}

int main(void)
{
    assert_non_null(harness_context());
    staged_ops = *harness_context()->ops;
    staged_ops.device_memory = 1;
    staged_ops.memcpy = fake_memcpy;
    staged_ops.host_alloc = fake_host_alloc;
    staged_ops.host_free = fake_host_free;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(flat3_burst),
        cmocka_unit_test(flat3_ring),
        cmocka_unit_test(two_level4),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
