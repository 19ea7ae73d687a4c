/*
 * tests/test_docs.c - packed documents (burst_plan_params.doc_lens) end to end on the ring of
 * BURST_TEST_BACKEND (cpu by default). '--every K': about one case in K of `cases` (picked by
 * a hash of the case's index, so that the subset still mixes every parameter) and the
 * `skipping` tests only (vk_docs: the Vulkan backend); the others are host-side logic, or
 * long (`many docs`), and the cpu run covers them.
 *
 *   cases      the harness against the fp64 reference (tools/ref.c takes the same documents):
 *              document lengths of 1, of 2, below the ring size, one long and many short,
 *              random; ring sizes 1..8, every layout, both backward patterns, causal and not,
 *              windows, GQA, fp32 and bf16, padded heads and two-level rings now and then.
 *   spans      the rows of a block that travel (burst_block_span): every row that pairs with a
 *              row of another rank, as key and as query, over random documents, layouts, ring
 *              sizes and masks; exactly those rows' enclosing interval for causal masks on
 *              natural and zigzag shards.
 *   many docs  runs of a shard meeting more documents than the schedule tests one by one (4096):
 *              blocks and spans still cover every pair, against the truth and end to end.
 *   skipping   documents that follow the shards: a rank computes only the blocks that share a
 *              document with its rows (statistics' steps_computed), and the ring stops after the
 *              last step any rank needs (steps), with results still exact.
 *   balance    the work-balanced zigzag (runtime/balance.h): with 16 random documents over 8
 *              ranks, the most loaded rank's allowed (query, key) pairs are <= 1.05x the mean,
 *              over many seeds and length mixes (lengths 1 and 2, below the ring size, one long
 *              document, heavy tails), causal, full and windowed; the figure is printed beside
 *              that of the even zigzag. Counted at the keys (the burst backward's work) the
 *              imbalance averages <= 1.1 over the same problems. The public burst_layout_plan_*
 *              helpers agree with the plan's shards.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "balance.h"
#include "burst/layout.h"
#include "harness.h"

#define MAX_DOCS 512

/* Document lengths of kind `kind` summing to n into lens (returns the count):
 * 0 all 1; 1 all 2 (the last may be 1); 2 random below the ring size g; 3 one long (n / 2)
 * then 1..3 each; 4 random 1..n/2; 5 alternating 1, 2 and a random 1..n/3. */
static int64_t make_docs(int kind, int64_t n, int g, uint64_t *st, int64_t *lens)
{
    int64_t count = 0, sum = 0;
    while (sum < n && count < MAX_DOCS) {
        uint64_t r = harness_rng_next(st);
        int64_t len = kind == 0        ? 1
                      : kind == 1      ? 2
                      : kind == 2      ? 1 + (int64_t)(r % (uint64_t)(g > 1 ? g - 1 : 1))
                      : kind == 3      ? (count == 0 ? n / 2 : 1 + (int64_t)(r % 3))
                      : kind == 4      ? 1 + (int64_t)(r % (uint64_t)(n / 2 > 1 ? n / 2 : 1))
                      : count % 3 == 0 ? 1
                      : count % 3 == 1 ? 2
                                       : 1 + (int64_t)(r % (uint64_t)(n / 3 > 1 ? n / 3 : 1));
        if (len > n - sum || count == MAX_DOCS - 1)
            len = n - sum;
        lens[count++] = len;
        sum += len;
    }
    return count;
}

/* ---- the harness against the fp64 reference ---- */

/* --every K (see the file's comment): a case runs when a hash of its index is 0 modulo K */
static int g_every = 1;

