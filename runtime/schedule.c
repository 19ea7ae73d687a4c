/* runtime/schedule.c - shard geometry, block needs and the ring schedule (pure functions). */
#include <math.h>
#include <stdlib.h>

#include "error.h"
#include "schedule.h"

static int64_t zz_chunk_len(int64_t n, int g, int c)
{
    int64_t q = n / (2 * g), r = n % (2 * g);
    return q + (c < r ? 1 : 0);
}

static int64_t zz_chunk_start(int64_t n, int g, int c)
{
    int64_t q = n / (2 * g), r = n % (2 * g);
    return (int64_t)c * q + (c < r ? c : r);
}

/* The posmap of rank `rank` for the default (even) shards of each layout. */
static struct burst_posmap even_posmap(burst_layout_t layout, int64_t n, int g, int rank,
                                       const int64_t *lens, const int64_t *offs)
{
    struct burst_posmap m = {0};
    m.nruns = 1;
    m.run[0].len = lens[rank];
    m.run[0].stride = 1;
    if (layout == BURST_LAYOUT_ZIGZAG) {
        int c1 = 2 * g - 1 - rank;
        m.nruns = 2;
        m.run[0].len = zz_chunk_len(n, g, rank);
        m.run[0].global0 = zz_chunk_start(n, g, rank);
        m.run[1].local0 = m.run[0].len;
        m.run[1].len = zz_chunk_len(n, g, c1);
        m.run[1].global0 = zz_chunk_start(n, g, c1);
        m.run[1].stride = 1;
    } else if (layout == BURST_LAYOUT_STRIPED) {
        m.run[0].global0 = rank;
        m.run[0].stride = g;
    } else {
        m.run[0].global0 = offs[rank];
    }
    return m;
}

/* Posmaps of explicit (uneven) shard lengths, the layouts generalised (schedule.h). */
static void uneven_posmaps(burst_layout_t layout, int g, const int64_t *lens, const int64_t *offs,
                           struct burst_posmap *maps)
{
    int64_t min = lens[0], front = 0, back = 0, tail = 0;
    for (int i = 0; i < g; i++) {
        min = lens[i] < min ? lens[i] : min;
        front += lens[i] - lens[i] / 2;
    }
    for (int i = g - 1; i >= 0; i--) { /* zigzag: back chunks in reverse rank order */
        struct burst_posmap *m = &maps[i];
        *m = (struct burst_posmap){0};
        if (layout != BURST_LAYOUT_ZIGZAG)
            break;
        m->nruns = 2;
        m->run[0].len = lens[i] - lens[i] / 2;
        m->run[0].stride = 1;
        m->run[1].local0 = m->run[0].len;
        m->run[1].len = lens[i] / 2;
        m->run[1].global0 = front + back;
        m->run[1].stride = 1;
        back += m->run[1].len;
    }
    front = 0;
    for (int i = 0; i < g; i++) {
        struct burst_posmap *m = &maps[i];
        if (layout == BURST_LAYOUT_ZIGZAG) {
            m->run[0].global0 = front;
            front += m->run[0].len;
        } else if (layout == BURST_LAYOUT_STRIPED) {
            *m = (struct burst_posmap){0};
            m->nruns = lens[i] > min ? 2 : 1;
            m->run[0].len = min;
            m->run[0].global0 = i;
            m->run[0].stride = g;
            m->run[1].local0 = min;
            m->run[1].len = lens[i] - min;
            m->run[1].global0 = (int64_t)g * min + tail;
            m->run[1].stride = 1;
            tail += lens[i] - min;
        } else {
            *m = (struct burst_posmap){0};
            m->nruns = 1;
            m->run[0].len = lens[i];
            m->run[0].global0 = offs[i];
            m->run[0].stride = 1;
        }
    }
}

int64_t burst_shards_min_len(burst_layout_t layout)
{
    return layout == BURST_LAYOUT_ZIGZAG ? 2 : 1;
}

