/*
 * tests/test_schedule.c - ring schedule coverage (ALGORITHM.md section 6, invariant 4), simulated
 * with burst_sched_step (runtime/schedule.h) for every pattern, layout and mask, G up to 1024
 * with 1-3 tokens per rank, even shards and explicit uneven ones in every layout. No kernel
 * runs. For every configuration:
 *   - shards: every global position is held by exactly one rank, local positions increase,
 *     posmaps agree with the public layout helpers; burst_mask_keys agrees with
 *     burst_mask_allows element by element (G <= 16); burst_mask_all holds for exactly the rank
 *     pairs whose every (query, key) pair is allowed;
 *   - the allowed (query, key) pairs counted through posmaps equal a closed-form count on global
 *     positions; every allowed pair is computed exactly once (no rank pair twice, none missed);
 *     outside striped windows, where burst_block_needed is documented as conservative, compute
 *     is set exactly when the pair has allowed entries and the step count is the minimal one;
 *   - message passing: every send is matched by exactly one receive at the same step, in the
 *     documented direction, and the block a rank holds at step r+1 is the one its sender held
 *     at step r (step 0: its own);
 *   - backward: every travelling accumulator chain starts fresh at step 1, is handed from
 *     holder to holder (each send matched by one receive of the same chain), collects each
 *     computing holder once, and ends at its owner exactly once.
 * Two-level ring (ALGORITHM.md section 4; burst_sched_step2 with L ranks per node, every divisor
 * L of G <= 40, a few for larger G), for every pattern, layout and mask:
 *   - the block a rank holds is the documented one (round t = r / L: node m - t, local index
 *     l - (r mod L), mirrored for the burst pattern), burst_sched_block / burst_sched_holder agree;
 *   - burst_ring_steps2 is the steps the two-level order needs (the last step at which some
 *     rank holds a block it needs, the same for every pattern; minimal outside striped
 *     windows; burst_ring_steps for L = G), and running that many steps computes every allowed
 *     pair exactly once;
 *   - local sends match local receives at the same step inside one node; inter-node sends go at
 *     a round's first step to the same local index on the next node and match one inter-node
 *     receive; the block held at step r+1 is the local sender's block at step r, or at a
 *     round's start the inter-node sender's block at the previous round's start; round_last
 *     marks every round's last step;
 *   - accumulator chains as for the flat ring (holder to next holder, each computing holder
 *     once, home exactly once);
 *   - bytes: steps - 1 block messages per rank per call (as on the flat ring), at most one
 *     inter-node message per round, none at a round's last step;
 *   - L = G: burst_sched_step2 equals burst_sched_step field by field.
 * Packed documents (G <= 64: documents of length 1, of 2, shorter than G, one long and many
 * short, random), every layout and mask, even shards (zigzag: the work-balanced chunks of
 * balance.h) and explicit ones: the same checks, with documents in the mask (block needs and
 * steps exact outside striped rows, which stay conservative).
 * 'slow' (--slow) runs more G values and every mask for each; '--quick' (the sanitizer and cross
 * builds, where the same checks run 5 to 10 times slower) takes G = 256 instead of 1024.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "balance.h"
#include "harness.h"
#include "schedule.h"

struct mask_spec {
    int causal;
    int64_t left, right;
};

static char where[256];

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            char m_[256];                                                                          \
            snprintf(m_, sizeof m_, __VA_ARGS__);                                                  \
            fail_msg("%s: %s [%s]", where, m_, #cond);                                             \
        }                                                                                          \
    } while (0)

static int wrap(int x, int g)
{
    return ((x % g) + g) % g;
}

/* Closed-form number of allowed (query, key) pairs on global positions 0..N-1 (documents
 * found by a linear scan of the table, independent of burst_mask_doc). */
static int64_t allowed_total(int64_t N, struct burst_mask m)
{
    int64_t total = 0;
    for (int64_t p = 0, t = 0; p < N; p++) {
        int64_t lo = m.left >= BURST_POS_INF ? 0 : p - m.left;
        int64_t hi = m.right >= BURST_POS_INF ? N - 1 : p + m.right;
        if (lo < 0)
            lo = 0;
        if (hi > N - 1)
            hi = N - 1;
        if (m.docs && m.ndocs > 1) {
            while (m.docs[t + 1] <= p)
                t++;
            lo = lo > m.docs[t] ? lo : m.docs[t];
            hi = hi < m.docs[t + 1] - 1 ? hi : m.docs[t + 1] - 1;
        }
        if (hi >= lo)
            total += hi - lo + 1;
    }
    return total;
}

/* ---- two-level ring ---- */

static int locals_G;            /* G the list below belongs to */
static int locals[16], nlocals; /* L values to simulate for the configuration being checked */

