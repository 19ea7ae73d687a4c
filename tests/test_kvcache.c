/*
 * tests/test_kvcache.c - the sharded, paged key/value cache (burst/kvcache.h) on G in-process
 * ranks against the fp64 reference.
 *
 * Each case draws, per sequence, a whole token stream (q, k, v rounded to the case's dtype, the
 * reference seeing exactly the rounded values), prefills its prompt in one or more chunks (each
 * rank passing its layout shard of each chunk), then decodes `steps` calls of t tokens for all
 * sequences at once (batch = every sequence, of different lengths). The reference is causal
 * attention over the whole stream (tools/ref.h): prefill and decode rows must equal its rows at
 * their positions. Outputs are poisoned before each call; every rank checks its own outputs
 * (decode: every rank receives every row) and, after each decode call, where the new rows went:
 * to the rank that held the fewest of the sequence's keys, the lowest such rank.
 *
 * TOLERANCE (element x, reference r, S = max |v| of the stream):
 *   fp32: |x - r| <= 1e-5 |r| + 2e-5 S  (fp32 kernels, fp64 merge);
 *   bf16: |x - r| <= u (|r| + 3 S) + 1e-5 (|r| + S), u = 2^-8: the output is rounded once (u |r|),
 *         the kernels may round P to bf16 in the P V product (u S), and prefill merges the ring's
 *         output, already rounded to bf16, with the cached keys' partial (u S);
 *   lse (fp32 in every dtype): 2e-5 (|r| + 1).
 * Bad inputs run on every rank of the case: each must fail with BURST_ERR_INVALID_ARG and a
 * message naming the argument, leave every shard length and free block count as they were,
 * and leave the communicator usable (the case continues and must still match the reference).
 * Also: parameters that differ between ranks (BURST_ERR_PLAN_MISMATCH), invalid parameters,
 * a cache that fills exactly, and a bad tensor on one rank only (that rank fails naming it, its
 * peer returns BURST_ERR_PEER_FAILED instead of waiting, nothing is committed).
 * Every decode's merge bytes; with one rank made slow (BURST_FAULT slow), every rank's wait for
 * the slowest as the allgathered local times give it, and the other rank's covering the delay.
 * BURST_TEST_BACKEND selects the backend (tensors through burst_context_alloc / memcpy).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "harness.h"
#include "ref.h"

#define MAX_SEQS 3
#define MAX_CHUNKS 3

struct kv_case {
    const char *name;
    int ranks;
    burst_dtype_t dtype;
    int hq, hkv, d;
    int64_t block_len, capacity;
    burst_layout_t layout;
    int nseq;
    int64_t chunks[MAX_SEQS][MAX_CHUNKS]; /* prompt chunk lengths, 0 = none */
    int steps;                            /* decode calls */
    int64_t t;                            /* tokens per decode call */
    int bad;                              /* run the bad inputs after the prefill */
};

/* One sequence's stream and its reference. */
struct stream {
    int64_t len;
    double *q, *k, *v, *o, *lse; /* [T, Hq, d], [T, Hkv, d] x2, [T, Hq, d], [Hq, T] */
    double vmax;
};

struct kv_run {
    const struct kv_case *c;
    struct stream s[MAX_SEQS];
    struct rank_rec {
        double worst, worst_lse;
        int64_t nonfinite;
        int fails;
        char msg[512];
    } rec[8];
};

static int64_t prompt_len(const struct kv_case *c, int s)
{
    int64_t n = 0;
    for (int i = 0; i < MAX_CHUNKS; i++)
        n += c->chunks[s][i];
    return n;
}

static void stream_make(const struct kv_case *c, struct stream *st, int s, uint64_t seed)
{
    const int64_t T = prompt_len(c, s) + c->steps * c->t;
    const int64_t nq = T * c->hq * c->d, nk = T * c->hkv * c->d;
    st->len = T;
    st->q = malloc(sizeof(double) * (size_t)(2 * nq + 2 * nk + c->hq * T));
    st->k = st->q + nq;
    st->v = st->k + nk;
    st->o = st->v + nk;
    st->lse = st->o + nq;
    uint64_t rng = seed * 1000003u + (uint64_t)s;
    for (int64_t i = 0; i < nq; i++)
        st->q[i] = harness_round(c->dtype, harness_rng_uniform(&rng, -2, 2));
    st->vmax = 0;
    for (int64_t i = 0; i < nk; i++) {
        st->k[i] = harness_round(c->dtype, harness_rng_uniform(&rng, -2, 2));
        st->v[i] = harness_round(c->dtype, harness_rng_uniform(&rng, -1, 1));
        st->vmax = fmax(st->vmax, fabs(st->v[i]));
    }
    struct ref_problem p = {.batch = 1,
                            .seq_len = T,
                            .q_heads = c->hq,
                            .kv_heads = c->hkv,
                            .head_dim = c->d,
                            .scale = 1.0 / sqrt((double)c->d),
                            .causal = 1,
                            .window_left = -1,
                            .window_right = -1};
    ref_forward(&p, st->q, st->k, st->v, st->o, st->lse);
}

