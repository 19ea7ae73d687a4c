/*
 * runtime/kvcache.c - the key/value cache object: parameters, the creating handshake, the
 * pools and block tables, staged appends, queries (burst/kvcache.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "kvcache_internal.h"

struct burst_kvcache_params burst_kvcache_params_default(void)
{
    struct burst_kvcache_params p = {
        .api_version = BURST_API_VERSION,
        .max_seqs = 0,
        .block_len = 64,
        .capacity_blocks = 0,
        .q_heads = 0,
        .kv_heads = 0,
        .head_dim = 0,
        .dtype = BURST_DTYPE_FP32,
        .softmax_scale = 0.0f,
        .layout = BURST_LAYOUT_ZIGZAG,
    };
    return p;
}

static burst_status_t validate(const char *who, const struct burst_kvcache_params *p)
{
    burst_status_t st = burst_check_api_version(who, p->api_version);
    if (st != BURST_OK)
        return st;
#define BAD(fmt, ...) burst_error(BURST_ERR_INVALID_ARG, "%s: " fmt, who, __VA_ARGS__)
    if (p->max_seqs < 1)
        return BAD("max_seqs = %d must be >= 1", p->max_seqs);
    if (p->block_len < 1 || p->block_len > ((int64_t)1 << 30))
        return BAD("block_len = %lld must be in 1..2^30", (long long)p->block_len);
    if (p->capacity_blocks < 1 || p->capacity_blocks > INT32_MAX)
        return BAD("capacity_blocks = %lld must be in 1..%d", (long long)p->capacity_blocks,
                   INT32_MAX);
    if (p->q_heads < 1 || p->kv_heads < 1 || p->q_heads % p->kv_heads != 0)
        return BAD("q_heads = %d, kv_heads = %d: both must be >= 1 and q_heads a multiple of "
                   "kv_heads",
                   p->q_heads, p->kv_heads);
    if (p->head_dim < 8 || p->head_dim > 256 || p->head_dim % 8 != 0)
        return BAD("head_dim = %d must be a multiple of 8 in 8..256", p->head_dim);
    if (burst_dtype_size(p->dtype) == 0)
        return BAD("dtype = %d is not a burst_dtype_t", (int)p->dtype);
    if (!isfinite(p->softmax_scale) || p->softmax_scale < 0.0f)
        return BAD("softmax_scale = %g must be finite and >= 0", (double)p->softmax_scale);
    if (p->layout != BURST_LAYOUT_NATURAL && p->layout != BURST_LAYOUT_ZIGZAG &&
        p->layout != BURST_LAYOUT_STRIPED)
        return BAD("layout = %d is not a burst_layout_t", (int)p->layout);
    double pool = 2.0 * (double)p->capacity_blocks * (double)p->block_len * p->kv_heads *
                  p->head_dim * (double)burst_dtype_size(p->dtype);
    if (pool > (double)SIZE_MAX / 2)
        return burst_error(BURST_ERR_TOO_LARGE,
                           "%s: capacity_blocks = %lld x block_len = %lld "
                           "is too large to address",
                           who, (long long)p->capacity_blocks, (long long)p->block_len);
#undef BAD
    return BURST_OK;
}

/* The fields every rank must agree on, in the order of their names. */
#define KV_FIELDS 9
static const char *const field_names[KV_FIELDS] = {"max_seqs", "block_len",     "capacity_blocks",
                                                   "q_heads",  "kv_heads",      "head_dim",
                                                   "dtype",    "softmax_scale", "layout"};

static void pack_fields(const struct burst_kvcache_params *p, int64_t *f)
{
    uint32_t scale_bits;
    memcpy(&scale_bits, &p->softmax_scale, sizeof scale_bits);
    int64_t v[KV_FIELDS] = {p->max_seqs, p->block_len, p->capacity_blocks,  p->q_heads, p->kv_heads,
                            p->head_dim, p->dtype,     (int64_t)scale_bits, p->layout};
    memcpy(f, v, sizeof v);
}

