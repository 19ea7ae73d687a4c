/* tools/job_speed.c - shards sized by measured speed (burstrun --weights auto): a plan with
 * measure_speed on every rank first, as threads or in this rank process. */
#include "job_internal.h"
#include "job_size.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ref.h"

/* ---- shards sized by measured speed ---- */

/* A plan with measure_speed on this rank: the ring's agreed shard lengths and speeds (speeds:
 * 2 x ranks, round 1's then round 2's, runtime/speed.h). 0, or the failing status with the
 * message in msg. */
burst_status_t job_measure_lens(const struct job_params *p, int rank, struct burst_comm *comm,
                                struct burst_context *ctx, int64_t *lens, double *speeds, char *msg,
                                size_t cap)
{
    struct burst_plan_params pp = job_plan_params(p); /* the job's plan, shards measured */
    pp.measure_speed = 1;
    struct burst_plan *plan = NULL;
    burst_status_t st = burst_plan_create(ctx, comm, &pp, &plan);
    if (st != BURST_OK) {
        snprintf(msg, cap, "rank %d: --weights auto: burst_plan_create failed: %s: %s", rank,
                 burst_status_str(st), burst_last_error());
        return st;
    }
    for (int i = 0; i < p->ranks; i++) {
        lens[i] = burst_plan_shard_len(plan, i);
        speeds[i] = burst_plan_rank_speed(plan, i);
        speeds[p->ranks + i] = burst_plan_shard_speed(plan, i);
    }
    burst_plan_destroy(plan);
    return BURST_OK;
}

struct measure_run {
    const struct job_params *p;
    struct burst_local_world *world;
    struct burst_context *ctx;
    int rank;
    int64_t *lens;
    double *speeds;
    burst_status_t st;
    char msg[512];
};

static void *measure_thread(void *arg)
{
    struct measure_run *m = arg;
    struct burst_comm_params cp = burst_comm_params_default();
    struct burst_comm *comm = NULL;
    cp.rank = m->rank;
    cp.size = m->p->ranks;
    cp.world = m->world;
    m->st = burst_comm_create(&cp, &comm);
    if (m->st != BURST_OK)
        snprintf(m->msg, sizeof(m->msg), "rank %d: burst_comm_create: %s", m->rank,
                 burst_last_error());
    else
        m->st = job_measure_lens(m->p, m->rank, comm, m->ctx, m->lens, m->speeds, m->msg,
                                 sizeof(m->msg));
    burst_comm_destroy(comm);
    return NULL;
}

/* Threads: every rank measures on its own context, concurrently, over an in-process ring. */
int job_measure_threads(const struct job_params *p, struct burst_context *const *ctxs,
                        int64_t *lens, double *speeds, struct job_result *r)
{
    int G = p->ranks, started = 0;
    struct measure_run *m = calloc((size_t)G, sizeof(*m));
    pthread_t *th = calloc((size_t)G, sizeof(*th));
    int64_t *all = calloc((size_t)G * (size_t)G, sizeof(int64_t));
    double *sp = calloc((size_t)G * 2 * (size_t)G, sizeof(double));
    struct burst_local_world *world = NULL;
    if (!m || !th || !all || !sp || burst_local_world_create(G, &world) != BURST_OK) {
        job_set_msg(r, JOB_EFAIL, "--weights auto: cannot set up the measuring ring");
        goto out;
    }
    for (int rk = 0; rk < G; rk++) {
        m[rk] = (struct measure_run){p,
                                     world,
                                     ctxs[rk],
                                     rk,
                                     all + (size_t)rk * (size_t)G,
                                     sp + (size_t)rk * 2 * (size_t)G,
                                     BURST_OK,
                                     ""};
        if (pthread_create(&th[rk], NULL, measure_thread, &m[rk]) != 0)
            break;
        started++;
    }
    for (int rk = 0; rk < started; rk++)
        pthread_join(th[rk], NULL);
    if (started < G)
        job_set_msg(r, JOB_EFAIL, "--weights auto: could not start %d threads", G);
    for (int rk = 0; rk < started && !r->status; rk++)
        if (m[rk].st != BURST_OK)
            job_set_msg(r, JOB_EFAIL, "%s", m[rk].msg);
    if (!r->status) {
        memcpy(lens, all, sizeof(int64_t) * (size_t)G);
        memcpy(speeds, sp, sizeof(double) * 2 * (size_t)G);
    }
out:
    burst_local_world_destroy(world);
    free(m);
    free(th);
    free(all);
    free(sp);
    return r->status ? -1 : 0;
}
