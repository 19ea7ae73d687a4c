/*
 * tools/ref.h - plain fp64 reference attention (burstrun's --check and the tests; never in the
 * library).
 *
 * Whole-sequence, single-device, natural token order. Layouts: q, o, dout, dq [B, N, Hq, d];
 * k, v, dk, dv [B, N, Hkv, d]; lse [B, Hq, N]; all contiguous doubles. Query head h uses kv head
 * h / (Hq / Hkv). Position i may attend j iff (left < 0 || j >= i - left) &&
 * (right < 0 || j <= i + right) && (!causal || j <= i), and i, j lie in one document. Scores
 * are scale q.k, or softcap * tanh(scale q.k / softcap) when softcap > 0. A sink (per query
 * head) is one more score of that value in every row's softmax, whose value vector is zero: it
 * enters lse and scales o down. A row with no allowed key and no sink has lse = -INFINITY, o = 0
 * and contributes zero gradients.
 */
#ifndef BURST_TESTS_REF_H
#define BURST_TESTS_REF_H

#include <stdint.h>

struct ref_problem {
    int64_t batch;
    int64_t seq_len;
    int q_heads;
    int kv_heads;
    int head_dim;
    double scale;
    int causal;
    int64_t window_left;  /* -1 = unbounded */
    int64_t window_right; /* -1 = unbounded */
    /* Packed documents: num_docs lengths summing to seq_len; NULL (or num_docs <= 1) = one. */
    const int64_t *doc_lens;
    int64_t num_docs;
    double softcap;      /* > 0: scores capped at +-softcap through tanh; 0 = off */
    const double *sinks; /* [Hq] sink logits, or NULL */
};

/* Document index of every position, malloc'd (NULL without documents, and when out of memory:
 * p->doc_lens && p->num_docs > 1 && !result). */
int64_t *ref_doc_ids(const struct ref_problem *p);

/* Whether position i may attend position j (the rule above; doc from ref_doc_ids). */
int ref_allowed(const struct ref_problem *p, const int64_t *doc, int64_t i, int64_t j);

void ref_forward(const struct ref_problem *p, const double *q, const double *k, const double *v,
                 double *o, double *lse);

/* Forward for a subset of query rows (global positions rows[0..nrows)): o_rows
 * [B, nrows, Hq, d], lse_rows [B, Hq, nrows]. Cost O(nrows * N * H * d). */
void ref_forward_rows(const struct ref_problem *p, const double *q, const double *k,
                      const double *v, const int64_t *rows, int64_t nrows, double *o_rows,
                      double *lse_rows);

/* Gradients of sum(o * dout). Cost O(N^2 * H * d); memory O(N * H * d). */
void ref_backward(const struct ref_problem *p, const double *q, const double *k, const double *v,
                  const double *dout, double *dq, double *dk, double *dv);

/* The same, and the gradient of the sinks, dsinks [Hq] (summed over batch and rows; zero when
 * p->sinks is NULL). dsinks may be NULL. */
void ref_backward_sinks(const struct ref_problem *p, const double *q, const double *k,
                        const double *v, const double *dout, double *dq, double *dk, double *dv,
                        double *dsinks);

#endif /* BURST_TESTS_REF_H */