/* ---- a rank's tensors: backend memory filled from host ---- */

struct dev_tensor {
    struct burst_tensor t;
    void *host;
    size_t bytes;
};

static int dt_alloc(struct dev_tensor *x, burst_dtype_t dt, int64_t b, int64_t n, int64_t h,
                    int64_t d)
{
    x->bytes = (size_t)(b * n * h * d) * burst_dtype_size(dt);
    x->host = malloc(x->bytes);
    void *p = NULL;
    if (!x->host || burst_context_alloc(harness_context(), x->bytes, &p) != BURST_OK)
        return -1;
    x->t = burst_tensor_contiguous(p, dt, b, n, h, d);
    return 0;
}

static void dt_free(struct dev_tensor *x)
{
    burst_context_free(harness_context(), x->t.data);
    free(x->host);
    memset(x, 0, sizeof *x);
}

static void dt_up(struct dev_tensor *x)
{
    burst_context_memcpy(harness_context(), x->t.data, x->host, x->bytes);
}

static void dt_down(struct dev_tensor *x)
{
    burst_context_memcpy(harness_context(), x->host, x->t.data, x->bytes);
}

/* Copy row `pos` of a stream array (heads h) into row `row` of host tensor x. */
static void put_row(struct dev_tensor *x, int64_t row, const double *src, int64_t pos, int h, int d)
{
    for (int64_t e = 0; e < (int64_t)h * d; e++)
        harness_store(x->t.dtype, x->host, (size_t)(row * h * d + e), src[pos * h * d + e]);
}

/* Compare output row `row` of o (and lse [Hq, nrows], when given) with the stream's row pos. */
static void check_row(const struct kv_case *c, const struct stream *st, struct rank_rec *rec,
                      const struct dev_tensor *o, const float *lse, int64_t nrows, int64_t row,
                      int64_t pos)
{
    const double u = c->dtype == BURST_DTYPE_FP32 ? 0.0 : harness_unit_roundoff(c->dtype);
    for (int64_t e = 0; e < (int64_t)c->hq * c->d; e++) {
        double x = harness_load(c->dtype, o->host, (size_t)(row * c->hq * c->d + e));
        double r = st->o[pos * c->hq * c->d + e];
        double tol = 1e-5 * fabs(r) + 2e-5 * st->vmax + u * (fabs(r) + 3 * st->vmax);
        if (!isfinite(x))
            rec->nonfinite++;
        else if (fabs(x - r) / tol > rec->worst)
            rec->worst = fabs(x - r) / tol;
    }
    for (int h = 0; lse && h < c->hq; h++) {
        double x = lse[h * nrows + row], r = st->lse[h * st->len + pos];
        if (!isfinite(x))
            rec->nonfinite++;
        else if (fabs(x - r) / (2e-5 * (fabs(r) + 1)) > rec->worst_lse)
            rec->worst_lse = fabs(x - r) / (2e-5 * (fabs(r) + 1));
    }
}

static void rec_fail(struct rank_rec *rec, const char *fmt, ...)
{
    if (rec->fails++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(rec->msg, sizeof rec->msg, fmt, ap);
        va_end(ap);
    }
}

static struct burst_kvcache_params case_params(const struct kv_case *c)
{
    struct burst_kvcache_params p = burst_kvcache_params_default();
    p.max_seqs = MAX_SEQS;
    p.block_len = c->block_len;
    p.capacity_blocks = c->capacity;
    p.q_heads = c->hq;
    p.kv_heads = c->hkv;
    p.head_dim = c->d;
    p.dtype = c->dtype;
    p.layout = c->layout;
    return p;
}

/* The run's cache on this rank, or NULL (recorded as the rank's failure). */
static struct burst_kvcache *cache_create(struct kv_run *run, struct burst_comm *comm, int rank)
{
    struct burst_kvcache_params p = case_params(run->c);
    struct burst_kvcache *kc = NULL;
    if (burst_kvcache_create(harness_context(), comm, &p, &kc) != BURST_OK) {
        rec_fail(&run->rec[rank], "rank %d: create: %s", rank, burst_last_error());
        return NULL;
    }
    return kc;
}

/* ---- prefill and decode of one rank ---- */

