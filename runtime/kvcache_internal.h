/*
 * runtime/kvcache_internal.h - the key/value cache as the engine sees it (private).
 *
 * Every rank keeps its own pools and block tables, and a replica of every rank's shard length
 * of every sequence and of every rank's block count: the calls decide where new rows go and
 * whether they fit from these alone, identically on every rank, with no communication.
 * Appends are staged: burst_kv_reserve takes the blocks new rows need (the rows are written
 * there), burst_kv_commit makes them part of the shard once the call has succeeded, and
 * burst_kv_rollback returns them to the pool when it has not.
 */
#ifndef BURST_RUNTIME_KVCACHE_INTERNAL_H
#define BURST_RUNTIME_KVCACHE_INTERNAL_H

#include "burst/kvcache.h"
#include "context_internal.h"
#include "tp_comm.h"

struct burst_kv_seq {
    int32_t *blocks; /* [capacity_blocks] host block table: pool indices in key order */
    int64_t nblocks; /* entries of blocks in use (reserved ones included) */
    int64_t len;     /* committed keys of this rank's shard */
};

struct burst_kvcache {
    struct burst_context *ctx;
    struct burst_comm *comm;
    struct burst_kvcache_params p; /* validated copy */
    float scale;
    int rank, size;
    size_t row_bytes; /* one token's K (or V) row: Hkv x d elements of dtype */
    void *k_pool;     /* [capacity_blocks, block_len, Hkv, d] backend memory */
    void *v_pool;
    int32_t *tables_dev; /* [max_seqs, capacity_blocks] the block tables in backend memory
                          * (device_memory backends), else NULL (the host tables serve) */
    int32_t *free_list;  /* [capacity_blocks] free pool indices (a stack) */
    int64_t nfree;
    struct burst_kv_seq *seqs;           /* [max_seqs] this rank's shard */
    int64_t *lens;                       /* [size, max_seqs] every rank's committed shard lengths */
    int64_t *used;                       /* [size] every rank's blocks in use */
    struct burst_kvcache_stats stats[2]; /* [0] decode, [1] prefill */
    /* prefill's ring forward of a chunk against itself: a causal plan of plan_len tokens in
     * the cache's layout, kept for the next chunk of the same length */
    struct burst_plan *plan;
    int64_t plan_len;
    /* backend memory kept between calls (grown on demand, freed with the cache): [0] decode's
     * running O and lse, [1] burst_kv_write_out's fp32 output */
    void *work[2];
    size_t work_bytes[2];
};

/* *p = backend memory of at least `bytes` in work slot `slot` (0 or 1), kept for later calls;
 * its contents are undefined. Growing waits for queued work first (it may use the old buffer).
 * BURST_ERR_NO_MEMORY naming who on exhaustion. */
burst_status_t burst_kv_work(struct burst_kvcache *c, int slot, size_t bytes, const char *who,
                             void **p);

/* Blocks a shard of len keys occupies. */
static inline int64_t burst_kv_blocks_for(const struct burst_kvcache *c, int64_t len)
{
    return (len + c->p.block_len - 1) / c->p.block_len;
}

/* Blocks rank r must add to hold `add` more keys of sequence seq. */
int64_t burst_kv_need(const struct burst_kvcache *c, int r, int seq, int64_t add);

/* BURST_OK when rank r can take `add` (>= 0, any size) more keys of sequence seq besides the
 * `*claimed` blocks earlier entries of the same call take there, and adds its blocks to
 * *claimed (claimed NULL: none); else BURST_ERR_INVALID_ARG naming who, `what` (the argument
 * that asked for them, with its value), the rank, blocks needed and free. */
burst_status_t burst_kv_check_fit(const struct burst_kvcache *c, const char *who, const char *what,
                                  int r, int seq, int64_t add, int64_t *claimed);

/* This rank: take the blocks for `add` more keys of seq (checked to fit) and write the new
 * block table to backend memory. */
burst_status_t burst_kv_reserve(struct burst_kvcache *c, int seq, int64_t add);
/* Make `add` reserved keys of seq on rank r part of its shard (every rank calls it for every
 * rank's rows, keeping the replicas equal). */
