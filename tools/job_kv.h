/*
 * tools/job_kv.h - an inference job of the tools (burstrun --prefill N --decode STEPS): the
 * sharded key/value cache of burst/kvcache.h filled by a prompt and then decoded.
 *
 * Each of B sequences has a token stream drawn from the seed (element e of token i of stream
 * s, tensor q, k or v, is a counter-based draw, so any rank draws any row alone). Every rank
 * creates the cache, prefills each sequence's prompt of N tokens in one chunk (its layout
 * shard), then runs STEPS decode calls of t tokens for all B sequences at once. Times: the
 * prefill of all sequences; each decode step's wall time, with the attention over the rank's
 * shard (local) and the exchange and merge of the partial results (merge) apart, as
 * burst_kvcache_stats reports them. With check, rank 0 compares sampled rows of every decode
 * step (the first and last new token of the first and last sequence) with the fp64 reference.
 */
#ifndef BURST_TOOLS_JOB_KV_H
#define BURST_TOOLS_JOB_KV_H

#include <stdint.h>
#include <stdio.h>

#include "burst/burst.h"

struct job_params;
struct job_result;

/* What one rank measured (rank 0's is the job's). */
struct job_kv_result {
    int status;                    /* JOB_OK, JOB_EUSAGE, JOB_EFAIL */
    int secondary;                 /* the failure echoes a peer's */
    char message[512];             /* why, when status != JOB_OK */
    double prefill_s;              /* every sequence's prefill */
    double step_med_s, step_p99_s; /* decode step latency over the steps */
    double local_med_s, merge_med_s;
    /* medians of the merge's wait for the slowest rank and of the rest (the exchange and merge
     * proper: merge less wait, step by step) */
    double wait_med_s, exchange_med_s;
    double tokens_per_s;  /* B x t / step_med_s */
    uint64_t merge_bytes; /* sent by this rank per step for the merge */
    int fallback;         /* the backend ran one step kernel per block (no decode_step) */
    int64_t capacity_blocks;
    int checked_rows; /* rows compared (0: no check) */
    int check_failed; /* some compared row was beyond job_tolerance(dtype) */
    double max_rel;   /* max |x - r| / max |r| over the compared O elements */
    int64_t nonfinite;
};

/* Blocks of 64 tokens per rank that hold the job's cache. */
int64_t job_kv_capacity(const struct job_params *p);

/* Prefill FLOPs of the job: 4 B Hq d N (N + 1) / 2 (causal pairs). */
double job_kv_prefill_flops(const struct job_params *p);

/* One rank of the job on ctx and comm; fills *res (always). Returns res->status. */
int job_kv_rank(const struct job_params *p, struct burst_context *ctx, struct burst_comm *comm,
                int rank, struct job_kv_result *res);

/* The whole job with G ranks as threads (ctxs[rank]); rank 0's result (or the first failure)
 * into *res. Returns res->status. */
int job_kv_threads(const struct job_params *p, struct burst_context *const *ctxs,
                   struct job_kv_result *res);

/* The job's report on f: a few lines of text, or (json) the members of burstrun's JSON
 * object without braces. Returns 1 when the check failed, else 0. */
int job_kv_print(FILE *f, const struct job_params *p, const struct job_result *r, int json);

#endif /* BURST_TOOLS_JOB_KV_H */
