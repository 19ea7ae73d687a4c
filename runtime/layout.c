/* runtime/layout.c - public layout helpers: shard lengths, positions, permutations. */
#include <stdlib.h>
#include <string.h>

#include "burst/layout.h"
#include "balance.h"
#include "context_internal.h"
#include "error.h"
#include "plan_internal.h"
#include "schedule.h"
#include "tensor_check.h"

static burst_status_t shards_for(const char *who, burst_layout_t layout, int64_t seq_len, int ranks,
                                 const int64_t *lens, int rank, struct burst_shards *s)
{
    burst_status_t st = burst_shards_init(s, who, layout, seq_len, ranks, lens);
    if (st != BURST_OK)
        return st;
    if (rank < 0 || rank >= ranks) {
        burst_shards_fini(s);
        return burst_error(BURST_ERR_INVALID_ARG, "%s: rank = %d is not in 0..%d", who, rank,
                           ranks - 1);
    }
    return BURST_OK;
}

burst_status_t burst_layout_shard_len(burst_layout_t layout, int64_t seq_len, int ranks, int rank,
                                      int64_t *len_p)
{
    static const char *who = "burst_layout_shard_len";
    struct burst_shards s;
    burst_error_clear();
    if (!len_p)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: len_p is NULL", who);
    burst_status_t st = shards_for(who, layout, seq_len, ranks, NULL, rank, &s);
    if (st != BURST_OK)
        return st;
    *len_p = s.lens[rank];
    burst_shards_fini(&s);
    return BURST_OK;
}

burst_status_t burst_layout_shard_offset(burst_layout_t layout, int64_t seq_len, int ranks,
                                         int rank, int64_t *offset_p)
{
    static const char *who = "burst_layout_shard_offset";
    struct burst_shards s;
    burst_error_clear();
    if (!offset_p)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: offset_p is NULL", who);
    burst_status_t st = shards_for(who, layout, seq_len, ranks, NULL, rank, &s);
    if (st != BURST_OK)
        return st;
    *offset_p = s.offsets[rank];
    burst_shards_fini(&s);
    return BURST_OK;
}

static burst_status_t position(const char *who, burst_layout_t layout, int64_t seq_len, int ranks,
                               const int64_t *lens, int rank, int64_t local, int64_t *pos_p)
{
    struct burst_shards s;
    burst_error_clear();
    if (!pos_p)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: pos_p is NULL", who);
    burst_status_t st = shards_for(who, layout, seq_len, ranks, lens, rank, &s);
    if (st != BURST_OK)
        return st;
    if (local < 0 || local >= s.lens[rank]) {
        st = burst_error(BURST_ERR_INVALID_ARG, "%s: local = %lld is not in 0..%lld", who,
                         (long long)local, (long long)s.lens[rank] - 1);
    } else {
        struct burst_posmap m = burst_shards_posmap(&s, rank);
        *pos_p = burst_posmap_pos(&m, local);
    }
    burst_shards_fini(&s);
    return st;
}

burst_status_t burst_layout_position(burst_layout_t layout, int64_t seq_len, int ranks, int rank,
                                     int64_t local, int64_t *pos_p)
{
    return position("burst_layout_position", layout, seq_len, ranks, NULL, rank, local, pos_p);
}

burst_status_t burst_layout_position_lens(burst_layout_t layout, int64_t seq_len, int ranks,
                                          const int64_t *lens, int rank, int64_t local,
                                          int64_t *pos_p)
{
    return position("burst_layout_position_lens", layout, seq_len, ranks, lens, rank, local, pos_p);
}

burst_status_t burst_layout_weighted_lens(burst_layout_t layout, int64_t seq_len, int ranks,
                                          const double *weights, int64_t *lens_p)
{
    static const char *who = "burst_layout_weighted_lens";
    burst_error_clear();
    if (ranks < 1)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: ranks = %d must be >= 1", who, ranks);
    if (!weights || !lens_p)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: %s is NULL", who,
                           weights ? "lens_p" : "weights");
    if (layout != BURST_LAYOUT_NATURAL && layout != BURST_LAYOUT_ZIGZAG &&
        layout != BURST_LAYOUT_STRIPED)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: layout = %d is not a burst_layout_t", who,
                           (int)layout);
    int64_t *tmp = malloc(sizeof(int64_t) * (size_t)ranks);
    if (!tmp)
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    burst_status_t st = burst_shards_weighted_lens(who, layout, seq_len, ranks, weights, tmp);
    if (st == BURST_OK)
        memcpy(lens_p, tmp, sizeof(int64_t) * (size_t)ranks);
    free(tmp);
    return st;
}

