/*
 * tools/ref.c - plain fp64 reference attention (see ref.h). Deliberately naive: every score is
 * recomputed with a dot product in double precision, no tiling, no online softmax.
 *
 * Allocation failure (score buffer, backward scratch) cannot be reported through the void API,
 * so the outputs are filled with NaN instead: every comparison against them then fails loudly.
 */
#include "ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int64_t *ref_doc_ids(const struct ref_problem *p)
{
    if (!p->doc_lens || p->num_docs <= 1)
        return NULL;
    int64_t *id = malloc((size_t)(p->seq_len > 0 ? p->seq_len : 1) * sizeof *id);
    if (!id)
        return NULL;
    int64_t pos = 0;
    for (int64_t t = 0; t < p->num_docs; t++)
        for (int64_t r = 0; r < p->doc_lens[t] && pos < p->seq_len; r++)
            id[pos++] = t;
    while (pos < p->seq_len) /* lengths that fall short: the rest is one more document */
        id[pos++] = p->num_docs;
    return id;
}

static int ref_docs_failed(const struct ref_problem *p, const int64_t *doc)
{
    return p->doc_lens && p->num_docs > 1 && !doc;
}

int ref_allowed(const struct ref_problem *p, const int64_t *doc, int64_t i, int64_t j)
{
    if (doc && doc[i] != doc[j])
        return 0;
    if (p->window_left >= 0 && j < i - p->window_left)
        return 0;
    if (p->window_right >= 0 && j > i + p->window_right)
        return 0;
    if (p->causal && j > i)
        return 0;
    return 1;
}

static void ref_fill_nan(double *x, size_t count)
{
    for (size_t i = 0; i < count; i++)
        x[i] = NAN;
}

static double ref_dot(const double *a, const double *b, int d)
{
    double s = 0.0;
    for (int c = 0; c < d; c++)
        s += a[c] * b[c];
    return s;
}

/* The score of a pair: scale q.k, soft-capped when p->softcap > 0. */
static double ref_score(const struct ref_problem *p, const double *qi, const double *kj)
{
    double s = p->scale * ref_dot(qi, kj, p->head_dim);
    return p->softcap > 0.0 ? p->softcap * tanh(s / p->softcap) : s;
}

/* d score / d (scale q.k) at a capped score s: 1 - tanh^2. */
static double ref_cap_slope(const struct ref_problem *p, double s)
{
    if (p->softcap <= 0.0)
        return 1.0;
    double t = s / p->softcap;
    return 1.0 - t * t;
}

void ref_forward_rows(const struct ref_problem *p, const double *q, const double *k,
                      const double *v, const int64_t *rows, int64_t nrows, double *o_rows,
                      double *lse_rows)
{
    const int64_t N = p->seq_len;
    const int Hq = p->q_heads, Hkv = p->kv_heads, d = p->head_dim;
    const int group = Hq / Hkv;
    double *s = malloc((size_t)(N > 0 ? N : 1) * sizeof *s);
    int64_t *doc = ref_doc_ids(p);
    if (!s || ref_docs_failed(p, doc)) {
        free(s);
        ref_fill_nan(o_rows, (size_t)(p->batch * nrows * Hq * d));
        ref_fill_nan(lse_rows, (size_t)(p->batch * Hq * nrows));
        return;
    }
    for (int64_t b = 0; b < p->batch; b++) {
        for (int64_t r = 0; r < nrows; r++) {
            const int64_t i = rows[r];
            for (int h = 0; h < Hq; h++) {
                const int hk = h / group;
                const double *qi = q + ((b * N + i) * Hq + h) * d;
                double *oi = o_rows + ((b * nrows + r) * Hq + h) * d;
                double *lse = lse_rows + (b * Hq + h) * nrows + r;
                const double sink = p->sinks ? p->sinks[h] : -INFINITY;
                double m = sink;
                for (int64_t j = 0; j < N; j++) {
                    if (!ref_allowed(p, doc, i, j))
                        continue;
                    s[j] = ref_score(p, qi, k + ((b * N + j) * Hkv + hk) * d);
                    if (s[j] > m)
                        m = s[j];
                }
                for (int c = 0; c < d; c++)
                    oi[c] = 0.0;
                if (m == -INFINITY) { /* no allowed key and no sink: empty row */
                    *lse = -INFINITY;
                    continue;
                }
                double sum = p->sinks ? exp(sink - m) : 0.0;
                for (int64_t j = 0; j < N; j++)
                    if (ref_allowed(p, doc, i, j))
                        sum += exp(s[j] - m);
                const double l = m + log(sum);
                for (int64_t j = 0; j < N; j++) {
                    if (!ref_allowed(p, doc, i, j))
                        continue;
                    const double pj = exp(s[j] - l);
                    const double *vj = v + ((b * N + j) * Hkv + hk) * d;
                    for (int c = 0; c < d; c++)
                        oi[c] += pj * vj[c];
                }
                *lse = l;
            }
        }
    }
    free(s);
    free(doc);
}

