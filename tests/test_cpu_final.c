/*
 * tests/test_cpu_final.c - the cpu backend's fwd_final (runtime/cpu/cpu_fwd.c) called directly:
 * the one-step forward writing O and lse itself must give bitwise what fwd_step into fresh
 * accumulators (o_acc = 0, lse_acc = -inf) followed by copy() gives, with the kernel variant
 * BURST_CPU_ISA names (meson runs it once per variant as cpu_final_isa_<variant>; one this
 * build or cpu cannot run skips with exit 77).
 *
 * Cases: fp32, bf16 and fp16; head dims 40 (the avx2 kernels on an AVX-512 cpu), 64 and 256;
 * batch 1 and 2, GQA; masks: causal with the keys placed after the first 300 queries (so that a
 * whole work item of 192 rows and part of the next have no key: O = 0, lse = -inf), causal over
 * seven packed documents of lengths 1 to 290, a two-sided window, and no mask; soft-capping.
 * O is a strided view whose gaps between heads and rows are poisoned and must stay so; lse
 * starts as NaN bits. The values themselves are checked against the fp64 reference through the
 * public API by the attention tests, whose one-rank calls run fwd_final.
 * Inputs are fresh random U(-1, 1) values each run; reproduce a failure with
 * BURST_TEST_SEED=<seed> (printed).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "burst/burst.h"
#include "cpu/cpu_convert.h"
#include "cpu/cpu_internal.h"

static uint64_t rng_state;

static double urand(void) /* U(-1, 1), splitmix64 */
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* seven documents over positions 0..449 */
static const int64_t docs[8] = {0, 1, 3, 20, 56, 156, 160, 450};

struct fcase {
    const char *mask; /* "causal_late_keys", "docs", "window", "none" */
    burst_dtype_t dt;
    int64_t batch, n, hq, hkv, d;
    float softcap;
};

/* [B, n, H, d] of dtype dt with gaps between heads (4 elements) and rows (8) */
static struct burst_tensor strided(void *data, burst_dtype_t dt, int64_t b, int64_t n, int64_t h,
                                   int64_t d)
{
    struct burst_tensor t = burst_tensor_contiguous(data, dt, b, n, h, d);
    t.stride[2] = d + 4;
    t.stride[1] = h * (d + 4) + 8;
    t.stride[0] = n * t.stride[1];
    return t;
}

static void *random_tensor(burst_dtype_t dt, size_t count)
{
    const size_t es = dt == BURST_DTYPE_FP32 ? 4 : 2;
    unsigned char *p = malloc(count * es);
    for (size_t i = 0; p && i < count; i++) {
        const float x = (float)urand();
        if (dt == BURST_DTYPE_FP32)
            ((float *)p)[i] = x;
        else
            ((uint16_t *)p)[i] =
                dt == BURST_DTYPE_FP16 ? burst_cpu_f32_to_f16(x) : burst_cpu_f32_to_bf16(x);
    }
    return p;
}