/* The documented two-level block: rank (m, l) at step r = t L + s of pattern pat holds the
 * block that started at (m - dir t, l - dir s), dir = -1 for the burst pattern. */
static int ref_block(int pat, int G, int L, int i, int r)
{
    const int dir = pat == BURST_SCHED_BWD_BURST ? -1 : 1, M = G / L;
    const int m = i / L, l = i % L, t = r / L, sr = r % L;
    return wrap(m - dir * t, M) * L + wrap(l - dir * sr, L);
}

/* Steps the two-level ring needs: 1 + the last step at which a rank meets a block it needs
 * (burst_block_needed, as burst_ring_steps uses it). */
static int two_level_steps(const struct burst_shards *s, struct burst_mask mask, int G, int L,
                           int pat)
{
    const int burst = pat == BURST_SCHED_BWD_BURST;
    int need = 1;
    for (int i = 0; i < G; i++)
        for (int r = 1; r < G; r++) {
            const int b = ref_block(pat, G, L, i, r);
            if (r + 1 > need && burst_block_needed(s, mask, burst ? b : i, burst ? i : b))
                need = r + 1;
        }
    return need;
}

static int sched_equal(const struct burst_sched_step *a, const struct burst_sched_step *b)
{
    return a->block == b->block && a->q_rank == b->q_rank && a->kv_rank == b->kv_rank &&
           !a->compute == !b->compute && a->send_to == b->send_to && a->recv_from == b->recv_from &&
           a->inter_send_to == b->inter_send_to && a->inter_recv_from == b->inter_recv_from &&
           !a->round_last == !b->round_last && a->acc_to == b->acc_to &&
           a->acc_from == b->acc_from && a->final_to == b->final_to &&
           a->final_from == b->final_from;
}

