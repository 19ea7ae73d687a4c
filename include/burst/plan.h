/*
 * burst/plan.h - the attention plan and the distributed forward / backward calls.
 *
 * What is computed (docs/ALGORITHM.md in the source tree): exact softmax attention of the whole sequence of N
 * tokens, sharded over the G ranks of a communicator. Each rank passes its local shard of Q, K,
 * V ([B, n_i, H, d]); K/V blocks travel around the ring (forward), and in the backward either
 * the query bundle (pattern "burst") or K/V with their gradients (pattern "ring") travel.
 *
 * Masks are defined on GLOBAL token positions. Query at position i may attend key j iff
 *     i - window_left <= j <= i + window_right      (a bound of -1 means unbounded)
 * and, when causal, j <= i. With window_left = window_right = -1 and causal = 0 the attention is
 * full. The positions of a rank's local rows follow from the layout (see burst/layout.h).
 *
 * Thread-safety: a plan belongs to one rank; its calls must not run concurrently with each other
 * but plans of different ranks (threads) run concurrently. Every call documented as collective
 * must be entered by all ranks of the communicator with equal plans.
 */
#ifndef BURST_PLAN_H
#define BURST_PLAN_H

#include "burst/export.h"

#include <stdint.h>

#include "burst/context.h"
#include "burst/comm.h"
#include "burst/status.h"
#include "burst/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct burst_plan;

typedef enum burst_layout {
    BURST_LAYOUT_NATURAL = 0, /* rank i holds one contiguous shard, in rank order */
    BURST_LAYOUT_ZIGZAG = 1,  /* 2G chunks; rank i holds chunks i and 2G-1-i (causal balance) */
    BURST_LAYOUT_STRIPED = 2, /* token t lives on rank t mod G */
} burst_layout_t;

typedef enum burst_bwd_pattern {
    BURST_BWD_BURST = 0, /* query bundle travels; K, V, dK, dV stay home (default) */
    BURST_BWD_RING = 1,  /* K, V travel with the dK, dV accumulators */
    BURST_BWD_AUTO = 2,  /* whichever sends fewer bytes (burst on a tie) */
} burst_bwd_pattern_t;

typedef enum burst_wire_precision {
    BURST_WIRE_FP32 = 0,  /* travelling gradient accumulators are fp32 on the wire (default) */
    BURST_WIRE_INPUT = 1, /* ... in the input dtype (fewer bytes, rounding at every hop) */
} burst_wire_precision_t;

#define BURST_WINDOW_UNBOUNDED (-1)

struct burst_plan_params {
    unsigned api_version; /* BURST_API_VERSION */
    int64_t batch;        /* B >= 1 */
    int64_t seq_len;      /* N, global tokens over all ranks */
    /* Optional: G shard lengths summing to seq_len (>= 1 each; >= 2 for zigzag), in any layout
     * (burst/layout.h says how each layout spreads uneven shards). NULL = as even as possible
     * (the first N mod G ranks get one extra token). Copied. Excludes shard_weights. */
    const int64_t *shard_lens;
    int q_heads;           /* Hq >= 1 */
    int kv_heads;          /* Hkv >= 1, Hq % Hkv == 0 (GQA / MQA) */
    int head_dim;          /* d: a multiple of 8, 8..256 */
    burst_dtype_t dtype;   /* of Q, K, V, O, dO, dQ, dK, dV */
    float softmax_scale;   /* tau; 0 = 1/sqrt(d) */
    int causal;            /* nonzero: causal mask on global positions */
    int64_t window_left;   /* >= 0, or BURST_WINDOW_UNBOUNDED */
    int64_t window_right;  /* >= 0, or BURST_WINDOW_UNBOUNDED */
    burst_layout_t layout; /* how tokens are spread over ranks */
    burst_bwd_pattern_t bwd_pattern;
    burst_wire_precision_t acc_wire; /* precision of travelling gradient accumulators */
    /* nonzero: bitwise-identical reruns (no float atomics on any backend); zero (default) lets
     * a backend trade that for speed: the cuda backend on Hopper then adds dQ with float
     * atomics, so reruns may differ in the last bits of dQ */
    int deterministic;
    /* Two-level ring (ALGORITHM.md section 4): ranks per node L, dividing the ring size; the
     * ranks of a node are consecutive. Blocks hop over each node's local ring and, once per L
     * steps, to the same local index on the next node, overlapped with the L local steps.
     * 0 = a flat ring (same as L = ring size). Results equal the flat ring's up to rounding
     * (blocks merge in another order). */
    int ranks_per_node;

