/*
 * tests/test_vk_docs.c - packed documents and soft-capped scores on the Vulkan backend's step
 * ops, called directly as the ring calls them, against the fp64 reference (tools/ref.h).
 *
 * A sequence of N tokens is cut into G shards (natural: contiguous; zigzag: chunks r and
 * 2G - 1 - r, two runs per shard); each shard's queries meet every shard's keys through
 * fwd_step (merged into one running O, lse), then bwd_delta and bwd_step for every pair
 * accumulate dQ, dK and dV, with the mask's document table (burst_mask.docs) filled here.
 * Documents of lengths 1 and 2, fewer tokens than shards, random cuts; causal, windows, full;
 * soft-caps 5, 30 and 50 with scores large enough to bend tanh (and with documents together);
 * fp32 and fp16 inputs (rounded before the reference sees them; the results are fp32; fp16
 * ones take the cooperative-matrix kernels where the device has them); deterministic plans
 * and, where the device adds dQ by atomics, others. Each tensor must match the reference
 * within tol times its largest magnitude, 3e-5 (fp32 rounding is ~1e-6 of it) or 4e-3 with
 * fp16 inputs (matrix kernels round P to fp16): an ignored document or cap moves it by the
 * order of 1.
 * The kernel family is the environment's (tests/meson.build runs the scalar and the
 * register-tiled ones); exit 77 without a Vulkan device.
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

#include "../tools/ref.h"
#include "backend.h"
#include "harness_table.h"

enum {
    B = 2,
    MAXG = 8,
    MAXDOCS = 64
};

struct dcase {
    const char *name;
    int g;      /* shards */
    int zigzag; /* 0: contiguous shards */
    int64_t n;  /* tokens */
    int hq, hkv, d;
    burst_dtype_t dt;
    int causal;
    int64_t wl, wr;      /* -1: unbounded */
    const int64_t *lens; /* document lengths, or NULL */
    int64_t ndocs;       /* with lens; or random documents when lens is NULL */
    float softcap;       /* 0: none */
    double amp;          /* inputs uniform in [-amp, amp] */
    float scale;         /* 0: 1 / sqrt(d) */
    int det;             /* bwd_step's deterministic flag */
};

static void *be;

/* Shard r's posmap. */
static struct burst_posmap shard_posmap(const struct dcase *c, int r)
{
    struct burst_posmap m;
    memset(&m, 0, sizeof m);
    if (c->zigzag) { /* chunks r and 2G - 1 - r of n / 2G tokens */
        int64_t ch = c->n / (2 * c->g);
        m.nruns = 2;
        for (int u = 0; u < 2; u++) {
            m.run[u].local0 = u * ch;
            m.run[u].len = ch;
            m.run[u].global0 = (u == 0 ? r : 2 * c->g - 1 - r) * ch;
            m.run[u].stride = 1;
        }
    } else { /* contiguous: shard r holds [r n / G, (r + 1) n / G) */
        int64_t a = r * c->n / c->g, e = (r + 1) * c->n / c->g;
        m.nruns = 1;
        m.run[0].len = e - a;
        m.run[0].global0 = a;
        m.run[0].stride = 1;
    }
    return m;
}

/* The rows at positions of posmap m gathered from x [B, N, h, d] (doubles) into dt. */
static void *gather(const struct dcase *c, const struct burst_posmap *m, const double *x, int h)
{
    int64_t len = burst_posmap_len(m);
    size_t row = (size_t)h * (size_t)c->d, cnt = (size_t)B * (size_t)len * row;
    void *out = malloc(cnt * 4 + 4);
    assert_non_null(out);
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < len; i++) {
            int64_t p = burst_posmap_pos(m, i);
            for (size_t e = 0; e < row; e++)
                harness_store(c->dt, out, (size_t)(b * len + i) * row + e,
                              x[(size_t)(b * c->n + p) * row + e]);
        }
    return out;
}

/* Largest |x - ref| over the rows of posmap m of a [B, n, h, d] tensor (x: fp32 local rows),
 * and the largest |ref| into *scale. */
