/*
 * runtime/cpu/cpu_pool.h - the cpu backend's thread pool (private).
 *
 * A fixed set of worker threads and a parallel-for. The thread that calls
 * burst_cpu_pool_run() works on its own job too, so a pool of n threads starts n - 1 workers.
 * Any number of threads may submit jobs at the same time: each caller always makes progress on
 * its own job (workers help whichever job was queued first), so concurrent submissions never
 * deadlock, even on a one-thread pool.
 *
 * Which thread runs which item is not deterministic; callers make every item's result
 * independent of that (items write disjoint outputs).
 */
#ifndef BURST_CPU_POOL_H
#define BURST_CPU_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "burst/status.h"

struct burst_cpu_pool;

/*
 * One work item. scratch points to scratch_bytes (as passed to run) of 64-byte aligned memory
 * owned by the running thread for the duration of the job; its content is unspecified.
 */
typedef void (*burst_cpu_task_fn)(void *ctx, int64_t item, void *scratch);

/* Start nthreads - 1 workers (nthreads >= 1). BURST_ERR_NO_MEMORY / BURST_ERR_INTERNAL. */
burst_status_t burst_cpu_pool_create(int nthreads, struct burst_cpu_pool **pool_p);

/* Join the workers and free the pool. No job may be running. NULL accepted. */
void burst_cpu_pool_destroy(struct burst_cpu_pool *pool);

/* Threads that compute (workers + the calling thread). */
int burst_cpu_pool_size(const struct burst_cpu_pool *pool);

/*
 * Run fn(ctx, i, scratch) for every i in [0, n_items) and return when all have finished.
 * Blocks; thread-safe. Fails with BURST_ERR_NO_MEMORY when a thread could not get its scratch
 * (the outputs are then incomplete).
 */
burst_status_t burst_cpu_pool_run(struct burst_cpu_pool *pool, int64_t n_items,
                                  size_t scratch_bytes, burst_cpu_task_fn fn, void *ctx);

#endif /* BURST_CPU_POOL_H */
