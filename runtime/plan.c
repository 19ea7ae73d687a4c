/*
 * runtime/plan.c - burst_plan_create / destroy: shards, head groups, the measured speeds, and the
 * plan's getters and statistics. Parameters: plan_params.c; handshake: plan_handshake.c; call
 * bracket: plan_calls.c; scratch: plan_scratch.c.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "balance.h"
#include "error.h"
#include "fault.h"
#include "logger.h"
#include "ring_xfer.h"
#include "plan_internal.h"
#include "speed.h"

/* Shards from explicit lengths, weights, the work-balanced zigzag of documents, or the layout's
 * even split (balance.h). */
static burst_status_t plan_shards(struct burst_plan *plan, const char *who,
                                  const struct burst_plan_params *p, const double *weights)
{
    return burst_plan_shards_for(&plan->shards, who, p, plan->mask, plan->size, weights);
}

#define WORKSPACE_FLOOR ((uint64_t)1 << 30) /* the default limit's floor (plan.h) */

static uint64_t call_scratch(const struct burst_plan *plan, int64_t n, int64_t gkv)
{
    uint64_t f = burst_fwd_scratch_bytes(plan, n, gkv), b = burst_bwd_scratch_bytes(plan, n, gkv);
    return f > b || plan->p.fp8_forward ? f : b; /* an fp8 plan runs no backward */
}

/* Head groups within params.workspace_limit: the fewest groups whose calls' scratch fits, or
 * one K/V head per group when none does. Depends only on values every rank agreed on. */
static void plan_groups(struct burst_plan *plan)
{
    const struct burst_plan_params *p = &plan->p;
    uint64_t limit = p->workspace_limit;
    if (limit == 0) {
        /* the rank's footprint within 1.2x of a classic ring's: its eight tensors (Q, O, dO, dQ
         * over the query heads; K, V, dK, dV over the K/V heads) plus two of the largest
         * travelling blocks (K/V, or the query bundle) */
        const uint64_t rows = (uint64_t)(p->batch * plan->n_max), es = burst_dtype_size(p->dtype);
        const uint64_t d = (uint64_t)p->head_dim;
        const uint64_t kv = 2 * rows * (uint64_t)p->kv_heads * d * es;
        const uint64_t bundle = rows * (uint64_t)p->q_heads * (2 * d * es + 8);
        const uint64_t blocks = 2 * (plan->bwd == BURST_BWD_BURST && bundle > kv ? bundle : kv);
        const uint64_t tensors = 4 * rows * (uint64_t)(p->q_heads + p->kv_heads) * d * es;
        limit = blocks + (blocks + tensors) / 5;
        limit = limit > WORKSPACE_FLOOR ? limit : WORKSPACE_FLOOR;
    }
    int64_t gkv = p->kv_heads;
    for (int64_t groups = 1; groups <= p->kv_heads; groups++) {
        gkv = (p->kv_heads + groups - 1) / groups;
        if (call_scratch(plan, plan->n_max, gkv) <= limit) /* n_max: alike on every rank */
            break;
    }
    plan->gkv = gkv;
    plan->hgroups = (int)((p->kv_heads + gkv - 1) / gkv);
    plan->workspace = call_scratch(plan, plan->n, gkv);
}

/* With documents and a ring: the rows of each block that travel (burst_plan_span). */
static burst_status_t plan_spans(struct burst_plan *plan, const char *who)
{
    free(plan->span);
    plan->span = NULL;
    if (!plan->mask.docs || plan->mask.ndocs <= 1 || plan->size < 2)
        return BURST_OK;
    plan->span = malloc(4 * (size_t)plan->size * sizeof(int64_t));
    if (!plan->span)
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    const struct burst_mask keys = burst_mask_swap(plan->mask);
    for (int j = 0; j < plan->size; j++) {
        int64_t *sp = plan->span + 4 * (size_t)j;
        burst_block_span(&plan->shards, keys, j, &sp[0], &sp[1]);
        burst_block_span(&plan->shards, plan->mask, j, &sp[2], &sp[3]);
    }
    return BURST_OK;
}