/* Exchange and compare every rank's parameters (BURST_ERR_PLAN_MISMATCH naming rank, field). */
static burst_status_t handshake(struct burst_kvcache *c, const char *who)
{
    const size_t len = KV_FIELDS * sizeof(int64_t);
    int64_t mine[KV_FIELDS];
    int64_t *all = malloc(len * (size_t)c->size);
    if (!all)
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    pack_fields(&c->p, mine);
    burst_status_t st = burst_comm_check(c->comm);
    if (st == BURST_OK)
        st = burst_comm_allgather(c->comm, burst_tag(++c->comm->seq, BURST_MSG_CACHE, 0), mine, all,
                                  len);
    for (int r = 0; st == BURST_OK && r < c->size; r++)
        for (int f = 0; f < KV_FIELDS; f++)
            if (all[r * KV_FIELDS + f] != mine[f]) {
                st = burst_error(BURST_ERR_PLAN_MISMATCH,
                                 "%s: rank %d's cache differs from rank %d's in field %s", who, r,
                                 c->rank, field_names[f]);
                break;
            }
    free(all);
    return st;
}

static burst_status_t alloc_pools(struct burst_kvcache *c, const char *who)
{
    const struct burst_backend_ops *ops = c->ctx->ops;
    const size_t pool = (size_t)c->p.capacity_blocks * (size_t)c->p.block_len * c->row_bytes;
    c->k_pool = ops->mem.alloc(c->ctx->be, pool);
    c->v_pool = c->k_pool ? ops->mem.alloc(c->ctx->be, pool) : NULL;
    if (!c->v_pool)
        return burst_error(BURST_ERR_NO_MEMORY,
                           "%s: cannot allocate two pools of %zu bytes (capacity_blocks = %lld)",
                           who, pool, (long long)c->p.capacity_blocks);
    if (ops->mem.device_memory) {
        size_t tb = (size_t)c->p.max_seqs * (size_t)c->p.capacity_blocks * sizeof(int32_t);
        c->tables_dev = ops->mem.alloc(c->ctx->be, tb);
        if (!c->tables_dev)
            return burst_error(BURST_ERR_NO_MEMORY, "%s: cannot allocate the block tables", who);
    }
    return BURST_OK;
}

static burst_status_t alloc_host(struct burst_kvcache *c, const char *who)
{
    const int64_t cap = c->p.capacity_blocks;
    c->free_list = malloc((size_t)cap * sizeof(int32_t));
    c->seqs = calloc((size_t)c->p.max_seqs, sizeof *c->seqs);
    c->lens = calloc((size_t)c->size * (size_t)c->p.max_seqs, sizeof(int64_t));
    c->used = calloc((size_t)c->size, sizeof(int64_t));
    if (!c->free_list || !c->seqs || !c->lens || !c->used)
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    for (int s = 0; s < c->p.max_seqs; s++)
        if (!(c->seqs[s].blocks = malloc((size_t)cap * sizeof(int32_t))))
            return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    /* a stack popped from the end: block 0 first */
    for (int64_t i = 0; i < cap; i++)
        c->free_list[i] = (int32_t)(cap - 1 - i);
    c->nfree = cap;
    return BURST_OK;
}

