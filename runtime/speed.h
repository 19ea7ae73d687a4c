/*
 * runtime/speed.h - a rank's measured attention speed, for shards sized by speed (private).
 *
 * burst_plan_params.measure_speed: each rank times a local forward step of the plan's heads,
 * head dim and dtype (n query rows against as many keys, full mask) on its own context, once
 * untimed and then until SPEED_MIN_S has passed (at least SPEED_MIN_REPS times, at most
 * SPEED_MAX_REPS). n starts at SPEED_ROWS and doubles while one step takes less than
 * SPEED_STEP_S, up to the equal shard N / G (at most SPEED_MAX_ROWS): on a GPU a 256-row step
 * is mostly launch overhead (an H200 measured 1.4e10 rows x keys x heads / s there, a fraction
 * of its rate on real blocks), while a CPU reaches the step time at a few hundred rows. The plan exchanges the rates in its handshake and sizes the shards
 * by them. Zero-filled inputs: the kernels' speed does not depend on the values.
 */
#ifndef BURST_RUNTIME_SPEED_H
#define BURST_RUNTIME_SPEED_H

#include "plan_internal.h"

#define BURST_SPEED_ROWS 256
#define BURST_SPEED_MAX_ROWS 8192
#define BURST_SPEED_STEP_S 0.005
#define BURST_SPEED_MIN_S 0.02
#define BURST_SPEED_MIN_REPS 2
#define BURST_SPEED_MAX_REPS 50

/* Rows x keys x query heads per second of ctx's forward kernel for the plan p on a ring of
 * `ranks` (> 0 on success). Errors name `who`. */
burst_status_t burst_speed_measure(struct burst_context *ctx, const struct burst_plan_params *p,
                                   int ranks, const char *who, double *speed_p);

#endif /* BURST_RUNTIME_SPEED_H */
