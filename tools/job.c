/* tools/job.c - one distributed attention job: the loop every rank runs, ranks as threads, the
 * rank-process side, and the results. Inputs: job_inputs.c; check: job_check.c; shards by
 * speed: job_speed.c. */
#include "job.h"
#include "job_internal.h"
#include "job_size.h"
#include "progress.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
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

int job_list_count(const char *list)
{
    int n = 1;
    for (; list && *list; list++)
        n += *list == ',';
    return n;
}

void job_list_entry(const char *list, int rank, char *buf, size_t cap)
{
    const char *s = list ? list : "";
    for (int i = 0; i < rank % job_list_count(list); i++)
        s = strchr(s, ',') + 1;
    size_t len = strcspn(s, ",");
    snprintf(buf, cap, "%.*s", (int)(len < cap ? len : cap - 1), s);
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
    static const char *const names[JOB_NTENSORS] = {"O", "lse", "dQ", "dK", "dV", "dsinks"};
    return (unsigned)t < JOB_NTENSORS ? names[t] : "?";
}

double job_err_rel(const struct job_err *e, enum job_tensor t)
{
    if (e->nonfinite > 0)
        return INFINITY;
    double denom = e->max_ref;
    if (e->max_terms / JOB_TERMS_FLOOR > denom)
        denom = e->max_terms / JOB_TERMS_FLOOR;
    if (t == JOB_LSE && denom < 1.0)
        denom = 1.0;
    if (denom == 0.0)
        return e->max_abs == 0.0 ? 0.0 : INFINITY;
    return e->max_abs / denom;
}

double job_tolerance(const struct job_params *p)
{
    if (p->fp8)
        return 0.25;
    /* half types: 4 units of roundoff (fp16 u = 2^-11, bf16 u = 2^-8); the output (and every
     * gradient) is rounded once to the dtype, which alone costs up to 1 u of max |ref| */
    const burst_dtype_t dtype = p->dtype;
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
    return 4.0 * (double)p->batch * p->q_heads * p->head_dim * job_pairs(p);
}

double job_bwd_ref_cost(const struct job_params *p)
{
    return (double)p->batch * (double)p->seq_len * (double)p->seq_len * p->q_heads * p->head_dim;
}

void job_set_msg(struct job_result *r, int status, const char *fmt, ...)
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