burst_status_t burst_kvcache_create(struct burst_context *ctx, struct burst_comm *comm,
                                    const struct burst_kvcache_params *params,
                                    struct burst_kvcache **cache_p)
{
    static const char *who = "burst_kvcache_create";
    burst_error_clear();
    if (!cache_p) { /* a local error: peers must not wait in the handshake */
        burst_status_t st = burst_error(BURST_ERR_INVALID_ARG, "%s: cache_p is NULL", who);
        if (comm)
            burst_comm_abort(comm, st);
        return st;
    }
    *cache_p = NULL;
    if (!ctx || !comm || !params) {
        burst_status_t st = burst_error(BURST_ERR_INVALID_ARG, "%s: %s is NULL", who,
                                        !ctx    ? "ctx"
                                        : !comm ? "comm"
                                                : "params");
        if (comm)
            burst_comm_abort(comm, st);
        return st;
    }
    struct burst_kvcache *c = calloc(1, sizeof *c);
    burst_status_t st =
        c ? validate(who, params) : burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    if (st == BURST_OK) {
        c->ctx = ctx;
        c->comm = comm;
        c->p = *params;
        c->rank = comm->rank;
        c->size = comm->size;
        c->scale =
            c->p.softmax_scale > 0.0f ? c->p.softmax_scale : 1.0f / sqrtf((float)c->p.head_dim);
        c->row_bytes = (size_t)c->p.kv_heads * (size_t)c->p.head_dim * burst_dtype_size(c->p.dtype);
        st = alloc_host(c, who);
    }
    if (st == BURST_OK)
        st = alloc_pools(c, who);
    if (st != BURST_OK) { /* a local failure: peers must not wait in the handshake */
        burst_comm_abort(comm, st);
        burst_kvcache_destroy(c);
        return st;
    }
    if ((st = handshake(c, who)) != BURST_OK) {
        if (st != BURST_ERR_PLAN_MISMATCH) /* every rank sees a mismatch: comm stays usable */
            burst_comm_abort(comm, st);
        burst_kvcache_destroy(c);
        return st;
    }
    *cache_p = c;
    return BURST_OK;
}

burst_status_t burst_kv_work(struct burst_kvcache *c, int slot, size_t bytes, const char *who,
                             void **p)
{
    *p = c->work[slot];
    if (c->work_bytes[slot] >= bytes && c->work[slot])
        return BURST_OK;
    const struct burst_backend_ops *ops = c->ctx->ops;
    burst_status_t st = BURST_OPS_HAS(ops, stream.sync) ? ops->stream.sync(c->ctx->be) : BURST_OK;
    if (st != BURST_OK)
        return st;
    ops->mem.free(c->ctx->be, c->work[slot]);
    c->work_bytes[slot] = 0;
    c->work[slot] = *p = ops->mem.alloc(c->ctx->be, bytes);
    if (!c->work[slot])
        return burst_error(BURST_ERR_NO_MEMORY, "%s: cannot allocate %zu bytes of backend memory",
                           who, bytes);
    c->work_bytes[slot] = bytes;
    return BURST_OK;
}

void burst_kvcache_destroy(struct burst_kvcache *c)
{
    if (!c)
        return;
    burst_plan_destroy(c->plan);
    if (c->ctx) {
        c->ctx->ops->mem.free(c->ctx->be, c->work[0]);
        c->ctx->ops->mem.free(c->ctx->be, c->work[1]);
        c->ctx->ops->mem.free(c->ctx->be, c->k_pool);
        c->ctx->ops->mem.free(c->ctx->be, c->v_pool);
        c->ctx->ops->mem.free(c->ctx->be, c->tables_dev);
    }
    for (int s = 0; c->seqs && s < c->p.max_seqs; s++)
        free(c->seqs[s].blocks);
    free(c->seqs);
    free(c->free_list);
    free(c->lens);
    free(c->used);
    free(c);
}

int64_t burst_kvcache_shard_len(const struct burst_kvcache *c, int seq, int rank)
{
    if (!c || seq < 0 || seq >= c->p.max_seqs || rank < 0 || rank >= c->size)
        return -1;
    return c->lens[(size_t)rank * (size_t)c->p.max_seqs + (size_t)seq];
}

int64_t burst_kvcache_len(const struct burst_kvcache *c, int seq)
{
    if (!c || seq < 0 || seq >= c->p.max_seqs)
        return -1;
    int64_t n = 0;
    for (int r = 0; r < c->size; r++)
        n += burst_kvcache_shard_len(c, seq, r);
    return n;
}

