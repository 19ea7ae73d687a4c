/*
 * runtime/ring_bwd.c - the backward ring, both communication patterns of ALGORITHM.md section 2.
 *
 *   burst: the query bundle (Q, dO, lse, D) travels to rank i-1; K, V, dK, dV stay home; the dQ
 *          accumulator of each bundle follows it one step behind.
 *   ring:  K, V travel to rank i+1; Q, dO, lse, D, dQ stay home; the dK/dV accumulators follow.
 *
 * Step r >= 1 computes the held block's contribution into a fresh fp32 partial while the next
 * bundle and the previous step's accumulator are in flight, then adds the accumulator that the
 * previous holder finished (received during this step) and sends the sum on at step r+1. The
 * owner's own contribution (step 0) never travels; after the last step every chain goes straight
 * to its owner. Accumulators are fp32 on the wire unless the plan asks for the input dtype.
 * With documents a block and its accumulator carry only the block's rows that some other rank
 * pairs with (burst_plan_span); the owner adds the returned sum into those rows of its own.
 * With head groups (plan.h workspace_limit) the whole ring runs once per group on that group's
 * heads. A group's outputs are written only after all its steps succeeded. A one-rank call whose
 * backend has bwd_final (backend.h) writes dK and dV from its kernel, with no accumulators
 * (BURST_BWD_FINAL=0: the accumulating path, for comparison).
 */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "fault.h"
#include "plan_internal.h"
#include "step_check.h"
#include "ring_blocks.h"
#include "sinks.h"
#include "tensor_check.h"
#include "timeline.h"

struct bwd_call {
    struct burst_plan *plan;
    const struct burst_backend_ops *ops;
    void *be;
    int burst;                /* pattern */
    int64_t B, Hq, Hkv, d;    /* Hq, Hkv: heads of the current group */
    size_t es, as;            /* element sizes: input dtype, accumulator wire dtype */
    int final;                /* try bwd_final: one rank, one step (dkv_loc only if declined) */
    struct burst_scratch *sc; /* the call's scratch (allocation after a declined bwd_final) */
};

static struct bwd_call bwd_call_make(const struct burst_plan *plan, int64_t gkv)
{
    const struct burst_plan_params *p = &plan->p;
    return (struct bwd_call){
        .plan = (struct burst_plan *)(uintptr_t)plan,
        .ops = plan->ctx ? plan->ctx->ops : NULL, /* none: counting bytes only */
        .be = plan->ctx ? plan->ctx->be : NULL,
        .burst = plan->bwd == BURST_BWD_BURST,
        .B = p->batch,
        .Hq = gkv * (p->q_heads / p->kv_heads),
        .Hkv = gkv,
        .d = p->head_dim,
        .es = burst_dtype_size(p->dtype),
        .as = burst_dtype_size(plan->acc_dtype),
    };
}

/* Elements of a travelling accumulator for a block of n tokens. */
static size_t acc_elems(const struct bwd_call *c, int64_t n)
{
    return (size_t)(c->burst ? c->B * n * c->Hq * c->d : 2 * c->B * n * c->Hkv * c->d);
}

static size_t bundle_bytes(const struct bwd_call *c, int64_t n)
{
    if (c->burst)
        return (size_t)(c->B * n * c->Hq) * (2 * (size_t)c->d * c->es + 2 * sizeof(float));
    return 2 * (size_t)(c->B * n * c->Hkv * c->d) * c->es;
}

static size_t bundle_bytes_of(const void *arg, int64_t n)
{
    return bundle_bytes(arg, n);
}

/* The scratch of a call, allocated once for the largest head group. */
struct bwd_bufs {
    float *dq_loc;  /* this rank's dQ, fp32 [B, n, Hq, d] */
    float *dkv_loc; /* this rank's dK then dV, fp32 [B, n, Hkv, d] each */
    float *delta;   /* D of this rank's rows, [B, Hq, n] */
    float *lse;     /* with head groups: the group's lse rows, contiguous [B, Hq, n] */
    float *part[2]; /* the accumulator computed at a step, and the one finished before */
    unsigned char *acc_in, *acc_out; /* a received accumulator; one converted for the wire */
    struct burst_blocks blk;
    struct burst_xfer ra, sa;
};

