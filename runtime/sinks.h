/*
 * runtime/sinks.h - attention sinks in the engine (ALGORITHM.md section 5a).
 *
 * A sink is one more score per query head, in every row's softmax, with a zero value vector.
 * The forward starts each row's running log-sum-exp at its head's sink instead of -inf (and the
 * running output at 0): the merge of ALGORITHM.md section 1 then adds the sink to the row's
 * denominator exactly, and o and lse come out as the softmax with the sink, on every backend,
 * without any kernel knowing. The backward kernels need nothing either (given the final lse,
 * P of the keys is unchanged and the sink's dP is 0); the sinks' gradient is
 *     dsinks[h] = -sum over batch and rows of exp(sinks[h] - lse) * D,   D = rowsum(dO * O),
 * taken from the call's lse and the engine's D on each rank, then summed over the ranks.
 */
#ifndef BURST_SINKS_H
#define BURST_SINKS_H

#include "plan_internal.h"

/* BURST_ERR_INVALID_ARG naming who and the argument unless sinks is non-NULL, num_sinks equals
 * the plan's q_heads and every sink is finite. */
burst_status_t burst_sinks_check(const char *who, const struct burst_plan *plan, const float *sinks,
                                 int64_t num_sinks);

/* lse_acc [B, hg->nq, n] (backend memory) = the sinks of the group's heads, row by row. */
burst_status_t burst_sinks_init_lse(const struct burst_plan *plan, const struct burst_hgroup *hg,
                                    const float *sinks, float *lse_acc);

/* acc[hg->q0 + h] += -sum over b, i of exp(sinks[hg->q0 + h] - lse[b, h, i]) * delta[b, h, i],
 * lse and delta [B, hg->nq, n] in backend memory (read after the backend's queued work). */
burst_status_t burst_sinks_grad_local(struct burst_plan *plan, const struct burst_hgroup *hg,
                                      const float *sinks, const float *lse, const float *delta,
                                      double *acc);

/* COLLECTIVE (every rank of a call with sinks): dsinks[h] = the sum over ranks of acc[h], in
 * rank order (the same bits on every rank); tag sequence seq. */
burst_status_t burst_sinks_grad_reduce(struct burst_plan *plan, uint32_t seq, const double *acc,
                                       float *dsinks);

#endif /* BURST_SINKS_H */
