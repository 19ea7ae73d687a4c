/*
 * runtime/kv_prefill.c - burst_prefill: one prompt chunk of a sequence, sharded in the cache's
 * layout (burst/kvcache.h; docs/ALGORITHM.md, "Prefill over a sharded cache").
 *
 * The chunk's rows attend two sets of keys, merged by log-sum-exp:
 *   the chunk itself, causally: the ring forward of a plan of the chunk's length (causality
 *   depends only on position differences, so the chunk's offset in the sequence changes
 *   nothing), kept by the cache between calls of the same chunk length;
 *   the keys cached before the chunk, all older than every row of it: the chunk's queries are
 *   allgathered, each rank attends all of them to its shard (kv_attend.c), and each rank's
 *   partial (O, lse) of rank s's rows is sent to rank s.
 * Then each rank appends its shard's K/V rows; they are committed once all that succeeded.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "kvcache_internal.h"
#include "plan_internal.h"
#include "tensor_check.h"

static const char *who = "burst_prefill";

/* Work of one call. */
struct pre_call {
    struct burst_kvcache *c;
    int seq;
    int64_t chunk, n, n_max; /* chunk length, this rank's rows, the largest shard */
    int64_t *lens;           /* [size] every rank's rows of the chunk */
    size_t per;              /* floats of one rank's partial for one shard: n_max x Hq x (d+1) */
    float *lse_self;         /* backend [Hq, n]: the ring forward's lse */
    float *part;             /* backend [size][per]: partials of every rank's rows, this shard */
    void *qall;              /* backend [size, n_max, Hq, d] dtype: the chunk's queries */
    float *send, *recv;      /* host [size][per] */
    float *self_o;           /* host [n, Hq, d] + [Hq, n]: the ring's part */
    float *out;              /* host [n, Hq, d] + [Hq, n]: the merged result */
};

/* Replicated checks (every rank alike: nothing aborted) and the shard lengths. */
static burst_status_t check_chunk(struct pre_call *w, int seq, int64_t chunk)
{
    struct burst_kvcache *c = w->c;
    if (seq < 0 || seq >= c->p.max_seqs)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: seq = %d is out of range 0..%d", who, seq,
                           c->p.max_seqs - 1);
    for (int r = 0; r < c->size; r++) {
        burst_status_t st = burst_layout_shard_len(c->p.layout, chunk, c->size, r, &w->lens[r]);
        if (st != BURST_OK)
            return burst_error(BURST_ERR_INVALID_ARG,
                               "%s: chunk_len = %lld cannot be sharded over %d ranks in the "
                               "cache's layout (needs >= %d tokens)",
                               who, (long long)chunk, c->size,
                               c->p.layout == BURST_LAYOUT_ZIGZAG ? 2 * c->size : c->size);
        char what[48];
        snprintf(what, sizeof what, "chunk_len = %lld", (long long)chunk);
        if ((st = burst_kv_check_fit(c, who, what, r, seq, w->lens[r], NULL)) != BURST_OK)
            return st;
        if (w->lens[r] > w->n_max)
            w->n_max = w->lens[r];
    }
    w->n = w->lens[c->rank];
    return BURST_OK;
}

static burst_status_t check_tensors(const struct pre_call *w, const struct burst_tensor *q,
                                    const struct burst_tensor *k, const struct burst_tensor *v,
                                    const struct burst_tensor *o, const float *lse)
{
    const struct burst_kvcache_params *p = &w->c->p;
    burst_status_t st;
    if ((st = burst_tensor_check(who, "q", q, p->dtype, 1, w->n, p->q_heads, p->head_dim, 0)) ||
        (st = burst_tensor_check(who, "k", k, p->dtype, 1, w->n, p->kv_heads, p->head_dim, 0)) ||
        (st = burst_tensor_check(who, "v", v, p->dtype, 1, w->n, p->kv_heads, p->head_dim, 0)) ||
        (st = burst_tensor_check(who, "o", o, p->dtype, 1, w->n, p->q_heads, p->head_dim, 1)) ||
        (st = burst_kv_check_overlap(who, q, k, v, o, lse, p->q_heads * w->n)))
        return st;
    static const char *const mem_names[5] = {"q", "k", "v", "o", "lse"};
    const void *const mem[5] = {q->data, k->data, v->data, o->data,
                                lse ? (const void *)lse : q->data};
    return burst_context_check_memory(w->c->ctx, who, 5, mem_names, mem);
}

