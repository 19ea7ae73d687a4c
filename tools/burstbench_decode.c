/*
 * tools/burstbench_decode.c - speed of the cuda backend's decode step over a paged key/value
 * cache (backend op decode_step, runtime/backend.h): one rank, batch 1, t new queries against a
 * context of N cached keys in blocks of block_len rows (the blocks in a shuffled order in the
 * pool), tensors in device memory. A program, not a test.
 *
 * For every (N, t, block_len) it times --iters back-to-back steps between two CUDA events on the
 * calling thread's stream (after --warmup untimed ones) and reports microseconds per step, the
 * bandwidth of the keys and values read (2 N Hkv d bytes-per-element / step time) and that as a
 * percentage of the device's copy bandwidth, measured here first: a device-to-device cudaMemcpy
 * of a 1 GiB buffer (bytes read + written / time). Contexts whose K and V fit in the L2 cache run
 * from it on reruns and may exceed the copy bandwidth. The steps start from fresh accumulators
 * each time only in the check; timed steps merge into the same ones (the work is the same).
 *
 * Every size up to --check-max keys is checked: rows of the first and last query heads against
 * attention computed in fp64 on the host from the same (rounded) inputs; max_err is
 * max |O - ref| / max |ref| over those rows, FAIL (exit 1 at the end) past the dtype's bound
 * (2^-7 bf16, 2^-10 fp16, 1e-4 fp32).
 *
 *   burstbench_decode [--ctx 8192,...,1048576] [--t 1,4] [--block-lens 256,16] [--hq 32]
 *                     [--hkv 8] [--d 128] [--dtype bf16] [--iters 50] [--warmup 5]
 *                     [--check-max 131072] [--csv FILE]
 * Prints a table and writes CSV (impl,dtype,ctx,t,block_len,hq,hkv,d,us_per_step,gbps,
 * pct_peak,peak_gbps,max_err); tools/../scripts/gpu/decode_torch.py prints it beside PyTorch.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "burst/burst.h"
#include "bench_util.h"
#include "context_internal.h"

static int cuda_ok(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 1;
    fprintf(stderr, "burstbench_decode: %s: %s\n", what, cudaGetErrorString(e));
    return 0;
}

/* Device copy bandwidth in GB/s: a 1 GiB device-to-device cudaMemcpy, best of 5 (read + write). */
static double peak_gbps(void)
{
    const size_t bytes = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    cudaEvent_t e0, e1;
    double best = 0.0;
    if (!cuda_ok(cudaMalloc(&a, bytes), "cudaMalloc") ||
        !cuda_ok(cudaMalloc(&b, bytes), "cudaMalloc"))
        goto out;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int r = 0; r < 6; r++) {
        cudaEventRecord(e0, cudaStreamPerThread);
        cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, cudaStreamPerThread);
        cudaEventRecord(e1, cudaStreamPerThread);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        const double g = 2.0 * (double)bytes / (ms * 1e-3) / 1e9;
        if (r > 0 && g > best) /* the first warms up */
            best = g;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
out:
    cudaFree(a);
    cudaFree(b);
    return best;
}

static double rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0;
}

/* One size's inputs: pools (K, V) of nblocks blocks in a shuffled table, q, accumulators. */
struct bench_case {
    struct burst_context *ctx;
    burst_dtype_t dt;
    size_t es;
    long n, t, bl, hq, hkv, d, nblocks;
    int32_t *table;
    void *kp, *vp, *qd, *tdev;
    void *qh; /* host copy of q */
    float *o, *lse;
    struct burst_tensor q;
};

/* Fill device memory with random values of dtype dt (a 64 MiB host pattern, repeated). */
static int fill_random(void *dst, size_t bytes, burst_dtype_t dt, uint64_t seed)
{
    const size_t chunk = (size_t)64 << 20;
    const size_t n = chunk < bytes ? chunk : bytes;
    unsigned char *h = malloc(n);
    if (!h)
        return 0;
    const size_t es = burst_dtype_size(dt);
    for (size_t i = 0; i < n / es; i++) {
        const float x = (float)rnd(&seed);
        if (dt == BURST_DTYPE_FP32) {
            memcpy(h + 4 * i, &x, 4);
        } else {
            uint32_t u;
            memcpy(&u, &x, 4);
            uint16_t w =
                dt == BURST_DTYPE_BF16 ? (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) : 0;
            if (dt == BURST_DTYPE_FP16) { /* |x| < 1: a normal half, truncated is fine here */
                const int ex = (int)((u >> 23) & 0xff) - 127 + 15;
                w = (uint16_t)((u >> 16) & 0x8000u);
                if (ex > 0)
                    w |= (uint16_t)((ex << 10) | ((u >> 13) & 0x3ffu));
            }
            memcpy(h + 2 * i, &w, 2);
        }
    }
    int ok = 1;
    for (size_t off = 0; ok && off < bytes; off += n)
        ok = cuda_ok(cudaMemcpy((char *)dst + off, h, bytes - off < n ? bytes - off : n,
                                cudaMemcpyHostToDevice),
                     "fill");
    free(h);
    return ok;
}