static double err_rows(const struct dcase *c, const struct burst_posmap *m, const float *x,
                       const double *ref, int h, double *scale)
{
    int64_t len = burst_posmap_len(m);
    size_t row = (size_t)h * (size_t)c->d;
    double e = 0.0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < len; i++) {
            int64_t p = burst_posmap_pos(m, i);
            for (size_t k = 0; k < row; k++) {
                double r = ref[(size_t)(b * c->n + p) * row + k];
                double v = x[(size_t)(b * len + i) * row + k];
                double dv = isnan(v) ? INFINITY : fabs(v - r);
                e = dv > e ? dv : e;
                *scale = fabs(r) > *scale ? fabs(r) : *scale;
            }
        }
    return e;
}

/* Document boundaries (ndocs + 1) of case c into docs; random cuts from st when c->lens is
 * NULL. Lengths go to lens. Returns the number of documents. */
static int64_t make_docs(const struct dcase *c, uint64_t *st, int64_t *docs, int64_t *lens)
{
    int64_t nd = c->ndocs;
    if (c->lens) {
        memcpy(lens, c->lens, (size_t)nd * sizeof *lens);
    } else { /* nd - 1 distinct cuts in [1, n - 1] */
        char used[4096] = {0};
        assert_true(c->n <= 4096 && nd <= c->n);
        for (int64_t t = 0; t < nd - 1;) {
            int64_t x = 1 + (int64_t)(harness_rng_next(st) % (uint64_t)(c->n - 1));
            if (!used[x]) {
                used[x] = 1;
                t++;
            }
        }
        int64_t prev = 0, t = 0;
        for (int64_t x = 1; x <= c->n; x++)
            if (x == c->n || used[x]) {
                lens[t++] = x - prev;
                prev = x;
            }
    }
    docs[0] = 0;
    for (int64_t t = 0; t < nd; t++)
        docs[t + 1] = docs[t] + lens[t];
    assert_int_equal(docs[nd], c->n);
    return nd;
}

static double *rand_d(uint64_t *st, const struct dcase *c, size_t cnt)
{
    double *x = malloc(cnt * sizeof *x + 8);
    assert_non_null(x);
    for (size_t i = 0; i < cnt; i++)
        x[i] = harness_round(c->dt, harness_rng_uniform(st, -c->amp, c->amp));
    return x;
}