static int prefill_chunk(struct kv_run *run, struct burst_kvcache *kc, int rank, int s, int64_t len)
{
    const struct kv_case *c = run->c;
    struct rank_rec *rec = &run->rec[rank];
    const struct stream *st = &run->s[s];
    const int64_t L0 = burst_kvcache_len(kc, s), n = burst_kvcache_chunk_len(kc, len);
    struct dev_tensor q = {0}, k = {0}, v = {0}, o = {0};
    float *lse = NULL, *lse_h = malloc(sizeof(float) * (size_t)(c->hq * n));
    int rc = -1;
    if (dt_alloc(&q, c->dtype, 1, n, c->hq, c->d) || dt_alloc(&k, c->dtype, 1, n, c->hkv, c->d) ||
        dt_alloc(&v, c->dtype, 1, n, c->hkv, c->d) || dt_alloc(&o, c->dtype, 1, n, c->hq, c->d) ||
        burst_context_alloc(harness_context(), sizeof(float) * (size_t)(c->hq * n),
                            (void **)&lse) != BURST_OK) {
        rec_fail(rec, "rank %d: allocation failed", rank);
        goto out;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t pos;
        burst_layout_position(c->layout, len, c->ranks, rank, i, &pos);
        put_row(&q, i, st->q, L0 + pos, c->hq, c->d);
        put_row(&k, i, st->k, L0 + pos, c->hkv, c->d);
        put_row(&v, i, st->v, L0 + pos, c->hkv, c->d);
    }
    harness_poison(c->dtype, o.host, (size_t)(n * c->hq * c->d));
    harness_poison(BURST_DTYPE_FP32, lse_h, (size_t)(c->hq * n));
    dt_up(&q), dt_up(&k), dt_up(&v), dt_up(&o);
    burst_context_memcpy(harness_context(), lse, lse_h, sizeof(float) * (size_t)(c->hq * n));
    if (burst_prefill(kc, s, len, &q.t, &k.t, &v.t, &o.t, lse) != BURST_OK) {
        rec_fail(rec, "rank %d: prefill seq %d chunk %lld: %s", rank, s, (long long)len,
                 burst_last_error());
        goto out;
    }
    dt_down(&o);
    burst_context_memcpy(harness_context(), lse_h, lse, sizeof(float) * (size_t)(c->hq * n));
    for (int64_t i = 0; i < n; i++) {
        int64_t pos;
        burst_layout_position(c->layout, len, c->ranks, rank, i, &pos);
        check_row(c, st, rec, &o, lse_h, n, i, L0 + pos);
    }
    rc = burst_kvcache_len(kc, s) == L0 + len ? 0 : -1;
    if (rc)
        rec_fail(rec, "rank %d: seq %d has %lld tokens after a chunk of %lld on %lld", rank, s,
                 (long long)burst_kvcache_len(kc, s), (long long)len, (long long)L0);
out:
    dt_free(&q), dt_free(&k), dt_free(&v), dt_free(&o);
    burst_context_free(harness_context(), lse);
    free(lse_h);
    return rc;
}

/* The replicated tensors of one decode call for every sequence. */
struct dec_io {
    struct dev_tensor q, k, v, o;
    float *lse, *lse_h;
    int ids[MAX_SEQS];
};

static int dec_io_make(const struct kv_case *c, struct dec_io *io, int64_t B, int64_t t)
{
    memset(io, 0, sizeof *io);
    for (int b = 0; b < MAX_SEQS; b++)
        io->ids[b] = b;
    io->lse_h = malloc(sizeof(float) * (size_t)(B * c->hq * t));
    return !io->lse_h || dt_alloc(&io->q, c->dtype, B, t, c->hq, c->d) ||
                   dt_alloc(&io->k, c->dtype, B, t, c->hkv, c->d) ||
                   dt_alloc(&io->v, c->dtype, B, t, c->hkv, c->d) ||
                   dt_alloc(&io->o, c->dtype, B, t, c->hq, c->d) ||
                   burst_context_alloc(harness_context(), sizeof(float) * (size_t)(B * c->hq * t),
                                       (void **)&io->lse) != BURST_OK
               ? -1
               : 0;
}

static void dec_io_free(struct dec_io *io)
{
    dt_free(&io->q), dt_free(&io->k), dt_free(&io->v), dt_free(&io->o);
    burst_context_free(harness_context(), io->lse);
    free(io->lse_h);
}

/* Every rank's shard lengths and free blocks. */
struct snap {
    int64_t len[8][MAX_SEQS], free_blocks[8];
};

static void snapshot(struct burst_kvcache *kc, int G, struct snap *s)
{
    memset(s, 0, sizeof *s);
    for (int r = 0; r < G; r++) {
        for (int q = 0; q < MAX_SEQS; q++)
            s->len[r][q] = burst_kvcache_shard_len(kc, q, r);
        s->free_blocks[r] = burst_kvcache_free_blocks(kc, r);
    }
}

/* The t tokens a decode call gave sequence b went to the rank that held the fewest of its keys
 * before the call (`before`), the lowest such rank; the other shards did not change. */
static void placement_check(struct burst_kvcache *kc, int G, const struct snap *before, int b,
                            int64_t t, struct rank_rec *rec, int rank)
{
    int to = 0;
    for (int r = 1; r < G; r++)
        if (before->len[r][b] < before->len[to][b])
            to = r;
    for (int r = 0; r < G; r++) {
        const int64_t want = before->len[r][b] + (r == to ? t : 0);
        if (burst_kvcache_shard_len(kc, b, r) != want)
            rec_fail(rec, "rank %d: seq %d: shard of rank %d holds %lld tokens, not %lld", rank, b,
                     r, (long long)burst_kvcache_shard_len(kc, b, r), (long long)want);
    }
}

