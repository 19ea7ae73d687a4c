/*
 * runtime/ring_fwd.c - the forward ring: K/V blocks travel, queries stay, partials merge.
 *
 * Step r of rank i (runtime/schedule.h): hold the K/V block of rank i - r; post the receive of
 * the next block into the spare buffer and the send of the held block to rank i + 1; run the
 * fused step kernel (attention + log-sum-exp merge into the running fp32 O and lse) while the
 * transfer is in flight; wait; swap buffers. Step 0 computes straight from the caller's K/V and
 * sends a packed copy. Outputs are written only after every step succeeded.
 */
#include <math.h>
#include <string.h>

#include "error.h"
#include "fault.h"
#include "plan_internal.h"
#include "ring_blocks.h"
#include "tensor_check.h"

/* A K/V message: K then V of a block of n tokens, [B, n, Hkv, d] each, in the plan's dtype. */
static size_t kv_bytes(const void *arg, int64_t n)
{
    const struct burst_plan *plan = arg;
    const struct burst_plan_params *p = &plan->p;
    return 2 * (size_t)(p->batch * n * p->kv_heads * p->head_dim) * burst_dtype_size(p->dtype);
}

struct fwd_pack {
    struct burst_plan *plan;
    const struct burst_tensor *k, *v;
};

/* Pack this rank's (possibly strided) K, V into a K/V message. */
static burst_status_t fwd_pack_own(void *arg, unsigned char *dst)
{
    const struct fwd_pack *f = arg;
    const struct burst_plan_params *p = &f->plan->p;
    const struct burst_backend_ops *ops = f->plan->ctx->ops;
    void *be = f->plan->ctx->be;
    const int64_t n = f->plan->n;
    struct burst_tensor pk = burst_view(dst, p->dtype, p->batch, n, p->kv_heads, p->head_dim);
    struct burst_tensor pv =
        burst_view(dst + kv_bytes(f->plan, n) / 2, p->dtype, p->batch, n, p->kv_heads, p->head_dim);
    burst_status_t st = ops->copy(be, &pk, f->k);
    if (st == BURST_OK)
        st = ops->copy(be, &pv, f->v);
    if (st == BURST_OK && ops->sync)
        st = ops->sync(be);
    return st;
}

static burst_status_t check_args(const char *who, struct burst_plan *plan,
                                 const struct burst_tensor *q, const struct burst_tensor *k,
                                 const struct burst_tensor *v, const struct burst_tensor *o,
                                 const float *lse)
{
    const struct burst_plan_params *p = &plan->p;
    burst_status_t st;
    if ((st = burst_tensor_check(who, "q", q, p->dtype, p->batch, plan->n, p->q_heads, p->head_dim,
                                 0)) != BURST_OK ||
        (st = burst_tensor_check(who, "k", k, p->dtype, p->batch, plan->n, p->kv_heads, p->head_dim,
                                 0)) != BURST_OK ||
        (st = burst_tensor_check(who, "v", v, p->dtype, p->batch, plan->n, p->kv_heads, p->head_dim,
                                 0)) != BURST_OK ||
        (st = burst_tensor_check(who, "o", o, p->dtype, p->batch, plan->n, p->q_heads, p->head_dim,
                                 1)) != BURST_OK)
        return st;
    if (!lse)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: lse is NULL", who);
    struct burst_tensor lv =
        burst_view((void *)(uintptr_t)lse, BURST_DTYPE_FP32, p->batch, p->q_heads, plan->n, 1);
    const struct burst_tensor *ins[3] = {q, k, v};
    static const char *names[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
        if (burst_tensor_ranges_overlap(o, ins[i]))
            return burst_error(BURST_ERR_INVALID_ARG, "%s: output o overlaps input %s", who,
                               names[i]);
        if (burst_tensor_ranges_overlap(&lv, ins[i]))
            return burst_error(BURST_ERR_INVALID_ARG, "%s: output lse overlaps input %s", who,
                               names[i]);
    }
    if (burst_tensor_ranges_overlap(&lv, o))
        return burst_error(BURST_ERR_INVALID_ARG, "%s: outputs lse and o overlap", who);
    static const char *const mem_names[5] = {"q", "k", "v", "o", "lse"};
    const void *const mem[5] = {q->data, k->data, v->data, o->data, lse};
    return burst_context_check_memory(plan->ctx, who, 5, mem_names, mem);
}

burst_status_t burst_attention_forward(struct burst_plan *plan, const struct burst_tensor *q,
                                       const struct burst_tensor *k, const struct burst_tensor *v,
                                       struct burst_tensor *o, float *lse)
{
    static const char *who = "burst_attention_forward";
    burst_error_clear();
    if (!plan)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: plan is NULL", who);
    burst_status_t st = burst_comm_check(plan->comm);
    if (st != BURST_OK)
        return st;
    st = check_args(who, plan, q, k, v, o, lse);
    if (st != BURST_OK)
        return burst_call_fail(plan, st);