void burst_kv_commit(struct burst_kvcache *c, int r, int seq, int64_t add);
/* This rank: return the blocks reserved beyond seq's committed length to the pool. */
void burst_kv_rollback(struct burst_kvcache *c, int seq);

/* The sequence's block table where the backend reads it. */
const int32_t *burst_kv_table_dev(const struct burst_kvcache *c, int seq);

/* Copy `rows` token rows of src (a [1, rows, Hkv, d] view in backend memory) into the pools of
 * seq (k or v: which = 0 / 1) from local key `at` on, across block boundaries: one copy per run
 * of blocks that are consecutive in the pool. */
burst_status_t burst_kv_write_rows(struct burst_kvcache *c, int seq, int which, int64_t at,
                                   const struct burst_tensor *src);

/* Attention of t queries q ([1, t, Hq, d] view) against this rank's first nkeys keys of seq,
 * keys from `tail` on being the new tokens (backend.h, burst_decode_args), merged into o_acc
 * [1, t, Hq, d] and lse_acc [1, Hq, t]. decode_step where the backend has it, else one
 * fwd_step per block; *fallback set to 1 when the fallback ran. */
burst_status_t burst_kv_attend(struct burst_kvcache *c, int seq, const struct burst_tensor *q,
                               int64_t nkeys, int64_t tail, float *o_acc, float *lse_acc,
                               int *fallback);

/* The same attention when these keys are all the keys the queries attend (one rank): the
 * result written to o ([1, t, Hq, d], q's dtype, any strides) and lse ([1, Hq, t]; NULL: not
 * written). decode_step writes it directly where the backend can; otherwise the running o_acc,
 * lse_acc (the sizes above, backend memory) are reset, attended into and copied out. */
burst_status_t burst_kv_attend_out(struct burst_kvcache *c, int seq, const struct burst_tensor *q,
                                   int64_t nkeys, int64_t tail, const struct burst_tensor *o,
                                   float *lse, float *o_acc, float *lse_acc, int *fallback);

/* Copy fp32 results in backend memory, o_acc [B, t, Hq, d] and lse_acc [B, Hq, t], to the
 * caller's o (its dtype, any strides) and lse (NULL: not written), queued on the backend. */
burst_status_t burst_kv_copy_out(struct burst_kvcache *c, const float *o_acc, const float *lse_acc,
                                 int64_t B, int64_t t, const struct burst_tensor *o, float *lse);

/* Copies between backend memory and host memory (the backend's memcpy where it has one). */
burst_status_t burst_kv_to_host(struct burst_kvcache *c, void *dst, const void *src, size_t n);
burst_status_t burst_kv_from_host(struct burst_kvcache *c, void *dst, const void *src, size_t n);

/* The outputs overlap no input: o none of q, k, v, and lse (lse_count floats; NULL = none) none
 * of q, k, v, o. BURST_ERR_INVALID_ARG naming who and the two. */
burst_status_t burst_kv_check_overlap(const char *who, const struct burst_tensor *q,
                                      const struct burst_tensor *k, const struct burst_tensor *v,
                                      const struct burst_tensor *o, const float *lse,
                                      int64_t lse_count);

/* Merge `parts` partial results of rows x Hq rows into out: o parts [part][rows][Hq][d] and lse
 * parts [part][Hq][rows] (fp32, lse -inf = no key), in part order, into o_out [rows][Hq][d] and
 * lse_out [Hq][rows] (fp32). part_o / part_lse give each part's arrays; d <= 256. */
void burst_kv_merge(int parts, const float *const *part_o, const float *const *part_lse,
                    int64_t rows, int64_t hq, int64_t d, float *o_out, float *lse_out);

/* Write host fp32 results to the caller's tensors: o_host [B, t, Hq, d] into o (its dtype, any
 * strides) and, when lse is not NULL, lse_host [B, Hq, t] into lse (backend memory). */
burst_status_t burst_kv_write_out(struct burst_kvcache *c, const char *who, const float *o_host,
                                  const float *lse_host, int64_t B, int64_t t,
                                  const struct burst_tensor *o, float *lse);

/* Seconds on a monotonic clock. */
double burst_now(void);

#endif /* BURST_RUNTIME_KVCACHE_INTERNAL_H */
