/*
 * runtime/kv_decode.c - burst_decode: t new tokens of B sequences, replicated on every rank,
 * against the sharded cache (burst/kvcache.h; docs/ALGORITHM.md, "Decode over a sharded cache").
 *
 * Each rank attends the new queries to its shard (the new rows appended first on the rank that
 * stores them), giving a partial (O, lse) per query row; one allgather of those partials,
 * G x (B x t x Hq x (d + 1) + 1) floats, and a log-sum-exp merge in rank order give every rank
 * the same output. The extra float carries the rank's local attention time: the slowest rank's
 * less this rank's is the part of the merge spent waiting for it (merge_wait_s). On one rank
 * there is nothing to merge: the attention writes the caller's o and lse itself (decode_step's
 * o_out, where the backend has it), and the call waits for it once. The new rows are committed
 * only once everything succeeded.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "fault.h"
#include "kvcache_internal.h"
#include "plan_internal.h"
#include "tensor_check.h"

static const char *who = "burst_decode";

/* The rank that stores new rows of seq: the fewest keys of it, ties to the lowest rank. */
static int owner_of(const struct burst_kvcache *c, int seq)
{
    int best = 0;
    for (int r = 1; r < c->size; r++)
        if (burst_kvcache_shard_len(c, seq, r) < burst_kvcache_shard_len(c, seq, best))
            best = r;
    return best;
}

/* Entry b of check_seqs; claimed: blocks the batch's earlier sequences take on each rank
 * (several sequences may have the same owner). */
static burst_status_t check_seq(const struct burst_kvcache *c, const int *ids, int64_t b, int64_t t,
                                int64_t *claimed)
{
    if (ids[b] < 0 || ids[b] >= c->p.max_seqs)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: seq_ids[%lld] = %d is out of range 0..%d",
                           who, (long long)b, ids[b], c->p.max_seqs - 1);
    for (int64_t e = 0; e < b; e++)
        if (ids[e] == ids[b])
            return burst_error(BURST_ERR_INVALID_ARG,
                               "%s: seq_ids[%lld] = %d repeats seq_ids[%lld]", who, (long long)b,
                               ids[b], (long long)e);
    if (burst_kvcache_len(c, ids[b]) == 0)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: seq_ids[%lld] = %d has no cached tokens: prefill it first", who,
                           (long long)b, ids[b]);
    char what[64];
    snprintf(what, sizeof what, "t = %lld for seq_ids[%lld] = %d", (long long)t, (long long)b,
             ids[b]);
    const int r = owner_of(c, ids[b]);
    return burst_kv_check_fit(c, who, what, r, ids[b], t, claimed + r);
}

/* Checks every rank decides alike from replicated state: nothing is aborted on failure. */
static burst_status_t check_seqs(const struct burst_kvcache *c, int64_t B, const int *ids,
                                 int64_t t)
{
    if (B < 1 || B > c->p.max_seqs)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: batch = %lld must be in 1..%d (max_seqs)",
                           who, (long long)B, c->p.max_seqs);
    if (!ids)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: seq_ids is NULL", who);
    int64_t *claimed = calloc((size_t)c->size, sizeof(int64_t));
    if (!claimed)
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    burst_status_t st = BURST_OK;
    for (int64_t b = 0; st == BURST_OK && b < B; b++)
        st = check_seq(c, ids, b, t, claimed);
    free(claimed);
    return st;
}

/* Checks of this rank's tensors (a failure aborts the communicator). */
static burst_status_t check_tensors(const struct burst_kvcache *c, int64_t B,
                                    const struct burst_tensor *q, const struct burst_tensor *k,
                                    const struct burst_tensor *v, const struct burst_tensor *o,
                                    const float *lse, int64_t *t_p)
{
    const struct burst_kvcache_params *p = &c->p;
    burst_status_t st = burst_tensor_check_view(who, "q", q, 0);
    if (st != BURST_OK)
        return st;
    const int64_t t = q->shape[1];
    if ((st = burst_tensor_check(who, "q", q, p->dtype, B, t, p->q_heads, p->head_dim, 0)) ||
        (st = burst_tensor_check(who, "k", k, p->dtype, B, t, p->kv_heads, p->head_dim, 0)) ||
        (st = burst_tensor_check(who, "v", v, p->dtype, B, t, p->kv_heads, p->head_dim, 0)) ||
        (st = burst_tensor_check(who, "o", o, p->dtype, B, t, p->q_heads, p->head_dim, 1)))
        return st;
    if ((st = burst_kv_check_overlap(who, q, k, v, o, lse, B * p->q_heads * t)) != BURST_OK)
        return st;
    static const char *const mem_names[5] = {"q", "k", "v", "o", "lse"};
    const void *const mem[5] = {q->data, k->data, v->data, o->data,
                                lse ? (const void *)lse : q->data};
    *t_p = t;
    return burst_context_check_memory(c->ctx, who, 5, mem_names, mem);
}