static void run_case(void **state)
{
    const struct dcase *c = *state;
    const burst_dtype_t dt = c->dt;
    uint64_t st = harness_seed();
    for (const char *s = c->name; *s; s++)
        st = st * 31 + (uint64_t)*s;
    int64_t docs[MAXDOCS + 1], lens[MAXDOCS];
    int64_t nd = c->ndocs > 0 ? make_docs(c, &st, docs, lens) : 0;
    const float scale = c->scale > 0.0f ? c->scale : 1.0f / sqrtf((float)c->d);
    const size_t nq = (size_t)(B * c->n * c->hq * c->d), nk = (size_t)(B * c->n * c->hkv * c->d);
    double *q = rand_d(&st, c, nq), *k = rand_d(&st, c, nk), *v = rand_d(&st, c, nk);
    double *dout = rand_d(&st, c, nq);
    for (size_t i = 0; i < nk; i++) /* V and dO of magnitude ~1 whatever the scores' amp */
        v[i] = harness_round(dt, v[i] / c->amp);
    for (size_t i = 0; i < nq; i++)
        dout[i] = harness_round(dt, dout[i] / c->amp);

    /* the reference */
    struct ref_problem rp = {.batch = B,
                             .seq_len = c->n,
                             .q_heads = c->hq,
                             .kv_heads = c->hkv,
                             .head_dim = c->d,
                             .scale = scale,
                             .causal = c->causal,
                             .window_left = c->wl,
                             .window_right = c->wr,
                             .doc_lens = nd > 1 ? lens : NULL,
                             .num_docs = nd,
                             .softcap = c->softcap};
    double *ro = malloc(nq * 8), *rl = malloc((size_t)(B * c->hq * c->n) * 8);
    double *rdq = malloc(nq * 8), *rdk = malloc(nk * 8), *rdv = malloc(nk * 8);
    assert_true(ro && rl && rdq && rdk && rdv);
    ref_forward(&rp, q, k, v, ro, rl);
    ref_backward(&rp, q, k, v, dout, rdq, rdk, rdv);

    struct burst_mask mask = {.left = c->wl < 0 ? BURST_POS_INF : c->wl,
                              .right = c->wr < 0 ? BURST_POS_INF : c->wr,
                              .docs = nd > 1 ? docs : NULL,
                              .ndocs = nd};
    if (c->causal && mask.right > 0)
        mask.right = 0;
    struct burst_posmap pm[MAXG];
    void *lq[MAXG], *lk[MAXG], *lv[MAXG], *ldo[MAXG];
    float *o[MAXG], *lse[MAXG], *delta[MAXG], *dq[MAXG], *dk[MAXG], *dv[MAXG];
    struct burst_tensor tq[MAXG], tk[MAXG], tv[MAXG], tdo[MAXG];
    for (int r = 0; r < c->g; r++) {
        pm[r] = shard_posmap(c, r);
        int64_t len = burst_posmap_len(&pm[r]);
        size_t rq = (size_t)(B * len * c->hq), rk = (size_t)(B * len * c->hkv);
        lq[r] = gather(c, &pm[r], q, c->hq);
        lk[r] = gather(c, &pm[r], k, c->hkv);
        lv[r] = gather(c, &pm[r], v, c->hkv);
        ldo[r] = gather(c, &pm[r], dout, c->hq);
        o[r] = calloc(rq * (size_t)c->d + 1, 4);
        dq[r] = calloc(rq * (size_t)c->d + 1, 4);
        dk[r] = calloc(rk * (size_t)c->d + 1, 4);
        dv[r] = calloc(rk * (size_t)c->d + 1, 4);
        lse[r] = malloc(rq * 4 + 4);
        delta[r] = malloc(rq * 4 + 4);
        assert_true(o[r] && dq[r] && dk[r] && dv[r] && lse[r] && delta[r]);
        for (size_t i = 0; i < rq; i++)
            lse[r][i] = -INFINITY;
        tq[r] = burst_tensor_contiguous(lq[r], dt, B, len, c->hq, c->d);
        tk[r] = burst_tensor_contiguous(lk[r], dt, B, len, c->hkv, c->d);
        tv[r] = burst_tensor_contiguous(lv[r], dt, B, len, c->hkv, c->d);
        tdo[r] = burst_tensor_contiguous(ldo[r], dt, B, len, c->hq, c->d);
    }
    /* forward: every shard's queries against every shard's keys, merged */
    for (int r = 0; r < c->g; r++)
        for (int s = 0; s < c->g; s++) {
            struct burst_fwd_args a = {.q = &tq[r],
                                       .k = &tk[s],
                                       .v = &tv[s],
                                       .qpos = pm[r],
                                       .kpos = pm[s],
                                       .mask = mask,
                                       .scale = scale,
                                       .softcap = c->softcap,
                                       .o_acc = o[r],
                                       .lse_acc = lse[r]};
            assert_int_equal(burst_vk_backend_ops.attn.fwd_step(be, &a), BURST_OK);
        }
    /* backward with the final lse */
    for (int r = 0; r < c->g; r++) {
        int64_t len = burst_posmap_len(&pm[r]);
        struct burst_tensor ot =
            burst_tensor_contiguous(o[r], BURST_DTYPE_FP32, B, len, c->hq, c->d);
        assert_int_equal(burst_vk_backend_ops.attn.bwd_delta(be, &tdo[r], &ot, delta[r]), BURST_OK);
    }
    for (int r = 0; r < c->g; r++)
        for (int s = 0; s < c->g; s++) {
            struct burst_bwd_args a = {.q = &tq[r],
                                       .k = &tk[s],
                                       .v = &tv[s],
                                       .dout = &tdo[r],
                                       .lse = lse[r],
                                       .delta = delta[r],
                                       .qpos = pm[r],
                                       .kpos = pm[s],
                                       .mask = mask,
                                       .scale = scale,
                                       .softcap = c->softcap,
                                       .dq = dq[r],
                                       .dk = dk[s],
                                       .dv = dv[s],
                                       .deterministic = c->det};
            assert_int_equal(burst_vk_backend_ops.attn.bwd_step(be, &a), BURST_OK);
        }

    /* compare; lse against its own scale plus 1 (it may be near 0) */
    /* fp16 inputs: a GPU's matrix kernels round P (and dS) to fp16 before their products */
    const double tol = dt == BURST_DTYPE_FP32 ? 3e-5 : 4e-3;
    double e[5] = {0}, sc[5] = {0};
    static const char *const names[5] = {"O", "lse", "dQ", "dK", "dV"};
    for (int r = 0; r < c->g; r++) {
        int64_t len = burst_posmap_len(&pm[r]);
        double x;
        x = err_rows(c, &pm[r], o[r], ro, c->hq, &sc[0]);
        e[0] = x > e[0] ? x : e[0];
        x = err_rows(c, &pm[r], dq[r], rdq, c->hq, &sc[2]);
        e[2] = x > e[2] ? x : e[2];
        x = err_rows(c, &pm[r], dk[r], rdk, c->hkv, &sc[3]);
        e[3] = x > e[3] ? x : e[3];
        x = err_rows(c, &pm[r], dv[r], rdv, c->hkv, &sc[4]);
        e[4] = x > e[4] ? x : e[4];
        for (int64_t b = 0; b < B; b++)
            for (int h = 0; h < c->hq; h++)
                for (int64_t i = 0; i < len; i++) {
                    double rv = rl[(b * c->hq + h) * c->n + burst_posmap_pos(&pm[r], i)];
                    double v2 = lse[r][(b * c->hq + h) * len + i];
                    double dv2 = isnan(v2) ? INFINITY : fabs(v2 - rv);
                    e[1] = dv2 > e[1] ? dv2 : e[1];
                    sc[1] = fabs(rv) + 1.0 > sc[1] ? fabs(rv) + 1.0 : sc[1];
                }
    }
    int ok = 1;
    for (int t = 0; t < 5; t++) {
        double rel = e[t] / (sc[t] > 0.0 ? sc[t] : 1.0);
        printf("  %-3s max err %.3g of scale %.3g: %.3g (tol %.0e)\n", names[t], e[t], sc[t], rel,
               tol);
        ok &= rel <= tol;
    }
    for (int r = 0; r < c->g; r++) {
        free(lq[r]);
        free(lk[r]);
        free(lv[r]);
        free(ldo[r]);
        free(o[r]);
        free(lse[r]);
        free(delta[r]);
        free(dq[r]);
        free(dk[r]);
        free(dv[r]);
    }
    free(q);
    free(k);
    free(v);
    free(dout);
    free(ro);
    free(rl);
    free(rdq);
    free(rdk);
    free(rdv);
    assert_true(ok);
}