void ref_forward(const struct ref_problem *p, const double *q, const double *k, const double *v,
                 double *o, double *lse)
{
    const int64_t N = p->seq_len;
    int64_t *rows = malloc((size_t)(N > 0 ? N : 1) * sizeof *rows);
    if (!rows) {
        ref_fill_nan(o, (size_t)(p->batch * N * p->q_heads * p->head_dim));
        ref_fill_nan(lse, (size_t)(p->batch * p->q_heads * N));
        return;
    }
    for (int64_t i = 0; i < N; i++)
        rows[i] = i;
    ref_forward_rows(p, q, k, v, rows, N, o, lse);
    free(rows);
}

void ref_backward(const struct ref_problem *p, const double *q, const double *k, const double *v,
                  const double *dout, double *dq, double *dk, double *dv)
{
    ref_backward_sinks(p, q, k, v, dout, dq, dk, dv, NULL);
}

void ref_backward_sinks(const struct ref_problem *p, const double *q, const double *k,
                        const double *v, const double *dout, double *dq, double *dk, double *dv,
                        double *dsinks)
{
    const int64_t B = p->batch, N = p->seq_len;
    const int Hq = p->q_heads, Hkv = p->kv_heads, d = p->head_dim;
    const int group = Hq / Hkv;
    const size_t nq = (size_t)(B * N * Hq * d), nkv = (size_t)(B * N * Hkv * d);
    double *o = malloc(nq * sizeof *o);
    double *lse = malloc((size_t)(B * Hq * N) * sizeof *lse);
    int64_t *doc = ref_doc_ids(p);
    if (!o || !lse || ref_docs_failed(p, doc)) {
        free(o);
        free(lse);
        ref_fill_nan(dq, nq);
        ref_fill_nan(dk, nkv);
        ref_fill_nan(dv, nkv);
        if (dsinks)
            ref_fill_nan(dsinks, (size_t)Hq);
        return;
    }
    ref_forward(p, q, k, v, o, lse);
    memset(dq, 0, nq * sizeof *dq);
    memset(dk, 0, nkv * sizeof *dk);
    memset(dv, 0, nkv * sizeof *dv);
    if (dsinks)
        memset(dsinks, 0, (size_t)Hq * sizeof *dsinks);
    for (int64_t b = 0; b < B; b++) {
        for (int h = 0; h < Hq; h++) {
            const int hk = h / group;
            for (int64_t i = 0; i < N; i++) {
                const double l = lse[(b * Hq + h) * N + i];
                if (l == -INFINITY)
                    continue; /* empty row: zero gradients */
                const size_t qi_off = (size_t)(((b * N + i) * Hq + h) * d);
                const double *qi = q + qi_off, *doi = dout + qi_off;
                const double D = ref_dot(doi, o + qi_off, d);
                /* the sink is a score whose value vector is zero: dP = 0, dS = P (0 - D) */
                if (dsinks && p->sinks)
                    dsinks[h] -= exp(p->sinks[h] - l) * D;
                for (int64_t j = 0; j < N; j++) {
                    if (!ref_allowed(p, doc, i, j))
                        continue;
                    const size_t kj_off = (size_t)(((b * N + j) * Hkv + hk) * d);
                    const double *kj = k + kj_off, *vj = v + kj_off;
                    const double sij = ref_score(p, qi, kj);
                    const double pij = exp(sij - l);
                    const double ds = pij * (ref_dot(doi, vj, d) - D) * ref_cap_slope(p, sij);
                    for (int c = 0; c < d; c++) {
                        dv[kj_off + (size_t)c] += pij * doi[c];
                        dq[qi_off + (size_t)c] += p->scale * ds * kj[c];
                        dk[kj_off + (size_t)c] += p->scale * ds * qi[c];
                    }
                }
            }
        }
    }
    free(o);
    free(lse);
    free(doc);
}
