/*
 * runtime/plan.c - plan validation, the cross-rank handshake, pattern choice and statistics.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "fault.h"
#include "ring_xfer.h"
#include "plan_internal.h"
#include "speed.h"

struct burst_plan_params burst_plan_params_default(void)
{
    struct burst_plan_params p = {
        .api_version = BURST_API_VERSION,
        .batch = 1,
        .seq_len = 0,
        .shard_lens = NULL,
        .q_heads = 0,
        .kv_heads = 0,
        .head_dim = 0,
        .dtype = BURST_DTYPE_FP32,
        .softmax_scale = 0.0f,
        .causal = 0,
        .window_left = BURST_WINDOW_UNBOUNDED,
        .window_right = BURST_WINDOW_UNBOUNDED,
        .layout = BURST_LAYOUT_NATURAL,
        .bwd_pattern = BURST_BWD_BURST,
        .acc_wire = BURST_WIRE_FP32,
        .deterministic = 0,
        .ranks_per_node = 0,
        .shard_weights = NULL,
        .measure_speed = 0,
        .workspace_limit = 0,
    };
    return p;
}

/* The caller's params as this library's struct: fields newer than the caller's api_version
 * (a shorter struct) are not read and keep their defaults. */
static struct burst_plan_params params_copy(const struct burst_plan_params *in)
{
    struct burst_plan_params p = burst_plan_params_default();
    unsigned minor = in->api_version & 0xffffu;
    memcpy(&p, in,
           minor >= 3   ? sizeof(p)
           : minor == 2 ? offsetof(struct burst_plan_params, workspace_limit)
                        : offsetof(struct burst_plan_params, shard_weights));
    return p;
}

#define MAX_ELEMS ((int64_t)1 << 50) /* keeps every byte count far from overflow */