    /* ---- since API 0.2: read only when api_version's minor is >= 2, so callers built against
     * 0.1 headers (a shorter struct) keep working; burst_plan_params_default sets them. ---- */

    /* Optional: G positive weights, e.g. the ranks' speeds. Rank i gets a shard proportional to
     * weights[i], rounded by the rule of burst_layout_weighted_lens (deterministic, >= 1 token,
     * >= 2 for zigzag). Ranks must pass equal weights (the handshake compares them: field
     * "shard_weights"). NULL = no weights. Copied. Excludes shard_lens and measure_speed. */
    const double *shard_weights;
    /* Nonzero: weights measured now. Each rank times short local attention steps of this
     * plan's heads, head dim and dtype on its own context (a few milliseconds to a fraction of
     * a second on a CPU), the ranks exchange the rates, and shards follow them as with
     * shard_weights. Two rounds: the rank's rate at full load (burst_plan_rank_speed), then
     * its rate on the shard that gave it, with the rows and heads a call of the ring will
     * run, which sizes the final shards (burst_plan_shard_speed): a GPU given few rows may
     * fill its last wave of workgroups poorly, and round 2 sees that. The environment
     * variable BURST_SPEED_ROUNDS=1 keeps round 1's shards (every rank must agree). Every
     * rank must ask for it. Results do not depend on the shard sizes beyond rounding; the
     * sizes may differ from run to run. burst_plan_shard_len tells them. */
    int measure_speed;

    /* ---- since API 0.3: read only when api_version's minor is >= 3 ---- */

    /* Most bytes of backend memory a forward or backward call may take for its own scratch on
     * this rank: the fp32 accumulators (O, dQ, dK, dV and the travelling gradient partials) and
     * the buffers of travelling blocks; the caller's tensors are not counted. The plan meets it
     * by running the ring once per group of heads (K/V heads with their query heads): each
     * group's ring moves and accumulates only that group's heads, so scratch shrinks with the
     * group size while the bytes on the wire stay the same (each message is smaller, and there
     * are as many times more as there are groups). Heads never mix, so results are those of one
     * group (bitwise with `deterministic`; tests/test_groups.c). A limit below what one K/V head
     * per group needs gives kv_heads groups (the least scratch there is);
     * burst_plan_head_groups and burst_plan_workspace_bytes tell the outcome.
     *   0 (default): what keeps the rank's eight tensors (Q, K, V, O, dO, dQ, dK, dV of the
     *     largest shard, in dtype) plus the scratch within 1.2x of a classic ring's footprint,
     *     those tensors plus two of the call's largest travelling blocks (K/V blocks, or the
     *     query bundles Q, dO, lse, D of the burst backward): 1.2 x two blocks + 0.2 x the
     *     tensors, and at least 1 GiB. Calls whose scratch is under 1 GiB are never split.
     *     Splitting costs time (docs/BENCHMARKS.md): each group's kernels end in a partly
     *     filled wave of thread blocks, so fewer, larger groups are faster.
     *   UINT64_MAX: never split (the most scratch, one ring per call).
     * Ranks must pass equal values (the handshake compares field "workspace_limit"). */
    uint64_t workspace_limit;

    /* ---- since API 0.5: read only when api_version's minor is >= 5 ---- */