int64_t burst_kvcache_free_blocks(const struct burst_kvcache *c, int rank)
{
    if (!c || rank < 0 || rank >= c->size)
        return -1;
    return c->p.capacity_blocks - c->used[rank];
}

int64_t burst_kvcache_chunk_len(const struct burst_kvcache *c, int64_t chunk_len)
{
    int64_t n = -1;
    if (!c || burst_layout_shard_len(c->p.layout, chunk_len, c->size, c->rank, &n) != BURST_OK)
        return -1;
    return n;
}

burst_status_t burst_kvcache_reset(struct burst_kvcache *c, int seq)
{
    static const char *who = "burst_kvcache_reset";
    burst_error_clear();
    if (!c)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: cache is NULL", who);
    if (seq < 0 || seq >= c->p.max_seqs)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: seq = %d is out of range 0..%d", who, seq,
                           c->p.max_seqs - 1);
    struct burst_kv_seq *s = &c->seqs[seq];
    while (s->nblocks > 0)
        c->free_list[c->nfree++] = s->blocks[--s->nblocks];
    s->len = 0;
    for (int r = 0; r < c->size; r++) {
        int64_t *len = &c->lens[(size_t)r * (size_t)c->p.max_seqs + (size_t)seq];
        c->used[r] -= burst_kv_blocks_for(c, *len);
        *len = 0;
    }
    return BURST_OK;
}

burst_status_t burst_kvcache_stats(const struct burst_kvcache *c, int prefill,
                                   struct burst_kvcache_stats *stats_p)
{
    if (!c || !stats_p)
        return burst_error(BURST_ERR_INVALID_ARG, "burst_kvcache_stats: %s is NULL",
                           !c ? "cache" : "stats_p");
    *stats_p = c->stats[prefill ? 1 : 0];
    return BURST_OK;
}

/* ---- staged appends ---- */

int64_t burst_kv_need(const struct burst_kvcache *c, int r, int seq, int64_t add)
{
    int64_t len = burst_kvcache_shard_len(c, seq, r);
    return burst_kv_blocks_for(c, len + add) - burst_kv_blocks_for(c, len);
}

burst_status_t burst_kv_check_fit(const struct burst_kvcache *c, const char *who, const char *what,
                                  int r, int seq, int64_t add, int64_t *claimed)
{
    const int64_t len = burst_kvcache_shard_len(c, seq, r);
    const int64_t room = c->p.capacity_blocks * c->p.block_len - len; /* no overflow: create */
    const int64_t left = burst_kvcache_free_blocks(c, r) - (claimed ? *claimed : 0);
    if (add <= room) { /* len + add cannot overflow now */
        const int64_t need = burst_kv_need(c, r, seq, add);
        if (need <= left) {
            if (claimed)
                *claimed += need;
            return BURST_OK;
        }
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: %s: %lld new tokens of sequence %d on rank %d need %lld blocks of "
                           "%lld tokens; rank %d has %lld of %lld free (capacity_blocks)%s",
                           who, what, (long long)add, seq, r, (long long)need,
                           (long long)c->p.block_len, r, (long long)left,
                           (long long)c->p.capacity_blocks,
                           claimed && *claimed ? " after the call's earlier sequences" : "");
    }
    return burst_error(BURST_ERR_INVALID_ARG,
                       "%s: %s: %lld new tokens of sequence %d on rank %d need more blocks of "
                       "%lld tokens than the cache has; rank %d has %lld of %lld free "
                       "(capacity_blocks)",
                       who, what, (long long)add, seq, r, (long long)c->p.block_len, r,
                       (long long)left, (long long)c->p.capacity_blocks);
}

const int32_t *burst_kv_table_dev(const struct burst_kvcache *c, int seq)
{
    if (c->tables_dev)
        return c->tables_dev + (size_t)seq * (size_t)c->p.capacity_blocks;
    return c->seqs[seq].blocks;
}