static void check_two_level(const struct burst_shards *s, struct burst_mask mask,
                            const int32_t *allowed, int64_t total, int exact_needed, int L)
{
    const int G = s->ranks, M = G / L;
    const size_t GG = (size_t)G * (size_t)G;
    uint8_t *computed = malloc(GG), *members = malloc(GG);
    int *holder = malloc((size_t)G * sizeof *holder),
        *holder_next = malloc((size_t)G * sizeof *holder);
    int *delivered = malloc((size_t)G * sizeof *delivered),
        *sent = malloc((size_t)G * sizeof *sent), *rcvd = malloc((size_t)G * sizeof *rcvd);
    struct burst_sched_step *cur = malloc((size_t)G * sizeof *cur),
                            *prev = malloc((size_t)G * sizeof *prev),
                            *rstart = malloc((size_t)G * sizeof *rstart);
    CHECK(computed && members && holder && holder_next && delivered && sent && rcvd && cur &&
              prev && rstart,
          "out of memory");

    for (int pat = 0; pat < 3; pat++) {
        const int burst = pat == BURST_SCHED_BWD_BURST, bwd = pat != BURST_SCHED_FWD;
        const int dir = burst ? -1 : 1;
        /* the steps the engine runs (plan.c); the pairs met at step r are the same for every
         * pattern, so one count serves all three */
        const int steps = burst_ring_steps2(s, mask, L);
        CHECK(steps == two_level_steps(s, mask, G, L, pat),
              "L=%d pattern %d: burst_ring_steps2 = %d, the two-level order needs %d", L, pat,
              steps, two_level_steps(s, mask, G, L, pat));
        if (exact_needed) {
            int minimal = 1;
            for (int i = 0; i < G; i++)
                for (int r = 1; r < G; r++) {
                    const int b = ref_block(pat, G, L, i, r);
                    if (allowed[burst ? (size_t)b * G + i : (size_t)i * G + b] && r + 1 > minimal)
                        minimal = r + 1;
                }
            CHECK(steps == minimal, "L=%d pattern %d: burst_ring_steps2 = %d, minimal %d", L, pat,
                  steps, minimal);
        }
        if (L == G)
            CHECK(steps == burst_ring_steps(s, mask),
                  "L=G pattern %d: two-level order needs %d steps, burst_ring_steps = %d", pat,
                  steps, burst_ring_steps(s, mask));
        memset(computed, 0, GG);
        memset(members, 0, GG);
        for (int x = 0; x < G; x++)
            holder[x] = -1, delivered[x] = 0, sent[x] = 0, rcvd[x] = 0;
        for (int r = 0; r < steps; r++) {
            const int sr = r % L, t = r / L;
            for (int i = 0; i < G; i++) {
                burst_sched_step2((enum burst_sched_pattern)pat, s, mask, L, i, r, steps, &cur[i]);
                if (L == G) {
                    struct burst_sched_step flat;
                    burst_sched_step((enum burst_sched_pattern)pat, s, mask, i, r, steps, &flat);
                    CHECK(sched_equal(&cur[i], &flat),
                          "L=G pattern %d step %d rank %d: burst_sched_step2 differs from "
                          "burst_sched_step",
                          pat, r, i);
                }
            }
            for (int i = 0; i < G; i++) {
                const struct burst_sched_step *c = &cur[i];
                const int m = i / L, l = i % L;
                const int blk = ref_block(pat, G, L, i, r);
                CHECK(c->block == blk, "L=%d pattern %d step %d rank %d: block %d, expected %d", L,
                      pat, r, i, c->block, blk);
                CHECK(burst_sched_block((enum burst_sched_pattern)pat, G, L, i, r) == blk &&
                          burst_sched_holder((enum burst_sched_pattern)pat, G, L, blk, r) == i,
                      "L=%d pattern %d step %d rank %d: burst_sched_block/holder disagree", L, pat,
                      r, i);
                CHECK(c->q_rank == (burst ? blk : i) && c->kv_rank == (burst ? i : blk),
                      "L=%d pattern %d step %d rank %d: pair (%d, %d)", L, pat, r, i, c->q_rank,
                      c->kv_rank);
                const int32_t al = allowed[(size_t)c->q_rank * G + c->kv_rank];
                if (al)
                    CHECK(c->compute,
                          "L=%d pattern %d step %d rank %d: pair (%d,%d) has %d allowed entries "
                          "but compute = 0",
                          L, pat, r, i, c->q_rank, c->kv_rank, (int)al);
                if (exact_needed)
                    CHECK(!c->compute == !al,
                          "L=%d pattern %d step %d rank %d: compute=%d for a pair with %d "
                          "allowed entries",
                          L, pat, r, i, c->compute, (int)al);
                if (c->compute)
                    CHECK(++computed[(size_t)c->q_rank * G + c->kv_rank] == 1,
                          "L=%d pattern %d: pair (%d,%d) computed twice", L, pat, c->q_rank,
                          c->kv_rank);
                /* local ring: inside the node, in the pattern's direction, not at a round's
                 * last step nor at the call's last step */
                const int lnext = m * L + wrap(l + dir, L), lprev = m * L + wrap(l - dir, L);
                if (sr + 1 < L && r + 1 < steps)
                    CHECK(c->send_to == lnext && c->recv_from == lprev,
                          "L=%d pattern %d step %d rank %d: local send_to %d recv_from %d, "
                          "expected %d, %d",
                          L, pat, r, i, c->send_to, c->recv_from, lnext, lprev);
                else
                    CHECK(c->send_to == -1 && c->recv_from == -1,
                          "L=%d pattern %d step %d rank %d: local send_to %d recv_from %d at a "
                          "round's or the call's last step",
                          L, pat, r, i, c->send_to, c->recv_from);
                /* inter-node: at a round's first step when a next round exists */
                const int inext = wrap(m + dir, M) * L + l, iprev = wrap(m - dir, M) * L + l;
                if (M > 1 && sr == 0 && (t + 1) * L < steps)
                    CHECK(c->inter_send_to == inext && c->inter_recv_from == iprev,
                          "L=%d pattern %d step %d rank %d: inter send_to %d recv_from %d, "
                          "expected %d, %d",
                          L, pat, r, i, c->inter_send_to, c->inter_recv_from, inext, iprev);
                else
                    CHECK(c->inter_send_to == -1 && c->inter_recv_from == -1,
                          "L=%d pattern %d step %d rank %d: inter send_to %d recv_from %d "
                          "unexpected",
                          L, pat, r, i, c->inter_send_to, c->inter_recv_from);
                CHECK(!c->round_last == !(sr == L - 1 || r == steps - 1),
                      "L=%d pattern %d step %d rank %d: round_last = %d", L, pat, r, i,
                      c->round_last);
                /* matching at the same step */
                if (c->send_to >= 0)
                    CHECK(cur[c->send_to].recv_from == i && c->send_to / L == m,
                          "L=%d step %d: local send %d->%d unmatched", L, r, i, c->send_to);
                if (c->recv_from >= 0)
                    CHECK(cur[c->recv_from].send_to == i,
                          "L=%d step %d: local receive %d<-%d unmatched", L, r, i, c->recv_from);
                if (c->inter_send_to >= 0)
                    CHECK(cur[c->inter_send_to].inter_recv_from == i && c->inter_send_to % L == l &&
                              c->inter_send_to / L != m,
                          "L=%d step %d: inter send %d->%d unmatched", L, r, i, c->inter_send_to);
                if (c->inter_recv_from >= 0)
                    CHECK(cur[c->inter_recv_from].inter_send_to == i,
                          "L=%d step %d: inter receive %d<-%d unmatched", L, r, i,
                          c->inter_recv_from);
                sent[i] += (c->send_to >= 0) + (c->inter_send_to >= 0);
                rcvd[i] += (c->recv_from >= 0) + (c->inter_recv_from >= 0);
                /* continuity: where the block held now came from */
                if (r > 0 && sr > 0) {
                    const int from = prev[i].recv_from;
                    CHECK(from >= 0 && prev[from].send_to == i && prev[from].block == c->block,
                          "L=%d pattern %d step %d rank %d holds block %d that no local "
                          "neighbour sent it at step %d",
                          L, pat, r, i, c->block, r - 1);
                } else if (r > 0) {
                    const int from = rstart[i].inter_recv_from;
                    CHECK(from >= 0 && rstart[from].inter_send_to == i &&
                              rstart[from].block == c->block,
                          "L=%d pattern %d step %d rank %d holds block %d that no inter-node "
                          "neighbour sent it at step %d",
                          L, pat, r, i, c->block, r - L);
                    CHECK(prev[i].round_last, "L=%d step %d rank %d: new round without round_last",
                          L, r, i);
                }
                if (!bwd || r < 2)
                    CHECK(c->acc_to == -1 && c->acc_from == -1,
                          "L=%d pattern %d step %d rank %d: unexpected accumulator transfer", L,
                          pat, r, i);
                if (!bwd || r < steps - 1 || steps < 2)
                    CHECK(c->final_to == -1 && c->final_from == -1,
                          "L=%d pattern %d step %d rank %d: unexpected final transfer", L, pat, r,
                          i);
            }
            if (bwd && r >= 1) {
                for (int i = 0; i < G; i++) {
                    const struct burst_sched_step *c = &cur[i];
                    const int x = c->block;
                    CHECK(c->acc_from == holder[x],
                          "L=%d pattern %d step %d rank %d: chain %d is at rank %d but acc_from "
                          "= %d",
                          L, pat, r, i, x, holder[x], c->acc_from);
                    if (c->acc_from >= 0)
                        CHECK(cur[c->acc_from].acc_to == i,
                              "L=%d step %d: accumulator %d->%d not sent", L, r, c->acc_from, i);
                    if (r >= 2)
                        CHECK(c->acc_to >= 0 && cur[c->acc_to].acc_from == i &&
                                  cur[c->acc_to].block == prev[i].block,
                              "L=%d pattern %d step %d rank %d: accumulator of block %d sent to "
                              "%d",
                              L, pat, r, i, prev[i].block, c->acc_to);
                    if (c->compute)
                        CHECK(++members[(size_t)x * G + i] == 1,
                              "L=%d: chain %d visits rank %d twice", L, x, i);
                    holder_next[x] = i;
                }
                memcpy(holder, holder_next, (size_t)G * sizeof *holder);
            }
            if (sr == 0)
                memcpy(rstart, cur, (size_t)G * sizeof *cur);
            struct burst_sched_step *tmp = prev;
            prev = cur;
            cur = tmp;
        }
        if (bwd && steps >= 2) {
            for (int i = 0; i < G; i++) {
                const int x = prev[i].block;
                CHECK(prev[i].final_to == x && holder[x] == i,
                      "L=%d pattern %d: final hop of chain %d from rank %d goes to %d", L, pat, x,
                      i, prev[i].final_to);
                CHECK(prev[x].final_from == i,
                      "L=%d pattern %d: owner %d expects its chain from %d, it is at %d", L, pat, x,
                      prev[x].final_from, i);
                delivered[x]++;
            }
            for (int x = 0; x < G; x++)
                CHECK(delivered[x] == 1, "L=%d: chain %d delivered %d times", L, x, delivered[x]);
        }
        /* bytes: as many block messages as the flat ring */
        for (int i = 0; i < G; i++)
            CHECK(sent[i] == steps - 1 && rcvd[i] == steps - 1,
                  "L=%d pattern %d rank %d: %d block sends, %d receives in %d steps", L, pat, i,
                  sent[i], rcvd[i], steps);
        int64_t covered = 0;
        for (size_t ab = 0; ab < GG; ab++) {
            if (allowed[ab])
                CHECK(computed[ab] == 1,
                      "L=%d pattern %d (%d steps): pair (%d,%d) with %d allowed entries computed "
                      "%d times",
                      L, pat, steps, (int)(ab / (size_t)G), (int)(ab % (size_t)G), (int)allowed[ab],
                      computed[ab]);
            if (computed[ab])
                covered += allowed[ab];
        }
        CHECK(covered == total, "L=%d pattern %d covers %lld of %lld pairs", L, pat,
              (long long)covered, (long long)total);
    }
    free(computed), free(members), free(holder), free(holder_next), free(delivered), free(sent),
        free(rcvd), free(cur), free(prev), free(rstart);
}