static void test_cases(void **state)
{
    (void)state;
    uint64_t st = harness_seed() ^ 0x646f6373u;
    static const int64_t wins[][2] = {{-1, -1}, {5, -1}, {-1, 3}, {4, 2}};
    static const int heads[][2] = {{2, 2}, {4, 1}, {4, 2}};
    int total = 0, failed = 0, idx = 0;
    int64_t lens[MAX_DOCS];
    for (int g = 1; g <= 8; g++)
        for (int layout = 0; layout < 3; layout++)
            for (int bwd = 0; bwd < 2; bwd++)
                for (int rep = 0; rep < 2; rep++, idx++) {
                    const int64_t n = 3 * (int64_t)g + 7 + idx % 11;
                    const int kind = idx % 6;
                    const int64_t nd = make_docs(kind, n, g, &st, lens);
                    const int *hh = heads[idx % 3];
                    int rpn = 0;
                    if (g % 2 == 0 && idx % 5 == 0)
                        rpn = 2;
                    char name[64];
                    snprintf(name, sizeof name, "docs%d_kind%d", idx, kind);
                    struct harness_case c = {
                        .name = name,
                        .ranks = g,
                        .batch = 1 + idx % 2,
                        .seq_len = n,
                        .q_heads = hh[0],
                        .kv_heads = hh[1],
                        .head_dim = idx % 4 == 0 ? 64 : 32,
                        .dtype = idx % 3 == 2 ? BURST_DTYPE_BF16 : BURST_DTYPE_FP32,
                        .causal = (rep + idx / 4) % 2 == 0, /* both, with either bwd */
                        .window_left = wins[(idx / 4) % 4][0],
                        .window_right = wins[(idx / 4) % 4][1],
                        .layout = (burst_layout_t)layout,
                        .bwd = (burst_bwd_pattern_t)bwd,
                        .wire = BURST_WIRE_FP32,
                        .pad = idx % 7 == 0 ? 8 : 0,
                        .ranks_per_node = rpn,
                        .doc_lens = lens,
                        .num_docs = nd,
                    };
                    if (((uint32_t)idx * 2654435761u >> 16) % (uint32_t)g_every != 0)
                        continue;
                    total++;
                    if (!harness_check_case(&c, 0))
                        failed++;
                }
    printf("documents: %d of %d cases failed\n", failed, total);
    assert_int_equal(failed, 0);
}

/* ---- skipping ---- */

/* Run case c; check it against the reference and that rank r computed want_computed[r] steps of
 * a ring of want_steps steps in the forward and the ring backward (blocks of keys travel: the
 * blocks its queries need), want_keys[r] in the burst backward (queries travel: the blocks whose
 * queries need its keys). */
static void check_skipping(const struct harness_case *c, int want_steps, const int *want_computed,
                           const int *want_keys)
{
    struct harness_problem *p = harness_problem_create(c);
    assert_non_null(p);
    assert_int_equal(harness_problem_run(p), 0);
    struct harness_err err[H_NTENSORS];
    int ok = harness_problem_compare(p, err);
    if (!ok)
        harness_problem_print(p, err, "FAIL");
    assert_true(ok);
    for (int r = 0; r < c->ranks; r++) {
        const struct harness_rank_record *rec = harness_problem_record(p, r);
        for (int ph = BURST_PHASE_FWD; ph <= BURST_PHASE_BWD; ph++) {
            printf("%s rank %d phase %d: steps %d, computed %d\n", c->name, r, ph,
                   rec->stats[ph].steps, rec->stats[ph].steps_computed);
            assert_int_equal(rec->stats[ph].steps, want_steps);
            const int burst = ph == BURST_PHASE_BWD && c->bwd == BURST_BWD_BURST;
            assert_int_equal(rec->stats[ph].steps_computed, (burst ? want_keys : want_computed)[r]);
        }
    }
    harness_problem_destroy(p);
}

/* Four ranks over 64 tokens cut into the documents lens, two query heads of 32, fp32, natural
 * layout, no window. */
static struct harness_case skip_case(const char *name, int kv_heads, int causal, int bwd,
                                     const int64_t *lens, int64_t ndocs)
{
    return (struct harness_case){
        .name = name,
        .ranks = 4,
        .batch = 1,
        .seq_len = 64,
        .q_heads = 2,
        .kv_heads = kv_heads,
        .head_dim = 32,
        .dtype = BURST_DTYPE_FP32,
        .causal = causal,
        .window_left = -1,
        .window_right = -1,
        .layout = BURST_LAYOUT_NATURAL,
        .bwd = (burst_bwd_pattern_t)bwd,
        .doc_lens = lens,
        .num_docs = ndocs,
    };
}