static burst_status_t validate(const char *who, const struct burst_plan_params *p)
{
    burst_status_t st = burst_check_api_version(who, p->api_version);
    if (st != BURST_OK)
        return st;
#define NEED(cond, code, ...)                                                                      \
    do {                                                                                           \
        if (!(cond))                                                                               \
            return burst_error(code, __VA_ARGS__);                                                 \
    } while (0)
    NEED(p->batch >= 1, BURST_ERR_INVALID_ARG, "%s: params->batch = %lld must be >= 1", who,
         (long long)p->batch);
    NEED(p->seq_len >= 1, BURST_ERR_INVALID_ARG, "%s: params->seq_len = %lld must be >= 1", who,
         (long long)p->seq_len);
    NEED(p->q_heads >= 1, BURST_ERR_INVALID_ARG, "%s: params->q_heads = %d must be >= 1", who,
         p->q_heads);
    NEED(p->kv_heads >= 1, BURST_ERR_INVALID_ARG, "%s: params->kv_heads = %d must be >= 1", who,
         p->kv_heads);
    NEED(p->q_heads % p->kv_heads == 0, BURST_ERR_INVALID_ARG,
         "%s: params->q_heads = %d is not a multiple of params->kv_heads = %d", who, p->q_heads,
         p->kv_heads);
    NEED(p->head_dim >= 1, BURST_ERR_INVALID_ARG, "%s: params->head_dim = %d must be >= 1", who,
         p->head_dim);
    NEED(p->head_dim % 8 == 0 && p->head_dim <= 256, BURST_ERR_UNSUPPORTED,
         "%s: params->head_dim = %d is unsupported (any multiple of 8 from 8 to 256)", who,
         p->head_dim);
    NEED(burst_dtype_size(p->dtype) != 0, BURST_ERR_INVALID_ARG,
         "%s: params->dtype = %d is not a burst_dtype_t", who, (int)p->dtype);
    NEED(isfinite(p->softmax_scale) && p->softmax_scale >= 0.0f, BURST_ERR_INVALID_ARG,
         "%s: params->softmax_scale = %g must be finite and > 0 (or 0 for 1/sqrt(head_dim))", who,
         (double)p->softmax_scale);
    NEED(p->window_left >= -1, BURST_ERR_INVALID_ARG,
         "%s: params->window_left = %lld must be >= 0 or BURST_WINDOW_UNBOUNDED", who,
         (long long)p->window_left);
    NEED(p->window_right >= -1, BURST_ERR_INVALID_ARG,
         "%s: params->window_right = %lld must be >= 0 or BURST_WINDOW_UNBOUNDED", who,
         (long long)p->window_right);
    NEED(p->layout == BURST_LAYOUT_NATURAL || p->layout == BURST_LAYOUT_ZIGZAG ||
             p->layout == BURST_LAYOUT_STRIPED,
         BURST_ERR_INVALID_ARG, "%s: params->layout = %d is not a burst_layout_t", who,
         (int)p->layout);
    NEED(p->bwd_pattern == BURST_BWD_BURST || p->bwd_pattern == BURST_BWD_RING ||
             p->bwd_pattern == BURST_BWD_AUTO,
         BURST_ERR_INVALID_ARG, "%s: params->bwd_pattern = %d is not a burst_bwd_pattern_t", who,
         (int)p->bwd_pattern);
    NEED(!(p->shard_lens && p->shard_weights), BURST_ERR_INVALID_ARG,
         "%s: params->shard_lens and params->shard_weights are both set (give one)", who);
    NEED(!(p->measure_speed && (p->shard_lens || p->shard_weights)), BURST_ERR_INVALID_ARG,
         "%s: params->measure_speed = %d with params->%s set (measured speeds size the shards: "
         "give one)",
         who, p->measure_speed, p->shard_lens ? "shard_lens" : "shard_weights");
    NEED(p->acc_wire == BURST_WIRE_FP32 || p->acc_wire == BURST_WIRE_INPUT, BURST_ERR_INVALID_ARG,
         "%s: params->acc_wire = %d is not a burst_wire_precision_t", who, (int)p->acc_wire);
    int64_t h = p->q_heads > p->kv_heads ? p->q_heads : p->kv_heads;
    NEED(p->seq_len <= MAX_ELEMS / p->batch / h / p->head_dim, BURST_ERR_TOO_LARGE,
         "%s: params->batch * seq_len * heads * head_dim = %lld * %lld * %lld * %d is too large",
         who, (long long)p->batch, (long long)p->seq_len, (long long)h, p->head_dim);
#undef NEED
    return BURST_OK;
}

uint64_t burst_plan_bwd_step_bytes(const struct burst_plan_params *p, burst_bwd_pattern_t pat,
                                   burst_dtype_t acc_dtype, int64_t n)
{
    uint64_t es = burst_dtype_size(p->dtype), as = burst_dtype_size(acc_dtype);
    uint64_t rows = (uint64_t)p->batch * (uint64_t)n, d = (uint64_t)p->head_dim;
    if (pat == BURST_BWD_RING) /* K, V in dtype; dK, dV accumulators */
        return rows * (uint64_t)p->kv_heads * d * (2 * es + 2 * as);
    /* Q, dO in dtype; dQ accumulator; lse and D in fp32 */
    return rows * (uint64_t)p->q_heads * (d * (2 * es + as) + 2 * 4);
}