static void case_free(struct bench_case *c)
{
    cudaFree(c->kp);
    cudaFree(c->vp);
    cudaFree(c->qd);
    cudaFree(c->tdev);
    cudaFree(c->o);
    cudaFree(c->lse);
    free(c->table);
    free(c->qh);
    memset(c, 0, sizeof *c);
}

static int case_make(struct bench_case *c, uint64_t seed)
{
    c->es = burst_dtype_size(c->dt);
    c->nblocks = (c->n + c->bl - 1) / c->bl;
    const size_t pool = (size_t)c->nblocks * c->bl * c->hkv * c->d * c->es;
    const size_t qb = (size_t)c->t * c->hq * c->d * c->es;
    c->table = malloc((size_t)c->nblocks * sizeof(int32_t));
    c->qh = malloc(qb);
    if (!c->table || !c->qh)
        return 0;
    for (long b = 0; b < c->nblocks; b++)
        c->table[b] = (int32_t)b;
    for (long b = c->nblocks - 1; b > 0; b--) {
        const long o = (long)((rnd(&seed) + 1.0) * 0.5 * (double)(b + 1)) % (b + 1);
        const int32_t x = c->table[b];
        c->table[b] = c->table[o];
        c->table[o] = x;
    }
    if (!cuda_ok(cudaMalloc(&c->kp, pool), "cudaMalloc K pool") ||
        !cuda_ok(cudaMalloc(&c->vp, pool), "cudaMalloc V pool") ||
        !cuda_ok(cudaMalloc(&c->qd, qb), "cudaMalloc q") ||
        !cuda_ok(cudaMalloc(&c->tdev, (size_t)c->nblocks * 4), "cudaMalloc table") ||
        !cuda_ok(cudaMalloc((void **)&c->o, (size_t)c->t * c->hq * c->d * 4), "cudaMalloc o") ||
        !cuda_ok(cudaMalloc((void **)&c->lse, (size_t)c->t * c->hq * 4), "cudaMalloc lse"))
        return 0;
    if (!fill_random(c->kp, pool, c->dt, seed + 1) || !fill_random(c->vp, pool, c->dt, seed + 2) ||
        !fill_random(c->qd, qb, c->dt, seed + 3) ||
        !cuda_ok(cudaMemcpy(c->qh, c->qd, qb, cudaMemcpyDeviceToHost), "q") ||
        !cuda_ok(cudaMemcpy(c->tdev, c->table, (size_t)c->nblocks * 4, cudaMemcpyHostToDevice),
                 "table"))
        return 0;
    c->q = burst_tensor_contiguous(c->qd, c->dt, 1, c->t, c->hq, c->d);
    return 1;
}

static struct burst_decode_args case_args(struct bench_case *c)
{
    struct burst_decode_args a = {.q = &c->q,
                                  .k_pool = c->kp,
                                  .v_pool = c->vp,
                                  .block_len = c->bl,
                                  .hkv = (int)c->hkv,
                                  .blocks = c->tdev,
                                  .blocks_host = c->table,
                                  .nkeys = c->n,
                                  .tail = c->n - c->t,
                                  .scale = (float)(1.0 / sqrt((double)c->d)),
                                  .o_acc = c->o,
                                  .lse_acc = c->lse};
    return a;
}