void burst_plan_span(const struct burst_plan *plan, int queries, int block, int64_t *lo,
                     int64_t *hi)
{
    if (!plan->span) {
        *lo = 0;
        *hi = plan->shards.lens[block];
        return;
    }
    *lo = plan->span[4 * (size_t)block + (queries ? 2 : 0)];
    *hi = plan->span[4 * (size_t)block + (queries ? 3 : 1)];
}

/* Everything that follows from the shards: positions, step count, head groups, traffic/time
 * slots. */
static burst_status_t plan_derive(struct burst_plan *plan, const char *who)
{
    const int had = plan->step_traffic[0] ? plan->steps + 1 : 0; /* slots kept (setup) */
    plan->steps = 0; /* measured shards not known yet: the handshake's slot only */
    if (plan->shards.lens) {
        plan->pos = burst_shards_posmap(&plan->shards, plan->rank);
        plan->n = plan->shards.lens[plan->rank];
        plan->n_max = 0; /* of these shards (measured ones are sized twice) */
        for (int r = 0; r < plan->size; r++)
            if (plan->shards.lens[r] > plan->n_max)
                plan->n_max = plan->shards.lens[r];
        plan->steps = burst_ring_steps2(&plan->shards, plan->mask, plan->local);
        if (plan_spans(plan, who) != BURST_OK)
            return BURST_ERR_NO_MEMORY;
        plan_groups(plan);
    }
    for (int ph = 0; ph < 3; ph++) {
        size_t slots = (size_t)plan->steps + 1;
        void *t = realloc(plan->step_traffic[ph], slots * sizeof(struct burst_traffic));
        if (t)
            plan->step_traffic[ph] = t;
        void *w = realloc(plan->step_time[ph], slots * sizeof(struct burst_step_time));
        if (w)
            plan->step_time[ph] = w;
        if (!t || !w)
            return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
        /* the setup phase keeps the handshake's counts; new slots start at zero */
        size_t keep = ph != BURST_PHASE_SETUP ? 0 : (size_t)had < slots ? (size_t)had : slots;
        memset(plan->step_traffic[ph] + keep, 0, (slots - keep) * sizeof(struct burst_traffic));
        memset(plan->step_time[ph] + keep, 0, (slots - keep) * sizeof(struct burst_step_time));
    }
    return BURST_OK;
}

/* Shards by measured speeds (as weights relative to the fastest rank: a GPU's rate, ~1e12 rows
 * x keys x heads per second, may exceed the largest weight accepted from callers), then
 * everything that follows from them. The same on every rank. */
static burst_status_t measured_shards(struct burst_plan *plan, const char *who,
                                      const struct burst_plan_params *params, const double *sp)
{
    double *weights = plan->speeds + 2 * (size_t)plan->size, top = 0.0;
    burst_shards_fini(&plan->shards); /* round 1's, when round 2 sizes them again */
    for (int r = 0; r < plan->size; r++)
        top = sp[r] > top ? sp[r] : top;
    for (int r = 0; r < plan->size; r++)
        weights[r] = top > 0.0 ? sp[r] / top : 1.0;
    burst_status_t st = plan_shards(plan, who, params, weights);
    return st == BURST_OK ? plan_derive(plan, who) : st;
}

/* Round 2 of measure_speed (speed.h): this rank times steps of its round-1 shard's rows and one
 * head group against keys up to the largest shard, and the ranks exchange the rates into
 * plan->shard_speeds. A local failure aborts the communicator, so no peer waits for it. */
