/*
 * runtime/plan_params.c - the plan parameters: defaults, the copy of a caller's struct by its
 * api_version, validation (messages name the field and value) and the backward traffic of a
 * pattern.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "fault.h"
#include "ring_xfer.h"
#include "plan_internal.h"
#include "speed.h"

struct burst_plan_params burst_plan_params_default(void)
{
    struct burst_plan_params p = {
        .api_version = BURST_API_VERSION,
        .batch = 1,
        .seq_len = 0,
        .shard_lens = NULL,
        .q_heads = 0,
        .kv_heads = 0,
        .head_dim = 0,
        .dtype = BURST_DTYPE_FP32,
        .softmax_scale = 0.0f,
        .causal = 0,
        .window_left = BURST_WINDOW_UNBOUNDED,
        .window_right = BURST_WINDOW_UNBOUNDED,
        .layout = BURST_LAYOUT_NATURAL,
        .bwd_pattern = BURST_BWD_BURST,
        .acc_wire = BURST_WIRE_FP32,
        .deterministic = 0,
        .ranks_per_node = 0,
        .shard_weights = NULL,
        .measure_speed = 0,
        .workspace_limit = 0,
        .doc_lens = NULL,
        .num_docs = 0,
        .softcap = 0.0f,
        .fp8_forward = 0,
    };
    return p;
}

/* The caller's params as this library's struct: fields newer than the caller's api_version
 * (a shorter struct) are not read and keep their defaults. */
struct burst_plan_params burst_plan_params_copy(const struct burst_plan_params *in)
{
    struct burst_plan_params p = burst_plan_params_default();
    unsigned minor = in->api_version & 0xffffu;
    memcpy(&p, in,
           minor >= 7   ? sizeof(p)
           : minor >= 5 ? offsetof(struct burst_plan_params, fp8_forward)
           : minor >= 3 ? offsetof(struct burst_plan_params, doc_lens)
           : minor == 2 ? offsetof(struct burst_plan_params, workspace_limit)
                        : offsetof(struct burst_plan_params, shard_weights));
    return p;
}

#define MAX_ELEMS ((int64_t)1 << 50) /* keeps every byte count far from overflow */