/* The cache's plan for chunks of w->chunk tokens (collective when it must be made). */
static burst_status_t chunk_plan(struct pre_call *w)
{
    struct burst_kvcache *c = w->c;
    if (c->plan && c->plan_len == w->chunk)
        return BURST_OK;
    burst_plan_destroy(c->plan);
    c->plan = NULL;
    struct burst_plan_params pp = burst_plan_params_default();
    pp.seq_len = w->chunk;
    pp.q_heads = c->p.q_heads;
    pp.kv_heads = c->p.kv_heads;
    pp.head_dim = c->p.head_dim;
    pp.dtype = c->p.dtype;
    pp.softmax_scale = c->scale;
    pp.causal = 1;
    pp.layout = c->p.layout;
    burst_status_t st = burst_plan_create(c->ctx, c->comm, &pp, &c->plan);
    c->plan_len = st == BURST_OK ? w->chunk : 0;
    return st;
}

/* The call's buffers: the ring forward's lse (a first chunk whose caller wants lse writes the
 * caller's), and where the sequence has cached keys the exchange of with_cache (every rank's
 * queries, the partials of every shard on the device and on the host), which a first chunk
 * does not allocate. */
static burst_status_t pre_alloc(struct pre_call *w, int cached, const float *lse)
{
    struct burst_kvcache *c = w->c;
    const struct burst_backend_ops *ops = c->ctx->ops;
    const int64_t hq = c->p.q_heads, d = c->p.head_dim, G = c->size;
    w->per = (size_t)(w->n_max * hq * (d + 1));
    const size_t mine = (size_t)(w->n * hq * (d + 1));
    if (!cached && lse) /* the first chunk: only the ring forward, into the caller's lse */
        return BURST_OK;
    w->lse_self = ops->mem.alloc(c->ctx->be, (size_t)(hq * w->n) * sizeof(float));
    if (!cached)
        return w->lse_self ? BURST_OK
                           : burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory (%lld floats)",
                                         who, (long long)(hq * w->n));
    w->part = ops->mem.alloc(c->ctx->be, (size_t)G * w->per * sizeof(float));
    w->qall =
        ops->mem.alloc(c->ctx->be, (size_t)(G * w->n_max * hq * d) * burst_dtype_size(c->p.dtype));
    w->send = malloc(2 * (size_t)G * w->per * sizeof(float));
    w->self_o = malloc(2 * mine * sizeof(float));
    if (!w->lse_self || !w->part || !w->qall || !w->send || !w->self_o)
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory (%zu floats)", who,
                           3 * (size_t)G * w->per);
    w->recv = w->send + (size_t)G * w->per;
    w->out = w->self_o + mine;
    return BURST_OK;
}

static void pre_free(struct pre_call *w)
{
    const struct burst_backend_ops *ops = w->c->ctx->ops;
    ops->mem.free(w->c->ctx->be, w->lse_self);
    ops->mem.free(w->c->ctx->be, w->part);
    ops->mem.free(w->c->ctx->be, w->qall);
    free(w->send);
    free(w->self_o);
    free(w->lens);
}

/* Every rank's queries of the chunk into w->qall, [size, n_max, Hq, d]. */
static burst_status_t gather_queries(struct pre_call *w, const struct burst_tensor *q)
{
    struct burst_kvcache *c = w->c;
    const int64_t hq = c->p.q_heads, d = c->p.head_dim;
    const size_t bytes = (size_t)(w->n_max * hq * d) * burst_dtype_size(c->p.dtype);
    unsigned char *host = malloc(bytes * (size_t)(c->size + 1));
    if (!host)
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory (%zu bytes)", who,
                           bytes * (size_t)(c->size + 1));
    const size_t mine = (size_t)(w->n * hq * d) * burst_dtype_size(c->p.dtype);
    memset(host + mine, 0, bytes - mine); /* the rows past this rank's n travel too */
    /* this rank's rows, packed, through the slot of qall that receives them anyway */
    unsigned char *slot = (unsigned char *)w->qall + (size_t)c->rank * bytes;
    struct burst_tensor packed = burst_tensor_contiguous(slot, c->p.dtype, 1, w->n, hq, d);
    burst_status_t st = c->ctx->ops->elem.copy(c->ctx->be, &packed, q);
    if (st == BURST_OK)
        st = burst_kv_to_host(c, host, slot, mine);
    if (st == BURST_OK)
        st = burst_comm_allgather(c->comm, burst_tag(++c->comm->seq, BURST_MSG_CACHE, 0), host,
                                  host + bytes, bytes);
    if (st == BURST_OK)
        st = burst_kv_from_host(c, w->qall, host + bytes, bytes * (size_t)c->size);
    free(host);
    return st;
}