static void test_skipping(void **state)
{
    (void)state;
    /* one document per shard: every rank needs only its own block, causal or not */
    static const int64_t four[4] = {16, 16, 16, 16};
    static const int own[4] = {1, 1, 1, 1};
    for (int causal = 0; causal < 2; causal++)
        for (int bwd = 0; bwd < 2; bwd++) {
            struct harness_case c = skip_case("docs_per_shard", 1, causal, bwd, four, 4);
            check_skipping(&c, 1, own, own);
        }
    /* a short document on rank 0, a long one over ranks 1..3: causal, rank r > 0 needs the
     * blocks of ranks 1..r (steps 0..r-1), so the ring runs 3 steps */
    static const int64_t two[2] = {16, 48};
    static const int need[4] = {1, 1, 2, 3}, needed_by[4] = {1, 3, 2, 1};
    for (int bwd = 0; bwd < 2; bwd++) {
        struct harness_case c = skip_case("docs_short_long", 2, 1, bwd, two, 2);
        check_skipping(&c, 3, need, needed_by);
    }
}

/* ---- travelling rows ---- */

/* Check the travelling rows of every rank of shards s under mask (burst_block_span): as keys and
 * as queries, every row that pairs with a row of another rank lies in the span; with `tight`,
 * the span's first and last rows each pair with one (the enclosing interval is exact), unless no
 * row does (the span is then the first row). Returns the spans' rows summed over both sides. */
static int64_t check_spans(const struct burst_shards *s, struct burst_mask mask, int tight)
{
    int64_t total = 0;
    const struct burst_mask swapped = burst_mask_swap(mask);
    for (int side = 0; side < 2; side++) /* 0: j's rows as keys, 1: as queries */
        for (int j = 0; j < s->ranks; j++) {
            const struct burst_posmap mj = burst_shards_posmap(s, j);
            int64_t lo, hi, first = -1, last = -1;
            burst_block_span(s, side ? mask : swapped, j, &lo, &hi);
            assert_true(0 <= lo && lo < hi && hi <= s->lens[j]);
            for (int64_t i = 0; i < s->lens[j]; i++) {
                const int64_t p = burst_posmap_pos(&mj, i);
                int pairs = 0;
                for (int a = 0; a < s->ranks && !pairs; a++) {
                    const struct burst_posmap ma = burst_shards_posmap(s, a);
                    for (int64_t x = 0; a != j && x < s->lens[a] && !pairs; x++) {
                        const int64_t o = burst_posmap_pos(&ma, x);
                        pairs =
                            side ? burst_mask_allows(mask, p, o) : burst_mask_allows(mask, o, p);
                    }
                }
                if (!pairs)
                    continue;
                if (i < lo || i >= hi)
                    fail_msg("rank %d row %lld (position %lld) pairs with another rank as %s but "
                             "its span is [%lld, %lld)",
                             j, (long long)i, (long long)p, side ? "query" : "key", (long long)lo,
                             (long long)hi);
                first = first < 0 ? i : first;
                last = i;
            }
            if (tight && first >= 0) {
                assert_int_equal(lo, first);
                assert_int_equal(hi, last + 1);
            }
            total += hi - lo;
        }
    return total;
}

/* Spans over random documents: every layout, ring sizes 2..8, causal and not, windows; exact
 * (tight) for causal masks without a window on runs of stride 1 (natural, zigzag). Over the
 * causal zigzag problems the travelling rows are a fraction of the shards'. */
static void test_spans(void **state)
{
    (void)state;
    static const int64_t wins[][2] = {{-1, -1}, {5, -1}, {-1, 3}};
    uint64_t st = harness_seed() ^ 0x7370616eu;
    int64_t lens[MAX_DOCS], travel = 0, rows = 0;
    for (int g = 2; g <= 8; g++)
        for (int layout = 0; layout < 3; layout++)
            for (int rep = 0; rep < 12; rep++) {
                const int64_t n = 4 * (int64_t)g + 20 + rep * 7;
                struct burst_plan_params pp = burst_plan_params_default();
                pp.seq_len = n;
                pp.q_heads = pp.kv_heads = 1;
                pp.head_dim = 32;
                pp.causal = rep % 4 != 3;
                pp.window_left = wins[rep % 3][0];
                pp.window_right = pp.causal ? -1 : wins[rep % 3][1];
                pp.layout = (burst_layout_t)layout;
                pp.doc_lens = lens;
                pp.num_docs = make_docs(rep % 6, n, g, &st, lens);
                int64_t *docs = NULL;
                assert_int_equal(burst_docs_table("test", &pp, &docs), BURST_OK);
                struct burst_mask mask = burst_params_mask(&pp, docs);
                struct burst_shards s;
                assert_int_equal(burst_plan_shards_for(&s, "test", &pp, mask, g, NULL), BURST_OK);
                const int tight = pp.causal && pp.window_left < 0 && layout != BURST_LAYOUT_STRIPED;
                const int64_t t = check_spans(&s, mask, tight);
                if (pp.causal && layout == BURST_LAYOUT_ZIGZAG) {
                    travel += t;
                    rows += 2 * n;
                }
                burst_shards_fini(&s);
                free(docs);
            }
    printf("spans: causal zigzag blocks travel with %.3f of their rows\n",
           (double)travel / (double)rows);
    assert_true(travel < rows);
}

