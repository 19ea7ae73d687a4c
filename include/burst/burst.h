/*
 * burst/burst.h - everything a C application needs: include this one header.
 *
 * burst computes exact attention over very long sequences spread over a ring of ranks
 * (BurstAttention). Typical use, per rank:
 *
 *   struct burst_context *ctx;            // one per process, shared by its ranks
 *   burst_context_create(NULL, &ctx);
 *   struct burst_comm *comm;              // this rank's place in the ring
 *   struct burst_comm_params cp = burst_comm_params_default();
 *   cp.rank = r; cp.size = G; cp.world = world;   // world: burst_local_world_create(G, &world)
 *   burst_comm_create(&cp, &comm);
 *   struct burst_plan_params pp = burst_plan_params_default();
 *   pp.seq_len = N; pp.q_heads = 32; pp.kv_heads = 8; pp.head_dim = 128; pp.causal = 1;
 *   pp.dtype = BURST_DTYPE_BF16; pp.layout = BURST_LAYOUT_ZIGZAG;
 *   struct burst_plan *plan;
 *   burst_plan_create(ctx, comm, &pp, &plan);       // collective
 *   burst_attention_forward(plan, &q, &k, &v, &o, lse);              // collective
 *   burst_attention_backward(plan, &q, &k, &v, &o, lse, &dout, &dq, &dk, &dv);
 *
 * See each header for ownership, blocking and thread-safety rules.
 */
#ifndef BURST_BURST_H
#define BURST_BURST_H

#include "burst/version.h"
#include "burst/status.h"
#include "burst/tensor.h"
#include "burst/context.h"
#include "burst/comm.h"
#include "burst/plan.h"
#include "burst/layout.h"
#include "burst/kvcache.h"
#include "burst/log.h"

#endif /* BURST_BURST_H */
