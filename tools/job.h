/*
 * tools/job.h - one distributed attention job run by the tools (burstrun, burstbench).
 *
 * A job builds random global Q, K, V, dO in natural token order, shards them with
 * burst_layout_permute, runs G ranks as threads of this process over a burst_local_world (one
 * shared context), times forward and backward (median over iterations after a warm-up), collects
 * the per-rank statistics, and optionally checks the results against the fp64 reference of
 * tests/ref.h. Not part of the library.
 */
#ifndef BURST_TOOLS_JOB_H
#define BURST_TOOLS_JOB_H

#include <stdint.h>

#include "burst/burst.h"

/* Backward reference refused above this many multiply-adds, counted as B * N^2 * Hq * d. */
#define JOB_BWD_CHECK_LIMIT 4e9
/* Query rows the forward check samples when the full reference is not run. */
#define JOB_FWD_SAMPLE_ROWS 64

struct job_params {
    int ranks;
    int64_t batch;
    int64_t seq_len;
    int q_heads;
    int kv_heads;
    int head_dim;
    burst_dtype_t dtype;
    int causal;
    int64_t window_left;  /* -1 = unbounded */
    int64_t window_right; /* -1 = unbounded */
    burst_layout_t layout;
    burst_bwd_pattern_t bwd;
    int run_bwd;        /* 0: forward only */
    int warmup;         /* untimed iterations first */
    int iters;          /* timed iterations (>= 1) */
    double max_seconds; /* stop timing after the iteration that passes this (0 = never) */
    uint64_t seed;
    int check_fwd; /* compare O and lse: 1 = on sampled rows, 2 = on every row */
    int check_bwd; /* compare dQ, dK, dV with the full reference (needs run_bwd) */
};

/* Error of one compared tensor: max |lib - ref| and max |ref| over the compared elements. */
struct job_err {
    double max_abs;
    double max_ref;
    int64_t count;     /* elements compared */
    int64_t nonfinite; /* library values that are NaN/Inf where the reference is finite */
};

enum job_tensor {
    JOB_O,
    JOB_LSE,
    JOB_DQ,
    JOB_DK,
    JOB_DV,
    JOB_NTENSORS
};

struct job_result {
    int status;         /* JOB_OK, JOB_EUSAGE (parameters rejected), JOB_EFAIL */
    char message[1024]; /* why, when status != JOB_OK */

    char backend[32];
    int num_threads;
    burst_bwd_pattern_t bwd_used;
    int iters_done;
    double fwd_s; /* median wall time of the forward over the timed iterations */
    double bwd_s; /* median wall time of the backward (0 when not run) */
    double fwd_min_s, bwd_min_s;
    /* process cpu time over the timed iterations / (wall time * compute threads): about 1 when
     * the job had its cores to itself, lower when other processes took them (or threads idled) */
    double cpu_share;

    /* per-rank statistics of the last call of each phase: the maximum over ranks */
    uint64_t bytes_fwd, msgs_fwd, bytes_bwd, msgs_bwd;
    uint64_t scratch_fwd, scratch_bwd;
    int steps_fwd, steps_bwd;
    double wait_fwd_s, wait_bwd_s;
    uint64_t caller_bytes; /* global tensors the job itself allocated (not the library's) */
    uint64_t peak_rss;     /* peak resident bytes of the process after the runs, before the check */

    int checked_fwd_rows; /* query rows compared (per batch and head); 0 = forward not checked */
    int checked_bwd;
    struct job_err err[JOB_NTENSORS];
};

#define JOB_OK 0
#define JOB_EUSAGE 2
#define JOB_EFAIL 3

/* Query/key pairs allowed by the mask over the whole sequence, counted exactly in O(N). */
double job_allowed_pairs(int64_t seq_len, int causal, int64_t window_left, int64_t window_right);

/* Forward FLOPs by the field's convention with the exact pair count: 4 * B * Hq * d * pairs. */
double job_fwd_flops(const struct job_params *p);

/* Multiply-adds of the fp64 backward reference: B * N^2 * Hq * d. */
double job_bwd_ref_cost(const struct job_params *p);

/* Run the job on ctx. Fills *r (always); returns r->status. */
int job_run(const struct job_params *p, struct burst_context *ctx, struct job_result *r);

/* Relative error of one tensor: max_abs / max_ref (lse: / max(max_ref, 1)); Inf on non-finite. */
double job_err_rel(const struct job_err *e, enum job_tensor t);

const char *job_tensor_name(enum job_tensor t);

/* Largest relative error (job_err_rel) a check accepts: fp32 1e-4; fp16 4 * 2^-11 = 1.95e-3 and
 * bf16 4 * 2^-8 = 1.56e-2 (four units of roundoff of the dtype). */
double job_tolerance(burst_dtype_t dtype);

/* Monotonic seconds. */
double job_now(void);

/* Peak resident set size of this process in bytes (getrusage). */
uint64_t job_peak_rss(void);

#endif /* BURST_TOOLS_JOB_H */