/* Allocate b's buffers for c's heads (blocks under tag sequence seq); with sc NULL, only count
 * their bytes. Returns the bytes. */
static uint64_t bwd_alloc(const struct bwd_call *c, int64_t n, uint32_t seq,
                          struct burst_scratch *sc, struct bwd_bufs *b, burst_status_t *st_p)
{
    static const char *who = "burst_attention_backward";
    const struct burst_plan *plan = c->plan;
    const size_t qelems = (size_t)(c->B * n * c->Hq * c->d),
                 kvelems = (size_t)(c->B * n * c->Hkv * c->d);
    const size_t rows = (size_t)(c->B * c->Hq * n), amax = acc_elems(c, plan->n_max);
    const int grouped = c->Hkv<plan->p.kv_heads, moves = plan->steps> 1;
    /* raw: written whole before it is read (D, the gathered lse, partials filled at their
     * step, received or converted accumulators); the local accumulators start at zero */
    const struct {
        size_t bytes;
        int want, raw;
        void **ptr;
    } list[] = {
        {qelems * sizeof(float), 1, 0, (void **)&b->dq_loc},
        {2 * kvelems * sizeof(float), !(sc && c->final), 0, (void **)&b->dkv_loc},
        {rows * sizeof(float), 1, 1, (void **)&b->delta},
        {rows * sizeof(float), grouped, 1, (void **)&b->lse},
        {amax * sizeof(float), moves, 1, (void **)&b->part[0]},
        {amax * sizeof(float), moves, 1, (void **)&b->part[1]},
        {amax * c->as, moves, 1, (void **)&b->acc_in},
        {amax * c->as, moves && plan->acc_dtype != BURST_DTYPE_FP32, 1, (void **)&b->acc_out},
    };
    uint64_t total = burst_blocks_scratch_bytes(plan, bundle_bytes(c, plan->n_max));
    burst_status_t st = BURST_OK;
    for (size_t i = 0; i < sizeof(list) / sizeof(list[0]); i++)
        if (list[i].want) {
            total += list[i].bytes;
            if (sc && st == BURST_OK && list[i].raw)
                st = burst_scratch_alloc_raw(sc, who, list[i].bytes, list[i].ptr);
            else if (sc && st == BURST_OK)
                st = burst_scratch_alloc(sc, who, list[i].bytes, list[i].ptr);
        }
    if (sc && st == BURST_OK)
        st = burst_blocks_init(&b->blk, c->plan, sc, who,
                               c->burst ? BURST_SCHED_BWD_BURST : BURST_SCHED_BWD_RING,
                               BURST_MSG_BUNDLE, seq, bundle_bytes_of, c);
    if (st_p)
        *st_p = st;
    return total;
}

uint64_t burst_bwd_scratch_bytes(const struct burst_plan *plan, int64_t n, int64_t gkv)
{
    struct bwd_call c = bwd_call_make(plan, gkv);
    struct bwd_bufs unused;
    return bwd_alloc(&c, n, 0, NULL, &unused, NULL);
}

/* Views of a packed bundle: burst (q, dout, lse, delta) or ring (k, v). */
struct bundle {
    struct burst_tensor t0, t1;
    float *lse, *delta;
};

static struct bundle bundle_views(const struct bwd_call *c, unsigned char *ptr, int64_t n)
{
    struct bundle b = {0};
    burst_dtype_t dt = c->plan->p.dtype;
    int64_t h = c->burst ? c->Hq : c->Hkv;
    size_t part = (size_t)(c->B * n * h * c->d) * c->es;
    b.t0 = burst_view(ptr, dt, c->B, n, h, c->d);
    b.t1 = burst_view(ptr + part, dt, c->B, n, h, c->d);
    if (c->burst) {
        b.lse = (float *)(void *)(ptr + 2 * part);
        b.delta = b.lse + c->B * c->Hq * n;
    }
    return b;
}

