/* runtime/timeline.c - the per-step clock of one ring call (see timeline.h). */
#include "timeline.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"

void burst_tl_begin(struct burst_timeline *tl, struct burst_plan *plan, burst_phase_t phase)
{
    const struct burst_backend_ops *ops = plan->ctx->ops;
    *tl = (struct burst_timeline){.plan = plan, .phase = phase};
    tl->device = BURST_OPS_HAS(ops, stream.time_mark) && BURST_OPS_HAS(ops, stream.time_elapsed) &&
                 BURST_OPS_HAS(ops, stream.time_release) && plan->direct && !plan->staged &&
                 !burst_set_long(&plan->ctx->set, BURST_SET_STEP_SYNC);
}

void burst_tl_break(struct burst_timeline *tl)
{
    tl->prev = NULL;
}

burst_status_t burst_tl_kernel_begin(struct burst_timeline *tl)
{
    if (!tl->device) {
        tl->t = burst_now();
        return BURST_OK;
    }
    if (tl->nmarks == tl->cap) {
        int cap = tl->cap ? 2 * tl->cap : 16;
        struct tl_mark *m = realloc(tl->marks, (size_t)cap * sizeof(*m));
        if (!m)
            return burst_error(BURST_ERR_NO_MEMORY, "ring: out of memory (step timeline)");
        tl->marks = m;
        tl->cap = cap;
    }
    struct tl_mark *m = &tl->marks[tl->nmarks];
    *m = (struct tl_mark){.prev = tl->prev, .prev_step = tl->prev_step};
    const struct burst_backend_ops *ops = tl->plan->ctx->ops;
    burst_status_t st = ops->stream.time_mark(tl->plan->ctx->be, &m->start);
    tl->nmarks++; /* released by finish, even half made */
    return st;
}

burst_status_t burst_tl_kernel_end(struct burst_timeline *tl, int step, burst_status_t st)
{
    const struct burst_backend_ops *ops = tl->plan->ctx->ops;
    void *be = tl->plan->ctx->be;
    if (!tl->device) {
        if (st == BURST_OK && BURST_OPS_HAS(ops, stream.sync))
            st = ops->stream.sync(be);
        burst_call_compute(tl->plan, tl->phase, step, burst_now() - tl->t);
        return st;
    }
    struct tl_mark *m = &tl->marks[tl->nmarks - 1];
    m->step = step;
    burst_status_t sm = ops->stream.time_mark(be, &m->end);
    tl->prev = m->end;
    tl->prev_step = step;
    return st != BURST_OK ? st : sm;
}

void burst_tl_wait(struct burst_timeline *tl, int step, double seconds)
{
    if (!tl->device)
        burst_call_wait(tl->plan, tl->phase, step, seconds);
}

void burst_tl_finish(struct burst_timeline *tl, burst_status_t st)
{
    const struct burst_backend_ops *ops = tl->plan->ctx->ops;
    void *be = tl->plan->ctx->be;
    for (int i = 0; i < tl->nmarks; i++) {
        const struct tl_mark *m = &tl->marks[i];
        double kernel = 0.0, gap = 0.0;
        if (st == BURST_OK && m->start && m->end &&
            ops->stream.time_elapsed(be, m->start, m->end, &kernel) == BURST_OK) {
            if (m->prev && ops->stream.time_elapsed(be, m->prev, m->start, &gap) != BURST_OK)
                gap = 0.0;
            burst_call_compute(tl->plan, tl->phase, m->step, kernel);
            burst_call_wait(tl->plan, tl->phase, m->prev_step, gap);
        }
    }
    for (int i = 0; i < tl->nmarks; i++) {
        ops->stream.time_release(be, tl->marks[i].start);
        ops->stream.time_release(be, tl->marks[i].end);
    }
    free(tl->marks);
    tl->marks = NULL;
    tl->nmarks = tl->cap = 0;
    tl->prev = NULL;
}