/* One configuration; docs (ndocs + 1 boundaries, NULL: one document) packs documents, and then
 * zigzag without explicit lens is the work-balanced zigzag of the plan (balance.h). */
static void check_config_docs(burst_layout_t layout, int G, int64_t N, const int64_t *lens,
                              struct mask_spec ms, const int64_t *docs, int64_t ndocs)
{
    struct burst_shards s;
    snprintf(where, sizeof where, "layout=%d G=%d N=%lld causal=%d window=(%lld,%lld)%s docs=%lld",
             (int)layout, G, (long long)N, ms.causal, (long long)ms.left, (long long)ms.right,
             lens ? " explicit lens" : "", (long long)ndocs);
    struct burst_mask mask = burst_mask_make(ms.causal, ms.left, ms.right);
    mask.docs = docs;
    mask.ndocs = docs ? ndocs : 0;
    const int balanced = docs && ndocs > 1 && !lens && layout == BURST_LAYOUT_ZIGZAG;
    if (balanced) {
        int64_t *bounds = malloc(sizeof(int64_t) * (size_t)(2 * G + 1));
        CHECK(bounds && burst_balance_chunks("test", mask, N, G, NULL, bounds) == BURST_OK &&
                  burst_shards_init_chunks(&s, "test", N, G, bounds) == BURST_OK,
              "balanced shards: %s", burst_last_error());
        free(bounds);
    } else {
        CHECK(burst_shards_init(&s, "test", layout, N, G, lens) == BURST_OK, "shards_init: %s",
              burst_last_error());
    }
    /* burst_block_needed may over-approximate only for striped rows with a window bounded on
     * both sides or with documents (the union of the rows' intervals then has gaps) */
    const int exact_needed =
        layout != BURST_LAYOUT_STRIPED ||
        (!mask.docs && (mask.left >= BURST_POS_INF || mask.right >= BURST_POS_INF));
    const size_t GG = (size_t)G * (size_t)G;

