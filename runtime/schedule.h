/*
 * runtime/schedule.h - shards and the ring schedule, as pure functions (private).
 *
 * The ring engine executes exactly what burst_sched_step() says; tests simulate the same
 * function for thousands of ranks to prove coverage (every allowed (query, key) pair computed
 * once, every travelling accumulator home) without running any kernel.
 *
 * Directions. Forward and ring-backward blocks (K/V) travel to rank i+1; burst-backward query
 * bundles travel to rank i-1. Either way, at step r rank i pairs query rows of rank a with key
 * rows of rank b where a - b == r (mod G), so one window test decides how many steps a call needs
 * in every pattern.
 *
 * Travelling accumulators (backward) move "one step behind": at step r >= 1 a rank computes its
 * contribution for the block it holds into a fresh partial, then adds the accumulator the
 * previous holder finished at step r-1 (acc_from), and at step r+1 forwards the sum to the next
 * holder (acc_to of step r+1). The owner's own (step 0) contribution never travels; after the
 * last step each chain's sum goes straight to its owner (final_to / final_from).
 */
#ifndef BURST_RUNTIME_SCHEDULE_H
#define BURST_RUNTIME_SCHEDULE_H

#include <stdint.h>

#include "burst/plan.h"
#include "posmap.h"

/*
 * How N tokens are spread over G ranks. Default (even) shards follow burst/layout.h. Explicit
 * (uneven) lengths n_i generalise every layout, keeping at most two runs per rank:
 *   natural  rank i holds [sum_{j<i} n_j, + n_i);
 *   zigzag   chunk i = the first ceil(n_i / 2) rows, chunk 2G-1-i = the last floor(n_i / 2);
 *            chunks laid in the order 0, 1, ..., 2G-1 (so n_i >= 2). A rank's causal work is
 *            about n_i * N / 2, proportional to its shard: balance survives uneven shards;
 *   striped  with m = min n_i, rank i holds positions i, i + G, ..., i + (m-1) G (the striped
 *            part, G m tokens) and then n_i - m consecutive positions after G m, in rank order
 *            (the tail). Equal lengths, or lengths differing by one where the longer come
 *            first, give exactly the even striped layout; causal balance holds in the striped
 *            part only (tail rows attend to more keys), so zigzag balances uneven shards better.
 */
struct burst_shards {
    burst_layout_t layout;
    int ranks;
    int64_t seq_len;
    int64_t *lens;             /* [ranks] tokens per rank */
    int64_t *offsets;          /* [ranks] prefix sums of lens (permuted order) */
    struct burst_posmap *maps; /* [ranks] positions of each rank's rows */
};

/* Fill s for the layout; explicit_lens (any layout, >= burst_shards_min_len each) may be NULL
 * for the even shards. On error s is untouched and the message names `who` and the value. */
burst_status_t burst_shards_init(struct burst_shards *s, const char *who, burst_layout_t layout,
                                 int64_t seq_len, int ranks, const int64_t *explicit_lens);
void burst_shards_fini(struct burst_shards *s);

/* Zigzag shards from explicit chunk boundaries bounds[2 ranks + 1] (bounds[0] = 0 < bounds[1] <
 * ... < bounds[2 ranks] = seq_len): rank i holds chunks i and 2 ranks - 1 - i, [bounds[c],
 * bounds[c + 1]). The work-balanced zigzag of documents (balance.h). */
burst_status_t burst_shards_init_chunks(struct burst_shards *s, const char *who, int64_t seq_len,
                                        int ranks, const int64_t *bounds);

/* Fewest rows an explicit shard may have in a layout: 2 for zigzag (two chunks), else 1. */
int64_t burst_shards_min_len(burst_layout_t layout);

/*
 * Shard lengths proportional to weights (> 0, finite): the rounding rule. Quota q_i =
 * N w_i / sum w; n_i = max(floor(q_i), min_len); then one token at a time to the rank with the
 * largest q_i - n_i while the sum is short (taken from the smallest q_i - n_i among ranks above
 * min_len while it is over), ties to the lower rank. Pure and deterministic: ranks given the same
 * weights compute the same lengths. Kernels need no row granularity (any n_i >= 1 works on
 * every backend), so min_len is the only constraint. Errors name `who`.
 */
burst_status_t burst_shards_weighted_lens(const char *who, burst_layout_t layout, int64_t seq_len,
                                          int ranks, const double *weights, int64_t *lens);

struct burst_posmap burst_shards_posmap(const struct burst_shards *s, int rank);

