/*
 * tools/job.h - one distributed attention job run by the tools (burstrun, burstbench).
 *
 * A job is one global problem: random Q, K, V, dO drawn in natural token order from the seed
 * (element i of a tensor is the i-th draw of a counter-based stream, so any rank can draw its own
 * shard alone), held in the layout's permuted order. It runs either
 *   - job_run: G ranks as threads of this process over a burst_local_world (one shared context),
 *   - or, through tools/launch.c, G rank processes that each run job_worker_main: a worker maps
 *     the job's arena (a memfd shared with the launcher: parameters, one result slot per rank,
 *     and the global tensors), draws its own shard of the inputs into it, joins the ring with
 *     burst_comm_create_env and writes its outputs, timings and statistics into the arena.
 * Both run the same per-rank loop (timing, statistics, failure handling). Forward and backward
 * are timed (median over iterations after a warm-up), and the results can be checked against
 * the fp64 reference of tools/ref.h. Not part of the library.
 */
#ifndef BURST_TOOLS_JOB_H
#define BURST_TOOLS_JOB_H

#include <stdint.h>

#include "burst/burst.h"
#include "job_kv.h"

/* Backward reference refused above this many multiply-adds, counted as B * N^2 * Hq * d. */
#define JOB_BWD_CHECK_LIMIT 4e9
/* Query rows the forward check samples when the full reference is not run. */
#define JOB_FWD_SAMPLE_ROWS 64
/* Entries of a per-rank list (--weights, --backends, --num-threads). */
#define JOB_MAX_LIST 256
/* Documents of a packed job (--docs). */
#define JOB_MAX_DOCS 4096
/* Query heads of a job with --sinks (its logits live on each rank's stack). */
#define JOB_MAX_SINKS 4096

/* How shards are sized (burstrun --weights). */
enum job_weights {
    JOB_WEIGHTS_EVEN = 0,     /* the layout's even shards */
    JOB_WEIGHTS_GIVEN = 1,    /* plan.shard_weights = job_params.weights */
    JOB_WEIGHTS_MEASURED = 2, /* a plan with measure_speed first; its shards then */
};

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
    int check_fwd;            /* compare O and lse: 1 = on sampled rows, 2 = on every row */
    int check_bwd;            /* compare dQ, dK, dV with the full reference (needs run_bwd) */
    int deterministic;        /* plan.deterministic: bitwise-reproducible results */
    int ranks_per_node;       /* plan.ranks_per_node: two-level ring (0 = flat) */
    uint64_t workspace_limit; /* plan.workspace_limit: 0 = default, UINT64_MAX = never split */
    int want_hash;            /* compute job_result.output_hash */
    enum job_weights weights_mode;
    double weights[JOB_MAX_LIST]; /* [ranks] for JOB_WEIGHTS_GIVEN */
    /* packed documents (--docs, tools/job_docs.c): num_docs lengths in doc_lens summing to
     * seq_len (0: one document); docs_random: the lengths are drawn from the seed for each
     * sequence length (--docs random:K, K = num_docs) by job_docs_resolve */
    int docs_random;
    int64_t num_docs;
    int64_t doc_lens[JOB_MAX_DOCS];
    /* test only (hidden --test-mismatch R:FIELD): rank R changes FIELD of its plan ("weights":
     * reversed; "head_dim": + 8) so that the handshake must fail; -1 = off */
    int mismatch_rank;
    char mismatch_field[16];
    /* soft-capping and attention sinks (burstrun --softcap, --sinks) */
    float softcap; /* plan.softcap: 0 = off */
    int sinks;     /* nonzero: the _sinks calls with job_sinks' logits */
    /* plan.fp8_forward (burstrun --fp8): the forward on e4m3 products of quantized fp16 / bf16
     * inputs (runtime/fp8.h); forward only */
    int fp8;
    /* an inference job instead (burstrun --prefill, --decode, --spec; tools/job_kv.h): a
     * prompt of kv_prefill tokens per sequence (batch sequences), then kv_decode decode calls
     * of kv_spec tokens each; kv_decode 0 = an attention job */
    int64_t kv_prefill;
    int64_t kv_decode;
    int64_t kv_spec;
};