/* The fields ranks must agree on, in a fixed order, for the handshake. */
enum {
    F_RANKS,
    F_BATCH,
    F_SEQ,
    F_MEASURE,
    F_WEIGHTS,
    F_SHARDS,
    F_HQ,
    F_HKV,
    F_D,
    F_DTYPE,
    F_SCALE,
    F_CAUSAL,
    F_WLEFT,
    F_WRIGHT,
    F_LAYOUT,
    F_BWD,
    F_WIRE,
    F_DET,
    F_LOCAL,
    F_WORK,
    F_CHUNK,
    F_ROUNDS, /* measure_speed: rounds of measurement (speed.h), else 0 */
    F_SPEED,  /* not compared: this rank's measured speed (double bits), or 0 */
    F_DIRECT, /* not compared: nonzero (a hash of the backend's name) when this rank can move its
                 blocks device to device (ring_xfer.h); the plan does when every rank can */
    F_SHARE,  /* not compared: nonzero (a hash of the device's UUID, roles in bits 0-1) when this
                 rank can share device memory with a rank of another backend (share_key) */
    F_UUID0,  /* not compared: with F_SHARE, the bytes of its device's UUID (0-7 and 8-15), for */
    F_UUID1,  /*   copiers on other devices to ask share_reach (share_reach_round) */
    F_COUNT
};
static const char *const field_names[F_COUNT] = {
    "ranks",          "batch",           "seq_len",
    "measure_speed",  "shard_weights",   "shard_lens",
    "q_heads",        "kv_heads",        "head_dim",
    "dtype",          "softmax_scale",   "causal",
    "window_left",    "window_right",    "layout",
    "bwd_pattern",    "acc_wire",        "deterministic",
    "ranks_per_node", "workspace_limit", "BURST_STAGE_CHUNK_BYTES",
    "BURST_SPEED_ROUNDS", "speed",       "device_direct",
    "device_share",   "device_uuid0",    "device_uuid1",
};

static uint64_t fnv1a(uint64_t hash, uint64_t x)
{
    return (hash ^ x) * 1099511628211ull;
}

/* Can this rank's blocks travel device to device? Its backend computes on device memory and
 * provides device copies (between processes: ipc_ ones too), the transport moves device memory
 * (to the peers of burst_comm_device_peer), and BURST_DEVICE_DIRECT is not 0 (the switch that
 * forces host staging, for comparison). */
static int64_t direct_key(const struct burst_plan *plan)
{
    const struct burst_backend_ops *ops = plan->ctx->ops;
    if (!ops->device_memory || ops->size < sizeof(*ops) || !ops->devcopy ||
        !burst_comm_moves_device(plan->comm) ||
        !burst_set_long(&plan->ctx->set, BURST_SET_DEVICE_DIRECT))
        return 0;
    if (!burst_comm_in_process(plan->comm) && !ops->devcopy->ipc_export)
        return 0;
    uint64_t hash = 1469598103934665603ull;
    for (const char *c = ops->name; *c; c++)
        hash = fnv1a(hash, (unsigned char)*c);
    return (int64_t)(hash >> 1) | 1;
}

/* Roles in a share key (transport.h, share_*): copies device memory and imports another
 * backend's; exports its own. */
#define SHARE_COPIER 1
#define SHARE_EXPORTER 2

/* Can this rank's blocks go device to device with a rank of another backend, on the same device
 * or on one that the copier reaches, one of them copying the other's memory (transport.h,
 * share_*)? Only between threads of one process, and not with BURST_DEVICE_DIRECT=0. 0, or a
 * hash of the device's UUID with the rank's roles in bits 0-1; uuid receives the UUID. */
static int64_t share_key(const struct burst_plan *plan, unsigned char uuid[16])
{
    const struct burst_backend_ops *ops = plan->ctx->ops;
    const struct burst_tp_devops *dc = ops->size >= sizeof(*ops) ? ops->devcopy : NULL;
    if (!dc || !dc->share_device || !burst_comm_in_process(plan->comm) ||
        !burst_set_long(&plan->ctx->set, BURST_SET_DEVICE_DIRECT))
        return 0;
    int64_t roles = (dc->copy && dc->share_import ? SHARE_COPIER : 0) |
                    (dc->share_export && dc->share_live ? SHARE_EXPORTER : 0);
    if (!roles || dc->share_device(plan->ctx->be, uuid) != BURST_OK)
        return 0;
    uint64_t hash = 1469598103934665603ull;
    for (int i = 0; i < 16; i++)
        hash = fnv1a(hash, uuid[i]);
    return (int64_t)((hash >> 1) & ~(uint64_t)3) | roles;
}

/* Do messages between ranks with share keys a and b go through shared memory on one device? The
 * same device, a copier on one side and an exporter on the other (both sides decide alike). */
