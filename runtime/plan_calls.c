/*
 * runtime/plan_calls.c - the bracket of every collective call (begin, per-step compute and wait
 * times, end, failure) and the clock the engine times with.
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

/* ---- helpers shared by the ring engine ---- */

double burst_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

burst_status_t burst_call_entry(const char *who, const struct burst_plan *plan)
{
    burst_error_clear();
    if (!plan)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: plan is NULL", who);
    return burst_comm_check(plan->comm);
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
    if (st != BURST_OK && BURST_OPS_HAS(ops, stream.sync)) {
        /* a failed call may leave device work queued (the device step timeline and head groups
         * sync only at the end): let it finish before the scratch is handed back, keeping the
         * message of the failure */
        char msg[512];
        snprintf(msg, sizeof(msg), "%s", burst_last_error());
        (void)ops->stream.sync(plan->ctx->be);
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

uint32_t burst_call_next_seq(struct burst_plan *plan)
{
    return ++plan->comm->seq;
}