/* Per-rank statistics of the last call of each phase. */
struct job_rank_stats {
    struct burst_phase_stats fwd, bwd;
    char transfers[16]; /* burst_plan_transfers: host | staged | device | device+staged */
    int head_groups;    /* burst_plan_head_groups */
};

/* Error of one compared tensor: max |lib - ref| and max |ref| over the compared elements; for
 * the gradients also max_terms, the largest element of the gradient computed with every term
 * replaced by its magnitude (what rounding errors scale with, even where the terms cancel). */
struct job_err {
    double max_abs;
    double max_ref;
    double max_terms;
    int64_t count;     /* elements compared */
    int64_t nonfinite; /* library values that are NaN/Inf where the reference is finite */
};

enum job_tensor {
    JOB_O,
    JOB_LSE,
    JOB_DQ,
    JOB_DK,
    JOB_DV,
    JOB_DSINKS, /* the sinks' gradient (--sinks), every rank's */
    JOB_NTENSORS
};

struct job_result {
    int status;         /* JOB_OK, JOB_EUSAGE (parameters rejected), JOB_EFAIL */
    char message[1024]; /* why, when status != JOB_OK */

    char backend[256];  /* the ranks' backends, comma-separated in rank order where they differ */
    int num_threads;    /* compute threads of rank 0's context */
    char rank_mode[16]; /* "threads" or "processes" */
    char fabric[16];    /* provider the rank processes agreed on; "none" for threads */
    char transfers[16]; /* how blocks moved (rank 0's plan): host | staged | device | ... */
    int head_groups;    /* head groups of each call (rank 0's plan: every rank agrees) */
    int hosts;          /* distinct hosts of the ring */
    burst_bwd_pattern_t bwd_used;
    int iters_done;
    double fwd_s;                /* median wall time of the forward over the timed iterations */
    double bwd_s;                /* median wall time of the backward (0 when not run) */
    double fwd_min_s, bwd_min_s; /* the fastest timed iteration */
    double fwd_max_s, bwd_max_s; /* the slowest timed iteration */
    /* process cpu time over the timed iterations / (wall time * compute threads): about 1 when
     * the job had its cores to itself, lower when other processes took them (or threads idled) */
    double cpu_share;

    /* per-rank statistics of the last call of each phase: the maximum over ranks */
    uint64_t bytes_fwd, msgs_fwd, bytes_bwd, msgs_bwd;
    uint64_t scratch_fwd, scratch_bwd;
    int steps_fwd, steps_bwd;
    double wait_fwd_s, wait_bwd_s;
    uint64_t caller_bytes; /* global tensors the job itself allocated (not the library's) */
    uint64_t peak_rss;     /* peak resident bytes of the process after the runs, before the check
                              (processes: the largest rank process) */

    /* sums over ranks of the last call's compute_s, wait_s and total_s (burst_plan_stats) */
    double compute_sum_s[2], wait_sum_s[2], total_sum_s[2]; /* [0] forward, [1] backward */
    struct job_rank_stats *rank_stats; /* [ranks], or NULL; freed by job_result_free */
    uint64_t output_hash;              /* FNV-1a of O, lse, dQ, dK, dV (want_hash) */
    int64_t *shard_lens;               /* [ranks] tokens per rank, or NULL */
    double *rank_speeds;  /* [ranks] measured (JOB_WEIGHTS_MEASURED) speeds, or NULL: rows x keys x
                            query heads per second of each rank's forward kernel (round 1,
                            burst_plan_rank_speed) */
    double *shard_speeds; /* [ranks] the speeds that sized the shards (burst_plan_shard_speed),
                             in rank_speeds' allocation, or NULL */

    struct job_kv_result kv; /* an inference job's (job_params.kv_decode > 0) */

