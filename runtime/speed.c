/* runtime/speed.c - a short timed local forward step per rank (see speed.h). */
#include <math.h>

#include "error.h"
#include "speed.h"

burst_status_t burst_speed_measure(struct burst_context *ctx, const struct burst_plan_params *p,
                                   int ranks, const char *who, double *speed_p)
{
    const struct burst_backend_ops *ops = ctx->ops;
    int64_t nmax = p->seq_len / (ranks > 0 ? ranks : 1);
    nmax = nmax < BURST_SPEED_ROWS ? BURST_SPEED_ROWS
           : nmax > BURST_SPEED_MAX_ROWS ? BURST_SPEED_MAX_ROWS
                                         : nmax;
    const int64_t hq = p->q_heads, hkv = p->kv_heads, d = p->head_dim;
    int64_t n = nmax; /* the buffers' size; the step's size grows up to it below */
    const size_t es = burst_dtype_size(p->dtype);
    struct burst_scratch sc = {.plan = NULL};
    struct burst_plan fake = {.ctx = ctx}; /* the scratch allocator's ctx and kept buffers */
    sc.plan = &fake;
    void *q = NULL, *k = NULL, *v = NULL;
    float *o = NULL, *lse = NULL;
    burst_status_t st = burst_scratch_alloc(&sc, who, (size_t)(n * hq * d) * es, &q);
    if (st == BURST_OK)
        st = burst_scratch_alloc(&sc, who, (size_t)(n * hkv * d) * es, &k);
    if (st == BURST_OK)
        st = burst_scratch_alloc(&sc, who, (size_t)(n * hkv * d) * es, &v);
    if (st == BURST_OK)
        st = burst_scratch_alloc(&sc, who, sizeof(float) * (size_t)(n * hq * d), (void **)&o);
    if (st == BURST_OK)
        st = burst_scratch_alloc(&sc, who, sizeof(float) * (size_t)(n * hq), (void **)&lse);
    n = BURST_SPEED_ROWS;
    struct burst_tensor qt = burst_view(q, p->dtype, 1, n, hq, d);
    struct burst_tensor kt = burst_view(k, p->dtype, 1, n, hkv, d);
    struct burst_tensor vt = burst_view(v, p->dtype, 1, n, hkv, d);
    struct burst_posmap pos = {.nruns = 1, .run = {{.len = n, .stride = 1}}};
    struct burst_fwd_args a = {
        .q = &qt,
        .k = &kt,
        .v = &vt,
        .qpos = pos,
        .kpos = pos,
        .mask = {BURST_POS_INF, BURST_POS_INF},
        .scale = 1.0f,
        .o_acc = o,
        .lse_acc = lse,
    };
    /* grow the step (rows = keys) while one takes less than BURST_SPEED_STEP_S: a GPU's launch
     * overhead must not dominate what is timed (at 256 rows it does, by 10x and more) */
    while (st == BURST_OK && n < nmax) {
        for (int w = 0; st == BURST_OK && w < 2; w++) { /* untimed once, then timed */
            double tw = burst_now();
            st = ops->fill(ctx->be, lse, (size_t)(n * hq), -INFINITY);
            if (st == BURST_OK)
                st = ops->fwd_step(ctx->be, &a);
            if (st == BURST_OK && ops->sync)
                st = ops->sync(ctx->be);
            if (w == 1 && burst_now() - tw >= BURST_SPEED_STEP_S)
                goto sized;
        }
        n = 2 * n < nmax ? 2 * n : nmax;
        qt.shape[1] = kt.shape[1] = vt.shape[1] = n;
        a.qpos.run[0].len = a.kpos.run[0].len = n;
    }
sized:;
    double t0 = 0.0, elapsed = 0.0;
    int reps = 0;
    for (int it = 0; st == BURST_OK && it <= BURST_SPEED_MAX_REPS; it++) {
        if (it == 1)
            t0 = burst_now();
        st = ops->fill(ctx->be, lse, (size_t)(n * hq), -INFINITY);
        if (st == BURST_OK)
            st = ops->fwd_step(ctx->be, &a);
        if (st == BURST_OK && ops->sync)
            st = ops->sync(ctx->be);
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
    *speed_p = (double)reps * (double)n * (double)n * (double)hq / elapsed;
    return BURST_OK;
}