burst_status_t burst_shards_weighted_lens(const char *who, burst_layout_t layout, int64_t seq_len,
                                          int ranks, const double *weights, int64_t *lens)
{
    const int64_t m0 = burst_shards_min_len(layout);
    double sum = 0.0;
    for (int i = 0; i < ranks; i++) {
        if (!(weights[i] > 0.0) || !isfinite(weights[i]) || weights[i] > 1e12)
            return burst_error(BURST_ERR_INVALID_ARG,
                               "%s: shard_weights[%d] = %g must be finite, > 0 and <= 1e12", who, i,
                               weights[i]);
        sum += weights[i];
    }
    if (seq_len < m0 * ranks)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: seq_len = %lld is too short for %d weighted shards (needs >= "
                           "%lld: at least %lld tokens per rank in this layout)",
                           who, (long long)seq_len, ranks, (long long)(m0 * ranks), (long long)m0);
    /* Largest remainders (Hamilton): floor of each quota, at least m0, then single tokens to
     * the largest remainders (taken back from the smallest), ties to the lower rank. */
    int64_t total = 0;
    for (int i = 0; i < ranks; i++) {
        double q = (double)seq_len * (weights[i] / sum);
        lens[i] = (int64_t)q > m0 ? (int64_t)q : m0;
        total += lens[i];
    }
    while (total != seq_len) {
        int best = -1;
        double best_r = 0.0;
        for (int i = 0; i < ranks; i++) {
            double r = (double)seq_len * (weights[i] / sum) - (double)lens[i];
            if (total > seq_len && lens[i] <= m0)
                continue;
            if (best < 0 || (total < seq_len ? r > best_r : r < best_r)) {
                best = i;
                best_r = r;
            }
        }
        lens[best] += total < seq_len ? 1 : -1;
        total += total < seq_len ? 1 : -1;
    }
    return BURST_OK;
}

static void shards_free(int64_t *lens, int64_t *offs, struct burst_posmap *maps)
{
    free(lens);
    free(offs);
    free(maps);
}

/* A shard table's arrays for `ranks` ranks: lengths, offsets, position maps; on failure none
 * and BURST_ERR_NO_MEMORY naming who. */
static burst_status_t shards_alloc(const char *who, int ranks, int64_t **lens_p, int64_t **offs_p,
                                   struct burst_posmap **maps_p)
{
    *lens_p = malloc(sizeof(int64_t) * (size_t)ranks);
    *offs_p = malloc(sizeof(int64_t) * (size_t)ranks);
    *maps_p = malloc(sizeof(struct burst_posmap) * (size_t)ranks);
    if (*lens_p && *offs_p && *maps_p)
        return BURST_OK;
    shards_free(*lens_p, *offs_p, *maps_p);
    *lens_p = *offs_p = NULL;
    *maps_p = NULL;
    return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
}

/* Hand the arrays to s (burst_shards_fini frees them). */
static void shards_set(struct burst_shards *s, burst_layout_t layout, int ranks, int64_t seq_len,
                       int64_t *lens, int64_t *offs, struct burst_posmap *maps)
{
    s->layout = layout;
    s->ranks = ranks;
    s->seq_len = seq_len;
    s->lens = lens;
    s->offsets = offs;
    s->maps = maps;
}