    /* Optional: packed documents (the cu_seqlens convention of variable-length batches). The
     * sequence is num_docs documents laid end to end, of lengths doc_lens[0], doc_lens[1], ...
     * (each >= 1, summing to seq_len, no other rule); a query attends only keys of its own
     * document, on top of the causal mask and the window. NULL = one document (num_docs is then
     * 0). Copied. Ranks must pass equal lengths (handshake field "doc_lens"). Rank pairs that
     * share no document skip their blocks. With documents the zigzag layout balances the allowed
     * pairs instead of the tokens (burst/layout.h): shards become uneven; burst_layout_plan_*
     * and burst_plan_shard_len / burst_plan_position say where each token goes. */
    const int64_t *doc_lens;
    int64_t num_docs;
    /* Logit soft-capping: > 0 replaces every scaled score s = tau q.k by
     * softcap * tanh(s / softcap) before the softmax, forward and backward (Gemma 2 uses 50);
     * 0 = off (default). Finite. */
    float softcap;

    /* ---- since API 0.7: read only when api_version's minor is >= 7 ---- */

    /* Nonzero: the forward computes its two products on fp8 (e4m3) values, twice the
     * tensor-core rate of 16-bit ones where the device has them (Hopper). dtype must be fp16
     * or bf16 and stays the type of every caller tensor: each forward call quantizes Q, K and V
     * itself, with a scale per block: Q per 64 rows of a head, K per 128 keys of a head, V per
     * head of a travelling block (a rank's shard; with documents the part of it that travels),
     * each scale the block's largest magnitude over 448 (e4m3's largest value). K and V travel
     * the ring quantized, with their scales (half the bytes of a 16-bit ring). The softmax
     * stays fp32; P is rounded to e4m3 at a fixed factor of 256 for P V. Against an fp64
     * reference of the unquantized inputs expect errors of a few percent of O (about 5 % rms
     * on random inputs, against 0.2 % for bf16; docs/ALGORITHM.md, section "fp8 forward",
     * states the bounds the tests use). Forward only: the backward of such a plan is refused
     * (BURST_ERR_UNSUPPORTED); train with a 16-bit plan. A backend without e4m3 products
     * refuses the plan (vulkan; cuda on a device before Hopper). Ranks must pass equal values
     * (handshake field "fp8_forward"). 0 = off (default). */
    int fp8_forward;
};

/* Defaults: B = 1, full attention, natural layout, burst backward, fp32 accumulators, fp32
 * dtype, scale 1/sqrt(d), the default workspace limit; sizes (seq_len, heads, head_dim) are 0
 * and must be set. */
BURST_API struct burst_plan_params burst_plan_params_default(void);

/*
 * Create the plan of this rank. COLLECTIVE over comm: ranks exchange their parameters and every
 * rank fails with BURST_ERR_PLAN_MISMATCH (message naming the first differing rank and field)
 * if any rank's plan differs. Blocks up to the communicator's timeout. ctx and comm must
 * outlive the plan. Validation errors name the field and value (BURST_ERR_INVALID_ARG or
 * BURST_ERR_UNSUPPORTED); on a local validation error the communicator is aborted so that peers
 * do not wait.
 */
BURST_API burst_status_t burst_plan_create(struct burst_context *ctx, struct burst_comm *comm,
                                           const struct burst_plan_params *params,
                                           struct burst_plan **plan_p);

/* Destroy a plan; NULL accepted. Not collective. */
BURST_API void burst_plan_destroy(struct burst_plan *plan);

/*
 * Free the memory a plan keeps between calls. A call's scratch (the fp32 accumulators of O, dQ,
 * dK, dV and the buffers of travelling blocks, scratch_bytes in the statistics) is backend
 * memory that the plan keeps once the call returns, so that later calls of the same sizes
 * allocate nothing (on a GPU, allocating and freeing it costs more than a short call); kept
 * buffers are zeroed again when reused, and idle ones are freed whenever a call needs a larger
 * one. The page-locked host buffers of staged transfers are kept likewise. This frees both now;
 * the next call allocates again. Not collective. Not concurrently with a call on the same plan.
 * NULL accepted.
 */
BURST_API void burst_plan_trim(struct burst_plan *plan);

/* Tokens held by this rank (n_i). */
BURST_API int64_t burst_plan_local_len(const struct burst_plan *plan);