    int checked_fwd_rows; /* query rows compared (per batch and head); 0 = forward not checked */
    int checked_bwd;
    struct job_err err[JOB_NTENSORS];
};

#define JOB_OK 0
#define JOB_EUSAGE 2
#define JOB_EFAIL 3

/* The job's sink logits [q_heads] (--sinks): U(-1, 5) per head from the seed, the same on every
 * rank. */
void job_sinks(const struct job_params *p, float *sinks);

/* Query/key pairs allowed by the mask over the whole sequence, counted exactly in O(N). */
double job_allowed_pairs(int64_t seq_len, int causal, int64_t window_left, int64_t window_right);

/* ---- packed documents (tools/job_docs.c) ---- */

/* Parse a --docs value into p: "L1,L2,..." (each an integer >= 1, at most JOB_MAX_DOCS) or
 * "random:K" (1 <= K <= JOB_MAX_DOCS). 0, or -1 with a message naming --docs and the value. */
int job_docs_parse(const char *val, struct job_params *p, char *msg, size_t cap);

/* Make p's documents fit its sequence length: draws the lengths of random:K from the seed (each
 * >= 1, summing to seq_len; the same lengths for the same seed, K and seq_len) and checks that
 * given lengths sum to seq_len. 0, or -1 with a message naming --docs. */
int job_docs_resolve(struct job_params *p, char *msg, size_t cap);

/* Allowed (query, key) pairs of the job, documents included (job_allowed_pairs without). */
double job_pairs(const struct job_params *p);

/* Forward FLOPs by the field's convention with the exact pair count: 4 * B * Hq * d * pairs. */
double job_fwd_flops(const struct job_params *p);

/* Multiply-adds of the fp64 backward reference: B * N^2 * Hq * d. */
double job_bwd_ref_cost(const struct job_params *p);

/* Run the job with ranks as threads, rank i on ctxs[i] (entries may repeat: ranks of one
 * context share it). Fills *r (always); returns r->status. Release r with job_result_free. */
int job_run(const struct job_params *p, struct burst_context *const *ctxs, struct job_result *r);

/* Entry `rank` of a comma-separated per-rank list, cycling when the list is shorter, into buf
 * ("" for an empty entry). */
void job_list_entry(const char *list, int rank, char *buf, size_t cap);

/* Entries of a comma-separated list. */
int job_list_count(const char *list);

/* Free what job_run / launch_run attached to r (not r itself); safe to call twice. */
void job_result_free(struct job_result *r);

/* Overlap of one phase (0 forward, 1 backward) over all ranks:
 *     compute_sum / (compute_sum + wait_sum)
 * Under the engine's schedule each step's transfer is posted as its compute starts, so a step
 * that computes c and then waits w had a transfer of c + w, c of it hidden; a step that does not
 * wait hid its whole transfer. 1 = no exposed communication. NaN without communication (one
 * rank, or nothing timed). */
double job_overlap(const struct job_result *r, int phase);

/* ---- rank processes (tools/launch.c starts them) ---- */

/* Test-only fault injection: rank `rank` SIGKILLs itself at iteration `iter` (warm-up included,
 * from 0), just before (delay_ms = 0) or delay_ms into its forward ('F') or backward ('B'). */
struct job_kill {
    int rank; /* -1 = off */
    char phase;
    int iter;
    int delay_ms;
};

/* What one rank process reports in its slot of the arena. */
struct job_slot {
    int iter;      /* iterations completed, warm-up included (read for the progress line) */
    int done;      /* the worker finished (successfully or not) and filled the slot */
    int status;    /* JOB_OK, JOB_EUSAGE, JOB_EFAIL */
    int secondary; /* the failure echoes a peer's (BURST_ERR_PEER_FAILED / COMM_FAILED) */
    char message[512];
    char backend[32];
    double speed;       /* measured speed (JOB_WEIGHTS_MEASURED) */
    double shard_speed; /* the speed that sized the shard (burst_plan_shard_speed) */
    int64_t lens_set;   /* rank 0: 1 once it wrote the measured shard lengths into the arena */
    char fabric[16];
    int hosts;
    int num_threads;
    int bwd_used;
    int iters_done;
    double wall_s, cpu_s; /* timed iterations: wall time and process cpu time */
    uint64_t peak_rss;
    struct job_rank_stats st;
    struct job_kv_result kv; /* an inference job's */
};