/* Pack rows [lo, lo + m) of bundle src (of n rows) into dst (of m rows). */
static burst_status_t pack_bundle(const struct bwd_call *c, const struct bundle *dst,
                                  const struct bundle *src, int64_t n, int64_t lo, int64_t m)
{
    struct burst_tensor s0 = burst_rows(&src->t0, lo, m), s1 = burst_rows(&src->t1, lo, m);
    burst_status_t st = c->ops->elem.copy(c->be, &dst->t0, &s0);
    if (st == BURST_OK)
        st = c->ops->elem.copy(c->be, &dst->t1, &s1);
    if (st == BURST_OK && c->burst) { /* lse and D: [B, Hq, n] fp32 each, as B Hq rows of m */
        const int64_t rows = m == n ? 1 : c->B * c->Hq, len = m == n ? c->B * c->Hq * n : m;
        struct burst_tensor ld = burst_view(dst->lse, BURST_DTYPE_FP32, 1, rows, 1, len);
        struct burst_tensor dd = burst_view(dst->delta, BURST_DTYPE_FP32, 1, rows, 1, len);
        struct burst_tensor ls = {
            .data = src->lse + lo,
            .dtype = BURST_DTYPE_FP32,
            .shape = {1, rows, 1, len},
            .stride = {rows * n, n, len, 1},
        };
        struct burst_tensor ds = ls;
        ds.data = src->delta + lo;
        st = c->ops->elem.copy(c->be, &ld, &ls);
        if (st == BURST_OK)
            st = c->ops->elem.copy(c->be, &dd, &ds);
    }
    if (st == BURST_OK && BURST_OPS_HAS(c->ops, stream.sync))
        st = c->ops->stream.sync(c->be);
    return st;
}

struct own_pack {
    const struct bwd_call *c;
    const struct bundle *own;
};

/* Pack the travelling rows (burst_plan_span) of this rank's own bundle (the caller's strided
 * tensors) into a message buffer. */
static burst_status_t pack_own(void *arg, unsigned char *dst)
{
    const struct own_pack *op = arg;
    const struct burst_plan *plan = op->c->plan;
    int64_t lo, hi;
    burst_plan_span(plan, op->c->burst, plan->rank, &lo, &hi);
    struct bundle packed = bundle_views(op->c, dst, hi - lo);
    return pack_bundle(op->c, &packed, op->own, plan->n, lo, hi - lo);
}

/* Add the accumulator of this rank's travelling rows [lo, lo + m), received in acc (wire dtype),
 * into its own fp32 accumulators (dQ, or dK then dV; n rows each). */
static burst_status_t acc_home(const struct bwd_call *c, float *own, const unsigned char *acc,
                               int64_t n, int64_t lo, int64_t m)
{
    const struct burst_plan *plan = c->plan;
    const int64_t h = c->burst ? c->Hq : c->Hkv, parts = c->burst ? 1 : 2;
    if (lo == 0 && m == n) /* every row: one pass */
        return c->ops->elem.accumulate(c->be, own, acc, plan->acc_dtype, acc_elems(c, n));
    burst_status_t st = BURST_OK;
    for (int64_t t = 0; t < parts * c->B && st == BURST_OK; t++) /* (dK | dV, batch) row runs */
        st = c->ops->elem.accumulate(c->be, own + (t * n + lo) * h * c->d,
                                     acc + (size_t)(t * m * h * c->d) * c->as, plan->acc_dtype,
                                     (size_t)(m * h * c->d));
    return st;
}

/* Buffer to put on the wire for fp32 accumulator acc of `count` elements (converted if the wire
 * dtype is narrower). */
static burst_status_t wire_acc(const struct bwd_call *c, float *acc, unsigned char *out,
                               size_t count, const void **wire_p)
{
    if (c->plan->acc_dtype == BURST_DTYPE_FP32) {
        *wire_p = acc;
        return BURST_OK;
    }
    struct burst_tensor src = burst_view(acc, BURST_DTYPE_FP32, 1, 1, 1, (int64_t)count);
    struct burst_tensor dst = burst_view(out, c->plan->acc_dtype, 1, 1, 1, (int64_t)count);
    burst_status_t st = c->ops->elem.copy(c->be, &dst, &src);
    if (st == BURST_OK && BURST_OPS_HAS(c->ops, stream.sync))
        st = c->ops->stream.sync(c->be);
    *wire_p = out;
    return st;
}