static burst_status_t speed_round2(struct burst_plan *plan, const char *who)
{
    double mine = 0.0;
    burst_status_t st =
        burst_speed_measure_shard(plan->ctx, &plan->p, plan->n, plan->n_max, plan->gkv, who, &mine);
    if (st != BURST_OK) /* the caller aborts the communicator */
        return st;
    if ((st = burst_comm_check(plan->comm)) != BURST_OK)
        return st;
    /* a collective of its own (the next sequence number); its bytes count to the setup phase
     * after the handshake's */
    const uint32_t seq = ++plan->comm->seq;
    plan->comm->count = &plan->step_traffic[BURST_PHASE_SETUP][0];
    st = burst_comm_allgather(plan->comm, burst_tag(seq, BURST_MSG_HANDSHAKE, 0), &mine,
                              plan->shard_speeds, sizeof(double));
    plan->comm->count = NULL;
    for (int r = 0; st == BURST_OK && r < plan->size; r++)
        if (!(plan->shard_speeds[r] > 0.0)) /* a rank whose step took no time at all */
            plan->shard_speeds[r] = plan->speeds[r];
    return st;
}

static burst_status_t check_ranks_per_node(const char *who, const struct burst_plan_params *p,
                                           int size)
{
    if (p->ranks_per_node < 0 || p->ranks_per_node > size ||
        (p->ranks_per_node > 0 && size % p->ranks_per_node))
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: params->ranks_per_node = %d must be 0 (flat ring) or divide the "
                           "ring size %d",
                           who, p->ranks_per_node, size);
    return BURST_OK;
}

/* What follows from the validated parameters alone (plan->rank and size set): fails only for
 * memory (the document table). */
static burst_status_t plan_setup(struct burst_plan *plan, const char *who,
                                 const struct burst_plan_params *params)
{
    plan->p = *params;
    plan->p.shard_lens = NULL;
    plan->p.shard_weights = NULL;
    plan->p.doc_lens = NULL; /* the caller's; the plan's table is plan->docs (and plan->mask) */
    plan->p.num_docs = 0;
    burst_status_t st = burst_docs_table(who, params, &plan->docs);
    plan->mask = burst_params_mask(params, plan->docs);
    plan->scale = params->softmax_scale > 0.0f ? params->softmax_scale
                                               : 1.0f / sqrtf((float)params->head_dim);
    plan->local = params->ranks_per_node > 0 ? params->ranks_per_node : plan->size;
    plan->acc_dtype = params->acc_wire == BURST_WIRE_FP32 ? BURST_DTYPE_FP32 : params->dtype;
    plan->bwd = params->bwd_pattern;
    if (plan->bwd == BURST_BWD_AUTO) {
        uint64_t b = burst_plan_bwd_step_bytes(params, BURST_BWD_BURST, plan->acc_dtype, 1);
        uint64_t r = burst_plan_bwd_step_bytes(params, BURST_BWD_RING, plan->acc_dtype, 1);
        plan->bwd = r < b ? BURST_BWD_RING : BURST_BWD_BURST;
    }
    return st;
}

/* A backend that computes on device memory reads the document table there: a copy for the
 * plan's lifetime (plan->docs_dev, in plan->mask). */
static burst_status_t plan_docs_device(struct burst_plan *plan, const char *who)
{
    const struct burst_backend_ops *ops = plan->ctx->ops;
    if (!plan->docs || !ops->mem.device_memory)
        return BURST_OK;
    const size_t bytes = (size_t)(plan->mask.ndocs + 1) * sizeof(int64_t);
    plan->docs_dev = ops->mem.alloc(plan->ctx->be, bytes);
    if (!plan->docs_dev)
        return burst_error(BURST_ERR_NO_MEMORY,
                           "%s: out of device memory for the table of %lld documents", who,
                           (long long)plan->mask.ndocs);
    burst_status_t st = ops->mem.memcpy(plan->ctx->be, plan->docs_dev, plan->docs, bytes);
    plan->mask.docs_dev = plan->docs_dev;
    return st;
}