#define JOB_ARENA_MAGIC 0x42525354u /* "BRST" */
#define JOB_ARENA_VERSION 4u

/* The arena's first bytes. The worker is the same executable as the launcher, so the layout
 * is shared by construction; magic, version and size are still checked. */
struct job_arena_hdr {
    uint32_t magic, version;
    uint64_t bytes; /* size of the whole arena */
    struct job_params p;
    char backend[512];     /* per-rank backends, comma-separated, cycling (one entry: all) */
    char num_threads[512]; /* per-rank compute threads, comma-separated, cycling ("0" = default) */
    char device[512];      /* per-rank GPU device, comma-separated, cycling ("" = BURST_DEVICE) */
    struct job_kill kill;
    /* byte offsets from the arena's start */
    uint64_t off_slots, off_times, off_q, off_k, off_v, off_dout, off_o, off_dq, off_dk, off_dv,
        off_lse, off_lens,
        off_dsinks; /* off_lens: [G] int64 shard lengths (measured: written by rank 0) */
};

/* Compute the arena layout of p into *h (p copied in) and return its size, or 0 when the
 * shards cannot be computed (message in msg). */
uint64_t job_arena_layout(const struct job_params *p, struct job_arena_hdr *h, char *msg,
                          size_t cap);

/* The slots [G] and the per-rank iteration times [G][2][warmup + iters] of an arena. */
struct job_slot *job_arena_slots(void *arena);
double *job_arena_times(void *arena, int rank);

/* Body of a rank process: maps the arena from fd, joins the ring from the environment
 * (burst_comm_create_env, or the parameters of job_worker_comm_params), runs, fills its slot.
 * A failure's message goes into the slot only: the launcher prints the job's failure once
 * (launch.c, job_arena_collect). Returns the process exit status: 0 ok, JOB_EUSAGE, JOB_EFAIL,
 * or JOB_EPEER when it failed because a peer did. */
#define JOB_EPEER 4
int job_worker_main(int fd);

/* For a rank process whose launcher has a collective of its own (burstrun under mpirun:
 * bootstrap "mpi" through the program's allgather): job_worker_main then joins with
 * burst_comm_create(p) instead of burst_comm_create_env. p must live until it returns; NULL
 * goes back to the environment. */
void job_worker_comm_params(const struct burst_comm_params *p);

/* Launcher side, after every rank process exited: merge the slots and times into r, hash and
 * check the outputs in the arena as requested. Returns r->status. */
int job_arena_collect(void *arena, struct job_result *r);

/* Relative error of one tensor: max_abs / max(max_ref, max_terms / JOB_TERMS_FLOOR) (lse: at least
 * 1); Inf on non-finite. A gradient whose terms cancel (exactly zero with a one-key window) is
 * measured against the size of its terms, not against its rounding noise. */
#define JOB_TERMS_FLOOR 64.0
double job_err_rel(const struct job_err *e, enum job_tensor t);

const char *job_tensor_name(enum job_tensor t);

/* Largest relative error (job_err_rel) a check of job p accepts: fp32 1e-4; fp16 4 * 2^-11 =
 * 1.95e-3 and bf16 4 * 2^-8 = 1.56e-2 (four units of roundoff of the dtype); an fp8 forward
 * 2^-2 (its inputs and P keep 3 mantissa bits, so O strays a few percent of max |O| from the
 * unquantized reference: the bound catches wrong results, not rounding). */
double job_tolerance(const struct job_params *p);

/* Monotonic seconds. */
double job_now(void);

/* Peak resident set size of this process in bytes (getrusage). */
uint64_t job_peak_rss(void);

#endif /* BURST_TOOLS_JOB_H */
