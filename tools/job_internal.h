/*
 * tools/job_internal.h - the job's state shared by the files of tools/job*.c (private to the
 * tools): job.c (the rank loop, threads and rank processes, results), job_inputs.c (the random
 * inputs), job_check.c (the check against the fp64 reference), job_speed.c (shards sized by
 * measured speed).
 */
#ifndef BURST_TOOLS_JOB_INTERNAL_H
#define BURST_TOOLS_JOB_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "job.h"

struct job {
    const struct job_params *p;
    struct burst_context *const *ctxs; /* threads: [G] per-rank contexts */
    struct burst_context *ctx;         /* processes: this rank's context */
    const int64_t *lens_in;            /* measured shard lengths, or NULL */
    struct burst_local_world *world;
    size_t esz;
    int64_t *lens, *offs; /* [G] shard lengths and offsets in permuted order */
    int64_t *perm;        /* [N] permuted index of natural position */
    int64_t *nat;         /* [N] natural position of permuted index */
    int32_t *owner;       /* [N] rank holding natural position */
    /* global tensors in permuted order, dtype (threads: owned; processes: in the arena) */
    void *q, *k, *v, *dout, *o, *dq, *dk, *dv;
    float **lse;   /* [G] per-rank [B, Hq, n_r] */
    float *dsinks; /* --sinks with the backward: [G][Hq], each rank's gradient of the sinks */

    /* threads mode: a barrier that also ORs flags across ranks */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int live; /* rank threads taking part (G unless some failed to start) */
    int arrived;
    unsigned gen;
    int round_flags, last_flags;
};

#define FLAG_FAIL 1
#define FLAG_STOP 2

/* Set r's status and message (printf-style). */
void job_set_msg(struct job_result *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The job's plan parameters: every rank's plan (rank_loop) and the plan that measures the ranks'
 * speeds (job_measure_lens) start from these, so that both describe the same job. Shards are left
 * to the caller. */
struct burst_plan_params job_plan_params(const struct job_params *p);

/* Draw rank `rank`'s shard of Q, K, V and dO into the job's global tensors (job_inputs.c). */
void job_fill_rank_inputs(const struct job *j, int rank);

/* Element i of a tensor of dtype dt, as a double. */
double job_load_elem(const void *base, burst_dtype_t dt, size_t i);

/* Check the job's outputs against the fp64 reference (job_check.c): the errors into r; 0, or
 * -1 with the message in r. */
int job_run_check(struct job *j, struct job_result *r);

/* A plan with measure_speed on this rank: the ring's agreed shard lengths and speeds (speeds:
 * 2 x ranks, round 1's then round 2's, runtime/speed.h). 0, or the failing status with the
 * message in msg. */
burst_status_t job_measure_lens(const struct job_params *p, int rank, struct burst_comm *comm,
                                struct burst_context *ctx, int64_t *lens, double *speeds, char *msg,
                                size_t cap);

/* Threads: every rank measures on its own context, concurrently, over an in-process ring. */
int job_measure_threads(const struct job_params *p, struct burst_context *const *ctxs,
                        int64_t *lens, double *speeds, struct job_result *r);

#endif /* BURST_TOOLS_JOB_INTERNAL_H */
