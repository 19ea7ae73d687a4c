/*
 * burst/layout.h - how a sequence is spread over the ranks, and permutation helpers.
 *
 * Layouts (burst_layout_t, see burst/plan.h), for N tokens over G ranks:
 *   natural  rank i holds a contiguous shard; shard lengths differ by at most one token
 *            (the first N mod G ranks hold one more).
 *   zigzag   the sequence is cut into 2G chunks (the first N mod 2G chunks one token longer);
 *            rank i holds chunk i followed by chunk 2G-1-i. Balances causal work. With packed
 *            documents the chunks follow the work instead (burst_layout_plan_* below).
 *   striped  token t lives on rank t mod G, in increasing order.
 * In every layout a rank's local rows have strictly increasing global positions.
 *
 * Uneven shards (burst_plan_params.shard_lens or .shard_weights, e.g. ranks of different speed)
 * generalise each layout to lengths n_i, with at most two runs of rows per rank:
 *   natural  rank i holds a contiguous shard of n_i tokens, in rank order (n_i >= 1);
 *   zigzag   chunk i holds the first ceil(n_i/2) rows of rank i and chunk 2G-1-i the last
 *            floor(n_i/2) (n_i >= 2); chunks are laid out 0, 1, ..., 2G-1. Causal work of rank i
 *            stays about n_i * N / 2: proportional to its shard, so speed-sized shards balance;
 *   striped  with m = min n_i, rank i holds i, i+G, ..., i+(m-1)G, then its n_i - m extra tokens
 *            as one contiguous run after position G*m, in rank order (n_i >= 1). Lengths that
 *            are equal, or differ by one with the longer shards first, give the even layout.
 *            Causal balance holds in the striped part only; prefer zigzag for uneven causal work.
 * The *_lens functions below take such lengths (lens[ranks], summing to seq_len; NULL = even).
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

/*
 * Shard lengths proportional to weights[ranks] (each finite, > 0): lens_p[ranks] receives
 * n_i, summing to seq_len. Rounding rule: quota q_i = seq_len * w_i / sum(w); n_i =
 * max(floor(q_i), min) with min = 2 for zigzag, else 1; then single tokens go to the largest
 * remainders q_i - n_i (or come back from the smallest, among shards above min) until the sum
 * is seq_len; ties go to the lower rank. Deterministic: every rank computes the same lengths
 * from the same weights. The kernels need no coarser granularity. Since API 0.2.
 */
BURST_API burst_status_t burst_layout_weighted_lens(burst_layout_t layout, int64_t seq_len,
                                                    int ranks, const double *weights,
                                                    int64_t *lens_p);

/* burst_layout_position for explicit shard lengths lens[ranks] (NULL = even). Since API 0.2. */
BURST_API burst_status_t burst_layout_position_lens(burst_layout_t layout, int64_t seq_len,
                                                    int ranks, const int64_t *lens, int rank,
                                                    int64_t local, int64_t *pos_p);

/* burst_layout_permute / _unpermute for explicit shard lengths lens[ranks] (NULL = even). The
 * permuted order is rank 0's n_0 rows, then rank 1's n_1 rows, ... Since API 0.2. */
BURST_API burst_status_t burst_layout_permute_lens(burst_layout_t layout, int ranks,
                                                   const int64_t *lens,
                                                   const struct burst_tensor *natural,
                                                   struct burst_tensor *permuted);
BURST_API burst_status_t burst_layout_unpermute_lens(burst_layout_t layout, int ranks,
                                                     const int64_t *lens,
                                                     const struct burst_tensor *permuted,
                                                     struct burst_tensor *natural);

/*
 * The shards a plan of `params` makes on `ranks` ranks, for callers that place their tokens
 * before creating it. They follow every plan parameter that moves tokens: layout, seq_len,
 * shard_lens, shard_weights, and with packed documents (doc_lens, num_docs > 1) the mask
 * (causal, window_left, window_right) and the documents: with documents, zigzag cuts its 2G
 * chunks by the allowed (query, key) pairs instead of token counts, so that every rank gets the
 * same share of the work (shard_weights: its weight's share), counted at its queries and, as
 * far as that allows, at its keys, each chunk holding >= 1 token; rank i still holds chunk i
 * then chunk 2G-1-i, and a rank's shard length is no longer a function of the token counts
 * alone. Natural and striped keep their token split with
 * documents. Shards measured by measure_speed are known only to the plan: refused here (use
 * burst_plan_shard_len and burst_plan_position). params is validated as burst_plan_create
 * validates it (errors name the field). Since API 0.5.
 *   burst_layout_plan_lens      lens_p[ranks] receives every rank's shard length; the permuted
 *                               order (below) lays them end to end in rank order;
 *   burst_layout_plan_position  global position of local row `local` of rank `rank`;
 *   burst_layout_plan_positions positions_p[lens[rank]] receives the global positions of every
 *                               local row of rank `rank` at once (increasing);
 *   burst_layout_plan_permute / _unpermute  as burst_layout_permute, with shape[1] == seq_len.
 */
BURST_API burst_status_t burst_layout_plan_lens(const struct burst_plan_params *params, int ranks,
                                                int64_t *lens_p);
BURST_API burst_status_t burst_layout_plan_position(const struct burst_plan_params *params,
                                                    int ranks, int rank, int64_t local,
                                                    int64_t *pos_p);
BURST_API burst_status_t burst_layout_plan_positions(const struct burst_plan_params *params,
                                                     int ranks, int rank, int64_t *positions_p);
BURST_API burst_status_t burst_layout_plan_permute(const struct burst_plan_params *params,
                                                   int ranks, const struct burst_tensor *natural,
                                                   struct burst_tensor *permuted);
BURST_API burst_status_t burst_layout_plan_unpermute(const struct burst_plan_params *params,
                                                     int ranks, const struct burst_tensor *permuted,
                                                     struct burst_tensor *natural);

#ifdef __cplusplus
}
#endif

#endif /* BURST_LAYOUT_H */