static int share_pair(int64_t a, int64_t b)
{
    if (!a || !b || (a & ~(int64_t)3) != (b & ~(int64_t)3))
        return 0;
    return ((a & SHARE_COPIER) && (b & SHARE_EXPORTER)) ||
           ((a & SHARE_EXPORTER) && (b & SHARE_COPIER));
}

/* Is rank c a copier and rank x an exporter on another device (a pair for share_reach)? */
static int share_cross(const int64_t *all, int c, int x)
{
    int64_t a = all[c * F_COUNT + F_SHARE], b = all[x * F_COUNT + F_SHARE];
    return c != x && (a & SHARE_COPIER) && (b & SHARE_EXPORTER) &&
           (a & ~(int64_t)3) != (b & ~(int64_t)3);
}

/* The handshake's second round, where some copier and some exporter are on different devices
 * (every rank sees the same records, so all take part or none): each copier asks its backend's
 * share_reach for every such exporter's device, the verdicts are gathered, and plan->shared
 * gains the pairs whose copier said yes, alike on both sides. */
static burst_status_t share_reach_round(struct burst_plan *plan, uint32_t seq, const int64_t *all)
{
    const int g = plan->size, me = plan->rank;
    int any = 0;
    for (int c = 0; c < g && !any; c++)
        for (int x = 0; x < g && !any; x++)
            any = share_cross(all, c, x);
    if (!any)
        return BURST_OK;
    unsigned char *verdicts = calloc((size_t)g, (size_t)g + 1);
    if (!verdicts)
        return burst_error(BURST_ERR_NO_MEMORY, "burst_plan_create: out of memory");
    unsigned char *mine = verdicts + (size_t)g * (size_t)g; /* row me of verdicts: mine[x] */
    const struct burst_backend_ops *ops = plan->ctx->ops;
    const struct burst_tp_devops *dc = ops->size >= sizeof(*ops) ? ops->devcopy : NULL;
    for (int x = 0; x < g; x++)
        if (share_cross(all, me, x) && dc && dc->share_reach) {
            unsigned char uuid[16];
            memcpy(uuid, &all[x * F_COUNT + F_UUID0], 8);
            memcpy(uuid + 8, &all[x * F_COUNT + F_UUID1], 8);
            mine[x] = dc->share_reach(plan->ctx->be, uuid) == 1;
        }
    burst_status_t st = burst_comm_allgather(plan->comm, burst_tag(seq, BURST_MSG_HANDSHAKE, g),
                                             mine, verdicts, (size_t)g);
    for (int r = 0; st == BURST_OK && plan->shared && r < g; r++) {
        int yes = (share_cross(all, me, r) && verdicts[(size_t)me * g + r]) ||
                  (share_cross(all, r, me) && verdicts[(size_t)r * g + me]);
        plan->shared[r] |= (unsigned char)yes;
        plan->any_shared |= yes;
    }
    free(verdicts);
    return st;
}