burst_status_t burst_plan_workspace_estimate(const struct burst_plan_params *in, int size,
                                             uint64_t *bytes)
{
    static const char *who = "burst_plan_workspace_estimate";
    burst_error_clear();
    if (!in)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: params is NULL", who);
    if (!bytes)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: bytes is NULL", who);
    if (size < 1 || size > 65536) /* the largest ring a world or launcher makes */
        return burst_error(BURST_ERR_INVALID_ARG, "%s: size = %d is not in 1..65536", who, size);
    burst_status_t st = burst_check_api_version(who, in->api_version);
    if (st != BURST_OK)
        return st;
    struct burst_plan_params params = burst_plan_params_copy(in);
    if ((st = burst_plan_params_validate(who, &params)) != BURST_OK ||
        (st = check_ranks_per_node(who, &params, size)) != BURST_OK)
        return st;
    struct burst_plan *plan = calloc(1, sizeof(*plan));
    if (!plan)
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    plan->size = size;
    st = plan_setup(plan, who, &params);
    /* measured shards are not known before measuring: the even split's */
    if (st == BURST_OK)
        st = plan_shards(plan, who, &params, params.measure_speed ? NULL : params.shard_weights);
    if (st == BURST_OK)
        st = plan_derive(plan, who); /* rank 0's; the groups and steps are every rank's */
    for (int r = 0; st == BURST_OK && r < size; r++)
        bytes[r] = call_scratch(plan, plan->shards.lens[r], plan->gkv);
    burst_plan_destroy(plan);
    return st;
}

/* The plan's features that this rank's backend must handle (BURST_BE_*). */
static burst_status_t check_backend_features(const char *who, const struct burst_plan_params *p,
                                             const struct burst_backend_ops *ops, void *be)
{
    if (p->doc_lens && p->num_docs > 1 && !(ops->core.features & BURST_BE_DOCS))
        return burst_error(BURST_ERR_UNSUPPORTED,
                           "%s: params->num_docs = %lld: backend %s does not run documents", who,
                           (long long)p->num_docs, ops->name);
    if (p->softcap > 0.0f && !(ops->core.features & BURST_BE_SOFTCAP))
        return burst_error(BURST_ERR_UNSUPPORTED,
                           "%s: params->softcap = %g: backend %s does not run soft-capping", who,
                           (double)p->softcap, ops->name);
    if (p->fp8_forward && !(burst_backend_features(ops, be) & BURST_BE_FP8))
        return burst_error(BURST_ERR_UNSUPPORTED,
                           "%s: params->fp8_forward = %d: backend %s has no fp8 (e4m3) products "
                           "on this device",
                           who, p->fp8_forward, ops->name);
    return BURST_OK;
}