/* Copy row `from` of src to row `to` of dst along dimension 1 (all batch, heads, head dims). */
static void copy_row(const struct burst_tensor *dst, int64_t to, const struct burst_tensor *src,
                     int64_t from, size_t es)
{
    const unsigned char *sp = src->data;
    unsigned char *dp = dst->data;
    for (int64_t b = 0; b < src->shape[0]; b++)
        for (int64_t h = 0; h < src->shape[2]; h++) {
            int64_t so = b * src->stride[0] + from * src->stride[1] + h * src->stride[2];
            int64_t dof = b * dst->stride[0] + to * dst->stride[1] + h * dst->stride[2];
            memcpy(dp + (size_t)dof * es, sp + (size_t)so * es, (size_t)src->shape[3] * es);
        }
}

/* The shards of a plan of params on ranks ranks (burst_layout_plan_*). */
static burst_status_t params_shards(const char *who, const struct burst_plan_params *in, int ranks,
                                    struct burst_shards *s)
{
    if (!in)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: params is NULL", who);
    if (ranks < 1)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: ranks = %d must be >= 1", who, ranks);
    burst_status_t st = burst_check_api_version(who, in->api_version);
    if (st != BURST_OK)
        return st;
    struct burst_plan_params p = burst_plan_params_copy(in);
    if ((st = burst_plan_params_validate(who, &p)) != BURST_OK)
        return st;
    if (p.measure_speed)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: params->measure_speed = %d: measured shards are known only to the "
                           "plan (burst_plan_shard_len, burst_plan_position)",
                           who, p.measure_speed);
    int64_t *docs = NULL;
    if ((st = burst_docs_table(who, &p, &docs)) != BURST_OK)
        return st;
    st = burst_plan_shards_for(s, who, &p, burst_params_mask(&p, docs), ranks, p.shard_weights);
    free(docs);
    return st;
}

static burst_status_t permute(const char *who, burst_layout_t layout, int ranks,
                              const int64_t *lens, const struct burst_tensor *src,
                              const char *src_name, struct burst_tensor *dst, const char *dst_name,
                              int forward, const struct burst_plan_params *params)
{
    burst_error_clear();
    burst_status_t st = burst_tensor_check_view(who, src_name, src, 0);
    if (st == BURST_OK)
        st = burst_tensor_check_view(who, dst_name, dst, 1);
    if (st != BURST_OK)
        return st;
    if (src->dtype != dst->dtype)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: %s->dtype = %s but %s->dtype = %s", who,
                           dst_name, burst_dtype_name(dst->dtype), src_name,
                           burst_dtype_name(src->dtype));
    for (int i = 0; i < BURST_TENSOR_DIMS; i++)
        if (src->shape[i] != dst->shape[i])
            return burst_error(
                BURST_ERR_INVALID_ARG, "%s: %s->shape[%d] = %lld differs from %s->shape[%d] = %lld",
                who, dst_name, i, (long long)dst->shape[i], src_name, i, (long long)src->shape[i]);
    if (burst_tensor_ranges_overlap(src, dst))
        return burst_error(BURST_ERR_INVALID_ARG, "%s: %s and %s overlap in memory", who, src_name,
                           dst_name);
    struct burst_shards s;
    if (params && params->seq_len != src->shape[1])
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: %s->shape[1] = %lld differs from params->seq_len = %lld", who,
                           src_name, (long long)src->shape[1], (long long)params->seq_len);
    st = params ? params_shards(who, params, ranks, &s)
                : burst_shards_init(&s, who, layout, src->shape[1], ranks, lens);
    if (st != BURST_OK)
        return st;
    size_t es = burst_dtype_size(src->dtype);
    for (int r = 0; r < ranks; r++) {
        struct burst_posmap m = burst_shards_posmap(&s, r);
        for (int64_t l = 0; l < s.lens[r]; l++) {
            int64_t pos = burst_posmap_pos(&m, l), perm = s.offsets[r] + l;
            if (forward)
                copy_row(dst, perm, src, pos, es);
            else
                copy_row(dst, pos, src, perm, es);
        }
    }
    burst_shards_fini(&s);
    return BURST_OK;
}

burst_status_t burst_layout_permute(burst_layout_t layout, int ranks,
                                    const struct burst_tensor *natural,
                                    struct burst_tensor *permuted)
{
    return permute("burst_layout_permute", layout, ranks, NULL, natural, "natural", permuted,
                   "permuted", 1, NULL);
}

