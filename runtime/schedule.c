/* runtime/schedule.c - shard geometry, block needs and the ring schedule (pure functions). */
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
    if (explicit_lens && layout != BURST_LAYOUT_NATURAL)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: shard_lens given with layout = %d: explicit shard lengths need "
                           "the natural layout",
                           who, (int)layout);
    int64_t min_len = layout == BURST_LAYOUT_ZIGZAG ? 2 * (int64_t)ranks : ranks;
    if (!explicit_lens && seq_len < min_len)
        return burst_error(BURST_ERR_INVALID_ARG,
                           "%s: seq_len = %lld is too short for %d ranks in this layout (needs "
                           ">= %lld so that no shard is empty)",
                           who, (long long)seq_len, ranks, (long long)min_len);
    int64_t *lens = malloc(sizeof(int64_t) * (size_t)ranks);
    int64_t *offs = malloc(sizeof(int64_t) * (size_t)ranks);
    if (!lens || !offs) {
        free(lens);
        free(offs);
        return burst_error(BURST_ERR_NO_MEMORY, "%s: out of memory", who);
    }
    int64_t sum = 0;
    for (int i = 0; i < ranks; i++) {
        if (explicit_lens) {
            lens[i] = explicit_lens[i];
            if (lens[i] < 1) {
                free(lens);
                free(offs);
                return burst_error(BURST_ERR_INVALID_ARG, "%s: shard_lens[%d] = %lld must be >= 1",
                                   who, i, (long long)explicit_lens[i]);
            }
        } else if (layout == BURST_LAYOUT_ZIGZAG) {
            lens[i] =
                zz_chunk_len(seq_len, ranks, i) + zz_chunk_len(seq_len, ranks, 2 * ranks - 1 - i);
        } else {
            lens[i] = seq_len / ranks + (i < seq_len % ranks ? 1 : 0);
        }
        offs[i] = sum;
        sum += lens[i];
    }
    if (sum != seq_len) {
        free(lens);
        free(offs);
        return burst_error(BURST_ERR_INVALID_ARG, "%s: shard_lens sum to %lld but seq_len = %lld",
                           who, (long long)sum, (long long)seq_len);
    }
    s->layout = layout;
    s->ranks = ranks;
    s->seq_len = seq_len;
    s->lens = lens;
    s->offsets = offs;
    return BURST_OK;
}

void burst_shards_fini(struct burst_shards *s)
{
    if (!s)
        return;
    free(s->lens);
    free(s->offsets);
    s->lens = s->offsets = NULL;
}

struct burst_posmap burst_shards_posmap(const struct burst_shards *s, int rank)
{
    struct burst_posmap m = {0};
    int g = s->ranks;
    switch (s->layout) {
    case BURST_LAYOUT_ZIGZAG: {
        int c1 = 2 * g - 1 - rank;
        m.nruns = 2;
        m.run[0].local0 = 0;
        m.run[0].len = zz_chunk_len(s->seq_len, g, rank);
        m.run[0].global0 = zz_chunk_start(s->seq_len, g, rank);
        m.run[0].stride = 1;
        m.run[1].local0 = m.run[0].len;
        m.run[1].len = zz_chunk_len(s->seq_len, g, c1);
        m.run[1].global0 = zz_chunk_start(s->seq_len, g, c1);
        m.run[1].stride = 1;
        break;
    }
    case BURST_LAYOUT_STRIPED:
        m.nruns = 1;
        m.run[0].len = s->lens[rank];
        m.run[0].global0 = rank;
        m.run[0].stride = g;
        break;
    case BURST_LAYOUT_NATURAL:
    default:
        m.nruns = 1;
        m.run[0].len = s->lens[rank];
        m.run[0].global0 = s->offsets[rank];
        m.run[0].stride = 1;
        break;
    }
    return m;
}

struct burst_mask burst_mask_make(int causal, int64_t window_left, int64_t window_right)
{
    struct burst_mask m;
    m.left = window_left < 0 ? BURST_POS_INF : window_left;
    m.right = window_right < 0 ? BURST_POS_INF : window_right;
    if (causal && m.right > 0)
        m.right = 0;
    return m;
}

int burst_block_needed(const struct burst_shards *s, struct burst_mask mask, int qrank, int krank)
{
    struct burst_posmap q = burst_shards_posmap(s, qrank), k = burst_shards_posmap(s, krank);
    for (int r = 0; r < q.nruns; r++) {
        if (q.run[r].len == 0)
            continue;
        int64_t first = q.run[r].global0;
        int64_t last = first + (q.run[r].len - 1) * q.run[r].stride;
        int64_t lo = mask.left >= BURST_POS_INF ? -BURST_POS_INF : first - mask.left;
        int64_t hi = mask.right >= BURST_POS_INF ? BURST_POS_INF : last + mask.right;
        if (burst_posmap_count_le(&k, hi) > burst_posmap_count_le(&k, lo - 1))
            return 1;
    }
    return 0;
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