static const int64_t short_docs[] = {1, 2, 1, 3, 40, 2, 1, 14};     /* 64 */
static const int64_t tiny_first[] = {2, 1, 1, 1, 1, 50, 8};         /* 64: < G of them short */
static const int64_t uneven[] = {37, 1, 50, 2, 6};                  /* 96 */
static const int64_t two_docs[] = {29, 43};                         /* 72 */
static const int64_t ones[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}; /* 12 tokens, 12 docs */

#define DC_(nm, G, zz, N, HQ, HKV, D, DT)                                                          \
    .name = (nm), .g = (G), .zigzag = (zz), .n = (N), .hq = (HQ), .hkv = (HKV), .d = (D),          \
    .dt = (DT), .wl = -1, .wr = -1, .amp = 1.0, .det = 1

HARNESS_TABLE_BEGIN
static const struct dcase cases[] = {
    /* documents */
    {DC_("docs_causal_zigzag_g4", 4, 1, 64, 4, 2, 32, BURST_DTYPE_FP32), .causal = 1,
     .lens = short_docs, .ndocs = 8},
    {DC_("docs_full_g3", 3, 0, 96, 2, 2, 16, BURST_DTYPE_FP32), .lens = uneven, .ndocs = 5},
    {DC_("docs_window_g2", 2, 0, 72, 2, 1, 32, BURST_DTYPE_FP32), .lens = two_docs, .ndocs = 2,
     .wl = 9, .wr = 3},
    {DC_("docs_short_g8_causal", 8, 1, 64, 2, 2, 16, BURST_DTYPE_FP32), .causal = 1,
     .lens = tiny_first, .ndocs = 7},
    {DC_("docs_all_ones_g4", 4, 0, 12, 2, 1, 16, BURST_DTYPE_FP32), .lens = ones, .ndocs = 12},
    {DC_("docs_random_g4_fp16", 4, 1, 128, 4, 2, 32, BURST_DTYPE_FP16), .causal = 1, .ndocs = 9},
    {DC_("docs_window_g2_fp16", 2, 0, 72, 2, 2, 32, BURST_DTYPE_FP16), .lens = two_docs, .ndocs = 2,
     .wl = 30, .wr = 7},
    {DC_("docs_random_g3_window", 3, 0, 150, 2, 2, 32, BURST_DTYPE_FP32), .ndocs = 16, .wl = 20,
     .wr = 0},
    {DC_("docs_causal_atomic_g2", 2, 1, 64, 4, 1, 32, BURST_DTYPE_FP32), .causal = 1,
     .lens = short_docs, .ndocs = 8, .det = 0},
    /* soft-caps: scores up to ~ amp^2 d scale, far into tanh's bend for the smaller caps */
    {DC_("cap5_full_g1", 1, 0, 80, 2, 2, 32, BURST_DTYPE_FP32), .softcap = 5.0f, .amp = 3.0},
    {DC_("cap30_causal_g2", 2, 1, 96, 4, 2, 32, BURST_DTYPE_FP32), .causal = 1, .softcap = 30.0f,
     .amp = 3.0, .scale = 1.0f},
    {DC_("cap50_window_g3_fp16", 3, 0, 90, 2, 1, 32, BURST_DTYPE_FP16), .softcap = 50.0f,
     .amp = 3.0, .scale = 1.0f, .wl = 12, .wr = 5},
    {DC_("cap5_atomic_g2", 2, 0, 64, 2, 2, 16, BURST_DTYPE_FP32), .softcap = 5.0f, .amp = 2.0,
     .causal = 1, .det = 0},
    {DC_("cap5_causal_g2_fp16", 2, 1, 96, 4, 2, 32, BURST_DTYPE_FP16), .causal = 1, .softcap = 5.0f,
     .amp = 3.0},
    /* both */
    {DC_("docs_cap30_causal_g4", 4, 1, 64, 4, 2, 32, BURST_DTYPE_FP32), .causal = 1,
     .lens = short_docs, .ndocs = 8, .softcap = 30.0f, .amp = 3.0, .scale = 1.0f},
};
HARNESS_TABLE_END

int main(void)
{
    printf("seed: BURST_TEST_SEED=%llu\n", (unsigned long long)harness_seed());
    struct burst_context_params cp = burst_context_params_default();
    cp.backend = "vulkan"; /* by name: lavapipe too */
    if (burst_vk_backend_ops.core.create(&cp, &be) != BURST_OK) {
        printf("no Vulkan device: %s\n", burst_last_error());
        return 77;
    }
    struct CMUnitTest tests[sizeof cases / sizeof *cases];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        tests[i] = (struct CMUnitTest){cases[i].name, run_case, NULL, NULL, (void *)&cases[i]};
    int rc = cmocka_run_group_tests_name("vk_docs", tests, NULL, NULL);
    burst_vk_backend_ops.core.destroy(be);
    return rc;
}
