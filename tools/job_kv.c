/*
 * tools/job_kv.c - the inference job of burstrun --prefill / --decode (tools/job_kv.h).
 */
#include "job_kv.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job.h"
#include "ref.h"

#define KV_BLOCK 64

/* The draw of element e of token i of sequence s's tensor `which` (0 q, 1 k, 2 v). */
static float draw(uint64_t seed, int s, int which, int64_t i, int64_t e, int64_t row)
{
    uint64_t z = seed ^ ((uint64_t)(s * 3 + which + 1) * 0xD1B54A32D192ED03ull);
    z += (uint64_t)(i * row + e) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

int64_t job_kv_capacity(const struct job_params *p)
{
    const int64_t G = p->ranks, t = p->kv_spec;
    const int64_t shard = (p->kv_prefill + G - 1) / G + 1 + (p->kv_decode * t + G - 1) / G + t;
    return p->batch * ((shard + KV_BLOCK - 1) / KV_BLOCK + 1);
}

double job_kv_prefill_flops(const struct job_params *p)
{
    const double n = (double)p->kv_prefill;
    return 4.0 * (double)p->batch * p->q_heads * p->head_dim * n * (n + 1) / 2;
}

static void set_msg(struct job_kv_result *res, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->message, sizeof res->message, fmt, ap);
    va_end(ap);
    res->status = status;
}

/* A tensor in the context's memory with its host image. */
struct kv_buf {
    struct burst_tensor t;
    void *host;
    size_t bytes;
};

static int buf_alloc(struct burst_context *ctx, struct kv_buf *b, burst_dtype_t dt, int64_t B,
                     int64_t n, int64_t h, int64_t d)
{
    b->bytes = (size_t)(B * n * h * d) * burst_dtype_size(dt);
    b->host = calloc(1, b->bytes);
    void *p = NULL;
    if (!b->host || burst_context_alloc(ctx, b->bytes, &p) != BURST_OK)
        return -1;
    b->t = burst_tensor_contiguous(p, dt, B, n, h, d);
    return 0;
}

static void buf_free(struct burst_context *ctx, struct kv_buf *b)
{
    burst_context_free(ctx, b->t.data);
    free(b->host);
    memset(b, 0, sizeof *b);
}

static void store(void *base, burst_dtype_t dt, size_t i, float x)
{
    if (dt == BURST_DTYPE_FP32)
        ((float *)base)[i] = x;
    else
        ((uint16_t *)base)[i] =
            dt == BURST_DTYPE_BF16 ? burst_fp32_to_bf16(x) : burst_fp32_to_fp16(x);
}

static double load(const void *base, burst_dtype_t dt, size_t i)
{
    if (dt == BURST_DTYPE_FP32)
        return ((const float *)base)[i];
    uint16_t h = ((const uint16_t *)base)[i];
    return dt == BURST_DTYPE_BF16 ? burst_bf16_to_fp32(h) : burst_fp16_to_fp32(h);
}

/* x as the library holds it in dtype. */
static double rounded(burst_dtype_t dt, float x)
{
    if (dt == BURST_DTYPE_BF16)
        return burst_bf16_to_fp32(burst_fp32_to_bf16(x));
    if (dt == BURST_DTYPE_FP16)
        return burst_fp16_to_fp32(burst_fp32_to_fp16(x));
    return x;
}

/* Token `pos` of sequence s, tensor which, into row `row` of b's host image. */
static void put(const struct job_params *p, struct kv_buf *b, int s, int which, int64_t pos,
                int64_t row)
{
    const int64_t w = (which ? p->kv_heads : p->q_heads) * (int64_t)p->head_dim;
    for (int64_t e = 0; e < w; e++)
        store(b->host, p->dtype, (size_t)(row * w + e), draw(p->seed, s, which, pos, e, w));
}