    /* shards and posmaps */
    int *owner = malloc((size_t)N * sizeof *owner);
    struct burst_posmap *pm = malloc((size_t)G * sizeof *pm);
    CHECK(owner && pm, "out of memory");
    for (int64_t p = 0; p < N; p++)
        owner[p] = -1;
    for (int r = 0; r < G; r++) {
        pm[r] = burst_shards_posmap(&s, r);
        CHECK(burst_posmap_len(&pm[r]) == s.lens[r], "rank %d: posmap length %lld vs lens %lld", r,
              (long long)burst_posmap_len(&pm[r]), (long long)s.lens[r]);
        int64_t last = -1;
        for (int64_t i = 0; i < s.lens[r]; i++) {
            int64_t p = burst_posmap_pos(&pm[r], i);
            CHECK(p > last && p < N, "rank %d row %lld: position %lld", r, (long long)i,
                  (long long)p);
            CHECK(owner[p] == -1, "position %lld held by ranks %d and %d", (long long)p, owner[p],
                  r);
            owner[p] = r;
            last = p;
            if (!lens && !balanced && (G <= 64 || i == 0)) {
                int64_t want = -1;
                CHECK(burst_layout_position(layout, N, G, r, i, &want) == BURST_OK && want == p,
                      "rank %d row %lld: posmap %lld, burst_layout_position %lld", r, (long long)i,
                      (long long)p, (long long)want);
            }
        }
    }
    for (int64_t p = 0; p < N; p++)
        CHECK(owner[p] >= 0, "position %lld held by no rank", (long long)p);

    /* allowed pairs per rank pair, through posmaps */
    int32_t *allowed = calloc(GG, sizeof *allowed);
    CHECK(allowed != NULL, "out of memory");
    int64_t sum = 0;
    for (int a = 0; a < G; a++)
        for (int64_t i = 0; i < s.lens[a]; i++) {
            const int64_t qp = burst_posmap_pos(&pm[a], i);
            for (int b = 0; b < G; b++) {
                int64_t kb, ke;
                burst_mask_keys(&pm[b], mask, qp, &kb, &ke);
                if (ke > kb) {
                    allowed[(size_t)a * G + b] += (int32_t)(ke - kb);
                    sum += ke - kb;
                }
                if (G <= 16)
                    for (int64_t j = 0; j < s.lens[b]; j++) {
                        int in = j >= kb && j < ke;
                        CHECK(in == burst_mask_allows(mask, qp, burst_posmap_pos(&pm[b], j)),
                              "burst_mask_keys [%lld,%lld) disagrees with burst_mask_allows "
                              "for query %lld, key %lld",
                              (long long)kb, (long long)ke, (long long)qp,
                              (long long)burst_posmap_pos(&pm[b], j));
                    }
            }
        }
    const int64_t total = allowed_total(N, mask);
    CHECK(sum == total, "posmaps count %lld allowed pairs, positions %lld", (long long)sum,
          (long long)total);
    /* burst_mask_all: exactly the rank pairs whose every pair is allowed */
    for (int a = 0; a < G; a++)
        for (int b = 0; b < G; b++)
            CHECK(burst_mask_all(&pm[a], &pm[b], mask) ==
                      (allowed[(size_t)a * G + b] == s.lens[a] * s.lens[b]),
                  "burst_mask_all(rank %d, rank %d) = %d, but %d of %lld pairs allowed", a, b,
                  burst_mask_all(&pm[a], &pm[b], mask), allowed[(size_t)a * G + b],
                  (long long)(s.lens[a] * s.lens[b]));