burst_status_t burst_shards_init(struct burst_shards *s, const char *who, burst_layout_t layout,
                                 int64_t seq_len, int ranks, const int64_t *explicit_lens)
{
    if (ranks < 1)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: ranks = %d must be >= 1", who, ranks);
    if (seq_len < 1)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: seq_len = %lld must be >= 1", who,
                           (long long)seq_len);
    if (layout != BURST_LAYOUT_NATURAL && layout != BURST_LAYOUT_ZIGZAG &&
        layout != BURST_LAYOUT_STRIPED)
        return burst_error(BURST_ERR_INVALID_ARG, "%s: layout = %d is not a burst_layout_t", who,
                           (int)layout);
    int64_t min_len = layout == BURST_LAYOUT_ZIGZAG ? 2 * (int64_t)ranks : ranks;
    if (!explicit_lens && seq_len < min_len)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: seq_len = %lld is too short for %d ranks in this layout (needs "
                           ">= %lld so that no shard is empty)",
                           who, (long long)seq_len, ranks, (long long)min_len);
    int64_t *lens, *offs;
    struct burst_posmap *maps;
    burst_status_t st = shards_alloc(who, ranks, &lens, &offs, &maps);
    int64_t sum = 0, m0 = burst_shards_min_len(layout);
    for (int i = 0; st == BURST_OK && i < ranks; i++) {
        if (explicit_lens) {
            lens[i] = explicit_lens[i];
            if (lens[i] < m0)
                st = burst_error(BURST_ERR_INVALID_ARG,
                                 "%s: shard_lens[%d] = %lld must be >= %lld in this layout", who, i,
                                 (long long)explicit_lens[i], (long long)m0);
        } else if (layout == BURST_LAYOUT_ZIGZAG) {
            lens[i] =
                zz_chunk_len(seq_len, ranks, i) + zz_chunk_len(seq_len, ranks, 2 * ranks - 1 - i);
        } else {
            lens[i] = seq_len / ranks + (i < seq_len % ranks ? 1 : 0);
        }
        offs[i] = sum;
        sum += lens[i];
    }
    if (st == BURST_OK && sum != seq_len)
        st = burst_error(BURST_ERR_INVALID_ARG, "%s: shard_lens sum to %lld but seq_len = %lld",
                         who, (long long)sum, (long long)seq_len);
    if (st != BURST_OK) {
        shards_free(lens, offs, maps);
        return st;
    }
    if (explicit_lens)
        uneven_posmaps(layout, ranks, lens, offs, maps);
    else
        for (int i = 0; i < ranks; i++)
            maps[i] = even_posmap(layout, seq_len, ranks, i, lens, offs);
    shards_set(s, layout, ranks, seq_len, lens, offs, maps);
    return BURST_OK;
}

burst_status_t burst_shards_init_chunks(struct burst_shards *s, const char *who, int64_t seq_len,
                                        int ranks, const int64_t *bounds)
{
    const int chunks = 2 * ranks;
    if (bounds[0] != 0 || bounds[chunks] != seq_len)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: chunk bounds span [%lld, %lld), not [0, %lld)", who,
                           (long long)bounds[0], (long long)bounds[chunks], (long long)seq_len);
    for (int c = 0; c < chunks; c++)
        if (bounds[c + 1] <= bounds[c])
            return burst_error(BURST_ERR_INVALID_ARG, "%s: chunk %d = [%lld, %lld) is empty", who,
                               c, (long long)bounds[c], (long long)bounds[c + 1]);
    int64_t *lens, *offs;
    struct burst_posmap *maps;
    burst_status_t st = shards_alloc(who, ranks, &lens, &offs, &maps);
    if (st != BURST_OK)
        return st;
    int64_t sum = 0;
    for (int i = 0; i < ranks; i++) {
        const int c1 = chunks - 1 - i;
        struct burst_posmap *m = &maps[i];
        *m = (struct burst_posmap){0};
        m->nruns = 2;
        m->run[0].len = bounds[i + 1] - bounds[i];
        m->run[0].global0 = bounds[i];
        m->run[0].stride = 1;
        m->run[1].local0 = m->run[0].len;
        m->run[1].len = bounds[c1 + 1] - bounds[c1];
        m->run[1].global0 = bounds[c1];
        m->run[1].stride = 1;
        lens[i] = m->run[0].len + m->run[1].len;
        offs[i] = sum;
        sum += lens[i];
    }
    shards_set(s, BURST_LAYOUT_ZIGZAG, ranks, seq_len, lens, offs, maps);
    return BURST_OK;
}

void burst_shards_fini(struct burst_shards *s)
{
    if (!s)
        return;
    free(s->lens);
    free(s->offsets);
    free(s->maps);
    s->lens = s->offsets = NULL;
    s->maps = NULL;
}

struct burst_posmap burst_shards_posmap(const struct burst_shards *s, int rank)
{
    return s->maps[rank];
}

struct burst_mask burst_mask_make(int causal, int64_t window_left, int64_t window_right)
{
    struct burst_mask m = {.docs = NULL, .ndocs = 0};
    m.left = window_left < 0 ? BURST_POS_INF : window_left;
    m.right = window_right < 0 ? BURST_POS_INF : window_right;
    if (causal && m.right > 0)
        m.right = 0;
    return m;
}