static void encode(const struct burst_plan *plan, const struct burst_plan_params *p, double speed,
                   int64_t rec[F_COUNT])
{
    /* FNV-1a over the shard lengths (not known yet when measuring) and the weights' bits */
    uint64_t hash = 1469598103934665603ull, whash = 0;
    for (int i = 0; plan->shards.lens && i < plan->size; i++)
        hash = fnv1a(hash, (uint64_t)plan->shards.lens[i]);
    for (int i = 0; p->shard_weights && i < plan->size; i++) {
        uint64_t bits;
        memcpy(&bits, &p->shard_weights[i], sizeof(bits));
        whash = fnv1a(whash ? whash : 1469598103934665603ull, bits);
    }
    int64_t speed_bits;
    memcpy(&speed_bits, &speed, sizeof(speed_bits));
    uint32_t scale_bits;
    memcpy(&scale_bits, &plan->scale, sizeof(scale_bits));
    rec[F_RANKS] = plan->size;
    rec[F_BATCH] = p->batch;
    rec[F_SEQ] = p->seq_len;
    rec[F_SHARDS] = plan->shards.lens ? (int64_t)(hash >> 1) : 0;
    rec[F_MEASURE] = p->measure_speed != 0;
    rec[F_WEIGHTS] = (int64_t)(whash >> 1);
    rec[F_SPEED] = speed_bits;
    rec[F_HQ] = p->q_heads;
    rec[F_HKV] = p->kv_heads;
    rec[F_D] = p->head_dim;
    rec[F_DTYPE] = p->dtype;
    rec[F_SCALE] = scale_bits;
    rec[F_CAUSAL] = p->causal != 0;
    rec[F_WLEFT] = p->window_left;
    rec[F_WRIGHT] = p->window_right;
    rec[F_LAYOUT] = p->layout;
    rec[F_BWD] = p->bwd_pattern;
    rec[F_WIRE] = p->acc_wire;
    rec[F_DET] = p->deterministic != 0;
    rec[F_LOCAL] = plan->local;
    rec[F_WORK] = p->workspace_limit > INT64_MAX ? -1 : (int64_t)p->workspace_limit;
    rec[F_CHUNK] = (int64_t)plan->stage_chunk;
    rec[F_ROUNDS] = p->measure_speed ? burst_speed_rounds(plan->ctx) : 0;
    rec[F_DIRECT] = direct_key(plan);
    unsigned char uuid[16] = {0};
    rec[F_SHARE] = share_key(plan, uuid);
    memcpy(&rec[F_UUID0], uuid, 8);
    memcpy(&rec[F_UUID1], uuid + 8, 8);
}

/* Exchange and compare the plans; with measure_speed, *speeds receives every rank's speed. */
static burst_status_t handshake(struct burst_plan *plan, const struct burst_plan_params *p,
                                double speed, double *speeds)
{
    static const char *who = "burst_plan_create";
    int64_t mine[F_COUNT];
    encode(plan, p, speed, mine);
    int64_t *all = malloc(sizeof(mine) * (size_t)plan->size);
    if (!all)
        return burst_call_fail(plan, burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who));
    uint32_t seq;
    burst_status_t st = burst_call_begin(plan, BURST_PHASE_SETUP, &seq);
    if (st == BURST_OK)
        st = burst_comm_allgather(plan->comm, burst_tag(seq, BURST_MSG_HANDSHAKE, 0), mine, all,
                                  sizeof(mine));
    for (int r = 0; st == BURST_OK && r < plan->size; r++)
        for (int f = 0; f < F_SPEED; f++)
            if (all[r * F_COUNT + f] != mine[f] && (f == F_WEIGHTS || f == F_SHARDS)) {
                st = burst_error(BURST_ERR_PLAN_MISMATCH, /* hashes: their values say nothing */
                                 "%s: the plan of rank %d differs from this rank's (%d) in field "
                                 "%s (%s)",
                                 who, r, plan->rank, field_names[f],
                                 !all[r * F_COUNT + f] ? "unset there, set here"
                                 : !mine[f]            ? "set there, unset here"
                                                       : "the values differ");
                break;
            } else if (all[r * F_COUNT + f] != mine[f]) {
                st = burst_error(BURST_ERR_PLAN_MISMATCH,
                                 "%s: the plan of rank %d differs from this rank's (%d) in field "
                                 "%s (%lld there, %lld here)",
                                 who, r, plan->rank, field_names[f],
                                 (long long)all[r * F_COUNT + f], (long long)mine[f]);
                break;
            }
    for (int r = 0; st == BURST_OK && speeds && r < plan->size; r++)
        memcpy(&speeds[r], &all[r * F_COUNT + F_SPEED], sizeof(double));
    plan->direct = st == BURST_OK && mine[F_DIRECT] != 0;
    for (int r = 0; plan->direct && r < plan->size; r++)
        plan->direct = all[r * F_COUNT + F_DIRECT] == mine[F_DIRECT];
    if (st == BURST_OK && !plan->direct && mine[F_SHARE] &&
        !(plan->shared = calloc((size_t)plan->size, 1)))
        st = burst_call_fail(plan, burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who));
    for (int r = 0; st == BURST_OK && plan->shared && r < plan->size; r++) {
        plan->shared[r] = r != plan->rank && share_pair(mine[F_SHARE], all[r * F_COUNT + F_SHARE]);
        plan->any_shared |= plan->shared[r];
    }
    if (st == BURST_OK && !plan->direct && (st = share_reach_round(plan, seq, all)) != BURST_OK)
        st = burst_call_fail(plan, st);
    plan->staged = burst_xfer_staged(plan);
    free(all);
    plan->comm->count = NULL;
    return st;
}