/* Tokens held by rank `rank` of the plan's ring (any rank: every rank knows every shard), or -1
 * when rank is out of range. With shard_weights or measure_speed this is how callers learn the
 * agreed lengths. Since API 0.2. */
BURST_API int64_t burst_plan_shard_len(const struct burst_plan *plan, int rank);

/* The speed a rank measured for measure_speed (local attention rows x keys per second, summed
 * over heads; higher = faster), or 0 when the plan did not measure. Since API 0.2. */
BURST_API double burst_plan_rank_speed(const struct burst_plan *plan, int rank);

/* The speed that sized rank `rank`'s shard under measure_speed: its rate on its round-1 shard
 * (the rows of that shard, one head group of heads), or burst_plan_rank_speed's with
 * BURST_SPEED_ROUNDS=1 or one rank; 0 when the plan did not measure. Since API 0.3. */
BURST_API double burst_plan_shard_speed(const struct burst_plan *plan, int rank);

/* Global position of this rank's local row `local` (0 <= local < n_i), or -1 if out of range. */
BURST_API int64_t burst_plan_position(const struct burst_plan *plan, int64_t local);

/* The backward pattern actually used (AUTO resolved). */
BURST_API burst_bwd_pattern_t burst_plan_bwd_pattern(const struct burst_plan *plan);

/* Head groups of each call (params.workspace_limit): 1 when the ring carries every head at
 * once, up to kv_heads. 0 for a NULL plan. Since API 0.3. */
BURST_API int burst_plan_head_groups(const struct burst_plan *plan);

/* Most scratch bytes a forward or backward call of this plan allocates on this rank (the
 * larger of the two; statistics' scratch_bytes reports each call's, which is less on one rank
 * when a GPU kernel writes the outputs itself: no fp32 O, dK, dV accumulators). 0 for a NULL
 * plan. Since API 0.3. */
BURST_API uint64_t burst_plan_workspace_bytes(const struct burst_plan *plan);

/*
 * What burst_plan_workspace_bytes would report on each rank of a ring of `size` ranks for plans
 * of these parameters: bytes[r] (size entries, caller's) for rank r. Needs no context or
 * communicator: nothing collective, nothing allocated, so that a launcher can check a job's
 * memory before any rank starts. The parameters are validated as burst_plan_create does (errors
 * name the field and value), shard_lens and shard_weights included. It is the most scratch a
 * call may take; a GPU backend whose kernel writes the outputs itself may take less
 * (statistics' scratch_bytes), and there scratch is device memory. With measure_speed the
 * shards are not known before measuring: the estimate is the even split's, and measured shards
 * may be larger. BURST_ERR_INVALID_ARG naming the argument for a NULL params or bytes, a size
 * outside 1..65536 or params of another API version; bytes is written only on success. Since
 * API 0.4.
 */
BURST_API burst_status_t burst_plan_workspace_estimate(const struct burst_plan_params *params,
                                                       int size, uint64_t *bytes);

/*
 * Forward. COLLECTIVE. Inputs q [B, n, Hq, d], k and v [B, n, Hkv, d] (n = local length); outputs
 * o [B, n, Hq, d] in the plan's dtype and lse: fp32, contiguous [B, Hq, n], the natural log of
 * the softmax denominator of each row (scaled scores). Blocks until this rank's output is
 * complete. On any error the outputs are left untouched, except with head groups
 * (burst_plan_head_groups > 1): a failure then leaves the heads of the groups finished before
 * it written (the rest untouched); and on one rank, where a kernel may write o and lse
 * itself (no accumulators; BURST_FWD_FINAL in README.md), a device fault reported after a GPU
 * kernel can leave them partly written. Inputs are only read.
 *
 * Non-finite inputs (NaN, Inf) are not checked, and not contained to their row: the kernels work
 * on tiles of rows and keys (CPU: 64 to 96 rows), and a NaN or Inf in q, k or v can make NaN the
 * outputs of other rows of the same tile, also rows that the causal mask or the window hides
 * from the element (a masked score is computed, then discarded; NaN * 0 is NaN). The contract:
 * with finite inputs whose scaled scores q.k are finite in fp32, every output is finite; with
 * any non-finite input element, the outputs of the call (o, lse, and the gradients of a
 * backward that uses them) are unspecified for the whole call. Callers that must tell which rows were affected check their inputs first.
 */
