/* tools/job.c - run one distributed attention job over in-process ranks and check it. */
#include "job.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "ref.h"

/* ---- small helpers ---- */

double job_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double process_cpu_seconds(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0.0;
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
           (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

uint64_t job_peak_rss(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (uint64_t)ru.ru_maxrss * 1024u; /* Linux reports KiB */
}

const char *job_tensor_name(enum job_tensor t)
{
    static const char *const names[JOB_NTENSORS] = {"O", "lse", "dQ", "dK", "dV"};
    return (unsigned)t < JOB_NTENSORS ? names[t] : "?";
}

double job_err_rel(const struct job_err *e, enum job_tensor t)
{
    if (e->nonfinite > 0)
        return INFINITY;
    double denom = e->max_ref;
    if (t == JOB_LSE && denom < 1.0)
        denom = 1.0;
    if (denom == 0.0)
        return e->max_abs == 0.0 ? 0.0 : INFINITY;
    return e->max_abs / denom;
}

double job_tolerance(burst_dtype_t dtype)
{
    /* half types: 4 units of roundoff (fp16 u = 2^-11, bf16 u = 2^-8); the output (and every
     * gradient) is rounded once to the dtype, which alone costs up to 1 u of max |ref| */
    if (dtype == BURST_DTYPE_FP16)
        return 4.0 / 2048.0;
    if (dtype == BURST_DTYPE_BF16)
        return 4.0 / 256.0;
    return 1e-4;
}

double job_allowed_pairs(int64_t n, int causal, int64_t wl, int64_t wr)
{
    double pairs = 0.0;
    for (int64_t i = 0; i < n; i++) {
        int64_t lo = (wl >= 0 && i - wl > 0) ? i - wl : 0;
        int64_t hi = (wr >= 0 && i + wr < n - 1) ? i + wr : n - 1;
        if (causal && hi > i)
            hi = i;
        if (hi >= lo)
            pairs += (double)(hi - lo + 1);
    }
    return pairs;
}

double job_fwd_flops(const struct job_params *p)
{
    return 4.0 * (double)p->batch * p->q_heads * p->head_dim *
           job_allowed_pairs(p->seq_len, p->causal, p->window_left, p->window_right);
}

double job_bwd_ref_cost(const struct job_params *p)
{
    return (double)p->batch * (double)p->seq_len * (double)p->seq_len * p->q_heads * p->head_dim;
}

static void set_msg(struct job_result *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_msg(struct job_result *r, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message, sizeof(r->message), fmt, ap);
    va_end(ap);
    r->status = status;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n)
{
    if (n <= 0)
        return 0.0;
    double *t = malloc((size_t)n * sizeof(*t));
    if (!t)
        return v[0];
    memcpy(t, v, (size_t)n * sizeof(*t));
    qsort(t, (size_t)n, sizeof(*t), cmp_double);
    double m = (n % 2) ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    free(t);
    return m;
}

static double min_of(const double *v, int n)
{
    double m = n > 0 ? v[0] : 0.0;
    for (int i = 1; i < n; i++)
        m = v[i] < m ? v[i] : m;
    return m;
}

/* ---- random inputs ---- */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Roughly standard normal: the sum of four 16-bit uniforms, centred and scaled. */
static float rand_normalish(uint64_t *s)
{
    uint64_t x = splitmix64(s);
    double sum = (double)(x & 0xffff) + (double)((x >> 16) & 0xffff) +
                 (double)((x >> 32) & 0xffff) + (double)(x >> 48);
    return (float)((sum / 65536.0 - 2.0) * 1.7320508075688772);
}

static void store_elem(void *base, burst_dtype_t dt, size_t i, float x)
{
    switch (dt) {
    case BURST_DTYPE_FP16: ((uint16_t *)base)[i] = burst_fp32_to_fp16(x); break;
    case BURST_DTYPE_BF16: ((uint16_t *)base)[i] = burst_fp32_to_bf16(x); break;
    default: ((float *)base)[i] = x; break;
    }
}

static double load_elem(const void *base, burst_dtype_t dt, size_t i)
{
    switch (dt) {
    case BURST_DTYPE_FP16: return burst_fp16_to_fp32(((const uint16_t *)base)[i]);
    case BURST_DTYPE_BF16: return burst_bf16_to_fp32(((const uint16_t *)base)[i]);
    default: return ((const float *)base)[i];
    }
}

/* ---- the job's global state ---- */

struct job {
    const struct job_params *p;
    struct burst_context *ctx;
    struct burst_local_world *world;
    size_t esz;
    int64_t *lens, *offs; /* [G] shard lengths and offsets in permuted order */
    int64_t *perm;        /* [N] permuted index of natural position */
    int32_t *owner;       /* [N] rank holding natural position */
    /* global tensors in permuted order, dtype */
    void *q, *k, *v, *dout, *o, *dq, *dk, *dv;
    float **lse; /* [G] per-rank [B, Hq, n_r] */

    /* rank synchronisation: a barrier that also ORs flags across ranks */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int live; /* rank threads taking part (G unless some failed to start) */
    int arrived;
    unsigned gen;
    int round_flags, last_flags;

    /* first failure */
    int fail_status;
    int fail_is_secondary; /* the message recorded is a peer's echo (PEER_FAILED) */
    char fail_msg[1024];

    double *t_fwd, *t_bwd;             /* [warmup + iters] */
    double cpu0, wall0, cpu_s, wall_s; /* process cpu time and wall time of the timed iterations */
    int iters_done;
    struct burst_phase_stats *st_fwd, *st_bwd; /* [G] */
    burst_bwd_pattern_t bwd_used;
};

#define FLAG_FAIL 1
#define FLAG_STOP 2

/* Complete the current round (mutex held). */
static void sync_release(struct job *j)
{
    j->last_flags = j->round_flags;
    j->round_flags = 0;
    j->arrived = 0;
    j->gen++;
    pthread_cond_broadcast(&j->cv);
}

static int sync_ranks(struct job *j, int flags)
{
    pthread_mutex_lock(&j->mu);
    unsigned gen = j->gen;
    j->round_flags |= flags;
    if (++j->arrived >= j->live) {
        sync_release(j);
    } else {
        while (gen == j->gen)
            pthread_cond_wait(&j->cv, &j->mu);
    }
    /* stable until this thread enters the next round: that round cannot complete without it */
    int out = j->last_flags;
    pthread_mutex_unlock(&j->mu);
    return out;
}

static int record_failure(struct job *j, int rank, const char *call, burst_status_t st)
{
    int secondary = st == BURST_ERR_PEER_FAILED || st == BURST_ERR_COMM_FAILED;
    pthread_mutex_lock(&j->mu);
    if (!j->fail_status || (j->fail_is_secondary && !secondary)) {
        const char *msg = burst_last_error();
        snprintf(j->fail_msg, sizeof(j->fail_msg), "rank %d: %s failed: %s%s%s", rank, call,
                 burst_status_str(st), msg && *msg ? ": " : "", msg ? msg : "");
        int usage = (st == BURST_ERR_INVALID_ARG || st == BURST_ERR_UNSUPPORTED ||
                     st == BURST_ERR_TOO_LARGE) &&
                    strcmp(call, "burst_plan_create") == 0;
        j->fail_status = usage ? JOB_EUSAGE : JOB_EFAIL;
        j->fail_is_secondary = secondary;
    }
    pthread_mutex_unlock(&j->mu);
    return FLAG_FAIL;
}

static struct burst_tensor view(const struct job *j, void *base, int rank, int heads)
{
    const struct job_params *p = j->p;
    int64_t hd = (int64_t)heads * p->head_dim;
    struct burst_tensor t;
    memset(&t, 0, sizeof(t));
    t.data = (char *)base + (size_t)(j->offs[rank] * hd) * j->esz;
    t.dtype = p->dtype;
    t.shape[0] = p->batch;
    t.shape[1] = j->lens[rank];
    t.shape[2] = heads;
    t.shape[3] = p->head_dim;
    t.stride[0] = p->seq_len * hd;
    t.stride[1] = hd;
    t.stride[2] = p->head_dim;
    t.stride[3] = 1;
    return t;
}

struct rank_arg {
    struct job *j;
    int rank;
};

static void *rank_main(void *arg)
{
    struct rank_arg *ra = arg;
    struct job *j = ra->j;
    const struct job_params *p = j->p;
    int r = ra->rank;
    struct burst_comm *comm = NULL;
    struct burst_plan *plan = NULL;
    int fl = 0;

    struct burst_comm_params cp = burst_comm_params_default();
    cp.rank = r;
    cp.size = p->ranks;
    cp.world = j->world;
    burst_status_t st = burst_comm_create(&cp, &comm);
    if (st != BURST_OK)
        fl = record_failure(j, r, "burst_comm_create", st);
    if (sync_ranks(j, fl) & FLAG_FAIL)
        goto out;

    struct burst_plan_params pp = burst_plan_params_default();
    pp.batch = p->batch;
    pp.seq_len = p->seq_len;
    pp.q_heads = p->q_heads;
    pp.kv_heads = p->kv_heads;
    pp.head_dim = p->head_dim;
    pp.dtype = p->dtype;
    pp.causal = p->causal;
    pp.window_left = p->window_left;
    pp.window_right = p->window_right;
    pp.layout = p->layout;
    pp.bwd_pattern = p->bwd;
    st = burst_plan_create(j->ctx, comm, &pp, &plan);
    if (st != BURST_OK)
        fl = record_failure(j, r, "burst_plan_create", st);
    if (sync_ranks(j, fl) & FLAG_FAIL)
        goto out;
    if (r == 0)
        j->bwd_used = burst_plan_bwd_pattern(plan);

    struct burst_tensor q = view(j, j->q, r, p->q_heads), k = view(j, j->k, r, p->kv_heads),
                        v = view(j, j->v, r, p->kv_heads), o = view(j, j->o, r, p->q_heads),
                        dout = view(j, j->dout, r, p->q_heads), dq = view(j, j->dq, r, p->q_heads),
                        dk = view(j, j->dk, r, p->kv_heads), dv = view(j, j->dv, r, p->kv_heads);
    float *lse = j->lse[r];
    int total = p->warmup + p->iters;
    double timed_start = 0.0;
    for (int it = 0; it < total; it++) {
        if (sync_ranks(j, 0) & FLAG_FAIL)
            goto out;
        if (it == p->warmup) {
            timed_start = job_now();
            if (r == 0) {
                j->wall0 = timed_start;
                j->cpu0 = process_cpu_seconds();
            }
        }
        double t0 = job_now();
        st = burst_attention_forward(plan, &q, &k, &v, &o, lse);
        fl = st != BURST_OK ? record_failure(j, r, "burst_attention_forward", st) : 0;
        if (sync_ranks(j, fl) & FLAG_FAIL)
            goto out;
        double t1 = job_now();
        double t2 = t1;
        if (p->run_bwd) {
            st = burst_attention_backward(plan, &q, &k, &v, &o, lse, &dout, &dq, &dk, &dv);
            fl = st != BURST_OK ? record_failure(j, r, "burst_attention_backward", st) : 0;
            if (sync_ranks(j, fl) & FLAG_FAIL)
                goto out;
            t2 = job_now();
        }
        fl = 0;
        if (r == 0) {
            j->t_fwd[it] = t1 - t0;
            j->t_bwd[it] = t2 - t1;
            if (it >= p->warmup) {
                j->iters_done = it - p->warmup + 1;
                j->wall_s = t2 - j->wall0;
                j->cpu_s = process_cpu_seconds() - j->cpu0;
                if (p->max_seconds > 0 && t2 - timed_start > p->max_seconds)
                    fl = FLAG_STOP;
            }
        }
        if (sync_ranks(j, fl) & FLAG_STOP)
            break;
    }
    burst_plan_stats(plan, BURST_PHASE_FWD, &j->st_fwd[r]);
    if (p->run_bwd)
        burst_plan_stats(plan, BURST_PHASE_BWD, &j->st_bwd[r]);
out:
    burst_plan_destroy(plan);
    burst_comm_destroy(comm);
    return NULL;
}

/* ---- inputs ---- */

/* Fill a global [B, N, H, d] tensor in natural order from stream `stream`, then permute it
 * into dst. tmp holds at least as many elements. */
static int fill_input(struct job *j, void *dst, void *tmp, int heads, uint64_t stream,
                      struct job_result *r)
{
    const struct job_params *p = j->p;
    uint64_t s = p->seed * 0x2545F4914F6CDD1Dull + stream * 0x9E3779B97F4A7C15ull;
    size_t count = (size_t)p->batch * (size_t)p->seq_len * (size_t)heads * (size_t)p->head_dim;
    for (size_t i = 0; i < count; i++)
        store_elem(tmp, p->dtype, i, rand_normalish(&s));
    struct burst_tensor nat =
        burst_tensor_contiguous(tmp, p->dtype, p->batch, p->seq_len, heads, p->head_dim);
    struct burst_tensor per =
        burst_tensor_contiguous(dst, p->dtype, p->batch, p->seq_len, heads, p->head_dim);
    burst_status_t st = burst_layout_permute(p->layout, p->ranks, &nat, &per);
    if (st != BURST_OK) {
        set_msg(r, JOB_EFAIL, "burst_layout_permute failed: %s: %s", burst_status_str(st),
                burst_last_error());
        return -1;
    }
    return 0;
}

/* ---- check against the fp64 reference ---- */

struct check_ctx {
    struct job *j;
    const int64_t *rows; /* sampled natural positions (forward only), or NULL = all rows */
    int64_t nrows;
    int do_bwd;
    int ntasks; /* B * Hkv */
    int next;
    pthread_mutex_t mu;
    struct job_err err[JOB_NTENSORS];
    int failed_alloc;
};

static void err_add(struct job_err *e, double lib, double ref)
{
    e->count++;
    if (!isfinite(ref)) {
        if (!(lib == ref))
            e->nonfinite++;
        return;
    }
    if (!isfinite(lib)) {
        e->nonfinite++;
        return;
    }
    double a = fabs(lib - ref);
    if (a > e->max_abs)
        e->max_abs = a;
    if (fabs(ref) > e->max_ref)
        e->max_ref = fabs(ref);
}

static void err_merge(struct job_err *dst, const struct job_err *src)
{
    dst->max_abs = src->max_abs > dst->max_abs ? src->max_abs : dst->max_abs;
    dst->max_ref = src->max_ref > dst->max_ref ? src->max_ref : dst->max_ref;
    dst->count += src->count;
    dst->nonfinite += src->nonfinite;
}

/* Element (b, natural position pos, head h, e) of a permuted global tensor with `heads` heads. */
static double global_at(const struct job *j, const void *base, int heads, int64_t b, int64_t pos,
                        int h, int e)
{
    const struct job_params *p = j->p;
    size_t i =
        (((size_t)b * (size_t)p->seq_len + (size_t)j->perm[pos]) * (size_t)heads + (size_t)h) *
            (size_t)p->head_dim +
        (size_t)e;
    return load_elem(base, p->dtype, i);
}

/* One task: batch b, kv head g with its group of Hq/Hkv query heads, as a sub-problem. */
static int check_task(struct check_ctx *c, int task, struct job_err *err)
{
    const struct job *j = c->j;
    const struct job_params *p = j->p;
    int gs = p->q_heads / p->kv_heads;
    int d = p->head_dim;
    int64_t n = p->seq_len, b = task / p->kv_heads;
    int g = task % p->kv_heads;
    int64_t nrows = c->rows ? c->nrows : n;
    size_t qn = (size_t)n * gs * d, kn = (size_t)n * d, on = (size_t)nrows * gs * d;
    double *qd = malloc(qn * sizeof(double)), *kd = malloc(kn * sizeof(double)),
           *vd = malloc(kn * sizeof(double)), *od = malloc(on * sizeof(double)),
           *lsed = malloc((size_t)nrows * gs * sizeof(double));
    double *dod = NULL, *dqd = NULL, *dkd = NULL, *dvd = NULL;
    int rc = -1;
    if (!qd || !kd || !vd || !od || !lsed)
        goto done;
    if (c->do_bwd) {
        dod = malloc(qn * sizeof(double));
        dqd = malloc(qn * sizeof(double));
        dkd = malloc(kn * sizeof(double));
        dvd = malloc(kn * sizeof(double));
        if (!dod || !dqd || !dkd || !dvd)
            goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        for (int e = 0; e < d; e++) {
            kd[(size_t)i * d + e] = global_at(j, j->k, p->kv_heads, b, i, g, e);
            vd[(size_t)i * d + e] = global_at(j, j->v, p->kv_heads, b, i, g, e);
        }
        for (int hh = 0; hh < gs; hh++)
            for (int e = 0; e < d; e++) {
                size_t at = ((size_t)i * gs + hh) * d + e;
                qd[at] = global_at(j, j->q, p->q_heads, b, i, g * gs + hh, e);
                if (dod)
                    dod[at] = global_at(j, j->dout, p->q_heads, b, i, g * gs + hh, e);
            }
    }
    struct ref_problem rp = {
        .batch = 1,
        .seq_len = n,
        .q_heads = gs,
        .kv_heads = 1,
        .head_dim = d,
        .scale = 1.0 / sqrt((double)d),
        .causal = p->causal,
        .window_left = p->window_left,
        .window_right = p->window_right,
    };
    if (c->rows) {
        ref_forward_rows(&rp, qd, kd, vd, c->rows, nrows, od, lsed);
    } else {
        ref_forward(&rp, qd, kd, vd, od, lsed);
    }
    for (int64_t ri = 0; ri < nrows; ri++) {
        int64_t pos = c->rows ? c->rows[ri] : ri;
        int rank = j->owner[pos];
        int64_t local = j->perm[pos] - j->offs[rank];
        for (int hh = 0; hh < gs; hh++) {
            int h = g * gs + hh;
            for (int e = 0; e < d; e++)
                err_add(&err[JOB_O], global_at(j, j->o, p->q_heads, b, pos, h, e),
                        od[((size_t)ri * gs + hh) * d + e]);
            double lib =
                j->lse[rank][((size_t)b * p->q_heads + h) * (size_t)j->lens[rank] + (size_t)local];
            err_add(&err[JOB_LSE], lib, lsed[(size_t)hh * nrows + ri]);
        }
    }
    if (c->do_bwd) {
        ref_backward(&rp, qd, kd, vd, dod, dqd, dkd, dvd);
        for (int64_t i = 0; i < n; i++) {
            for (int hh = 0; hh < gs; hh++)
                for (int e = 0; e < d; e++)
                    err_add(&err[JOB_DQ], global_at(j, j->dq, p->q_heads, b, i, g * gs + hh, e),
                            dqd[((size_t)i * gs + hh) * d + e]);
            for (int e = 0; e < d; e++) {
                err_add(&err[JOB_DK], global_at(j, j->dk, p->kv_heads, b, i, g, e),
                        dkd[(size_t)i * d + e]);
                err_add(&err[JOB_DV], global_at(j, j->dv, p->kv_heads, b, i, g, e),
                        dvd[(size_t)i * d + e]);
            }
        }
    }
    rc = 0;
done:
    free(qd);
    free(kd);
    free(vd);
    free(od);
    free(lsed);
    free(dod);
    free(dqd);
    free(dkd);
    free(dvd);
    return rc;
}

static void *check_worker(void *arg)
{
    struct check_ctx *c = arg;
    struct job_err err[JOB_NTENSORS];
    memset(err, 0, sizeof(err));
    int bad = 0;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        int t = c->next++;
        pthread_mutex_unlock(&c->mu);
        if (t >= c->ntasks)
            break;
        if (check_task(c, t, err) != 0)
            bad = 1;
    }
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < JOB_NTENSORS; i++)
        err_merge(&c->err[i], &err[i]);
    c->failed_alloc |= bad;
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Sampled rows: evenly spread positions plus the first and last row of every rank. */
static int64_t *sample_rows(const struct job *j, int64_t *nrows_p)
{
    const struct job_params *p = j->p;
    int64_t n = p->seq_len, want = JOB_FWD_SAMPLE_ROWS;
    int extra = p->ranks <= 1024 ? 2 * p->ranks : 0;
    int64_t *rows = malloc((size_t)(want + extra) * sizeof(*rows));
    if (!rows)
        return NULL;
    int64_t m = 0;
    for (int64_t i = 0; i < want; i++)
        rows[m++] = (n - 1) * i / (want - 1);
    for (int rk = 0; rk < p->ranks && extra; rk++) {
        int64_t pos;
        if (burst_layout_position(p->layout, n, p->ranks, rk, 0, &pos) == BURST_OK)
            rows[m++] = pos;
        if (burst_layout_position(p->layout, n, p->ranks, rk, j->lens[rk] - 1, &pos) == BURST_OK)
            rows[m++] = pos;
    }
    qsort(rows, (size_t)m, sizeof(*rows), cmp_i64);
    int64_t u = 0;
    for (int64_t i = 0; i < m; i++)
        if (u == 0 || rows[u - 1] != rows[i])
            rows[u++] = rows[i];
    *nrows_p = u;
    return rows;
}

static int run_check(struct job *j, struct job_result *r)
{
    const struct job_params *p = j->p;
    struct check_ctx c;
    memset(&c, 0, sizeof(c));
    c.j = j;
    c.do_bwd = p->check_bwd && p->run_bwd;
    c.ntasks = (int)p->batch * p->kv_heads;
    if (p->check_fwd < 2 && !c.do_bwd) {
        int64_t *rows = sample_rows(j, &c.nrows);
        if (!rows) {
            set_msg(r, JOB_EFAIL, "out of memory for the check");
            return -1;
        }
        c.rows = rows;
    }
    pthread_mutex_init(&c.mu, NULL);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nw = (int)(ncpu > 0 ? ncpu : 1);
    if (nw > c.ntasks)
        nw = c.ntasks;
    if (nw > 256)
        nw = 256;
    pthread_t th[256];
    int started = 0;
    for (int i = 1; i < nw; i++) {
        if (pthread_create(&th[started], NULL, check_worker, &c) != 0)
            break;
        started++;
    }
    check_worker(&c);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&c.mu);
    free((void *)c.rows);
    if (c.failed_alloc) {
        set_msg(r, JOB_EFAIL, "out of memory for the fp64 reference");
        return -1;
    }
    memcpy(r->err, c.err, sizeof(r->err));
    r->checked_fwd_rows = (int)(c.rows ? c.nrows : p->seq_len);
    r->checked_bwd = c.do_bwd;
    return 0;
}