/* Shards from explicit lengths, weights, or the layout's even split. */
static burst_status_t plan_shards(struct burst_plan *plan, const char *who,
                                  const struct burst_plan_params *p, const double *weights)
{
    const int64_t *lens = p->shard_lens;
    int64_t *wl = NULL;
    if (weights) {
        wl = malloc(sizeof(int64_t) * (size_t)plan->size);
        if (!wl)
            return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
        burst_status_t st =
            burst_shards_weighted_lens(who, p->layout, p->seq_len, plan->size, weights, wl);
        if (st != BURST_OK) {
            free(wl);
            return st;
        }
        lens = wl;
    }
    burst_status_t st =
        burst_shards_init(&plan->shards, who, p->layout, p->seq_len, plan->size, lens);
    free(wl);
    return st;
}

#define WORKSPACE_FLOOR ((uint64_t)1 << 30) /* the default limit's floor (plan.h) */

static uint64_t call_scratch(const struct burst_plan *plan, int64_t n, int64_t gkv)
{
    uint64_t f = burst_fwd_scratch_bytes(plan, n, gkv), b = burst_bwd_scratch_bytes(plan, n, gkv);
    return f > b ? f : b;
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
    burst_status_t st = burst_speed_measure_shard(plan->ctx, &plan->p, plan->n, plan->n_max,
                                                  plan->gkv, who, &mine);
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
        pcopy = params_copy(in);
        st = validate(who, params);
    }
    if (st == BURST_OK && (params->ranks_per_node < 0 || params->ranks_per_node > comm->size ||
                           (params->ranks_per_node > 0 && comm->size % params->ranks_per_node)))
        st = burst_error(BURST_ERR_INVALID_ARG,
                         "%s: params->ranks_per_node = %d must be 0 (flat ring) or divide the "
                         "ring size %d",
                         who, params->ranks_per_node, comm->size);
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
    plan->p = *params;
    plan->p.shard_lens = NULL;
    plan->p.shard_weights = NULL;
    plan->mask = burst_mask_make(params->causal, params->window_left, params->window_right);
    plan->scale = params->softmax_scale > 0.0f ? params->softmax_scale
                                               : 1.0f / sqrtf((float)params->head_dim);
    plan->local = params->ranks_per_node > 0 ? params->ranks_per_node : comm->size;
    plan->acc_dtype = params->acc_wire == BURST_WIRE_FP32 ? BURST_DTYPE_FP32 : params->dtype;
    plan->stage_chunk = burst_xfer_chunk_env(plan->ctx);
    plan->bwd = params->bwd_pattern;
    if (plan->bwd == BURST_BWD_AUTO) {
        uint64_t b = burst_plan_bwd_step_bytes(params, BURST_BWD_BURST, plan->acc_dtype, 1);
        uint64_t r = burst_plan_bwd_step_bytes(params, BURST_BWD_RING, plan->acc_dtype, 1);
        plan->bwd = r < b ? BURST_BWD_RING : BURST_BWD_BURST;
    }
    /* the shards are known before the handshake (which compares them), except when measured:
     * then they follow from the speeds the handshake gathers */
    double speed = 0.0;
    if (!params->measure_speed)
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
    st = handshake(plan, params, speed, params->measure_speed ? speeds : NULL);
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
    if (step < 0 || step > plan->steps)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: step = %d is not in 0..%d", who, step,
                           plan->steps);
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
    if (step < 0 || step > plan->steps)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: step = %d is not in 0..%d", who, step,
                           plan->steps);
    *compute_s_p = plan->step_time[phase][step].compute_s;
    *wait_s_p = plan->step_time[phase][step].wait_s;
    return BURST_OK;
}