/* Does k hold a row with position in [lo, hi]? */
static int keys_in(const struct burst_posmap *k, int64_t lo, int64_t hi)
{
    return lo <= hi && burst_posmap_count_le(k, hi) > burst_posmap_count_le(k, lo - 1);
}

/* Documents one run's test steps through before it answers without them (conservatively):
 * bounds the work of a block test, which the schedule runs G times per call. */
#define RUN_DOCS_MAX 4096

/* Some query row of run r of q (first .. last, step stride) may attend a key row of k. Per
 * document the run's rows [qa, qb] allow the keys [qa - left, qb + right] within the document
 * (every row's own interval holds its position, so the union has no gap for stride 1); documents
 * holding no row of the run are stepped over. A run meeting more than RUN_DOCS_MAX documents is
 * answered as without documents (a superset). */
static int run_needed(const struct burst_posmap *k, struct burst_mask mask, int64_t first,
                      int64_t last, int64_t stride)
{
    for (int64_t qa = first, seen = 0; qa <= last; seen++) {
        if (seen == RUN_DOCS_MAX) {
            mask.docs = NULL; /* the window alone over the run's remaining rows */
            mask.ndocs = 0;
        }
        int64_t db, de;
        burst_mask_doc(mask, qa, &db, &de);
        const int64_t end = last < de - 1 ? last : de - 1;
        const int64_t qb = qa + (end - qa) / stride * stride;
        int64_t lo = mask.left >= BURST_POS_INF ? -BURST_POS_INF : qa - mask.left;
        int64_t hi = mask.right >= BURST_POS_INF ? BURST_POS_INF : qb + mask.right;
        if (keys_in(k, lo > db ? lo : db, hi < de - 1 ? hi : de - 1))
            return 1;
        qa = qb + stride;
    }
    return 0;
}

int burst_block_needed(const struct burst_shards *s, struct burst_mask mask, int qrank, int krank)
{
    struct burst_posmap q = burst_shards_posmap(s, qrank), k = burst_shards_posmap(s, krank);
    for (int r = 0; r < q.nruns; r++) {
        if (q.run[r].len == 0)
            continue;
        int64_t first = q.run[r].global0;
        int64_t last = first + (q.run[r].len - 1) * q.run[r].stride;
        if (run_needed(&k, mask, first, last, q.run[r].stride))
            return 1;
    }
    return 0;
}

struct burst_mask burst_mask_swap(struct burst_mask mask)
{
    int64_t t = mask.left;
    mask.left = mask.right;
    mask.right = t;
    return mask;
}

/* Does [lo, hi] (clipped to the sequence) hold a position that rank j does not? */
static int others_in(const struct burst_shards *s, const struct burst_posmap *m, int64_t lo,
                     int64_t hi)
{
    lo = lo > 0 ? lo : 0;
    hi = hi < s->seq_len - 1 ? hi : s->seq_len - 1;
    return lo <= hi &&
           hi - lo + 1 > burst_posmap_count_le(m, hi) - burst_posmap_count_le(m, lo - 1);
}

void burst_block_span(const struct burst_shards *s, struct burst_mask mask, int j, int64_t *lo,
                      int64_t *hi)
{
    const struct burst_posmap *m = &s->maps[j];
    int64_t a = s->lens[j], b = 0; /* the union [a, b) of local rows */
    for (int r = 0; r < m->nruns; r++) {
        const int64_t g0 = m->run[r].global0, st = m->run[r].stride, l0 = m->run[r].local0;
        if (m->run[r].len == 0)
            continue;
        const int64_t last = g0 + (m->run[r].len - 1) * st;
        for (int64_t qa = g0, seen = 0; qa <= last; seen++) {
            int64_t db = -BURST_POS_INF, de = BURST_POS_INF, qb = last;
            if (seen < RUN_DOCS_MAX) { /* past that many documents: the rest of the run whole */
                burst_mask_doc(mask, qa, &db, &de);
                const int64_t end = last < de - 1 ? last : de - 1;
                qb = qa + (end - qa) / st * st;
            }
            int64_t plo = mask.left >= BURST_POS_INF ? -BURST_POS_INF : qa - mask.left;
            int64_t phi = mask.right >= BURST_POS_INF ? BURST_POS_INF : qb + mask.right;
            if (others_in(s, m, plo > db ? plo : db, phi < de - 1 ? phi : de - 1)) {
                const int64_t ia = l0 + (qa - g0) / st, ib = l0 + (qb - g0) / st + 1;
                a = ia < a ? ia : a;
                b = ib > b ? ib : b;
            }
            qa = qb + st;
        }
    }
    if (a >= b) { /* no other rank needs a row: the first travels */
        a = 0;
        b = s->lens[j] > 0 ? 1 : 0;
    }
    *lo = a;
    *hi = b;
}