/* The last decode's merge bytes: (G - 1) messages of B t Hq (d + 1) floats and the local
 * time. */
static void stats_check(struct burst_kvcache *kc, const struct kv_case *c, int64_t B,
                        struct rank_rec *rec, int rank)
{
    struct burst_kvcache_stats s;
    if (burst_kvcache_stats(kc, 0, &s) != BURST_OK) {
        rec_fail(rec, "rank %d: stats: %s", rank, burst_last_error());
        return;
    }
    const uint64_t bytes =
        (uint64_t)(c->ranks - 1) * (uint64_t)(B * c->t * c->hq * (c->d + 1) + 1) * 4;
    if (s.merge_bytes != bytes)
        rec_fail(rec, "rank %d: merge_bytes %llu, not %llu", rank,
                 (unsigned long long)s.merge_bytes, (unsigned long long)bytes);
    if (c->ranks == 1 && s.merge_wait_s != 0.0)
        rec_fail(rec, "rank 0 of 1: merge_wait_s %g", s.merge_wait_s);
}

static int decode_step(struct kv_run *run, struct burst_kvcache *kc, int rank)
{
    const struct kv_case *c = run->c;
    struct rank_rec *rec = &run->rec[rank];
    const int64_t B = c->nseq, t = c->t;
    struct dec_io io;
    int64_t L[MAX_SEQS];
    int rc = -1;
    if (dec_io_make(c, &io, B, t)) {
        rec_fail(rec, "rank %d: allocation failed", rank);
        goto out;
    }
    for (int b = 0; b < B; b++) {
        L[b] = burst_kvcache_len(kc, b);
        for (int64_t i = 0; i < t; i++) {
            put_row(&io.q, b * t + i, run->s[b].q, L[b] + i, c->hq, c->d);
            put_row(&io.k, b * t + i, run->s[b].k, L[b] + i, c->hkv, c->d);
            put_row(&io.v, b * t + i, run->s[b].v, L[b] + i, c->hkv, c->d);
        }
    }
    harness_poison(c->dtype, io.o.host, (size_t)(B * t * c->hq * c->d));
    dt_up(&io.q), dt_up(&io.k), dt_up(&io.v), dt_up(&io.o);
    struct snap before;
    snapshot(kc, c->ranks, &before);
    if (burst_decode(kc, B, io.ids, &io.q.t, &io.k.t, &io.v.t, &io.o.t, io.lse) != BURST_OK) {
        rec_fail(rec, "rank %d: decode: %s", rank, burst_last_error());
        goto out;
    }
    dt_down(&io.o);
    burst_context_memcpy(harness_context(), io.lse_h, io.lse,
                         sizeof(float) * (size_t)(B * c->hq * t));
    for (int b = 0; b < B; b++) {
        struct dev_tensor ob = io.o;
        ob.host = (unsigned char *)io.o.host +
                  (size_t)(b * t * c->hq * c->d) * burst_dtype_size(c->dtype);
        for (int64_t i = 0; i < t; i++)
            check_row(c, &run->s[b], rec, &ob, io.lse_h + b * c->hq * t, t, i, L[b] + i);
        if (burst_kvcache_len(kc, b) != L[b] + t)
            rec_fail(rec, "rank %d: seq %d has %lld tokens after decoding %lld on %lld", rank, b,
                     (long long)burst_kvcache_len(kc, b), (long long)t, (long long)L[b]);
        placement_check(kc, c->ranks, &before, b, t, rec, rank);
    }
    stats_check(kc, c, B, rec, rank);
    rc = 0;
out:
    dec_io_free(&io);
    return rc;
}

/* ---- bad inputs: every rank alike, the cache unchanged, the ring usable ---- */

/* A failure of the rank when the cache is no longer as `before` (snapshot) says: `what`, a
 * refused call, changed it. */
static void expect_unchanged(struct kv_run *run, struct burst_kvcache *kc, int rank,
                             const struct snap *before, const char *what)
{
    struct snap after;
    snapshot(kc, run->c->ranks, &after);
    if (memcmp(before, &after, sizeof after) != 0)
        rec_fail(&run->rec[rank], "rank %d: %s changed the cache", rank, what);
}

static void expect_bad(struct kv_run *run, struct burst_kvcache *kc, int rank, burst_status_t st,
                       const char *what, const char *needle)
{
    struct rank_rec *rec = &run->rec[rank];
    if (st != BURST_ERR_INVALID_ARG)
        rec_fail(rec, "rank %d: %s returned %d (expected INVALID_ARG)", rank, what, (int)st);
    else if (!harness_contains(burst_last_error(), needle))
        rec_fail(rec, "rank %d: %s: message \"%s\" does not name \"%s\"", rank, what,
                 burst_last_error(), needle);
    (void)kc;
}