static double max_of(const double *v, int n)
{
    double m = n > 0 ? v[0] : 0.0;
    for (int i = 1; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

/* ---- the job's global state ---- */

/* job_geometry's maps with documents, where shards follow the work: the plan's own placement
 * (burst_layout_plan_*) of the parameters every rank's plan gets. */
static int job_geometry_docs(struct job *j, struct job_result *r)
{
    const struct job_params *p = j->p;
    const int G = p->ranks;
    struct burst_plan_params pp = job_plan_params(p);
    if (p->weights_mode == JOB_WEIGHTS_GIVEN)
        pp.shard_weights = p->weights;
    else if (p->weights_mode == JOB_WEIGHTS_MEASURED && !(pp.shard_lens = j->lens_in)) {
        job_set_msg(r, JOB_EFAIL, "the measured shard lengths are missing");
        return -1;
    }
    if (burst_layout_plan_lens(&pp, G, j->lens) != BURST_OK) {
        job_set_msg(r, JOB_EUSAGE, "--docs: %s", burst_last_error());
        return -1;
    }
    int64_t *pos = malloc(sizeof(int64_t) * (size_t)p->seq_len);
    if (!pos) {
        job_set_msg(r, JOB_EFAIL, "out of memory");
        return -1;
    }
    for (int rk = 0; rk < G; rk++) {
        j->offs[rk] = rk ? j->offs[rk - 1] + j->lens[rk - 1] : 0;
        if (burst_layout_plan_positions(&pp, G, rk, pos) != BURST_OK) {
            job_set_msg(r, JOB_EFAIL, "burst_layout_plan_positions(rank %d) failed: %s", rk,
                        burst_last_error());
            free(pos);
            return -1;
        }
        for (int64_t l = 0; l < j->lens[rk]; l++) {
            j->perm[pos[l]] = j->offs[rk] + l;
            j->nat[j->offs[rk] + l] = pos[l];
            j->owner[pos[l]] = rk;
        }
    }
    free(pos);
    return 0;
}

/* Shard lengths, offsets and the natural <-> permuted maps, from the library's layout helpers.
 * 0, or -1 with the message in r. */
static int job_geometry(struct job *j, struct job_result *r)
{
    const struct job_params *p = j->p;
    int G = p->ranks;
    int64_t N = p->seq_len;
    j->esz = burst_dtype_size(p->dtype);
    j->lens = calloc((size_t)G, sizeof(int64_t));
    j->offs = calloc((size_t)G, sizeof(int64_t));
    j->perm = calloc((size_t)N, sizeof(int64_t));
    j->nat = calloc((size_t)N, sizeof(int64_t));
    j->owner = calloc((size_t)N, sizeof(int32_t));
    j->lse = calloc((size_t)G, sizeof(float *));
    if (!j->lens || !j->offs || !j->perm || !j->nat || !j->owner || !j->lse) {
        job_set_msg(r, JOB_EFAIL, "out of memory");
        return -1;
    }
    if (p->num_docs > 0)
        return job_geometry_docs(j, r);
    const int64_t *lens = NULL; /* explicit (uneven) lengths, or NULL = even */
    if (p->weights_mode == JOB_WEIGHTS_GIVEN) {
        if (burst_layout_weighted_lens(p->layout, N, G, p->weights, j->lens) != BURST_OK) {
            job_set_msg(r, JOB_EUSAGE, "--weights: %s", burst_last_error());
            return -1;
        }
        lens = j->lens;
    } else if (p->weights_mode == JOB_WEIGHTS_MEASURED) {
        if (!j->lens_in) {
            job_set_msg(r, JOB_EFAIL, "the measured shard lengths are missing");
            return -1;
        }
        memcpy(j->lens, j->lens_in, sizeof(int64_t) * (size_t)G);
        lens = j->lens;
    }
    for (int rk = 0; rk < G; rk++) {
        burst_status_t st = BURST_OK;
        if (!lens)
            st = burst_layout_shard_len(p->layout, N, G, rk, &j->lens[rk]);
        j->offs[rk] = rk ? j->offs[rk - 1] + j->lens[rk - 1] : 0;
        if (st != BURST_OK) {
            job_set_msg(r, JOB_EUSAGE, "%s", burst_last_error());
            return -1;
        }
        for (int64_t l = 0; l < j->lens[rk]; l++) {
            int64_t pos;
            st = burst_layout_position_lens(p->layout, N, G, lens, rk, l, &pos);
            if (st != BURST_OK || pos < 0 || pos >= N) {
                job_set_msg(r, JOB_EFAIL, "burst_layout_position(rank %d, local %lld) failed: %s",
                            rk, (long long)l, burst_last_error());
                return -1;
            }
            j->perm[pos] = j->offs[rk] + l;
            j->nat[j->offs[rk] + l] = pos;
            j->owner[pos] = rk;
        }
    }
    return 0;
}

static void job_geometry_free(struct job *j)
{
    free(j->lens);
    free(j->offs);
    free(j->perm);
    free(j->nat);
    free(j->owner);
    free(j->lse);
}

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

/* ---- one rank: the loop both modes run ---- */

struct rank_run {
    struct job *j;
    int rank;
    struct burst_comm *comm;
    int threads;                 /* threads mode: barriers between calls, rank 0 decides STOP */
    const struct job_kill *kill; /* processes: test fault injection, or NULL */
    int *progress;               /* iterations completed, or NULL */
    int iter_count;              /* threads: where progress points */
    int finished;                /* threads: the rank thread is done (atomic) */
    double *t_fwd, *t_bwd;       /* [warmup + iters] wall time of this rank's calls */

    int status;    /* JOB_OK, JOB_EUSAGE, JOB_EFAIL */
    int secondary; /* the failure is a peer's echo */
    char msg[512];
    burst_bwd_pattern_t bwd_used;
    int iters_done;
    double wall_s, cpu_s;
    struct job_rank_stats st;
};

static int rank_fail(struct rank_run *rr, const char *call, burst_status_t st)
{
    const char *msg = burst_last_error();
    snprintf(rr->msg, sizeof(rr->msg), "rank %d: %s failed: %s%s%s", rr->rank, call,
             burst_status_str(st), msg && *msg ? ": " : "", msg ? msg : "");
    int usage =
        (st == BURST_ERR_INVALID_ARG || st == BURST_ERR_UNSUPPORTED || st == BURST_ERR_TOO_LARGE) &&
        strcmp(call, "burst_plan_create") == 0;
    rr->status = usage ? JOB_EUSAGE : JOB_EFAIL;
    rr->secondary = st == BURST_ERR_PEER_FAILED || st == BURST_ERR_COMM_FAILED;
    return FLAG_FAIL;
}

/* Threads: a barrier ORing the flags of every rank. Processes: the ring's collective calls are
 * the only synchronisation; a rank stops on its own failure (its peers learn it through the
 * communicator). */
static int rank_sync(struct rank_run *rr, int flags)
{
    return rr->threads ? sync_ranks(rr->j, flags) : flags;
}

static void *kill_later(void *arg)
{
    const struct job_kill *k = arg;
    struct timespec ts = {k->delay_ms / 1000, (long)(k->delay_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    raise(SIGKILL);
    return NULL;
}

static void maybe_kill(const struct rank_run *rr, int it, char phase)
{
    const struct job_kill *k = rr->kill;
    if (!k || k->rank != rr->rank || k->iter != it || k->phase != phase)
        return;
    if (k->delay_ms <= 0) {
        raise(SIGKILL);
        return;
    }
    pthread_t th;
    if (pthread_create(&th, NULL, kill_later, (void *)k) == 0)
        pthread_detach(th);
    else
        raise(SIGKILL);
}

/* Ranks on a device-memory backend (cuda) compute on tensors in their context's memory: each
 * global permuted tensor's shard of the rank, packed [B, n, H, d] contiguous. */
struct dev_shards {
    struct burst_context *ctx;
    void *buf[8]; /* q, k, v, dout, o, dq, dk, dv */
    float *lse;
};

/* Copy rank's rows of global tensor `host` (heads) to or from the packed shard `dev`. */
static burst_status_t dev_copy(const struct job *j, struct burst_context *ctx, int rank, int heads,
                               void *host, void *dev, int up)
{
    const struct job_params *p = j->p;
    size_t row = (size_t)heads * (size_t)p->head_dim * j->esz, n = (size_t)j->lens[rank];
    burst_status_t st = BURST_OK;
    for (int64_t b = 0; st == BURST_OK && b < p->batch; b++) {
        char *h = (char *)host + ((size_t)b * (size_t)p->seq_len + (size_t)j->offs[rank]) * row;
        char *d = (char *)dev + (size_t)b * n * row;
        st = up ? burst_context_memcpy(ctx, d, h, n * row)
                : burst_context_memcpy(ctx, h, d, n * row);
    }
    return st;
}

static void dev_free(struct dev_shards *ds)
{
    for (int t = 0; t < 8; t++)
        burst_context_free(ds->ctx, ds->buf[t]);
    burst_context_free(ds->ctx, ds->lse);
}

/* The job's plan parameters: every rank's plan (rank_loop) and the plan that measures the ranks'
 * speeds (job_measure_lens) start from these, so that both describe the same job. Shards are left
 * to the caller. */
struct burst_plan_params job_plan_params(const struct job_params *p)
{
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
    pp.deterministic = p->deterministic;
    pp.ranks_per_node = p->ranks_per_node;
    pp.workspace_limit = p->workspace_limit;
    if (p->num_docs > 0) {
        pp.doc_lens = p->doc_lens;
        pp.num_docs = p->num_docs;
    }
    pp.softcap = p->softcap;
    pp.fp8_forward = p->fp8;
    return pp;
}

static void rank_loop(struct rank_run *rr)
{
    struct job *j = rr->j;
    const struct job_params *p = j->p;
    int r = rr->rank;
    struct burst_plan *plan = NULL;
    int fl = 0;

    struct burst_plan_params pp = job_plan_params(p);
    double reversed[JOB_MAX_LIST];
    if (p->weights_mode == JOB_WEIGHTS_GIVEN)
        pp.shard_weights = p->weights;
    else if (p->weights_mode == JOB_WEIGHTS_MEASURED)
        pp.shard_lens = j->lens; /* what the measuring plan agreed */
    if (r == p->mismatch_rank && !strcmp(p->mismatch_field, "head_dim"))
        pp.head_dim += 8;
    if (r == p->mismatch_rank && !strcmp(p->mismatch_field, "weights")) {
        for (int i = 0; i < p->ranks; i++)
            reversed[i] = p->weights_mode == JOB_WEIGHTS_GIVEN ? p->weights[p->ranks - 1 - i]
                                                               : 1.0 + (i == 0);
        pp.shard_lens = NULL;
        pp.shard_weights = reversed;
    }
    struct burst_context *ctx = j->ctxs ? j->ctxs[r] : j->ctx;
    struct dev_shards ds = {.ctx = ctx};
    burst_status_t st = burst_plan_create(ctx, rr->comm, &pp, &plan);
    if (st != BURST_OK)
        fl = rank_fail(rr, "burst_plan_create", st);
    if (rank_sync(rr, fl) & FLAG_FAIL)
        goto out;
    rr->bwd_used = burst_plan_bwd_pattern(plan);
    snprintf(rr->st.transfers, sizeof(rr->st.transfers), "%s", burst_plan_transfers(plan));
    rr->st.head_groups = burst_plan_head_groups(plan);

    struct burst_tensor q = view(j, j->q, r, p->q_heads), k = view(j, j->k, r, p->kv_heads),
                        v = view(j, j->v, r, p->kv_heads), o = view(j, j->o, r, p->q_heads),
                        dout = view(j, j->dout, r, p->q_heads), dq = view(j, j->dq, r, p->q_heads),
                        dk = view(j, j->dk, r, p->kv_heads), dv = view(j, j->dv, r, p->kv_heads);
    float *lse = j->lse[r];
    float sinks[JOB_MAX_SINKS]; /* --sinks: the logits, the same on every rank */
    float *dsinks = j->dsinks ? j->dsinks + (size_t)r * (size_t)p->q_heads : NULL;
    if (p->sinks)
        job_sinks(p, sinks);
    fl = 0;
    /* GPU ranks compute on their context's memory, as an application does: cuda must (device
     * memory), vulkan would otherwise stage host tensors at every call (context.h) */
    if (burst_context_device_memory(ctx) || strcmp(burst_context_backend(ctx), "cpu") != 0) {
        void *hosts[8] = {j->q, j->k, j->v, j->dout, j->o, j->dq, j->dk, j->dv};
        struct burst_tensor *views[8] = {&q, &k, &v, &dout, &o, &dq, &dk, &dv};
        st = BURST_OK;
        for (int t = 0; st == BURST_OK && t < 8; t++) {
            int heads = (t == 1 || t == 2 || t == 6 || t == 7) ? p->kv_heads : p->q_heads;
            size_t bytes = (size_t)p->batch * (size_t)j->lens[r] * (size_t)heads *
                           (size_t)p->head_dim * j->esz;
            if (!hosts[t]) /* --fwd-only: no backward tensors */
                continue;
            st = burst_context_alloc(ctx, bytes, &ds.buf[t]);
            if (st == BURST_OK && t < 4)
                st = dev_copy(j, ctx, r, heads, hosts[t], ds.buf[t], 1);
            *views[t] = burst_tensor_contiguous(ds.buf[t], p->dtype, p->batch, j->lens[r], heads,
                                                p->head_dim);
        }
        size_t nl = (size_t)p->batch * (size_t)p->q_heads * (size_t)j->lens[r];
        if (st == BURST_OK)
            st = burst_context_alloc(ctx, nl * sizeof(float), (void **)&ds.lse);
        lse = ds.lse;
        fl = st != BURST_OK ? rank_fail(rr, "burst_context_alloc / memcpy", st) : 0;
    }
    if (rank_sync(rr, fl) & FLAG_FAIL) /* every rank: threads meet at this barrier */
        goto out;
    int total = p->warmup + p->iters;
    double timed_start = 0.0, cpu0 = 0.0;
    for (int it = 0; it < total; it++) {
        if (rank_sync(rr, 0) & FLAG_FAIL)
            goto out;
        if (it == p->warmup) {
            timed_start = job_now();
            cpu0 = process_cpu_seconds();
        }
        maybe_kill(rr, it, 'F');
        double t0 = job_now();
        st = p->sinks ? burst_attention_forward_sinks(plan, &q, &k, &v, sinks, p->q_heads, &o, lse)
                      : burst_attention_forward(plan, &q, &k, &v, &o, lse);
        fl = st != BURST_OK ? rank_fail(rr, "burst_attention_forward", st) : 0;
        if (rank_sync(rr, fl) & FLAG_FAIL)
            goto out;
        double t1 = job_now();
        double t2 = t1;
        if (p->run_bwd) {
            maybe_kill(rr, it, 'B');
            st = p->sinks
                     ? burst_attention_backward_sinks(plan, &q, &k, &v, &o, lse, &dout, sinks,
                                                      p->q_heads, &dq, &dk, &dv, dsinks)
                     : burst_attention_backward(plan, &q, &k, &v, &o, lse, &dout, &dq, &dk, &dv);
            fl = st != BURST_OK ? rank_fail(rr, "burst_attention_backward", st) : 0;
            if (rank_sync(rr, fl) & FLAG_FAIL)
                goto out;
            t2 = job_now();
        }
        rr->t_fwd[it] = t1 - t0;
        rr->t_bwd[it] = t2 - t1;
        fl = 0;
        if (it >= p->warmup) {
            rr->iters_done = it - p->warmup + 1;
            rr->wall_s = t2 - timed_start;
            rr->cpu_s = process_cpu_seconds() - cpu0;
            /* processes cannot agree on stopping early without a collective: threads only */
            if (rr->threads && r == 0 && p->max_seconds > 0 && t2 - timed_start > p->max_seconds)
                fl = FLAG_STOP;
        }
        if (rr->progress)
            __atomic_store_n(rr->progress, it + 1, __ATOMIC_RELAXED);
        if (rank_sync(rr, fl) & FLAG_STOP)
            break;
    }
    burst_plan_stats(plan, BURST_PHASE_FWD, &rr->st.fwd);
    if (p->run_bwd)
        burst_plan_stats(plan, BURST_PHASE_BWD, &rr->st.bwd);
    if (ds.lse) { /* outputs back into the job's global tensors */
        void *hosts[8] = {j->q, j->k, j->v, j->dout, j->o, j->dq, j->dk, j->dv};
        st = BURST_OK;
        for (int t = 4; st == BURST_OK && t < 8; t++)
            if (hosts[t])
                st = dev_copy(j, ctx, r, (t == 6 || t == 7) ? p->kv_heads : p->q_heads, hosts[t],
                              ds.buf[t], 0);
        if (st == BURST_OK)
            st = burst_context_memcpy(ctx, j->lse[r], ds.lse,
                                      (size_t)p->batch * (size_t)p->q_heads * (size_t)j->lens[r] *
                                          sizeof(float));
        if (st != BURST_OK)
            rank_fail(rr, "burst_context_memcpy (outputs)", st);
    }
out:
    dev_free(&ds);
    burst_plan_destroy(plan);
}

static void *rank_thread(void *arg)
{
    struct rank_run *rr = arg;
    struct job *j = rr->j;
    int fl = 0;
    struct burst_comm_params cp = burst_comm_params_default();
    cp.rank = rr->rank;
    cp.size = j->p->ranks;
    cp.world = j->world;
    burst_status_t st = burst_comm_create(&cp, &rr->comm);
    if (st != BURST_OK)
        fl = rank_fail(rr, "burst_comm_create", st);
    if (!(sync_ranks(j, fl) & FLAG_FAIL))
        rank_loop(rr);
    burst_comm_destroy(rr->comm);
    rr->comm = NULL;
    __atomic_store_n(&rr->finished, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Until every started rank thread has finished: the progress line (tools/progress.h) of the
 * slowest rank's iterations, every 100 ms. */
static void wait_ranks(struct rank_run *rr, int started, int total)
{
    struct progress pg;
    progress_init(&pg);
    for (;;) {
        int left = 0, done = total;
        for (int rk = 0; rk < started; rk++) {
            left += !__atomic_load_n(&rr[rk].finished, __ATOMIC_ACQUIRE);
            int it = __atomic_load_n(&rr[rk].iter_count, __ATOMIC_RELAXED);
            done = it < done ? it : done;
        }
        if (!left)
            break;
        progress_update(&pg, done, total);
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
    }
    progress_clear(&pg);
}

/* ---- results ---- */

static void *alloc_tensor(struct job_result *r, size_t elems, size_t esz, uint64_t *total)
{
    size_t bytes = elems * esz;
    void *ptr = calloc(elems ? elems : 1, esz);
    if (!ptr)
        job_set_msg(r, JOB_EFAIL, "out of memory allocating %zu bytes for the job's tensors",
                    bytes);
    else
        *total += bytes;
    return ptr;
}

static void fnv1a(uint64_t *h, const void *data, size_t n)
{
    const unsigned char *c = data;
    for (size_t i = 0; i < n; i++) {
        *h ^= c[i];
        *h *= 0x100000001B3ull;
    }
}

/* FNV-1a over the bytes of O, lse (rank by rank), dQ, dK, dV (the last three when run). */
static uint64_t output_hash(const struct job *j)
{
    const struct job_params *p = j->p;
    size_t qb =
        (size_t)p->batch * (size_t)p->seq_len * (size_t)p->q_heads * (size_t)p->head_dim * j->esz;
    size_t kb = qb / (size_t)p->q_heads * (size_t)p->kv_heads;
    uint64_t h = 0xCBF29CE484222325ull;
    fnv1a(&h, j->o, qb);
    for (int rk = 0; rk < p->ranks; rk++)
        fnv1a(&h, j->lse[rk],
              (size_t)p->batch * (size_t)p->q_heads * (size_t)j->lens[rk] * sizeof(float));
    if (p->run_bwd) {
        fnv1a(&h, j->dq, qb);
        fnv1a(&h, j->dk, kb);
        fnv1a(&h, j->dv, kb);
    }
    return h;
}

/* Fill r's timings and statistics from the per-iteration times tf / tb [warmup + iters] and
 * the per-rank statistics st [G]; hash and check the outputs as requested. */
static int finish(struct job *j, struct job_result *r, const double *tf, const double *tb,
                  int iters_done, const struct job_rank_stats *st)
{
    const struct job_params *p = j->p;
    r->iters_done = iters_done;
    r->fwd_s = median(tf + p->warmup, iters_done);
    r->fwd_min_s = min_of(tf + p->warmup, iters_done);
    r->fwd_max_s = max_of(tf + p->warmup, iters_done);
    if (p->run_bwd) {
        r->bwd_s = median(tb + p->warmup, iters_done);
        r->bwd_min_s = min_of(tb + p->warmup, iters_done);
        r->bwd_max_s = max_of(tb + p->warmup, iters_done);
    }
    snprintf(r->transfers, sizeof(r->transfers), "%s", st[0].transfers);
    r->head_groups = st[0].head_groups;
    r->rank_stats = malloc((size_t)p->ranks * sizeof(*r->rank_stats));
    if (r->rank_stats)
        memcpy(r->rank_stats, st, (size_t)p->ranks * sizeof(*r->rank_stats));
    for (int rk = 0; rk < p->ranks; rk++) {
        const struct burst_phase_stats *f = &st[rk].fwd, *b = &st[rk].bwd;
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
        r->compute_sum_s[0] += f->compute_s;
        r->wait_sum_s[0] += f->wait_s;
        r->total_sum_s[0] += f->total_s;
        r->compute_sum_s[1] += b->compute_s;
        r->wait_sum_s[1] += b->wait_s;
        r->total_sum_s[1] += b->total_s;
    }
    if (p->want_hash)
        r->output_hash = output_hash(j);
    if (p->check_fwd || p->check_bwd)
        job_run_check(j, r);
    return r->status;
}

void job_result_free(struct job_result *r)
{
    if (r) {
        free(r->rank_stats);
        free(r->shard_lens);
        free(r->rank_speeds);
        r->rank_stats = NULL;
        r->shard_lens = NULL;
        r->rank_speeds = NULL;
        r->shard_speeds = NULL;
    }
}

double job_overlap(const struct job_result *r, int phase)
{
    if (phase < 0 || phase > 1)
        return NAN;
    double c = r->compute_sum_s[phase], w = r->wait_sum_s[phase];
    int comm = phase ? r->msgs_bwd > 0 : r->msgs_fwd > 0;
    if (!comm || c + w <= 0)
        return NAN;
    return c / (c + w);
}

/* ---- ranks as threads ---- */

/* The ranks' backends: one name when all agree, else every rank's in rank order. */
static void backends_str(const struct job_params *p, const char *(*name_of)(const void *, int),
                         const void *arg, char *buf, size_t cap)
{
    int same = 1;
    for (int rk = 1; rk < p->ranks; rk++)
        same &= strcmp(name_of(arg, rk), name_of(arg, 0)) == 0;
    buf[0] = '\0';
    for (int rk = 0; rk < (same ? 1 : p->ranks); rk++) {
        size_t n = strlen(buf);
        snprintf(buf + n, cap - n, "%s%s", rk ? "," : "", name_of(arg, rk));
    }
}

static const char *ctx_name(const void *arg, int rank)
{
    return burst_context_backend(((struct burst_context *const *)arg)[rank]);
}

/* What a job with ranks as threads reports of its setting: backends, mode, one host. */
static void threads_result_init(const struct job_params *p, struct burst_context *const *ctxs,
                                struct job_result *r)
{
    backends_str(p, ctx_name, ctxs, r->backend, sizeof(r->backend));
    snprintf(r->rank_mode, sizeof(r->rank_mode), "threads");
    snprintf(r->fabric, sizeof(r->fabric), "none");
    r->hosts = 1;
    r->num_threads = burst_context_num_threads(ctxs[0]);
}

/* An inference job with ranks as threads (tools/job_kv.h). */
static int kv_run(const struct job_params *p, struct burst_context *const *ctxs,
                  struct job_result *r)
{
    threads_result_init(p, ctxs, r);
    job_kv_threads(p, ctxs, &r->kv);
    job_set_msg(r, r->kv.status, "%s", r->kv.message);
    return r->status;
}

/* The whole sequence's q, k, v, o (and their gradients with backward), every rank's lse and
 * the sink gradients, filled with each rank's inputs; r->caller_bytes is their size. -1 (the
 * message in r) when memory runs out; what was allocated is freed by free_tensors. */
static int alloc_tensors(struct job *j, struct job_result *r)
{
    const struct job_params *p = j->p;
    int G = p->ranks;
    uint64_t tot = 0;
    size_t qel = (size_t)p->batch * (size_t)p->seq_len * (size_t)p->q_heads * (size_t)p->head_dim;
    size_t kel = (size_t)p->batch * (size_t)p->seq_len * (size_t)p->kv_heads * (size_t)p->head_dim;
    if (!(j->q = alloc_tensor(r, qel, j->esz, &tot)) ||
        !(j->k = alloc_tensor(r, kel, j->esz, &tot)) ||
        !(j->v = alloc_tensor(r, kel, j->esz, &tot)) ||
        !(j->o = alloc_tensor(r, qel, j->esz, &tot)))
        return -1;
    if (p->run_bwd) {
        if (!(j->dout = alloc_tensor(r, qel, j->esz, &tot)) ||
            !(j->dq = alloc_tensor(r, qel, j->esz, &tot)) ||
            !(j->dk = alloc_tensor(r, kel, j->esz, &tot)) ||
            !(j->dv = alloc_tensor(r, kel, j->esz, &tot)))
            return -1;
    }
    for (int rk = 0; rk < G; rk++) {
        size_t n = (size_t)p->batch * (size_t)p->q_heads * (size_t)j->lens[rk];
        if (!(j->lse[rk] = alloc_tensor(r, n, sizeof(float), &tot)))
            return -1;
    }
    if (p->sinks && p->run_bwd &&
        !(j->dsinks = alloc_tensor(r, (size_t)G * (size_t)p->q_heads, sizeof(float), &tot)))
        return -1;
    r->caller_bytes = tot;
    for (int rk = 0; rk < G; rk++)
        job_fill_rank_inputs(j, rk);
    return 0;
}

/* Frees what alloc_tensors allocated (each pointer may be NULL). */
static void free_tensors(struct job *j)
{
    if (j->lse)
        for (int rk = 0; rk < j->p->ranks; rk++)
            free(j->lse[rk]);
    free(j->dsinks);
    free(j->q);
    free(j->k);
    free(j->v);
    free(j->o);
    free(j->dout);
    free(j->dq);
    free(j->dk);
    free(j->dv);
}

/* Runs rank_thread for every rank over j's local world and waits for them all. rr[rk] gets
 * rank rk's slice of times (total_iters forward times, then as many backward). Returns how many
 * threads started; when fewer than all, those that did are let through their barriers failed. */
static int run_rank_threads(struct job *j, pthread_t *th, struct rank_run *rr, double *times,
                            int total_iters)
{
    int G = j->p->ranks, started = 0;
    for (int rk = 0; rk < G; rk++) {
        rr[rk].j = j;
        rr[rk].rank = rk;
        rr[rk].threads = 1;
        rr[rk].progress = &rr[rk].iter_count;
        rr[rk].t_fwd = times + (size_t)2 * (size_t)rk * (size_t)total_iters;
        rr[rk].t_bwd = rr[rk].t_fwd + total_iters;
        if (pthread_create(&th[rk], NULL, rank_thread, &rr[rk]) != 0)
            break;
        started++;
    }
    if (started < G) {
        /* ranks already started wait for the others in sync_ranks; let them through failed */
        pthread_mutex_lock(&j->mu);
        j->live = started;
        j->round_flags |= FLAG_FAIL;
        if (started > 0 && j->arrived >= j->live)
            sync_release(j);
        pthread_mutex_unlock(&j->mu);
    }
    wait_ranks(rr, started, total_iters);
    for (int rk = 0; rk < started; rk++)
        pthread_join(th[rk], NULL);
    return started;
}

int job_run(const struct job_params *p, struct burst_context *const *ctxs, struct job_result *r)
{
    memset(r, 0, sizeof(*r));
    if (p->kv_decode > 0)
        return kv_run(p, ctxs, r);
    struct job j;
    memset(&j, 0, sizeof(j));
    j.p = p;
    j.ctxs = ctxs;
    threads_result_init(p, ctxs, r);
    int G = p->ranks;
    int total_iters = p->warmup + p->iters;
    pthread_t *th = NULL;
    struct rank_run *rr = NULL;
    struct job_rank_stats *st = NULL;
    double *times = NULL;

    pthread_mutex_init(&j.mu, NULL);
    pthread_cond_init(&j.cv, NULL);
    j.live = G;

    th = calloc((size_t)G, sizeof(*th));
    rr = calloc((size_t)G, sizeof(*rr));
    st = calloc((size_t)G, sizeof(*st));
    times = calloc((size_t)total_iters * 2 * (size_t)G, sizeof(double));
    r->shard_lens = calloc((size_t)G, sizeof(int64_t));
    if (!th || !rr || !st || !times || !r->shard_lens) {
        job_set_msg(r, JOB_EFAIL, "out of memory");
        goto out;
    }
    if (p->weights_mode == JOB_WEIGHTS_MEASURED) {
        r->rank_speeds = calloc(2 * (size_t)G, sizeof(double));
        if (!r->rank_speeds) {
            job_set_msg(r, JOB_EFAIL, "out of memory");
            goto out;
        }
        r->shard_speeds = r->rank_speeds + G;
        if (job_measure_threads(p, ctxs, r->shard_lens, r->rank_speeds, r) != 0)
            goto out;
        j.lens_in = r->shard_lens;
    }
    if (job_geometry(&j, r) != 0)
        goto out;
    memcpy(r->shard_lens, j.lens, sizeof(int64_t) * (size_t)G);
    if (alloc_tensors(&j, r) != 0)
        goto out;

    burst_status_t bst = burst_local_world_create(G, &j.world);
    if (bst != BURST_OK) {
        job_set_msg(r, JOB_EFAIL, "burst_local_world_create(%d) failed: %s: %s", G,
                    burst_status_str(bst), burst_last_error());
        goto out;
    }
    if (run_rank_threads(&j, th, rr, times, total_iters) < G) {
        job_set_msg(r, JOB_EFAIL, "could not start %d rank threads", G);
        goto out;
    }
    /* the first rank with a failure of its own, else the first echo */
    for (int pass = 0; pass < 2 && !r->status; pass++)
        for (int rk = 0; rk < G && !r->status; rk++)
            if (rr[rk].status && (pass || !rr[rk].secondary))
                job_set_msg(r, rr[rk].status, "%s", rr[rk].msg);
    if (r->status)
        goto out;

    r->peak_rss = job_peak_rss();
    r->bwd_used = rr[0].bwd_used;
    if (rr[0].wall_s > 0 && r->num_threads > 0)
        r->cpu_share = rr[0].cpu_s / (rr[0].wall_s * r->num_threads);
    for (int rk = 0; rk < G; rk++)
        st[rk] = rr[rk].st;
    /* rank 0's times span the barriers after each call: the whole ring's time */
    finish(&j, r, rr[0].t_fwd, rr[0].t_bwd, rr[0].iters_done, st);

out:
    free(th);
    free(rr);
    free(st);
    free(times);
    burst_local_world_destroy(j.world);
    free_tensors(&j);
    job_geometry_free(&j);
    pthread_cond_destroy(&j.cv);
    pthread_mutex_destroy(&j.mu);
    return r->status;
}

/* ---- ranks as processes: the arena ---- */

static uint64_t align64(uint64_t x)
{
    return (x + 63u) & ~(uint64_t)63u;
}

uint64_t job_arena_layout(const struct job_params *p, struct job_arena_hdr *h, char *msg,
                          size_t cap)
{
    memset(h, 0, sizeof(*h));
    h->magic = JOB_ARENA_MAGIC;
    h->version = JOB_ARENA_VERSION;
    h->p = *p;
    h->kill.rank = -1;
    size_t esz = burst_dtype_size(p->dtype);
    if (!esz) {
        snprintf(msg, cap, "bad dtype %d", (int)p->dtype);
        return 0;
    }
    if (!job_tensor_bytes(p, msg, cap))
        return 0; /* below its bound every product and sum here fits 64 bits */
    uint64_t G = (uint64_t)p->ranks, total = (uint64_t)(p->warmup + p->iters);
    uint64_t qb = (uint64_t)p->batch * (uint64_t)p->seq_len * (uint64_t)p->q_heads *
                  (uint64_t)p->head_dim * esz;
    uint64_t kb = qb / (uint64_t)p->q_heads * (uint64_t)p->kv_heads;
    uint64_t lb = (uint64_t)p->batch * (uint64_t)p->q_heads * (uint64_t)p->seq_len * 4u;
    uint64_t bw = p->run_bwd ? 1 : 0;
    uint64_t off = align64(sizeof(*h));
    h->off_slots = off;
    off = align64(off + G * sizeof(struct job_slot));
    h->off_times = off;
    off = align64(off + G * 2 * total * sizeof(double));
    h->off_q = off;
    off = align64(off + qb);
    h->off_k = off;
    off = align64(off + kb);
    h->off_v = off;
    off = align64(off + kb);
    h->off_o = off;
    off = align64(off + qb);
    h->off_lse = off;
    off = align64(off + lb);
    h->off_dout = off;
    off = align64(off + bw * qb);
    h->off_dq = off;
    off = align64(off + bw * qb);
    h->off_dk = off;
    off = align64(off + bw * kb);
    h->off_dv = off;
    off = align64(off + bw * kb);
    h->off_lens = off;
    off = align64(off + G * sizeof(int64_t));
    h->off_dsinks = off; /* --sinks: [G][Hq] fp32 */
    off = align64(off + (p->sinks ? bw * G * (uint64_t)p->q_heads * 4u : 0));
    h->bytes = off;
    return off;
}

struct job_slot *job_arena_slots(void *arena)
{
    const struct job_arena_hdr *h = arena;
    return (struct job_slot *)((char *)arena + h->off_slots);
}

double *job_arena_times(void *arena, int rank)
{
    const struct job_arena_hdr *h = arena;
    uint64_t total = (uint64_t)(h->p.warmup + h->p.iters);
    return (double *)((char *)arena + h->off_times) + (uint64_t)rank * 2 * total;
}

/* Point j's tensors into the arena (geometry already computed). */
static void arena_attach(struct job *j, void *arena)
{
    const struct job_arena_hdr *h = arena;
    char *a = arena;
    const struct job_params *p = j->p;
    j->q = a + h->off_q;
    j->k = a + h->off_k;
    j->v = a + h->off_v;
    j->o = a + h->off_o;
    if (p->run_bwd) {
        j->dout = a + h->off_dout;
        j->dq = a + h->off_dq;
        j->dk = a + h->off_dk;
        j->dv = a + h->off_dv;
    }
    for (int rk = 0; rk < p->ranks; rk++)
        j->lse[rk] =
            (float *)(a + h->off_lse) + (size_t)p->batch * (size_t)p->q_heads * (size_t)j->offs[rk];
    j->dsinks = p->sinks && p->run_bwd ? (float *)(void *)(a + h->off_dsinks) : NULL;
}

static const struct burst_comm_params *g_worker_comm; /* job_worker_comm_params */

void job_worker_comm_params(const struct burst_comm_params *p)
{
    g_worker_comm = p;
}

/* burst_comm_create_env for a rank process of burstrun. Such a process dies with the launcher
 * (PR_SET_PDEATHSIG, tools/launch.c), except while it joins: its shm segment exists from the
 * creation of its endpoint until every rank has connected, and a rank killed then would leave
 * it in /dev/shm. A launcher killed during the join closes the rendezvous instead, which ends
 * the join at once (BURST_ERR_PEER_FAILED or a transport error) through the path that removes
 * the segment. Joined, the segment is unlinked and the rank dies with the launcher again; if
 * the launcher is already gone then, *comm_p is destroyed and NULL with BURST_OK. */
static burst_status_t join_outliving_launcher(struct burst_comm **comm_p)
{
    const pid_t launcher = getppid();
    prctl(PR_SET_PDEATHSIG, 0);
    burst_status_t st = burst_comm_create_env(comm_p);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != launcher) {
        if (st == BURST_OK)
            burst_comm_destroy(*comm_p);
        *comm_p = NULL;
        return BURST_OK;
    }
    return st;
}

/* --weights auto in a rank process: the shard lengths measured now (every rank gets the same),
 * left in j->lens_in and, by rank 0, in the arena. JOB_OK, or the rank's exit status with the
 * slot's message set. */
static int worker_measured_lens(const struct job_arena_hdr *h, int rank, struct burst_comm *comm,
                                struct job *j, struct job_slot *slot, int64_t *arena_lens)
{
    const int G = h->p.ranks;
    int64_t *lens = calloc((size_t)G, sizeof(int64_t));
    double *speeds = calloc(2 * (size_t)G, sizeof(double));
    burst_status_t st = lens && speeds ? job_measure_lens(&h->p, rank, comm, j->ctx, lens, speeds,
                                                          slot->message, sizeof(slot->message))
                                       : BURST_ERR_NO_MEMORY;
    if (st == BURST_OK && rank == 0) {
        memcpy(arena_lens, lens, sizeof(int64_t) * (size_t)G);
        __atomic_store_n(&slot->lens_set, 1, __ATOMIC_RELEASE);
    }
    if (st == BURST_OK) {
        slot->speed = speeds[rank];
        slot->shard_speed = speeds[G + rank];
    }
    j->lens_in = lens;
    free(speeds);
    if (st == BURST_OK)
        return JOB_OK;
    slot->secondary = st == BURST_ERR_PEER_FAILED || st == BURST_ERR_COMM_FAILED;
    return slot->secondary ? JOB_EPEER : JOB_EFAIL;
}

int job_worker_main(int fd)
{
    struct stat sb;
    if (fstat(fd, &sb) != 0 || (size_t)sb.st_size < sizeof(struct job_arena_hdr)) {
        fprintf(stderr, "rank worker: fd %d is not a job arena\n", fd);
        return JOB_EFAIL;
    }
    size_t bytes = (size_t)sb.st_size;
    void *arena = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (arena == MAP_FAILED) {
        fprintf(stderr, "rank worker: mmap of the arena failed: %s\n", strerror(errno));
        return JOB_EFAIL;
    }
    const struct job_arena_hdr *h = arena;
    long lrank = -1; /* BURST_RANK unset: refused below */
    if (burst_setting_long("BURST_RANK", &lrank) != BURST_OK) {
        fprintf(stderr, "rank worker: %s\n", burst_last_error());
        munmap(arena, bytes);
        return JOB_EFAIL;
    }
    int rank = (int)lrank;
    if (h->magic != JOB_ARENA_MAGIC || h->version != JOB_ARENA_VERSION || h->bytes != bytes ||
        rank < 0 || rank >= h->p.ranks) {
        char rs[24] = "(unset)";
        if (rank >= 0)
            snprintf(rs, sizeof rs, "%d", rank);
        fprintf(stderr, "rank worker: bad arena or BURST_RANK=%s\n", rs);
        munmap(arena, bytes);
        return JOB_EFAIL;
    }
    struct job_slot *slot = job_arena_slots(arena) + rank;
    double *times = job_arena_times(arena, rank);
    struct job j;
    memset(&j, 0, sizeof(j));
    j.p = &h->p;
    struct job_result *tmp = calloc(1, sizeof(*tmp));
    struct rank_run *rr = calloc(1, sizeof(*rr));
    struct burst_comm *comm = NULL;
    int rc = JOB_EFAIL;
    if (!tmp || !rr) {
        snprintf(slot->message, sizeof(slot->message), "rank %d: out of memory", rank);
        goto out;
    }
    char be[64], nt[16], dv[64];
    job_list_entry(h->backend, rank, be, sizeof(be));
    job_list_entry(h->num_threads, rank, nt, sizeof(nt));
    job_list_entry(h->device, rank, dv, sizeof(dv));
    struct burst_context_params cp = burst_context_params_default();
    cp.backend = be;
    cp.num_threads = atoi(nt);
    if (dv[0])
        cp.device = dv;
    burst_status_t st = burst_context_create(&cp, &j.ctx);
    if (st != BURST_OK) {
        snprintf(slot->message, sizeof(slot->message),
                 "rank %d: backend \"%s\" (--backend%s %.100s): %s: %.300s", rank, be,
                 job_list_count(h->backend) > 1 ? "s" : "", h->backend, burst_status_str(st),
                 burst_last_error());
        rc = st == BURST_ERR_INVALID_ARG ? JOB_EUSAGE : JOB_EFAIL;
        goto out;
    }
    snprintf(slot->backend, sizeof(slot->backend), "%s", burst_context_backend(j.ctx));
    slot->num_threads = burst_context_num_threads(j.ctx);
    if (g_worker_comm) {
        st = burst_comm_create(g_worker_comm, &comm);
    } else {
        st = join_outliving_launcher(&comm);
        if (st == BURST_OK && !comm)
            goto out; /* the launcher died while this rank joined */
    }
    if (st != BURST_OK) {
        rr->rank = rank;
        rank_fail(rr, g_worker_comm ? "burst_comm_create" : "burst_comm_create_env", st);
        snprintf(slot->message, sizeof(slot->message), "%s", rr->msg);
        slot->secondary = rr->secondary;
        rc = st == BURST_ERR_UNSUPPORTED ? JOB_EUSAGE : rr->secondary ? JOB_EPEER : JOB_EFAIL;
        goto out;
    }
    snprintf(slot->fabric, sizeof(slot->fabric), "%s", burst_comm_fabric(comm));
    slot->hosts = burst_comm_hosts(comm);
    if (h->p.kv_decode > 0) { /* an inference job (tools/job_kv.h) */
        rc = job_kv_rank(&h->p, j.ctx, comm, rank, &slot->kv);
        snprintf(slot->message, sizeof(slot->message), "%s", slot->kv.message);
        slot->secondary = slot->kv.secondary;
        rc = rc == JOB_OK ? JOB_OK : slot->secondary ? JOB_EPEER : rc;
        goto out;
    }

    /* the shards: measured now (every rank gets the same lengths), or from the parameters */
    int64_t *arena_lens = (int64_t *)(void *)((char *)arena + h->off_lens);
    if (h->p.weights_mode == JOB_WEIGHTS_MEASURED &&
        (rc = worker_measured_lens(h, rank, comm, &j, slot, arena_lens)) != JOB_OK)
        goto out;
    rc = JOB_EFAIL;
    int geo = job_geometry(&j, tmp);
    free((void *)j.lens_in);
    j.lens_in = NULL;
    if (geo != 0) {
        snprintf(slot->message, sizeof(slot->message), "rank %d: %.480s", rank, tmp->message);
        rc = tmp->status;
        goto out;
    }
    if (rank == 0 && h->p.weights_mode != JOB_WEIGHTS_MEASURED)
        memcpy(arena_lens, j.lens, sizeof(int64_t) * (size_t)h->p.ranks);
    arena_attach(&j, arena);
    job_fill_rank_inputs(&j, rank);

    rr->j = &j;
    rr->rank = rank;
    rr->comm = comm;
    rr->kill = &h->kill;
    rr->progress = &slot->iter;
    rr->t_fwd = times;
    rr->t_bwd = times + (h->p.warmup + h->p.iters);
    rank_loop(rr);
    slot->bwd_used = (int)rr->bwd_used;
    slot->iters_done = rr->iters_done;
    slot->wall_s = rr->wall_s;
    slot->cpu_s = rr->cpu_s;
    slot->peak_rss = job_peak_rss();
    slot->st = rr->st;
    slot->secondary = rr->secondary;
    snprintf(slot->message, sizeof(slot->message), "%s", rr->msg);
    rc = rr->status == JOB_OK ? JOB_OK : rr->secondary ? JOB_EPEER : rr->status;
out: /* the message is the launcher's to print, once for the job (launch.c, job_arena_collect) */
    slot->status = rc == JOB_EPEER ? JOB_EFAIL : rc;
    burst_comm_destroy(comm);
    burst_context_destroy(j.ctx);
    __atomic_store_n(&slot->done, 1, __ATOMIC_RELEASE);
    job_geometry_free(&j);
    free(tmp);
    free(rr);
    munmap(arena, bytes);
    return rc;
}

static const char *slot_name(const void *arg, int rank)
{
    return ((const struct job_slot *)arg)[rank].backend;
}

int job_arena_collect(void *arena, struct job_result *r)
{
    const struct job_arena_hdr *h = arena;
    const struct job_params *p = &h->p;
    struct job_slot *slots = job_arena_slots(arena);
    memset(r, 0, sizeof(*r));
    int G = p->ranks, total = p->warmup + p->iters;
    struct job j;
    memset(&j, 0, sizeof(j));
    j.p = p;
    double *tf = calloc((size_t)total, sizeof(double)), *tb = calloc((size_t)total, sizeof(double));
    struct job_rank_stats *st = calloc((size_t)G, sizeof(*st));
    if (!tf || !tb || !st) {
        job_set_msg(r, JOB_EFAIL, "out of memory");
        goto out;
    }
    /* the first rank with a failure of its own, else the first that did not finish */
    for (int pass = 0; pass < 2 && !r->status; pass++)
        for (int rk = 0; rk < G && !r->status; rk++)
            if ((!__atomic_load_n(&slots[rk].done, __ATOMIC_ACQUIRE) ||
                 slots[rk].status != JOB_OK) &&
                (pass || !slots[rk].secondary))
                job_set_msg(r, JOB_EFAIL, "rank %d did not finish: %s", rk,
                            slots[rk].message[0] ? slots[rk].message : "(no message)");
    if (r->status)
        goto out;
    if (p->kv_decode > 0) { /* an inference job: rank 0's measurements */
        r->kv = slots[0].kv;
        backends_str(p, slot_name, slots, r->backend, sizeof(r->backend));
        snprintf(r->rank_mode, sizeof(r->rank_mode), "processes");
        snprintf(r->fabric, sizeof(r->fabric), "%s", slots[0].fabric);
        r->hosts = slots[0].hosts;
        r->num_threads = slots[0].num_threads;
        goto out;
    }
    r->shard_lens = calloc((size_t)G, sizeof(int64_t));
    if (!r->shard_lens) {
        job_set_msg(r, JOB_EFAIL, "out of memory");
        goto out;
    }
    j.lens_in = (const int64_t *)(const void *)((const char *)arena + h->off_lens);
    if (job_geometry(&j, r) != 0)
        goto out;
    memcpy(r->shard_lens, j.lens, sizeof(int64_t) * (size_t)G);
    if (p->weights_mode == JOB_WEIGHTS_MEASURED) {
        r->rank_speeds = calloc(2 * (size_t)G, sizeof(double));
        r->shard_speeds = r->rank_speeds ? r->rank_speeds + G : NULL;
        for (int rk = 0; r->rank_speeds && rk < G; rk++) {
            r->rank_speeds[rk] = slots[rk].speed;
            r->shard_speeds[rk] = slots[rk].shard_speed;
        }
    }
    arena_attach(&j, arena);
    backends_str(p, slot_name, slots, r->backend, sizeof(r->backend));
    snprintf(r->rank_mode, sizeof(r->rank_mode), "processes");
    snprintf(r->fabric, sizeof(r->fabric), "%s", slots[0].fabric);
    r->hosts = slots[0].hosts;
    r->num_threads = slots[0].num_threads;
    r->bwd_used = (burst_bwd_pattern_t)slots[0].bwd_used;
    /* an iteration's time is the slowest rank's call: ranks start their calls at different
     * moments (there is no barrier between processes), the ring ends when the last one does */
    int iters = total;
    double cpu = 0.0, wall = 0.0;
    int threads = 0;
    for (int rk = 0; rk < G; rk++) {
        const double *t = job_arena_times(arena, rk);
        for (int it = 0; it < total; it++) {
            tf[it] = t[it] > tf[it] ? t[it] : tf[it];
            tb[it] = t[total + it] > tb[it] ? t[total + it] : tb[it];
        }
        iters = slots[rk].iters_done < iters ? slots[rk].iters_done : iters;
        cpu += slots[rk].cpu_s;
        wall = slots[rk].wall_s > wall ? slots[rk].wall_s : wall;
        threads += slots[rk].num_threads;
        r->peak_rss = slots[rk].peak_rss > r->peak_rss ? slots[rk].peak_rss : r->peak_rss;
        st[rk] = slots[rk].st;
    }
    if (wall > 0 && threads > 0)
        r->cpu_share = cpu / (wall * threads);
    r->caller_bytes = h->bytes - h->off_q;
    finish(&j, r, tf, tb, iters, st);
out:
    free(tf);
    free(tb);
    free(st);
    job_geometry_free(&j);
    return r->status;
}
