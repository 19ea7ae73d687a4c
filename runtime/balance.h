/*
 * runtime/balance.h - shards as a plan makes them, and the work-balanced zigzag of packed
 * documents (private).
 *
 * With documents (burst_plan_params.doc_lens, more than one) the allowed pairs of a query
 * position form a sawtooth (causal) or a staircase (full attention within each document), so
 * the even zigzag of one long sequence no longer balances the work. The zigzag layout then cuts
 * the sequence into its 2G chunks at quantiles of the work: w(p) is the number of keys the mask
 * allows query position p (documents, causal, window), W(b) = sum_{p < b} w(p), and the chunk
 * boundaries b_1 < ... < b_{2G-1} are the positions whose W is nearest the targets. Rank i keeps
 * chunks i and 2G-1-i (its share of the work is weights[i] / sum weights, split equally over
 * its two chunks; equal weights without shard_weights), so a rank still holds at most two runs
 * of increasing positions and the ring engine, the posmaps and the kernels are unchanged; only
 * the shards are uneven. Each boundary misses its target by at most max_p w(p) / 2 (rounded to
 * the nearest position), so a rank's work is within 2 max_p w(p) of its share.
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
