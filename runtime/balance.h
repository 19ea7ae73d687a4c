/*
 * runtime/balance.h - shards as a plan makes them, and the work-balanced zigzag of packed
 * documents (private).
 *
 * With documents (burst_plan_params.doc_lens, more than one) the allowed pairs of a query
 * position form a sawtooth (causal) or a staircase (full attention within each document), so
 * the even zigzag of one long sequence no longer balances the work. The zigzag layout then cuts
 * the sequence into its 2G chunks by the work of each position, counted two ways: wq(p), the
 * keys the mask allows query position p (documents, causal, window), is the forward's work and
 * that of the ring backward, whose steps run where the queries live; wk(p), the queries that may
 * attend key position p, is the burst backward's, whose steps run where the keys live. Rank i
 * keeps chunks i and 2G-1-i (its share of the work is weights[i] / sum weights; equal weights
 * without shard_weights), so a rank still holds at most two runs of increasing positions and
 * the ring engine, the posmaps and the kernels are unchanged; only the shards are uneven. The
 * cuts go from the outside in: rank i, given the boundaries of ranks < i, takes its share of
 * the work left between them (weights[i] over the weights of ranks >= i) through a front cut
 * b_{i+1} and a back cut b_{2G-1-i} whose wq is within max_p wq(p) / 2 of that share, and among
 * those pairs the one whose wk is nearest its share of the key work left; the last rank takes
 * the middle. A rank's query work is then within (1 + H_{G-1}) max_p wq(p) / 2 of its share
 * (H: harmonic number; ALGORITHM.md section 5). The key work is as near as those cuts allow:
 * with two ranks and documents of a few hundred tokens both are balanced; with many ranks and
 * few documents the key work can stay uneven.
 * Natural and striped keep their token split with documents (ALGORITHM.md section 5).
 */
#ifndef BURST_RUNTIME_BALANCE_H
#define BURST_RUNTIME_BALANCE_H

#include <stdint.h>

#include "burst/plan.h"
#include "schedule.h"

/* The document table of validated params: ndocs + 1 global boundaries (docs[0] = 0, docs[ndocs]
 * = seq_len) in *docs_p (malloc'd, the caller frees), or NULL when num_docs <= 1 (one document).
 * Errors name who. */
burst_status_t burst_docs_table(const char *who, const struct burst_plan_params *p,
                                int64_t **docs_p);

/* The mask of validated params with the document table docs (NULL: none). */
struct burst_mask burst_params_mask(const struct burst_plan_params *p, const int64_t *docs);

/* Allowed (query, key) pairs of query positions [p0, p1) under mask, over a sequence of n. */
int64_t burst_mask_pairs(struct burst_mask mask, int64_t n, int64_t p0, int64_t p1);

/* Chunk boundaries bounds[2 ranks + 1] of the work-balanced zigzag (above): bounds[0] = 0,
 * bounds[2G] = n, every chunk >= 1 token (n >= 2 ranks). weights NULL = equal. */
burst_status_t burst_balance_chunks(const char *who, struct burst_mask mask, int64_t n, int ranks,
                                    const double *weights, int64_t *bounds);

/*
 * The shards a plan of validated params makes on `ranks` ranks, with weights (NULL: none)
 * standing for shard_weights or measured speeds: explicit shard_lens as given; the work-balanced
 * zigzag when the layout is zigzag and there are documents (mask.ndocs > 1); otherwise the
 * layout's shards (weighted lengths when weights are given). Errors name who.
 */
burst_status_t burst_plan_shards_for(struct burst_shards *s, const char *who,
                                     const struct burst_plan_params *p, struct burst_mask mask,
                                     int ranks, const double *weights);

#endif /* BURST_RUNTIME_BALANCE_H */