static int wrap(int x, int g)
{
    return ((x % g) + g) % g;
}

int burst_ring_steps2(const struct burst_shards *s, struct burst_mask mask, int local)
{
    int g = s->ranks;
    for (int r = g - 1; r > 0; r--)
        for (int a = 0; a < g; a++)
            if (burst_block_needed(s, mask, a, burst_sched_block(BURST_SCHED_FWD, g, local, a, r)))
                return r + 1;
    return 1;
}

int burst_ring_steps(const struct burst_shards *s, struct burst_mask mask)
{
    return burst_ring_steps2(s, mask, s->ranks);
}

/* Rank at node offset dm and local offset dl from rank. */
static int topo_move(int rank, int ranks, int local, int dm, int dl)
{
    int nodes = ranks / local, m = rank / local, l = rank % local;
    return wrap(m + dm, nodes) * local + wrap(l + dl, local);
}

int burst_sched_block(enum burst_sched_pattern pattern, int ranks, int local, int rank, int step)
{
    int dir = pattern == BURST_SCHED_BWD_BURST ? -1 : 1, t = step / local, s = step % local;
    return topo_move(rank, ranks, local, -dir * t, -dir * s);
}

int burst_sched_holder(enum burst_sched_pattern pattern, int ranks, int local, int block, int step)
{
    int dir = pattern == BURST_SCHED_BWD_BURST ? -1 : 1, t = step / local, s = step % local;
    return topo_move(block, ranks, local, dir * t, dir * s);
}

void burst_sched_step2(enum burst_sched_pattern pattern, const struct burst_shards *s,
                       struct burst_mask mask, int local, int rank, int step, int steps,
                       struct burst_sched_step *out)
{
    const int g = s->ranks, burst = pattern == BURST_SCHED_BWD_BURST, dir = burst ? -1 : 1;
    const int nodes = g / local, sr = step % local, t = step / local;

    out->block = burst_sched_block(pattern, g, local, rank, step);
    out->q_rank = burst ? out->block : rank;
    out->kv_rank = burst ? rank : out->block;
    out->compute = burst_block_needed(s, mask, out->q_rank, out->kv_rank);
    int local_next = sr + 1 < local && step + 1 < steps;
    out->send_to = local_next ? topo_move(rank, g, local, 0, dir) : -1;
    out->recv_from = local_next ? topo_move(rank, g, local, 0, -dir) : -1;
    int inter = nodes > 1 && sr == 0 && (t + 1) * local < steps;
    out->inter_send_to = inter ? topo_move(rank, g, local, dir, 0) : -1;
    out->inter_recv_from = inter ? topo_move(rank, g, local, -dir, 0) : -1;
    out->round_last = sr == local - 1 || step == steps - 1;
    out->acc_to = out->acc_from = out->final_to = out->final_from = -1;
    if (pattern == BURST_SCHED_FWD)
        return;
    if (step >= 2) {
        int prev_block = burst_sched_block(pattern, g, local, rank, step - 1);
        out->acc_to = burst_sched_holder(pattern, g, local, prev_block, step);
        out->acc_from = burst_sched_holder(pattern, g, local, out->block, step - 1);
    }
    if (step == steps - 1 && steps >= 2) {
        out->final_to = out->block;
        out->final_from = burst_sched_holder(pattern, g, local, rank, steps - 1);
    }
}

void burst_sched_step(enum burst_sched_pattern pattern, const struct burst_shards *s,
                      struct burst_mask mask, int rank, int step, int steps,
                      struct burst_sched_step *out)
{
    burst_sched_step2(pattern, s, mask, s->ranks, rank, step, steps, out);
}
