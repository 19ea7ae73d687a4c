/*
 * runtime/timeline.h - the per-step clock of one ring call (private).
 *
 * Two ways to time a call's step kernels, chosen per call:
 *   host    (every backend): the engine synchronises the host after each step kernel and
 *           times it with the host clock; the time then blocked on the step's transfers is the
 *           step's wait.
 *   device  (backends with time_mark, on plans whose every transfer goes device to device:
 *           plan->direct and not staged): the step kernel is bracketed by device markers and
 *           the host does not synchronise: it posts the next step's transfers and queues its
 *           kernel while this one runs, each transfer ordered after the kernels it must follow
 *           by the transport's marks (transport.h, burst_tp_devops). Host waits are then for
 *           copies, not for kernels. When the call has synchronised at its end, a step's compute
 *           is its kernel's device time and its wait the device's idle time between its kernel
 *           and the next step kernel of the same ring, which waited for this step's transfers:
 *           the transfer time that was not hidden (plus the engine's short kernels in between:
 *           fills, accumulations).
 * BURST_STEP_SYNC=1 forces the host clock (the device timeline's baseline in benchmarks).
 */
#ifndef BURST_RUNTIME_TIMELINE_H
#define BURST_RUNTIME_TIMELINE_H

#include "plan_internal.h"

struct burst_timeline {
    struct burst_plan *plan;
    burst_phase_t phase;
    int device;    /* device markers instead of a host sync per step */
    double t;      /* host: start of the current kernel */
    void *prev;    /* device: the end marker of the previous kernel of this ring, or NULL */
    int prev_step; /* device: its step */
    int nmarks;    /* device: markers held */
    struct tl_mark {
        void *start, *end; /* around the kernel of step `step` */
        void *prev;        /* end marker of the previous kernel of the same ring, or NULL */
        int step, prev_step;
    } * marks;
    int cap;
};

/* Choose the clock of a call of `phase` on plan. */
void burst_tl_begin(struct burst_timeline *tl, struct burst_plan *plan, burst_phase_t phase);

/* A new ring (head group) starts: the gap before its first kernel is not a transfer wait. */
void burst_tl_break(struct burst_timeline *tl);

/* Around the step kernel of step `step`: kernel_begin just before it is queued; kernel_end right
 * after it (and after burst_blocks_start). kernel_end synchronises the host in host mode and
 * accounts the compute time; returns the first failure of st and its own. */
burst_status_t burst_tl_kernel_begin(struct burst_timeline *tl);
burst_status_t burst_tl_kernel_end(struct burst_timeline *tl, int step, burst_status_t st);

/* Host seconds the engine spent blocked on step `step`'s transfers (host mode accounts them). */
void burst_tl_wait(struct burst_timeline *tl, int step, double seconds);

/* After the call's last synchronisation (or on failure): account the device timeline when the
 * call succeeded, release every marker. */
void burst_tl_finish(struct burst_timeline *tl, burst_status_t st);

#endif /* BURST_RUNTIME_TIMELINE_H */