/* 0: fwd_final as fwd_step + copy, bitwise; 1: not. */
static int one_case(void *be, const struct fcase *c)
{
    const struct burst_backend_ops *ops = &burst_cpu_backend_ops;
    const int64_t B = c->batch, n = c->n, es = c->dt == BURST_DTYPE_FP32 ? 4 : 2;
    void *qd = random_tensor(c->dt, (size_t)(B * n * c->hq * c->d));
    void *kd = random_tensor(c->dt, (size_t)(B * n * c->hkv * c->d));
    void *vd = random_tensor(c->dt, (size_t)(B * n * c->hkv * c->d));
    const struct burst_tensor q = burst_tensor_contiguous(qd, c->dt, B, n, c->hq, c->d);
    const struct burst_tensor k = burst_tensor_contiguous(kd, c->dt, B, n, c->hkv, c->d);
    const struct burst_tensor v = burst_tensor_contiguous(vd, c->dt, B, n, c->hkv, c->d);
    const struct burst_tensor shape = strided(NULL, c->dt, B, n, c->hq, c->d);
    const size_t obytes = (size_t)(shape.stride[0] * B * es), nl = (size_t)(B * c->hq * n);
    const size_t nacc = (size_t)(B * n * c->hq * c->d);
    unsigned char *got = malloc(obytes), *want = malloc(obytes), *poison = malloc(obytes);
    float *lgot = malloc(nl * 4), *lwant = malloc(nl * 4), *oacc = calloc(nacc, 4);
    if (!qd || !kd || !vd || !got || !want || !poison || !lgot || !lwant || !oacc) {
        printf("test_cpu_final: out of memory\n");
        exit(1);
    }
    memset(poison, 0x7d, obytes);
    memcpy(got, poison, obytes);
    memcpy(want, poison, obytes);
    memset(lgot, 0xff, nl * 4); /* NaN bits */
    for (size_t i = 0; i < nl; i++)
        lwant[i] = -INFINITY;

    struct burst_fwd_args a = {.q = &q, .k = &k, .v = &v, .scale = 0.3f, .softcap = c->softcap};
    a.qpos.nruns = a.kpos.nruns = 1;
    a.qpos.run[0].len = a.kpos.run[0].len = n;
    a.qpos.run[0].stride = a.kpos.run[0].stride = 1;
    a.mask.left = a.mask.right = BURST_POS_INF;
    if (!strcmp(c->mask, "causal_late_keys")) {
        a.kpos.run[0].global0 = 300;
        a.mask.right = 0;
    } else if (!strcmp(c->mask, "docs")) {
        a.mask.right = 0;
        a.mask.docs = docs;
        a.mask.ndocs = 7;
    } else if (!strcmp(c->mask, "window")) {
        a.mask.left = 30;
        a.mask.right = 5;
    }
    struct burst_tensor o = strided(got, c->dt, B, n, c->hq, c->d);
    struct burst_tensor w = strided(want, c->dt, B, n, c->hq, c->d);
    const struct burst_tensor oa =
        burst_tensor_contiguous(oacc, BURST_DTYPE_FP32, B, n, c->hq, c->d);
    burst_status_t s1 = ops->attn.fwd_final(be, &a, &o, lgot);
    a.o_acc = oacc;
    a.lse_acc = lwant;
    burst_status_t s2 = ops->attn.fwd_step(be, &a);
    if (s2 == BURST_OK)
        s2 = ops->elem.copy(be, &w, &oa);
    int bad = s1 != BURST_OK || s2 != BURST_OK || memcmp(got, want, obytes) != 0 ||
              memcmp(lgot, lwant, nl * 4) != 0;
    /* the gaps between heads and rows are the caller's: still poison */
    for (size_t e = 0; !bad && e < obytes / (size_t)es; e++) {
        const int64_t rem = (int64_t)e % shape.stride[1];
        if ((rem / shape.stride[2] >= c->hq || rem % shape.stride[2] >= c->d) &&
            memcmp(got + e * (size_t)es, poison, (size_t)es) != 0)
            bad = 1;
    }
    printf("[%s] %s, dtype %d, B %lld, d %lld, Hq/Hkv %lld/%lld, cap %g (status %d, %d)\n",
           bad ? "FAIL" : "ok", c->mask, (int)c->dt, (long long)B, (long long)c->d,
           (long long)c->hq, (long long)c->hkv, (double)c->softcap, (int)s1, (int)s2);
    free(qd), free(kd), free(vd), free(got), free(want), free(poison);
    free(lgot), free(lwant), free(oacc);
    return bad;
}

int main(void)
{
    const char *env = getenv("BURST_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL);
    rng_state = seed;
    printf("test_cpu_final: seed %llu\n", (unsigned long long)seed);
    const char *variant = getenv("BURST_TEST_ISA_VARIANT"); /* meson's cpu_final_isa_<variant> */
    if (variant && *variant && burst_cpu_isa_forced_is_auto()) {
        printf("test_cpu_final: BURST_CPU_ISA names this cpu's default kernels, which the "
               "unforced run tests: skipped\n");
        return 77;
    }
    struct burst_context_params p = burst_context_params_default();
    p.num_threads = 2;
    void *be = NULL;
    burst_status_t st = burst_cpu_backend_ops.core.create(&p, &be);
    if (st == BURST_ERR_UNSUPPORTED) {
        printf("test_cpu_final: %s: skipped\n", burst_last_error());
        return 77;
    }
    if (st != BURST_OK) {
        printf("test_cpu_final: cpu backend: %s\n", burst_last_error());
        return 1;
    }
    static const char *masks[4] = {"causal_late_keys", "docs", "window", "none"};
    static const burst_dtype_t dts[3] = {BURST_DTYPE_FP32, BURST_DTYPE_BF16, BURST_DTYPE_FP16};
    static const int64_t ds[3] = {40, 64, 256};
    int failed = 0, cases = 0;
    for (int m = 0; m < 4; m++)
        for (int t = 0; t < 3; t++) {
            const struct fcase c = {.mask = masks[m],
                                    .dt = dts[t],
                                    .batch = 1 + (m + t) % 2,
                                    .n = 450,
                                    .hq = 4,
                                    .hkv = t == 1 ? 1 : 2,
                                    .d = ds[(m + t) % 3],
                                    .softcap = m == 2 ? 2.5f : 0.0f};
            failed |= one_case(be, &c), cases++;
        }
    burst_cpu_backend_ops.core.destroy(be);
    printf("test_cpu_final: %d cases, %s\n", cases, failed ? "FAILED" : "ok");
    return failed;
}