burst_status_t burst_plan_create(struct burst_context *ctx, struct burst_comm *comm,
                                 const struct burst_plan_params *in, struct burst_plan **plan_p)
{
    static const char *who = "burst_plan_create";
    burst_error_clear();
    if (!comm)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: comm is NULL", who);
    burst_status_t st = BURST_OK;
    struct burst_plan_params pcopy, *params = &pcopy;
    if (!ctx)
        st = burst_error(BURST_ERR_INVALID_ARG, "%s: ctx is NULL", who);
    else if (!in)
        st = burst_error(BURST_ERR_INVALID_ARG, "%s: params is NULL", who);
    else if (!plan_p)
        st = burst_error(BURST_ERR_INVALID_ARG, "%s: plan_p is NULL", who);
    else if ((st = burst_comm_check(comm)) == BURST_OK)
        st = burst_check_api_version(who, in->api_version); /* before anything newer is read */
    if (st == BURST_OK) {
        pcopy = burst_plan_params_copy(in);
        st = burst_plan_params_validate(who, params);
    }
    if (st == BURST_OK)
        st = check_ranks_per_node(who, params, comm->size);
    if (st == BURST_OK)
        st = check_backend_features(who, params, ctx->ops, ctx->be);
    if (st != BURST_OK) {
        if (st != BURST_ERR_COMM_FAILED)
            burst_comm_abort(comm, st); /* peers in the handshake must not wait for us */
        return st;
    }

    struct burst_plan *plan = calloc(1, sizeof(*plan));
    double *speeds = calloc(3 * (size_t)comm->size, sizeof(double)); /* round 1, 2, weights */
    if (!plan || !speeds) {
        free(plan);
        free(speeds);
        burst_comm_abort(comm, BURST_ERR_NO_MEMORY);
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    }
    plan->ctx = ctx;
    plan->comm = comm;
    plan->rank = comm->rank;
    plan->size = comm->size;
    plan->speeds = speeds;
    plan->shard_speeds = speeds + comm->size;
    st = plan_setup(plan, who, params);
    if (st == BURST_OK)
        st = plan_docs_device(plan, who);
    plan->stage_chunk = burst_xfer_chunk_env(plan->ctx);
    /* the shards are known before the handshake (which compares them), except when measured:
     * then they follow from the speeds the handshake gathers */
    double speed = 0.0;
    if (st != BURST_OK)
        ; /* out of memory for the document table */
    else if (!params->measure_speed)
        st = plan_shards(plan, who, params, params->shard_weights);
    else
        st = burst_speed_measure(ctx, params, burst_comm_size(comm), who, &speed);
    if (st == BURST_OK)
        st = plan_derive(plan, who); /* slot 0 of the setup phase for the handshake */
    if (st != BURST_OK) {
        burst_plan_destroy(plan);
        burst_comm_abort(comm, st);
        return st;
    }
    st = burst_plan_handshake(plan, params, speed, params->measure_speed ? speeds : NULL);
    if (st == BURST_OK && params->measure_speed) {
        /* round 2 (speed.h): each rank's rate on the shard round 1 gave it, which sizes the
         * final shards; the handshake made sure every rank runs it or none */
        const int round2 = plan->size > 1 && burst_speed_rounds(plan->ctx) == 2;
        st = measured_shards(plan, who, params, speeds);
        if (!round2)
            memcpy(plan->shard_speeds, speeds, sizeof(double) * (size_t)plan->size);
        if (st == BURST_OK && round2 && (st = speed_round2(plan, who)) == BURST_OK)
            st = measured_shards(plan, who, params, plan->shard_speeds);
        if (st != BURST_OK && st != BURST_ERR_COMM_FAILED) /* alike on every rank, or local */
            burst_comm_abort(comm, st);
    }
    if (st != BURST_OK) {
        burst_plan_destroy(plan);
        return st;
    }
    *plan_p = plan;
    burst_log(BURST_LOG_DEBUG, BURST_SUB_RUNTIME, plan->rank,
              "plan: rank %d of %d, %lld of %lld tokens, %d head group(s), transfers %s, "
              "workspace %llu bytes",
              plan->rank, plan->size, (long long)plan->shards.lens[plan->rank],
              (long long)plan->shards.seq_len, plan->hgroups, burst_plan_transfers(plan),
              (unsigned long long)plan->workspace);
    return BURST_OK;
}

void burst_plan_destroy(struct burst_plan *plan)
{
    if (!plan)
        return;
    for (int ph = 0; ph < 3; ph++) {
        free(plan->step_traffic[ph]);
        free(plan->step_time[ph]);
    }
    burst_scratch_trim(plan);
    burst_xfer_pool_free(plan);
    burst_shards_fini(&plan->shards);
    free(plan->docs);
    if (plan->docs_dev)
        plan->ctx->ops->mem.free(plan->ctx->be, plan->docs_dev);
    free(plan->span);
    free(plan->speeds);
    free(plan->shared);
    free(plan);
}

void burst_plan_trim(struct burst_plan *plan)
{
    if (!plan)
        return;
    burst_scratch_trim(plan);
    burst_xfer_pool_free(plan);
}

int64_t burst_plan_local_len(const struct burst_plan *plan)
{
    return plan ? plan->n : 0;
}