/* Each rank's rows against this rank's cached shard: w->part[s] = (O [n_s, Hq, d], lse
 * [Hq, n_s]) of rank s's rows, then to host in w->send. */
static burst_status_t attend_cache(struct pre_call *w, int *fallback)
{
    struct burst_kvcache *c = w->c;
    const struct burst_backend_ops *ops = c->ctx->ops;
    const int64_t hq = c->p.q_heads, d = c->p.head_dim, len = c->seqs[w->seq].len;
    const size_t qbytes = (size_t)(w->n_max * hq * d) * burst_dtype_size(c->p.dtype);
    burst_status_t st = ops->elem.fill(c->ctx->be, w->part, (size_t)c->size * w->per, -INFINITY);
    for (int s = 0; st == BURST_OK && s < c->size; s++) {
        float *o_acc = w->part + (size_t)s * w->per;
        float *lse_acc = o_acc + (size_t)(w->lens[s] * hq * d);
        st = ops->elem.fill(c->ctx->be, o_acc, (size_t)(w->lens[s] * hq * d), 0.0f);
        struct burst_tensor qs = burst_tensor_contiguous(
            (unsigned char *)w->qall + (size_t)s * qbytes, c->p.dtype, 1, w->lens[s], hq, d);
        if (st == BURST_OK)
            st = burst_kv_attend(c, w->seq, &qs, len, len, o_acc, lse_acc, fallback);
    }
    if (st == BURST_OK)
        st = burst_kv_to_host(c, w->send, w->part, (size_t)c->size * w->per * sizeof(float));
    return st;
}

/* Partials of rank s's rows to rank s; this rank's from every rank into w->recv. */
static burst_status_t exchange(struct pre_call *w)
{
    struct burst_kvcache *c = w->c;
    const uint64_t tag = burst_tag(++c->comm->seq, BURST_MSG_CACHE, 1);
    const int64_t hq = c->p.q_heads, d = c->p.head_dim;
    struct burst_tp_req **req = calloc(2 * (size_t)c->size, sizeof *req);
    if (!req)
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    burst_status_t st = BURST_OK;
    for (int r = 0; st == BURST_OK && r < c->size; r++) {
        const size_t to = (size_t)(w->lens[r] * hq * (d + 1)) * sizeof(float);
        const size_t from = (size_t)(w->n * hq * (d + 1)) * sizeof(float);
        if (r == c->rank)
            memcpy(w->recv + (size_t)r * w->per, w->send + (size_t)r * w->per, from);
        else if ((st = burst_comm_irecv(c->comm, r, tag, w->recv + (size_t)r * w->per, from,
                                        &req[2 * r])) == BURST_OK)
            st = burst_comm_isend(c->comm, r, tag, w->send + (size_t)r * w->per, to,
                                  &req[2 * r + 1]);
    }
    for (int i = 0; i < 2 * c->size; i++) {
        burst_status_t sw = burst_comm_wait(c->comm, &req[i]);
        if (st == BURST_OK)
            st = sw;
    }
    free(req);
    return st;
}

/* The ring's part (o in dtype, lse_self) and the exchanged partials merged into w->out. */
static burst_status_t merge_rows(struct pre_call *w, const struct burst_tensor *o)
{
    struct burst_kvcache *c = w->c;
    const struct burst_backend_ops *ops = c->ctx->ops;
    const int64_t hq = c->p.q_heads, d = c->p.head_dim, n = w->n;
    const size_t on = (size_t)(n * hq * d);
    float *o32 = ops->mem.alloc(c->ctx->be, on * sizeof(float));
    if (!o32)
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    struct burst_tensor dst = burst_tensor_contiguous(o32, BURST_DTYPE_FP32, 1, n, hq, d);
    burst_status_t st = ops->elem.copy(c->ctx->be, &dst, o);
    if (st == BURST_OK)
        st = burst_kv_to_host(c, w->self_o, o32, on * sizeof(float));
    if (st == BURST_OK)
        st = burst_kv_to_host(c, w->self_o + on, w->lse_self, (size_t)(hq * n) * sizeof(float));
    ops->mem.free(c->ctx->be, o32);
    const float **po = malloc(2 * (size_t)(c->size + 1) * sizeof(float *));
    if (st == BURST_OK && !po)
        st = burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    if (st == BURST_OK) {
        const float **pl = po + c->size + 1;
        for (int r = 0; r < c->size; r++) {
            po[r] = w->recv + (size_t)r * w->per;
            pl[r] = po[r] + on;
        }
        po[c->size] = w->self_o;
        pl[c->size] = w->self_o + on;
        burst_kv_merge(c->size + 1, po, pl, n, hq, d, w->out, w->out + on);
    }
    free(po);
    return st;
}