/* ---- helpers shared by the ring engine ---- */

double burst_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

burst_status_t burst_call_begin(struct burst_plan *plan, burst_phase_t phase, uint32_t *seq_p)
{
    burst_status_t st = burst_comm_check(plan->comm);
    if (st != BURST_OK)
        return st;
    memset(&plan->stats[phase], 0, sizeof(plan->stats[phase]));
    memset(plan->step_traffic[phase], 0, sizeof(struct burst_traffic) * ((size_t)plan->steps + 1));
    memset(plan->step_time[phase], 0, sizeof(struct burst_step_time) * ((size_t)plan->steps + 1));
    plan->comm->count = &plan->step_traffic[phase][0];
    plan->xfer_sends = NULL; /* every transfer of the last call was waited */
    *seq_p = ++plan->comm->seq;
    if (phase == BURST_PHASE_FWD || phase == BURST_PHASE_BWD)
        burst_fault_call(plan->rank, phase == BURST_PHASE_BWD);
    return BURST_OK;
}

burst_status_t burst_call_fail(struct burst_plan *plan, burst_status_t st)
{
    if (st != BURST_ERR_COMM_FAILED)
        burst_comm_abort(plan->comm, st);
    plan->comm->count = NULL;
    return st;
}

void burst_call_compute(struct burst_plan *plan, burst_phase_t phase, int step, double seconds)
{
    plan->stats[phase].compute_s += seconds;
    plan->step_time[phase][step].compute_s += seconds;
}

void burst_call_wait(struct burst_plan *plan, burst_phase_t phase, int step, double seconds)
{
    plan->stats[phase].wait_s += seconds;
    plan->step_time[phase][step].wait_s += seconds;
}

burst_status_t burst_call_end(struct burst_plan *plan, burst_phase_t phase,
                              struct burst_scratch *sc, double t0, burst_status_t st)
{
    struct burst_phase_stats *stats = &plan->stats[phase];
    stats->scratch_bytes = sc->bytes;
    const struct burst_backend_ops *ops = plan->ctx->ops;
    if (st != BURST_OK && ops->sync) {
        /* a failed call may leave device work queued (the device step timeline and head groups
         * sync only at the end): let it finish before the scratch is handed back, keeping the
         * message of the failure */
        char msg[512];
        snprintf(msg, sizeof(msg), "%s", burst_last_error());
        (void)ops->sync(plan->ctx->be);
        burst_error(st, "%s", msg);
    }
    burst_scratch_free(sc);
    for (int r = 0; r <= plan->steps; r++) {
        const struct burst_traffic *t = &plan->step_traffic[phase][r];
        stats->traffic.bytes_sent += t->bytes_sent;
        stats->traffic.msgs_sent += t->msgs_sent;
        stats->traffic.bytes_recv += t->bytes_recv;
        stats->traffic.msgs_recv += t->msgs_recv;
    }
    double busy = stats->compute_s + stats->wait_s;
    stats->overlap = busy > 0.0 ? stats->compute_s / busy : 1.0;
    stats->total_s = burst_now() - t0;
    if (st != BURST_OK)
        return burst_call_fail(plan, st);
    plan->comm->count = NULL;
    return BURST_OK;
}

/* Scratch sizes are rounded up to 256 bytes: a reused buffer is zeroed as floats, and a buffer
 * kept for one size fits the near sizes of other calls. */
#define BURST_SCRATCH_ALIGN 256

void burst_scratch_trim(struct burst_plan *plan)
{
    const struct burst_context *ctx = plan->ctx;
    for (int i = 0; i < BURST_SCRATCH_BUFS; i++) {
        struct burst_kept *k = &plan->kept[i];
        if (k->ptr && !k->busy) {
            ctx->ops->free(ctx->be, k->ptr);
            k->ptr = NULL;
            k->size = 0;
        }
    }
}