/* ---- more documents than a run's test steps through ---- */

/* n tokens as documents of length 1, except one of long_len tokens from position at; returns
 * the count. lens holds n entries. */
static int64_t many_docs(int64_t n, int64_t at, int64_t long_len, int64_t *lens)
{
    int64_t count = 0;
    for (int64_t pos = 0; pos < n; count++) {
        lens[count] = pos == at ? long_len : 1;
        pos += lens[count];
    }
    return count;
}

/* The schedule over shards s under mask against the truth, each query's allowed interval
 * (burst_mask_span) tested against the positions of every rank: a block some pair needs is
 * never skipped, and every row that pairs with another rank's row travels (burst_block_span). */
static void check_many(const struct burst_shards *s, struct burst_mask mask)
{
    const int64_t n = s->seq_len;
    const struct burst_mask swapped = burst_mask_swap(mask);
    for (int a = 0; a < s->ranks; a++) {
        const struct burst_posmap ma = burst_shards_posmap(s, a);
        int64_t span[2][2];
        burst_block_span(s, swapped, a, &span[0][0], &span[0][1]); /* a's rows as keys */
        burst_block_span(s, mask, a, &span[1][0], &span[1][1]);    /* ... as queries */
        for (int b = 0; b < s->ranks; b++) {
            const struct burst_posmap mb = burst_shards_posmap(s, b);
            int needed = 0;
            for (int64_t i = 0; i < s->lens[a]; i++)
                for (int side = 0; side < 2; side++) {
                    int64_t lo, hi;
                    burst_mask_span(side ? mask : swapped, burst_posmap_pos(&ma, i), &lo, &hi);
                    lo = lo > 0 ? lo : 0;
                    hi = hi < n - 1 ? hi : n - 1;
                    if (lo > hi || b == a ||
                        burst_posmap_count_le(&mb, hi) == burst_posmap_count_le(&mb, lo - 1))
                        continue; /* no position of b in the interval */
                    needed |= side;
                    if (i < span[side][0] || i >= span[side][1])
                        fail_msg("rank %d row %lld pairs with rank %d as %s outside [%lld, %lld)",
                                 a, (long long)i, b, side ? "query" : "key",
                                 (long long)span[side][0], (long long)span[side][1]);
                }
            if (needed && !burst_block_needed(s, mask, a, b))
                fail_msg("rank %d's queries need rank %d's keys; the block is skipped", a, b);
        }
    }
}

/* Runs of a shard meeting more documents than the schedule steps through per run (4096): past
 * them its block tests and spans answer as without documents, which must stay a superset. On
 * 2 and 3 ranks, every layout, causal and not, with a window: thousands of one-token documents
 * around one long document across a shard boundary, checked against the truth; then the ring
 * end to end on two ranks against the fp64 reference, both backward patterns. */
