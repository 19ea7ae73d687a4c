/* runtime/speed.c - short timed local forward steps per rank (see speed.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "step_check.h"
#include "speed.h"

/* Rows x keys x hq per second of forward steps of `rows` query rows (0: as many as keys) and
 * hq / hkv heads against keys that start at BURST_SPEED_ROWS and double while one step takes
 * less than BURST_SPEED_STEP_S, up to kmax; then timed as speed.h says. */
static burst_status_t measure(struct burst_context *ctx, const struct burst_plan_params *p,
                              int64_t rows, int64_t kmax, int64_t hq, int64_t hkv, const char *who,
                              double *speed_p)
{
    const struct burst_backend_ops *ops = ctx->ops;
    const int64_t d = p->head_dim, nq_max = rows ? rows : kmax;
    const size_t es = burst_dtype_size(p->dtype);
    struct burst_plan fake = {.ctx = ctx}; /* the scratch allocator's ctx and kept buffers */
    struct burst_scratch sc = {.plan = &fake};
    void *q = NULL, *k = NULL, *v = NULL;
    float *o = NULL, *lse = NULL;
    burst_status_t st = burst_scratch_alloc(&sc, who, (size_t)(nq_max * hq * d) * es, &q);
    if (st == BURST_OK)
        st = burst_scratch_alloc(&sc, who, (size_t)(kmax * hkv * d) * es, &k);
    if (st == BURST_OK)
        st = burst_scratch_alloc(&sc, who, (size_t)(kmax * hkv * d) * es, &v);
    if (st == BURST_OK)
        st = burst_scratch_alloc(&sc, who, sizeof(float) * (size_t)(nq_max * hq * d), (void **)&o);
    if (st == BURST_OK)
        st = burst_scratch_alloc(&sc, who, sizeof(float) * (size_t)(nq_max * hq), (void **)&lse);
    int64_t n = kmax < BURST_SPEED_ROWS ? kmax : BURST_SPEED_ROWS, nq = rows ? rows : n;
    struct burst_tensor qt = burst_view(q, p->dtype, 1, nq, hq, d);
    struct burst_tensor kt = burst_view(k, p->dtype, 1, n, hkv, d);
    struct burst_tensor vt = burst_view(v, p->dtype, 1, n, hkv, d);
    struct burst_posmap qpos = {.nruns = 1, .run = {{.len = nq, .stride = 1}}};
    struct burst_posmap kpos = {.nruns = 1, .run = {{.len = n, .stride = 1}}};
    struct burst_fwd_args a = {
        .q = &qt,
        .k = &kt,
        .v = &vt,
        .qpos = qpos,
        .kpos = kpos,
        .mask = {.left = BURST_POS_INF, .right = BURST_POS_INF},
        .scale = 1.0f,
        .softcap = p->softcap, /* the capped kernels where the plan has a cap */
        .o_acc = o,
        .lse_acc = lse,
    };
    struct burst_step_dims dim; /* the step's one check (step_check.h) */
    if (st == BURST_OK)
        st = burst_step_check(who, a.q, a.k, a.v, NULL, &dim);
    /* grow the step while one takes less than BURST_SPEED_STEP_S: a GPU's launch overhead must
     * not dominate what is timed (at 256 rows it does, by 10x and more) */
    while (st == BURST_OK && n < kmax) {
        for (int w = 0; st == BURST_OK && w < 2; w++) { /* untimed once, then timed */
            double tw = burst_now();
            st = ops->elem.fill(ctx->be, lse, (size_t)(nq * hq), -INFINITY);
            if (st == BURST_OK)
                st = ops->attn.fwd_step(ctx->be, &a);
            if (st == BURST_OK && BURST_OPS_HAS(ops, stream.sync))
                st = ops->stream.sync(ctx->be);
            if (w == 1 && burst_now() - tw >= BURST_SPEED_STEP_S)
                goto sized;
        }
        n = 2 * n < kmax ? 2 * n : kmax;
        nq = rows ? rows : n;
        qt.shape[1] = a.qpos.run[0].len = nq;
        kt.shape[1] = vt.shape[1] = a.kpos.run[0].len = n;
    }
sized:;
    double t0 = 0.0, elapsed = 0.0;
    int reps = 0;
    for (int it = 0; st == BURST_OK && it <= BURST_SPEED_MAX_REPS; it++) {
        if (it == 1)
            t0 = burst_now();
        st = ops->elem.fill(ctx->be, lse, (size_t)(nq * hq), -INFINITY);
        if (st == BURST_OK)
            st = ops->attn.fwd_step(ctx->be, &a);
        if (st == BURST_OK && BURST_OPS_HAS(ops, stream.sync))
            st = ops->stream.sync(ctx->be);
        if (it >= 1) {
            reps = it;
            elapsed = burst_now() - t0;
            if (reps >= BURST_SPEED_MIN_REPS && elapsed >= BURST_SPEED_MIN_S)
                break;
        }
    }
    burst_scratch_free(&sc);
    burst_scratch_trim(&fake);
    if (st != BURST_OK)
        return st;
    if (elapsed <= 0.0)
        elapsed = 1e-9;
    *speed_p = (double)reps * (double)nq * (double)n * (double)hq / elapsed;
    return BURST_OK;
}

burst_status_t burst_speed_measure(struct burst_context *ctx, const struct burst_plan_params *p,
                                   int ranks, const char *who, double *speed_p)
{
    int64_t nmax = p->seq_len / (ranks > 0 ? ranks : 1);
    nmax = nmax < BURST_SPEED_ROWS       ? BURST_SPEED_ROWS
           : nmax > BURST_SPEED_MAX_ROWS ? BURST_SPEED_MAX_ROWS
                                         : nmax;
    return measure(ctx, p, 0, nmax, p->q_heads, p->kv_heads, who, speed_p);
}

burst_status_t burst_speed_measure_shard(struct burst_context *ctx,
                                         const struct burst_plan_params *p, int64_t rows,
                                         int64_t keys, int64_t gkv, const char *who,
                                         double *speed_p)
{
    /* a call runs batch x rows query rows (workgroups over both): as many rows of batch 1 */
    rows *= p->batch > 0 ? p->batch : 1;
    rows = rows > BURST_SPEED_SHARD_ROWS ? BURST_SPEED_SHARD_ROWS : rows < 1 ? 1 : rows;
    keys = keys > BURST_SPEED_MAX_ROWS ? BURST_SPEED_MAX_ROWS : keys < 1 ? 1 : keys;
    gkv = gkv < 1 ? 1 : gkv > p->kv_heads ? p->kv_heads : gkv;
    return measure(ctx, p, rows, keys, gkv * (p->q_heads / p->kv_heads), gkv, who, speed_p);
}

int burst_speed_rounds(const struct burst_context *ctx)
{
    return burst_set_long(&ctx->set, BURST_SET_SPEED_ROUNDS) == 1 ? 1 : 2;
}