    /* steps */
    int exact_steps = 1;
    for (int a = 0; a < G; a++)
        for (int r = 1; r < G; r++)
            if (allowed[(size_t)a * G + wrap(a - r, G)] && r + 1 > exact_steps)
                exact_steps = r + 1;
    const int steps = burst_ring_steps(&s, mask);
    CHECK(steps >= exact_steps && steps <= G, "burst_ring_steps = %d, needed %d", steps,
          exact_steps);
    if (exact_needed)
        CHECK(steps == exact_steps, "burst_ring_steps = %d, minimal %d", steps, exact_steps);

    uint8_t *computed = malloc(GG), *members = malloc(GG);
    int *holder = malloc((size_t)G * sizeof *holder),
        *holder_next = malloc((size_t)G * sizeof *holder);
    int *delivered = malloc((size_t)G * sizeof *delivered);
    struct burst_sched_step *cur = malloc((size_t)G * sizeof *cur),
                            *prev = malloc((size_t)G * sizeof *prev);
    CHECK(computed && members && holder && holder_next && delivered && cur && prev,
          "out of memory");

    for (int pat = 0; pat < 3; pat++) {
        const int burst = pat == BURST_SCHED_BWD_BURST, bwd = pat != BURST_SCHED_FWD;
        memset(computed, 0, GG);
        memset(members, 0, GG);
        for (int x = 0; x < G; x++)
            holder[x] = -1, delivered[x] = 0;
        for (int r = 0; r < steps; r++) {
            for (int i = 0; i < G; i++)
                burst_sched_step((enum burst_sched_pattern)pat, &s, mask, i, r, steps, &cur[i]);
            for (int i = 0; i < G; i++) {
                const struct burst_sched_step *c = &cur[i];
                const int blk = wrap(burst ? i + r : i - r, G);
                CHECK(c->block == blk, "pattern %d step %d rank %d: block %d, expected %d", pat, r,
                      i, c->block, blk);
                CHECK(c->q_rank == (burst ? blk : i) && c->kv_rank == (burst ? i : blk),
                      "pattern %d step %d rank %d: pair (%d, %d)", pat, r, i, c->q_rank,
                      c->kv_rank);
                CHECK(wrap(c->q_rank - c->kv_rank, G) == wrap(r, G), "pair offset");
                const int32_t al = allowed[(size_t)c->q_rank * G + c->kv_rank];
                if (al)
                    CHECK(c->compute,
                          "pattern %d step %d rank %d: pair (%d,%d) has %d allowed "
                          "entries but compute = 0",
                          pat, r, i, c->q_rank, c->kv_rank, (int)al);
                if (exact_needed)
                    CHECK(!c->compute == !al,
                          "pattern %d step %d rank %d: compute=%d for a "
                          "pair with %d allowed entries",
                          pat, r, i, c->compute, (int)al);
                if (c->compute)
                    CHECK(++computed[(size_t)c->q_rank * G + c->kv_rank] == 1,
                          "pattern %d: pair (%d,%d) computed twice", pat, c->q_rank, c->kv_rank);
                /* block transfers: direction, matching, continuity */
                const int next = wrap(burst ? i - 1 : i + 1, G);
                if (r < steps - 1) {
                    CHECK(c->send_to == next && c->recv_from == wrap(burst ? i + 1 : i - 1, G),
                          "pattern %d step %d rank %d: send_to %d recv_from %d", pat, r, i,
                          c->send_to, c->recv_from);
                } else {
                    CHECK(c->send_to == -1 && c->recv_from == -1,
                          "pattern %d last step rank %d still sends (%d) or receives (%d)", pat, i,
                          c->send_to, c->recv_from);
                }
                if (c->send_to >= 0)
                    CHECK(cur[c->send_to].recv_from == i, "step %d: send %d->%d unmatched", r, i,
                          c->send_to);
                if (c->recv_from >= 0)
                    CHECK(cur[c->recv_from].send_to == i, "step %d: receive %d<-%d unmatched", r, i,
                          c->recv_from);
                if (r > 0) {
                    const int from = prev[i].recv_from;
                    CHECK(from >= 0 && prev[from].send_to == i && prev[from].block == c->block,
                          "pattern %d step %d rank %d holds block %d that no neighbour sent it",
                          pat, r, i, c->block);
                }
                /* accumulators */
                if (!bwd || r < 2)
                    CHECK(c->acc_to == -1 && c->acc_from == -1,
                          "pattern %d step %d rank %d: unexpected accumulator transfer", pat, r, i);
                if (!bwd || r < steps - 1 || steps < 2)
                    CHECK(c->final_to == -1 && c->final_from == -1,
                          "pattern %d step %d rank %d: unexpected final transfer", pat, r, i);
            }
            if (bwd && r >= 1) {
                for (int i = 0; i < G; i++) {
                    const struct burst_sched_step *c = &cur[i];
                    const int x = c->block;
                    /* receive the chain of x from its previous holder */
                    CHECK(c->acc_from == holder[x],
                          "pattern %d step %d rank %d: chain %d is at rank %d but acc_from = %d",
                          pat, r, i, x, holder[x], c->acc_from);
                    if (c->acc_from >= 0)
                        CHECK(cur[c->acc_from].acc_to == i, "step %d: accumulator %d->%d not sent",
                              r, c->acc_from, i);
                    /* send the chain finished at step r-1 */
                    if (r >= 2) {
                        CHECK(c->acc_to >= 0 && cur[c->acc_to].acc_from == i &&
                                  cur[c->acc_to].block == prev[i].block,
                              "pattern %d step %d rank %d: accumulator of block %d sent to %d", pat,
                              r, i, prev[i].block, c->acc_to);
                    }
                    if (c->compute)
                        CHECK(++members[(size_t)x * G + i] == 1, "chain %d visits rank %d twice", x,
                              i);
                    holder_next[x] = i;
                }
                memcpy(holder, holder_next, (size_t)G * sizeof *holder);
            }
            struct burst_sched_step *t = prev;
            prev = cur;
            cur = t;
        }
        /* prev = last step */
        if (bwd && steps >= 2) {
            for (int i = 0; i < G; i++) {
                const int x = prev[i].block;
                CHECK(prev[i].final_to == x && holder[x] == i,
                      "pattern %d: final hop of chain %d from rank %d goes to %d", pat, x, i,
                      prev[i].final_to);
                CHECK(prev[x].final_from == i,
                      "pattern %d: owner %d expects its chain from %d, "
                      "it is at %d",
                      pat, x, prev[x].final_from, i);
                delivered[x]++;
            }
            for (int x = 0; x < G; x++)
                CHECK(delivered[x] == 1, "chain %d delivered %d times", x, delivered[x]);
        }
        int64_t covered = 0;
        for (size_t ab = 0; ab < GG; ab++) {
            if (allowed[ab])
                CHECK(computed[ab] == 1,
                      "pattern %d: pair (%d,%d) with %d allowed entries "
                      "computed %d times",
                      pat, (int)(ab / (size_t)G), (int)(ab % (size_t)G), (int)allowed[ab],
                      computed[ab]);
            if (computed[ab])
                covered += allowed[ab];
        }
        CHECK(covered == total, "pattern %d covers %lld of %lld pairs", pat, (long long)covered,
              (long long)total);
    }
    if (locals_G == G)
        for (int li = 0; li < nlocals; li++)
            check_two_level(&s, mask, allowed, total, exact_needed, locals[li]);
    free(owner), free(pm), free(allowed), free(computed), free(members), free(holder),
        free(holder_next), free(delivered), free(cur), free(prev);
    burst_shards_fini(&s);
}