static burst_status_t check_args(const char *who, struct burst_plan *plan,
                                 const struct burst_tensor *q, const struct burst_tensor *k,
                                 const struct burst_tensor *v, const struct burst_tensor *o,
                                 const float *lse, const struct burst_tensor *dout,
                                 const struct burst_tensor *dq, const struct burst_tensor *dk,
                                 const struct burst_tensor *dv)
{
    const struct burst_plan_params *p = &plan->p;
    const int64_t B = p->batch, n = plan->n, d = p->head_dim;
    burst_status_t st;
    if ((st = burst_tensor_check(who, "q", q, p->dtype, B, n, p->q_heads, d, 0)) ||
        (st = burst_tensor_check(who, "k", k, p->dtype, B, n, p->kv_heads, d, 0)) ||
        (st = burst_tensor_check(who, "v", v, p->dtype, B, n, p->kv_heads, d, 0)) ||
        (st = burst_tensor_check(who, "o", o, p->dtype, B, n, p->q_heads, d, 0)))
        return st;
    if (!lse)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: lse is NULL", who);
    if ((st = burst_tensor_check(who, "dout", dout, p->dtype, B, n, p->q_heads, d, 0)) ||
        (st = burst_tensor_check(who, "dq", dq, p->dtype, B, n, p->q_heads, d, 1)) ||
        (st = burst_tensor_check(who, "dk", dk, p->dtype, B, n, p->kv_heads, d, 1)) ||
        (st = burst_tensor_check(who, "dv", dv, p->dtype, B, n, p->kv_heads, d, 1)))
        return st;
    struct burst_tensor lv =
        burst_view((void *)(uintptr_t)lse, BURST_DTYPE_FP32, B, p->q_heads, n, 1);
    const struct burst_tensor *all[9] = {q, k, v, o, &lv, dout, dq, dk, dv};
    static const char *names[9] = {"q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv"};
    for (int out = 6; out < 9; out++)
        for (int i = 0; i < 9; i++)
            if (i != out && (i < out || i >= 6) && burst_tensor_ranges_overlap(all[out], all[i]))
                return burst_error(BURST_ERR_INVALID_ARG, "%s: output %s overlaps %s %s", who,
                                   names[out], i < 6 ? "input" : "output", names[i]);
    const void *mem[9];
    for (int i = 0; i < 9; i++)
        mem[i] = all[i]->data;
    return burst_context_check_memory(plan->ctx, who, 9, names, mem);
}

/* The ring of head group `group` under tag sequence seq: q, k, v,
 * dout are the group's heads of the caller's tensors, lse its rows (contiguous); leaves the
 * group's dQ, dK, dV in b's dq_loc, dkv_loc, or (c->final, b->dkv_loc NULL) dK, dV written to
 * dk, dv (the group's heads of the caller's outputs) by the backend's bwd_final. */
