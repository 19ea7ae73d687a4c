/*
 * runtime/sinks.c - attention sinks in the engine: argument checks, the forward's initial
 * log-sum-exp, the backward's gradient of the sinks (runtime/sinks.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "sinks.h"

burst_status_t burst_sinks_check(const char *who, const struct burst_plan *plan, const float *sinks,
                                 int64_t num_sinks)
{
    if (!sinks)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: sinks is NULL", who);
    if (num_sinks != plan->p.q_heads)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: num_sinks = %lld must equal the plan's q_heads = %d", who,
                           (long long)num_sinks, plan->p.q_heads);
    for (int64_t h = 0; h < num_sinks; h++)
        if (!isfinite(sinks[h]))
            return burst_error(BURST_ERR_INVALID_ARG, "%s: sinks[%lld] = %g is not finite", who,
                               (long long)h, (double)sinks[h]);
    return BURST_OK;
}

burst_status_t burst_sinks_init_lse(const struct burst_plan *plan, const struct burst_hgroup *hg,
                                    const float *sinks, float *lse_acc)
{
    const struct burst_backend_ops *ops = plan->ctx->ops;
    const int64_t n = plan->n;
    burst_status_t st = BURST_OK;
    for (int64_t b = 0; st == BURST_OK && b < plan->p.batch; b++)
        for (int64_t h = 0; st == BURST_OK && h < hg->nq; h++)
            st = ops->elem.fill(plan->ctx->be, lse_acc + (b * hg->nq + h) * n, (size_t)n,
                                sinks[hg->q0 + h]);
    return st;
}

/* count floats of backend memory src into host memory dst (the backend's work done). */
static burst_status_t to_host(struct burst_plan *plan, float *dst, const float *src, size_t count)
{
    const struct burst_backend_ops *ops = plan->ctx->ops;
    if (BURST_OPS_HAS(ops, mem.memcpy))
        return ops->mem.memcpy(plan->ctx->be, dst, src, count * sizeof(float));
    memcpy(dst, src, count * sizeof(float));
    return BURST_OK;
}

burst_status_t burst_sinks_grad_local(struct burst_plan *plan, const struct burst_hgroup *hg,
                                      const float *sinks, const float *lse, const float *delta,
                                      double *acc)
{
    static const char *who = "burst_attention_backward_sinks";
    const struct burst_backend_ops *ops = plan->ctx->ops;
    const int64_t n = plan->n, B = plan->p.batch;
    const size_t count = (size_t)(B * hg->nq * n);
    burst_status_t st = BURST_OK;
    if (BURST_OPS_HAS(ops, stream.sync))
        st = ops->stream.sync(plan->ctx->be);
    float *hl = malloc(2 * count * sizeof(float) + 1);
    if (st == BURST_OK && !hl)
        st = burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory (%zu bytes)", who,
                         2 * count * sizeof(float));
    if (st == BURST_OK)
        st = to_host(plan, hl, lse, count);
    if (st == BURST_OK)
        st = to_host(plan, hl + count, delta, count);
    for (int64_t h = 0; st == BURST_OK && h < hg->nq; h++) {
        const double s = sinks[hg->q0 + h];
        double sum = 0.0;
        for (int64_t b = 0; b < B; b++) {
            const float *l = hl + (b * hg->nq + h) * n, *dl = hl + count + (b * hg->nq + h) * n;
            for (int64_t i = 0; i < n; i++)
                sum += exp(s - (double)l[i]) * (double)dl[i];
        }
        acc[hg->q0 + h] -= sum;
    }
    free(hl);
    return st;
}

burst_status_t burst_sinks_grad_reduce(struct burst_plan *plan, uint32_t seq, const double *acc,
                                       float *dsinks)
{
    static const char *who = "burst_attention_backward_sinks";
    const int Hq = plan->p.q_heads;
    const size_t len = (size_t)Hq * sizeof(double);
    double *all = malloc(len * (size_t)plan->size);
    if (!all)
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory (%zu bytes)", who,
                           len * (size_t)plan->size);
    burst_status_t st =
        burst_comm_allgather(plan->comm, burst_tag(seq, BURST_MSG_SINKS, 0), acc, all, len);
    for (int h = 0; st == BURST_OK && h < Hq; h++) {
        double sum = 0.0;
        for (int r = 0; r < plan->size; r++)
            sum += all[(size_t)r * (size_t)Hq + (size_t)h];
        dsinks[h] = (float)sum;
    }
    free(all);
    return st;
}
