/*
 * runtime/ring_fwd.c - the forward ring: K/V blocks travel, queries stay, partials merge.
 *
 * Step r of rank i (runtime/schedule.h): hold the K/V block of rank i - r (from step 1 on, with
 * documents, only its rows some other rank needs: burst_plan_span); post the receive of
 * the next block into the spare buffer and the send of the held block to rank i + 1; run the
 * fused step kernel (attention + log-sum-exp merge into the running fp32 O and lse) while the
 * transfer is in flight; wait; swap buffers. Step 0 computes straight from the caller's K/V and
 * sends a packed copy. With head groups (plan.h workspace_limit) the whole ring runs once per
 * group on that group's heads. A group's outputs are written only after all its steps succeeded.
 * A one-rank call whose backend has fwd_final (backend.h) is one kernel that writes o and lse
 * itself, with no accumulators (BURST_FWD_FINAL=0: the accumulating path, for comparison).
 * With sinks (runtime/sinks.h) the running lse starts at each head's sink, always on the
 * accumulating path. With fp8_forward (runtime/fp8.h) each group's Q and this rank's K/V are
 * quantized first, the steps take the e4m3 operands, and the blocks travel quantized.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "fault.h"
#include "fp8.h"
#include "plan_internal.h"
#include "step_check.h"
#include "ring_blocks.h"
#include "sinks.h"
#include "tensor_check.h"
#include "timeline.h"

/* A forward call's view of its current head group. */
struct fwd_call {
    struct burst_plan *plan;
    int64_t hkv; /* K/V heads of the group */
};

/* A K/V message: K then V of a block of n tokens, [B, n, hkv, d] each, in the plan's dtype;
 * with fp8_forward the quantized block (burst_fp8_kv_layout). */
static size_t kv_bytes(const void *arg, int64_t n)
{
    const struct fwd_call *c = arg;
    const struct burst_plan_params *p = &c->plan->p;
    if (p->fp8_forward) {
        struct burst_fp8_kv_layout l;
        burst_fp8_kv_layout(p->batch, n, c->hkv, p->head_dim, &l);
        return l.bytes;
    }
    return 2 * (size_t)(p->batch * n * c->hkv * p->head_dim) * burst_dtype_size(p->dtype);
}

/* fp8_forward: bytes of the quantized Q of gq heads and of this rank's own K/V block. */
static uint64_t fp8_bytes(const struct fwd_call *c, int64_t n, int64_t gq)
{
    const struct burst_plan_params *p = &c->plan->p;
    return p->fp8_forward ? burst_fp8_q_bytes(p->batch, n, gq, p->head_dim) + kv_bytes(c, n) : 0;
}

uint64_t burst_fwd_scratch_bytes(const struct burst_plan *plan, int64_t n, int64_t gkv)
{
    const struct burst_plan_params *p = &plan->p;
    const int64_t gq = gkv * (p->q_heads / p->kv_heads);
    struct fwd_call c = {(struct burst_plan *)(uintptr_t)plan, gkv};
    /* o_acc [B, n, gq, d] and lse_acc [B, gq, n], fp32, then the blocks */
    return sizeof(float) * (uint64_t)(p->batch * n * gq) * (uint64_t)(p->head_dim + 1) +
           fp8_bytes(&c, n, gq) + burst_blocks_scratch_bytes(plan, kv_bytes(&c, plan->n_max));
}

struct fwd_pack {
    const struct fwd_call *c;
    const struct burst_tensor *k, *v; /* the group's heads */
    const unsigned char *q8, *kv8;    /* fp8_forward: quantized Q and own K/V of the group */
};

/* Pack the travelling rows (burst_plan_span) of this rank's (possibly strided) K, V into a K/V
 * message. */