int64_t burst_plan_shard_len(const struct burst_plan *plan, int rank)
{
    return plan && rank >= 0 && rank < plan->size ? plan->shards.lens[rank] : -1;
}

double burst_plan_rank_speed(const struct burst_plan *plan, int rank)
{
    return plan && rank >= 0 && rank < plan->size ? plan->speeds[rank] : 0.0;
}

double burst_plan_shard_speed(const struct burst_plan *plan, int rank)
{
    return plan && rank >= 0 && rank < plan->size ? plan->shard_speeds[rank] : 0.0;
}

int64_t burst_plan_position(const struct burst_plan *plan, int64_t local)
{
    if (!plan || local < 0 || local >= plan->n)
        return -1;
    return burst_posmap_pos(&plan->pos, local);
}

burst_bwd_pattern_t burst_plan_bwd_pattern(const struct burst_plan *plan)
{
    return plan ? plan->bwd : BURST_BWD_BURST;
}

int burst_plan_head_groups(const struct burst_plan *plan)
{
    return plan ? plan->hgroups : 0;
}

uint64_t burst_plan_workspace_bytes(const struct burst_plan *plan)
{
    return plan ? plan->workspace : 0;
}

static burst_status_t check_phase(const char *who, const struct burst_plan *plan,
                                  burst_phase_t phase, const void *out, const char *out_name)
{
    burst_error_clear();
    if (!plan)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: plan is NULL", who);
    if (phase != BURST_PHASE_SETUP && phase != BURST_PHASE_FWD && phase != BURST_PHASE_BWD)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: phase = %d is not a burst_phase_t", who,
                           (int)phase);
    if (!out)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: %s is NULL", who, out_name);
    return BURST_OK;
}

static burst_status_t check_step(const char *who, const struct burst_plan *plan, int step)
{
    if (step < 0 || step > plan->steps)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: step = %d is not in 0..%d", who, step,
                           plan->steps);
    return BURST_OK;
}

const char *burst_plan_transfers(const struct burst_plan *plan)
{
    if (!plan)
        return "";
    const int dev = plan->direct || plan->any_shared;
    return dev && plan->staged ? "device+staged"
           : dev               ? "device"
           : plan->staged      ? "staged"
                               : "host";
}

burst_status_t burst_plan_stats(const struct burst_plan *plan, burst_phase_t phase,
                                struct burst_phase_stats *stats_p)
{
    burst_status_t st = check_phase("burst_plan_stats", plan, phase, stats_p, "stats_p");
    if (st == BURST_OK)
        *stats_p = plan->stats[phase];
    return st;
}

burst_status_t burst_plan_step_traffic(const struct burst_plan *plan, burst_phase_t phase, int step,
                                       struct burst_traffic *traffic_p)
{
    static const char *who = "burst_plan_step_traffic";
    burst_status_t st = check_phase(who, plan, phase, traffic_p, "traffic_p");
    if (st != BURST_OK)
        return st;
    if ((st = check_step(who, plan, step)) != BURST_OK)
        return st;
    *traffic_p = plan->step_traffic[phase][step];
    return BURST_OK;
}

burst_status_t burst_plan_step_times(const struct burst_plan *plan, burst_phase_t phase, int step,
                                     double *compute_s_p, double *wait_s_p)
{
    static const char *who = "burst_plan_step_times";
    burst_status_t st = check_phase(who, plan, phase, compute_s_p, "compute_s_p");
    if (st == BURST_OK && !wait_s_p)
        st = burst_error(BURST_ERR_INVALID_ARG, "%s: wait_s_p is NULL", who);
    if (st != BURST_OK)
        return st;
    if ((st = check_step(who, plan, step)) != BURST_OK)
        return st;
    *compute_s_p = plan->step_time[phase][step].compute_s;
    *wait_s_p = plan->step_time[phase][step].wait_s;
    return BURST_OK;
}