static void bad_inputs(struct kv_run *run, struct burst_kvcache *kc, int rank)
{
    const struct kv_case *c = run->c;
    struct snap before;
    snapshot(kc, c->ranks, &before);
    struct dec_io io;
    const int64_t big = c->capacity * c->block_len + 1; /* more than any rank can take */
    if (dec_io_make(c, &io, 1, 1) != 0) {
        rec_fail(&run->rec[rank], "rank %d: allocation failed", rank);
        return;
    }
    /* cases with bad inputs leave sequence nseq (< MAX_SEQS) empty */
    int ids_range[1] = {MAX_SEQS}, ids_empty[1] = {c->nseq}, ids_rep[2] = {0, 0};
    expect_bad(run, kc, rank,
               burst_decode(kc, 1, ids_range, &io.q.t, &io.k.t, &io.v.t, &io.o.t, NULL),
               "decode of a sequence out of range", "seq_ids[0] = 3");
    expect_bad(run, kc, rank,
               burst_decode(kc, 1, ids_empty, &io.q.t, &io.k.t, &io.v.t, &io.o.t, NULL),
               "decode before any prefill", "prefill it first");
    expect_bad(run, kc, rank, burst_decode(kc, 1, NULL, &io.q.t, &io.k.t, &io.v.t, &io.o.t, NULL),
               "decode with NULL seq_ids", "seq_ids is NULL");
    expect_bad(run, kc, rank,
               burst_decode(kc, 0, ids_range, &io.q.t, &io.k.t, &io.v.t, &io.o.t, NULL),
               "decode of batch 0", "batch = 0");
    dec_io_free(&io);
    if (dec_io_make(c, &io, 2, 1) == 0)
        expect_bad(run, kc, rank,
                   burst_decode(kc, 2, ids_rep, &io.q.t, &io.k.t, &io.v.t, &io.o.t, NULL),
                   "decode with a repeated id", "repeats");
    dec_io_free(&io);
    if (dec_io_make(c, &io, 1, big) == 0) /* t larger than the capacity left */
        expect_bad(run, kc, rank,
                   burst_decode(kc, 1, io.ids, &io.q.t, &io.k.t, &io.v.t, &io.o.t, io.lse),
                   "decode of too many tokens", "capacity_blocks");
    dec_io_free(&io);
    struct burst_tensor none = {0};
    expect_bad(run, kc, rank, burst_prefill(kc, -1, 64, &none, &none, &none, &none, NULL),
               "prefill of seq -1", "seq = -1");
    expect_bad(run, kc, rank,
               burst_prefill(kc, 0, big * c->ranks, &none, &none, &none, &none, NULL),
               "prefill larger than the cache", "capacity_blocks");
    expect_bad(run, kc, rank, burst_prefill(kc, 0, 1, &none, &none, &none, &none, NULL),
               "prefill of a chunk too short to shard", "chunk_len = 1");
    expect_unchanged(run, kc, rank, &before, "a refused call");
}

/* ---- a run: the case's streams, its ranks, their verdict ---- */

/* A run of case c, its streams drawn from the test's seed. */
static struct kv_run *run_new(const struct kv_case *c)
{
    struct kv_run *run = calloc(1, sizeof *run);
    assert_non_null(run);
    run->c = c;
    for (int s = 0; s < c->nseq; s++)
        stream_make(c, &run->s[s], s, harness_seed());
    return run;
}

static void run_free(struct kv_run *run)
{
    for (int s = 0; s < run->c->nseq; s++)
        free(run->s[s].q);
    free(run);
}

/* Whether every rank passed: no failure, every value finite, within the tolerance. A rank that
 * did not pass is printed (every rank with BURST_TEST_VERBOSE). */
static int run_ok(const struct kv_run *run)
{
    const struct kv_case *c = run->c;
    int ok = 1;
    for (int r = 0; r < c->ranks; r++) {
        const struct rank_rec *rec = &run->rec[r];
        if (rec->fails || rec->nonfinite || rec->worst > 1.0 || rec->worst_lse > 1.0 ||
            getenv("BURST_TEST_VERBOSE")) {
            printf("%s seed %llu rank %d: worst o %.3g lse %.3g (1 = tolerance), nonfinite %lld, "
                   "%d failures%s%s\n",
                   c->name, (unsigned long long)harness_seed(), r, rec->worst, rec->worst_lse,
                   (long long)rec->nonfinite, rec->fails, rec->fails ? ": " : "", rec->msg);
        }
        ok &= !rec->fails && !rec->nonfinite && rec->worst <= 1.0 && rec->worst_lse <= 1.0;
    }
    return ok;
}

/* Case c's ranks, each running fn on a shared run of c: whether they all passed (run_ok). */
static int run_ranks(const struct kv_case *c, harness_rank_fn fn)
{
    struct kv_run *run = run_new(c);
    assert_int_equal(harness_run_ranks(c->ranks, 60000, fn, run), 0);
    const int ok = run_ok(run);
    run_free(run);
    return ok;
}