static burst_status_t bwd_ring(const struct bwd_call *c, struct bwd_bufs *b, uint32_t seq,
                               int group, struct burst_timeline *tl, const struct burst_tensor *q,
                               const struct burst_tensor *k, const struct burst_tensor *v,
                               const struct burst_tensor *dout, const float *lse,
                               const struct burst_tensor *dk, const struct burst_tensor *dv)
{
    struct burst_plan *plan = c->plan;
    struct burst_comm *comm = plan->comm;
    struct burst_phase_stats *stats = &plan->stats[BURST_PHASE_BWD];
    const enum burst_sched_pattern pat = c->burst ? BURST_SCHED_BWD_BURST : BURST_SCHED_BWD_RING;
    const int64_t n = plan->n, G = plan->size;
    const size_t kvelems = (size_t)(c->B * n * c->Hkv * c->d);

    /* The home-side tensors, and this rank's own bundle (step 0). */
    struct bundle own = {0};
    if (c->burst) {
        own.t0 = *q;
        own.t1 = *dout;
        own.lse = (float *)(uintptr_t)lse;
        own.delta = b->delta;
    } else {
        own.t0 = *k;
        own.t1 = *v;
    }
    struct own_pack op = {c, &own};
    burst_status_t st = BURST_OK;
    for (int r = 0; st == BURST_OK && r < plan->steps; r++) {
        struct burst_sched_step s;
        burst_sched_step2(pat, &plan->shards, plan->mask, plan->local, plan->rank, r, plan->steps,
                          &s);
        burst_fault_step(plan->rank, 1, group, r);
        comm->count = &plan->step_traffic[BURST_PHASE_BWD][r];
        int64_t lo, hi; /* the held block's travelling rows */
        burst_plan_span(plan, c->burst, s.block, &lo, &hi);
        const int64_t nb = hi - lo;
        const int pc = r & 1; /* partial computed at this step; 1 - pc was finished at r - 1 */
        unsigned char *cur = burst_blocks_current(&b->blk);
        struct bundle held = cur ? bundle_views(c, cur, nb) : own;
        struct burst_posmap qpos = burst_shards_posmap(&plan->shards, s.q_rank),
                            kpos = burst_shards_posmap(&plan->shards, s.kv_rank);
        if (cur && c->burst)
            qpos = burst_posmap_slice(&qpos, lo, hi);
        else if (cur)
            kpos = burst_posmap_slice(&kpos, lo, hi);
        st = burst_blocks_post(&b->blk, &s, r, pack_own, &op);
        if (st == BURST_OK && s.acc_to >= 0) { /* the accumulator finished at step r - 1 */
            int64_t plo, phi;
            burst_plan_span(plan, c->burst,
                            burst_sched_block(pat, (int)G, plan->local, plan->rank, r - 1), &plo,
                            &phi);
            const int64_t np = phi - plo;
            const void *wire;
            st = wire_acc(c, b->part[1 - pc], b->acc_out, acc_elems(c, np), &wire);
            if (st == BURST_OK)
                st = burst_xfer_isend(plan, s.acc_to, burst_tag(seq, BURST_MSG_ACC, r), wire,
                                      acc_elems(c, np) * c->as, &b->sa);
        }
        if (st == BURST_OK && s.acc_from >= 0)
            st = burst_xfer_irecv(plan, s.acc_from, burst_tag(seq, BURST_MSG_ACC, r), b->acc_in,
                                  acc_elems(c, nb) * c->as, &b->ra);

        /* One rank whose only step computes nothing (no pair allowed): the zeroed accumulators
         * are the gradients, cast as usual */
        if (st == BURST_OK && c->final && !b->dkv_loc && !s.compute)
            st = burst_scratch_alloc(c->sc, "burst_attention_backward", 2 * kvelems * sizeof(float),
                                     (void **)&b->dkv_loc);
        /* Where this step's gradients go. */
        float *gq = b->dq_loc, *gk = b->dkv_loc, *gv = b->dkv_loc ? b->dkv_loc + kvelems : NULL;
        if (st == BURST_OK && r > 0) {
            st = c->ops->elem.fill(c->be, b->part[pc], acc_elems(c, nb), 0.0f);
            if (c->burst) {
                gq = b->part[pc];
            } else {
                gk = b->part[pc];
                gv = b->part[pc] + (size_t)(c->B * nb * c->Hkv * c->d);
            }
        }
        if (st == BURST_OK && s.compute && (st = burst_tl_kernel_begin(tl)) == BURST_OK) {
            struct burst_bwd_args a = {
                .q = c->burst ? &held.t0 : q,
                .dout = c->burst ? &held.t1 : dout,
                .lse = c->burst ? held.lse : lse,
                .delta = c->burst ? held.delta : b->delta,
                .k = c->burst ? k : &held.t0,
                .v = c->burst ? v : &held.t1,
                .qpos = qpos,
                .kpos = kpos,
                .mask = plan->mask,
                .scale = plan->scale,
                .softcap = plan->p.softcap,
                .dq = gq,
                .dk = gk,
                .dv = gv,
                .deterministic = plan->p.deterministic,
            };
            struct burst_step_dims dim; /* the step's one check (step_check.h) */
            st = burst_step_check("burst_attention_backward: step", a.q, a.k, a.v, a.dout, &dim);
            if (st == BURST_OK)
                st = BURST_ERR_UNSUPPORTED;
            if (st == BURST_ERR_UNSUPPORTED && c->final && !b->dkv_loc) { /* dK, dV to outputs */
                a.dk = a.dv = NULL;
                st = c->ops->attn.bwd_final(c->be, &a, dk, dv);
                if (st == BURST_ERR_UNSUPPORTED) { /* declined, nothing queued: accumulate */
                    st = burst_scratch_alloc(c->sc, "burst_attention_backward",
                                             2 * kvelems * sizeof(float), (void **)&b->dkv_loc);
                    if (st == BURST_OK) {
                        a.dk = b->dkv_loc;
                        a.dv = b->dkv_loc + kvelems;
                        st = BURST_ERR_UNSUPPORTED;
                    }
                }
            }
            if (st == BURST_ERR_UNSUPPORTED)
                st = c->ops->attn.bwd_step(c->be, &a);
            burst_blocks_start(&b->blk); /* the next bundle and the accumulator move meanwhile */
            burst_xfer_start(plan, &b->ra);
            st = burst_tl_kernel_end(tl, r, st);
            stats->steps_computed++;
        }
        double tw = burst_now();
        burst_status_t w1 = burst_xfer_wait(plan, &b->ra);
        if (st == BURST_OK && w1 == BURST_OK && s.acc_from >= 0)
            st = c->ops->elem.accumulate(c->be, b->part[pc], b->acc_in, plan->acc_dtype,
                                         acc_elems(c, nb));
        burst_status_t w2 = burst_blocks_wait(&b->blk, &s), w3 = burst_xfer_wait(plan, &b->sa);
        burst_tl_wait(tl, r, burst_now() - tw);
        if (st == BURST_OK)
            st = w1 ? w1 : w2 ? w2 : w3;
        stats->steps = r + 1;

        /* After the last step: every chain goes home, and this rank's own comes back. */
        if (st == BURST_OK && group == plan->hgroups - 1 && r == plan->steps - 1)
            burst_fault_step(plan->rank, 1, group, -1);
        if (st == BURST_OK && (s.final_to >= 0 || s.final_from >= 0)) {
            comm->count = &plan->step_traffic[BURST_PHASE_BWD][plan->steps];
            const void *wire = NULL;
            int64_t olo, ohi; /* this rank's own travelling rows */
            burst_plan_span(plan, c->burst, plan->rank, &olo, &ohi);
            st = burst_xfer_irecv(plan, s.final_from, burst_tag(seq, BURST_MSG_ACC, plan->steps),
                                  b->acc_in, acc_elems(c, ohi - olo) * c->as, &b->ra);
            if (st == BURST_OK)
                st = wire_acc(c, b->part[pc], b->acc_out, acc_elems(c, nb), &wire);
            if (st == BURST_OK)
                st = burst_xfer_isend(plan, s.final_to, burst_tag(seq, BURST_MSG_ACC, plan->steps),
                                      wire, acc_elems(c, nb) * c->as, &b->sa);
            tw = burst_now();
            w1 = burst_xfer_wait(plan, &b->ra);
            w2 = burst_xfer_wait(plan, &b->sa);
            burst_tl_wait(tl, plan->steps, burst_now() - tw);
            if (st == BURST_OK)
                st = w1 ? w1 : w2;
            if (st == BURST_OK)
                st = acc_home(c, c->burst ? b->dq_loc : b->dkv_loc, b->acc_in, n, olo, ohi - olo);
        }
    }
    return st;
}

