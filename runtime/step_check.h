/*
 * runtime/step_check.h - the one check of a ring step's arguments (private).
 *
 * The engine builds every step's views itself (runtime/ring_fwd.c, ring_bwd.c, speed.c) and
 * checks them here once, before it hands them to the backend (runtime/backend.h: "validated by
 * the caller"); backends take the sizes with burst_step_dims_of and check only what is theirs
 * (device limits, memory).
 */
#ifndef BURST_RUNTIME_STEP_CHECK_H
#define BURST_RUNTIME_STEP_CHECK_H

#include <stdint.h>

#include "burst/status.h"
#include "burst/tensor.h"

/* The sizes of one step: q [batch, nq, hq, d], k and v [batch, nk, hkv, d]. */
struct burst_step_dims {
    int64_t batch, nq, nk, hq, hkv, d, group; /* group = hq / hkv */
};

/* The sizes of a step whose views are valid (burst_step_check). */
void burst_step_dims_of(const struct burst_tensor *q, const struct burst_tensor *k,
                        struct burst_step_dims *dim);

/* Check one view: non-NULL with data, of a known dtype, with no negative extent and contiguous
 * rows (stride[3] == 1); else BURST_ERR_INVALID_ARG naming op, name and the value. Backends
 * use it for the views the engine does not pass through burst_step_check. */
burst_status_t burst_step_check_view(const char *op, const char *name,
                                     const struct burst_tensor *t);

/* Check the views of a step: q, k, v and (backward; NULL otherwise) dout non-NULL with data, of
 * a known dtype, with no negative extent and contiguous rows (stride[3] == 1); d a positive
 * multiple of 8; k and v of q's batch and d, of equal shapes; dout of q's shape; q heads a
 * multiple of kv heads. BURST_OK with *dim filled, else BURST_ERR_INVALID_ARG naming op, the
 * view and the value. */
burst_status_t burst_step_check(const char *op, const struct burst_tensor *q,
                                const struct burst_tensor *k, const struct burst_tensor *v,
                                const struct burst_tensor *dout, struct burst_step_dims *dim);

#endif /* BURST_RUNTIME_STEP_CHECK_H */
