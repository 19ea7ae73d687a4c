/* tools/job_check.c - the check of a job's outputs against the fp64 reference (tools/ref.h):
 * sampled or whole rows of O and lse, and dQ, dK, dV, on worker threads; with --sinks the sinks'
 * gradient of every rank, with --softcap the capped scores. */
#include "job_internal.h"
#include "job_size.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ref.h"

/* ---- check against the fp64 reference ---- */

struct check_ctx {
    struct job *j;
    const int64_t *rows; /* sampled natural positions (forward only), or NULL = all rows */
    int64_t nrows;
    int do_bwd;
    int nunits; /* B * Hkv */
    int next;
    pthread_mutex_t mu;
    struct job_err err[JOB_NTENSORS];
    int failed_alloc;
    /* --sinks with the backward: per (batch, query head) the reference gradient of the sinks and
     * the same sum over the magnitudes of its terms, exp(sink - lse) |D| ([B][Hq] each) */
    float sinks[JOB_MAX_SINKS];
    double *ds_ref, *ds_terms;
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
    dst->max_terms = src->max_terms > dst->max_terms ? src->max_terms : dst->max_terms;
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
    return job_load_elem(base, p->dtype, i);
}

/* The gradients of one sub-problem (one kv head, gs query heads, natural order, as check_unit
 * lays them out) with every term replaced by its magnitude: dS_ij = P_ij (dP_ij - D_i) becomes
 * P_ij (|dP_ij| + |D_i|). Their largest elements go to err[JOB_DQ .. JOB_DV].max_terms. */
struct terms_in {
    const struct ref_problem *rp;
    const double *q, *k, *v, *dout, *o, *lse; /* lse [gs, n] */
};

/* The document of position i: positions [*beg, *end) (the whole sequence without documents). */
static void doc_range(const struct ref_problem *rp, int64_t i, int64_t *beg, int64_t *end)
{
    *beg = 0;
    *end = rp->seq_len;
    for (int64_t t = 0, at = 0; rp->doc_lens && rp->num_docs > 1 && t < rp->num_docs; t++) {
        if (i < at + rp->doc_lens[t]) {
            *beg = at;
            *end = at + rp->doc_lens[t];
            return;
        }
        at += rp->doc_lens[t];
    }
}

/* Is key j allowed for query i, whose document is [db, de)? */
static int pair_allowed(const struct ref_problem *rp, int64_t i, int64_t j, int64_t db, int64_t de)
{
    return j >= db && j < de && (rp->window_left < 0 || j >= i - rp->window_left) &&
           (rp->window_right < 0 || j <= i + rp->window_right) && (!rp->causal || j <= i);
}

static double dot_d(const double *a, const double *b, int d)
{
    double s = 0.0;
    for (int e = 0; e < d; e++)
        s += a[e] * b[e];
    return s;
}

static void grad_terms_row(const struct terms_in *in, int64_t i, int hh, double *tk, double *tv,
                           double *tq_row)
{
    const struct ref_problem *rp = in->rp;
    int64_t n = rp->seq_len;
    int gs = rp->q_heads, d = rp->head_dim;
    size_t at = ((size_t)i * gs + hh) * d;
    double lse = in->lse[(size_t)hh * n + i], dd = fabs(dot_d(in->dout + at, in->o + at, d));
    int64_t db, de;
    doc_range(rp, i, &db, &de);
    for (int64_t j = 0; j < n; j++) {
        if (!pair_allowed(rp, i, j, db, de))
            continue;
        const double *kj = in->k + (size_t)j * d, *vj = in->v + (size_t)j * d;
        double s = rp->scale * dot_d(in->q + at, kj, d);
        if (rp->softcap > 0.0)
            s = rp->softcap * tanh(s / rp->softcap);
        double pij = exp(s - lse);
        double w = rp->scale * pij * (fabs(dot_d(in->dout + at, vj, d)) + dd);
        for (int e = 0; e < d; e++) {
            tq_row[e] += w * fabs(kj[e]);
            tk[(size_t)j * d + e] += w * fabs(in->q[at + e]);
            tv[(size_t)j * d + e] += pij * fabs(in->dout[at + e]);
        }
    }
}

static double max_of(const double *x, size_t m)
{
    double r = 0.0;
    for (size_t i = 0; i < m; i++)
        r = x[i] > r ? x[i] : r;
    return r;
}

static int grad_terms(const struct terms_in *in, struct job_err *err)
{
    int64_t n = in->rp->seq_len;
    int gs = in->rp->q_heads, d = in->rp->head_dim;
    double *tk = calloc((size_t)n * d, sizeof(double)), *tv = calloc((size_t)n * d, sizeof(double));
    double *tq = calloc((size_t)d, sizeof(double));
    if (!tk || !tv || !tq) {
        free(tk);
        free(tv);
        free(tq);
        return -1;
    }
    for (int64_t i = 0; i < n; i++)
        for (int hh = 0; hh < gs; hh++) {
            memset(tq, 0, (size_t)d * sizeof(double));
            grad_terms_row(in, i, hh, tk, tv, tq);
            double m = max_of(tq, (size_t)d);
            err[JOB_DQ].max_terms = m > err[JOB_DQ].max_terms ? m : err[JOB_DQ].max_terms;
        }
    double mk = max_of(tk, (size_t)n * d), mv = max_of(tv, (size_t)n * d);
    err[JOB_DK].max_terms = mk > err[JOB_DK].max_terms ? mk : err[JOB_DK].max_terms;
    err[JOB_DV].max_terms = mv > err[JOB_DV].max_terms ? mv : err[JOB_DV].max_terms;
    free(tk);
    free(tv);
    free(tq);
    return 0;
}