/* Mask from plan parameters (causal folded into the right bound). */
struct burst_mask burst_mask_make(int causal, int64_t window_left, int64_t window_right);

/* Nonzero when some query row of rank qrank may attend some key row of rank krank, documents
 * included (exact for runs of stride 1 meeting up to 4096 documents; conservative for striped
 * rows under a window or with documents, and past that many documents: may say yes where every
 * element is masked). */
int burst_block_needed(const struct burst_shards *s, struct burst_mask mask, int qrank, int krank);

/* The local rows [*lo, *hi) of rank j that a pair with a row of another rank may involve, j's
 * rows on the query side of mask (swap the mask's sides, burst_mask_swap, for j's rows as
 * keys). Per document, a run's rows [a, b] there pair only with positions of the document in
 * [a - left, b + right]; the rows are taken whole when that interval holds a position of another
 * rank (conservative: a superset of the rows some pair involves; past 4096 documents a run's
 * remaining rows are taken whole). The union's enclosing interval, never empty: a block no other
 * rank needs keeps its first row. */
void burst_block_span(const struct burst_shards *s, struct burst_mask mask, int j, int64_t *lo,
                      int64_t *hi);

/* mask with its sides swapped: the queries that may attend a key, as the keys of a query. */
struct burst_mask burst_mask_swap(struct burst_mask mask);

/* Ring steps a call needs: 1 + the largest r such that some rank a needs block (a - r). */
int burst_ring_steps(const struct burst_shards *s, struct burst_mask mask);

/* The same on the two-level ring of `local` ranks per node: 1 + the largest r at which some rank
 * needs the block it holds (burst_sched_block; the same r for every pattern). */
int burst_ring_steps2(const struct burst_shards *s, struct burst_mask mask, int local);

enum burst_sched_pattern {
    BURST_SCHED_FWD = 0,       /* K/V travel to i+1 */
    BURST_SCHED_BWD_BURST = 1, /* query bundle travels to i-1; dQ accumulator follows */
    BURST_SCHED_BWD_RING = 2,  /* K/V travel to i+1; dK/dV accumulators follow */
};

/*
 * Two-level ring (ALGORITHM.md section 4): the G ranks form M = G / L nodes of L consecutive
 * ranks. Step r = t L + s is step s of round t. During round t the L blocks that started on node
 * (m - t) circulate over the local ring of node m (L - 1 local hops); at the first step of each
 * round every rank also forwards the block it holds (the round's first) to the same local index
 * on the next node, and that transfer has the whole round to complete. L = G is the flat ring;
 * L = 1 is the flat ring with every hop "inter-node".
 */
struct burst_sched_step {
    int block;           /* owner of the travelling block held at this step */
    int q_rank;          /* owner of the query rows paired at this step */
    int kv_rank;         /* owner of the key/value rows paired at this step */
    int compute;         /* nonzero: the pair has allowed entries; run the kernel */
    int send_to;         /* local ring: send the held block here during this step (-1: none) */
    int recv_from;       /* local ring: receive the next step's block from here (-1: none) */
    int inter_send_to;   /* first step of a round: send the held block to the next node (-1) */
    int inter_recv_from; /* first step of a round: receive the next round's first block (-1) */
    int round_last;      /* last step of a round: the inter-node transfers complete here */
    /* backward only (-1 when not applicable): */
    int acc_to;     /* send the accumulator finished at step-1 here during this step */
    int acc_from;   /* receive the accumulator for `block` from here; add it after computing */
    int final_to;   /* last step only: after it, send the accumulator for `block` to its owner */
    int final_from; /* last step only: receive this rank's own accumulator from here */
};

/* The schedule of rank `rank` at step `step` (0 <= step < steps) of a call with `steps` steps,
 * on the flat ring. */
void burst_sched_step(enum burst_sched_pattern pattern, const struct burst_shards *s,
                      struct burst_mask mask, int rank, int step, int steps,
                      struct burst_sched_step *out);

/* The same on the two-level ring of `local` ranks per node (local divides the ranks). */
void burst_sched_step2(enum burst_sched_pattern pattern, const struct burst_shards *s,
                       struct burst_mask mask, int local, int rank, int step, int steps,
                       struct burst_sched_step *out);

/* Owner of the block rank `rank` holds at `step`, and the rank holding block `block` then. */
int burst_sched_block(enum burst_sched_pattern pattern, int ranks, int local, int rank, int step);
int burst_sched_holder(enum burst_sched_pattern pattern, int ranks, int local, int block, int step);

#endif /* BURST_RUNTIME_SCHEDULE_H */