burst_status_t burst_plan_params_validate(const char *who, const struct burst_plan_params *p)
{
    burst_status_t st = burst_check_api_version(who, p->api_version);
    if (st != BURST_OK)
        return st;
#define NEED(cond, code, ...)                                                                      \
    do {                                                                                           \
        if (!(cond))                                                                               \
            return burst_error(code, __VA_ARGS__);                                                 \
    } while (0)
    NEED(p->batch >= 1, BURST_ERR_INVALID_ARG, "%s: params->batch = %lld must be >= 1", who,
         (long long)p->batch);
    NEED(p->seq_len >= 1, BURST_ERR_INVALID_ARG, "%s: params->seq_len = %lld must be >= 1", who,
         (long long)p->seq_len);
    NEED(p->q_heads >= 1, BURST_ERR_INVALID_ARG, "%s: params->q_heads = %d must be >= 1", who,
         p->q_heads);
    NEED(p->kv_heads >= 1, BURST_ERR_INVALID_ARG, "%s: params->kv_heads = %d must be >= 1", who,
         p->kv_heads);
    NEED(p->q_heads % p->kv_heads == 0, BURST_ERR_INVALID_ARG,
         "%s: params->q_heads = %d is not a multiple of params->kv_heads = %d", who, p->q_heads,
         p->kv_heads);
    NEED(p->head_dim >= 1, BURST_ERR_INVALID_ARG, "%s: params->head_dim = %d must be >= 1", who,
         p->head_dim);
    NEED(p->head_dim % 8 == 0 && p->head_dim <= 256, BURST_ERR_UNSUPPORTED,
         "%s: params->head_dim = %d is unsupported (any multiple of 8 from 8 to 256)", who,
         p->head_dim);
    NEED(burst_dtype_size(p->dtype) != 0, BURST_ERR_INVALID_ARG,
         "%s: params->dtype = %d is not a burst_dtype_t", who, (int)p->dtype);
    NEED(isfinite(p->softmax_scale) && p->softmax_scale >= 0.0f, BURST_ERR_INVALID_ARG,
         "%s: params->softmax_scale = %g must be finite and > 0 (or 0 for 1/sqrt(head_dim))", who,
         (double)p->softmax_scale);
    NEED(p->window_left >= -1, BURST_ERR_INVALID_ARG,
         "%s: params->window_left = %lld must be >= 0 or BURST_WINDOW_UNBOUNDED", who,
         (long long)p->window_left);
    NEED(p->window_right >= -1, BURST_ERR_INVALID_ARG,
         "%s: params->window_right = %lld must be >= 0 or BURST_WINDOW_UNBOUNDED", who,
         (long long)p->window_right);
    NEED(p->layout == BURST_LAYOUT_NATURAL || p->layout == BURST_LAYOUT_ZIGZAG ||
             p->layout == BURST_LAYOUT_STRIPED,
         BURST_ERR_INVALID_ARG, "%s: params->layout = %d is not a burst_layout_t", who,
         (int)p->layout);
    NEED(p->bwd_pattern == BURST_BWD_BURST || p->bwd_pattern == BURST_BWD_RING ||
             p->bwd_pattern == BURST_BWD_AUTO,
         BURST_ERR_INVALID_ARG, "%s: params->bwd_pattern = %d is not a burst_bwd_pattern_t", who,
         (int)p->bwd_pattern);
    NEED(!(p->shard_lens && p->shard_weights), BURST_ERR_INVALID_ARG,
         "%s: params->shard_lens and params->shard_weights are both set (give one)", who);
    NEED(!(p->measure_speed && (p->shard_lens || p->shard_weights)), BURST_ERR_INVALID_ARG,
         "%s: params->measure_speed = %d with params->%s set (measured speeds size the shards: "
         "give one)",
         who, p->measure_speed, p->shard_lens ? "shard_lens" : "shard_weights");
    NEED(p->acc_wire == BURST_WIRE_FP32 || p->acc_wire == BURST_WIRE_INPUT, BURST_ERR_INVALID_ARG,
         "%s: params->acc_wire = %d is not a burst_wire_precision_t", who, (int)p->acc_wire);
    NEED(isfinite(p->softcap) && p->softcap >= 0.0f, BURST_ERR_INVALID_ARG,
         "%s: params->softcap = %g must be finite and > 0 (or 0 for no cap)", who,
         (double)p->softcap);
    NEED(!p->fp8_forward || p->dtype == BURST_DTYPE_FP16 || p->dtype == BURST_DTYPE_BF16,
         BURST_ERR_UNSUPPORTED,
         "%s: params->fp8_forward = %d with params->dtype = %s (fp8 products take fp16 or bf16 "
         "inputs)",
         who, p->fp8_forward, burst_dtype_name(p->dtype));
    NEED(p->doc_lens ? p->num_docs >= 1 : p->num_docs == 0, BURST_ERR_INVALID_ARG,
         "%s: params->num_docs = %lld %s", who, (long long)p->num_docs,
         p->doc_lens ? "must be >= 1 with params->doc_lens set"
                     : "must be 0 when params->doc_lens is NULL");
    NEED(p->num_docs <= p->seq_len, BURST_ERR_INVALID_ARG,
         "%s: params->num_docs = %lld exceeds params->seq_len = %lld (documents hold >= 1 token)",
         who, (long long)p->num_docs, (long long)p->seq_len);
    if (p->doc_lens) {
        int64_t sum = 0;
        for (int64_t t = 0; t < p->num_docs; t++) {
            NEED(p->doc_lens[t] >= 1, BURST_ERR_INVALID_ARG,
                 "%s: params->doc_lens[%lld] = %lld must be >= 1", who, (long long)t,
                 (long long)p->doc_lens[t]);
            NEED(p->doc_lens[t] <= p->seq_len - sum, BURST_ERR_INVALID_ARG,
                 "%s: params->doc_lens sums past params->seq_len = %lld at index %lld", who,
                 (long long)p->seq_len, (long long)t);
            sum += p->doc_lens[t];
        }
        NEED(sum == p->seq_len, BURST_ERR_INVALID_ARG,
             "%s: params->doc_lens sum to %lld, not params->seq_len = %lld", who, (long long)sum,
             (long long)p->seq_len);
    }
    int64_t h = p->q_heads > p->kv_heads ? p->q_heads : p->kv_heads;
    NEED(p->seq_len <= MAX_ELEMS / p->batch / h / p->head_dim, BURST_ERR_TOO_LARGE,
         "%s: params->batch * seq_len * heads * head_dim = %lld * %lld * %lld * %d is too large",
         who, (long long)p->batch, (long long)p->seq_len, (long long)h, p->head_dim);
#undef NEED
    return BURST_OK;
}

uint64_t burst_plan_bwd_step_bytes(const struct burst_plan_params *p, burst_bwd_pattern_t pat,
                                   burst_dtype_t acc_dtype, int64_t n)
{
    uint64_t es = burst_dtype_size(p->dtype), as = burst_dtype_size(acc_dtype);
    uint64_t rows = (uint64_t)p->batch * (uint64_t)n, d = (uint64_t)p->head_dim;
    if (pat == BURST_BWD_RING) /* K, V in dtype; dK, dV accumulators */
        return rows * (uint64_t)p->kv_heads * d * (2 * es + 2 * as);
    /* Q, dO in dtype; dQ accumulator; lse and D in fp32 */
    return rows * (uint64_t)p->q_heads * (d * (2 * es + as) + 2 * 4);
}