burst_status_t burst_layout_unpermute(burst_layout_t layout, int ranks,
                                      const struct burst_tensor *permuted,
                                      struct burst_tensor *natural)
{
    return permute("burst_layout_unpermute", layout, ranks, NULL, permuted, "permuted", natural,
                   "natural", 0, NULL);
}

burst_status_t burst_layout_permute_lens(burst_layout_t layout, int ranks, const int64_t *lens,
                                         const struct burst_tensor *natural,
                                         struct burst_tensor *permuted)
{
    return permute("burst_layout_permute_lens", layout, ranks, lens, natural, "natural", permuted,
                   "permuted", 1, NULL);
}

burst_status_t burst_layout_unpermute_lens(burst_layout_t layout, int ranks, const int64_t *lens,
                                           const struct burst_tensor *permuted,
                                           struct burst_tensor *natural)
{
    return permute("burst_layout_unpermute_lens", layout, ranks, lens, permuted, "permuted",
                   natural, "natural", 0, NULL);
}

burst_status_t burst_layout_plan_lens(const struct burst_plan_params *params, int ranks,
                                      int64_t *lens_p)
{
    static const char *who = "burst_layout_plan_lens";
    burst_error_clear();
    if (!lens_p)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: lens_p is NULL", who);
    struct burst_shards s;
    burst_status_t st = params_shards(who, params, ranks, &s);
    if (st != BURST_OK)
        return st;
    memcpy(lens_p, s.lens, sizeof(int64_t) * (size_t)ranks);
    burst_shards_fini(&s);
    return BURST_OK;
}

burst_status_t burst_layout_plan_position(const struct burst_plan_params *params, int ranks,
                                          int rank, int64_t local, int64_t *pos_p)
{
    static const char *who = "burst_layout_plan_position";
    burst_error_clear();
    if (!pos_p)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: pos_p is NULL", who);
    struct burst_shards s;
    burst_status_t st = params_shards(who, params, ranks, &s);
    if (st != BURST_OK)
        return st;
    if (rank < 0 || rank >= ranks)
        st = burst_error(BURST_ERR_INVALID_ARG, "%s: rank = %d is not in 0..%d", who, rank,
                         ranks - 1);
    else if (local < 0 || local >= s.lens[rank])
        st = burst_error(BURST_ERR_INVALID_ARG, "%s: local = %lld is not in 0..%lld", who,
                         (long long)local, (long long)s.lens[rank] - 1);
    else {
        struct burst_posmap m = burst_shards_posmap(&s, rank);
        *pos_p = burst_posmap_pos(&m, local);
    }
    burst_shards_fini(&s);
    return st;
}

burst_status_t burst_layout_plan_positions(const struct burst_plan_params *params, int ranks,
                                           int rank, int64_t *positions_p)
{
    static const char *who = "burst_layout_plan_positions";
    burst_error_clear();
    if (!positions_p)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: positions_p is NULL", who);
    struct burst_shards s;
    burst_status_t st = params_shards(who, params, ranks, &s);
    if (st != BURST_OK)
        return st;
    if (rank < 0 || rank >= ranks) {
        st = burst_error(BURST_ERR_INVALID_ARG, "%s: rank = %d is not in 0..%d", who, rank,
                         ranks - 1);
    } else {
        struct burst_posmap m = burst_shards_posmap(&s, rank);
        for (int64_t i = 0; i < s.lens[rank]; i++)
            positions_p[i] = burst_posmap_pos(&m, i);
    }
    burst_shards_fini(&s);
    return st;
}

burst_status_t burst_layout_plan_permute(const struct burst_plan_params *params, int ranks,
                                         const struct burst_tensor *natural,
                                         struct burst_tensor *permuted)
{
    static const char *who = "burst_layout_plan_permute";
    burst_error_clear();
    if (!params)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: params is NULL", who);
    return permute(who, params->layout, ranks, NULL, natural, "natural", permuted, "permuted", 1,
                   params);
}

burst_status_t burst_layout_plan_unpermute(const struct burst_plan_params *params, int ranks,
                                           const struct burst_tensor *permuted,
                                           struct burst_tensor *natural)
{
    static const char *who = "burst_layout_plan_unpermute";
    burst_error_clear();
    if (!params)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: params is NULL", who);
    return permute(who, params->layout, ranks, NULL, permuted, "permuted", natural, "natural", 0,
                   params);
}
