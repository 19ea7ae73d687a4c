/*
 * runtime/speed.h - a rank's measured attention speed, for shards sized by speed (private).
 *
 * burst_plan_params.measure_speed: each rank times local forward steps on its own context, in
 * two rounds, each followed by an exchange of the rates and shards sized by them.
 *
 * Round 1, the rank's rate at full load: steps of the plan's heads, head dim and dtype (n query
 * rows against as many keys, full mask), once untimed and then until SPEED_MIN_S has passed (at
 * least SPEED_MIN_REPS times, at most SPEED_MAX_REPS). n starts at SPEED_ROWS and doubles while
 * one step takes less than SPEED_STEP_S, up to the equal shard N / G (at most SPEED_MAX_ROWS):
 * on a GPU a 256-row step is mostly launch overhead (an H200 measured 1.4e10 rows x keys x
 * heads / s there, a fraction of its rate on real blocks), while a CPU reaches the step time at
 * a few hundred rows. This is the speed burst_plan_rank_speed reports and the ideal of
 * burstrun uses.
 *
 * Round 2, the rank's rate on the shard round 1 gave it: steps of that many query rows (times
 * the batch, which a call runs at once; at most SPEED_SHARD_ROWS, where a GPU runs many waves
 * and the measurement's memory and time stay bounded) and one head group's heads (the ring's
 * calls run a group at a time), against keys that grow as above up to the largest shard (at
 * most SPEED_MAX_ROWS). A GPU runs a step in waves of
 * workgroups; a small shard, or few heads a call, may leave the last wave mostly empty, which
 * round 1's larger step does not show (measured: a vulkan rank given 3.6K of 64K rows by round 1,
 * bf16, 11 heads a call, computed 1.23x longer than round 1 predicted; 2 x H100). The final
 * shards follow round 2's rates (burst_plan_shard_speed). BURST_SPEED_ROUNDS=1 keeps round 1's
 * shards (for comparison; every rank must agree: the handshake compares it).
 *
 * Zero-filled inputs: the kernels' speed does not depend on the values.
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
#define BURST_SPEED_SHARD_ROWS 32768 /* round 2: at most this many query rows */

/* Round 1: rows x keys x query heads per second of ctx's forward kernel for the plan p on a
 * ring of `ranks` (> 0 on success). Errors name `who`. */
burst_status_t burst_speed_measure(struct burst_context *ctx, const struct burst_plan_params *p,
                                   int ranks, const char *who, double *speed_p);

/* Round 2: the same for steps of `rows` query rows (the rank's shard) and gkv K/V heads with
 * their query heads (a head group) against at most `keys` keys. */
burst_status_t burst_speed_measure_shard(struct burst_context *ctx,
                                         const struct burst_plan_params *p, int64_t rows,
                                         int64_t keys, int64_t gkv, const char *who,
                                         double *speed_p);

/* Rounds of measurement: 1 where the context's BURST_SPEED_ROUNDS is 1, else 2. */
int burst_speed_rounds(const struct burst_context *ctx);

#endif /* BURST_RUNTIME_SPEED_H */
