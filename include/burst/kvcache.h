/*
 * burst/kvcache.h - long-context inference: a sharded, paged key/value cache with ring prefill
 * and decode.
 *
 * The cache holds, for a batch of sequences, the keys and values (the Hkv key/value heads of
 * GQA, not the query heads) of every token seen so far, SHARDED over the G ranks of a
 * communicator: each token's K/V row lives on exactly one rank. Each rank stores its shard in
 * a pool of fixed-size blocks (block_len tokens each) in backend memory; a sequence owns a list
 * of blocks (its block table), so appending a token never moves data, and blocks freed by
 * burst_kvcache_reset return to the pool.
 *
 * Two collective calls fill and use it (every rank of the communicator enters each one):
 *
 *   burst_prefill  the causal attention of a prompt, or of one chunk of a longer prompt, given
 *                  sharded like a plan's sequence (each rank passes its layout shard of the
 *                  chunk's Q, K, V; burst/layout.h). The chunk's queries attend the keys
 *                  already cached for the sequence and, causally, the chunk itself (the ring
 *                  forward of burst/plan.h). Each rank then stores the K/V rows of its shard.
 *   burst_decode   t new tokens (t = 1, or t > 1 for speculative decoding) of each of B
 *                  sequences, REPLICATED on every rank: every rank attends the new queries to
 *                  its shard of the cache, and one allgather of the partial outputs and
 *                  log-sum-exps (size G x B x t x Hq x (d + 1) floats, independent of the
 *                  context length) merges them. Every rank receives the same output: attention
 *                  of the new tokens over the whole context plus, causally, themselves.
 *
 * Where new K/V rows go (deterministic, the same decision on every rank with no communication):
 * a prefill chunk's rows stay on the rank whose layout shard holds them (so the layout's
 * balance is the cache's); all t tokens of one decode call for a sequence go to the rank that
 * holds the fewest of that sequence's keys, ties to the lowest rank. Cached keys are all older
 * than any later query, so the order of rows within a shard does not matter.
 *
 * Results equal single-device attention over the whole context, up to rounding (fp32
 * arithmetic in the kernels, the log-sum-exp merge in fp64).
 *
 * Errors and the cache's state: every call checks its arguments before it changes anything.
 * Errors that every rank decides alike from the replicated state (a sequence id out of range,
 * a chunk or t larger than the blocks left on the rank that would store it, a decode of a
 * sequence with nothing cached) are returned on every rank with the same message and leave both
 * the cache and the communicator as they were. Errors only this rank can see (a tensor of the
 * wrong shape, memory) abort the communicator so that peers return BURST_ERR_PEER_FAILED
 * instead of waiting, as the plan's calls do. A call that fails after its checks (a peer, the
 * transport, the device) leaves the cache's contents as they were too: new rows are committed
 * only when the call succeeds.
 *
 * A failure after the exchanges (a device or memory error while this rank writes its output
 * or its new rows) may leave this rank's view of the shards unlike its peers', which returned
 * BURST_OK: after any failed prefill or decode other than the shared errors above, destroy the
 * cache on every rank (and, when the communicator was aborted, the communicator).
 *
 * Thread-safety: a cache belongs to one rank; its calls must not run concurrently with each
 * other or with other collective calls on the same communicator.
 *
 * Everything in this header is new in API 0.5 (BURST_API_VERSION 0.5).
 */
#ifndef BURST_KVCACHE_H
#define BURST_KVCACHE_H

#include "burst/export.h"

#include <stdint.h>

#include "burst/comm.h"
#include "burst/context.h"
#include "burst/layout.h"
#include "burst/plan.h"
#include "burst/status.h"
#include "burst/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct burst_kvcache;