static void test_many_docs(void **state)
{
    (void)state;
    const int64_t n = 9000;
    int64_t *lens = malloc((size_t)n * sizeof *lens);
    assert_non_null(lens);
    for (int g = 2; g <= 3; g++)
        for (int layout = 0; layout < 3; layout++)
            for (int m = 0; m < 3; m++) {
                struct burst_plan_params pp = burst_plan_params_default();
                pp.seq_len = n;
                pp.q_heads = pp.kv_heads = 1;
                pp.head_dim = 32;
                pp.causal = m != 1;
                pp.window_left = m == 2 ? 40 : -1;
                pp.layout = (burst_layout_t)layout;
                pp.doc_lens = lens;
                pp.num_docs = many_docs(n, n / g - 300, 600, lens);
                int64_t *docs = NULL;
                assert_int_equal(burst_docs_table("test", &pp, &docs), BURST_OK);
                struct burst_mask mask = burst_params_mask(&pp, docs);
                struct burst_shards s;
                assert_int_equal(burst_plan_shards_for(&s, "test", &pp, mask, g, NULL), BURST_OK);
                check_many(&s, mask);
                burst_shards_fini(&s);
                free(docs);
            }
    for (int bwd = 0; bwd < 2; bwd++) {
        struct harness_case c = skip_case("many_docs", 1, 1, bwd, lens, 0);
        c.ranks = 2;
        c.seq_len = n;
        c.q_heads = 1;
        c.num_docs = many_docs(n, n / 2 - 300, 600, lens);
        assert_true(harness_check_case(&c, 0));
    }
    free(lens);
}

/* ---- balance ---- */

/* max / mean of the ranks' allowed pairs for shards s under mask over n positions, counted at
 * the query (keys = 0: the forward's and the ring backward's work) or at the key (keys = 1: the
 * burst backward's work) */
static double imbalance(const struct burst_shards *s, struct burst_mask mask, int keys)
{
    const int64_t n = s->seq_len;
    double *w = calloc((size_t)n + 1, sizeof *w); /* w[p]: pairs of position p */
    assert_non_null(w);
    for (int64_t pos = 0; pos < n; pos++) {
        int64_t lo, hi;
        burst_mask_span(mask, pos, &lo, &hi);
        lo = lo > 0 ? lo : 0;
        hi = hi < n - 1 ? hi : n - 1;
        if (hi < lo)
            continue;
        if (!keys) {
            w[pos] += (double)(hi - lo + 1);
        } else { /* a difference array over the keys, summed below */
            w[lo] += 1.0;
            w[hi + 1] -= 1.0;
        }
    }
    for (int64_t pos = 1; keys && pos < n; pos++)
        w[pos] += w[pos - 1];
    double max = 0.0, sum = 0.0;
    for (int r = 0; r < s->ranks; r++) {
        struct burst_posmap m = burst_shards_posmap(s, r);
        double x = 0.0;
        for (int k = 0; k < m.nruns; k++) {
            assert_int_equal(m.run[k].stride, 1);
            for (int64_t i = 0; i < m.run[k].len; i++)
                x += w[m.run[k].global0 + i];
        }
        max = x > max ? x : max;
        sum += x;
    }
    free(w);
    return max / (sum / s->ranks);
}

/* 16 document lengths summing to n, of mix `mix`: 0 uniform cut points; 1 heavy tail
 * (log-uniform over three decades); 2 lengths 1 and 2 and below the ring size, the rest
 * uniform; 3 one long document and 15 short ones (< 8); 4 equal halves of lengths 1..3 and
 * long ones. */
static void mix_docs(int mix, int64_t n, uint64_t *st, int64_t *lens)
{
    enum {
        K = 16
    };
    double w[K], sum = 0.0;
    int64_t fixed = 0;
    for (int t = 0; t < K; t++) {
        double u = harness_rng_uniform(st, 0.0, 1.0);
        lens[t] = 0;
        if (mix == 0)
            w[t] = -log(1.0 - u * 0.999999); /* gaps of uniform cut points */
        else if (mix == 1)
            w[t] = pow(10.0, 3.0 * u);
        else if (mix == 2 && t < 6)
            lens[t] = t < 2 ? t + 1 : 1 + (int64_t)(u * 7.0);
        else if (mix == 3 && t > 0)
            lens[t] = 1 + (int64_t)(u * 7.0);
        else if (mix == 4 && t % 2)
            lens[t] = 1 + (int64_t)(u * 3.0);
        else
            w[t] = mix == 3 ? 1.0 : 0.2 + u;
        if (lens[t])
            fixed += lens[t], w[t] = 0.0;
        sum += w[t];
    }
    int64_t left = n - fixed, given = 0, last = -1;
    for (int t = 0; t < K; t++)
        if (!lens[t]) {
            lens[t] = 1 + (int64_t)((double)(left - K) * w[t] / sum);
            given += lens[t];
            last = t;
        }
    lens[last] += left - given; /* the rounding remainder */
}