/* Prefill the case's chunks, run its bad inputs, then its decode steps. */
static void rank_fn(int rank, struct burst_comm *comm, void *arg)
{
    struct kv_run *run = arg;
    const struct kv_case *c = run->c;
    struct burst_kvcache *kc = cache_create(run, comm, rank);
    if (!kc)
        return;
    for (int ch = 0; ch < MAX_CHUNKS; ch++)
        for (int s = 0; s < c->nseq; s++)
            if (c->chunks[s][ch] > 0 && prefill_chunk(run, kc, rank, s, c->chunks[s][ch]))
                goto out;
    if (c->bad)
        bad_inputs(run, kc, rank);
    for (int i = 0; i < c->steps; i++)
        if (decode_step(run, kc, rank))
            break;
out:
    burst_kvcache_destroy(kc);
}

static void run_case(void **state)
{
    assert_true(run_ranks(*state, rank_fn));
}

#define F32 BURST_DTYPE_FP32
#define BF16 BURST_DTYPE_BF16
#define ZZ BURST_LAYOUT_ZIGZAG
#define NAT BURST_LAYOUT_NATURAL
static const struct kv_case cases[] = {
    {"one_rank_t1", 1, F32, 4, 1, 16, 8, 64, ZZ, 2, {{20}, {9}}, 12, 1, 1},
    {"two_ranks_chunks_t4", 2, F32, 4, 1, 16, 4, 64, ZZ, 2, {{12, 8, 16}, {4, 20, 31}}, 6, 4, 1},
    {"three_ranks_bf16", 3, BF16, 8, 2, 32, 8, 64, ZZ, 2, {{24, 30}, {6}}, 10, 1, 1},
    {"four_ranks_gqa_t4", 4, F32, 8, 2, 24, 5, 64, NAT, 3, {{16, 9, 7}, {40}, {4}}, 5, 4, 0},
    {"four_ranks_bf16_t4", 4, BF16, 4, 1, 16, 3, 64, ZZ, 2, {{16, 24}, {8}}, 4, 4, 0},
};

/* G = 2, block_len 4, 3 blocks per rank: a prompt of 8 (one block per rank) and five decode
 * calls of 4 tokens fill both pools exactly (calls alternate ranks); the sixth is refused. */
static const struct kv_case fill_case = {"fills_exactly", 2, F32, 4, 1, 16, 4, 3, ZZ, 1,
                                         {{8}},           4, 4,   0};

static void fill_rank(int rank, struct burst_comm *comm, void *arg)
{
    struct kv_run *run = arg;
    const struct kv_case *c = run->c;
    struct burst_kvcache *kc = cache_create(run, comm, rank);
    if (!kc)
        return;
    if (prefill_chunk(run, kc, rank, 0, 8) == 0) {
        for (int i = 0; i < c->steps; i++)
            if (decode_step(run, kc, rank))
                break;
        for (int r = 0; r < c->ranks; r++)
            if (burst_kvcache_free_blocks(kc, r) != 0)
                rec_fail(&run->rec[rank], "rank %d: rank %d has %lld free blocks, expected 0", rank,
                         r, (long long)burst_kvcache_free_blocks(kc, r));
        struct snap before;
        snapshot(kc, c->ranks, &before);
        struct dec_io io;
        if (dec_io_make(c, &io, 1, 1) == 0)
            expect_bad(run, kc, rank,
                       burst_decode(kc, 1, io.ids, &io.q.t, &io.k.t, &io.v.t, &io.o.t, NULL),
                       "decode into a full cache", "0 of 3 free");
        dec_io_free(&io);
        expect_unchanged(run, kc, rank, &before, "the refused decode");
        /* reset frees the blocks on every rank */
        burst_kvcache_reset(kc, 0);
        if (burst_kvcache_len(kc, 0) != 0 || burst_kvcache_free_blocks(kc, 1 - rank) != 3)
            rec_fail(&run->rec[rank], "rank %d: reset left blocks in use", rank);
    }
    burst_kvcache_destroy(kc);
}

static void fills_exactly(void **state)
{
    (void)state;
    assert_true(run_ranks(&fill_case, fill_rank));
}

/* One rank, blocks of one token, three blocks: two one-token prompts leave one block free, so a
 * decode of both sequences together (one token each, both stored on the one rank) is refused,
 * counting the first sequence's block against the second, and leaves the cache as it was. */
static const struct kv_case shared_case = {"shared_owner", 1, F32, 4, 1, 16, 1, 3, NAT, 2,
                                           {{1}, {1}},     1, 1,   0};

