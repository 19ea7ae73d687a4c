/*
 * runtime/posmap.h - global positions of a rank's local rows, and mask intervals.
 *
 * Every layout gives a rank at most two runs of rows whose global positions are affine in the
 * local index and strictly increasing overall:
 *   natural: one run, stride 1; zigzag: two runs, stride 1; striped: one run, stride G.
 * The mask (window and causal, on global positions) allows, for a query at position p, exactly
 * the keys with positions in [p - left, p + right]. Because key positions increase, the allowed
 * keys of one query row form one contiguous interval of local key indices, computed in O(1) here.
 * Backends use these helpers to skip masked tiles and to mask partial tiles.
 */
#ifndef BURST_RUNTIME_POSMAP_H
#define BURST_RUNTIME_POSMAP_H

#include <stdint.h>

#define BURST_POSMAP_MAX_RUNS 2
#define BURST_POS_INF ((int64_t)1 << 60) /* "unbounded" window side */

struct burst_posmap {
    int nruns;
    struct {
        int64_t local0;  /* first local index of the run */
        int64_t len;     /* rows in the run */
        int64_t global0; /* global position of the first row */
        int64_t stride;  /* position step between rows (>= 1) */
    } run[BURST_POSMAP_MAX_RUNS];
};

/* Allowed iff q_pos - left <= k_pos <= q_pos + right and both positions lie in one document.
 * left/right are >= 0 or BURST_POS_INF; causal is folded into right (right = min(right, 0)).
 * Documents (packed sequences): docs holds ndocs + 1 ascending global positions, docs[0] = 0 <
 * docs[1] < ... < docs[ndocs] = N, and document t is the positions [docs[t], docs[t + 1]).
 * docs = NULL (ndocs 0 or 1) is one document. The table is host memory that outlives the call.
 * Documents are contiguous runs of positions, so a query's allowed keys stay one interval of
 * positions, and both its ends still increase with the query position. */
struct burst_mask {
    int64_t left;
    int64_t right;
    const int64_t *docs;
    int64_t ndocs;
    /* the same table in backend memory, for backends that compute on device memory (the
     * plan's copy; NULL elsewhere) */
    const void *docs_dev;
};

static inline int64_t burst_posmap_len(const struct burst_posmap *m)
{
    int64_t n = 0;
    for (int r = 0; r < m->nruns; r++)
        n += m->run[r].len;
    return n;
}

/* Global position of local row i (0 <= i < len). */
static inline int64_t burst_posmap_pos(const struct burst_posmap *m, int64_t i)
{
    int r = (m->nruns > 1 && i >= m->run[1].local0) ? 1 : 0;
    return m->run[r].global0 + (i - m->run[r].local0) * m->run[r].stride;
}

/* The positions of local rows [lo, hi) of m, as rows 0 .. hi - lo - 1. */
static inline struct burst_posmap burst_posmap_slice(const struct burst_posmap *m, int64_t lo,
                                                     int64_t hi)
{
    struct burst_posmap out = {0};
    for (int r = 0; r < m->nruns; r++) {
        int64_t a = m->run[r].local0, b = a + m->run[r].len;
        a = a > lo ? a : lo;
        b = b < hi ? b : hi;
        if (a >= b)
            continue;
        out.run[out.nruns].local0 = a - lo;
        out.run[out.nruns].len = b - a;
        out.run[out.nruns].global0 = m->run[r].global0 + (a - m->run[r].local0) * m->run[r].stride;
        out.run[out.nruns].stride = m->run[r].stride;
        out.nruns++;
    }
    return out;
}

/* Number of local rows whose position is <= x. */
static inline int64_t burst_posmap_count_le(const struct burst_posmap *m, int64_t x)
{
    int64_t n = 0;
    for (int r = 0; r < m->nruns; r++) {
        if (x < m->run[r].global0)
            break;
        int64_t c = (x - m->run[r].global0) / m->run[r].stride + 1;
        n += c < m->run[r].len ? c : m->run[r].len;
    }
    return n;
}

/* The document holding global position pos: positions [*beg, *end). With no documents
 * [-BURST_POS_INF, BURST_POS_INF). Binary search over the table. */
static inline void burst_mask_doc(struct burst_mask mask, int64_t pos, int64_t *beg, int64_t *end)
{
    if (!mask.docs || mask.ndocs <= 1) {
        *beg = -BURST_POS_INF;
        *end = BURST_POS_INF;
        return;
    }
    int64_t lo = 0, hi = mask.ndocs; /* docs[lo] <= pos < docs[hi] */
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (mask.docs[mid] <= pos)
            lo = mid;
        else
            hi = mid;
    }
    *beg = mask.docs[lo];
    *end = mask.docs[hi];
}

/* Allowed key positions [*lo, *hi] (inclusive; empty when *lo > *hi) of a query at qpos. */
static inline void burst_mask_span(struct burst_mask mask, int64_t qpos, int64_t *lo, int64_t *hi)
{
    int64_t db, de;
    burst_mask_doc(mask, qpos, &db, &de);
    int64_t l = mask.left >= BURST_POS_INF ? -BURST_POS_INF : qpos - mask.left;
    int64_t h = mask.right >= BURST_POS_INF ? BURST_POS_INF : qpos + mask.right;
    *lo = l > db ? l : db;
    *hi = h < de - 1 ? h : de - 1;
}

/* Allowed key interval [*kbeg, *kend) of local key rows for a query at global position qpos
 * (empty when *kbeg >= *kend). */
static inline void burst_mask_keys(const struct burst_posmap *k, struct burst_mask mask,
                                   int64_t qpos, int64_t *kbeg, int64_t *kend)
{
    int64_t lo, hi;
    burst_mask_span(mask, qpos, &lo, &hi);
    *kbeg = burst_posmap_count_le(k, lo - 1);
    *kend = burst_posmap_count_le(k, hi);
}

/* Does mask allow every key row of k for every query row of q (true when either has none)?
 * Positions increase with the local index, so the first and last rows bound them. */
static inline int burst_mask_all(const struct burst_posmap *q, const struct burst_posmap *k,
                                 struct burst_mask mask)
{
    int64_t nq = burst_posmap_len(q), nk = burst_posmap_len(k);
    if (nq == 0 || nk == 0)
        return 1;
    if (mask.docs && mask.ndocs > 1) { /* one document must hold every q and k position */
        int64_t q0 = burst_posmap_pos(q, 0), k0 = burst_posmap_pos(k, 0);
        int64_t q1 = burst_posmap_pos(q, nq - 1), k1 = burst_posmap_pos(k, nk - 1);
        int64_t db, de;
        burst_mask_doc(mask, q0 < k0 ? q0 : k0, &db, &de);
        if ((q1 > k1 ? q1 : k1) >= de)
            return 0;
    }
    return (mask.left >= BURST_POS_INF ||
            burst_posmap_pos(q, nq - 1) - mask.left <= burst_posmap_pos(k, 0)) &&
           (mask.right >= BURST_POS_INF ||
            burst_posmap_pos(q, 0) + mask.right >= burst_posmap_pos(k, nk - 1));
}

/* Is key position kpos allowed for query position qpos? */
static inline int burst_mask_allows(struct burst_mask mask, int64_t qpos, int64_t kpos)
{
    int64_t db, de;
    burst_mask_doc(mask, qpos, &db, &de);
    return kpos >= db && kpos < de && (mask.left >= BURST_POS_INF || kpos >= qpos - mask.left) &&
           (mask.right >= BURST_POS_INF || kpos <= qpos + mask.right);
}

#endif /* BURST_RUNTIME_POSMAP_H */