BURST_API burst_status_t burst_attention_forward(struct burst_plan *plan,
                                                 const struct burst_tensor *q,
                                                 const struct burst_tensor *k,
                                                 const struct burst_tensor *v,
                                                 struct burst_tensor *o, float *lse);

/*
 * Backward. COLLECTIVE. Takes the forward's inputs, its outputs o and lse, and the output
 * gradient dout; writes dq, dk, dv (same shapes as q, k, v, plan dtype). Blocks until this
 * rank's gradients are complete. On any error the outputs are left untouched, except with head
 * groups, as for the forward, and on one rank, where a GPU kernel may write dk and dv itself
 * (BURST_BWD_FINAL), as the forward's o and lse. Inputs are only read.
 */
BURST_API burst_status_t burst_attention_backward(
    struct burst_plan *plan, const struct burst_tensor *q, const struct burst_tensor *k,
    const struct burst_tensor *v, const struct burst_tensor *o, const float *lse,
    const struct burst_tensor *dout, struct burst_tensor *dq, struct burst_tensor *dk,
    struct burst_tensor *dv);

/*
 * Attention sinks (Since API 0.5). A sink is one more score per query head, in every row's
 * softmax, with a zero value vector: with s_j the row's (scaled, soft-capped) scores,
 *     o = sum_j exp(s_j - lse) v_j,   lse = log(exp(sinks[h]) + sum_j exp(s_j)).
 * sinks: fp32 host memory [num_sinks], num_sinks equal to the plan's q_heads, in natural-log
 * units of the scaled scores (not scaled by softmax_scale, not capped). The lse these calls
 * return and take INCLUDES the sink; a row with no allowed key gets o = 0 and lse = sinks[h].
 * Every sink must be finite: a NaN or Inf is refused naming its index (BURST_ERR_INVALID_ARG),
 * as are a NULL sinks and a num_sinks other than q_heads; the outputs are then left untouched.
 * COLLECTIVE, with a rule of its own: every rank of the plan makes the same call with the same
 * sinks. It is not checked: a backward where some ranks call burst_attention_backward and others
 * burst_attention_backward_sinks fails on every rank by the communicator's timeout, outputs
 * untouched (except, with head groups, the gradients of the groups finished before: as for
 * burst_attention_backward); a forward where they differ gives each rank's rows the softmax of its own call.
 * Otherwise as burst_attention_forward.
 */
BURST_API burst_status_t burst_attention_forward_sinks(struct burst_plan *plan,
                                                       const struct burst_tensor *q,
                                                       const struct burst_tensor *k,
                                                       const struct burst_tensor *v,
                                                       const float *sinks, int64_t num_sinks,
                                                       struct burst_tensor *o, float *lse);

/*
 * The backward of burst_attention_forward_sinks (Since API 0.5): o and lse are that call's
 * outputs, sinks and num_sinks the same as there. Writes dq, dk, dv as burst_attention_backward
 * and dsinks (fp32 host memory [num_sinks]) with the full gradient of the sinks,
 *     dsinks[h] = -sum over batch and every row of the sequence of exp(sinks[h] - lse) * D,
 * D = rowsum(dout * o): already summed over the ranks inside the call (one small exchange over
 * the plan's communicator, summed in rank order), so every rank receives the same values.
 * dsinks is written only when the call succeeds; a NULL dsinks is refused.
 */
BURST_API burst_status_t burst_attention_backward_sinks(
    struct burst_plan *plan, const struct burst_tensor *q, const struct burst_tensor *k,
    const struct burst_tensor *v, const struct burst_tensor *o, const float *lse,
    const struct burst_tensor *dout, const float *sinks, int64_t num_sinks, struct burst_tensor *dq,
    struct burst_tensor *dk, struct burst_tensor *dv, float *dsinks);