static void shared_rank(int rank, struct burst_comm *comm, void *arg)
{
    struct kv_run *run = arg;
    struct burst_kvcache *kc = cache_create(run, comm, rank);
    if (!kc)
        return;
    struct dec_io io;
    memset(&io, 0, sizeof io);
    if (prefill_chunk(run, kc, rank, 0, 1) == 0 && prefill_chunk(run, kc, rank, 1, 1) == 0 &&
        dec_io_make(&shared_case, &io, 2, 1) == 0) {
        struct snap before;
        snapshot(kc, 1, &before);
        expect_bad(run, kc, rank,
                   burst_decode(kc, 2, io.ids, &io.q.t, &io.k.t, &io.v.t, &io.o.t, NULL),
                   "decode of two sequences into one free block", "earlier sequences");
        /* a chunk length past any capacity, too large for the block arithmetic */
        struct burst_tensor none = {0};
        expect_bad(run, kc, rank,
                   burst_prefill(kc, 0, INT64_MAX - 10, &none, &none, &none, &none, NULL),
                   "prefill of INT64_MAX - 10 tokens", "chunk_len = 9223372036854775797");
        expect_unchanged(run, kc, rank, &before, "a refused call");
        /* a local error, last (it aborts the communicator): lse inside o */
        expect_bad(
            run, kc, rank,
            burst_decode(kc, 2, io.ids, &io.q.t, &io.k.t, &io.v.t, &io.o.t, (float *)io.o.t.data),
            "decode with lse inside o", "lse overlaps output o");
    }
    dec_io_free(&io);
    burst_kvcache_destroy(kc);
}

static void shared_owner(void **state)
{
    (void)state;
    assert_true(run_ranks(&shared_case, shared_rank));
}

/* G = 2, rank 1 slowed by SLOW_MS (times BURST_TEST_TIME_SCALE, so that the delay stays well
 * above the jitter of slow code on a loaded machine) before each decode step's local attention
 * (BURST_FAULT slow).
 * After the run, each rank's merge_wait_s of each step must be what the allgathered times give:
 * the larger local_s of the two, as floats (the message carries them so), less its own, at most
 * its merge_s; so rank 1, the slowest, waits exactly 0. Rank 0 must have waited for most of the
 * delay: at least half of it (rank 0 may enter a step up to a few ms after rank 1 on a loaded
 * machine, which shortens its merge_s and so the bound). The outputs still match the
 * reference. */
#define SLOW_MS 40
#define SLOW_STEPS 3
static const struct kv_case slow_case = {"slow_rank_wait", 2, F32, 4, 1, 16, 4, 8, ZZ, 1, {{8}},
                                         SLOW_STEPS,       1, 0};
static struct burst_kvcache_stats slow_stats[2][SLOW_STEPS];

static void slow_rank(int rank, struct burst_comm *comm, void *arg)
{
    struct kv_run *run = arg;
    struct burst_kvcache *kc = cache_create(run, comm, rank);
    if (!kc)
        return;
    if (prefill_chunk(run, kc, rank, 0, 8) == 0)
        for (int i = 0; i < SLOW_STEPS && decode_step(run, kc, rank) == 0; i++)
            burst_kvcache_stats(kc, 0, &slow_stats[rank][i]);
    burst_kvcache_destroy(kc);
}

static void slow_rank_wait(void **state)
{
    (void)state;
    char spec[64];
    const int slow_ms = SLOW_MS * harness_time_scale();
    snprintf(spec, sizeof spec, "slow:rank=1,ms=%d,phase=fwd", slow_ms);
    memset(slow_stats, 0, sizeof slow_stats);
    assert_int_equal(burst_fault_set(spec), 0);
    const int ok = run_ranks(&slow_case, slow_rank);
    burst_fault_set(NULL);
    assert_true(ok);
    for (int i = 0; i < SLOW_STEPS; i++) {
        const double l0 = (float)slow_stats[0][i].local_s, l1 = (float)slow_stats[1][i].local_s;
        for (int r = 0; r < 2; r++) {
            const struct burst_kvcache_stats *s = &slow_stats[r][i];
            const double want = fmin(fmax(l0, l1) - (r ? l1 : l0), s->merge_s);
            if (s->merge_wait_s != want)
                fail_msg("step %d rank %d: merge_wait_s %.9g, not %.9g (local %.9g / %.9g, "
                         "merge_s %.9g)",
                         i, r, s->merge_wait_s, want, l0, l1, s->merge_s);
        }
        if (slow_stats[0][i].merge_wait_s < slow_ms * 0.5e-3)
            fail_msg("step %d: rank 0 waited %g s for rank 1, which slept %d ms", i,
                     slow_stats[0][i].merge_wait_s, slow_ms);
    }
}

/* Rank 1 asks for another block_len: every rank fails naming the field. */
static void mismatch_rank(int rank, struct burst_comm *comm, void *arg)
{
    burst_status_t *st = arg;
    struct burst_kvcache_params p = case_params(&fill_case);
    p.block_len += rank;
    struct burst_kvcache *kc = NULL;
    st[rank] = burst_kvcache_create(harness_context(), comm, &p, &kc);
    if (st[rank] == BURST_ERR_PLAN_MISMATCH && !harness_contains(burst_last_error(), "block_len"))
        st[rank] = BURST_ERR_INTERNAL;
    burst_kvcache_destroy(kc);
    /* a mismatch is a shared error: the communicator still serves a matching cache */
    kc = NULL;
    p = case_params(&fill_case);
    if (st[rank] == BURST_ERR_PLAN_MISMATCH &&
        burst_kvcache_create(harness_context(), comm, &p, &kc) != BURST_OK)
        st[rank] = BURST_ERR_COMM_FAILED;
    burst_kvcache_destroy(kc);
}