/* One unit: batch b, kv head g with its group of Hq/Hkv query heads, as a sub-problem. */
static int check_unit(struct check_ctx *c, int unit, struct job_err *err)
{
    const struct job *j = c->j;
    const struct job_params *p = j->p;
    int gs = p->q_heads / p->kv_heads;
    int d = p->head_dim;
    int64_t n = p->seq_len, b = unit / p->kv_heads;
    int g = unit % p->kv_heads;
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
        .doc_lens = p->num_docs > 0 ? p->doc_lens : NULL,
        .num_docs = p->num_docs,
        .softcap = p->softcap,
    };
    double sk[JOB_MAX_SINKS]; /* the unit's query heads' sinks */
    for (int hh = 0; p->sinks && hh < gs; hh++)
        sk[hh] = c->sinks[g * gs + hh];
    rp.sinks = p->sinks ? sk : NULL;
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
        double dsk[JOB_MAX_SINKS]; /* gs <= JOB_MAX_SINKS where the job has sinks */
        ref_backward_sinks(&rp, qd, kd, vd, dod, dqd, dkd, dvd, p->sinks ? dsk : NULL);
        for (int hh = 0; p->sinks && hh < gs; hh++) { /* this unit's slots: no other writes them */
            double t = 0.0;
            for (int64_t i = 0; i < n; i++) {
                size_t at = ((size_t)i * gs + hh) * d;
                t += exp(sk[hh] - lsed[(size_t)hh * n + i]) * fabs(dot_d(dod + at, od + at, d));
            }
            c->ds_ref[b * p->q_heads + g * gs + hh] = dsk[hh];
            c->ds_terms[b * p->q_heads + g * gs + hh] = t;
        }
        struct terms_in tin = {&rp, qd, kd, vd, dod, od, lsed};
        if (grad_terms(&tin, err) != 0)
            goto done;
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
        if (t >= c->nunits)
            break;
        if (check_unit(c, t, err) != 0)
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
    for (int rk = 0; rk < p->ranks && extra; rk++) { /* the plan's shards (j->nat) */
        rows[m++] = j->nat[j->offs[rk]];
        rows[m++] = j->nat[j->offs[rk] + j->lens[rk] - 1];
    }
    qsort(rows, (size_t)m, sizeof(*rows), cmp_i64);
    int64_t u = 0;
    for (int64_t i = 0; i < m; i++)
        if (u == 0 || rows[u - 1] != rows[i])
            rows[u++] = rows[i];
    *nrows_p = u;
    return rows;
}

int job_run_check(struct job *j, struct job_result *r)
{
    const struct job_params *p = j->p;
    struct check_ctx c;
    memset(&c, 0, sizeof(c));
    c.j = j;
    c.do_bwd = p->check_bwd && p->run_bwd;
    c.nunits = (int)p->batch * p->kv_heads;
    if (p->check_fwd < 2 && !c.do_bwd) {
        int64_t *rows = sample_rows(j, &c.nrows);
        if (!rows) {
            job_set_msg(r, JOB_EFAIL, "out of memory for the check");
            return -1;
        }
        c.rows = rows;
    }
    if (p->sinks)
        job_sinks(p, c.sinks);
    if (c.do_bwd && p->sinks && j->dsinks) {
        c.ds_ref = calloc((size_t)p->batch * (size_t)p->q_heads, sizeof(double));
        c.ds_terms = calloc((size_t)p->batch * (size_t)p->q_heads, sizeof(double));
        if (!c.ds_ref || !c.ds_terms) {
            free(c.ds_ref);
            free(c.ds_terms);
            free((void *)c.rows);
            job_set_msg(r, JOB_EFAIL, "out of memory for the check");
            return -1;
        }
    }
    pthread_mutex_init(&c.mu, NULL);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nw = (int)(ncpu > 0 ? ncpu : 1);
    if (nw > c.nunits)
        nw = c.nunits;
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
        free(c.ds_ref);
        free(c.ds_terms);
        job_set_msg(r, JOB_EFAIL, "out of memory for the fp64 reference");
        return -1;
    }
    if (c.ds_ref) /* the sinks' gradient: summed over the batch, against every rank's */
        for (int h = 0; h < p->q_heads; h++) {
            double want = 0.0, terms = 0.0;
            for (int64_t b = 0; b < p->batch; b++) {
                want += c.ds_ref[b * p->q_heads + h];
                terms += c.ds_terms[b * p->q_heads + h];
            }
            if (terms > c.err[JOB_DSINKS].max_terms)
                c.err[JOB_DSINKS].max_terms = terms;
            for (int rk = 0; rk < p->ranks; rk++)
                err_add(&c.err[JOB_DSINKS], j->dsinks[(size_t)rk * (size_t)p->q_heads + h], want);
        }
    free(c.ds_ref);
    free(c.ds_terms);
    memcpy(r->err, c.err, sizeof(r->err));
    r->checked_fwd_rows = (int)(c.rows ? c.nrows : p->seq_len);
    r->checked_bwd = c.do_bwd;
    return 0;
}