/* max |O - ref| / max |ref| over the rows of heads 0 and hq - 1 (fp64 on the host). */
static double check_case(struct bench_case *c)
{
    struct burst_decode_args a = case_args(c);
    const size_t no = (size_t)c->t * c->hq * c->d,
                 pool = (size_t)c->nblocks * c->bl * c->hkv * c->d;
    float *o = malloc(no * 4), *lse = malloc((size_t)c->t * c->hq * 4);
    unsigned char *kh = malloc(pool * c->es), *vh = malloc(pool * c->es);
    double *s = malloc((size_t)c->n * sizeof(double)), *ref = malloc((size_t)c->d * sizeof(double));
    double worst = INFINITY;
    if (!o || !lse || !kh || !vh || !s || !ref)
        goto out;
    for (size_t i = 0; i < (size_t)c->t * c->hq; i++)
        lse[i] = -INFINITY;
    if (!cuda_ok(cudaMemcpy(c->lse, lse, (size_t)c->t * c->hq * 4, cudaMemcpyHostToDevice),
                 "lse") ||
        c->ctx->ops->attn.decode_step(c->ctx->be, &a) != BURST_OK ||
        c->ctx->ops->stream.sync(c->ctx->be) != BURST_OK ||
        !cuda_ok(cudaMemcpy(o, c->o, no * 4, cudaMemcpyDeviceToHost), "o") ||
        !cuda_ok(cudaMemcpy(kh, c->kp, pool * c->es, cudaMemcpyDeviceToHost), "K") ||
        !cuda_ok(cudaMemcpy(vh, c->vp, pool * c->es, cudaMemcpyDeviceToHost), "V"))
        goto out;
    double err = 0, mag = 0;
    const long heads[2] = {0, c->hq - 1};
    for (long i = 0; i < c->t; i++)
        for (int hi = 0; hi < 2; hi++) {
            const long h = heads[hi], g = h / (c->hq / c->hkv), end = c->n - c->t + i + 1;
            double m = -INFINITY, sum = 0;
            for (long j = 0; j < end; j++) {
                const size_t kr = ((size_t)c->table[j / c->bl] * c->bl + j % c->bl) * c->hkv + g;
                double x = 0;
                for (long e = 0; e < c->d; e++)
                    x += bench_host_val(c->dt, c->qh, ((size_t)i * c->hq + h) * c->d + e) *
                         bench_host_val(c->dt, kh, kr * c->d + e);
                s[j] = x * a.scale;
                m = s[j] > m ? s[j] : m;
            }
            for (long e = 0; e < c->d; e++)
                ref[e] = 0;
            for (long j = 0; j < end; j++) {
                const size_t kr = ((size_t)c->table[j / c->bl] * c->bl + j % c->bl) * c->hkv + g;
                const double p = exp(s[j] - m);
                sum += p;
                for (long e = 0; e < c->d; e++)
                    ref[e] += p * bench_host_val(c->dt, vh, kr * c->d + e);
            }
            for (long e = 0; e < c->d; e++) {
                const double r = ref[e] / sum, x = o[((size_t)i * c->hq + h) * c->d + e];
                err = fabs(x - r) > err ? fabs(x - r) : err;
                mag = fabs(r) > mag ? fabs(r) : mag;
            }
        }
    worst = err / (mag > 0 ? mag : 1);
out:
    free(o), free(lse), free(kh), free(vh), free(s), free(ref);
    return worst;
}