/* Before a group's ring: zeroed accumulators (a fresh call's scratch already is), the group's
 * lse rows gathered when it holds a part of the heads, and its D. */
static burst_status_t bwd_group_begin(const struct bwd_call *c, struct bwd_bufs *b, int g,
                                      const struct burst_hgroup *hg, const float *lse,
                                      const struct burst_tensor *og, const struct burst_tensor *dog,
                                      const float **lse_p)
{
    const int64_t n = c->plan->n, Hq = c->plan->p.q_heads;
    burst_status_t st = BURST_OK;
    if (g > 0) {
        st = c->ops->elem.fill(c->be, b->dq_loc, (size_t)(c->B * n * c->Hq * c->d), 0.0f);
        if (st == BURST_OK && b->dkv_loc)
            st = c->ops->elem.fill(c->be, b->dkv_loc, 2 * (size_t)(c->B * n * c->Hkv * c->d), 0.0f);
    }
    *lse_p = lse;
    if (st == BURST_OK && b->lse) {
        struct burst_tensor src = {
            /* lse[:, q0 : q0 + nq, :] of [B, Hq, n] */
            .data = (void *)(uintptr_t)(lse + hg->q0 * n),
            .dtype = BURST_DTYPE_FP32,
            .shape = {c->B, hg->nq, n, 1},
            .stride = {Hq * n, n, 1, 1},
        };
        struct burst_tensor dst = burst_view(b->lse, BURST_DTYPE_FP32, c->B, hg->nq, n, 1);
        st = c->ops->elem.copy(c->be, &dst, &src);
        *lse_p = b->lse;
    }
    if (st == BURST_OK)
        st = c->ops->attn.bwd_delta(c->be, dog, og, b->delta);
    return st;
}