static void check_config(burst_layout_t layout, int G, int64_t N, const int64_t *lens,
                         struct mask_spec ms)
{
    check_config_docs(layout, G, N, lens, ms, NULL, 0);
}

/* The L values simulated for G: every divisor up to G = 40; a few for the large G (at 1024 one
 * node size of 32: L = 1 and L = G, one rank per node and one node, run at every smaller G). */
static void set_locals(int G, int slow)
{
    locals_G = G;
    nlocals = 0;
    if (G <= 40) {
        for (int L = 1; L <= G; L++)
            if (G % L == 0)
                locals[nlocals++] = L;
        return;
    }
    static const int l64[] = {1, 2, 4, 8, 16, 64}, l1024[] = {32};
    const int *ls = NULL;
    int n = 0;
    if (G == 64)
        ls = l64, n = 6;
    else if (G == 1024 && slow)
        ls = l1024, n = 1;
    else if (G == 128 && slow)
        ls = l64, n = 5; /* 1..16 */
    for (int k = 0; k < n; k++)
        locals[nlocals++] = ls[k];
}

/* Packed documents in every layout: lengths 1 and 2, lengths below G, one long and many short,
 * random; even shards (zigzag: the balanced chunks) and explicit lengths. */
static void docs_sweep(int G, const struct mask_spec *masks, size_t nm, uint64_t *st)
{
    const int64_t N = 4 * (int64_t)G + 3;
    int64_t *docs = malloc(sizeof(int64_t) * (size_t)(N + 1));
    int64_t *lens = malloc(sizeof(int64_t) * (size_t)G);
    assert_true(docs && lens);
    for (int kind = 0; kind < 5; kind++) {
        int64_t nd = 0;
        docs[0] = 0;
        while (docs[nd] < N) {
            int64_t len = kind == 0   ? 1
                          : kind == 1 ? 2
                          : kind == 2 ? 1 + (int64_t)(harness_rng_next(st) % (uint64_t)G)
                          : kind == 3 ? (nd == 0 ? N / 2 : 1 + (int64_t)(harness_rng_next(st) % 3))
                                      : 1 + (int64_t)(harness_rng_next(st) % (uint64_t)(N / 2));
            docs[nd + 1] = docs[nd] + len < N ? docs[nd] + len : N;
            nd++;
        }
        for (int layout = 0; layout < 3; layout++)
            for (size_t m = 0; m < nm; m++) {
                check_config_docs((burst_layout_t)layout, G, N, NULL, masks[m], docs, nd);
                int64_t sum = 0;
                for (int r = 0; r < G; r++)
                    sum += lens[r] = layout == BURST_LAYOUT_ZIGZAG ? 4 : 4 + (r < 3);
                lens[G - 1] += N - sum;
                check_config_docs((burst_layout_t)layout, G, N, lens, masks[m], docs, nd);
            }
    }
    free(docs);
    free(lens);
}