/* Microseconds per step over iters steps after warmup ones; < 0 on failure. */
static double time_case(struct bench_case *c, int iters, int warmup)
{
    struct burst_decode_args a = case_args(c);
    const struct burst_backend_ops *ops = c->ctx->ops;
    cudaEvent_t e0, e1;
    if (!cuda_ok(cudaEventCreate(&e0), "event") || !cuda_ok(cudaEventCreate(&e1), "event"))
        return -1;
    burst_status_t st = BURST_OK;
    for (int r = 0; r < warmup && st == BURST_OK; r++)
        st = ops->attn.decode_step(c->ctx->be, &a);
    cudaEventRecord(e0, cudaStreamPerThread);
    for (int r = 0; r < iters && st == BURST_OK; r++)
        st = ops->attn.decode_step(c->ctx->be, &a);
    cudaEventRecord(e1, cudaStreamPerThread);
    float ms = 0;
    const int ok = st == BURST_OK && cuda_ok(cudaEventSynchronize(e1), "sync") &&
                   cuda_ok(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
    if (st != BURST_OK)
        fprintf(stderr, "burstbench_decode: decode_step: %s: %s\n", burst_status_str(st),
                burst_last_error());
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return ok ? 1e3 * ms / iters : -1;
}

static int usage(void)
{
    fprintf(stderr, "usage: burstbench_decode [--ctx N,...] [--t T,...] [--block-lens L,...] "
                    "[--hq H] [--hkv H] [--d D] [--dtype bf16|fp16|fp32] [--iters K] "
                    "[--warmup K] [--check-max N] [--csv FILE]\n");
    return 2;
}

int main(int argc, char **argv)
{
    long ctxs[BENCH_MAX_LIST] = {8192, 32768, 131072, 262144, 524288, 1048576},
         ts[BENCH_MAX_LIST] = {1, 4}, bls[BENCH_MAX_LIST] = {256, 16};
    int nctx = 6, nt = 2, nbl = 2, iters = 50, warmup = 5;
    long hq = 32, hkv = 8, d = 128, check_max = 131072;
    burst_dtype_t dt = BURST_DTYPE_BF16;
    const char *csv = NULL, *dts = "bf16";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return usage();
        i++;
        if (!strcmp(a, "--ctx"))
            nctx = bench_parse_list(v, ctxs);
        else if (!strcmp(a, "--t"))
            nt = bench_parse_list(v, ts);
        else if (!strcmp(a, "--block-lens"))
            nbl = bench_parse_list(v, bls);
        else if (!strcmp(a, "--hq"))
            hq = atol(v);
        else if (!strcmp(a, "--hkv"))
            hkv = atol(v);
        else if (!strcmp(a, "--d"))
            d = atol(v);
        else if (!strcmp(a, "--iters"))
            iters = atoi(v);
        else if (!strcmp(a, "--warmup"))
            warmup = atoi(v);
        else if (!strcmp(a, "--check-max"))
            check_max = atol(v);
        else if (!strcmp(a, "--csv"))
            csv = v;
        else if (!strcmp(a, "--dtype")) {
            dts = v;
            if (!strcmp(v, "bf16"))
                dt = BURST_DTYPE_BF16;
            else if (!strcmp(v, "fp16"))
                dt = BURST_DTYPE_FP16;
            else if (!strcmp(v, "fp32"))
                dt = BURST_DTYPE_FP32;
            else
                return usage();
        } else
            return usage();
    }
    if (nctx < 1 || nt < 1 || nbl < 1 || iters < 1 || warmup < 0 || hq < 1 || hkv < 1 || hq % hkv ||
        d < 8 || d > 256 || d % 8) {
        fprintf(stderr, "burstbench_decode: bad sizes (hq %ld, hkv %ld, d %ld, iters %d)\n", hq,
                hkv, d, iters);
        return usage();
    }
    struct burst_context_params cp = burst_context_params_default();
    cp.backend = "cuda";
    struct burst_context *ctx = NULL;
    if (burst_context_create(&cp, &ctx) != BURST_OK) {
        fprintf(stderr, "burstbench_decode: no cuda context: %s\n", burst_last_error());
        return 77;
    }
    const double peak = peak_gbps();
    FILE *out = csv ? fopen(csv, "w") : NULL;
    if (csv && !out) {
        perror(csv);
        burst_context_destroy(ctx);
        return 1;
    }
    if (out)
        fprintf(out, "impl,dtype,ctx,t,block_len,hq,hkv,d,us_per_step,gbps,pct_peak,peak_gbps,"
                     "max_err\n");
    printf("device copy bandwidth: %.0f GB/s\n", peak);
    printf("%-6s %-5s %8s %3s %5s %10s %8s %6s %9s\n", "impl", "dtype", "ctx", "t", "bl", "us/step",
           "GB/s", "%peak", "max_err");
    int bad = 0;
    const double bound = dt == BURST_DTYPE_BF16   ? 1.0 / 128
                         : dt == BURST_DTYPE_FP16 ? 1.0 / 1024
                                                  : 1e-4;
    for (int bi = 0; bi < nbl; bi++)
        for (int ti = 0; ti < nt; ti++)
            for (int ci = 0; ci < nctx; ci++) {
                struct bench_case c = {.ctx = ctx,
                                       .dt = dt,
                                       .n = ctxs[ci],
                                       .t = ts[ti],
                                       .bl = bls[bi],
                                       .hq = hq,
                                       .hkv = hkv,
                                       .d = d};
                if (c.n < c.t || c.bl < 1) {
                    fprintf(stderr, "burstbench_decode: skipping ctx %ld, t %ld, block_len %ld\n",
                            c.n, c.t, c.bl);
                    continue;
                }
                if (!case_make(&c, 0x5eed + (uint64_t)ci)) {
                    case_free(&c);
                    bad = 1;
                    continue;
                }
                const double err = c.n <= check_max ? check_case(&c) : NAN;
                const double us = time_case(&c, iters, warmup);
                const double bytes = 2.0 * (double)c.n * c.hkv * c.d * c.es;
                const double gbps = us > 0 ? bytes / (us * 1e-6) / 1e9 : 0;
                const int fail = us <= 0 || (!isnan(err) && !(err <= bound));
                bad |= fail;
                printf("%-6s %-5s %8ld %3ld %5ld %10.1f %8.0f %6.1f %9.2e%s\n", "burst", dts, c.n,
                       c.t, c.bl, us, gbps, peak > 0 ? 100 * gbps / peak : 0, err,
                       fail ? "  FAIL" : "");
                fflush(stdout);
                if (out)
                    fprintf(out, "burst,%s,%ld,%ld,%ld,%ld,%ld,%ld,%.3f,%.1f,%.2f,%.1f,%.3e\n", dts,
                            c.n, c.t, c.bl, c.hq, c.hkv, c.d, us, gbps,
                            peak > 0 ? 100 * gbps / peak : 0, peak, err);
                case_free(&c);
            }
    if (out)
        fclose(out);
    burst_context_destroy(ctx);
    return bad;
}
