/* runtime/balance.c - shards as a plan makes them; the work-balanced zigzag of documents. */
#include <math.h>
#include <stdlib.h>

#include "balance.h"
#include "error.h"
#include "posmap.h"

burst_status_t burst_docs_table(const char *who, const struct burst_plan_params *p,
                                int64_t **docs_p)
{
    *docs_p = NULL;
    if (!p->doc_lens || p->num_docs <= 1)
        return BURST_OK;
    int64_t *docs = malloc(sizeof(int64_t) * (size_t)(p->num_docs + 1));
    if (!docs)
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory (%lld documents)", who,
                           (long long)p->num_docs);
    docs[0] = 0;
    for (int64_t t = 0; t < p->num_docs; t++)
        docs[t + 1] = docs[t] + p->doc_lens[t];
    *docs_p = docs;
    return BURST_OK;
}

struct burst_mask burst_params_mask(const struct burst_plan_params *p, const int64_t *docs)
{
    struct burst_mask m = burst_mask_make(p->causal, p->window_left, p->window_right);
    if (docs) {
        m.docs = docs;
        m.ndocs = p->num_docs;
    }
    return m;
}

/* Keys in [0, n) the mask allows query position pos. */
static int64_t pos_pairs(struct burst_mask mask, int64_t n, int64_t pos)
{
    int64_t lo, hi;
    burst_mask_span(mask, pos, &lo, &hi);
    lo = lo > 0 ? lo : 0;
    hi = hi < n - 1 ? hi : n - 1;
    return hi >= lo ? hi - lo + 1 : 0;
}

int64_t burst_mask_pairs(struct burst_mask mask, int64_t n, int64_t p0, int64_t p1)
{
    int64_t sum = 0;
    for (int64_t pos = p0; pos < p1; pos++)
        sum += pos_pairs(mask, n, pos);
    return sum;
}

/* The position b in [lo, hi] whose prefix work w[b] is nearest target (the lower on a tie). */
static int64_t nearest(const int64_t *w, int64_t lo, int64_t hi, double target)
{
    int64_t a = lo, b = hi; /* the first b with w[b] >= target, or hi */
    while (a < b) {
        int64_t mid = a + (b - a) / 2;
        if ((double)w[mid] >= target)
            b = mid;
        else
            a = mid + 1;
    }
    if (a > lo && fabs((double)w[a - 1] - target) <= fabs((double)w[a] - target))
        a--;
    return a;
}

/* Prefix sums of the work: wq[b] = allowed pairs of query positions < b, wk[b] = those of key
 * positions < b (each key counted once per query that may attend it). wk must hold n + 1. */
static void work_prefix(struct burst_mask mask, int64_t n, int64_t *wq, int64_t *wk)
{
    for (int64_t b = 0; b <= n; b++)
        wk[b] = 0;
    wq[0] = 0;
    for (int64_t pos = 0; pos < n; pos++) {
        int64_t lo, hi;
        burst_mask_span(mask, pos, &lo, &hi);
        lo = lo > 0 ? lo : 0;
        hi = hi < n - 1 ? hi : n - 1;
        wq[pos + 1] = wq[pos] + (hi >= lo ? hi - lo + 1 : 0);
        if (hi >= lo) { /* keys [lo, hi] gain this query: a difference array in wk[1..n] */
            wk[lo + 1]++;
            if (hi + 2 <= n)
                wk[hi + 2]--;
        }
    }
    for (int64_t b = 1; b <= n; b++) /* per-key counts, then their prefix sums */
        wk[b] += wk[b - 1];
    for (int64_t b = 1; b <= n; b++)
        wk[b] += wk[b - 1];
}

/* The outer chunks [lo, *a) and [*z, hi) of one rank, with inner chunks between them (each
 * >= 1 position), that take the fraction share of the query work in [lo, hi) to within qtol
 * (or as near as they can), and among those cuts the one nearest that share of the key work. */