static void test_balance(void **state)
{
    (void)state;
    enum {
        G = 8,
        K = 16,
        SEEDS = 40
    };
    uint64_t st = harness_seed() ^ 0x62616c61u;
    static const int64_t sizes[] = {2048, 4096, 12288, 32768};
    struct {
        int causal;
        int64_t left;
    } masks[] = {{1, -1}, {0, -1}, {1, 511}};
    double worst = 0.0, worst_even = 0.0, worst_keys = 0.0, keys_sum = 0.0;
    int problems = 0;
    int64_t lens[K];
    for (size_t mi = 0; mi < sizeof masks / sizeof *masks; mi++) {
        double mask_worst = 0.0, mask_even = 0.0, mask_keys = 0.0;
        for (size_t ni = 0; ni < sizeof sizes / sizeof *sizes; ni++)
            for (int mix = 0; mix < 5; mix++)
                for (int seed = 0; seed < SEEDS; seed++) {
                    const int64_t n = sizes[ni];
                    mix_docs(mix, n, &st, lens);
                    struct burst_plan_params pp = burst_plan_params_default();
                    pp.seq_len = n;
                    pp.q_heads = pp.kv_heads = 1;
                    pp.head_dim = 32;
                    pp.causal = masks[mi].causal;
                    pp.window_left = masks[mi].left;
                    pp.layout = BURST_LAYOUT_ZIGZAG;
                    pp.doc_lens = lens;
                    pp.num_docs = K;
                    int64_t *docs = NULL;
                    assert_int_equal(burst_docs_table("test", &pp, &docs), BURST_OK);
                    struct burst_mask mask = burst_params_mask(&pp, docs);
                    struct burst_shards s, even;
                    assert_int_equal(burst_plan_shards_for(&s, "test", &pp, mask, G, NULL),
                                     BURST_OK);
                    assert_int_equal(
                        burst_shards_init(&even, "test", BURST_LAYOUT_ZIGZAG, n, G, NULL),
                        BURST_OK);
                    const double x = imbalance(&s, mask, 0), xe = imbalance(&even, mask, 0);
                    const double xk = imbalance(&s, mask, 1);
                    if (x > 1.05) {
                        printf("imbalance %.4f: n=%lld causal=%d left=%lld lens", x, (long long)n,
                               pp.causal, (long long)pp.window_left);
                        for (int t = 0; t < K; t++)
                            printf(" %lld", (long long)lens[t]);
                        printf("\n");
                    }
                    mask_worst = x > mask_worst ? x : mask_worst;
                    mask_even = xe > mask_even ? xe : mask_even;
                    mask_keys = xk > mask_keys ? xk : mask_keys;
                    keys_sum += xk;
                    problems++;
                    burst_shards_fini(&s);
                    burst_shards_fini(&even);
                    free(docs);
                }
        printf("balance: causal=%d window_left=%lld: 16 documents over 8 ranks, max/mean of "
               "allowed pairs: balanced zigzag %.4f by query, %.4f by key (even zigzag %.4f), %d "
               "problems\n",
               masks[mi].causal, (long long)masks[mi].left, mask_worst, mask_keys, mask_even,
               (int)(sizeof sizes / sizeof *sizes) * 5 * SEEDS);
        worst = mask_worst > worst ? mask_worst : worst;
        worst_even = mask_even > worst_even ? mask_even : worst_even;
        worst_keys = mask_keys > worst_keys ? mask_keys : worst_keys;
    }
    printf("balance: worst imbalance %.4f by query, %.4f by key (mean %.4f; even zigzag: %.4f)\n",
           worst, worst_keys, keys_sum / problems, worst_even);
    assert_true(worst <= 1.05);
    /* by key only as far as the query balance leaves room: over these problems the quantiles
     * of the query work alone give a mean of 1.58 */
    assert_true(keys_sum / problems <= 1.1);
}

/* burst_layout_plan_* give the plan's shards: lengths, positions, and permutations that
 * invert each other; with documents zigzag's lengths follow the work, not the token count. */