static void run_sweep(const int *Gs, size_t nG, int all_masks)
{
    uint64_t st = harness_seed() + 99;
    for (size_t gi = 0; gi < nG; gi++) {
        const int G = Gs[gi];
        set_locals(G, all_masks);
        const struct mask_spec masks[] = {
            {0, -1, -1},    {1, -1, -1},           {1, 3, -1}, {0, 2, 5}, {0, -1, 2}, {0, 0, 0},
            {1, G + 1, -1}, {0, 3 * G / 2, G / 3}, {1, 0, -1},
        };
        const size_t nm = all_masks || G <= 64 ? sizeof masks / sizeof *masks : 4;
        for (int layout = 0; layout < 3; layout++)
            for (int t = 1; t <= 3; t++) {
                if (G >= 512 && !all_masks && t == 2)
                    continue;
                const int64_t per = layout == BURST_LAYOUT_ZIGZAG ? 2 * t : t;
                const int64_t N = G * per + (t == 2 ? G / 2 : t == 3 ? 1 % G : 0);
                for (size_t m = 0; m < nm; m++)
                    check_config((burst_layout_t)layout, G, N, NULL, masks[m]);
            }
        /* explicit (uneven) shard lengths in every layout: 1-3 tokens each (zigzag 2-4) */
        int64_t *lens = malloc((size_t)G * sizeof *lens);
        assert_non_null(lens);
        for (int layout = 0; layout < 3; layout++) {
            int64_t N = 0;
            for (int r = 0; r < G; r++)
                N += lens[r] =
                    (layout == BURST_LAYOUT_ZIGZAG ? 2 : 1) + (int64_t)(harness_rng_next(&st) % 3);
            for (size_t m = 0; m < nm; m++)
                check_config((burst_layout_t)layout, G, N, lens, masks[m]);
        }
        free(lens);
        if (G <= 64)
            docs_sweep(G, masks, nm, &st);
    }
}

static void test_small(void **state)
{
    (void)state;
    static const int Gs[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 16};
    run_sweep(Gs, sizeof Gs / sizeof *Gs, 1);
}

static int quick;

static void test_large(void **state)
{
    (void)state;
    const int Gs[] = {64, quick ? 256 : 1024};
    run_sweep(Gs, sizeof Gs / sizeof *Gs, 0);
}

static void test_slow(void **state)
{
    (void)state;
    int Gs[64];
    size_t n = 0;
    for (int g = 1; g <= 40; g++)
        Gs[n++] = g;
    static const int big[] = {63, 100, 127, 128, 257, 512, 1024};
    for (size_t i = 0; i < sizeof big / sizeof *big; i++)
        Gs[n++] = big[i];
    run_sweep(Gs, n, 1);
}

int main(int argc, char **argv)
{
    printf("seed: BURST_TEST_SEED=%llu\n", (unsigned long long)harness_seed());
    if (argc > 1 && strcmp(argv[1], "--slow") == 0) {
        const struct CMUnitTest slow[] = {cmocka_unit_test(test_slow)};
        return cmocka_run_group_tests_name("schedule_sweep", slow, NULL, NULL);
    }
    quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small),
        cmocka_unit_test(test_large),
    };
    return cmocka_run_group_tests_name("schedule", tests, NULL, NULL);
}
