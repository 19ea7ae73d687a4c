/*
 * runtime/plan_internal.h - the plan as the ring engine sees it (private).
 */
#ifndef BURST_RUNTIME_PLAN_INTERNAL_H
#define BURST_RUNTIME_PLAN_INTERNAL_H

#include "burst/plan.h"
#include "context_internal.h"
#include "schedule.h"
#include "tp_comm.h"

struct burst_xfer; /* ring_xfer.h */

struct burst_plan {
    struct burst_context *ctx;
    struct burst_comm *comm;
    struct burst_plan_params p; /* validated copy; shard_lens, shard_weights NULL (see shards) */
    struct burst_shards shards;
    struct burst_posmap pos; /* this rank's row positions */
    struct burst_mask mask;  /* its document table is docs */
    int64_t *docs;           /* [num_docs + 1] document boundaries, or NULL (one document) */
    void *docs_dev;          /* their copy in backend memory where it is device memory */
    float scale;
    int rank, size;
    int steps;               /* ring steps of every call (a window may stop it early) */
    int local;               /* ranks per node of the two-level ring (size: the flat ring) */
    int64_t n;               /* local tokens */
    int64_t n_max;           /* largest shard: sizes the travelling buffers */
    int64_t *span;           /* [4 size] with documents: per block its travelling rows as keys
                              * [lo, hi) then as queries (burst_plan_span); NULL: all rows */
    burst_bwd_pattern_t bwd; /* resolved pattern */
    burst_dtype_t acc_dtype; /* dtype of travelling accumulators on the wire */
    double *speeds;          /* [size] measured speeds (measure_speed: round 1), else zeros */
    double *shard_speeds;    /* [size] round 2's speeds (speed.h), which sized the shards, or
                              * round 1's (BURST_SPEED_ROUNDS=1, one rank), else zeros */
    int hgroups;             /* head groups of each call (params.workspace_limit) */
    int64_t gkv;             /* K/V heads per group (the last group may have fewer) */
    uint64_t workspace;      /* scratch bytes of the larger call with those groups */
    int direct;              /* blocks travel device to device (every rank agreed: ring_xfer.h) */
    unsigned char *shared;   /* [size] 1 where messages with rank r go device to device through
                              * memory shared by two backends on one device (ring_xfer.h) */
    int any_shared;          /* some rank is such a peer */
    int staged;              /* transfers staged through host buffers (burst_xfer_staged) */

    struct burst_phase_stats stats[3];
    struct burst_traffic *step_traffic[3]; /* [steps + 1] per phase */
    struct burst_step_time {
        double compute_s, wait_s;
    } * step_time[3]; /* [steps + 1] per phase */
    /* Backend memory of the calls' scratch (burst_scratch_alloc), kept between calls so that a
     * call in the steady state allocates nothing: best fit, zeroed on reuse (except for
     * burst_scratch_alloc_raw); idle buffers are dropped when a new one is needed and on
     * burst_plan_trim. */
#define BURST_SCRATCH_BUFS 16
    struct burst_kept {
        void *ptr;
        size_t size;
        int busy;
    } kept[BURST_SCRATCH_BUFS];
    /* host staging of transfers for device-memory backends (runtime/ring_xfer.h) */
#define BURST_STAGE_BUFS 8
    struct burst_stage {
        void *ptr;
        size_t size;
        int busy;
    } stage[BURST_STAGE_BUFS];
    struct burst_xfer *xfer_sends; /* pipelined staged sends not all on the wire yet */
    size_t stage_chunk; /* chunk size of non-direct messages (ring_xfer.h), 0: whole messages */
};

/* plan_params.c: the caller's params as this library's struct (fields newer than its
 * api_version keep their defaults), and their validation (an error naming who, field, value). */
struct burst_plan_params burst_plan_params_copy(const struct burst_plan_params *in);
burst_status_t burst_plan_params_validate(const char *who, const struct burst_plan_params *p);

/* plan_handshake.c: exchange and compare every rank's plan (BURST_ERR_PLAN_MISMATCH naming the
 * rank and field); decides plan->direct, shared pairs and staging; with measure_speed, *speeds
 * receives every rank's speed. */
burst_status_t burst_plan_handshake(struct burst_plan *plan, const struct burst_plan_params *p,
                                    double speed, double *speeds);