/* Batch entry b of a [B, t, H, d] view. */
static struct burst_tensor entry(const struct burst_tensor *x, int64_t b)
{
    struct burst_tensor e = *x;
    e.data = (unsigned char *)x->data + (size_t)(b * x->stride[0]) * burst_dtype_size(x->dtype);
    e.shape[0] = 1;
    return e;
}

/* Work of one call: host buffers and backend accumulators. */
struct dec_call {
    struct burst_kvcache *c;
    int64_t B, t;
    const int *ids;
    int *owner;
    float *o_acc, *lse_acc; /* backend memory: [B, t, Hq, d], [B, Hq, t] */
    float *mine, *all;      /* host: this rank's partials, every rank's */
    float *o_host, *lse_host;
    size_t on, ln; /* floats of o and lse partials */
    size_t per;    /* floats of one rank's message: on + ln, then its local time */
    int fallback;  /* the fwd_step fallback ran */
    uint64_t merge_bytes;
};

/* Append the new rows this rank stores and attend every sequence's queries to the shard: into
 * the running (o_acc, lse_acc), or, on one rank (o not NULL), straight into the caller's o, lse. */
static burst_status_t dec_local(struct dec_call *w, const struct burst_tensor *q,
                                const struct burst_tensor *k, const struct burst_tensor *v,
                                const struct burst_tensor *o, float *lse)
{
    struct burst_kvcache *c = w->c;
    const int64_t hq = c->p.q_heads, d = c->p.head_dim, t = w->t;
    burst_status_t st = BURST_OK;
    if (!o) {
        st = c->ctx->ops->elem.fill(c->ctx->be, w->o_acc, w->on, 0.0f);
        if (st == BURST_OK)
            st = c->ctx->ops->elem.fill(c->ctx->be, w->lse_acc, w->ln, -INFINITY);
    }
    for (int64_t b = 0; st == BURST_OK && b < w->B; b++) {
        const int seq = w->ids[b];
        const int64_t len = c->seqs[seq].len;
        int64_t nkeys = len;
        if (w->owner[b] == c->rank) {
            struct burst_tensor kb = entry(k, b), vb = entry(v, b);
            st = burst_kv_reserve(c, seq, t);
            if (st == BURST_OK)
                st = burst_kv_write_rows(c, seq, 0, len, &kb);
            if (st == BURST_OK)
                st = burst_kv_write_rows(c, seq, 1, len, &vb);
            nkeys = len + t;
        }
        struct burst_tensor qb = entry(q, b);
        float *oa = w->o_acc + b * t * hq * d, *la = w->lse_acc + b * hq * t;
        if (st == BURST_OK && o) {
            struct burst_tensor ob = entry(o, b);
            st = burst_kv_attend_out(c, seq, &qb, nkeys, len, &ob, lse ? lse + b * hq * t : NULL,
                                     oa, la, &w->fallback);
        } else if (st == BURST_OK) {
            st = burst_kv_attend(c, seq, &qb, nkeys, len, oa, la, &w->fallback);
        }
    }
    return st;
}

/* The allgather of the partials (and of each rank's local time, local_s here) and their merge
 * into o_host, lse_host; *wait_s = the largest local time less this rank's. */
static burst_status_t dec_merge(struct dec_call *w, double local_s, double *wait_s)
{
    struct burst_kvcache *c = w->c;
    const int64_t hq = c->p.q_heads, d = c->p.head_dim, t = w->t;
    const size_t per = w->per;
    local_s = (double)(float)local_s; /* as the peers see it: the slowest rank waits 0 */
    w->mine[per - 1] = (float)local_s;
    burst_status_t st = burst_kv_to_host(c, w->mine, w->o_acc, w->on * sizeof(float));
    if (st == BURST_OK)
        st = burst_kv_to_host(c, w->mine + w->on, w->lse_acc, w->ln * sizeof(float));
    if (st == BURST_OK)
        st = burst_comm_allgather(c->comm, burst_tag(++c->comm->seq, BURST_MSG_CACHE, 0), w->mine,
                                  w->all, per * sizeof(float));
    const float **po = malloc(2 * (size_t)c->size * sizeof(float *));
    if (st == BURST_OK && !po)
        st = burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    for (int64_t b = 0; st == BURST_OK && b < w->B; b++) {
        const float **pl = po + c->size;
        for (int r = 0; r < c->size; r++) {
            po[r] = w->all + (size_t)r * per + (size_t)(b * t * hq * d);
            pl[r] = w->all + (size_t)r * per + w->on + (size_t)(b * hq * t);
        }
        burst_kv_merge(c->size, po, pl, t, hq, d, w->o_host + b * t * hq * d,
                       w->lse_host + b * hq * t);
    }
    free(po);
    double slowest = local_s;
    for (int r = 0; st == BURST_OK && r < c->size; r++)
        slowest = fmax(slowest, (double)w->all[(size_t)r * per + per - 1]);
    *wait_s = slowest - local_s;
    w->merge_bytes = (uint64_t)(c->size - 1) * per * sizeof(float);
    return st;
}

