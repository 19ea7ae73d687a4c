/*
 * burst/layout.h - how a sequence is spread over the ranks, and permutation helpers.
 *
 * Layouts (burst_layout_t, see burst/plan.h), for N tokens over G ranks:
 *   natural  rank i holds a contiguous shard; shard lengths differ by at most one token
 *            (the first N mod G ranks hold one more).
 *   zigzag   the sequence is cut into 2G chunks (the first N mod 2G chunks one token longer);
 *            rank i holds chunk i followed by chunk 2G-1-i. Balances causal work.
 *   striped  token t lives on rank t mod G, in increasing order.
 * In every layout a rank's local rows have strictly increasing global positions.
 *
 * The "permuted" order of a global tensor is the concatenation of rank 0's shard, rank 1's
 * shard, ...: exactly what the ranks hold, laid end to end. permute() maps natural order to
 * permuted order, unpermute() maps back. Both work on [B, N, H, d] tensors along dimension 1
 * with any strides; for an lse array [B, H, N] describe it as a tensor of shape [B, N, H, 1]
 * with strides {H*N, 1, N, 1}.
 *
 * All functions are pure, thread-safe, and write outputs only on success.
 */
#ifndef BURST_LAYOUT_H
#define BURST_LAYOUT_H

#include "burst/export.h"

#include <stdint.h>

#include "burst/plan.h"
#include "burst/status.h"
#include "burst/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of tokens rank `rank` holds. Errors: ranks < 1, rank out of range, seq_len < ranks
 * (natural, striped) or < 2*ranks (zigzag), unknown layout. */
BURST_API burst_status_t burst_layout_shard_len(burst_layout_t layout, int64_t seq_len, int ranks,
                                                int rank, int64_t *len_p);

/* Global position of local row `local` of rank `rank`. */
BURST_API burst_status_t burst_layout_position(burst_layout_t layout, int64_t seq_len, int ranks,
                                               int rank, int64_t local, int64_t *pos_p);

/* Offset of rank's shard in the permuted order (sum of the lengths of ranks before it). */
BURST_API burst_status_t burst_layout_shard_offset(burst_layout_t layout, int64_t seq_len,
                                                   int ranks, int rank, int64_t *offset_p);

/* natural -> permuted. src and dst must have equal dtype and shape, shape[1] == seq_len, and
 * must not overlap. */
BURST_API burst_status_t burst_layout_permute(burst_layout_t layout, int ranks,
                                              const struct burst_tensor *natural,
                                              struct burst_tensor *permuted);

/* permuted -> natural. Same requirements. */
BURST_API burst_status_t burst_layout_unpermute(burst_layout_t layout, int ranks,
                                                const struct burst_tensor *permuted,
                                                struct burst_tensor *natural);

#ifdef __cplusplus
}
#endif

#endif /* BURST_LAYOUT_H */