/* Bytes each rank sends per backward step for a block of n tokens, by pattern (section 2). */
uint64_t burst_plan_bwd_step_bytes(const struct burst_plan_params *p, burst_bwd_pattern_t pat,
                                   burst_dtype_t acc_dtype, int64_t n);

/* ---- helpers shared by ring_fwd.c and ring_bwd.c ---- */

/* Head group g (0 <= g < hgroups) of a call: K/V heads [kv0, kv0 + nkv) with their query heads
 * [q0, q0 + nq). Each group runs the whole ring on its heads alone. */
struct burst_hgroup {
    int64_t kv0, nkv, q0, nq;
};
struct burst_hgroup burst_plan_hgroup(const struct burst_plan *plan, int g);

/* Heads [h0, h0 + h) of t (a strided view of the same memory). */
struct burst_tensor burst_heads(const struct burst_tensor *t, int64_t h0, int64_t h);
/* View of rows [r0, r0 + n) (dimension 1) of t. */
struct burst_tensor burst_rows(const struct burst_tensor *t, int64_t r0, int64_t n);

/* Scratch bytes (burst_scratch_alloc's sum) of a forward / backward call on n local tokens
 * whose head groups hold gkv K/V heads: ring_fwd.c, ring_bwd.c, next to the allocations they
 * count. */
uint64_t burst_fwd_scratch_bytes(const struct burst_plan *plan, int64_t n, int64_t gkv);
uint64_t burst_bwd_scratch_bytes(const struct burst_plan *plan, int64_t n, int64_t gkv);

/* Local rows [*lo, *hi) of block `block` that travel on the ring, of its keys (K/V: forward and
 * ring backward) or of its queries (queries: the burst backward's bundle): with documents the
 * rows some other rank pairs with (burst_block_span), else all of them. */
void burst_plan_span(const struct burst_plan *plan, int queries, int block, int64_t *lo,
                     int64_t *hi);

/* The tag sequence of the next head group of a collective call (every rank draws alike). */
uint32_t burst_call_next_seq(struct burst_plan *plan);

/* Scratch allocations of one call (zeroed backend memory from the plan's kept buffers): handed
 * back together, bytes asked for recorded. */
struct burst_scratch {
    struct burst_plan *plan;
    int slots[BURST_SCRATCH_BUFS];
    int count;
    uint64_t bytes;
};
burst_status_t burst_scratch_alloc(struct burst_scratch *s, const char *who, size_t bytes,
                                   void **ptr_p);
/* The same for a buffer the call writes wholly before it reads any of it (travelling blocks,
 * received or filled accumulators): a reused buffer keeps its old contents, not zeroed. */
burst_status_t burst_scratch_alloc_raw(struct burst_scratch *s, const char *who, size_t bytes,
                                       void **ptr_p);
void burst_scratch_free(struct burst_scratch *s);
/* Free the plan's idle kept scratch buffers (all of them between calls). */
void burst_scratch_trim(struct burst_plan *plan);

/* Monotonic seconds. */
double burst_now(void);

/* The entry of a public call on plan: clears the thread's error; refuses a NULL plan (naming
 * who) and a communicator that was aborted. */
burst_status_t burst_call_entry(const char *who, const struct burst_plan *plan);

/* Begin a collective call: checks the communicator, starts stats, bumps the tag sequence. */
burst_status_t burst_call_begin(struct burst_plan *plan, burst_phase_t phase, uint32_t *seq_p);

/* A local failure inside a collective call: abort the communicator so peers stop waiting. */
burst_status_t burst_call_fail(struct burst_plan *plan, burst_status_t st);

/* Account time of ring step `step` (0..steps) of the current call. */
void burst_call_compute(struct burst_plan *plan, burst_phase_t phase, int step, double seconds);
void burst_call_wait(struct burst_plan *plan, burst_phase_t phase, int step, double seconds);

/* End a collective call that began at t0: totals, overlap and scratch into the phase's stats,
 * scratch freed; on failure the communicator is aborted. Returns st. */
burst_status_t burst_call_end(struct burst_plan *plan, burst_phase_t phase,
                              struct burst_scratch *sc, double t0, burst_status_t st);

/* A contiguous [b, n, h, d] view of data. */
struct burst_tensor burst_view(void *data, burst_dtype_t dtype, int64_t b, int64_t n, int64_t h,
                               int64_t d);

#endif /* BURST_RUNTIME_PLAN_INTERNAL_H */