/* ---- observability: what the last call of each phase did on this rank ---- */

typedef enum burst_phase {
    BURST_PHASE_SETUP = 0, /* plan handshake */
    BURST_PHASE_FWD = 1,
    BURST_PHASE_BWD = 2,
} burst_phase_t;

struct burst_traffic {
    uint64_t bytes_sent;
    uint64_t msgs_sent;
    uint64_t bytes_recv;
    uint64_t msgs_recv;
};

struct burst_phase_stats {
    int steps;          /* ring steps executed (< G when a window lets the ring stop early) */
    int steps_computed; /* steps whose block had work for this rank (summed over head
                               groups: burst_plan_head_groups) */
    double total_s;     /* wall time of the call */
    /* The step clock: on a ring whose blocks all go device to device on a backend with a
     * device timeline (cuda), the host never waits for a step's kernel; compute_s is then the
     * step kernels' device time (CUDA events) and wait_s the device's idle time between
     * consecutive step kernels of a ring (the transfer time not hidden, plus the engine's short
     * kernels between: fills, accumulations; the backward's final hop is not included; ranks
     * sharing one GPU also see each other's kernels there).
     * Elsewhere (or with BURST_STEP_SYNC=1) the host synchronises after each step kernel and both
     * are host times: compute_s in the kernels, wait_s blocked on transfers after computing. */
    double compute_s;       /* time in local attention kernels */
    double wait_s;          /* time the transfers were not hidden */
    double overlap;         /* compute_s / (compute_s + wait_s): 1 when every transfer was hidden
                             behind compute, 0 when nothing was computed while waiting */
    uint64_t scratch_bytes; /* peak bytes the engine allocated for the call (buffers in
                                     flight, fp32 accumulators); excludes caller tensors */
    struct burst_traffic traffic; /* all messages of the call */
};

/* Statistics of the last call of `phase` (zeros if none yet). Not thread-safe w.r.t. calls on
 * the same plan. */
BURST_API burst_status_t burst_plan_stats(const struct burst_plan *plan, burst_phase_t phase,
                                          struct burst_phase_stats *stats_p);

/*
 * How this plan's travelling blocks move (since API 0.2, additive):
 *   "host"    the backend computes on host memory and the transport moves it (cpu, vulkan's
 *             mapped buffers);
 *   "staged"  device memory copied through page-locked host buffers around each transfer (a
 *             device backend over a process-to-process transport, or a ring of mixed backends;
 *             also vulkan GPU buffers between processes, which the transport cannot read);
 *   "device"  device to device, no host hop: every rank runs the same device backend (cuda)
 *             and every rank shares one host: ranks that are threads (transport "local"), or
 *             rank processes (transport "fabric": CUDA IPC between the processes). GPU to GPU
 *             over NVLink / PCIe where the ranks sit on different GPUs.
 *   "device+staged"  the same between ranks of one host, staged between hosts (a ring of
 *             processes on several hosts).
 * BURST_DEVICE_DIRECT=0 forces "staged". NULL plan: "".
 */
BURST_API const char *burst_plan_transfers(const struct burst_plan *plan);

/*
 * Traffic of ring step `step` (0 <= step <= steps) of the last call of `phase`: messages POSTED
 * by this rank during that step. Slot `steps` holds the final hop that returns a travelling
 * accumulator to its owner (backward only).
 */
BURST_API burst_status_t burst_plan_step_traffic(const struct burst_plan *plan, burst_phase_t phase,
                                                 int step, struct burst_traffic *traffic_p);

/*
 * Time ring step `step` (0 <= step <= steps) of the last call of `phase` spent in local kernels
 * (*compute_s_p) and blocked on transfers (*wait_s_p); slot `steps` is the final hop. Both
 * outputs must be non-NULL.
 */
BURST_API burst_status_t burst_plan_step_times(const struct burst_plan *plan, burst_phase_t phase,
                                               int step, double *compute_s_p, double *wait_s_p);

#ifdef __cplusplus
}
#endif

#endif /* BURST_PLAN_H */