static burst_status_t dec_alloc(struct dec_call *w)
{
    struct burst_kvcache *c = w->c;
    w->on = (size_t)(w->B * w->t * c->p.q_heads * c->p.head_dim);
    w->ln = (size_t)(w->B * c->p.q_heads * w->t);
    const size_t per = w->per = w->on + w->ln + 1;
    w->owner = malloc((size_t)w->B * sizeof(int));
    for (int64_t b = 0; w->owner && b < w->B; b++)
        w->owner[b] = -1; /* nothing reserved yet */
    if (!w->owner)
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    if (c->size > 1) { /* the host side of the merge */
        w->mine = malloc(per * sizeof(float));
        w->all = malloc(per * (size_t)c->size * sizeof(float));
        w->o_host = malloc(per * sizeof(float));
        if (!w->mine || !w->all || !w->o_host)
            return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory (%zu floats per rank)", who,
                               per * (size_t)(c->size + 2));
        w->lse_host = w->o_host + w->on;
    }
    /* the running O and lse in the cache's work memory, lse from a 256-byte boundary */
    const size_t o_bytes = (w->on * sizeof(float) + 255) / 256 * 256;
    void *acc = NULL;
    burst_status_t st = burst_kv_work(c, 0, o_bytes + w->ln * sizeof(float), who, &acc);
    if (st != BURST_OK)
        return st;
    w->o_acc = acc;
    w->lse_acc = (float *)(void *)((unsigned char *)acc + o_bytes);
    return BURST_OK;
}

static void dec_free(struct dec_call *w)
{
    free(w->owner);
    free(w->mine);
    free(w->all);
    free(w->o_host);
}

burst_status_t burst_decode(struct burst_kvcache *c, int64_t batch, const int *seq_ids,
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
    struct dec_call w = {.c = c, .B = batch, .ids = seq_ids};
    if (batch < 1 || batch > c->p.max_seqs)
        return check_seqs(c, batch, seq_ids, 1);
    if ((st = check_tensors(c, batch, q, k, v, o, lse, &w.t)) != BURST_OK) {
        burst_comm_abort(c->comm, st);
        return st;
    }
    if ((st = check_seqs(c, batch, seq_ids, w.t)) != BURST_OK)
        return st; /* every rank decided alike: the ring stays usable */
    struct burst_kvcache_stats stats = {0};
    st = dec_alloc(&w);
    for (int64_t b = 0; st == BURST_OK && b < batch; b++)
        w.owner[b] = owner_of(c, seq_ids[b]);
    /* one rank: the local results are the output, written by the attention itself */
    const int one = c->size == 1;
    double t1 = burst_now();
    burst_fault_decode(c->rank);
    if (st == BURST_OK)
        st = dec_local(&w, q, k, v, one ? o : NULL, one ? lse : NULL);
    if (st == BURST_OK && BURST_OPS_HAS(c->ctx->ops, stream.sync))
        st = c->ctx->ops->stream.sync(c->ctx->be);
    double t2 = burst_now(), wait = 0.0;
    if (st == BURST_OK && !one)
        st = dec_merge(&w, t2 - t1, &wait);
    double t3 = burst_now();
    if (st == BURST_OK && !one)
        st = burst_kv_write_out(c, who, w.o_host, w.lse_host, batch, w.t, o, lse);
    for (int64_t b = 0; b < batch; b++) {
        if (st == BURST_OK)
            burst_kv_commit(c, w.owner[b], seq_ids[b], w.t);
        else if (w.owner && w.owner[b] == c->rank)
            burst_kv_rollback(c, seq_ids[b]);
    }
    stats.fallback = w.fallback;
    stats.merge_bytes = w.merge_bytes;
    dec_free(&w);
    if (st != BURST_OK) {
        burst_comm_abort(c->comm, st);
        return st;
    }
    stats.local_s = t2 - t1;
    stats.merge_s = t3 - t2;
    stats.merge_wait_s = fmin(wait, stats.merge_s);
    stats.total_s = burst_now() - t0;
    c->stats[0] = stats;
    return BURST_OK;
}