/* The chunk against the cache, merged with the ring's result already in o (and lse_self). */
static burst_status_t with_cache(struct pre_call *w, const struct burst_tensor *q,
                                 const struct burst_tensor *o, float *lse,
                                 struct burst_kvcache_stats *s)
{
    double t0 = burst_now();
    burst_status_t st = gather_queries(w, q);
    if (st == BURST_OK)
        st = attend_cache(w, &s->fallback);
    double t1 = burst_now();
    if (st == BURST_OK)
        st = exchange(w);
    if (st == BURST_OK)
        st = merge_rows(w, o);
    if (st == BURST_OK)
        st = burst_kv_write_out(w->c, who, w->out,
                                w->out + (size_t)(w->n * w->c->p.q_heads * w->c->p.head_dim), 1,
                                w->n, o, lse);
    s->local_s = t1 - t0;
    s->merge_s = burst_now() - t1;
    s->merge_bytes = (uint64_t)(w->c->size - 1) * (uint64_t)w->per * sizeof(float);
    return st;
}

/* The ring forward into o and lse_self; with nothing cached its lse is the result, written
 * straight to the caller's lse where one is wanted. */
static burst_status_t self_part(struct pre_call *w, const struct burst_tensor *q,
                                const struct burst_tensor *k, const struct burst_tensor *v,
                                struct burst_tensor *o, float *lse, int cached)
{
    struct burst_kvcache *c = w->c;
    burst_status_t st = chunk_plan(w);
    if (st == BURST_OK)
        st = burst_attention_forward(c->plan, q, k, v, o, !cached && lse ? lse : w->lse_self);
    return st;
}

burst_status_t burst_prefill(struct burst_kvcache *c, int seq, int64_t chunk_len,
                             const struct burst_tensor *q, const struct burst_tensor *k,
                             const struct burst_tensor *v, struct burst_tensor *o, float *lse)
{
    burst_error_clear();
    if (!c)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: cache is NULL", who);
    burst_status_t st = burst_comm_check(c->comm);
    if (st != BURST_OK)
        return st;
    const double t0 = burst_now();
    struct pre_call w = {.c = c, .seq = seq, .chunk = chunk_len};
    if (!(w.lens = calloc((size_t)c->size, sizeof(int64_t))))
        st = burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    if (st == BURST_OK && (st = check_chunk(&w, seq, chunk_len)) != BURST_OK) {
        free(w.lens);
        return st; /* every rank decided alike: the ring stays usable */
    }
    if (st == BURST_OK)
        st = check_tensors(&w, q, k, v, o, lse);
    const int cached = st == BURST_OK && burst_kvcache_len(c, seq) > 0;
    if (st == BURST_OK)
        st = pre_alloc(&w, cached, lse);
    struct burst_kvcache_stats s = {0};
    double t1 = burst_now();
    if (st == BURST_OK)
        st = self_part(&w, q, k, v, o, lse, cached);
    s.ring_s = burst_now() - t1;
    if (st == BURST_OK && cached)
        st = with_cache(&w, q, o, lse, &s);
    const int64_t at = st == BURST_OK ? c->seqs[seq].len : 0;
    if (st == BURST_OK)
        st = burst_kv_reserve(c, seq, w.n);
    if (st == BURST_OK)
        st = burst_kv_write_rows(c, seq, 0, at, k);
    if (st == BURST_OK)
        st = burst_kv_write_rows(c, seq, 1, at, v);
    if (st == BURST_OK && BURST_OPS_HAS(c->ctx->ops, stream.sync))
        st = c->ctx->ops->stream.sync(c->ctx->be);
    for (int r = 0; st == BURST_OK && r < c->size; r++)
        burst_kv_commit(c, r, seq, w.lens[r]);
    if (st != BURST_OK && seq >= 0 && seq < c->p.max_seqs)
        burst_kv_rollback(c, seq);
    pre_free(&w);
    if (st != BURST_OK) {
        burst_comm_abort(c->comm, st);
        return st;
    }
    s.total_s = burst_now() - t0;
    c->stats[1] = s;
    return BURST_OK;
}
