/*
 * tests/test_cpu_decode.c - the cpu backend's decode_step (runtime/cpu/cpu_decode.c) called
 * directly, against a plain fp64 reference, with the kernel variant BURST_CPU_ISA names (meson
 * runs it once per variant as cpu_decode_isa_<variant>; one this build or cpu cannot run skips
 * with exit 77).
 *
 * Cases: t = 1..16 new queries, each with several combinations of dtype (fp32, bf16, fp16),
 * head dim (64, 80, 128), heads (one, equal, GQA groups of 2, 3 and 4), block length (1, 7, 13,
 * 16), key count (only the new tokens, one tile, around a work item's 384 keys, several items,
 * and one context long enough for longer items), tail (the new tokens all here, none of them
 * here, some of them here), soft-capping and the running (o_acc, lse_acc) fresh or holding an
 * earlier partial result. The sequence's blocks are a shuffled subset of the pool; every pool
 * row that is not one of its keys holds NaN, so a read of a wrong row shows.
 * The reference takes the stored (rounded) inputs, computes each row's softmax over its allowed
 * keys (j < tail or j - tail <= i) in fp64 and merges it into the initial (o, lse) by the
 * log-sum-exp rule. Inputs are U(-1, 1), so |o| <= 1 and the kernel's fp32 sums and vector exp
 * stay far below the tolerance, 1e-4 absolute on o and on lse; a masking or indexing error is of
 * order 0.1. A call on a one-thread backend must give bitwise the same o and lse as on a
 * three-thread one. A call with no key leaves (o, lse) untouched.
 * Reproduce a failure with BURST_TEST_SEED=<seed> (printed).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "burst/burst.h"
#include "cpu/cpu_convert.h"
#include "cpu/cpu_internal.h"

#define TOL 1e-4

static uint64_t rng_state;
static double max_err; /* the largest error of a passing case */
static uint64_t rnd_u64(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static int64_t rnd(int64_t n)
{
    return (int64_t)(rnd_u64() % (uint64_t)n);
}
static double unif(void)
{
    return (double)(rnd_u64() >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

struct dcase {
    burst_dtype_t dt;
    int64_t t, hq, hkv, d, bl, nkeys, tail;
    float softcap;
    int prior; /* (o, lse) hold an earlier partial result */
};

/* Store x rounded to dt at element i of base; return the stored value. */
static double put(burst_dtype_t dt, void *base, size_t i, double x)
{
    if (dt == BURST_DTYPE_FP32) {
        ((float *)base)[i] = (float)x;
        return (double)(float)x;
    }
    uint16_t *h = base;
    if (dt == BURST_DTYPE_BF16) {
        h[i] = burst_cpu_f32_to_bf16((float)x);
        return burst_cpu_bf16_to_f32(h[i]);
    }
    h[i] = burst_cpu_f32_to_f16((float)x);
    return burst_cpu_f16_to_f32(h[i]);
}

struct dbufs {
    void *q, *kp, *vp;
    double *qd, *kd, *vd; /* stored values: [t][hq][d], [nkeys][hkv][d] */
    int32_t *blocks;
    float *o0, *lse0;
};

static void bufs_free(struct dbufs *b)
{
    free(b->q), free(b->kp), free(b->vp), free(b->qd), free(b->kd), free(b->vd);
    free(b->blocks), free(b->o0), free(b->lse0);
}

/* Random inputs of case c: q, the pools (NaN outside the sequence's keys), the initial state. */
static int bufs_make(const struct dcase *c, struct dbufs *b)
{
    const size_t es = c->dt == BURST_DTYPE_FP32 ? 4 : 2, d = (size_t)c->d, w = (size_t)c->hkv * d;
    const int64_t nb = (c->nkeys + c->bl - 1) / c->bl, pool = nb + 3;
    const size_t prow = (size_t)(pool * c->bl) * w, nq = (size_t)(c->t * c->hq) * d;
    memset(b, 0, sizeof *b);
    b->q = malloc(nq * es);
    b->kp = malloc(prow * es);
    b->vp = malloc(prow * es);
    b->qd = malloc(nq * sizeof(double));
    b->kd = malloc((size_t)c->nkeys * w * sizeof(double) + 1);
    b->vd = malloc((size_t)c->nkeys * w * sizeof(double) + 1);
    b->blocks = malloc((size_t)pool * sizeof(int32_t));
    b->o0 = malloc(nq * sizeof(float));
    b->lse0 = malloc((size_t)(c->t * c->hq) * sizeof(float));
    if (!b->q || !b->kp || !b->vp || !b->qd || !b->kd || !b->vd || !b->blocks || !b->o0 || !b->lse0)
        return -1;
    for (size_t i = 0; i < prow; i++) {
        put(c->dt, b->kp, i, NAN);
        put(c->dt, b->vp, i, NAN);
    }
    for (int64_t i = 0; i < pool; i++) /* a shuffled subset of the pool */
        b->blocks[i] = (int32_t)i;
    for (int64_t i = pool - 1; i > 0; i--) {
        int64_t k = rnd(i + 1);
        int32_t x = b->blocks[i];
        b->blocks[i] = b->blocks[k], b->blocks[k] = x;
    }
    for (size_t i = 0; i < nq; i++)
        b->qd[i] = put(c->dt, b->q, i, unif());
    for (int64_t j = 0; j < c->nkeys; j++) {
        size_t row = (size_t)b->blocks[j / c->bl] * (size_t)c->bl + (size_t)(j % c->bl);
        for (size_t x = 0; x < w; x++) {
            b->kd[(size_t)j * w + x] = put(c->dt, b->kp, row * w + x, unif());
            b->vd[(size_t)j * w + x] = put(c->dt, b->vp, row * w + x, unif());
        }
    }
    for (size_t i = 0; i < nq; i++)
        b->o0[i] = c->prior ? (float)unif() : 0.0f;
    for (int64_t i = 0; i < c->t * c->hq; i++)
        b->lse0[i] = c->prior ? (float)(3.0 * unif() + 2.0) : -INFINITY;
    return 0;
}

/* decode_step of case c on backend be into (o, lse), starting from the initial state. */
static burst_status_t run_decode(void *be, const struct dcase *c, const struct dbufs *b, float *o,
                                 float *lse)
{
    const size_t nq = (size_t)(c->t * c->hq * c->d);
    memcpy(o, b->o0, nq * sizeof(float));
    memcpy(lse, b->lse0, (size_t)(c->t * c->hq) * sizeof(float));
    struct burst_tensor q = {.data = b->q,
                             .dtype = c->dt,
                             .shape = {1, c->t, c->hq, c->d},
                             .stride = {c->t * c->hq * c->d, c->hq * c->d, c->d, 1}};
    struct burst_decode_args a = {.q = &q,
                                  .k_pool = b->kp,
                                  .v_pool = b->vp,
                                  .block_len = c->bl,
                                  .hkv = (int)c->hkv,
                                  .blocks = b->blocks,
                                  .blocks_host = b->blocks,
                                  .nkeys = c->nkeys,
                                  .tail = c->tail,
                                  .scale = (float)(1.0 / sqrt((double)c->d)),
                                  .softcap = c->softcap,
                                  .o_acc = o,
                                  .lse_acc = lse};
    return burst_cpu_backend_ops.attn.decode_step(be, &a);
}

/* The largest error of (o, lse) against the fp64 reference (INFINITY for a NaN). */
static double check(const struct dcase *c, const struct dbufs *b, const float *o, const float *lse)
{
    const int64_t d = c->d, w = c->hkv * d, g = c->hq / c->hkv;
    const double scale = 1.0 / sqrt((double)d);
    double worst = 0.0, *s = malloc(((size_t)c->nkeys + 1) * sizeof(double));
    double *acc = malloc((size_t)d * sizeof(double));
    for (int64_t i = 0; i < c->t; i++)
        for (int64_t h = 0; h < c->hq; h++) {
            const double *qr = b->qd + (i * c->hq + h) * d;
            const int64_t kv = h / g, row = i * c->hq + h;
            double mx = -INFINITY;
            int64_t n = 0;
            for (int64_t j = 0; j < c->nkeys && (j < c->tail || j - c->tail <= i); j++, n++) {
                double x = 0.0;
                for (int64_t e = 0; e < d; e++)
                    x += qr[e] * b->kd[j * w + kv * d + e];
                x *= scale;
                if (c->softcap > 0.0f)
                    x = c->softcap * tanh(x / c->softcap);
                s[j] = x;
                mx = x > mx ? x : mx;
            }
            double l = 0.0, lo = b->lse0[h * c->t + i], ln = lo;
            memset(acc, 0, (size_t)d * sizeof(double));
            for (int64_t j = 0; j < n; j++) {
                double p = exp(s[j] - mx);
                l += p;
                for (int64_t e = 0; e < d; e++)
                    acc[e] += p * b->vd[j * w + kv * d + e];
            }
            if (n > 0) {
                double lr = mx + log(l);
                ln = lo == -INFINITY ? lr : fmax(lo, lr) + log1p(exp(-fabs(lo - lr)));
            }
            for (int64_t e = 0; e < d; e++) {
                double r = b->o0[row * d + e];
                if (n > 0)
                    r = (lo == -INFINITY ? 0.0 : exp(lo - ln) * r) + exp(mx - ln) * acc[e];
                double err = fabs((double)o[row * d + e] - r);
                worst = isnan(err) ? INFINITY : fmax(worst, err);
            }
            double err = n > 0 ? fabs((double)lse[h * c->t + i] - ln)
                               : ((float)ln == lse[h * c->t + i] ? 0.0 : INFINITY);
            worst = isnan(err) ? INFINITY : fmax(worst, err);
        }
    free(s), free(acc);
    return worst;
}

static const char *dt_name(burst_dtype_t dt)
{
    return dt == BURST_DTYPE_FP32 ? "fp32" : dt == BURST_DTYPE_BF16 ? "bf16" : "fp16";
}

/* Run case c on both backends; 0 when it passes. */
static int one_case(void *be1, void *be3, const struct dcase *c)
{
    struct dbufs b = {0};
    const size_t nq = (size_t)(c->t * c->hq * c->d), nl = (size_t)(c->t * c->hq);
    float *o1 = malloc(nq * sizeof(float)), *o3 = malloc(nq * sizeof(float));
    float *l1 = malloc(nl * sizeof(float)), *l3 = malloc(nl * sizeof(float));
    int bad = !o1 || !o3 || !l1 || !l3 || bufs_make(c, &b) != 0;
    const char *why = bad ? "out of memory" : NULL;
    double worst = 0.0;
    if (!bad && (run_decode(be3, c, &b, o3, l3) != BURST_OK ||
                 run_decode(be1, c, &b, o1, l1) != BURST_OK)) {
        bad = 1, why = "decode_step failed";
    }
    if (!bad) {
        worst = check(c, &b, o3, l3);
        if (!(worst <= TOL))
            bad = 1, why = "error above tolerance";
        else if (memcmp(o1, o3, nq * sizeof(float)) != 0 || memcmp(l1, l3, nl * sizeof(float)) != 0)
            bad = 1, why = "1 and 3 threads differ";
        else
            max_err = fmax(max_err, worst);
    }
    if (bad)
        printf("FAIL %s t=%lld Hq=%lld Hkv=%lld d=%lld block_len=%lld nkeys=%lld tail=%lld "
               "softcap=%g prior=%d: %s (error %g)\n",
               dt_name(c->dt), (long long)c->t, (long long)c->hq, (long long)c->hkv,
               (long long)c->d, (long long)c->bl, (long long)c->nkeys, (long long)c->tail,
               (double)c->softcap, c->prior, why, worst);
    bufs_free(&b);
    free(o1), free(o3), free(l1), free(l3);
    return bad;
}

int main(void)
{
    const char *env = getenv("BURST_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 10) : 0x5eed0001ull;
    rng_state = seed;
    printf("test_cpu_decode: seed %llu\n", (unsigned long long)seed);
    const char *variant = getenv("BURST_TEST_ISA_VARIANT"); /* meson's cpu_decode_isa_<variant> */
    if (variant && *variant && burst_cpu_isa_forced_is_auto()) {
        printf("test_cpu_decode: BURST_CPU_ISA names this cpu's default kernels, which the "
               "unforced run tests: skipped\n");
        return 77;
    }
    struct burst_context_params p1 = burst_context_params_default(), p3 = p1;
    p1.num_threads = 1, p3.num_threads = 3;
    void *be1 = NULL, *be3 = NULL;
    burst_status_t st = burst_cpu_backend_ops.core.create(&p1, &be1);
    if (st == BURST_ERR_UNSUPPORTED) {
        printf("test_cpu_decode: %s: skipped\n", burst_last_error());
        return 77;
    }
    if (st != BURST_OK || burst_cpu_backend_ops.core.create(&p3, &be3) != BURST_OK) {
        printf("test_cpu_decode: cpu backend: %s\n", burst_last_error());
        return 1;
    }
    static const burst_dtype_t dts[3] = {BURST_DTYPE_FP32, BURST_DTYPE_BF16, BURST_DTYPE_FP16};
    static const int64_t ds[3] = {64, 80, 128}, bls[4] = {1, 7, 13, 16};
    static const int64_t heads[5][2] = {{1, 1}, {4, 4}, {8, 2}, {6, 2}, {3, 1}};
    static const int64_t keys[5] = {50, 96, 385, 1000, 2100};
    int failed = 0, cases = 0;
    for (int64_t t = 1; t <= 16; t++)
        for (int v = 0; v < 4; v++) {
            struct dcase c = {.dt = dts[(t + v) % 3],
                              .t = t,
                              .hq = heads[(t + v) % 5][0],
                              .hkv = heads[(t + v) % 5][1],
                              .d = ds[(t + 2 * v) % 3],
                              .bl = bls[(3 * t + v) % 4],
                              .softcap = (t + v) % 2 ? 2.5f : 0.0f,
                              .prior = v % 2};
            c.nkeys = v == 0 ? t : keys[rnd(5)] + rnd(8);
            const int mode = v == 0 ? 0 : (int)rnd(3);
            c.tail = mode == 0 ? c.nkeys - t : mode == 1 ? c.nkeys : c.nkeys - t + 1 + rnd(t);
            failed |= one_case(be1, be3, &c), cases++;
        }
    /* a long context: work items of more than 384 keys */
    struct dcase lc = {.dt = BURST_DTYPE_BF16,
                       .t = 2,
                       .hq = 2,
                       .hkv = 1,
                       .d = 64,
                       .bl = 16,
                       .nkeys = 100003,
                       .tail = 100001,
                       .softcap = 0.0f,
                       .prior = 1};
    failed |= one_case(be1, be3, &lc), cases++;
    /* no key: (o, lse) untouched */
    struct dcase nk = {.dt = BURST_DTYPE_FP32,
                       .t = 3,
                       .hq = 4,
                       .hkv = 2,
                       .d = 64,
                       .bl = 7,
                       .nkeys = 0,
                       .tail = 0,
                       .softcap = 0.0f,
                       .prior = 1};
    failed |= one_case(be1, be3, &nk), cases++;
    burst_cpu_backend_ops.core.destroy(be1);
    burst_cpu_backend_ops.core.destroy(be3);
    printf("test_cpu_decode: %d cases, largest error %.3g, %s\n", cases, max_err,
           failed ? "FAILED" : "ok");
    return failed;
}
