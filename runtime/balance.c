/* runtime/balance.c - shards as a plan makes them; the work-balanced zigzag of documents. */
#include <math.h>
#include <stdlib.h>

#include "balance.h"
#include "error.h"

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
    int64_t *w = malloc(sizeof(int64_t) * (size_t)(n + 1)); /* w[b]: work of positions < b */
    if (!w)
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory (seq_len = %lld)", who,
                           (long long)n);
    w[0] = 0;
    for (int64_t pos = 0; pos < n; pos++)
        w[pos + 1] = w[pos] + pos_pairs(mask, n, pos);
    double cum = 0.0;
    bounds[0] = 0;
    bounds[chunks] = n;
    for (int c = 1; c < chunks; c++) {
        const int owner = c - 1 < ranks ? c - 1 : chunks - c; /* of chunk c - 1 */
        cum += 0.5 * (weights ? weights[owner] : 1.0) / sum;
        bounds[c] = nearest(w, bounds[c - 1] + 1, n - (chunks - c), cum * (double)w[n]);
    }
    free(w);
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
