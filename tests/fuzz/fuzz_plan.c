/*
 * tests/fuzz/fuzz_plan.c - libFuzzer target: plan and parameter validation through the public API.
 *
 * Input: a byte string read field by field (missing bytes read as 0):
 *   byte 0        ranks G (1 + b % 2; G = 2 runs two threads on one local world)
 *   then          batch, seq_len, q_heads, kv_heads, head_dim, dtype, causal, window_left,
 *                 window_right, layout, bwd_pattern, acc_wire, deterministic, ranks_per_node,
 *                 softmax_scale, shard_lens (G values, natural layout), each either a small
 *                 value or (escape byte 0xff) a raw 64-bit / 32-bit one, so that huge, negative
 *                 and overflowing values reach the checks
 *   then (G = 1)  one tensor tweak: which tensor, which field, the new value
 * Every plan that is created and small enough runs a forward and a backward on the cpu backend
 * with buffers of the right size (G = 1: with the tweak applied to one descriptor). The library
 * must only ever return statuses: no crash, no sanitizer report, no leak (libFuzzer's leak check
 * runs per input), and a failed call must leave a message in burst_last_error().
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "burst/burst.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct reader {
    const uint8_t *p;
    size_t n;
};

static uint8_t rd_u8(struct reader *r)
{
    if (!r->n)
        return 0;
    r->n--;
    return *r->p++;
}

static uint64_t rd_raw(struct reader *r, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v = v << 8 | rd_u8(r);
    return v;
}

/* A small value (byte - 8: -8..246), or after the escape 0xff a raw 64-bit one. */
static int64_t rd_i64(struct reader *r)
{
    uint8_t b = rd_u8(r);
    if (b == 0xff)
        return (int64_t)rd_raw(r, 8);
    return (int64_t)b - 8;
}

/* As rd_i64, raw values 32-bit. */
static int rd_int(struct reader *r)
{
    uint8_t b = rd_u8(r);
    if (b == 0xff)
        return (int)(int32_t)rd_raw(r, 4);
    return (int)b - 8;
}

static struct burst_context *g_ctx;

struct rank_arg {
    struct burst_local_world *world;
    int rank, G;
    struct burst_plan_params pp;
    int tweak_tensor, tweak_field; /* -1: none */
    int64_t tweak_value;
    burst_status_t st;
};

static void check_message(burst_status_t st)
{
    const char *m = burst_last_error();
    if (st != BURST_OK && (!m || !*m)) {
        fprintf(stderr, "status %s without a message\n", burst_status_str(st));
        abort();
    }
}

/* Elements a view spans: 1 + sum (shape - 1) * stride over the larger of its shape and the plan's
 * (the library reads by either); -1 when that overflows or exceeds cap. Views with a stride or
 * shape below 1 span the plan's default: the library must refuse them before any access. */
static int64_t span(const struct burst_tensor *t, const int64_t *plan_shape, int64_t cap)
{
    int64_t n = 1;
    for (int i = 0; i < BURST_TENSOR_DIMS; i++) {
        int64_t sh = t->shape[i] > plan_shape[i] ? t->shape[i] : plan_shape[i], term;
        if (t->stride[i] < 1 || t->shape[i] < 1)
            continue;
        if (__builtin_mul_overflow(sh - 1, t->stride[i], &term) ||
            __builtin_add_overflow(n, term, &n) || n > cap)
            return -1;
    }
    return n;
}

/* Forward + backward on buffers sized for the plan (and for the tweaked view: a tensor
 * describes caller memory, which the library cannot bound); tiny problems only. */