static burst_status_t fwd_pack_own(void *arg, unsigned char *dst)
{
    const struct fwd_pack *f = arg;
    struct burst_plan *plan = f->c->plan;
    const struct burst_plan_params *p = &plan->p;
    const struct burst_backend_ops *ops = plan->ctx->ops;
    void *be = plan->ctx->be;
    const int64_t h = f->c->hkv;
    int64_t lo, hi;
    burst_plan_span(plan, 0, plan->rank, &lo, &hi);
    const int64_t m = hi - lo;
    struct burst_tensor pk = burst_view(dst, p->dtype, p->batch, m, h, p->head_dim);
    struct burst_tensor pv =
        burst_view(dst + kv_bytes(f->c, m) / 2, p->dtype, p->batch, m, h, p->head_dim);
    struct burst_tensor sk = burst_rows(f->k, lo, m), sv = burst_rows(f->v, lo, m);
    burst_status_t st;
    if (p->fp8_forward) {
        st = ops->attn.fp8_quant_kv(be, &sk, &sv, dst);
    } else {
        st = ops->elem.copy(be, &pk, &sk);
        if (st == BURST_OK)
            st = ops->elem.copy(be, &pv, &sv);
    }
    if (st == BURST_OK && BURST_OPS_HAS(ops, stream.sync))
        st = ops->stream.sync(be);
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

/* The ring of head group `group`: every step's K/V block of the group's heads (pk's k, v) meets
 * the group's queries q, merged into o_acc, lse_acc (contiguous, the group's heads). */
static burst_status_t fwd_ring(struct burst_plan *plan, int group, struct burst_timeline *tl,
                               struct burst_blocks *blk, struct fwd_pack *pk,
                               const struct burst_tensor *q, float *o_acc, float *lse_acc)
{
    const struct burst_plan_params *p = &plan->p;
    const struct burst_backend_ops *be_ops = plan->ctx->ops;
    void *be = plan->ctx->be;
    struct burst_phase_stats *stats = &plan->stats[BURST_PHASE_FWD];
    const int64_t B = p->batch, h = pk->c->hkv, d = p->head_dim;
    const size_t es = burst_dtype_size(p->dtype);
    burst_status_t st = BURST_OK;
    for (int r = 0; st == BURST_OK && r < plan->steps; r++) {
        struct burst_sched_step s;
        burst_sched_step2(BURST_SCHED_FWD, &plan->shards, plan->mask, plan->local, plan->rank, r,
                          plan->steps, &s);
        burst_fault_step(plan->rank, 0, group, r);
        plan->comm->count = &plan->step_traffic[BURST_PHASE_FWD][r];
        unsigned char *cur = burst_blocks_current(blk);
        struct burst_tensor kb = *pk->k, vb = *pk->v;
        struct burst_fp8_step f8 = {pk->q8, cur ? cur : pk->kv8};
        struct burst_posmap kpos = burst_shards_posmap(&plan->shards, s.block);
        if (cur) { /* a received block: its travelling rows */
            int64_t lo, hi;
            burst_plan_span(plan, 0, s.block, &lo, &hi);
            const int64_t nb = hi - lo;
            kb = burst_view(cur, p->dtype, B, nb, h, d);
            vb = burst_view(cur + (size_t)(B * nb * h * d) * es, p->dtype, B, nb, h, d);
            kpos = burst_posmap_slice(&kpos, lo, hi);
        }
        st = burst_blocks_post(blk, &s, r, fwd_pack_own, pk);
        if (st == BURST_OK && s.compute && (st = burst_tl_kernel_begin(tl)) == BURST_OK) {
            struct burst_fwd_args a = {
                .q = q,
                .k = &kb,
                .v = &vb,
                .qpos = plan->pos,
                .kpos = kpos,
                .mask = plan->mask,
                .scale = plan->scale,
                .softcap = plan->p.softcap,
                .fp8 = p->fp8_forward ? &f8 : NULL,
                .o_acc = o_acc,
                .lse_acc = lse_acc,
            };
            struct burst_step_dims dim; /* the step's one check (step_check.h) */
            st = burst_step_check("burst_attention_forward: step", a.q, a.k, a.v, NULL, &dim);
            if (st == BURST_OK)
                st = be_ops->attn.fwd_step(be, &a);
            burst_blocks_start(blk); /* the next block moves while this one computes */
            st = burst_tl_kernel_end(tl, r, st);
            stats->steps_computed++;
        }
        double tw = burst_now();
        burst_status_t stw = burst_blocks_wait(blk, &s);
        burst_tl_wait(tl, r, burst_now() - tw);
        if (st == BURST_OK)
            st = stw;
        stats->steps = r + 1;
    }
    return st;
}

/* fp8_forward: quantize q and this rank's k, v (one group's heads) into pk's q8 and kv8, scratch
 * allocated at the first call. */
static burst_status_t fp8_quantize(struct burst_plan *plan, struct burst_scratch *sc,
                                   const char *who, const struct burst_tensor *q,
                                   struct fwd_pack *pk)
{
    const struct burst_plan_params *p = &plan->p;
    const struct burst_backend_ops *ops = plan->ctx->ops;
    burst_status_t st = BURST_OK;
    if (!pk->q8)
        st = burst_scratch_alloc_raw(sc, who, fp8_bytes(pk->c, plan->n, q->shape[2]),
                                     (void **)&pk->q8);
    if (st != BURST_OK)
        return st;
    unsigned char *q8 = (unsigned char *)(uintptr_t)pk->q8;
    pk->kv8 = q8 + burst_fp8_q_bytes(p->batch, plan->n, q->shape[2], p->head_dim);
    st = ops->attn.fp8_quant_q(plan->ctx->be, q, q8);
    if (st == BURST_OK)
        st = ops->attn.fp8_quant_kv(plan->ctx->be, pk->k, pk->v,
                                    (unsigned char *)(uintptr_t)pk->kv8);
    return st;
}

/* A one-rank call in one kernel that writes o and lse itself (backend op fwd_final): no
 * accumulators, no fill, no cast, and no head groups, which only bound the scratch. Returns
 * BURST_ERR_UNSUPPORTED where the backend or BURST_FWD_FINAL=0 declines, having done nothing
 * but (fp8_forward, one head group) quantize the operands into pk's q8 and kv8, which the
 * accumulating path then takes as its group's. pk: k and v with every head. */
static burst_status_t fwd_final(struct burst_plan *plan, struct burst_timeline *tl,
                                struct burst_scratch *sc, const struct burst_tensor *q,
                                struct fwd_pack *pk, struct burst_tensor *o, float *lse)
{
    const struct burst_tensor *k = pk->k, *v = pk->v;
    const struct burst_backend_ops *ops = plan->ctx->ops;
    if (plan->size != 1 || plan->steps != 1 || !BURST_OPS_HAS(ops, attn.fwd_final) ||
        !burst_set_long(&plan->ctx->set, BURST_SET_FWD_FINAL) ||
        (plan->p.fp8_forward && plan->hgroups > 1)) /* quantized heads: within the scratch */
        return BURST_ERR_UNSUPPORTED;
    struct burst_sched_step s;
    burst_sched_step2(BURST_SCHED_FWD, &plan->shards, plan->mask, plan->local, plan->rank, 0, 1,
                      &s);
    if (!s.compute)
        return BURST_ERR_UNSUPPORTED;
    struct burst_fwd_args a = {
        .q = q,
        .k = k,
        .v = v,
        .qpos = plan->pos,
        .kpos = burst_shards_posmap(&plan->shards, s.block),
        .mask = plan->mask,
        .scale = plan->scale,
        .softcap = plan->p.softcap,
    };
    struct burst_fp8_step f8;
    if (plan->p.fp8_forward) {
        burst_status_t st = fp8_quantize(plan, sc, "burst_attention_forward", q, pk);
        if (st != BURST_OK)
            return st;
        f8 = (struct burst_fp8_step){pk->q8, pk->kv8};
        a.fp8 = &f8;
    }
    burst_fault_step(plan->rank, 0, 0, 0); /* (again in fwd_ring if the backend declines) */
    struct burst_phase_stats *stats = &plan->stats[BURST_PHASE_FWD];
    struct burst_step_dims dim; /* the step's one check (step_check.h) */
    burst_status_t st =
        burst_step_check("burst_attention_forward: step", a.q, a.k, a.v, NULL, &dim);
    if (st == BURST_OK)
        st = burst_tl_kernel_begin(tl);
    if (st == BURST_OK) {
        st = ops->attn.fwd_final(plan->ctx->be, &a, o, lse);
        if (st == BURST_ERR_UNSUPPORTED)
            return st; /* nothing queued; the timeline releases its half-made mark */
        st = burst_tl_kernel_end(tl, 0, st);
        stats->steps_computed++;
    }
    stats->steps = 1;
    if (st == BURST_OK)
        burst_fault_step(plan->rank, 0, 0, -1);
    if (st == BURST_OK && BURST_OPS_HAS(ops, stream.sync))
        st = ops->stream.sync(plan->ctx->be);
    return st;
}

/* The forward, with sinks (with_sinks: fp32 [Hq], checked here) or without. */
static burst_status_t fwd_call(const char *who, struct burst_plan *plan,
                               const struct burst_tensor *q, const struct burst_tensor *k,
                               const struct burst_tensor *v, int with_sinks, const float *sinks,
                               int64_t num_sinks, struct burst_tensor *o, float *lse)
{
    burst_status_t st = burst_call_entry(who, plan);
    if (st != BURST_OK)
        return st;
    st = check_args(who, plan, q, k, v, o, lse);
    if (st == BURST_OK && with_sinks)
        st = burst_sinks_check(who, plan, sinks, num_sinks);
    if (st != BURST_OK)
        return burst_call_fail(plan, st);

    const struct burst_plan_params *p = &plan->p;
    const struct burst_backend_ops *be_ops = plan->ctx->ops;
    void *be = plan->ctx->be;
    struct burst_scratch sc = {.plan = plan};
    double t0 = burst_now();
    uint32_t seq;
    if ((st = burst_call_begin(plan, BURST_PHASE_FWD, &seq)) != BURST_OK)
        return st;

    const int64_t B = p->batch, Hq = p->q_heads, d = p->head_dim, n = plan->n;
    const int64_t gq = plan->gkv * (Hq / p->kv_heads);
    struct fwd_call fc = {plan, plan->gkv};
    float *o_acc = NULL, *lse_acc = NULL;
    struct burst_blocks blk = {0};
    struct burst_timeline tl;
    burst_tl_begin(&tl, plan, BURST_PHASE_FWD);
    /* fwd_final writes o and lse itself, from no running state: not with sinks */
    struct fwd_call fc_all = {plan, p->kv_heads};
    struct fwd_pack pk_all = {&fc_all, k, v, NULL, NULL};
    st = !with_sinks ? fwd_final(plan, &tl, &sc, q, &pk_all, o, lse) : BURST_ERR_UNSUPPORTED;
    if (st != BURST_ERR_UNSUPPORTED) {
        burst_tl_finish(&tl, st);
        return burst_call_end(plan, BURST_PHASE_FWD, &sc, t0, st);
    }
    /* fp8_forward: scratch of the quantized operands, already holding the one group's where
     * fwd_final quantized them and declined */
    const unsigned char *q8 = pk_all.q8;
    st = burst_scratch_alloc(&sc, who, sizeof(float) * (size_t)(B * n * gq * d), (void **)&o_acc);
    if (st == BURST_OK)
        st = burst_scratch_alloc_raw(&sc, who, sizeof(float) * (size_t)(B * gq * n),
                                     (void **)&lse_acc); /* filled per group below */
    if (st == BURST_OK)
        st = burst_blocks_init(&blk, plan, &sc, who, BURST_SCHED_FWD, BURST_MSG_KV, seq, kv_bytes,
                               &fc);

    for (int g = 0; st == BURST_OK && g < plan->hgroups; g++) {
        const struct burst_hgroup hg = burst_plan_hgroup(plan, g);
        const struct burst_tensor qg = burst_heads(q, hg.q0, hg.nq),
                                  kg = burst_heads(k, hg.kv0, hg.nkv),
                                  vg = burst_heads(v, hg.kv0, hg.nkv);
        struct fwd_pack pk = {&fc, &kg, &vg, q8, pk_all.kv8};
        fc.hkv = hg.nkv;
        if (p->fp8_forward && !pk_all.kv8 &&
            (st = fp8_quantize(plan, &sc, who, &qg, &pk)) == BURST_OK)
            q8 = pk.q8;
        if (st == BURST_OK && g > 0) { /* the next group: a fresh ring, accumulators reset */
            burst_blocks_restart(&blk, burst_call_next_seq(plan));
            st = be_ops->elem.fill(be, o_acc, (size_t)(B * n * hg.nq * d), 0.0f);
        }
        if (st == BURST_OK && !with_sinks)
            st = be_ops->elem.fill(be, lse_acc, (size_t)(B * hg.nq * n), -INFINITY);
        else if (st == BURST_OK) /* each row's denominator starts with its head's sink */
            st = burst_sinks_init_lse(plan, &hg, sinks, lse_acc);
        burst_tl_break(&tl);
        if (st == BURST_OK)
            st = fwd_ring(plan, g, &tl, &blk, &pk, &qg, o_acc, lse_acc);
        if (blk.plan)
            burst_blocks_drain(&blk);
        if (st == BURST_OK && g == plan->hgroups - 1)
            burst_fault_step(plan->rank, 0, g, -1);
        if (st == BURST_OK) { /* the group's ring is done: only now touch its outputs */
            struct burst_tensor og = burst_heads(o, hg.q0, hg.nq);
            struct burst_tensor oa = burst_view(o_acc, BURST_DTYPE_FP32, B, n, hg.nq, d);
            struct burst_tensor la = burst_view(lse_acc, BURST_DTYPE_FP32, B, hg.nq, n, 1);
            struct burst_tensor lo = {
                /* lse[:, q0 : q0 + nq, :], [B, Hq, n] contiguous */
                .data = lse + hg.q0 * n,
                .dtype = BURST_DTYPE_FP32,
                .shape = {B, hg.nq, n, 1},
                .stride = {Hq * n, n, 1, 1},
            };
            st = be_ops->elem.copy(be, &og, &oa);
            if (st == BURST_OK)
                st = be_ops->elem.copy(be, &lo, &la);
            /* the next group's work queues behind these copies: only the last one waits */
            if (st == BURST_OK && BURST_OPS_HAS(be_ops, stream.sync) && g == plan->hgroups - 1)
                st = be_ops->stream.sync(be);
        }
    }
    burst_tl_finish(&tl, st);
    return burst_call_end(plan, BURST_PHASE_FWD, &sc, t0, st);
}

burst_status_t burst_attention_forward(struct burst_plan *plan, const struct burst_tensor *q,
                                       const struct burst_tensor *k, const struct burst_tensor *v,
                                       struct burst_tensor *o, float *lse)
{
    return fwd_call("burst_attention_forward", plan, q, k, v, 0, NULL, 0, o, lse);
}

burst_status_t burst_attention_forward_sinks(struct burst_plan *plan, const struct burst_tensor *q,
                                             const struct burst_tensor *k,
                                             const struct burst_tensor *v, const float *sinks,
                                             int64_t num_sinks, struct burst_tensor *o, float *lse)
{
    return fwd_call("burst_attention_forward_sinks", plan, q, k, v, 1, sinks, num_sinks, o, lse);
}