burst_status_t burst_scratch_alloc(struct burst_scratch *s, const char *who, size_t bytes,
                                   void **ptr_p)
{
    struct burst_plan *plan = s->plan;
    const struct burst_context *ctx = plan->ctx;
    const size_t need =
        bytes ? (bytes + BURST_SCRATCH_ALIGN - 1) / BURST_SCRATCH_ALIGN * BURST_SCRATCH_ALIGN
              : BURST_SCRATCH_ALIGN;
    int best = -1, empty = -1;
    for (int i = 0; i < BURST_SCRATCH_BUFS; i++) {
        const struct burst_kept *k = &plan->kept[i];
        if (!k->busy && k->ptr && k->size >= need && (best < 0 || k->size < plan->kept[best].size))
            best = i;
    }
    if (best >= 0) { /* reuse, zeroed like a fresh allocation, before any transfer may land */
        struct burst_kept *k = &plan->kept[best];
        burst_status_t st = ctx->ops->fill(ctx->be, k->ptr, need / sizeof(float), 0.0f);
        /* a peer's transfer may write the buffer from outside this thread's queue of device
         * work, so the zeros must have landed first; one rank has no transfers, and its own
         * ops run in the order it queues them (backend.h), so it does not wait here */
        if (st == BURST_OK && ctx->ops->sync && plan->size > 1)
            st = ctx->ops->sync(ctx->be);
        if (st != BURST_OK)
            return st;
    } else {
        /* a new buffer: the idle ones are too small for this call, drop them first */
        burst_scratch_trim(plan);
        for (int i = 0; i < BURST_SCRATCH_BUFS && empty < 0; i++)
            if (!plan->kept[i].ptr)
                empty = i;
        if (empty < 0)
            return burst_error(BURST_ERR_INTERNAL, "%s: more than %d scratch buffers", who,
                               BURST_SCRATCH_BUFS);
        void *(*alloc)(void *, size_t) =
            ctx->ops->size >= sizeof(*ctx->ops) && ctx->ops->alloc_scratch ? ctx->ops->alloc_scratch
                                                                           : ctx->ops->alloc;
        void *p = burst_fault_alloc() ? NULL : alloc(ctx->be, need);
        if (!p)
            return burst_error(BURST_ERR_NO_MEMORY, "%s: cannot allocate %zu bytes of scratch", who,
                               bytes);
        plan->kept[empty].ptr = p;
        plan->kept[empty].size = need;
        best = empty;
    }
    plan->kept[best].busy = 1;
    s->slots[s->count++] = best;
    s->bytes += bytes;
    *ptr_p = plan->kept[best].ptr;
    return BURST_OK;
}

void burst_scratch_free(struct burst_scratch *s)
{
    for (int i = 0; i < s->count; i++)
        s->plan->kept[s->slots[i]].busy = 0;
    s->count = 0;
}

struct burst_tensor burst_view(void *data, burst_dtype_t dtype, int64_t b, int64_t n, int64_t h,
                               int64_t d)
{
    return burst_tensor_contiguous(data, dtype, b, n, h, d);
}

struct burst_tensor burst_heads(const struct burst_tensor *t, int64_t h0, int64_t h)
{
    struct burst_tensor v = *t;
    v.data = (unsigned char *)t->data + (size_t)(h0 * t->stride[2]) * burst_dtype_size(t->dtype);
    v.shape[2] = h;
    return v;
}

struct burst_hgroup burst_plan_hgroup(const struct burst_plan *plan, int g)
{
    const int64_t rep = plan->p.q_heads / plan->p.kv_heads, kv0 = g * plan->gkv;
    const int64_t nkv = plan->p.kv_heads - kv0 < plan->gkv ? plan->p.kv_heads - kv0 : plan->gkv;
    return (struct burst_hgroup){.kv0 = kv0, .nkv = nkv, .q0 = kv0 * rep, .nq = nkv * rep};
}

uint32_t burst_call_next_seq(struct burst_plan *plan)
{
    return ++plan->comm->seq;
}