    const struct burst_plan_params *p = &plan->p;
    const struct burst_backend_ops *be_ops = plan->ctx->ops;
    void *be = plan->ctx->be;
    struct burst_comm *comm = plan->comm;
    struct burst_phase_stats *stats = &plan->stats[BURST_PHASE_FWD];
    struct burst_scratch sc = {.plan = plan};
    double t0 = burst_now();
    uint32_t seq;
    if ((st = burst_call_begin(plan, BURST_PHASE_FWD, &seq)) != BURST_OK)
        return st;

    const int64_t B = p->batch, Hq = p->q_heads, Hkv = p->kv_heads, d = p->head_dim;
    const size_t es = burst_dtype_size(p->dtype);
    float *o_acc = NULL, *lse_acc = NULL;
    struct fwd_pack pk = {plan, k, v};
    struct burst_blocks blk = {0};
    st = burst_scratch_alloc(&sc, who, sizeof(float) * (size_t)(B * plan->n * Hq * d),
                             (void **)&o_acc);
    if (st == BURST_OK)
        st = burst_scratch_alloc(&sc, who, sizeof(float) * (size_t)(B * Hq * plan->n),
                                 (void **)&lse_acc);
    if (st == BURST_OK)
        st = burst_blocks_init(&blk, plan, &sc, who, BURST_SCHED_FWD, BURST_MSG_KV, seq, kv_bytes,
                               plan);
    if (st == BURST_OK)
        st = be_ops->fill(be, lse_acc, (size_t)(B * Hq * plan->n), -INFINITY);

    for (int r = 0; st == BURST_OK && r < plan->steps; r++) {
        struct burst_sched_step s;
        burst_sched_step2(BURST_SCHED_FWD, &plan->shards, plan->mask, plan->local, plan->rank, r,
                          plan->steps, &s);
        burst_fault_step(plan->rank, 0, r);
        comm->count = &plan->step_traffic[BURST_PHASE_FWD][r];
        const int64_t nb = plan->shards.lens[s.block];
        unsigned char *cur = burst_blocks_current(&blk);
        struct burst_tensor kb = *k, vb = *v;
        if (cur) {
            kb = burst_view(cur, p->dtype, B, nb, Hkv, d);
            vb = burst_view(cur + (size_t)(B * nb * Hkv * d) * es, p->dtype, B, nb, Hkv, d);
        }
        st = burst_blocks_post(&blk, &s, r, fwd_pack_own, &pk);
        if (st == BURST_OK && s.compute) {
            double tc = burst_now();
            struct burst_fwd_args a = {
                .q = q,
                .k = &kb,
                .v = &vb,
                .qpos = plan->pos,
                .kpos = burst_shards_posmap(&plan->shards, s.block),
                .mask = plan->mask,
                .scale = plan->scale,
                .o_acc = o_acc,
                .lse_acc = lse_acc,
            };
            st = be_ops->fwd_step(be, &a);
            burst_blocks_start(&blk); /* the next block moves while this one computes */
            if (st == BURST_OK && be_ops->sync)
                st = be_ops->sync(be);
            burst_call_compute(plan, BURST_PHASE_FWD, r, burst_now() - tc);
            stats->steps_computed++;
        }
        double tw = burst_now();
        burst_status_t stw = burst_blocks_wait(&blk, &s);
        burst_call_wait(plan, BURST_PHASE_FWD, r, burst_now() - tw);
        if (st == BURST_OK)
            st = stw;
        stats->steps = r + 1;
    }
    if (blk.plan)
        burst_blocks_drain(&blk);

    if (st == BURST_OK)
        burst_fault_step(plan->rank, 0, -1);
    if (st == BURST_OK) { /* all steps done: only now touch the caller's outputs */
        struct burst_tensor oa = burst_view(o_acc, BURST_DTYPE_FP32, B, plan->n, Hq, d);
        struct burst_tensor la = burst_view(lse_acc, BURST_DTYPE_FP32, B, Hq, plan->n, 1);
        struct burst_tensor lo = burst_view(lse, BURST_DTYPE_FP32, B, Hq, plan->n, 1);
        st = be_ops->copy(be, o, &oa);
        if (st == BURST_OK)
            st = be_ops->copy(be, &lo, &la);
        if (st == BURST_OK && be_ops->sync)
            st = be_ops->sync(be);
    }
    return burst_call_end(plan, BURST_PHASE_FWD, &sc, t0, st);
}
