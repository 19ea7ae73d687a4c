/*
 * runtime/kv_attend.c - the local half of the cache's calls: attention of new queries over
 * this rank's cached shard (decode_step, or one fwd_step per block), the log-sum-exp merge of
 * the ranks' partial results, and the writing of the merged results to the caller's tensors.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "kvcache_internal.h"
#include "plan_internal.h"
#include "step_check.h"
#include "tensor_check.h"

/* One fwd_step per block (backends without decode_step, and BURST_DECODE_STEP=0): query i at
 * position tail + i, key j at position j, causal. */
static burst_status_t attend_blocks(struct burst_kvcache *c, int seq, const struct burst_tensor *q,
                                    int64_t nkeys, int64_t tail, float *o_acc, float *lse_acc)
{
    const struct burst_backend_ops *ops = c->ctx->ops;
    const int64_t bl = c->p.block_len, t = q->shape[1];
    const int32_t *table = c->seqs[seq].blocks;
    burst_status_t st = BURST_OK;
    for (int64_t j0 = 0; st == BURST_OK && j0 < nkeys; j0 += bl) {
        const int64_t rows = nkeys - j0 < bl ? nkeys - j0 : bl;
        const size_t off = (size_t)table[j0 / bl] * (size_t)bl * c->row_bytes;
        struct burst_tensor kb = burst_tensor_contiguous(
            (unsigned char *)c->k_pool + off, c->p.dtype, 1, rows, c->p.kv_heads, c->p.head_dim);
        struct burst_tensor vb = kb;
        vb.data = (unsigned char *)c->v_pool + off;
        struct burst_fwd_args a = {
            .q = q,
            .k = &kb,
            .v = &vb,
            .qpos = {.nruns = 1, .run = {{.local0 = 0, .len = t, .global0 = tail, .stride = 1}}},
            .kpos = {.nruns = 1, .run = {{.local0 = 0, .len = rows, .global0 = j0, .stride = 1}}},
            .mask = {.left = BURST_POS_INF, .right = 0},
            .scale = c->scale,
            .o_acc = o_acc,
            .lse_acc = lse_acc,
        };
        struct burst_step_dims dim;
        st = burst_step_check("burst_kvcache: step", a.q, a.k, a.v, NULL, &dim);
        if (st == BURST_OK)
            st = ops->attn.fwd_step(c->ctx->be, &a);
    }
    return st;
}

/* decode_step's arguments for the queries q of seq over its first nkeys keys on this rank. */
static struct burst_decode_args decode_args(struct burst_kvcache *c, int seq,
                                            const struct burst_tensor *q, int64_t nkeys,
                                            int64_t tail, float *o_acc, float *lse_acc)
{
    return (struct burst_decode_args){
        .q = q,
        .k_pool = c->k_pool,
        .v_pool = c->v_pool,
        .block_len = c->p.block_len,
        .hkv = c->p.kv_heads,
        .blocks = burst_kv_table_dev(c, seq),
        .blocks_host = c->seqs[seq].blocks,
        .nkeys = nkeys,
        .tail = tail,
        .scale = c->scale,
        .o_acc = o_acc,
        .lse_acc = lse_acc,
    };
}

burst_status_t burst_kv_attend(struct burst_kvcache *c, int seq, const struct burst_tensor *q,
                               int64_t nkeys, int64_t tail, float *o_acc, float *lse_acc,
                               int *fallback)
{
    const struct burst_backend_ops *ops = c->ctx->ops;
    if (nkeys == 0)
        return BURST_OK; /* no key here: the rows stay (0, -inf) */
    if (BURST_OPS_HAS(ops, attn.decode_step) &&
        burst_set_long(&c->ctx->set, BURST_SET_DECODE_STEP)) {
        struct burst_decode_args a = decode_args(c, seq, q, nkeys, tail, o_acc, lse_acc);
        burst_status_t st = ops->attn.decode_step(c->ctx->be, &a);
        if (st != BURST_ERR_UNSUPPORTED)
            return st;
    }
    *fallback = 1;
    return attend_blocks(c, seq, q, nkeys, tail, o_acc, lse_acc);
}

burst_status_t burst_kv_copy_out(struct burst_kvcache *c, const float *o_acc, const float *lse_acc,
                                 int64_t B, int64_t t, const struct burst_tensor *o, float *lse)
{
    const struct burst_backend_ops *ops = c->ctx->ops;
    const int64_t hq = c->p.q_heads;
    struct burst_tensor src =
        burst_tensor_contiguous((void *)o_acc, BURST_DTYPE_FP32, B, t, hq, c->p.head_dim);
    burst_status_t st = ops->elem.copy(c->ctx->be, o, &src);
    if (st == BURST_OK && lse) { /* [B, Hq, t] as fp32 rows of one element, queued like o */
        struct burst_tensor ls =
            burst_tensor_contiguous((void *)lse_acc, BURST_DTYPE_FP32, B, hq, t, 1);
        struct burst_tensor ld = burst_tensor_contiguous(lse, BURST_DTYPE_FP32, B, hq, t, 1);
        st = ops->elem.copy(c->ctx->be, &ld, &ls);
    }
    return st;
}