static void run_plan(struct rank_arg *a, struct burst_plan *plan)
{
    const struct burst_plan_params *pp = &a->pp;
    int64_t n = burst_plan_local_len(plan);
    if (n < 1 || burst_dtype_size(pp->dtype) == 0 ||
        pp->batch * n * pp->q_heads * pp->head_dim > 16384)
        return;
    size_t nlse = (size_t)(pp->batch * pp->q_heads * n);
    /* q k v o dout dq dk dv */
    struct burst_tensor t[8];
    int64_t shape[8][BURST_TENSOR_DIMS];
    for (int i = 0; i < 8; i++) {
        int heads = (i == 1 || i == 2 || i == 6 || i == 7) ? pp->kv_heads : pp->q_heads;
        t[i] = burst_tensor_contiguous(NULL, pp->dtype, pp->batch, n, heads, pp->head_dim);
        memcpy(shape[i], t[i].shape, sizeof(shape[i]));
    }
    int null_data = -1;
    if (a->tweak_tensor >= 0) {
        struct burst_tensor *x = &t[a->tweak_tensor % 8];
        int f = a->tweak_field % 10;
        if (f < 4)
            x->shape[f] = a->tweak_value;
        else if (f < 8)
            x->stride[f - 4] = a->tweak_value;
        else if (f == 8)
            x->dtype = (burst_dtype_t)a->tweak_value;
        else
            null_data = a->tweak_tensor % 8;
    }
    void *buf[8] = {0};
    int ok = 1;
    for (int i = 0; i < 8; i++) {
        int64_t e = span(&t[i], shape[i], 1 << 22);
        if (e < 0) { /* more memory than a fuzzer run should give: not this call's business */
            ok = 0;
            break;
        }
        buf[i] = calloc((size_t)e, sizeof(float)); /* room for the widest dtype */
        ok = ok && buf[i];
        t[i].data = i == null_data ? NULL : buf[i];
    }
    float *lse = calloc(nlse, sizeof(float));
    ok = ok && lse;
    if (ok) {
        burst_status_t st = burst_attention_forward(plan, &t[0], &t[1], &t[2], &t[3], lse);
        check_message(st);
        if (st == BURST_OK) {
            st = burst_attention_backward(plan, &t[0], &t[1], &t[2], &t[3], lse, &t[4], &t[5],
                                          &t[6], &t[7]);
            check_message(st);
        }
    }
    for (int i = 0; i < 8; i++)
        free(buf[i]);
    free(lse);
}

static void *rank_main(void *arg)
{
    struct rank_arg *a = arg;
    struct burst_comm_params cp = burst_comm_params_default();
    cp.rank = a->rank;
    cp.size = a->G;
    cp.world = a->world;
    cp.timeout_ms = 5000;
    struct burst_comm *comm = NULL;
    a->st = burst_comm_create(&cp, &comm);
    if (a->st != BURST_OK)
        return NULL;
    struct burst_plan *plan = NULL;
    a->st = burst_plan_create(g_ctx, comm, &a->pp, &plan);
    check_message(a->st);
    if (a->st == BURST_OK)
        run_plan(a, plan);
    burst_plan_destroy(plan);
    burst_comm_destroy(comm);
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_ctx) {
        struct burst_context_params cp = burst_context_params_default();
        cp.backend = "cpu";
        cp.num_threads = 1;
        if (burst_context_create(&cp, &g_ctx) != BURST_OK) {
            fprintf(stderr, "burst_context_create: %s\n", burst_last_error());
            abort();
        }
    }
    struct reader r = {data, size};
    int G = 1 + rd_u8(&r) % 2;
    struct burst_plan_params pp = burst_plan_params_default();
    pp.batch = rd_i64(&r);
    pp.seq_len = rd_i64(&r);
    pp.q_heads = rd_int(&r);
    pp.kv_heads = rd_int(&r);
    pp.head_dim = rd_int(&r);
    pp.dtype = (burst_dtype_t)rd_int(&r);
    pp.causal = rd_int(&r);
    pp.window_left = rd_i64(&r);
    pp.window_right = rd_i64(&r);
    pp.layout = (burst_layout_t)rd_int(&r);
    pp.bwd_pattern = (burst_bwd_pattern_t)rd_int(&r);
    pp.acc_wire = (burst_wire_precision_t)rd_int(&r);
    pp.deterministic = rd_int(&r);
    pp.ranks_per_node = rd_int(&r);
    uint32_t scale_bits = (uint32_t)rd_raw(&r, 4);
    memcpy(&pp.softmax_scale, &scale_bits, sizeof(float));
    int64_t shard_lens[2];
    if (rd_u8(&r) & 1) {
        for (int i = 0; i < G; i++)
            shard_lens[i] = rd_i64(&r);
        pp.shard_lens = shard_lens;
    }
    struct rank_arg a[2];
    struct burst_local_world *world = NULL;
    if (burst_local_world_create(G, &world) != BURST_OK)
        abort();
    for (int i = 0; i < G; i++) {
        a[i] = (struct rank_arg){world, i, G, pp, -1, -1, 0, BURST_OK};
    }
    if (G == 1 && r.n) { /* one rank: a bad descriptor cannot leave a peer waiting */
        a[0].tweak_tensor = rd_u8(&r);
        a[0].tweak_field = rd_u8(&r);
        a[0].tweak_value = rd_i64(&r);
    }
    if (G == 1) {
        rank_main(&a[0]);
    } else {
        pthread_t th;
        if (pthread_create(&th, NULL, rank_main, &a[1]) != 0)
            abort();
        rank_main(&a[0]);
        pthread_join(th, NULL);
        /* identical parameters: both ranks decide alike */
        if ((a[0].st == BURST_OK) != (a[1].st == BURST_OK)) {
            fprintf(stderr, "ranks disagree: %s / %s\n", burst_status_str(a[0].st),
                    burst_status_str(a[1].st));
            abort();
        }
    }
    burst_local_world_destroy(world);
    return 0;
}