burst_status_t burst_kv_reserve(struct burst_kvcache *c, int seq, int64_t add)
{
    struct burst_kv_seq *s = &c->seqs[seq];
    int64_t want = burst_kv_blocks_for(c, s->len + add);
    if (want - s->nblocks > c->nfree)
        return burst_error(BURST_ERR_INTERNAL, "burst_kvcache: pool of rank %d short of blocks",
                           c->rank);
    const int64_t first = s->nblocks;
    while (s->nblocks < want)
        s->blocks[s->nblocks++] = c->free_list[--c->nfree];
    if (!c->tables_dev || s->nblocks == first)
        return BURST_OK;
    return burst_kv_from_host(c, (int32_t *)burst_kv_table_dev(c, seq) + first, s->blocks + first,
                              (size_t)(s->nblocks - first) * sizeof(int32_t));
}

void burst_kv_commit(struct burst_kvcache *c, int r, int seq, int64_t add)
{
    int64_t *len = &c->lens[(size_t)r * (size_t)c->p.max_seqs + (size_t)seq];
    c->used[r] += burst_kv_need(c, r, seq, add);
    *len += add;
    if (r == c->rank)
        c->seqs[seq].len = *len;
}

void burst_kv_rollback(struct burst_kvcache *c, int seq)
{
    struct burst_kv_seq *s = &c->seqs[seq];
    const int64_t keep = burst_kv_blocks_for(c, s->len);
    while (s->nblocks > keep)
        c->free_list[c->nfree++] = s->blocks[--s->nblocks];
}

burst_status_t burst_kv_write_rows(struct burst_kvcache *c, int seq, int which, int64_t at,
                                   const struct burst_tensor *src)
{
    const struct burst_backend_ops *ops = c->ctx->ops;
    const int64_t bl = c->p.block_len, rows = src->shape[1];
    unsigned char *pool = which ? c->v_pool : c->k_pool;
    burst_status_t st = BURST_OK;
    const int32_t *blocks = c->seqs[seq].blocks;
    for (int64_t i = 0; st == BURST_OK && i < rows;) {
        const int64_t j = at + i, row = j % bl;
        int64_t seg = rows - i < bl - row ? rows - i : bl - row;
        const int32_t blk = blocks[j / bl];
        /* blocks that follow blk in the pool as in the sequence extend the copy (a fresh
         * cache hands a chunk consecutive blocks: one copy for the whole chunk) */
        while (i + seg < rows && blocks[(j + seg) / bl] == blk + (j + seg) / bl - j / bl)
            seg += rows - i - seg < bl ? rows - i - seg : bl;
        struct burst_tensor dst =
            burst_tensor_contiguous(pool + ((size_t)blk * (size_t)bl + (size_t)row) * c->row_bytes,
                                    c->p.dtype, 1, seg, c->p.kv_heads, c->p.head_dim);
        struct burst_tensor s = *src;
        s.data = (unsigned char *)src->data +
                 (size_t)(i * src->stride[1]) * burst_dtype_size(src->dtype);
        s.shape[1] = seg;
        st = ops->elem.copy(c->ctx->be, &dst, &s);
        i += seg;
    }
    return st;
}

burst_status_t burst_kv_to_host(struct burst_kvcache *c, void *dst, const void *src, size_t n)
{
    const struct burst_backend_ops *ops = c->ctx->ops;
    burst_status_t st = BURST_OPS_HAS(ops, stream.sync) ? ops->stream.sync(c->ctx->be) : BURST_OK;
    if (st != BURST_OK || n == 0)
        return st;
    if (BURST_OPS_HAS(ops, mem.memcpy))
        return ops->mem.memcpy(c->ctx->be, dst, src, n);
    memcpy(dst, src, n);
    return BURST_OK;
}

burst_status_t burst_kv_from_host(struct burst_kvcache *c, void *dst, const void *src, size_t n)
{
    return burst_kv_to_host(c, dst, src, n); /* memcpy goes either way */
}