struct burst_kvcache_params {
    unsigned api_version; /* BURST_API_VERSION */
    int max_seqs;         /* sequence ids 0 .. max_seqs - 1, >= 1 */
    int64_t block_len;    /* tokens per block, >= 1 (default 64) */
    /* Blocks of the pool on EACH rank, >= 1: the rank's shard of all sequences together may
     * hold at most capacity_blocks * block_len tokens, a sequence's partly filled last block
     * counting whole. Pool memory per rank: 2 x capacity_blocks x block_len x Hkv x d elements
     * of dtype (K and V). */
    int64_t capacity_blocks;
    int q_heads;         /* Hq >= 1 */
    int kv_heads;        /* Hkv >= 1, Hq % Hkv == 0 */
    int head_dim;        /* d: a multiple of 8, 8..256 */
    burst_dtype_t dtype; /* of the cached K/V and of every tensor of prefill and decode */
    float softmax_scale; /* tau; 0 = 1/sqrt(d) */
    /* how a prefill chunk is sharded over the ranks (burst/layout.h); zigzag (default)
     * balances the causal work of the chunk and needs chunks of >= 2G tokens */
    burst_layout_t layout;
};

/* Defaults: block_len 64, zigzag layout, fp32, scale 1/sqrt(d); max_seqs, capacity_blocks and
 * the sizes are 0 and must be set. Thread-safe. */
BURST_API struct burst_kvcache_params burst_kvcache_params_default(void);

/*
 * Create this rank's cache, empty. COLLECTIVE over comm: the ranks compare their parameters
 * and every rank fails with BURST_ERR_PLAN_MISMATCH naming the first differing rank and field
 * (the communicator stays usable).
 * Allocates the pools in ctx's backend memory (BURST_ERR_NO_MEMORY or
 * BURST_ERR_DEVICE_MEMORY when they do not fit). Validation errors name the field and value.
 * ctx and comm must outlive the cache.
 */
BURST_API burst_status_t burst_kvcache_create(struct burst_context *ctx, struct burst_comm *comm,
                                              const struct burst_kvcache_params *params,
                                              struct burst_kvcache **cache_p);

/* Free this rank's cache; NULL accepted. Not collective. */
BURST_API void burst_kvcache_destroy(struct burst_kvcache *cache);

/* Tokens cached for sequence seq over all ranks, or -1 when seq is out of range or cache is
 * NULL. */
BURST_API int64_t burst_kvcache_len(const struct burst_kvcache *cache, int seq);

/* Tokens of sequence seq that rank `rank` holds (every rank knows every rank's), or -1 when
 * seq or rank is out of range or cache is NULL. */
BURST_API int64_t burst_kvcache_shard_len(const struct burst_kvcache *cache, int seq, int rank);

/* Blocks of rank `rank`'s pool not used by any sequence, or -1 when rank is out of range or
 * cache is NULL. */
BURST_API int64_t burst_kvcache_free_blocks(const struct burst_kvcache *cache, int rank);

/* Rows of a prefill chunk of chunk_len tokens that THIS rank passes (its layout shard), or -1
 * when the layout cannot shard chunk_len tokens over the ranks (fewer than G, or than 2G for
 * zigzag). Local row i of the chunk is the sequence's token burst_kvcache_len(seq) + p, where
 * p = burst_layout_position(layout, chunk_len, G, rank, i). -1 too for a NULL cache. */
BURST_API int64_t burst_kvcache_chunk_len(const struct burst_kvcache *cache, int64_t chunk_len);

/*
 * Forget sequence seq: its blocks return to the pool on every rank and its length becomes 0.
 * Not collective, but every rank must reset the same sequences between the same calls (each
 * rank's view of every shard's length must stay the same). BURST_ERR_INVALID_ARG naming seq
 * when out of range.
 */
BURST_API burst_status_t burst_kvcache_reset(struct burst_kvcache *cache, int seq);

/*
 * Prefill one chunk of sequence seq: chunk_len new tokens following the burst_kvcache_len(seq)
 * already cached. COLLECTIVE: every rank passes the same seq and chunk_len and its shard of the
 * chunk, n = burst_kvcache_chunk_len(cache, chunk_len) rows in the cache's layout:
 *   q [1, n, Hq, d], k and v [1, n, Hkv, d] (dtype of the cache, any strides with stride[3] = 1),
 *   o [1, n, Hq, d] receives the attention output of those rows, and lse (optional, NULL = not
 *   wanted) [1, Hq, n] fp32 contiguous their log-sum-exp.
 * The rows attend every cached key of the sequence and the chunk's keys up to their own
 * position. On success this rank's n K/V rows join its shard. Tensors live in ctx's backend
 * memory (burst_context_alloc on device backends). Errors before any change (see the top of
 * this header): seq out of range, chunk_len that the layout cannot shard, a shard that does not
 * fit in the blocks left on its rank (the message names the rank, the blocks needed and free).
 */