/* The sinks of a backward call: none (with = 0), or the caller's with the gradient's output. */
struct bwd_sinks {
    int with;
    const float *sinks;
    int64_t num;
    float *dsinks;
    double *acc; /* this rank's part of the gradient, [Hq] */
    float *sum;  /* the gradient summed over the ranks, [Hq], copied to dsinks on success */
};

/* The backward, with or without sinks (s). */
static burst_status_t bwd_call(const char *who, struct burst_plan *plan,
                               const struct burst_tensor *q, const struct burst_tensor *k,
                               const struct burst_tensor *v, const struct burst_tensor *o,
                               const float *lse, const struct burst_tensor *dout,
                               struct burst_tensor *dq, struct burst_tensor *dk,
                               struct burst_tensor *dv, struct bwd_sinks *s)
{
    burst_status_t st = burst_call_entry(who, plan);
    if (st != BURST_OK)
        return st;
    /* every rank's plan has the flag (the handshake compares it), so every rank refuses here and
     * none waits: the communicator stays usable for the plan's forward calls */
    if (plan->p.fp8_forward)
        return burst_error(BURST_ERR_UNSUPPORTED,
                           "%s: the plan has fp8_forward = %d, whose forward has no backward "
                           "(train with a plan without fp8_forward)",
                           who, plan->p.fp8_forward);
    st = check_args(who, plan, q, k, v, o, lse, dout, dq, dk, dv);
    if (st == BURST_OK && s->with)
        st = burst_sinks_check(who, plan, s->sinks, s->num);
    if (st == BURST_OK && s->with && !s->dsinks)
        st = burst_error(BURST_ERR_INVALID_ARG, "%s: dsinks is NULL", who);
    if (st == BURST_OK && s->with &&
        (!(s->acc = calloc((size_t)plan->p.q_heads, sizeof(double))) ||
         !(s->sum = malloc((size_t)plan->p.q_heads * sizeof(float)))))
        st = burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    if (st != BURST_OK)
        return burst_call_fail(plan, st);

    struct bwd_call c = bwd_call_make(plan, plan->gkv);
    struct burst_scratch sc = {.plan = plan};
    c.final = plan->size == 1 && plan->steps == 1 && BURST_OPS_HAS(c.ops, attn.bwd_final) &&
              burst_set_long(&plan->ctx->set, BURST_SET_BWD_FINAL);
    c.sc = &sc;
    struct bwd_bufs b = {0};
    struct burst_timeline tl;
    const int64_t n = plan->n;
    double t0 = burst_now();
    uint32_t seq;
    if ((st = burst_call_begin(plan, BURST_PHASE_BWD, &seq)) != BURST_OK)
        return st;
    burst_tl_begin(&tl, plan, BURST_PHASE_BWD);
    bwd_alloc(&c, n, seq, &sc, &b, &st);

