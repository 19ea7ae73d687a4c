/*
 * runtime/plan_handshake.c - the cross-rank handshake of burst_plan_create: the record of the
 * fields every rank must agree on, what says whether blocks can travel device to device or be
 * shared between backends, and the exchange that compares them (BURST_ERR_PLAN_MISMATCH names rank
 * and field).
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

/* The fields ranks must agree on, in a fixed order, for the handshake. */
enum {
    F_RANKS,
    F_BATCH,
    F_SEQ,
    F_DOCS, /* a hash of the document lengths (0: one document), before the shards they move */
    F_MEASURE,
    F_WEIGHTS,
    F_SHARDS,
    F_HQ,
    F_HKV,
    F_D,
    F_DTYPE,
    F_SCALE,
    F_SOFTCAP, /* the cap's float bits */
    F_FP8,
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
    "ranks",
    "batch",
    "seq_len",
    "doc_lens",
    "measure_speed",
    "shard_weights",
    "shard_lens",
    "q_heads",
    "kv_heads",
    "head_dim",
    "dtype",
    "softmax_scale",
    "softcap",
    "fp8_forward",
    "causal",
    "window_left",
    "window_right",
    "layout",
    "bwd_pattern",
    "acc_wire",
    "deterministic",
    "ranks_per_node",
    "workspace_limit",
    "BURST_STAGE_CHUNK_BYTES",
    "BURST_SPEED_ROUNDS",
    "speed",
    "device_direct",
    "device_share",
    "device_uuid0",
    "device_uuid1",
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
    if (!BURST_OPS_HAS(ops, mem.device_memory) || !BURST_OPS_HAS(ops, devcopy) ||
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
    const struct burst_tp_devops *dc = BURST_OPS_HAS(ops, devcopy) ? ops->devcopy : NULL;
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
    const struct burst_tp_devops *dc = BURST_OPS_HAS(ops, devcopy) ? ops->devcopy : NULL;
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
    uint64_t dhash = 0; /* FNV-1a over the count and the lengths */
    if (p->doc_lens && p->num_docs > 1) {
        dhash = fnv1a(1469598103934665603ull, (uint64_t)p->num_docs);
        for (int64_t t = 0; t < p->num_docs; t++)
            dhash = fnv1a(dhash, (uint64_t)p->doc_lens[t]);
    }
    uint32_t cap_bits = 0; /* no cap (0 or -0) is 0 */
    if (p->softcap > 0.0f)
        memcpy(&cap_bits, &p->softcap, sizeof(cap_bits));
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
    rec[F_DOCS] = (int64_t)(dhash >> 1) | (dhash ? 1 : 0);
    rec[F_SOFTCAP] = cap_bits;
    rec[F_FP8] = p->fp8_forward != 0;
    rec[F_DIRECT] = direct_key(plan);
    unsigned char uuid[16] = {0};
    rec[F_SHARE] = share_key(plan, uuid);
    memcpy(&rec[F_UUID0], uuid, 8);
    memcpy(&rec[F_UUID1], uuid + 8, 8);
}

/* Exchange and compare the plans; with measure_speed, *speeds receives every rank's speed. */
burst_status_t burst_plan_handshake(struct burst_plan *plan, const struct burst_plan_params *p,
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
            if (all[r * F_COUNT + f] != mine[f] &&
                (f == F_WEIGHTS || f == F_SHARDS || f == F_DOCS)) {
                st = burst_error(BURST_ERR_PLAN_MISMATCH, /* hashes: their values say nothing */
                                 "%s: the plan of rank %d differs from this rank's (%d) in field "
                                 "%s (%s)",
                                 who, r, plan->rank, field_names[f],
                                 !all[r * F_COUNT + f] ? "unset there, set here"
                                 : !mine[f]            ? "set there, unset here"
                                                       : "the values differ");
                break;
            } else if (all[r * F_COUNT + f] != mine[f] && (f == F_SCALE || f == F_SOFTCAP)) {
                float there, here; /* float bits */
                uint32_t bt = (uint32_t)all[r * F_COUNT + f], bh = (uint32_t)mine[f];
                memcpy(&there, &bt, sizeof(there));
                memcpy(&here, &bh, sizeof(here));
                st = burst_error(BURST_ERR_PLAN_MISMATCH,
                                 "%s: the plan of rank %d differs from this rank's (%d) in field "
                                 "%s (%.9g there, %.9g here)",
                                 who, r, plan->rank, field_names[f], (double)there, (double)here);
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