burst_status_t burst_kv_attend_out(struct burst_kvcache *c, int seq, const struct burst_tensor *q,
                                   int64_t nkeys, int64_t tail, const struct burst_tensor *o,
                                   float *lse, float *o_acc, float *lse_acc, int *fallback)
{
    const struct burst_backend_ops *ops = c->ctx->ops;
    const int64_t t = q->shape[1], hq = c->p.q_heads;
    if (nkeys > 0 && BURST_OPS_HAS(ops, attn.decode_step) &&
        burst_set_long(&c->ctx->set, BURST_SET_DECODE_STEP)) {
        struct burst_decode_args a = decode_args(c, seq, q, nkeys, tail, NULL, NULL);
        a.o_out = o;
        a.lse_out = lse;
        burst_status_t st = ops->attn.decode_step(c->ctx->be, &a);
        if (st != BURST_ERR_UNSUPPORTED)
            return st;
    }
    burst_status_t st = ops->elem.fill(c->ctx->be, o_acc, (size_t)(t * hq * c->p.head_dim), 0.0f);
    if (st == BURST_OK)
        st = ops->elem.fill(c->ctx->be, lse_acc, (size_t)(hq * t), -INFINITY);
    if (st == BURST_OK)
        st = burst_kv_attend(c, seq, q, nkeys, tail, o_acc, lse_acc, fallback);
    if (st == BURST_OK)
        st = burst_kv_copy_out(c, o_acc, lse_acc, 1, t, o, lse);
    return st;
}

burst_status_t burst_kv_check_overlap(const char *who, const struct burst_tensor *q,
                                      const struct burst_tensor *k, const struct burst_tensor *v,
                                      const struct burst_tensor *o, const float *lse,
                                      int64_t lse_count)
{
    const struct burst_tensor *ins[4] = {q, k, v, o};
    static const char *const names[4] = {"q", "k", "v", "o"};
    for (int i = 0; i < 3; i++)
        if (burst_tensor_ranges_overlap(o, ins[i]))
            return burst_error(BURST_ERR_INVALID_ARG, "%s: output o overlaps input %s", who,
                               names[i]);
    if (!lse)
        return BURST_OK;
    struct burst_tensor l =
        burst_tensor_contiguous((void *)lse, BURST_DTYPE_FP32, 1, lse_count, 1, 1);
    for (int i = 0; i < 4; i++)
        if (burst_tensor_ranges_overlap(&l, ins[i]))
            return burst_error(BURST_ERR_INVALID_ARG, "%s: output lse overlaps %s %s", who,
                               i < 3 ? "input" : "output", names[i]);
    return BURST_OK;
}

void burst_kv_merge(int parts, const float *const *part_o, const float *const *part_lse,
                    int64_t rows, int64_t hq, int64_t d, float *o_out, float *lse_out)
{
    double acc[256]; /* d <= 256 (the cache's head_dim) */
    for (int64_t i = 0; i < rows; i++)
        for (int64_t h = 0; h < hq; h++) {
            const size_t li = (size_t)(h * rows + i), oi = (size_t)((i * hq + h) * d);
            double m = -INFINITY;
            for (int r = 0; r < parts; r++)
                if (part_lse[r][li] > m)
                    m = part_lse[r][li];
            if (m == -INFINITY) { /* no key anywhere */
                memset(o_out + oi, 0, (size_t)d * sizeof(float));
                lse_out[li] = -INFINITY;
                continue;
            }
            double sum = 0.0;
            memset(acc, 0, (size_t)d * sizeof(double));
            for (int r = 0; r < parts; r++) {
                if (part_lse[r][li] == -INFINITY)
                    continue;
                const double w = exp((double)part_lse[r][li] - m);
                sum += w;
                for (int64_t x = 0; x < d; x++)
                    acc[x] += w * (double)part_o[r][oi + (size_t)x];
            }
            for (int64_t x = 0; x < d; x++)
                o_out[oi + (size_t)x] = (float)(acc[x] / sum);
            lse_out[li] = (float)(m + log(sum));
        }
}

burst_status_t burst_kv_write_out(struct burst_kvcache *c, const char *who, const float *o_host,
                                  const float *lse_host, int64_t B, int64_t t,
                                  const struct burst_tensor *o, float *lse)
{
    const struct burst_backend_ops *ops = c->ctx->ops;
    const int64_t hq = c->p.q_heads, d = c->p.head_dim;
    const size_t on = (size_t)(B * t * hq * d), ln = (size_t)(B * hq * t);
    void *work = NULL;
    burst_status_t st = burst_kv_work(c, 1, on * sizeof(float), who, &work);
    if (st != BURST_OK)
        return st;
    float *dev = work;
    st = burst_kv_from_host(c, dev, o_host, on * sizeof(float));
    if (st == BURST_OK) {
        struct burst_tensor src = burst_tensor_contiguous(dev, BURST_DTYPE_FP32, B, t, hq, d);
        st = ops->elem.copy(c->ctx->be, o, &src);
    }
    if (st == BURST_OK && lse)
        st = burst_kv_from_host(c, lse, lse_host, ln * sizeof(float));
    if (st == BURST_OK && BURST_OPS_HAS(ops, stream.sync))
        st = ops->stream.sync(c->ctx->be);
    return st;
}