static void params_mismatch(void **state)
{
    (void)state;
    burst_status_t st[2] = {BURST_OK, BURST_OK};
    assert_int_equal(harness_run_ranks(2, 60000, mismatch_rank, st), 0);
    assert_int_equal(st[0], BURST_ERR_PLAN_MISMATCH);
    assert_int_equal(st[1], BURST_ERR_PLAN_MISMATCH);
}

static void bad_params_rank(int rank, struct burst_comm *comm, void *arg)
{
    (void)rank;
    int *ok = arg;
    struct burst_kvcache_params p = case_params(&fill_case);
    struct burst_kvcache *kc = NULL;
    p.head_dim = 12;
    *ok = burst_kvcache_create(harness_context(), comm, &p, &kc) == BURST_ERR_INVALID_ARG &&
          harness_contains(burst_last_error(), "head_dim = 12") && !kc;
}

static void bad_params(void **state)
{
    (void)state;
    int ok = 0;
    assert_int_equal(harness_run_ranks(1, 60000, bad_params_rank, &ok), 0);
    assert_true(ok);
    struct burst_kvcache *kc = (void *)1;
    assert_int_equal(burst_kvcache_create(harness_context(), NULL, NULL, &kc),
                     BURST_ERR_INVALID_ARG);
    assert_null(kc);
    assert_int_equal(burst_kvcache_len(NULL, 0), -1);
    assert_int_equal(burst_decode(NULL, 1, NULL, NULL, NULL, NULL, NULL, NULL),
                     BURST_ERR_INVALID_ARG);
}

/* One rank passes a q of the wrong shape to a decode: it fails naming q, its peers return
 * BURST_ERR_PEER_FAILED well within the timeout instead of waiting, and nothing is committed. */
struct one_bad {
    struct kv_run *run;
    burst_status_t st[2];
    int64_t len_after[2];
    double ms[2];
};

static void one_bad_rank(int rank, struct burst_comm *comm, void *arg)
{
    struct one_bad *ob = arg;
    const struct kv_case *c = ob->run->c;
    ob->st[rank] = BURST_ERR_INTERNAL;
    struct burst_kvcache *kc = cache_create(ob->run, comm, rank);
    if (!kc)
        return;
    struct dec_io io;
    if (prefill_chunk(ob->run, kc, rank, 0, 8) == 0 && dec_io_make(c, &io, 1, 2) == 0) {
        if (rank == 1)
            io.q.t.shape[2] = c->hq + 1; /* q with one head too many */
        double t0 = harness_now_ms();
        ob->st[rank] = burst_decode(kc, 1, io.ids, &io.q.t, &io.k.t, &io.v.t, &io.o.t, NULL);
        ob->ms[rank] = harness_now_ms() - t0;
        if (rank == 1 && !harness_contains(burst_last_error(), "q->shape[2]"))
            ob->st[rank] = BURST_ERR_INTERNAL;
        ob->len_after[rank] = burst_kvcache_len(kc, 0);
        dec_io_free(&io);
    }
    burst_kvcache_destroy(kc);
}

static void one_rank_bad(void **state)
{
    (void)state;
    struct one_bad *ob = calloc(1, sizeof *ob);
    assert_non_null(ob);
    ob->run = run_new(&fill_case);
    assert_int_equal(harness_run_ranks(2, 60000, one_bad_rank, ob), 0);
    for (int r = 0; r < 2; r++)
        if (ob->run->rec[r].fails)
            printf("one_rank_bad rank %d: %s\n", r, ob->run->rec[r].msg);
    assert_int_equal(ob->st[1], BURST_ERR_INVALID_ARG);
    assert_int_equal(ob->st[0], BURST_ERR_PEER_FAILED);
    assert_true(ob->ms[0] < 30000.0);
    assert_int_equal(ob->len_after[0], 8);
    assert_int_equal(ob->len_after[1], 8);
    run_free(ob->run);
    free(ob);
}

int main(void)
{
    const size_t n = sizeof cases / sizeof cases[0];
    struct CMUnitTest tests[sizeof cases / sizeof cases[0] + 6];
    for (size_t i = 0; i < n; i++)
        tests[i] = (struct CMUnitTest){cases[i].name, run_case, NULL, NULL, (void *)&cases[i]};
    tests[n] = (struct CMUnitTest)cmocka_unit_test(fills_exactly);
    tests[n + 1] = (struct CMUnitTest)cmocka_unit_test(params_mismatch);
    tests[n + 2] = (struct CMUnitTest)cmocka_unit_test(bad_params);
    tests[n + 3] = (struct CMUnitTest)cmocka_unit_test(one_rank_bad);
    tests[n + 4] = (struct CMUnitTest)cmocka_unit_test(shared_owner);
    tests[n + 5] = (struct CMUnitTest)cmocka_unit_test(slow_rank_wait);
    printf("test_kvcache seed %llu\n", (unsigned long long)harness_seed());
    const int rc = cmocka_run_group_tests_name("kvcache", tests, NULL, NULL);
    harness_fini();
    return rc;
}