static void cut_pair(const int64_t *wq, const int64_t *wk, int64_t lo, int64_t hi, int inner,
                     double share, double qtol, int64_t *a_p, int64_t *z_p)
{
    const double tq = share * (double)(wq[hi] - wq[lo]), tk = share * (double)(wk[hi] - wk[lo]);
    double best_q = INFINITY, best_k = INFINITY;
    for (int64_t a = lo + 1; a + inner < hi; a++) {
        const double front = (double)(wq[a] - wq[lo]);
        if (front > tq + qtol && best_q < INFINITY)
            break;
        /* z: the back chunk's query work nearest tq - front */
        int64_t z = nearest(wq, a + inner, hi - 1, (double)wq[hi] - (tq - front));
        double qerr = fabs(front + (double)(wq[hi] - wq[z]) - tq);
        double kerr = fabs((double)(wk[a] - wk[lo]) + (double)(wk[hi] - wk[z]) - tk);
        int better = qerr <= qtol ? best_q > qtol || kerr < best_k : qerr < best_q;
        if (better) {
            best_q = qerr;
            best_k = kerr;
            *a_p = a;
            *z_p = z;
        }
    }
}

burst_status_t burst_balance_chunks(const char *who, struct burst_mask mask, int64_t n, int ranks,
                                    const double *weights, int64_t *bounds)
{
    const int chunks = 2 * ranks;
    double sum = 0.0;
    for (int i = 0; i < ranks; i++) {
        double x = weights ? weights[i] : 1.0;
        if (!(x > 0.0) || !isfinite(x) || x > 1e12)
            return burst_error(BURST_ERR_INVALID_ARG,
                               "%s: shard_weights[%d] = %g must be finite, > 0 and <= 1e12", who, i,
                               x);
        sum += x;
    }
    if (n < chunks)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: seq_len = %lld is too short for %d ranks in this layout (needs "
                           ">= %d so that no chunk is empty)",
                           who, (long long)n, ranks, chunks);
    int64_t *wq = malloc(sizeof(int64_t) * (size_t)(2 * (n + 1)));
    if (!wq)
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory (seq_len = %lld)", who,
                           (long long)n);
    int64_t *wk = wq + n + 1;
    work_prefix(mask, n, wq, wk);
    double qtol = 0.0; /* half the largest work of one position */
    for (int64_t pos = 0; pos < n; pos++)
        qtol = fmax(qtol, 0.5 * (double)(wq[pos + 1] - wq[pos]));
    bounds[0] = 0;
    bounds[chunks] = n;
    double left = sum;                    /* the weight of ranks >= r */
    for (int r = 0; r < ranks - 1; r++) { /* rank r: chunks r and 2G-1-r, from the outside in */
        const double x = weights ? weights[r] : 1.0;
        cut_pair(wq, wk, bounds[r], bounds[chunks - r], chunks - 2 - 2 * r, x / left, qtol,
                 &bounds[r + 1], &bounds[chunks - 1 - r]);
        left -= x;
    }
    /* the last rank's two chunks meet where its query work is halved */
    const int64_t lo = bounds[ranks - 1], hi = bounds[ranks + 1];
    bounds[ranks] = nearest(wq, lo + 1, hi - 1, 0.5 * (double)(wq[lo] + wq[hi]));
    free(wq);
    return BURST_OK;
}

burst_status_t burst_plan_shards_for(struct burst_shards *s, const char *who,
                                     const struct burst_plan_params *p, struct burst_mask mask,
                                     int ranks, const double *weights)
{
    const int64_t n = p->seq_len;
    if ((weights || !p->shard_lens) && p->layout == BURST_LAYOUT_ZIGZAG && mask.docs &&
        mask.ndocs > 1) {
        int64_t *bounds = malloc(sizeof(int64_t) * (size_t)(2 * ranks + 1));
        if (!bounds)
            return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
        burst_status_t st = burst_balance_chunks(who, mask, n, ranks, weights, bounds);
        if (st == BURST_OK)
            st = burst_shards_init_chunks(s, who, n, ranks, bounds);
        free(bounds);
        return st;
    }
    const int64_t *lens = p->shard_lens;
    int64_t *wl = NULL;
    if (weights) {
        wl = malloc(sizeof(int64_t) * (size_t)ranks);
        if (!wl)
            return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
        burst_status_t st = burst_shards_weighted_lens(who, p->layout, n, ranks, weights, wl);
        if (st != BURST_OK) {
            free(wl);
            return st;
        }
        lens = wl;
    }
    burst_status_t st = burst_shards_init(s, who, p->layout, n, ranks, lens);
    free(wl);
    return st;
}