    for (int g = 0; st == BURST_OK && g < plan->hgroups; g++) {
        const struct burst_hgroup hg = burst_plan_hgroup(plan, g);
        const struct burst_tensor qg = burst_heads(q, hg.q0, hg.nq),
                                  kg = burst_heads(k, hg.kv0, hg.nkv),
                                  vg = burst_heads(v, hg.kv0, hg.nkv),
                                  og = burst_heads(o, hg.q0, hg.nq),
                                  dog = burst_heads(dout, hg.q0, hg.nq);
        const float *lse_g = NULL;
        c.Hq = hg.nq;
        c.Hkv = hg.nkv;
        if (g > 0) { /* the next group: a fresh ring under its own tags */
            seq = burst_call_next_seq(plan);
            burst_blocks_restart(&b.blk, seq);
        }
        st = bwd_group_begin(&c, &b, g, &hg, lse, &og, &dog, &lse_g);
        if (st == BURST_OK && s->with) /* this rank's rows: their lse and D are final */
            st = burst_sinks_grad_local(plan, &hg, s->sinks, lse_g, b.delta, s->acc);
        /* every rank's part is known: sum them before the last group writes any output, so
         * that a failed exchange leaves the outputs as a failed ring does */
        if (st == BURST_OK && s->with && g == plan->hgroups - 1)
            st = burst_sinks_grad_reduce(plan, burst_call_next_seq(plan), s->acc, s->sum);
        burst_tl_break(&tl);
        struct burst_tensor dkg = burst_heads(dk, hg.kv0, hg.nkv),
                            dvg = burst_heads(dv, hg.kv0, hg.nkv);
        if (st == BURST_OK)
            st = bwd_ring(&c, &b, seq, g, &tl, &qg, &kg, &vg, &dog, lse_g, &dkg, &dvg);
        if (b.blk.plan)
            burst_blocks_drain(&b.blk);
        burst_xfer_wait(plan, &b.ra);
        burst_xfer_wait(plan, &b.sa);
        if (st == BURST_OK) { /* the group's ring is done: only now touch its outputs */
            const size_t kvelems = (size_t)(c.B * n * c.Hkv * c.d);
            struct burst_tensor dqg = burst_heads(dq, hg.q0, hg.nq);
            struct burst_tensor gq = burst_view(b.dq_loc, BURST_DTYPE_FP32, c.B, n, c.Hq, c.d);
            st = c.ops->elem.copy(c.be, &dqg, &gq);
            if (st == BURST_OK && b.dkv_loc) { /* else bwd_final wrote dK and dV */
                struct burst_tensor gk =
                    burst_view(b.dkv_loc, BURST_DTYPE_FP32, c.B, n, c.Hkv, c.d);
                struct burst_tensor gv =
                    burst_view(b.dkv_loc + kvelems, BURST_DTYPE_FP32, c.B, n, c.Hkv, c.d);
                st = c.ops->elem.copy(c.be, &dkg, &gk);
                if (st == BURST_OK)
                    st = c.ops->elem.copy(c.be, &dvg, &gv);
            }
            /* the next group's work queues behind these copies: only the last one waits */
            if (st == BURST_OK && BURST_OPS_HAS(c.ops, stream.sync) && g == plan->hgroups - 1)
                st = c.ops->stream.sync(c.be);
        }
    }
    if (b.blk.plan)
        burst_blocks_drain(&b.blk);
    burst_xfer_wait(plan, &b.ra);
    burst_xfer_wait(plan, &b.sa);
    if (st == BURST_OK && s->with)
        memcpy(s->dsinks, s->sum, (size_t)plan->p.q_heads * sizeof(float));
    burst_tl_finish(&tl, st);
    return burst_call_end(plan, BURST_PHASE_BWD, &sc, t0, st);
}

burst_status_t burst_attention_backward(struct burst_plan *plan, const struct burst_tensor *q,
                                        const struct burst_tensor *k, const struct burst_tensor *v,
                                        const struct burst_tensor *o, const float *lse,
                                        const struct burst_tensor *dout, struct burst_tensor *dq,
                                        struct burst_tensor *dk, struct burst_tensor *dv)
{
    struct bwd_sinks none = {0};
    return bwd_call("burst_attention_backward", plan, q, k, v, o, lse, dout, dq, dk, dv, &none);
}

burst_status_t burst_attention_backward_sinks(
    struct burst_plan *plan, const struct burst_tensor *q, const struct burst_tensor *k,
    const struct burst_tensor *v, const struct burst_tensor *o, const float *lse,
    const struct burst_tensor *dout, const float *sinks, int64_t num_sinks, struct burst_tensor *dq,
    struct burst_tensor *dk, struct burst_tensor *dv, float *dsinks)
{
    struct bwd_sinks s = {1, sinks, num_sinks, dsinks, NULL, NULL};
    burst_status_t st =
        bwd_call("burst_attention_backward_sinks", plan, q, k, v, o, lse, dout, dq, dk, dv, &s);
    free(s.acc);
    free(s.sum);
    return st;
}