static void test_layout_helpers(void **state)
{
    (void)state;
    enum {
        G = 3,
        NN = 40
    };
    static const int64_t docs[4] = {25, 1, 2, 12};
    struct burst_plan_params pp = burst_plan_params_default();
    pp.seq_len = NN;
    pp.q_heads = pp.kv_heads = 1;
    pp.head_dim = 32;
    pp.causal = 1;
    pp.layout = BURST_LAYOUT_ZIGZAG;
    pp.doc_lens = docs;
    pp.num_docs = 4;
    int64_t lens[G], sum = 0;
    assert_int_equal(burst_layout_plan_lens(&pp, G, lens), BURST_OK);
    float nat[NN], perm[NN], back[NN];
    for (int i = 0; i < NN; i++)
        nat[i] = (float)i;
    struct burst_tensor tn = burst_tensor_contiguous(nat, BURST_DTYPE_FP32, 1, NN, 1, 1);
    struct burst_tensor tp = burst_tensor_contiguous(perm, BURST_DTYPE_FP32, 1, NN, 1, 1);
    struct burst_tensor tb = burst_tensor_contiguous(back, BURST_DTYPE_FP32, 1, NN, 1, 1);
    assert_int_equal(burst_layout_plan_permute(&pp, G, &tn, &tp), BURST_OK);
    assert_int_equal(burst_layout_plan_unpermute(&pp, G, &tp, &tb), BURST_OK);
    assert_memory_equal(nat, back, sizeof nat);
    int64_t even = 0;
    for (int r = 0; r < G; r++) {
        int64_t all[NN];
        assert_int_equal(burst_layout_plan_positions(&pp, G, r, all), BURST_OK);
        assert_int_equal(burst_layout_shard_len(BURST_LAYOUT_ZIGZAG, NN, G, r, &even), BURST_OK);
        printf("rank %d: %lld tokens (even zigzag %lld):", r, (long long)lens[r], (long long)even);
        for (int64_t i = 0; i < lens[r]; i++) {
            int64_t pos = -1;
            assert_int_equal(burst_layout_plan_position(&pp, G, r, i, &pos), BURST_OK);
            assert_int_equal((int64_t)perm[sum + i], pos);
            assert_int_equal(all[i], pos);
            printf(" %lld", (long long)pos);
        }
        printf("\n");
        sum += lens[r];
    }
    assert_int_equal(sum, NN);
    /* the documents move tokens: rank 0 holds the start of the 25-token document's causal
     * sawtooth and more tokens than the even split's */
    assert_int_equal(burst_layout_shard_len(BURST_LAYOUT_ZIGZAG, NN, G, 0, &even), BURST_OK);
    assert_true(lens[0] != even);
    /* errors name the argument */
    int64_t pos = -7;
    assert_int_equal(burst_layout_plan_position(&pp, G, G, 0, &pos), BURST_ERR_INVALID_ARG);
    assert_true(harness_contains(burst_last_error(), "rank"));
    assert_int_equal(pos, -7);
    assert_int_equal(burst_layout_plan_lens(NULL, G, lens), BURST_ERR_INVALID_ARG);
    assert_true(harness_contains(burst_last_error(), "params"));
    pp.num_docs = 3; /* lengths now sum to 28 */
    assert_int_equal(burst_layout_plan_lens(&pp, G, lens), BURST_ERR_INVALID_ARG);
    assert_true(harness_contains(burst_last_error(), "doc_lens"));
    pp.num_docs = 4;
    pp.measure_speed = 1;
    assert_int_equal(burst_layout_plan_lens(&pp, G, lens), BURST_ERR_INVALID_ARG);
    assert_true(harness_contains(burst_last_error(), "measure_speed"));
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        g_every = argc == 3 && strcmp(argv[1], "--every") == 0 ? atoi(argv[2]) : 0;
        if (g_every < 1) {
            fprintf(stderr, "usage: test_docs [--every K], K a positive count\n");
            return 1;
        }
    }
    printf("seed: BURST_TEST_SEED=%llu\n", (unsigned long long)harness_seed());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),   cmocka_unit_test(test_skipping),
        cmocka_unit_test(test_spans),   cmocka_unit_test(test_many_docs),
        cmocka_unit_test(test_balance), cmocka_unit_test(test_layout_helpers),
    };
    const struct CMUnitTest backend_tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_skipping),
    };
    int rc = g_every > 1 ? cmocka_run_group_tests_name("docs", backend_tests, NULL, NULL)
                         : cmocka_run_group_tests_name("docs", tests, NULL, NULL);
    harness_fini();
    return rc;
}