/* ---- the job ---- */

static void *alloc_tensor(struct job_result *r, size_t elems, size_t esz, uint64_t *total)
{
    size_t bytes = elems * esz;
    void *ptr = calloc(elems ? elems : 1, esz);
    if (!ptr)
        set_msg(r, JOB_EFAIL, "out of memory allocating %zu bytes for the job's tensors", bytes);
    else
        *total += bytes;
    return ptr;
}

int job_run(const struct job_params *p, struct burst_context *ctx, struct job_result *r)
{
    memset(r, 0, sizeof(*r));
    struct job j;
    memset(&j, 0, sizeof(j));
    j.p = p;
    j.ctx = ctx;
    j.esz = burst_dtype_size(p->dtype);
    snprintf(r->backend, sizeof(r->backend), "%s", burst_context_backend(ctx));
    r->num_threads = burst_context_num_threads(ctx);
    int G = p->ranks;
    int64_t N = p->seq_len;
    int total_iters = p->warmup + p->iters;
    pthread_t *th = NULL;
    struct rank_arg *ra = NULL;
    int started = 0, bad;
    uint64_t tot = 0;
    void *tmp = NULL;
    burst_status_t st;

    pthread_mutex_init(&j.mu, NULL);
    pthread_cond_init(&j.cv, NULL);
    j.live = G;

    j.lens = calloc((size_t)G, sizeof(int64_t));
    j.offs = calloc((size_t)G, sizeof(int64_t));
    j.perm = calloc((size_t)N, sizeof(int64_t));
    j.owner = calloc((size_t)N, sizeof(int32_t));
    j.lse = calloc((size_t)G, sizeof(float *));
    j.t_fwd = calloc((size_t)total_iters, sizeof(double));
    j.t_bwd = calloc((size_t)total_iters, sizeof(double));
    j.st_fwd = calloc((size_t)G, sizeof(*j.st_fwd));
    j.st_bwd = calloc((size_t)G, sizeof(*j.st_bwd));
    th = calloc((size_t)G, sizeof(*th));
    ra = calloc((size_t)G, sizeof(*ra));
    if (!j.lens || !j.offs || !j.perm || !j.owner || !j.lse || !j.t_fwd || !j.t_bwd || !j.st_fwd ||
        !j.st_bwd || !th || !ra) {
        set_msg(r, JOB_EFAIL, "out of memory");
        goto out;
    }

    /* shards and the natural -> permuted map, from the library's layout helpers */
    for (int rk = 0; rk < G; rk++) {
        st = burst_layout_shard_len(p->layout, N, G, rk, &j.lens[rk]);
        if (st == BURST_OK)
            st = burst_layout_shard_offset(p->layout, N, G, rk, &j.offs[rk]);
        if (st != BURST_OK) {
            set_msg(r, JOB_EUSAGE, "%s", burst_last_error());
            goto out;
        }
        for (int64_t l = 0; l < j.lens[rk]; l++) {
            int64_t pos;
            st = burst_layout_position(p->layout, N, G, rk, l, &pos);
            if (st != BURST_OK || pos < 0 || pos >= N) {
                set_msg(r, JOB_EFAIL, "burst_layout_position(rank %d, local %lld) failed: %s", rk,
                        (long long)l, burst_last_error());
                goto out;
            }
            j.perm[pos] = j.offs[rk] + l;
            j.owner[pos] = rk;
        }
    }

    /* tensors */
    size_t qel = (size_t)p->batch * (size_t)N * (size_t)p->q_heads * (size_t)p->head_dim;
    size_t kel = (size_t)p->batch * (size_t)N * (size_t)p->kv_heads * (size_t)p->head_dim;
    if (!(j.q = alloc_tensor(r, qel, j.esz, &tot)) || !(j.k = alloc_tensor(r, kel, j.esz, &tot)) ||
        !(j.v = alloc_tensor(r, kel, j.esz, &tot)) || !(j.o = alloc_tensor(r, qel, j.esz, &tot)))
        goto out;
    if (p->run_bwd) {
        if (!(j.dout = alloc_tensor(r, qel, j.esz, &tot)) ||
            !(j.dq = alloc_tensor(r, qel, j.esz, &tot)) ||
            !(j.dk = alloc_tensor(r, kel, j.esz, &tot)) ||
            !(j.dv = alloc_tensor(r, kel, j.esz, &tot)))
            goto out;
    }
    for (int rk = 0; rk < G; rk++) {
        size_t n = (size_t)p->batch * (size_t)p->q_heads * (size_t)j.lens[rk];
        if (!(j.lse[rk] = alloc_tensor(r, n, sizeof(float), &tot)))
            goto out;
    }
    r->caller_bytes = tot;
    tmp = malloc(qel * j.esz);
    if (!tmp) {
        set_msg(r, JOB_EFAIL, "out of memory allocating %zu bytes", qel * j.esz);
        goto out;
    }
    bad = fill_input(&j, j.q, tmp, p->q_heads, 1, r) ||
          fill_input(&j, j.k, tmp, p->kv_heads, 2, r) ||
          fill_input(&j, j.v, tmp, p->kv_heads, 3, r) ||
          (p->run_bwd && fill_input(&j, j.dout, tmp, p->q_heads, 4, r));
    free(tmp);
    if (bad)
        goto out;

    /* ranks */
    st = burst_local_world_create(G, &j.world);
    if (st != BURST_OK) {
        set_msg(r, JOB_EFAIL, "burst_local_world_create(%d) failed: %s: %s", G,
                burst_status_str(st), burst_last_error());
        goto out;
    }
    for (int rk = 0; rk < G; rk++) {
        ra[rk].j = &j;
        ra[rk].rank = rk;
        if (pthread_create(&th[rk], NULL, rank_main, &ra[rk]) != 0)
            break;
        started++;
    }
    if (started < G) {
        /* ranks already started wait for the others in sync_ranks; let them through failed */
        pthread_mutex_lock(&j.mu);
        j.fail_status = JOB_EFAIL;
        snprintf(j.fail_msg, sizeof(j.fail_msg), "could not start %d rank threads", G);
        j.live = started;
        j.round_flags |= FLAG_FAIL;
        if (started > 0 && j.arrived >= j.live)
            sync_release(&j);
        pthread_mutex_unlock(&j.mu);
    }
    for (int rk = 0; rk < started; rk++)
        pthread_join(th[rk], NULL);
    if (j.fail_status) {
        set_msg(r, j.fail_status, "%s", j.fail_msg);
        goto out;
    }

    r->peak_rss = job_peak_rss();
    r->bwd_used = j.bwd_used;
    if (j.wall_s > 0 && r->num_threads > 0)
        r->cpu_share = j.cpu_s / (j.wall_s * r->num_threads);
    r->iters_done = j.iters_done;
    r->fwd_s = median(j.t_fwd + p->warmup, j.iters_done);
    r->fwd_min_s = min_of(j.t_fwd + p->warmup, j.iters_done);
    if (p->run_bwd) {
        r->bwd_s = median(j.t_bwd + p->warmup, j.iters_done);
        r->bwd_min_s = min_of(j.t_bwd + p->warmup, j.iters_done);
    }
    for (int rk = 0; rk < G; rk++) {
        const struct burst_phase_stats *f = &j.st_fwd[rk], *b = &j.st_bwd[rk];
#define MAXU(x, y) ((x) = (y) > (x) ? (y) : (x))
        MAXU(r->bytes_fwd, f->traffic.bytes_sent);
        MAXU(r->msgs_fwd, f->traffic.msgs_sent);
        MAXU(r->scratch_fwd, f->scratch_bytes);
        MAXU(r->steps_fwd, f->steps);
        MAXU(r->wait_fwd_s, f->wait_s);
        MAXU(r->bytes_bwd, b->traffic.bytes_sent);
        MAXU(r->msgs_bwd, b->traffic.msgs_sent);
        MAXU(r->scratch_bwd, b->scratch_bytes);
        MAXU(r->steps_bwd, b->steps);
        MAXU(r->wait_bwd_s, b->wait_s);
#undef MAXU
    }

    if (p->check_fwd || p->check_bwd)
        run_check(&j, r);

out:
    free(th);
    free(ra);
    burst_local_world_destroy(j.world);
    if (j.lse)
        for (int rk = 0; rk < G; rk++)
            free(j.lse[rk]);
    free(j.lse);
    free(j.q);
    free(j.k);
    free(j.v);
    free(j.o);
    free(j.dout);
    free(j.dq);
    free(j.dk);
    free(j.dv);
    free(j.lens);
    free(j.offs);
    free(j.perm);
    free(j.owner);
    free(j.t_fwd);
    free(j.t_bwd);
    free(j.st_fwd);
    free(j.st_bwd);
    pthread_cond_destroy(&j.cv);
    pthread_mutex_destroy(&j.mu);
    return r->status;
}