BURST_API burst_status_t burst_prefill(struct burst_kvcache *cache, int seq, int64_t chunk_len,
                                       const struct burst_tensor *q, const struct burst_tensor *k,
                                       const struct burst_tensor *v, struct burst_tensor *o,
                                       float *lse);

/*
 * Decode t new tokens for each of `batch` sequences, seq_ids[0 .. batch) (distinct, each with
 * at least one cached token: prefill first). COLLECTIVE: every rank passes the same seq_ids and
 * the same new tokens, replicated:
 *   q [batch, t, Hq, d], k and v [batch, t, Hkv, d]: row i of batch entry b is the token at
 *   position burst_kvcache_len(seq_ids[b]) + i of that sequence;
 *   o [batch, t, Hq, d] receives, on every rank alike, the attention of each new query over the
 *   sequence's cached keys and the new keys up to its own (speculative decoding checks t
 *   draft tokens in one call); lse (optional, NULL = not wanted) [batch, Hq, t] fp32.
 * On success the t new K/V rows of each sequence join the shard of the rank chosen as the top
 * of this header says. Errors before any change: batch outside 1..max_seqs, seq_ids NULL, an id
 * out of range or repeated, a sequence with nothing cached, t larger than the blocks left on
 * the rank that would store the new rows. On one rank the attention writes o and lse entry by
 * entry: a failure after those checks (a device error) can leave earlier entries written.
 */
BURST_API burst_status_t burst_decode(struct burst_kvcache *cache, int64_t batch,
                                      const int *seq_ids, const struct burst_tensor *q,
                                      const struct burst_tensor *k, const struct burst_tensor *v,
                                      struct burst_tensor *o, float *lse);

/* What the last prefill or decode call did on this rank. */
struct burst_kvcache_stats {
    double total_s; /* wall time of the call */
    double ring_s;  /* prefill: the ring forward of the chunk against itself; decode: 0 */
    double local_s; /* attention of the new queries over this rank's cached shard */
    double merge_s; /* the exchange of partial results and their log-sum-exp merge */
    /* since API 0.6. Decode: the part of merge_s spent waiting for the slowest rank, taken as
     * the largest local_s among the ranks less this rank's (each rank sends its local_s with
     * its partials), at most merge_s. That assumes the ranks entered the step together, as
     * they do when they left the previous step's merge together; a rank that entered late
     * (uneven work of its own between steps) waited less than that, and the figure counts its
     * late start as waiting. merge_s - merge_wait_s is the exchange and merge proper, which
     * does not grow with the context; merge_wait_s is 0 on the slowest rank and on one rank.
     * Prefill: 0. */
    double merge_wait_s;
    /* bytes this rank sent for the merge: decode, its partial results to each peer
     * (independent of the context length); prefill, its partials padded to the largest shard
     * of the chunk, to each peer (the chunk's queries, gathered before, not counted) */
    uint64_t merge_bytes;
    /* 1 when some sequence's shard was attended with one step kernel per cache block: the
     * backend has no decode_step, or its decode_step declined the call (e.g. more new queries
     * than it takes: cpu 16, cuda 64; most prefill chunks), or BURST_DECODE_STEP=0 */
    int fallback;
};

/* Statistics of this rank's last prefill (prefill nonzero) or decode (prefill 0) call that
 * succeeded; zeros before the first. BURST_ERR_INVALID_ARG for a NULL cache or stats_p. */
BURST_API burst_status_t burst_kvcache_stats(const struct burst_kvcache *cache, int prefill,
                                             struct burst_kvcache_stats *stats_p);

#ifdef __cplusplus
}
#endif

#endif /* BURST_KVCACHE_H */