/* Per-rank state of the job. */
struct kv_rank {
    const struct job_params *p;
    struct burst_context *ctx;
    struct burst_kvcache *kc;
    int rank;
    struct job_kv_result *res;
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The quantile q of v[0..n) (sorted in place). */
static double quantile(double *v, int n, double q)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    int i = (int)ceil(q * n) - 1;
    return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* Prefill sequence s from q, kk, v into o: with --warmup (sequence 0) once untimed first, then
 * --iters timed prefills, the cache reset between them (every rank alike), the last one kept.
 * *secs: the median of the timed ones (of the first 64; the lower middle one of an even count). */
static burst_status_t prefill_seq(struct kv_rank *k, int s, struct kv_buf *q, struct kv_buf *kk,
                                  struct kv_buf *v, struct kv_buf *o, double *secs)
{
    const struct job_params *p = k->p;
    const int reps = p->iters; /* >= 1 */
    double tm[64];
    const int kept = reps < 64 ? reps : 64;
    burst_status_t st = BURST_OK;
    for (int r = s == 0 && p->warmup > 0 ? -1 : 0; st == BURST_OK && r < reps; r++) {
        const double t0 = job_now();
        st = burst_prefill(k->kc, s, p->kv_prefill, &q->t, &kk->t, &v->t, &o->t, NULL);
        if (r >= 0 && r < kept)
            tm[r] = job_now() - t0;
        if (st == BURST_OK && r < reps - 1)
            st = burst_kvcache_reset(k->kc, s);
    }
    *secs = st == BURST_OK ? quantile(tm, kept, 0.5) : 0.0;
    return st;
}

static int prefill_all(struct kv_rank *k)
{
    const struct job_params *p = k->p;
    const int64_t n = burst_kvcache_chunk_len(k->kc, p->kv_prefill);
    struct kv_buf q = {0}, kk = {0}, v = {0}, o = {0};
    int rc = -1;
    if (buf_alloc(k->ctx, &q, p->dtype, 1, n, p->q_heads, p->head_dim) ||
        buf_alloc(k->ctx, &kk, p->dtype, 1, n, p->kv_heads, p->head_dim) ||
        buf_alloc(k->ctx, &v, p->dtype, 1, n, p->kv_heads, p->head_dim) ||
        buf_alloc(k->ctx, &o, p->dtype, 1, n, p->q_heads, p->head_dim)) {
        set_msg(k->res, JOB_EFAIL, "rank %d: out of memory for the prompt", k->rank);
        goto out;
    }
    double total = 0;
    for (int s = 0; s < p->batch; s++) {
        for (int64_t i = 0; i < n; i++) {
            int64_t pos;
            burst_layout_position(p->layout, p->kv_prefill, p->ranks, k->rank, i, &pos);
            put(p, &q, s, 0, pos, i), put(p, &kk, s, 1, pos, i), put(p, &v, s, 2, pos, i);
        }
        burst_context_memcpy(k->ctx, q.t.data, q.host, q.bytes);
        burst_context_memcpy(k->ctx, kk.t.data, kk.host, kk.bytes);
        burst_context_memcpy(k->ctx, v.t.data, v.host, v.bytes);
        double secs = 0;
        burst_status_t st = prefill_seq(k, s, &q, &kk, &v, &o, &secs);
        total += secs;
        if (st != BURST_OK) {
            k->res->secondary = st == BURST_ERR_PEER_FAILED || st == BURST_ERR_COMM_FAILED;
            set_msg(k->res, JOB_EFAIL, "rank %d: burst_prefill: %s", k->rank, burst_last_error());
            goto out;
        }
    }
    k->res->prefill_s = total;
    rc = 0;
out:
    buf_free(k->ctx, &q), buf_free(k->ctx, &kk), buf_free(k->ctx, &v), buf_free(k->ctx, &o);
    return rc;
}

/* The reference of rows rows[0..nrows) of one kv head's group (gq query heads) over keys
 * 0..row: q [nrows, gq, d], k, v [T, d] in fp64; o [nrows, gq, d]. */
static void ref_group_rows(const double *q, const double *k, const double *v, const int64_t *rows,
                           int nrows, int gq, int64_t d, double scale, double *s, double *o)
{
    for (int r = 0; r < nrows; r++)
        for (int h = 0; h < gq; h++) {
            const double *qr = q + ((int64_t)r * gq + h) * d;
            double m = -INFINITY, l = 0;
            for (int64_t j = 0; j <= rows[r]; j++) {
                double x = 0;
                for (int64_t c = 0; c < d; c++)
                    x += qr[c] * k[j * d + c];
                s[j] = x * scale;
                m = fmax(m, s[j]);
            }
            double *orow = o + ((int64_t)r * gq + h) * d;
            memset(orow, 0, sizeof(double) * (size_t)d);
            for (int64_t j = 0; j <= rows[r]; j++) {
                const double w = exp(s[j] - m);
                l += w;
                for (int64_t c = 0; c < d; c++)
                    orow[c] += w * v[j * d + c];
            }
            for (int64_t c = 0; c < d; c++)
                orow[c] /= l;
        }
}

/* Compare rows of decode step `step`'s output o (host, [B, t, Hq, d]) with the fp64 reference:
 * the first and last new rows of the first and last sequence, on the query heads of one kv
 * head, which changes from step to step (every group is checked over hkv steps), so a step's
 * check costs O(context x d) rather than O(context x Hq x d). */
static void check_step(struct kv_rank *k, const struct kv_buf *o, int64_t L, int64_t step, int *ok)
{
    const struct job_params *p = k->p;
    const int64_t T = L + p->kv_spec, hq = p->q_heads, hkv = p->kv_heads, d = p->head_dim;
    const int gq = (int)(hq / hkv), g = (int)(step % hkv);
    double *kk = malloc(sizeof(double) * (size_t)(T * (2 * d + 1) + 4 * gq * d));
    if (!kk) {
        *ok = 0;
        return;
    }
    double *v = kk + T * d, *sc = v + T * d, *q = sc + T, *orow = q + 2 * gq * d;
    int seqs[2] = {0, (int)p->batch - 1};
    int64_t rows[2] = {L, T - 1};
    const int nrows = p->kv_spec > 1 ? 2 : 1;
    for (int si = 0; si < (p->batch > 1 ? 2 : 1); si++) {
        const int s = seqs[si];
        for (int64_t i = 0; i < T; i++) /* the values the library saw, rounded to dtype */
            for (int64_t c = 0; c < d; c++) {
                kk[i * d + c] = rounded(p->dtype, draw(p->seed, s, 1, i, g * d + c, hkv * d));
                v[i * d + c] = rounded(p->dtype, draw(p->seed, s, 2, i, g * d + c, hkv * d));
            }
        for (int r = 0; r < nrows; r++)
            for (int64_t e = 0; e < gq * d; e++)
                q[r * gq * d + e] =
                    rounded(p->dtype, draw(p->seed, s, 0, rows[r], g * gq * d + e, hq * d));
        ref_group_rows(q, kk, v, rows, nrows, gq, d, 1.0 / sqrt((double)d), sc, orow);
        double max_abs = 0, max_ref = 0;
        for (int r = 0; r < nrows; r++)
            for (int64_t e = 0; e < gq * d; e++) {
                double x = load(o->host, p->dtype,
                                (size_t)((s * p->kv_spec + rows[r] - L) * hq * d + g * gq * d + e));
                double ref = orow[r * gq * d + e];
                if (!isfinite(x))
                    k->res->nonfinite++;
                max_abs = fmax(max_abs, fabs(x - ref));
                max_ref = fmax(max_ref, fabs(ref));
            }
        const double rel = max_abs / fmax(max_ref, 1e-30);
        k->res->max_rel = fmax(k->res->max_rel, rel);
        k->res->checked_rows += nrows;
        if (rel > job_tolerance(p) || k->res->nonfinite)
            *ok = 0;
    }
    free(kk);
}

static int decode_all(struct kv_rank *k)
{
    const struct job_params *p = k->p;
    const int64_t B = p->batch, t = p->kv_spec, S = p->kv_decode;
    struct kv_buf q = {0}, kk = {0}, v = {0}, o = {0};
    int *ids = malloc(sizeof(int) * (size_t)B);
    double *tm = malloc(sizeof(double) * 5 * (size_t)(S + 1));
    int rc = -1, ok = 1;
    if (!ids || !tm || buf_alloc(k->ctx, &q, p->dtype, B, t, p->q_heads, p->head_dim) ||
        buf_alloc(k->ctx, &kk, p->dtype, B, t, p->kv_heads, p->head_dim) ||
        buf_alloc(k->ctx, &v, p->dtype, B, t, p->kv_heads, p->head_dim) ||
        buf_alloc(k->ctx, &o, p->dtype, B, t, p->q_heads, p->head_dim)) {
        set_msg(k->res, JOB_EFAIL, "rank %d: out of memory for the decode", k->rank);
        goto out;
    }
    for (int s = 0; s < B; s++)
        ids[s] = s;
    for (int64_t step = 0; step < S; step++) {
        const int64_t L = p->kv_prefill + step * t;
        for (int s = 0; s < B; s++)
            for (int64_t i = 0; i < t; i++)
                put(p, &q, s, 0, L + i, s * t + i), put(p, &kk, s, 1, L + i, s * t + i),
                    put(p, &v, s, 2, L + i, s * t + i);
        burst_context_memcpy(k->ctx, q.t.data, q.host, q.bytes);
        burst_context_memcpy(k->ctx, kk.t.data, kk.host, kk.bytes);
        burst_context_memcpy(k->ctx, v.t.data, v.host, v.bytes);
        double t0 = job_now();
        burst_status_t st = burst_decode(k->kc, B, ids, &q.t, &kk.t, &v.t, &o.t, NULL);
        tm[step] = job_now() - t0;
        if (st != BURST_OK) {
            k->res->secondary = st == BURST_ERR_PEER_FAILED || st == BURST_ERR_COMM_FAILED;
            set_msg(k->res, JOB_EFAIL, "rank %d: burst_decode (step %lld): %s", k->rank,
                    (long long)step, burst_last_error());
            goto out;
        }
        struct burst_kvcache_stats ks;
        burst_kvcache_stats(k->kc, 0, &ks);
        tm[S + step] = ks.local_s;
        tm[2 * S + step] = ks.merge_s;
        tm[3 * S + step] = ks.merge_wait_s;
        tm[4 * S + step] = ks.merge_s - ks.merge_wait_s; /* the exchange and merge proper */
        k->res->merge_bytes = ks.merge_bytes;
        k->res->fallback = ks.fallback;
        if (p->check_fwd && k->rank == 0) {
            burst_context_memcpy(k->ctx, o.host, o.t.data, o.bytes);
            check_step(k, &o, L, step, &ok);
        }
    }
    k->res->step_p99_s = quantile(tm, (int)S, 0.99);
    k->res->step_med_s = quantile(tm, (int)S, 0.5);
    k->res->local_med_s = quantile(tm + S, (int)S, 0.5);
    k->res->merge_med_s = quantile(tm + 2 * S, (int)S, 0.5);
    k->res->wait_med_s = quantile(tm + 3 * S, (int)S, 0.5);
    k->res->exchange_med_s = quantile(tm + 4 * S, (int)S, 0.5);
    k->res->tokens_per_s = (double)(B * t) / k->res->step_med_s;
    rc = 0;
    k->res->check_failed = !ok;
out:
    buf_free(k->ctx, &q), buf_free(k->ctx, &kk), buf_free(k->ctx, &v), buf_free(k->ctx, &o);
    free(ids);
    free(tm);
    return rc;
}

int job_kv_rank(const struct job_params *p, struct burst_context *ctx, struct burst_comm *comm,
                int rank, struct job_kv_result *res)
{
    memset(res, 0, sizeof *res);
    struct burst_kvcache_params kp = burst_kvcache_params_default();
    kp.max_seqs = (int)p->batch;
    kp.block_len = KV_BLOCK;
    kp.capacity_blocks = job_kv_capacity(p);
    kp.q_heads = p->q_heads;
    kp.kv_heads = p->kv_heads;
    kp.head_dim = p->head_dim;
    kp.dtype = p->dtype;
    kp.layout = p->layout;
    res->capacity_blocks = kp.capacity_blocks;
    struct kv_rank k = {p, ctx, NULL, rank, res};
    burst_status_t st = burst_kvcache_create(ctx, comm, &kp, &k.kc);
    if (st != BURST_OK) {
        res->secondary = st == BURST_ERR_PEER_FAILED || st == BURST_ERR_COMM_FAILED;
        set_msg(res, st == BURST_ERR_INVALID_ARG ? JOB_EUSAGE : JOB_EFAIL,
                "rank %d: burst_kvcache_create: %s", rank, burst_last_error());
        return res->status;
    }
    if (prefill_all(&k) == 0)
        decode_all(&k);
    burst_kvcache_destroy(k.kc);
    return res->status;
}

/* ---- ranks as threads ---- */

struct kv_thread {
    const struct job_params *p;
    struct burst_context *ctx;
    struct burst_local_world *world;
    int rank;
    struct job_kv_result res;
};

static void *kv_thread_main(void *arg)
{
    struct kv_thread *th = arg;
    struct burst_comm_params cp = burst_comm_params_default();
    cp.rank = th->rank;
    cp.size = th->p->ranks;
    cp.world = th->world;
    struct burst_comm *comm = NULL;
    if (burst_comm_create(&cp, &comm) != BURST_OK) {
        set_msg(&th->res, JOB_EFAIL, "rank %d: burst_comm_create: %s", th->rank,
                burst_last_error());
        return NULL;
    }
    job_kv_rank(th->p, th->ctx, comm, th->rank, &th->res);
    burst_comm_destroy(comm);
    return NULL;
}

int job_kv_threads(const struct job_params *p, struct burst_context *const *ctxs,
                   struct job_kv_result *res)
{
    const int G = p->ranks;
    memset(res, 0, sizeof *res);
    struct kv_thread *th = calloc((size_t)G, sizeof *th);
    pthread_t *tid = calloc((size_t)G, sizeof *tid);
    struct burst_local_world *world = NULL;
    if (!th || !tid || burst_local_world_create(G, &world) != BURST_OK) {
        set_msg(res, JOB_EFAIL, "cannot start %d rank threads", G);
        free(th);
        free(tid);
        return res->status;
    }
    int started = 0;
    for (; started < G; started++) {
        th[started] = (struct kv_thread){p, ctxs[started], world, started, {0}};
        if (pthread_create(&tid[started], NULL, kv_thread_main, &th[started]) != 0)
            break;
    }
    for (int r = 0; r < started; r++)
        pthread_join(tid[r], NULL);
    *res = th[0].res;
    /* the first rank with a failure of its own, else the first failure */
    for (int pass = 0; pass < 2 && res->status == JOB_OK; pass++)
        for (int r = 0; r < G && res->status == JOB_OK; r++)
            if (r >= started || (th[r].res.status != JOB_OK && (pass || !th[r].res.secondary)))
                *res = r >= started ? (struct job_kv_result){.status = JOB_EFAIL} : th[r].res;
    burst_local_world_destroy(world);
    free(th);
    free(tid);
    return res->status;
}

/* ---- the report ---- */

static const char *check_word(const struct job_params *p, const struct job_kv_result *k)
{
    return !p->check_fwd ? "off" : k->check_failed ? "fail" : "pass";
}

int job_kv_print(FILE *f, const struct job_params *p, const struct job_result *r, int json)
{
    const struct job_kv_result *k = &r->kv;
    const double tflops = job_kv_prefill_flops(p) / k->prefill_s / 1e12;
    if (json) {
        fprintf(f,
                "\"mode\": \"inference\", \"ranks\": %d, \"rank_mode\": \"%s\", \"fabric\": "
                "\"%s\", \"backend\": \"%s\", \"batch\": %lld, \"prefill\": %lld, \"decode\": "
                "%lld, \"spec\": %lld, \"heads\": %d, \"kv_heads\": %d, \"head_dim\": %d, "
                "\"dtype\": \"%s\", \"capacity_blocks\": %lld, \"prefill_ms\": %.6g, "
                "\"prefill_tflops\": %.6g, \"step_ms_median\": %.6g, \"step_ms_p99\": %.6g, "
                "\"local_ms_median\": %.6g, \"merge_ms_median\": %.6g, \"merge_wait_ms_median\": "
                "%.6g, \"merge_exchange_ms_median\": %.6g, \"tokens_per_s\": %.6g, "
                "\"merge_bytes_per_step\": %llu, \"decode_kernel\": \"%s\", \"check\": \"%s\"",
                p->ranks, r->rank_mode, r->fabric, r->backend, (long long)p->batch,
                (long long)p->kv_prefill, (long long)p->kv_decode, (long long)p->kv_spec,
                p->q_heads, p->kv_heads, p->head_dim, burst_dtype_name(p->dtype),
                (long long)k->capacity_blocks, k->prefill_s * 1e3, tflops, k->step_med_s * 1e3,
                k->step_p99_s * 1e3, k->local_med_s * 1e3, k->merge_med_s * 1e3,
                k->wait_med_s * 1e3, k->exchange_med_s * 1e3, k->tokens_per_s,
                (unsigned long long)k->merge_bytes,
                k->fallback ? "fwd_step per block" : "decode_step", check_word(p, k));
        if (p->check_fwd)
            fprintf(f, ", \"checked_rows\": %d, \"max_rel_err\": %.6g, \"tolerance\": %.6g",
                    k->checked_rows, k->max_rel, job_tolerance(p));
        return k->check_failed;
    }
    fprintf(f,
            "inference: %lld sequence%s, prompt %lld tokens, %lld decode steps of %lld "
            "token%s; %d ranks (%s, fabric %s), backend %s, %s, Hq %d, Hkv %d, d %d\n",
            (long long)p->batch, p->batch > 1 ? "s" : "", (long long)p->kv_prefill,
            (long long)p->kv_decode, (long long)p->kv_spec, p->kv_spec > 1 ? "s" : "", p->ranks,
            r->rank_mode, r->fabric, r->backend, burst_dtype_name(p->dtype), p->q_heads,
            p->kv_heads, p->head_dim);
    fprintf(f, "prefill   %10.3f ms  %8.3f TFLOP/s (causal, all sequences)\n", k->prefill_s * 1e3,
            tflops);
    fprintf(f, "decode    median %.3f ms  p99 %.3f ms per step  %.1f tokens/s\n",
            k->step_med_s * 1e3, k->step_p99_s * 1e3, k->tokens_per_s);
    fprintf(f, "  local   median %.3f ms (attention over the rank's shard: %s)\n",
            k->local_med_s * 1e3, k->fallback ? "fwd_step per block" : "decode_step");
    fprintf(f,
            "  merge   median %.3f ms: waiting for the slowest rank %.3f, exchange and merge %.3f "
            "(%llu bytes sent per step and rank)\n",
            k->merge_med_s * 1e3, k->wait_med_s * 1e3, k->exchange_med_s * 1e3,
            (unsigned long long)k->merge_bytes);
    if (p->check_fwd)
        fprintf(f, "check     %s: %d rows, max relative error %.3g (tolerance %.3g)\n",
                check_word(p, k), k->checked_rows, k->max_rel, job_tolerance(p));
    return k->check_failed;
}
